"""TF_CONFIG / CLUSTER_SPEC shapes parsed into role, chief-ness and worker count."""
import json

import pytest

import taxi_trips
from conftest import one_error_line, run_module
from estimator_trainers import cluster as cluster_lib
from estimator_trainers.errors import UserInputError

PS = ['ps0:2222', 'ps1:2222']
WORKERS = ['w0:2222', 'w1:2222']


def _load(config):
    return cluster_lib.load_cluster({'TF_CONFIG': json.dumps(config)})


def _facts(info):
    return (info.task_type, info.task_index, info.is_chief, info.num_workers, info.num_ps)


def test_no_tf_config_is_a_single_chief_process():
    info = cluster_lib.load_cluster({})
    assert not info.is_distributed
    assert (info.is_chief, info.num_workers, info.task_label) == (True, 1, 'local')
    assert info.to_tf_config() is None


@pytest.mark.parametrize('config', [{}, {'cluster': {}, 'task': {'type': 'master', 'index': 0}}])
def test_empty_cluster_is_a_single_process(config):
    assert not _load(config).is_distributed


@pytest.mark.parametrize('task_type, does', [
    ('evaluator', 'an evaluator only evaluates the checkpoints a training cluster writes'),
    ('PS', 'a parameter server only serves the variables of a training cluster'),
])
def test_task_that_never_trains_without_a_cluster_is_refused(task_type, does):
    with pytest.raises(UserInputError) as raised:
        _load({'cluster': {}, 'task': {'type': task_type, 'index': 0}})
    assert str(raised.value) == (
        'TF_CONFIG: task.type %r with an empty "cluster": %s and never trains; give the '
        'cluster, or unset TF_CONFIG to train in one process' % (task_type.lower(), does))


AI_PLATFORM = {
    'cluster': {'master': ['m:2222'], 'worker': WORKERS, 'ps': PS},
    'environment': 'cloud',
    'job': {'scale_tier': 'CUSTOM', 'master_type': 'n1-standard-8', 'worker_count': '2',
            'args': ['--train-steps', '100']},
}


@pytest.mark.parametrize('task, expected', [
    ({'type': 'master', 'index': 0, 'trial': '3'}, ('master', 0, True, 3, 2)),
    ({'type': 'worker', 'index': 1, 'trial': '3'}, ('worker', 1, False, 3, 2)),
    ({'type': 'ps', 'index': 1}, ('ps', 1, False, 3, 2)),
])
def test_ai_platform_master_cluster(task, expected):
    info = _load(dict(AI_PLATFORM, task=task))
    assert _facts(info) == expected
    assert info.environment == 'cloud'
    exported = info.to_tf_config()
    assert exported['cluster'] == AI_PLATFORM['cluster']
    assert exported['task'] == {'type': task['type'], 'index': task['index']}


def test_ai_platform_evaluator_beside_master_exports_chief():
    """RunConfig refuses an evaluator next to `master`, so it is exported as chief."""
    info = _load(dict(AI_PLATFORM, task={'type': 'evaluator', 'index': 0}))
    assert (info.is_evaluator, info.is_chief) == (True, False)
    assert info.cluster['master'] == ['m:2222']
    exported = info.to_tf_config()['cluster']
    assert exported['chief'] == ['m:2222'] and 'master' not in exported


VERTEX = {'cluster': {'chief': ['c:2222'], 'worker': WORKERS, 'ps': PS},
          'environment': 'cloud'}


@pytest.mark.parametrize('task, expected', [
    ({'type': 'chief', 'index': 0}, ('chief', 0, True, 3, 2)),
    ({'type': 'worker', 'index': 0}, ('worker', 0, False, 3, 2)),
    ({'type': 'worker', 'index': 1}, ('worker', 1, False, 3, 2)),
    ({'type': 'ps', 'index': 0}, ('ps', 0, False, 3, 2)),
    ({'type': 'evaluator', 'index': 0}, ('evaluator', 0, False, 3, 2)),
])
def test_vertex_chief_cluster_with_evaluator_outside(task, expected):
    info = _load(dict(VERTEX, task=task))
    assert _facts(info) == expected
    assert info.to_tf_config()['cluster'] == VERTEX['cluster']


def test_evaluator_listed_in_cluster_is_dropped_from_it():
    config = {'cluster': dict(VERTEX['cluster'], evaluator=['e:2222']),
              'task': {'type': 'evaluator', 'index': 0}}
    info = _load(config)
    assert 'evaluator' not in info.cluster and info.is_evaluator


