"""The courses' own cloud lines, word for word, with `gcloud ai-platform` replaced by
`bash scripts/ai-platform.sh`: what runs is what the dry run said would run.

- HW3's `train-cloud.sh` (a master and a worker, no ps; `MY_BUCKET` with a
  trailing slash, so its job-dir and data-dir hold `//`; `--runtime-version
  1.15`, so TF_CONFIG names the master): the dry run says what runs
  (synchronous all-reduce with the master as the chief) and reads both `//`
  paths with one slash, saying so once each, and the rehearsal, by a student
  without an account (no credentials, no project, no network; the data given
  from this machine with `--local-input`), trains, evaluates and exports on
  local storage, on those paths.
- Seed 003's one-machine GPU config with `--distribution-strategy=mirrored`:
  Vertex AI gives a one-replica job a TF_CONFIG naming its chief; it runs
  (rehearsed without an account too).
- A job one replica would refuse (mirrored with workers) is refused by the
  dry run, naming the pool.
- The structured sample's `REQUIRED_PACKAGES` pinning `tensorflow==1.15.2`,
  and a package whose requirement conflicts with this project's pin: refused
  before upload in one line naming the requirement and the pin; the second
  runs with `--unpin` (rehearsed: installed and trained).
- A script-style `task.py` that trains at import: a dry run runs none of it.
"""
import json
import os
import re
import shutil
import subprocess

import pytest

import checkouts
import cloud_fakes
import processes
from conftest import cli_env, one_error_line, REPO_ROOT
from estimator_trainers.tools.cloud import schema
from test_gcs import taxi_data_flags

SCRIPT = os.path.join(REPO_ROOT, 'scripts', 'ai-platform.sh')
PACKAGES = os.path.join(REPO_ROOT, 'tests', 'packages')
OFFLINE = dict(cloud_fakes.OFFLINE_ENV, PIP_NO_INDEX='1')
# HW3's cifar10_estimator/cmle_config.yaml (a master and a worker, no ps count).
HW3_CONFIG = cloud_fakes.COURSE_CONFIG
# HW3's train-cloud.sh, `gcloud ai-platform` replaced; the trainer's size
# comes from the environment (a small ResNet in the test).
HW3_SCRIPT = """\
MY_BUCKET="gs://4121-data/"
JOB_NAME=cifar_hw3
bash {script} jobs submit training $JOB_NAME \\
    --runtime-version 1.15 \\
    --python-version 3.7 \\
    --job-dir=$MY_BUCKET/model_dirs/$JOB_NAME \\
    --config cifar10_estimator/cmle_config.yaml \\
    --package-path cifar10_estimator/ \\
    --module-name cifar10_estimator.cifar10_main \\
    $MODE \\
    -- \\
    --data-dir=$MY_BUCKET/cifar-10-data \\
    --num-gpus=0 \\
    --train-steps=$STEPS $SIZE
"""
MASTER_NOTE = ("note: worker pools 0 (chief), 1 (worker): TF_CONFIG names the first task "
               "'master' (AI Platform's name before runtime 2.1): multi_worker_mirrored trains "
               "it as the 'chief', synchronously with the workers")
SMALL_CIFAR = '--num-layers=8 --train-batch-size=32 --eval-batch-size=50'


def _clone(tmp_path):
    """A student's clone, with HW3's config in the package."""
    copy = checkouts.clone(tmp_path / 'clone')
    (copy / 'cifar10_estimator' / 'cmle_config.yaml').write_text(HW3_CONFIG)
    (copy / 'train-cloud.sh').write_text(HW3_SCRIPT.format(script=SCRIPT))
    return copy


def _hw3(clone, mode, env, timeout=600, steps=1000):
    return processes.run(['bash', 'train-cloud.sh'], timeout, cwd=str(clone), env=cli_env(dict(
        env, MODE=mode, STEPS=str(steps), SIZE=SMALL_CIFAR)), stdin=subprocess.DEVNULL)


