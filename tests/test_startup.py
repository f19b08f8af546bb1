"""`startup.decide`: a task's start-up decisions without TensorFlow, as the runner
and the cloud checks make them, on the TF_CONFIGs the cloud gives."""
import json

import pytest

from estimator_trainers import registry
from estimator_trainers import startup
from estimator_trainers.errors import UserInputError

CIFAR10 = registry.get('cifar10')


def _decide(tf_config, *flags, gpus=0):
    environ = {'TF_CONFIG': json.dumps(tf_config)} if tf_config else {}
    args = CIFAR10.parse_args(['--data-dir=gs://b/data', '--job-dir=gs://b/job'] + list(flags))
    return startup.decide(CIFAR10, args, environ,
                          visible_gpus=gpus)


# AI Platform runtime 1.15's TF_CONFIG of HW3's cmle_config.yaml: a master and a worker.
MASTER_AND_WORKER = {'cluster': {'master': ['m:2222'], 'worker': ['w:2222']},
                     'environment': 'cloud'}


@pytest.mark.parametrize('task, role', [({'type': 'master', 'index': 0}, 'chief'),
                                        ({'type': 'worker', 'index': 0}, 'worker')])
def test_a_master_trains_as_the_chief_under_multi_worker_mirrored(task, role):
    decided = _decide(dict(MASTER_AND_WORKER, task=task))
    assert decided.distribution.strategy == 'multi_worker_mirrored'
    assert decided.cluster.cluster == {'chief': ['m:2222'], 'worker': ['w:2222']}
    assert decided.cluster.task_type == role
    assert decided.cluster.to_tf_config()['cluster'] == {'chief': ['m:2222'],
                                                         'worker': ['w:2222']}
    assert decided.notes == ("TF_CONFIG names the first task 'master' (AI Platform's name "
                             "before runtime 2.1): multi_worker_mirrored trains it as the "
                             "'chief', synchronously with the workers",)


def test_a_master_with_parameter_servers_keeps_its_name():
    config = {'cluster': {'master': ['m:1'], 'worker': ['w:1'], 'ps': ['p:1']},
              'task': {'type': 'master', 'index': 0}}
    decided = _decide(config)
    assert (decided.distribution.strategy, decided.cluster.task_type) == (
        'parameter_server', 'master')
    assert decided.notes == ()


def test_mirrored_runs_on_a_one_replica_vertex_job():
    """Vertex AI gives a one-machine job a TF_CONFIG naming just its chief."""
    config = {'cluster': {'chief': ['workerpool0-0:2222']}, 'environment': 'cloud',
              'task': {'type': 'chief', 'index': 0}}
    decided = _decide(config, '--distribution-strategy=mirrored', gpus=4)
    assert decided.distribution.strategy == 'mirrored'
    assert decided.devices == ('/gpu:0', '/gpu:1', '/gpu:2', '/gpu:3')
    assert not decided.cluster.is_distributed


def test_mirrored_with_workers_is_refused():
    config = {'cluster': {'chief': ['c:1'], 'worker': ['w:1']},
              'task': {'type': 'worker', 'index': 0}}
    with pytest.raises(UserInputError, match='mirrored runs in one process'):
        _decide(config, '--distribution-strategy=mirrored')


def test_more_gpus_than_the_machine_has_are_refused():
    with pytest.raises(UserInputError, match=r'^--num-gpus=2 but this machine has 1 GPU\(s\)$'):
        _decide(None, '--num-gpus=2', gpus=1)


def test_a_parameter_server_claims_no_gpus():
    config = {'cluster': {'chief': ['c:1'], 'ps': ['p:1']}, 'task': {'type': 'ps', 'index': 0}}
    decided = _decide(config, '--num-gpus=2', gpus=2)
    assert (decided.num_gpus, decided.devices) == (0, ('/cpu:0',))
