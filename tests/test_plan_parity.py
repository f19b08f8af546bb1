"""One plan for one job, whichever front: `train-cloud.sh` and `ai-platform.sh` agree.

Every shipped config (configs/*.yaml) and the seeds' lines (HW3's script with
its cmle_config.yaml, with and without the tuning config; seed 001's custom
container under multi_worker_mirrored; the taxi sample's STANDARD_1 line with
its flags; seed 000's one-machine MNIST job) is written in both fronts' words:
`train-cloud.sh MODEL --config ...` and the gcloud line `ai-platform.sh jobs
submit training ... --package-path <trainer> --module-name <module>`. Both
plans are made by the fronts' own functions, every replica's start-up is
checked (`preflight.check_replicas`), and the rendered Vertex AI bodies must
run the same thing: pools (replicas, machines, GPUs, disks), images, the
module and the flags the trainer gets, the per-trial directory and the
tuning study and metric.

What differs by design is left out of the comparison: how the module reaches
the image (`python -m MODULE` in this project's image, or the staged package
run by `bootstrap`), where the package is staged, and TF_CONFIG's name of
pool 0 under `--runtime-version 1.x` (`bootstrap --tf-config-primary`). A
gcloud line's user args replace the config's `args` (gcloud's rule) where
`train-cloud.sh` adds its trainer flags to them, so the gcloud lines repeat
the config's args, as a gcloud user had to.
"""
import pytest

import cloud_fakes
from conftest import REPO_ROOT
from estimator_trainers import flags
from estimator_trainers.tools.cloud import ai_platform
from estimator_trainers.tools.cloud import configs
from estimator_trainers.tools.cloud import jobs
from estimator_trainers.tools.cloud import plan as plan_lib
from estimator_trainers.tools.cloud import preflight
from estimator_trainers.tools.cloud import train_cloud

IMAGE = 'us-central1-docker.pkg.dev/my-project/estimator-trainers/estimator-trainers:abc'
CUSTOM_IMAGE = 'us-central1-docker.pkg.dev/my-project/trainers/keras:1'
STAGED = 'gs://my-bucket/staging/job_1/0123/package-0.1.tar.gz'
MODULES = {'cifar10': ('cifar10_estimator', 'cifar10_estimator.cifar10_main'),
           'taxi': ('taxi_estimator', 'taxi_estimator.task'),
           'keras': ('keras_estimator', 'keras_estimator.trainer')}
DATA = {'cifar10': ['--data-dir=gs://my-bucket/cifar10', '--train-steps=1000'],
        'taxi': ['--train-files=gs://my-bucket/taxi/train.csv',
                 '--eval-files=gs://my-bucket/taxi/eval.csv'],
        'keras': ['--data-dir=gs://my-bucket/mnist']}
HW3_DATA = ['--data-dir=gs://4121-data/cifar-10-data', '--num-gpus=0', '--train-steps=1000']
# HW3's train-cloud.sh, as its shell expands it: MY_BUCKET="gs://4121-data/".
HW3_LINE = ['cifar_hw3', '--runtime-version', '1.15', '--python-version', '3.7',
            '--job-dir=gs://4121-data//model_dirs/cifar_hw3', '--package-path',
            'cifar10_estimator/', '--module-name', 'cifar10_estimator.cifar10_main']
HW3_USER_ARGS = ['--data-dir=gs://4121-data//cifar-10-data', '--num-gpus=0',
                 '--train-steps=1000']
HW3_TRAIN_CLOUD = ['cifar10', '--job-name', 'cifar_hw3', '--bucket', 'gs://4121-data',
                   '--job-dir', 'gs://4121-data/model_dirs/cifar_hw3']
# Seed 001: the Keras MLP on CIFAR-10, all-reduce on a custom container.
SEED_001_LINE = ['keras_1', '--scale-tier=CUSTOM', '--master-machine-type=n1-standard-8',
                 '--master-image-uri=%s' % CUSTOM_IMAGE, '--worker-machine-type=n1-standard-8',
                 '--worker-count=2', '--use-chief-in-tf-config=true',
                 '--package-path=keras_estimator', '--module-name=keras_estimator.trainer',
                 '--job-dir=gs://my-bucket/keras_1']
SEED_001_CONFIG = """\
trainingInput:
  scaleTier: CUSTOM
  masterType: n1-standard-8
  workerType: n1-standard-8
  workerCount: 2
  useChiefInTfConfig: true
"""
SEED_001_ARGS = ['--model', 'cifar10_mlp', '--distribution-strategy=multi_worker_mirrored',
                 '--data-dir=gs://my-bucket/cifar10']
