"""`submit --rehearse`: the job body a submission sends, run here against the gs:// emulator.

The plan tests read the body from a dry run (the same code path) and check the
environment each replica gets. The end-to-end tests run the real CLI: the
sdist is staged to the emulator bucket, installed from there into a fresh
virtualenv (offline: PIP_NO_INDEX, every dependency is already installed) and
trained with a gs:// job-dir.
"""
import glob
import io
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

import console_lines
import processes
from conftest import cli_env, REPO_ROOT
from estimator_trainers import cluster as cluster_lib
from estimator_trainers.errors import UserInputError
from estimator_trainers.tools.cloud import train_cloud
from estimator_trainers.tools.cloud import packages
from estimator_trainers.tools.cloud import rehearsal
from estimator_trainers.tools.cloud import replicas
from test_gcs import event_tags, saved_models, taxi_data_flags

CLOUD = 'estimator_trainers.tools.cloud'
PROJECT = ['--project', 'test-project']
# The package path: the sdist is staged and installed from the bucket.
PACKAGE = ['--executor-image-uri', 'us-docker.pkg.dev/vertex-ai/training/tf-cpu.2-15.py310:latest']
# Which trainer each shipped config is written for (its header comment).
CONFIG_MODELS = {'config_ps.yaml': 'taxi', 'cmle_config.yaml': 'cifar10',
                 'cmle_config_gpu.yaml': 'cifar10', 'config_mwms.yaml': 'cifar10',
                 'hptuning_config.yaml': 'cifar10'}
CIFAR_FLAGS = ['--num-layers=8', '--train-batch-size=32', '--eval-batch-size=50',
               '--checkpoint-num-steps=10']


def _config(name):
    return os.path.join(REPO_ROOT, 'configs', name)


def _body(model, config, *trainer_flags, options=PACKAGE):
    """The request body of a dry run."""
    out = io.StringIO()
    assert train_cloud.main(['submit', model, '--config', _config(config), '--dry-run',
                     '--bucket', 'gs://bkt', '--job-name', 'job', *PROJECT, *options, '--',
                     *trainer_flags], out=out, err=io.StringIO()) == 0
    return json.loads(out.getvalue())['request']['body']


def test_plan_gives_each_replica_the_vertex_environment():
    body = _body('taxi', 'config_ps.yaml', '--train-steps=200')
    plan = rehearsal.plan_job(body, max_replicas=2)
    assert [r.label for r in plan.replicas] == ['ps-0', 'chief-0', 'worker-0', 'worker-1']
    assert plan.counts == (('chief', 1, 1), ('worker', 2, 4), ('ps', 1, 1))
    (package,) = plan.package_uris
    assert re.fullmatch(r'gs://bkt/staging/job/[0-9a-f]{64}/estimator-trainers-0\.1\.0\.tar\.gz',
                        package)
    pools = body['jobSpec']['workerPoolSpecs']
    addresses = set()
    for replica in plan.replicas:
        package = pools[replica.pool]['pythonPackageSpec']
        assert (replica.module, list(replica.args)) == (package['pythonModule'],
                                                         package['args'])
        assert replica.env['AIP_MODEL_DIR'] == 'gs://bkt/jobs/job/model'
        assert replica.env['AIP_CHECKPOINT_DIR'] == 'gs://bkt/jobs/job/checkpoints'
        assert replica.env['AIP_TENSORBOARD_LOG_DIR'] == 'gs://bkt/jobs/job/logs'
        assert 'CLOUD_ML_TRIAL_ID' not in replica.env
        from_tf_config = cluster_lib.load_cluster({'TF_CONFIG': replica.env['TF_CONFIG']})
        from_spec = cluster_lib.load_cluster({'CLUSTER_SPEC': replica.env['CLUSTER_SPEC']})
        for info in (from_tf_config, from_spec):
            assert (info.task_type, info.task_index) == (replica.role, replica.index)
            assert sorted(info.cluster) == ['chief', 'ps', 'worker']
            assert len(info.addresses('worker')) == 2
        assert from_tf_config.cluster == from_spec.cluster
        assert from_tf_config.environment == 'cloud'
        addresses.update(a for job in from_spec.cluster.values() for a in job)
    assert len(addresses) == 4 and all(a.startswith('127.0.0.1:') for a in addresses)


