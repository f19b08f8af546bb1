"""A trainer package the project has never seen runs everywhere without an edit.

The toy package (tests/toy_trainer/toy_estimator, written only against the
runner) is copied into a temporary directory and put on PYTHONPATH; the
project's own scripts find it, prepare its data, train it in one process and
on a local cluster, and submit it (dry run). A copy of the repository with the
package added ships it in the sdist and the Docker build context.
"""
import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile

import pytest
import tensorflow as tf

import processes
from conftest import cli_env, one_error_line, REPO_ROOT
from estimator_trainers import registry
from estimator_trainers.tools.cloud import build
from estimator_trainers.tools.cloud import staging

TOY = os.path.join(REPO_ROOT, 'tests', 'toy_trainer', 'toy_estimator')


@pytest.fixture
def toy_path(tmp_path):
    """A directory holding only the toy trainer package."""
    packages = tmp_path / 'packages'
    shutil.copytree(TOY, packages / 'toy_estimator')
    return packages


def _env(toy_path):
    env = cli_env()
    env['PYTHONPATH'] = str(toy_path) + os.pathsep + env['PYTHONPATH']
    return env


def _train_local(toy_path, *args, timeout=600):
    return processes.run(['bash', os.path.join(REPO_ROOT, 'scripts', 'train-local.sh'), *args],
                         timeout, cwd=str(toy_path), env=_env(toy_path),
                         stdin=subprocess.DEVNULL)


def _checkpoint_steps(job_dir):
    state = tf.train.get_checkpoint_state(str(job_dir))
    return sorted(int(p.rsplit('-', 1)[1]) for p in state.all_model_checkpoint_paths)


def test_discovered_from_the_path_only(toy_path, monkeypatch):
    assert 'toy' not in registry.discover()
    monkeypatch.syspath_prepend(str(toy_path))
    trainers = registry.discover()
    assert trainers['toy'].module == 'toy_estimator.trainer'
    assert {'cifar10', 'taxi', 'toy'} <= set(trainers)


def test_train_local_prepares_data_trains_and_exports(toy_path, tmp_path):
    proc = _train_local(toy_path, '--help')
    assert proc.returncode == 0
    assert re.search(r'^  toy +Fit y = 3x \+ 1', proc.stdout, re.M), proc.stdout

    job_dir, data_dir = tmp_path / 'job', tmp_path / 'data'
    proc = _train_local(toy_path, 'toy', '--job-dir', str(job_dir), '--data-dir', str(data_dir))
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert 'toy data written to' in proc.stdout
    # About ten checkpoints per run by default (every 6 of 60 steps); the last 5 kept.
    assert _checkpoint_steps(job_dir) == [36, 42, 48, 54, 60]
    final = re.search(r'Final evaluation at global step (\d+): .*mse = ([\d.]+)', proc.stderr)
    assert int(final.group(1)) == 60 and float(final.group(2)) < 0.05
    exports = list((job_dir / 'export').iterdir())
    assert len(exports) == 1
    served = tf.saved_model.load(str(exports[0])).signatures['serving_default'](
        x=tf.constant([[2.0]]))
    assert abs(float(served['y'][0, 0]) - 7.0) < 0.5


@pytest.mark.slow
def test_train_local_distributed_with_parameter_servers(toy_path, tmp_path):
    job_dir, data_dir = tmp_path / 'job', tmp_path / 'data'
    proc = _train_local(toy_path, 'toy', '--job-dir', str(job_dir), '--data-dir', str(data_dir),
                        '--distributed', '--parameter-server-count', '1',
                        '--worker-count', '1', '--', '--max-worker-delay-secs', '0')
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    assert '[ps-0]' in proc.stdout and '[worker-0]' in proc.stdout
    assert tf.train.load_variable(tf.train.latest_checkpoint(str(job_dir)), 'global_step') >= 60
    assert list((job_dir / 'export').iterdir())


def _repo_copy_with_toy(tmp_path):
    """The project's tracked files plus the toy package at the top level."""
    copy = tmp_path / 'repo'
    files = subprocess.run(['git', 'ls-files', '-z'], cwd=REPO_ROOT, check=True,
                           capture_output=True).stdout.decode().split('\0')
    for name in filter(None, files):
        if os.path.isfile(os.path.join(REPO_ROOT, name)):
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(os.path.join(REPO_ROOT, name), copy / name)
    shutil.copytree(TOY, copy / 'toy_estimator')
    return copy