# The taxi sample's scripts/train-cloud.sh with its config.yaml (STANDARD_1: a
# master, 4 workers, 3 parameter servers) and its flags, word for word.
TAXI_SAMPLE_LINE = ['train_tensorflow_taxi', '--job-dir=gs://my-bucket/taxi/model',
                    '--runtime-version=1.15', '--python-version=3.7',
                    '--region=us-central1', '--module-name=taxi_estimator.task',
                    '--package-path=taxi_estimator']
TAXI_SAMPLE_CONFIG = 'trainingInput:\n  scaleTier: STANDARD_1\n'
TAXI_SAMPLE_ARGS = ['--train-files=gs://my-bucket/taxi/train.csv',
                    '--eval-files=gs://my-bucket/taxi/eval.csv', '--train-size=80000',
                    '--num-epochs=10', '--batch-size=128', '--learning-rate=0.001',
                    '--hidden-units=128,0,0', '--layer-sizes-scale-factor=0.5',
                    '--num-layers=3']
# Seed 000: MNIST on one machine (scale tier BASIC), a TensorFlow 2 runtime.
SEED_000_LINE = ['mnist_1', '--scale-tier=BASIC', '--runtime-version=2.1',
                 '--python-version=3.7', '--region=us-central1',
                 '--package-path=keras_estimator', '--module-name=keras_estimator.trainer',
                 '--job-dir=gs://my-bucket/mnist_1']
SEED_000_CONFIG = 'trainingInput:\n  scaleTier: BASIC\n'
SHIPPED = ['cmle_config.yaml', 'cmle_config_gpu.yaml', 'config_mwms.yaml', 'config_ps.yaml',
           'hptuning_config.yaml']
SHIPPED_MODELS = {'config_ps.yaml': 'taxi'}


@pytest.fixture(autouse=True)
def _no_environment(monkeypatch):
    for name in ('PROJECT_ID', 'CLOUDSDK_CORE_PROJECT', 'CLOUDSDK_AI_PLATFORM_REGION',
                 'CLOUDSDK_COMPUTE_REGION', 'REGION', 'BUCKET_NAME'):
        monkeypatch.delenv(name, raising=False)


def train_cloud_plan(argv):
    """The plan `train-cloud.sh ARGV` submits."""
    options, trainer_flags = flags.split_at_dashes(argv)
    args = train_cloud.build_parser().parse_args(['submit'] + options)
    return train_cloud.make_plan(args, trainer_flags or [], {})


def ai_platform_plan(argv):
    """The plan `ai-platform.sh jobs submit training ARGV` submits."""
    options, user_args = flags.split_at_dashes(argv)
    args = ai_platform.build_parser().parse_args(['jobs', 'submit', 'training'] + options)
    return ai_platform.training_plan(args, user_args, {})


def runs(plan):
    """What the job runs, from its rendered Vertex AI body, as the comparison sees it."""
    preflight.check_replicas(plan)  # every replica would start
    body = jobs.job_body(plan.resolved(package_uris=[STAGED], project_image=IMAGE))
    spec = body.get('jobSpec') or body['trialJobSpec']
    return {'pools': [_pool(pool) if pool else {} for pool in spec['workerPoolSpecs']],
            'outputs': spec.get('baseOutputDirectory'),
            'study': body.get('studySpec'),
            'trials': (body.get('maxTrialCount'), body.get('parallelTrialCount')),
            'rest': {k: v for k, v in spec.items()
                     if k not in ('workerPoolSpecs', 'baseOutputDirectory')}}


def _pool(pool):
    """A pool's machines and what its replicas run: image, module, the trainer's argv."""
    if 'pythonPackageSpec' in pool:
        spec = pool['pythonPackageSpec']
        image, module, args = spec['executorImageUri'], spec['pythonModule'], spec['args']
    else:
        spec = pool['containerSpec']
        image, command, args = spec['imageUri'], spec['command'], spec['args']
        module = command[2]
        if module == plan_lib.BOOTSTRAP_MODULE:  # its own flags, then the module's
            module = next(a.split('=', 1)[1] for a in args if a.startswith('--module-name='))
            args = args[args.index('--') + 1:]
    return {'replicaCount': pool['replicaCount'], 'machineSpec': pool['machineSpec'],
            'diskSpec': pool.get('diskSpec'), 'image': image, 'module': module,
            'args': args}