def test_plan_of_the_built_image_runs_its_python_module():
    """The default submission runs a built image: `python -m MODULE` + args per pool."""
    body = _body('taxi', 'config_ps.yaml', '--train-steps=200', options=())
    plan = rehearsal.plan_job(body, max_replicas=1)
    assert plan.package_uris == ()
    pools = body['jobSpec']['workerPoolSpecs']
    for replica in plan.replicas:
        container = pools[replica.pool]['containerSpec']
        assert container['command'] == ['python', '-m', replica.module]
        assert list(replica.args) == container['args']
    assert [r.label for r in plan.replicas] == ['ps-0', 'chief-0', 'worker-0']


def test_tuning_plan_runs_one_trial_with_mid_range_values():
    body = _body('cifar10', 'hptuning_config.yaml')
    plan = rehearsal.plan_job(body, max_replicas=2)
    (chief,) = plan.replicas
    assert plan.trial == ('accuracy', [('learning-rate', 0.0632456),
                                       ('weight-decay', 0.0001)])
    assert chief.args[-2:] == ('--learning-rate=0.0632456', '--weight-decay=0.0001')
    assert '--hypertune-metric=accuracy' in chief.args
    assert not any(a.startswith('--job-dir') for a in chief.args)
    assert chief.env['CLOUD_ML_TRIAL_ID'] == '1'
    assert chief.env['AIP_MODEL_DIR'] == 'gs://bkt/jobs/job/1/model'
    assert json.loads(chief.env['TF_CONFIG'])['task'] == {'type': 'chief', 'index': 0,
                                                         'trial': '1'}


def test_a_model_saved_outside_the_job_dir_is_named(tmp_path):
    """Seed 000's script-style package saves to a path it hard-codes: the rehearsal
    judges the job (no export under its output directory) and says where it went."""
    chief = rehearsal.Replica(0, 'chief', 0, 'trainer.task',
                              ('--job-dir=%s' % (tmp_path / 'out'),), {'TF_CONFIG': '{}'})
    plan = rehearsal.Plan(replicas=(chief,), counts=(('chief', 1, 1),),
                          base_dir=str(tmp_path / 'out'), package_uris=())
    work = tmp_path / 'work'
    for stray in ('mnist_model/1', 'venv/lib/x'):  # the package's, the rehearsal's own
        (work / stray).mkdir(parents=True)
        (work / stray / 'saved_model.pb').write_bytes(b'')
    with pytest.raises(rehearsal._Failed) as raised:  # pylint: disable=protected-access
        rehearsal._outcome(plan, None, None, 0, elsewhere=(str(work),))  # pylint: disable=protected-access
    assert str(raised.value) == (
        "the chief finished but wrote its SavedModel to %s, outside the job's output "
        "directory %s: on Vertex AI that is the replica's own disk, gone when the job ends; "
        'save it under --job-dir (or $AIP_MODEL_DIR)' % (work / 'mnist_model' / '1',
                                                         tmp_path / 'out'))
    shutil.rmtree(work / 'mnist_model')
    with pytest.raises(rehearsal._Failed, match='no SavedModel export exists under'):
        rehearsal._outcome(plan, None, None, 0, elsewhere=(str(work),))  # pylint: disable=protected-access