@pytest.mark.parametrize('pool, expected', [
    ('workerpool0', ('chief', 0, True, 2, 1)),
    ('workerpool1', ('worker', 0, False, 2, 1)),
    ('workerpool2', ('ps', 0, False, 2, 1)),
    ('workerpool3', ('evaluator', 0, False, 2, 1)),
])
def test_vertex_cluster_spec_without_tf_config(pool, expected):
    spec = {'cluster': {'workerpool0': ['c:2222'], 'workerpool1': ['w0:2222'],
                        'workerpool2': ['p0:2222'], 'workerpool3': ['e0:2222']},
            'environment': 'cloud', 'task': {'type': pool, 'index': 0, 'trial': ''},
            'job': '{"python_module": "trainer.task"}'}
    info = cluster_lib.load_cluster({'CLUSTER_SPEC': json.dumps(spec)})
    assert _facts(info) == expected
    assert info.to_tf_config()['cluster'] == {
        'chief': ['c:2222'], 'worker': ['w0:2222'], 'ps': ['p0:2222']}


def test_tf_config_wins_over_cluster_spec():
    environ = {'TF_CONFIG': json.dumps(dict(VERTEX, task={'type': 'ps', 'index': 1})),
               'CLUSTER_SPEC': '{"cluster": {}}'}
    assert cluster_lib.load_cluster(environ).task_label == 'ps-1'


def test_kubeflow_upper_case_keys_are_lowercased():
    config = {'cluster': {'Chief': ['c:2222'], 'Worker': WORKERS, 'PS': PS},
              'task': {'type': 'Worker', 'index': 1}}
    info = _load(config)
    assert _facts(info) == ('worker', 1, False, 3, 2)
    assert set(info.to_tf_config()['cluster']) == {'chief', 'worker', 'ps'}


@pytest.mark.parametrize('index, expected', [
    (0, ('chief', 0, True, 2, 1)),
    (1, ('worker', 0, False, 2, 1)),
])
def test_kubeflow_workers_only_promote_worker_zero_to_chief(index, expected):
    config = {'cluster': {'worker': WORKERS, 'ps': ['p:2222']},
              'task': {'type': 'worker', 'index': index}}
    info = _load(config)
    assert _facts(info) == expected
    assert info.cluster == {'chief': ['w0:2222'], 'worker': ['w1:2222'], 'ps': ['p:2222']}


@pytest.mark.parametrize('config', [
    {'cluster': {'worker': ['w0:2222']}, 'task': {'type': 'worker', 'index': 0}},
    # Vertex AI's TF_CONFIG of a one-replica job: just its chief.
    {'cluster': {'chief': ['cmle-training-workerpool0-ab-0:2222']},
     'task': {'type': 'chief', 'index': 0}, 'environment': 'cloud'},
    {'cluster': {'master': ['m:2222']}, 'task': {'type': 'master', 'index': 0}},
])
def test_a_cluster_of_one_training_task_is_a_single_process(config):
    info = _load(config)
    assert not info.is_distributed
    assert (info.is_chief, info.num_workers, info.task_label) == (True, 1, 'local')
    assert info.to_tf_config() is None


def test_the_evaluator_of_a_one_replica_job_still_evaluates():
    info = _load({'cluster': {'chief': ['c:2222'], 'evaluator': ['e:2222']},
                  'task': {'type': 'evaluator', 'index': 0}})
    assert info.is_evaluator and info.cluster == {'chief': ['c:2222']}
    chief = _load({'cluster': {'chief': ['c:2222'], 'evaluator': ['e:2222']},
                   'task': {'type': 'chief', 'index': 0}})
    assert not chief.is_distributed and chief.num_evaluators == 1


def test_export_tf_config_round_trips_into_the_environment():
    environ = {}
    info = _load(dict(VERTEX, task={'type': 'worker', 'index': 1}))
    cluster_lib.export_tf_config(info, environ)
    assert cluster_lib.load_cluster(environ) == info
    # The launcher's (and AI Platform's) evaluator count survives the export.
    counted = _load(dict(VERTEX, task={'type': 'chief', 'index': 0},
                         job={'evaluatorCount': 1}))
    cluster_lib.export_tf_config(counted, environ)
    assert cluster_lib.load_cluster(environ).num_evaluators == 1
    cluster_lib.export_tf_config(cluster_lib.ClusterInfo(cluster={}), environ)
    assert 'TF_CONFIG' not in environ


def test_addresses_and_label():
    info = _load(dict(VERTEX, task={'type': 'worker', 'index': 1}))
    assert info.addresses('ps') == tuple(PS)
    assert info.addresses('evaluator') == ()
    assert info.task_label == 'worker-1'