def test_hw3_dry_run_says_what_runs(tmp_path):
    proc = _hw3(_clone(tmp_path), '--dry-run', OFFLINE)
    assert proc.returncode == 0, proc.stderr[-4000:]
    said = cloud_fakes.said(proc.stderr)
    assert said[:6] == [
        'note: gs://4121-data//model_dirs/cifar_hw3 is read as '
        'gs://4121-data/model_dirs/cifar_hw3 (empty path segments dropped)',
        'note: gs://4121-data//cifar-10-data is read as gs://4121-data/cifar-10-data '
        '(empty path segments dropped)',
        'warning: cifar10_estimator/cmle_config.yaml: trainingInput.parameterServerType set '
        'but parameterServerCount is unset: no ps replica runs (as on AI Platform); set '
        'parameterServerCount to run one',
        "warning: --runtime-version 1.15: Vertex AI has no AI Platform runtimes; the job "
        "runs TensorFlow 2.15.1 (this project's image): tf.contrib is gone, tf.compat.v1 "
        "and tf.estimator are there (import tensorflow.compat.v1 as tf); TF_CONFIG names "
        "pool 0 'master' as AI Platform did",
        "warning: --python-version 3.7: the job runs Python 3.11 (this project's image)",
        MASTER_NOTE]
    printed = json.loads(proc.stdout)
    body = printed['request']['body']
    schema.check('aiplatform', 'v1', 'GoogleCloudAiplatformV1CustomJob', body)
    assert body['jobSpec']['baseOutputDirectory'] == {
        'outputUriPrefix': 'gs://4121-data/model_dirs/cifar_hw3'}
    chief, worker = body['jobSpec']['workerPoolSpecs']
    assert chief['containerSpec']['args'][-1] == '--job-dir=gs://4121-data/model_dirs/cifar_hw3'
    assert '--data-dir=gs://4121-data/cifar-10-data' in chief['containerSpec']['args']
    assert '--tf-config-primary=master' in worker['containerSpec']['args']


@pytest.mark.slow
def test_hw3_rehearses_without_an_account(cifar10_data_dir, tmp_path):
    data = '--local-input gs://4121-data/cifar-10-data=%s' % cifar10_data_dir
    proc = _hw3(_clone(tmp_path), '--rehearse ' + data, cloud_fakes.no_account_env(tmp_path),
                timeout=1200, steps=20)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    assert ('note: --local-input: rehearsing on local storage (fake-gcs-server) standing in '
            'for gs://4121-data, in project local-rehearsal; nothing reaches Google Cloud, and '
            'what the job writes is kept in %s' % cloud_fakes.mirror(tmp_path, 'gs://')
            ) in cloud_fakes.said(proc.stderr)
    assert re.search(r'^--local-input gs://4121-data/cifar-10-data: 4 files \(.*\) from %s '
                     r'copied in ' % re.escape(cifar10_data_dir), proc.stderr, re.M)
    assert MASTER_NOTE in proc.stderr
    # Both paths read with one slash, said once each (by the plan, not again by a task).
    for path in ('model_dirs/cifar_hw3', 'cifar-10-data'):
        assert proc.stderr.count('note: gs://4121-data//%s is read as gs://4121-data/%s'
                                 % (path, path)) == 1
    assert 'is read as' not in proc.stdout
    summary = proc.stderr[proc.stderr.index('rehearsal passed:'):]
    assert '  pools: chief 1, worker 1\n' in summary
    assert '  final global step: 20\n' in summary
    export = summary.split('  export: ')[1].split()[0]
    assert export.startswith('gs://4121-data/model_dirs/cifar_hw3/export/')
    # The job-dir outlives the storage, in its mirror: the export, the evaluation.
    job_dir = cloud_fakes.mirror(tmp_path, 'gs://4121-data/model_dirs/cifar_hw3')
    assert 'local storage: gs://4121-data/model_dirs/cifar_hw3 is kept in %s\n' % job_dir \
        in proc.stderr
    # The estimates of this job take the rehearsal's measurements from there.
    assert "note: the rehearsal's measurements are kept for this job's estimates" in proc.stderr
    assert (cloud_fakes.mirror(tmp_path, export) / 'saved_model.pb').is_file()
    assert list((job_dir / 'eval').glob('events.out.tfevents.*'))  # it evaluated
    # The master trained as the chief beside the worker, in step (all-reduce).
    assert '[chief-0]' in proc.stdout and '[worker-0]' in proc.stdout
    assert 'Traceback' not in proc.stderr