@pytest.mark.parametrize('options, clash', [
    (['--dry-run'], '--dry-run'),
    (['--target', 'tfjob'], '--target tfjob'),
    (['--image-uri', 'example.com/trainer:1', '--stream-logs'], '--image-uri or --stream-logs'),
])
def test_rehearse_refuses_options_it_cannot_honour(options, clash):
    with pytest.raises(UserInputError) as raised:
        train_cloud.main(['submit', 'taxi', '--rehearse', '--bucket', 'gs://bkt', *PROJECT, *options],
                 out=io.StringIO(), err=io.StringIO())
    assert str(raised.value) == ('--rehearse runs the staged package on this machine; it '
                                 'does not go with %s' % clash)


@pytest.mark.parametrize('parameter, expected', [
    ({'integerValueSpec': {'minValue': '1', 'maxValue': '10'}}, 6),
    ({'doubleValueSpec': {'minValue': 0.0, 'maxValue': 1.0}}, 0.5),
    ({'doubleValueSpec': {'minValue': 1.0, 'maxValue': 100.0},
      'scaleType': 'UNIT_LOG_SCALE'}, 10.0),
    ({'categoricalValueSpec': {'values': ['adam', 'ftrl', 'sgd']}}, 'ftrl'),
    ({'discreteValueSpec': {'values': [16.0, 32.0, 64.0, 128.0]}}, 32.0),
])
def test_mid_value(parameter, expected):
    assert rehearsal.mid_value(parameter) == expected


def test_unresolvable_dependency_fails_the_install_with_pips_error(tmp_path):
    source = tmp_path / 'src'
    source.mkdir()
    (source / 'needs_missing.py').write_text('')
    (source / 'setup.py').write_text(
        "from setuptools import setup\n"
        "setup(name='needs-missing', version='1.0', py_modules=['needs_missing'],\n"
        "      install_requires=['no-such-dependency-for-tests==1.0'])\n")
    subprocess.run([sys.executable, 'setup.py', '-q', 'sdist', '--dist-dir', str(tmp_path)],
                   cwd=source, check=True, capture_output=True)
    environ = dict(os.environ, PIP_NO_INDEX='1')
    with pytest.raises(UserInputError) as raised:
        packages.install(str(tmp_path / 'needs-missing-1.0.tar.gz'),
                          str(tmp_path / 'venv'), environ)
    assert str(raised.value).startswith(
        'installing needs-missing-1.0.tar.gz into a fresh virtualenv failed: Could not find '
        'a version that satisfies the requirement no-such-dependency-for-tests==1.0')
    assert '\n' not in str(raised.value)


def _rehearse(gcs, tmp_path, model, config, *trainer_flags, options=(), bucket, job, check,
              cwd=REPO_ROOT):
    """Runs `submit MODEL --config CONFIG --rehearse` as job `job`; returns the process."""
    env = dict(gcs.env(), PIP_NO_INDEX='1', TMPDIR=str(tmp_path))
    if cwd != REPO_ROOT:
        env['PYTHONPATH'] = cwd
    proc = processes.run(
        [sys.executable, '-m', CLOUD, 'submit', model, '--config', _config(config),
         '--rehearse', '--bucket', bucket, '--job-name', job, *PROJECT, *options,
         '--', *trainer_flags],
        timeout=900, cwd=cwd, env=cli_env(env), stdin=subprocess.DEVNULL)
    assert proc.returncode == check, 'exit %d\n%s\n%s' % (
        proc.returncode, proc.stdout[-6000:], proc.stderr[-6000:])
    return proc


def _assert_passed(gcs, proc, tmp_path, bucket, job, pools, model_dir='', staged=False):
    """Checks the summary, the export and the staged package; returns (step, summary)."""
    job_dir = 'gs://%s/jobs/%s%s' % (bucket, job, model_dir)
    summary = proc.stderr[proc.stderr.index('rehearsal passed:'):]
    assert '  pools: %s\n' % pools in summary
    export = re.search(r'  export: (\S+)', summary).group(1)
    assert export.startswith(job_dir + '/export/')
    assert saved_models(gcs, job_dir) == [export[len(job_dir) + 1:] + '/saved_model.pb']
    step = int(re.search(r'  final global step: (\d+)', summary).group(1))
    # The trainers came from the package (staged in the bucket) installed in a fresh venv.
    (installed,) = glob.glob(str(tmp_path / 'rehearsal-*' / 'venv' / 'lib' / 'python*' /
                                 'site-packages' / 'estimator_trainers'))
    assert os.path.isdir(installed)
    staged_objects = gcs.list_objects(bucket, 'staging/%s/' % job)
    assert len(staged_objects) == (1 if staged else 0)
    assert all(re.fullmatch(r'staging/%s/[0-9a-f]{64}/estimator-trainers-0\.1\.0\.tar\.gz'
                            % job, name) for name in staged_objects)
    return step, summary