@pytest.mark.parametrize('text, message', [
    ('{"cluster": ', 'TF_CONFIG: not valid JSON'),
    ('[1, 2]', 'TF_CONFIG: expected a JSON object, got list'),
    (json.dumps(dict(VERTEX, task={'type': 'trainer', 'index': 0})),
     "unknown task.type 'trainer'"),
    (json.dumps({'cluster': {'chief': ['c:1'], 'gpu': ['g:1']},
                 'task': {'type': 'chief', 'index': 0}}),
     "unknown task type 'gpu' in \"cluster\""),
    (json.dumps(dict(VERTEX, task={'type': 'worker', 'index': 2})),
     "task.index 2 is out of range for 'worker' (2 tasks)"),
    (json.dumps(dict(VERTEX, task={'type': 'worker', 'index': -1})),
     'task.index -1 is out of range'),
    (json.dumps(dict(VERTEX, task={'type': 'worker', 'index': 'one'})),
     'task.index must be an integer'),
    # An infinite index was an OverflowError traceback; true and 1.5 were read as 1.
    (json.dumps(VERTEX)[:-1] + ', "task": {"type": "worker", "index": 1e400}}',
     'task.index must be an integer, got inf'),
    (json.dumps(dict(VERTEX, task={'type': 'worker', 'index': True})),
     'task.index must be an integer, got True'),
    (json.dumps(dict(VERTEX, task={'type': 'worker', 'index': 1.5})),
     'task.index must be an integer, got 1.5'),
    (json.dumps({'cluster': {'chief': ['c:1']}, 'task': {'type': 'chief'}})[:-1]
     + ', "job": {"evaluatorCount": 1e400}}',
     'job.evaluatorCount must be an integer >= 0, got inf'),
    (json.dumps({'cluster': {'chief': ['c:1'], 'master': ['m:1']},
                 'task': {'type': 'chief', 'index': 0}}),
     'both "chief" and "master"'),
    (json.dumps({'cluster': {'chief': ['c:1', 'c2:1']}, 'task': {'type': 'chief'}}),
     'cluster.chief must have exactly one address'),
    (json.dumps({'cluster': {'chief': 'c:1'}, 'task': {'type': 'chief'}}),
     'cluster.chief must be a non-empty list of "host:port" strings'),
    (json.dumps({'cluster': {'ps': ['p:1']}, 'task': {'type': 'ps'}}),
     'cluster needs a "chief", "master" or "worker" task'),
    (json.dumps({'cluster': {'chief': ['c:1']}, 'task': {'type': 'ps'}}),
     "task.type 'ps' has no entry in \"cluster\""),
])
def test_malformed_tf_config_is_one_clear_error(text, message):
    with pytest.raises(UserInputError) as raised:
        cluster_lib.load_cluster({'TF_CONFIG': text})
    text = str(raised.value)
    assert message in text and '\n' not in text


@pytest.mark.parametrize('address, problem', [
    ('ps0:99999', 'the port must be a number from 1 to 65535'),
    ('ps0:0', 'the port must be a number from 1 to 65535'),
    ('ps0:-1', 'the port must be a number from 1 to 65535'),
    ('ps0: 2222', 'the port must be a number from 1 to 65535'),
    ('ps0:22x', 'the port must be a number from 1 to 65535'),
    (':2222', 'the host must be a name (letters, digits, - and _, dot-separated) or an '
              'IP address'),
    ('ps 0:2222', 'the host must be a name (letters, digits, - and _, dot-separated) or an '
                  'IP address'),
    ('ps0..svc:2222', 'the host must be a name (letters, digits, - and _, dot-separated) '
                      'or an IP address'),
    ('10.0.0.300:2222', 'not an IPv4 address (four numbers from 0 to 255)'),
    ('::1:2222', 'an IPv6 address goes in brackets: [::1]:2222'),
    ('[::g]:2222', 'not an IPv6 address in brackets'),
])
def test_an_address_out_of_range_is_the_users_error(address, problem):
    """A typo is exit 2 at once, not a wait and the retryable "cannot reach" (203)."""
    config = {'cluster': {'chief': ['c:1'], 'ps': ['p:1', address]},
              'task': {'type': 'chief', 'index': 0}}
    with pytest.raises(UserInputError) as raised:
        cluster_lib.load_cluster({'TF_CONFIG': json.dumps(config)})
    assert str(raised.value) == 'TF_CONFIG: cluster.ps[1] %r: %s' % (address, problem)


@pytest.mark.parametrize('address', [
    'workerpool0-0:2222', 'job-chief-0-0.job:2222', 'chief-0.default.svc.cluster.local.:2222',
    'my_host:1', '10.0.0.255:65535', '[::1]:2222', '[fe80::1%eth0]:2222'])
def test_addresses_of_every_target_are_taken(address):
    config = {'cluster': {'chief': [address]}, 'task': {'type': 'evaluator', 'index': 0}}
    assert cluster_lib.load_cluster({'TF_CONFIG': json.dumps(config)}).cluster == {
        'chief': [address]}


