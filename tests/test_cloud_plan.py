"""The typed plan: what `configs` parses once, and the plans no front can make."""
import dataclasses
import typing

import pytest

from estimator_trainers import cluster
from estimator_trainers import registry
from estimator_trainers.tools.cloud import ai_platform
from estimator_trainers.tools.cloud import configs
from estimator_trainers.tools.cloud import plan as plan_lib
from estimator_trainers.tools.cloud import roles

IMAGE = 'us-docker.pkg.dev/p/r/trainer:1'
CONTAINER = plan_lib.Container(commands={roles.CHIEF: ('python', 'task.py')})


def _config(**training_input):
    return configs.parse_config({'trainingInput': dict({'scaleTier': 'BASIC'},
                                                       **training_input)}, 'cfg.yaml')


def _plan(**fields):
    given = dict(name='job_1', program=plan_lib.Trainer(registry.get('taxi')),
                 config=_config(), job_dir='gs://bucket/job', staging='gs://bucket/staging')
    given.update(fields)
    return plan_lib.JobPlan(**given)


def test_the_role_names_are_the_clusters():
    assert typing.get_args(roles.RoleName) == tuple(cluster.POOL_ORDER) == roles.NAMES
    assert [role.name for role in roles.ROLES] == list(roles.NAMES)


def test_the_config_is_parsed_once_into_typed_values():
    config = configs.parse_config({'trainingInput': {
        'scaleTier': 'CUSTOM', 'masterType': 'n1-standard-4', 'workerType': 'n1-standard-4',
        'workerCount': '2', 'region': 'europe-west4', 'runtimeVersion': '1.15',
        'scheduling': {'maxRunningTime': '3600s', 'strategy': 'SPOT'},
        'hyperparameters': {'goal': 'MINIMIZE', 'hyperparameterMetricTag': 'loss',
                            'params': [{'parameterName': 'layers', 'type': 'INTEGER',
                                        'minValue': 1.0, 'maxValue': 3}]}}}, 'cfg.yaml')
    assert [(pool.role, pool.replica_count) for pool in config.pools] == [
        (roles.role(roles.CHIEF), 1), (roles.role(roles.WORKER), 2)]
    assert config.pool(roles.PS) is None
    assert (config.region, config.runtime_version) == ('europe-west4', '1.15')
    assert config.scheduling == configs.Scheduling(timeout='3600s', strategy='SPOT')
    assert config.scheduling.timeout_secs == 3600.0
    assert config.hyperparameters == configs.Hyperparameters(
        metric_tag='loss', goal='MINIMIZE', params=(configs.Parameter(
            'layers', 'INTEGER', min_value=1.0, max_value=3),))
    assert config.hyperparameters.params[0].samples() == (1, 3)
    assert not hasattr(config, 'training_input')


@pytest.mark.parametrize('fields, problem', [
    (dict(name='1st_job'), 'not a job name'),
    (dict(images={roles.WORKER: IMAGE}), 'an image for a pool it does not have'),
    (dict(executor_image=IMAGE), 'an executor image no pool runs'),
    (dict(primary='ps'), "pool 0 named 'ps'"),
    (dict(job_dir='/tmp/job'), 'a job-dir, staging or package URI not on Cloud Storage'),
    (dict(package_uris=('dist/p.tar.gz',)), 'not on Cloud Storage'),
    (dict(staging=None), 'something to stage'),
    (dict(program=plan_lib.Package('trainer.task', package_path='trainer'),
          images={roles.CHIEF: IMAGE}, staging=None), 'a package to stage and no staging'),
    (dict(tensorboard='tb-1'), "a TensorBoard 'tb-1'"),
    (dict(program=CONTAINER), 'a container of its own with no image for pool 0'),
    (dict(program=plan_lib.Container(commands={roles.EVALUATOR: ('run',)}),
          images={roles.CHIEF: IMAGE}), 'a command for a pool it does not have'),
])
def test_a_plan_no_front_makes_cannot_be_built(fields, problem):
    _plan()  # the plan a front makes
    _plan(program=CONTAINER, images={roles.CHIEF: IMAGE}, staging=None)
    with pytest.raises(ValueError, match='job plan .*%s' % problem):
        _plan(**fields)
    with pytest.raises(ValueError, match=problem):
        dataclasses.replace(_plan(), **fields)


def test_a_config_no_parse_makes_cannot_be_built():
    chief, worker = (configs.Pool(roles.role(name), 1, 'n1-standard-4')
                     for name in (roles.CHIEF, roles.WORKER))
    configs.TrainingConfig('cfg.yaml', pools=(chief, worker))
    for pools in ((), (worker,), (worker, chief), (chief, chief),
                  (dataclasses.replace(chief, replica_count=0),)):
        with pytest.raises(ValueError, match='the pools are a chief, then'):
            configs.TrainingConfig('cfg.yaml', pools=pools)
    with pytest.raises(ValueError, match='maxWaitDuration without strategy FLEX_START'):
        configs.Scheduling(max_wait_duration='60s', strategy='SPOT')
    param = configs.Parameter('lr', 'DOUBLE', min_value=0.1, max_value=1.0)
    for study in (dict(metric_tag=''), dict(params=()), dict(params=(param, param)),
                  dict(max_trials=2, max_parallel_trials=3)):
        with pytest.raises(ValueError, match='a study needs a metric'):
            configs.Hyperparameters(**dict(dict(metric_tag='loss', goal='MINIMIZE',
                                                params=(param,)), **study))
    with pytest.raises(ValueError, match='the values of a CATEGORICAL parameter'):
        configs.Parameter('lr', 'CATEGORICAL', min_value=0.1, max_value=1.0)


def test_an_image_for_a_pool_the_job_has_not_is_left_out_as_on_ai_platform():
    """gcloud ran no worker pool without workers; its image named nothing."""
    args = ai_platform.build_parser().parse_args([
        'jobs', 'submit', 'training', 'job_1', '--region', 'us-central1',
        '--master-image-uri', IMAGE, '--worker-image-uri', IMAGE + '-worker'])
    plan = ai_platform.training_plan(args, None, {})
    assert dict(plan.images) == {roles.CHIEF: IMAGE}