# Seed 003: one machine with GPUs and a prebuilt image for the master.
SEED_003_CONFIG = """\
trainingInput:
  scaleTier: CUSTOM
  masterType: n1-standard-8
  masterConfig:
    imageUri: us-docker.pkg.dev/vertex-ai/training/tf-gpu.2-15.py310:latest
    acceleratorConfig: {count: 2, type: NVIDIA_TESLA_T4}
"""


def _seed_003(tmp_path, mode, env, steps=10):
    config = tmp_path / 'config_gpu.yaml'
    config.write_text(SEED_003_CONFIG)
    return processes.run(
        ['bash', SCRIPT, 'jobs', 'submit', 'training', 'cifar_gpu', '--job-dir',
         'gs://my-bucket/cifar_gpu', '--config', str(config), '--package-path',
         'cifar10_estimator', '--module-name', 'cifar10_estimator.cifar10_main', *mode.split(),
         '--', '--distribution-strategy=mirrored', '--data-dir=gs://my-bucket/cifar10',
         '--train-steps=%d' % steps, *SMALL_CIFAR.split()], 1200, cwd=REPO_ROOT,
        env=cli_env(env), stdin=subprocess.DEVNULL)


def test_mirrored_on_a_one_machine_job_is_accepted(tmp_path):
    proc = _seed_003(tmp_path, '--dry-run', OFFLINE)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert cloud_fakes.said(proc.stderr) == []
    (pool,) = json.loads(proc.stdout)['request']['body']['jobSpec']['workerPoolSpecs']
    assert pool['machineSpec']['acceleratorCount'] == 2
    assert '--distribution-strategy=mirrored' in pool['pythonPackageSpec']['args']


def test_a_job_one_replica_would_refuse_is_refused_by_the_dry_run(tmp_path):
    config = tmp_path / 'workers.yaml'
    config.write_text(HW3_CONFIG)
    proc = processes.run(
        ['bash', SCRIPT, 'jobs', 'submit', 'training', 'mirrored_workers', '--job-dir',
         'gs://my-bucket/x', '--config', str(config), '--package-path', 'cifar10_estimator',
         '--module-name', 'cifar10_estimator.cifar10_main', '--dry-run', '--',
         '--distribution-strategy=mirrored', '--data-dir=gs://my-bucket/cifar10'], 600,
        cwd=REPO_ROOT, env=cli_env(OFFLINE), stdin=subprocess.DEVNULL)
    one_error_line(proc, 'worker pool 0 (chief, n1-standard-16 with no GPUs), replica 0 would '
                         'refuse to start: --distribution-strategy=mirrored runs in one process '
                         'without TF_CONFIG')
    assert proc.stdout == ''


def _package(tmp_path, name, requirements, task=None):
    """The structured sample with these REQUIRED_PACKAGES (and this task.py)."""
    source = tmp_path / name
    shutil.copytree(os.path.join(PACKAGES, 'structured'), source)
    setup = (source / 'setup.py').read_text()
    (source / 'setup.py').write_text(setup.replace(
        "REQUIRED_PACKAGES = ['PyYAML>=5.1', 'cloudml-hypertune']",
        'REQUIRED_PACKAGES = %r' % (requirements,)))
    if task is not None:
        (source / 'trainer' / 'task.py').write_text(task)
    return source


def _submit(source, mode, *extra, env=OFFLINE, user_args=(), timeout=600):
    return processes.run(
        ['bash', SCRIPT, 'jobs', 'submit', 'training', 'structured_1', '--job-dir',
         'gs://my-bucket/structured', '--package-path', 'trainer', '--module-name',
         'trainer.task', mode, *extra, '--', *user_args], timeout, cwd=str(source),
        env=cli_env(env), stdin=subprocess.DEVNULL)