def test_rehearses_the_taxi_parameter_server_config(gcs, gcs_taxi_data, tmp_path):
    proc = _rehearse(gcs, tmp_path, 'taxi', 'config_ps.yaml', '--train-steps=200',
                     '--checkpoint-num-steps=100', '--batch-size=64',
                     *taxi_data_flags(gcs_taxi_data[0]), options=PACKAGE,
                     bucket='gs://taxi-data', job='taxi_ps', check=0)
    assert ('note: --rehearse ignores machine types (n1-standard-4): every replica runs '
            'on this machine\'s CPUs') in proc.stderr
    assert 'note: worker pool 1 (worker) runs 2 of its 4 replicas (--max-replicas 2)' \
        in proc.stderr
    step, _ = _assert_passed(gcs, proc, tmp_path, 'taxi-data', 'taxi_ps',
                             'chief 1, worker 2 of 4, ps 1', staged=True)
    assert 200 <= step <= 210
    # A quiet console (#48): the tasks' and the rehearsal's events, nothing of their
    # libraries (no C++ start-up line after `rehearsal passed`, no warning).
    console_lines.assert_kinds(proc.stdout + proc.stderr, console_lines.REHEARSAL | {
        'staged', 'step target', 'parameter server'}, maybe={'waiting for peers'})
    for label in ('ps-0', 'chief-0', 'worker-0', 'worker-1'):
        assert re.search(r'^\[%s\] ' % label, proc.stdout, re.M), label
        assert '[launcher] started %s' % label in proc.stderr


def test_a_tensorboard_job_writes_where_vertex_ai_uploads_from(gcs, gcs_taxi_data, tmp_path):
    """With --tensorboard, Vertex AI uploads `$AIP_TENSORBOARD_LOG_DIR`
    (`<baseOutputDirectory>/logs`) while the job runs: the rehearsal's event files,
    train and eval, are there, and TensorFlow's event reader reads them back."""
    config = tmp_path / 'tensorboard.yaml'
    config.write_text('trainingInput:\n  scaleTier: BASIC\n'
                      '  serviceAccount: trainer@test-project.iam.gserviceaccount.com\n'
                      '  scheduling: {strategy: SPOT}\n')
    board = 'projects/test-project/locations/us-central1/tensorboards/77'
    proc = _rehearse(gcs, tmp_path, 'taxi', str(config), '--train-steps=20',
                     '--checkpoint-num-steps=10', '--batch-size=64',
                     *taxi_data_flags(gcs_taxi_data[0]),
                     options=[*PACKAGE, '--tensorboard', board], bucket='gs://taxi-data',
                     job='taxi_board', check=0)
    base = 'gs://taxi-data/jobs/taxi_board'
    log_dir, = {r.env['AIP_TENSORBOARD_LOG_DIR'] for r in replicas.vertex({'chief': 1}, base)}
    assert log_dir == base + '/logs'
    assert ('note: Vertex AI TensorBoard %s would upload %s ($AIP_TENSORBOARD_LOG_DIR) while '
            'the job runs' % (board, log_dir)) in proc.stderr
    _assert_passed(gcs, proc, tmp_path, 'taxi-data', 'taxi_board', 'chief 1',
                   model_dir='/logs', staged=True)
    assert 'loss' in event_tags(gcs, log_dir, tmp_path)
    assert {'accuracy', 'auc', 'loss'} <= event_tags(gcs, log_dir + '/eval', tmp_path)
    assert not gcs.list_objects('taxi-data', 'jobs/taxi_board/events.out.tfevents.')