def _config(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _shipped(name):
    model = SHIPPED_MODELS.get(name, 'cifar10')
    config = '%s/configs/%s' % (REPO_ROOT, name)
    data = list(DATA[model])
    package, module = MODULES[model]
    # gcloud's user args replace the config's: the line repeats them.
    args = list(configs.load_config(config).args) + data
    return (train_cloud_plan([model, '--config', config, '--bucket', 'gs://my-bucket',
                              '--job-name', 'job_1', '--job-dir', 'gs://my-bucket/out',
                              '--', *data]),
            ai_platform_plan(['job_1', '--config', config, '--job-dir', 'gs://my-bucket/out',
                              '--package-path', package, '--module-name', module,
                              '--', *args]))


def _seed(name, tmp_path):
    if name == 'hw3':
        config = _config(tmp_path, 'cmle_config.yaml', cloud_fakes.COURSE_CONFIG)
        return (train_cloud_plan(HW3_TRAIN_CLOUD + ['--config', config, '--', *HW3_DATA]),
                ai_platform_plan(HW3_LINE + ['--config', config, '--', *HW3_USER_ARGS]))
    if name == 'hw3_tuning':
        config = '%s/configs/hptuning_config.yaml' % REPO_ROOT
        return (train_cloud_plan(HW3_TRAIN_CLOUD + ['--config', config, '--', *HW3_DATA]),
                ai_platform_plan(HW3_LINE + ['--config', config, '--', *HW3_USER_ARGS]))
    if name == 'seed_001':
        config = _config(tmp_path, 'mwms.yaml', SEED_001_CONFIG)
        return (train_cloud_plan(['keras', '--config', config, '--image-uri', CUSTOM_IMAGE,
                                  '--bucket', 'gs://my-bucket', '--job-name', 'keras_1',
                                  '--job-dir', 'gs://my-bucket/keras_1', '--',
                                  *SEED_001_ARGS]),
                ai_platform_plan(SEED_001_LINE + ['--', *SEED_001_ARGS]))
    if name == 'taxi_sample':
        config = _config(tmp_path, 'config.yaml', TAXI_SAMPLE_CONFIG)
        return (train_cloud_plan(['taxi', '--config', config, '--bucket', 'gs://my-bucket',
                                  '--job-name', 'train_tensorflow_taxi', '--job-dir',
                                  'gs://my-bucket/taxi/model', '--', *TAXI_SAMPLE_ARGS]),
                ai_platform_plan(TAXI_SAMPLE_LINE + ['--config', config, '--',
                                                     *TAXI_SAMPLE_ARGS]))
    assert name == 'seed_000'
    config = _config(tmp_path, 'config.yaml', SEED_000_CONFIG)
    return (train_cloud_plan(['keras', '--config', config, '--bucket', 'gs://my-bucket',
                              '--job-name', 'mnist_1', '--job-dir', 'gs://my-bucket/mnist_1',
                              '--', '--data-dir=gs://my-bucket/mnist']),
            ai_platform_plan(SEED_000_LINE + ['--', '--data-dir=gs://my-bucket/mnist']))


def test_every_shipped_config_is_covered():
    import os  # pylint: disable=import-outside-toplevel
    assert sorted(SHIPPED) == sorted(
        name for name in os.listdir(os.path.join(REPO_ROOT, 'configs'))
        if name.endswith('.yaml'))


@pytest.mark.parametrize('name', SHIPPED)
def test_a_shipped_config_is_one_plan_through_both_fronts(name):
    ours, gclouds = _shipped(name)
    assert runs(gclouds) == runs(ours)


@pytest.mark.parametrize('name', ['hw3', 'hw3_tuning', 'seed_001', 'taxi_sample', 'seed_000'])
def test_a_seed_line_is_one_plan_through_both_fronts(name, tmp_path):
    ours, gclouds = _seed(name, tmp_path)
    assert runs(gclouds) == runs(ours)


def test_a_tuning_job_through_ai_platform_gives_each_trial_the_metric_and_its_own_dir():
    """HW3's line with the tuning config: no shared --job-dir (each trial defaults to
    its own $AIP_MODEL_DIR, <job-dir>/<trial>/model), and --hypertune-metric=accuracy."""
    plan = ai_platform_plan(HW3_LINE + ['--config', '%s/configs/hptuning_config.yaml'
                                        % REPO_ROOT, '--', *HW3_USER_ARGS])
    seen = runs(plan)
    (pool,) = seen['pools']
    assert not any(arg.startswith('--job-dir') for arg in pool['args'])
    assert pool['args'][-1] == '--hypertune-metric=accuracy'
    assert seen['outputs'] == {'outputUriPrefix': 'gs://4121-data/model_dirs/cifar_hw3'}
    assert seen['study']['metrics'] == [{'metricId': 'accuracy', 'goal': 'MAXIMIZE'}]