@pytest.mark.parametrize('mode', ['--dry-run', '--rehearse'])
def test_a_tensorflow_1_pin_is_named_with_what_to_do(tmp_path, mode):
    source = _package(tmp_path, 'tf1', ['tensorflow==1.15.2', 'PyYAML>=5.1'])
    proc = _submit(source, mode, env=dict(OFFLINE, STORAGE_EMULATOR_HOST='http://127.0.0.1:9'))
    one_error_line(proc, 'trainer-0.1.tar.gz requires tensorflow==1.15.2, but the job runs '
                         'TensorFlow 2.15.1 (with tensorflow==2.15.1), the last release that '
                         "ships tf.estimator: TensorFlow 1.x has no release for the image's "
                         'Python, and 2.15 runs 1.x code through tf.compat.v1; drop tensorflow '
                         'from its requirements (install_requires / REQUIRED_PACKAGES in '
                         'setup.py): the image has it')


def test_a_requirement_that_conflicts_with_a_pin_is_named(tmp_path):
    source = _package(tmp_path, 'absl', ['absl-py<2.0.0', 'PyYAML>=5.1'])
    proc = _submit(source, '--dry-run')
    one_error_line(proc, "trainer-0.1.tar.gz requires absl-py<2.0.0, which conflicts with this "
                         "project's pin absl-py==2.5.1 (constraints.txt); pass --unpin absl-py "
                         "to let the package's requirement win (--rehearse checks that "
                         'TensorFlow 2.15.1 still runs with it)')


@pytest.mark.slow
def test_unpin_lets_the_package_requirement_win_and_the_rehearsal_trains(gcs, gcs_taxi_data,
                                                                        tmp_path):
    """absl-py<2 (tensorflow-model-analysis's requirement) from PyPI, checked: it installs,
    TensorFlow's own requirements still hold, and the job trains and exports."""
    source = _package(tmp_path, 'absl', ['absl-py<2.0.0', 'PyYAML>=5.1'])
    task = source / 'trainer' / 'task.py'
    task.write_text(task.read_text().replace(
        'def main():\n', 'def main():\n    import importlib.metadata\n'
        '    print(\'absl-py\', importlib.metadata.version(\'absl-py\'), flush=True)\n'))
    gcs.create_bucket('my-bucket')
    env = dict(gcs.env(), PROJECT_ID='test-project', TMPDIR=str(tmp_path))
    # pip reaches the package index directly; only Google's hosts go to the emulator.
    env['no_proxy'] += ',pypi.org,files.pythonhosted.org'
    # Runtime 1.15 names the one replica 'master', which Estimator lets evaluate and export.
    proc = _submit(source, '--rehearse', '--unpin', 'absl-py', '--runtime-version', '1.15',
                   env=env, timeout=1200,
                   user_args=[*taxi_data_flags(gcs_taxi_data[0]), '--train-steps', '10'])
    if proc.returncode and 'satisfies the requirement absl-py<2.0.0' in proc.stderr:
        pytest.skip('the package index is not reachable: absl-py<2 cannot be installed')
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    assert 'rehearsal passed:' in proc.stderr
    assert re.search(r'^\[chief-0\] absl-py 1\.', proc.stdout, re.M), proc.stdout[-3000:]


SCRIPT_STYLE_TASK = '''\
"""Seed 000's shape: the training runs at import, no main()."""
import argparse
import pathlib

parser = argparse.ArgumentParser()
parser.add_argument('--job-dir', required=True)
parser.add_argument('--train-files')
parser.add_argument('--eval-files')
args = parser.parse_args()
pathlib.Path(%r).write_text('trained at import')
'''


def test_a_dry_run_never_runs_the_package_code(tmp_path):
    marker = tmp_path / 'ran'
    source = _package(tmp_path, 'script_style', ['PyYAML>=5.1'],
                      task=SCRIPT_STYLE_TASK % str(marker))
    proc = _submit(source, '--dry-run', user_args=['--train-files', 'gs://my-bucket/t.csv'])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not marker.exists()
    schema.check('aiplatform', 'v1', 'GoogleCloudAiplatformV1CustomJob',
                 json.loads(proc.stdout)['request']['body'])
    proc = _submit(source, '--dry-run', user_args=['--train-file', 'x', '--epochs', '3'])
    one_error_line(proc, 'trainer.task does not take --epochs (trainer/task.py defines '
                         '--eval-files, --job-dir, --train-files)')
    assert not marker.exists()