def test_rehearses_the_cifar10_cluster_config(gcs, gcs_cifar10_data, tmp_path):
    proc = _rehearse(gcs, tmp_path, 'cifar10', 'cmle_config.yaml', '--train-steps=20',
                     *CIFAR_FLAGS, options=['--max-replicas', '1'],
                     bucket='gs://cifar-data', job='cifar_cmle', check=0)
    assert 'note: the image is not built: its package is installed from an sdist' \
        in proc.stderr
    step, _ = _assert_passed(gcs, proc, tmp_path, 'cifar-data', 'cifar_cmle',
                             'chief 1, worker 1, ps 1')
    assert 20 <= step <= 30


def test_bad_trainer_flag_fails_before_training(gcs, gcs_taxi_data, tmp_path):
    proc = _rehearse(gcs, tmp_path, 'taxi', 'config_ps.yaml', '--trian-steps=200',
                     *taxi_data_flags(gcs_taxi_data[0]), bucket='gs://taxi-data',
                     job='bad_flag', check=2)
    assert proc.stderr.strip().splitlines()[-1] == (
        'error: trainer flags: unrecognized arguments: --trian-steps=200 '
        '(python -m taxi_estimator.task --help lists them)')
    assert '[launcher] started' not in proc.stderr and 'Traceback' not in proc.stderr


def test_a_task_failing_ends_the_rehearsal_with_its_own_line(gcs, gcs_cifar10_data, tmp_path):
    """What only the data can refuse (a batch larger than the training set) stops the
    chief: the rehearsal's last line is the chief's own error, from its error record."""
    proc = _rehearse(gcs, tmp_path, 'cifar10', 'cmle_config.yaml', '--train-steps=2',
                     '--num-layers=8', '--train-batch-size=4096', '--eval-batch-size=50',
                     options=['--max-replicas', '1'], bucket='gs://cifar-data',
                     job='too_big', check=1)
    last = proc.stderr.strip().splitlines()[-1]
    # The chief and the worker refuse alike; whichever the launcher saw first is named.
    assert re.fullmatch(r'error: (chief|worker)-0 failed \(exit code 2\): --train-batch-size='
                        r'4096 is larger than the 400 training examples; a step may not use '
                        r'an example twice; stopped the other tasks\. Its log: '
                        r'\S+/(chief|worker)-0\.log', last), last
    assert 'rehearsal passed' not in proc.stderr and 'Traceback' not in proc.stderr


def test_package_without_the_trainer_module_fails_before_training(gcs, gcs_taxi_data,
                                                                  tmp_path):
    """A checkout whose pyproject.toml leaves taxi_estimator out of the sdist it stages."""
    copy = tmp_path / 'checkout'
    shutil.copytree(REPO_ROOT, copy, ignore=shutil.ignore_patterns(
        '.git', '.venv', '__pycache__', 'tests', 'benchmarks', '*.egg-info', 'build'))
    pyproject = (copy / 'pyproject.toml').read_text()
    assert 'exclude = ["tests",' in pyproject
    (copy / 'pyproject.toml').write_text(pyproject.replace(
        'exclude = ["tests",', 'exclude = ["taxi_estimator", "taxi_estimator.*", "tests",'))
    proc = _rehearse(gcs, tmp_path, 'taxi', 'config_ps.yaml', '--train-steps=200',
                     *taxi_data_flags(gcs_taxi_data[0]), options=PACKAGE,
                     bucket='gs://taxi-data',
                     job='broken_package', check=2, cwd=str(copy))
    assert proc.stderr.strip().splitlines()[-1] == (
        "error: the staged package cannot run taxi_estimator.task (worker pool 0, chief): "
        "ModuleNotFoundError: No module named 'taxi_estimator'")
    assert '[launcher] started' not in proc.stderr and 'Traceback' not in proc.stderr