def test_dry_run_submission_sdist_and_image_take_the_new_trainer(tmp_path):
    copy = _repo_copy_with_toy(tmp_path)
    env = cli_env({'PROJECT_ID': 'my-project', 'BUCKET_NAME': 'gs://my-bucket',
                   'REGION': 'us-central1', 'GOOGLE_APPLICATION_CREDENTIALS': '/nonexistent',
                   'HTTPS_PROXY': 'http://127.0.0.1:9', 'HTTP_PROXY': 'http://127.0.0.1:9'})
    env['PYTHONPATH'] = str(copy)
    proc = processes.run(
        [sys.executable, '-m', 'estimator_trainers.tools.cloud', 'submit', 'toy', '--dry-run',
         '--job-name', 'train_toy_1', '--', '--train-steps=100'],
        300, cwd=str(copy), env=env, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    spec = json.loads(proc.stdout)['request']['body']['jobSpec']['workerPoolSpecs'][0]
    assert spec['containerSpec']['command'] == ['python', '-m', 'toy_estimator.trainer']
    assert '--data-dir=gs://my-bucket/data/toy' in spec['containerSpec']['args']
    # The image built for it (the default) holds the new package.
    assert {'toy_estimator/trainer.py', 'toy_estimator/data.py'} <= set(
        build.context_files(str(copy)))

    sdist = staging.build_sdist(str(tmp_path / 'dist'), repo_root=str(copy)).path
    with tarfile.open(sdist) as tar:
        members = {m.split('/', 1)[1] for m in tar.getnames() if '/' in m}
    assert {'toy_estimator/trainer.py', 'toy_estimator/data.py'} <= members

    ignored = [line.strip() for line in (copy / '.dockerignore').read_text().splitlines()
               if line.strip() and not line.startswith('#')]
    assert 'COPY . ./' in (copy / 'Dockerfile').read_text()
    assert not any(fnmatch.fnmatch('toy_estimator/trainer.py', pattern)
                   or fnmatch.fnmatch('toy_estimator', pattern) for pattern in ignored)


@pytest.mark.skipif(os.geteuid() != 0, reason='needs root to hand a directory to another user')
def test_runner_refuses_a_job_dir_another_user_owns(toy_path, tmp_path):
    """The runner checks the job-dir's owner before the trainer reads or writes anything."""
    data_dir, job_dir = tmp_path / 'data', tmp_path / 'job'
    processes.run([sys.executable, '-m', 'toy_estimator.data', str(data_dir)], 120,
                  env=_env(toy_path))
    job_dir.mkdir()
    os.chown(job_dir, 65534, 65534)
    proc = processes.run([sys.executable, '-m', 'toy_estimator.trainer', '--data-dir',
                          str(data_dir), '--job-dir', str(job_dir)], 300, env=_env(toy_path))
    one_error_line(proc, '--job-dir %s' % job_dir)
    assert 'owned by' in proc.stderr and not list(job_dir.iterdir())


def test_trainer_warns_once_when_the_gcs_plugin_would_serve_its_gs_paths(toy_path):
    """TF_USE_MODULAR_FILESYSTEM routes gs:// through a plugin that cannot rename directories."""
    env = dict(_env(toy_path), TF_USE_MODULAR_FILESYSTEM='1')
    proc = processes.run([sys.executable, '-m', 'toy_estimator.trainer', '--data-dir',
                          'gs://bucket/missing', '--job-dir', 'gs://bucket/job', '--help'],
                         120, env=env)
    assert proc.returncode == 0 and 'warning' not in proc.stderr  # --help exits first
    proc = processes.run([sys.executable, '-m', 'toy_estimator.trainer', '--data-dir',
                          '/nonexistent', '--job-dir', 'gs://bucket/job'],
                         120, env=env)
    warnings = [l for l in proc.stderr.splitlines() if l.startswith('warning:')]
    assert len(warnings) == 1 and 'gs://bucket/job' in warnings[0], proc.stderr