@pytest.mark.parametrize('cluster, task, message', [
    ({'chief': ['127.0.0.1:2222'], 'worker': ['127.0.0.1:2222']}, 'chief',
     'chief-0 and worker-0 have the same address 127.0.0.1:2222; each task needs a '
     'host:port of its own'),
    ({'chief': ['h:1'], 'worker': ['h:2', 'h:3'], 'ps': ['h:3']}, 'worker',
     'ps-0 and worker-1 have the same address h:3; each task needs a host:port of its own'),
    # Not `cannot reach ps-0` after --peer-timeout-secs with exit 203: controllers
    # retried the typo (a well-formed address nobody answers keeps 203: test_shutdown).
    ({'chief': ['127.0.0.1:2222'], 'ps': ['127.0.0.1:99999']}, 'chief',
     "cluster.ps[0] '127.0.0.1:99999': the port must be a number from 1 to 65535"),
], ids=['chief-and-worker', 'ps-and-worker', 'port-99999'])
def test_a_tf_config_typo_ends_the_trainer_at_start_up(tmp_path, cluster, task, message):
    """A second task at one address could not listen there: the chief waited ~8 s and
    asked "did one of them die?". The trainer's start-up names it, exit 2, nothing
    written, before any wait for a peer."""
    train, evals = taxi_trips.write_layout_files(tmp_path, train_rows=100, eval_rows=20)
    config = {'cluster': cluster, 'task': {'type': task, 'index': 0}}
    proc = run_module('taxi_estimator.task', '--train-files', train, '--eval-files', evals,
                      '--job-dir', tmp_path / 'job', env={'TF_CONFIG': json.dumps(config)},
                      timeout=300)
    one_error_line(proc, 'TF_CONFIG: ' + message)
    assert not (tmp_path / 'job').exists()


def test_an_evaluator_beside_the_master_at_its_address_is_named():
    config = {'cluster': {'master': ['h:1'], 'evaluator': ['h:1']},
              'task': {'type': 'evaluator', 'index': 0}}
    with pytest.raises(UserInputError, match='^TF_CONFIG: evaluator-0 and master-0 have the '
                       'same address h:1; each task needs a host:port of its own$'):
        cluster_lib.load_cluster({'TF_CONFIG': json.dumps(config)})


def test_unknown_vertex_pool_is_an_error():
    spec = {'cluster': {'workerpool7': ['x:1']}, 'task': {'type': 'workerpool7'}}
    with pytest.raises(UserInputError, match="unknown worker pool 'workerpool7'"):
        cluster_lib.load_cluster({'CLUSTER_SPEC': json.dumps(spec)})


def test_input_seed_differs_per_training_task():
    config = {'cluster': {'chief': ['h:1'], 'worker': ['h:2', 'h:3'], 'ps': ['h:4']}}
    seeds = [cluster_lib.parse_tf_config(json.dumps(dict(config, task=task))).input_seed(7)
             for task in ({'type': 'chief', 'index': 0}, {'type': 'worker', 'index': 0},
                          {'type': 'worker', 'index': 1})]
    assert seeds == [7, 8, 9]
    assert cluster_lib.ClusterInfo(cluster={}).input_seed(7) == 7
    assert cluster_lib.ClusterInfo(cluster={}).input_seed(None) is None


@pytest.mark.parametrize('config,expected', [
    ({'cluster': {'chief': ['h:1'], 'ps': ['h:2']}, 'task': {'type': 'chief'}}, 0),
    ({'cluster': {'chief': ['h:1'], 'evaluator': ['h:3']}, 'task': {'type': 'chief'}}, 1),
    ({'cluster': {'chief': ['h:1']}, 'task': {'type': 'chief'},
      'job': {'evaluatorCount': '2'}}, 2),
])
def test_the_chief_knows_whether_the_job_has_evaluators(config, expected):
    """An evaluator list, or AI Platform's (and the local launcher's) job.evaluatorCount."""
    info = cluster_lib.parse_tf_config(json.dumps(config))
    assert info.is_chief and info.num_evaluators == expected


def test_vertex_pool_three_counts_as_evaluators():
    info = cluster_lib.parse_vertex_cluster_spec(json.dumps({
        'cluster': {'workerpool0': ['h:1'], 'workerpool3': ['h:4', 'h:5']},
        'task': {'type': 'workerpool0', 'index': 0}}))
    assert info.num_evaluators == 2


def test_bad_evaluator_count_is_one_clear_error():
    with pytest.raises(UserInputError, match='job.evaluatorCount must be an integer'):
        cluster_lib.parse_tf_config(json.dumps({
            'cluster': {'chief': ['h:1']}, 'task': {'type': 'chief'},
            'job': {'evaluatorCount': 'many'}}))