def test_the_gpu_config_rehearses_the_cluster_of_the_cpu_one():
    """cmle_config_gpu.yaml's rehearsal is cmle_config.yaml's (rehearsed above) on this
    machine's CPUs, with one of its two workers: said before anything runs."""
    body = _body('cifar10', 'cmle_config_gpu.yaml', '--train-steps=20', *CIFAR_FLAGS)
    plan = rehearsal.plan_job(body, max_replicas=1)
    assert plan.counts == (('chief', 1, 1), ('worker', 1, 2), ('ps', 1, 1))
    assert [r.label for r in plan.replicas] == ['ps-0', 'chief-0', 'worker-0']
    err = io.StringIO()
    rehearsal._notes(plan, body, 1, {}, err)  # pylint: disable=protected-access
    assert err.getvalue().splitlines() == [
        "note: --rehearse ignores machine types and accelerators (n1-highmem-8, "
        "n1-standard-16): every replica runs on this machine's CPUs",
        'note: worker pool 1 (worker) runs 1 of its 2 replicas (--max-replicas 1)']


@pytest.mark.slow
@pytest.mark.parametrize('config', ['hptuning_config.yaml'])
def test_rehearses_every_shipped_config(gcs, gcs_cifar10_data, tmp_path, config):
    """The configs the tests above do not rehearse, on a small CIFAR-10 model (the GPU
    config's cluster is cmle_config.yaml's: test_the_gpu_config_rehearses_...;
    config_mwms.yaml is rehearsed with the Keras trainer below)."""
    configs = os.path.join(REPO_ROOT, 'configs')
    assert sorted(CONFIG_MODELS) == sorted(name for name in os.listdir(configs)
                                           if name.endswith('.yaml'))
    assert CONFIG_MODELS[config] == 'cifar10'
    job = config[:-len('.yaml')]
    proc = _rehearse(gcs, tmp_path, 'cifar10', config, '--train-steps=20', *CIFAR_FLAGS,
                     options=['--max-replicas', '1'], bucket='gs://cifar-data', job=job,
                     check=0)
    _, summary = _assert_passed(gcs, proc, tmp_path, 'cifar-data', job, {
        'config_mwms.yaml': 'chief 1, worker 1 of 2',
        'hptuning_config.yaml': 'chief 1'}[config],
                                model_dir='/1/model' if job == 'hptuning_config' else '')
    console_lines.assert_kinds(proc.stdout + proc.stderr, console_lines.REHEARSAL | {
        'cmle_config_gpu.yaml': {'parameter server'},
        'config_mwms.yaml': {'waiting for peers'},
        'hptuning_config.yaml': {'tuning'}}[config], maybe={'waiting for peers'})
    if config == 'hptuning_config.yaml':
        assert re.search(r'  trial 1 \(--learning-rate=0\.0632456, --weight-decay=0\.0001\): '
                         r'accuracy = [\d.]+ reported', summary)


@pytest.mark.slow
def test_rehearses_the_keras_trainer_under_multi_worker_mirrored(gcs, gcs_cifar10_data,
                                                                 tmp_path):
    """The third trainer, found by discovery, rehearsed like the others (CIFAR-10 MLP), on
    the shipped config_mwms.yaml."""
    proc = _rehearse(gcs, tmp_path, 'keras', 'config_mwms.yaml', '--train-steps=20',
                     '--model=cifar10_mlp', '--batch-size=32',
                     '--data-dir=%s' % gcs_cifar10_data[0],
                     options=['--max-replicas', '1'], bucket='gs://cifar-data',
                     job='keras_mwms', check=0)
    step, _ = _assert_passed(gcs, proc, tmp_path, 'cifar-data', 'keras_mwms',
                             'chief 1, worker 1 of 2')
    assert step == 20
