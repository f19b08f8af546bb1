"""Kubeflow TFJob manifests from the shipped configs."""
import dataclasses
import os

import pytest
import yaml

from conftest import REPO_ROOT
from estimator_trainers.tools.cloud import configs
from estimator_trainers import registry
from estimator_trainers.tools.cloud import plan as plan_lib
from estimator_trainers.tools.cloud import tfjob
from estimator_trainers.errors import UserInputError

IMAGE = 'us-central1-docker.pkg.dev/my-project/trainers/estimator-trainers:gpu'
JOB_DIR = 'gs://b/jobs/train_taxi_20260101_120000'


def _submission(config_name, model='taxi', image_uri=IMAGE):
    config = configs.load_config(os.path.join(REPO_ROOT, 'configs', config_name))
    trainer = registry.get(model)
    defaults = ['%s=%s' % item for item in trainer.cloud_data_args('gs://b')]
    return plan_lib.JobPlan(
        name='train_%s_20260101_120000' % model, program=plan_lib.Trainer(trainer),
        config=config, region='us-central1', job_dir=JOB_DIR,
        args=tuple(defaults + list(config.args)),
        images={plan_lib.CHIEF: image_uri} if image_uri else {})


@pytest.mark.parametrize('name,replicas', [
    ('cmle_config.yaml', {'Chief': 1, 'Worker': 1, 'PS': 1}),
    ('cmle_config_gpu.yaml', {'Chief': 1, 'Worker': 2, 'PS': 1}),
    ('config_ps.yaml', {'Chief': 1, 'Worker': 4, 'PS': 1}),
    ('config_mwms.yaml', {'Chief': 1, 'Worker': 2}),
])
def test_manifest_parses_with_the_right_replicas(name, replicas):
    manifest = yaml.safe_load(tfjob.render(_submission(name)))
    assert manifest['apiVersion'] == 'kubeflow.org/v1'
    assert manifest['kind'] == 'TFJob'
    assert manifest['metadata'] == {'name': 'train-taxi-20260101-120000'}
    assert manifest['spec']['runPolicy'] == {'cleanPodPolicy': 'Running'}
    specs = manifest['spec']['tfReplicaSpecs']
    assert {kind: spec['replicas'] for kind, spec in specs.items()} == replicas
    for spec in specs.values():
        assert spec['restartPolicy'] == 'OnFailure'
        container, = spec['template']['spec']['containers']
        assert container['name'] == 'tensorflow'
        assert container['image'] == IMAGE
        assert container['command'] == ['python', '-m', 'taxi_estimator.task']
        assert container['ports'] == [{'name': 'tfjob-port', 'containerPort': 2222}]
        assert container['args'][-1] == '--job-dir=' + JOB_DIR
        assert container['args'][0].startswith('--train-files=gs://cloud-samples-data/')


def test_gpus_become_limits_and_evaluators_replicas():
    manifest = tfjob.manifest(_submission('cmle_config_gpu.yaml', model='cifar10'))
    specs = manifest['spec']['tfReplicaSpecs']
    limits = {kind: spec['template']['spec']['containers'][0].get('resources')
              for kind, spec in specs.items()}
    assert limits == {'Chief': {'limits': {'nvidia.com/gpu': 4}},
                      'Worker': {'limits': {'nvidia.com/gpu': 4}}, 'PS': None}

    sub = _submission('config_ps.yaml')
    config = configs.parse_config({'trainingInput': {
        'scaleTier': 'CUSTOM', 'masterType': 'n1-standard-4', 'workerType': 'n1-standard-4',
        'workerCount': 2, 'evaluatorType': 'n1-standard-4', 'evaluatorCount': 1}}, 'cfg')
    manifest = tfjob.manifest(dataclasses.replace(sub, config=config))
    assert {k: s['replicas'] for k, s in manifest['spec']['tfReplicaSpecs'].items()} == {
        'Chief': 1, 'Worker': 2, 'Evaluator': 1}


def test_mwms_args_reach_every_replica():
    manifest = tfjob.manifest(_submission('config_mwms.yaml'))
    for spec in manifest['spec']['tfReplicaSpecs'].values():
        assert '--distribution-strategy=multi_worker_mirrored' in \
            spec['template']['spec']['containers'][0]['args']


def test_manifest_needs_an_image_and_no_tuning():
    with pytest.raises(UserInputError, match='^--target tfjob needs --image-uri'):
        tfjob.manifest(_submission('config_ps.yaml', image_uri=None))
    with pytest.raises(UserInputError, match='hyperparameter tuning runs on Vertex AI only'):
        tfjob.manifest(_submission('hptuning_config.yaml', model='cifar10'))


def test_k8s_names():
    assert tfjob.k8s_name('train_cifar10_20260101_120000') == 'train-cifar10-20260101-120000'
    assert len(tfjob.k8s_name('A' * 128)) == 63
