"""A trainer added by following docs/adding-a-trainer.md runs everywhere without an edit.

The toy package is written, file by file, from the code blocks of that page
into a temporary directory and put on PYTHONPATH; the project's own scripts
find it, prepare its data, train it in one process and on a local cluster,
and submit it (dry run) and rehearse it. A copy of the repository with the
package added ships it in the sdist and the Docker build context.
"""
import fnmatch
import importlib.util
import json
import os
import re
import subprocess
import sys
import tarfile

import pytest
import tensorflow as tf

import checkouts
import processes
from conftest import cli_env, one_error_line, reported_metrics, REPO_ROOT
from estimator_trainers import registry
from estimator_trainers.tools.cloud import build
from estimator_trainers.tools.cloud import staging

GUIDE = os.path.join(REPO_ROOT, 'docs', 'adding-a-trainer.md')
# A code block of the guide that is a file: its first line names it.
_FILE_BLOCK = re.compile(r'^```python\n# (\w+/\w+\.py)\n(.*?)^```$', re.M | re.S)


def write_guide_package(directory):
    """Writes the files of the guide's code blocks under `directory`; returns their names."""
    with open(GUIDE, encoding='utf-8') as f:
        blocks = _FILE_BLOCK.findall(f.read())
    for name, text in blocks:
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return sorted(name for name, _ in blocks)


def test_the_guide_holds_a_whole_package(tmp_path):
    assert write_guide_package(tmp_path) == [
        'toy_estimator/__init__.py', 'toy_estimator/data.py', 'toy_estimator/runtime.py',
        'toy_estimator/trainer.py']


@pytest.fixture
def toy_path(tmp_path):
    """A directory holding only the guide's toy trainer package."""
    packages = tmp_path / 'packages'
    write_guide_package(packages)
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


def _declared(toy_path):
    """The guide's `TRAINER`, loaded from its file (the declaration needs no TensorFlow)."""
    spec = importlib.util.spec_from_file_location(
        'guide_toy_trainer', toy_path / 'toy_estimator' / 'trainer.py')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.TRAINER


def test_train_local_prepares_data_trains_and_exports(toy_path, tmp_path):
    proc = _train_local(toy_path, '--help')
    assert proc.returncode == 0
    assert re.search(r'^  toy +Fit y = 3x \+ 1', proc.stdout, re.M), proc.stdout

    job_dir, data_dir = tmp_path / 'job', tmp_path / 'data'
    proc = _train_local(toy_path, 'toy', '--job-dir', str(job_dir), '--data-dir', str(data_dir))
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert 'toy data written to' in proc.stdout
    # Checkpoints at multiples of the declared checkpoint_steps (20), the last
    # step and, on a new job-dir, step 0 (docs/adding-a-trainer.md).
    assert _checkpoint_steps(job_dir) == [0, 20, 40, 60]
    final = re.search(r'Final evaluation at global step (\d+): .*mse = ([\d.]+)', proc.stderr)
    assert int(final.group(1)) == 60 and float(final.group(2)) < 0.05
    assert reported_metrics(proc.stderr) == sorted(_declared(toy_path).eval_metrics)
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
    copy = checkouts.clone(tmp_path / 'repo')
    write_guide_package(copy)
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
    processes.run([sys.executable, '-m', 'toy_estimator.data', '--data-dir', str(data_dir)],
                  120, env=_env(toy_path))
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


@pytest.mark.slow
def test_rehearsed_as_a_cloud_job_from_a_checkout_holding_it(gcs, tmp_path):
    """The guide's package, added to a copy of the repository, rehearses a
    parameter-server job on the gs:// emulator: staged, installed in a fresh
    virtualenv, trained on gs:// data, exported."""
    copy = _repo_copy_with_toy(tmp_path)
    env = cli_env(dict(gcs.env(), PIP_NO_INDEX='1', TMPDIR=str(tmp_path)))
    env['PYTHONPATH'] = str(copy)
    local_data = tmp_path / 'data'
    processes.run([sys.executable, '-m', 'toy_estimator.data', '--data-dir', str(local_data)],
                  120, env=env, cwd=str(copy))
    data_dir = gcs.create_bucket('toy-data') + '/data/toy'
    copied = processes.run(
        [sys.executable, '-c', 'import sys, tensorflow as tf; tf.io.gfile.makedirs(sys.argv[2]); '
         'tf.io.gfile.copy(sys.argv[1], sys.argv[2] + "/points.npz")',
         str(local_data / 'points.npz'), data_dir], 120, env=env)
    assert copied.returncode == 0, copied.stderr[-2000:]
    proc = processes.run(
        [sys.executable, '-m', 'estimator_trainers.tools.cloud', 'submit', 'toy', '--config',
         os.path.join(REPO_ROOT, 'configs', 'config_ps.yaml'), '--rehearse', '--bucket',
         'gs://toy-data', '--job-name', 'toy_rehearsal', '--project', 'test-project',
         '--max-replicas', '1', '--', '--train-steps=40', '--max-worker-delay-secs=0'],
        900, cwd=str(copy), env=env, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    summary = proc.stderr[proc.stderr.index('rehearsal passed:'):]
    assert '  pools: chief 1, worker 1 of ' in summary
    export = re.search(r'  export: (gs://toy-data/jobs/toy_rehearsal/export/\d+)',
                       summary)
    assert export, summary
    objects = gcs.list_objects('toy-data', 'jobs/toy_rehearsal/export/')
    assert any(name.endswith('/saved_model.pb') for name in objects), objects
