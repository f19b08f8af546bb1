"""Shared test helpers: run the real CLIs in subprocesses, CIFAR-10 test data, gs:// emulator."""
import os
import re
import socket
import subprocess
import sys
import tempfile

import random

import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Tests that drive the experiment runner in-process read gs:// records its jobs
# rewrite, as the experiment CLI does with the stat cache off (set there before
# TF loads). Here TF loads in whichever test comes first: set it before any.
os.environ.setdefault('GCS_STAT_CACHE_MAX_AGE', '0')
# The cloud tools read gcloud's settings (tools/cloud/location.py): the
# developer's own (CLOUDSDK_* variables, ~/.config/gcloud) are no test's input.
# Tests that need a configuration write one (tests/gcloud_reference.py).
for _name in ('CLOUDSDK_ACTIVE_CONFIG_NAME', 'CLOUDSDK_CORE_PROJECT', 'CLOUDSDK_COMPUTE_REGION',
              'CLOUDSDK_AI_PLATFORM_REGION'):
    os.environ.pop(_name, None)
os.environ['CLOUDSDK_CONFIG'] = os.path.join(tempfile.gettempdir(),
                                             'estimator-trainers-tests-no-gcloud-config')
# The cloud tools keep refreshed prices and rehearsals' measurements in the user's
# cache (`tools/cloud/pricing.py`): the suite reads and writes its own.
# USER_CACHE: the developer's own cache, for what the suite downloads once and keeps
# (test_sdist_py310's wheelhouse of TensorFlow's 3.10 wheel).
USER_CACHE = os.environ.get('XDG_CACHE_HOME') or os.path.expanduser('~/.cache')
os.environ['XDG_CACHE_HOME'] = tempfile.mkdtemp(prefix='estimator-trainers-test-cache-')
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cifar10_archive  # pylint: disable=g-import-not-at-top,wrong-import-position
import gcs_emulator  # pylint: disable=g-import-not-at-top,wrong-import-position
import processes  # pylint: disable=g-import-not-at-top,wrong-import-position
# Autouse: no process a test starts outlives it, none the suite starts outlives the run.
from processes import kill_test_processes, no_leftover_processes  # pylint: disable=g-import-not-at-top,wrong-import-position,unused-import
import taxi_trips  # pylint: disable=g-import-not-at-top,wrong-import-position


def pytest_xdist_auto_num_workers(config):  # pylint: disable=unused-argument
    """`-n auto` (pytest.ini): a worker per core, at most four.

    Most of the suite's time is spent waiting on subprocesses (TensorFlow
    imports, servers starting), so two workers keep a 2-core machine busy; a
    test may itself start a five-process cluster, so more than four would
    only crowd a big machine.
    """
    return max(1, min(os.cpu_count() or 1, 4))


def cli_env(extra=None):
    """Environment for a CLI subprocess: repo importable, no inherited cluster."""
    env = dict(os.environ)
    for name in ('TF_CONFIG', 'CLUSTER_SPEC', 'AIP_MODEL_DIR', 'CLOUD_ML_TRIAL_ID'):
        env.pop(name, None)
    env['PYTHONPATH'] = REPO_ROOT + os.pathsep + env.get('PYTHONPATH', '')
    env.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
    env.update(extra or {})
    return env


def run_module(module, *args, env=None, timeout=600, check=None):
    """Runs `python -m module args...`; returns the CompletedProcess.

    Args:
      check: None, or the expected exit code (asserted, with the output shown).
    """
    proc = processes.run([sys.executable, '-m', module] + [str(a) for a in args],
                         timeout, cwd=REPO_ROOT, env=cli_env(env), stdin=subprocess.DEVNULL)
    if check is not None:
        assert proc.returncode == check, (
            'exit %d (expected %d)\n--- stdout\n%s\n--- stderr\n%s'
            % (proc.returncode, check, proc.stdout[-5000:], proc.stderr[-8000:]))
    return proc


@pytest.fixture
def refused_port():
    """A loopback port that refuses connections for the whole test.

    Held bound but never listening, so no other process can take it meanwhile
    (a port closed after picking it could be reused by anyone).
    """
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        yield sock.getsockname()[1]


def tree_bytes(root):
    """{relative path: file bytes, or ('symlink', target) / ('dir',)} under `root`.

    Compares directories byte for byte before and after a run that must leave
    them intact (hidden temp files and empty directories included).
    """
    tree = {}
    for parent, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(parent, name)
            rel = os.path.relpath(path, root)
            if os.path.islink(path):
                tree[rel] = ('symlink', os.readlink(path))
            elif os.path.isdir(path):
                tree[rel] = ('dir',)
            else:
                with open(path, 'rb') as f:
                    tree[rel] = f.read()
    return tree


def directory_of_another_user(path):
    """Creates directory `path` owned by user nobody; skips the test unless root."""
    if os.geteuid() != 0:
        pytest.skip('needs root to give a directory to another user')
    path.mkdir()
    os.chown(path, 65534, 65534)
    return path


def reported_metrics(stderr):
    """The metric names of a run's `Final evaluation at global step N: a = 1, ...` line:
    a trainer's declared `eval_metrics` must be these (what tuning may name)."""
    match = re.search(r'Final evaluation at global step \d+: (.*)', stderr)
    assert match, stderr[-3000:]
    return sorted(pair.split(' = ')[0] for pair in match.group(1).split(', '))


def one_error_line(proc, startswith):
    """Asserts exit 2 and that stderr ends in exactly one `error: ...` line, no traceback."""
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-3000:])
    assert 'Traceback' not in proc.stderr, proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    assert [l for l in lines if l.startswith('error:')] == lines[-1:], proc.stderr[-3000:]
    assert lines[-1].startswith('error: ' + startswith), lines[-1]
    return lines[-1]


@pytest.fixture(scope='session')
def cifar10_tarball(tmp_path_factory):
    """A cifar-10-python.tar.gz in the real format: 5x100 train, 100 test images."""
    return cifar10_archive.write_archive(str(tmp_path_factory.mktemp('cifar_src')),
                                         per_batch=100, test_size=100)


@pytest.fixture(scope='session')
def cifar10_data_dir(tmp_path_factory, cifar10_tarball):
    """TFRecords generated by the real data-step CLI from `cifar10_tarball`."""
    data_dir = str(tmp_path_factory.mktemp('cifar_data'))
    run_module('cifar10_estimator.generate_cifar10_tfrecords', '--data-dir', data_dir,
               '--source', cifar10_tarball, check=0)
    return data_dir


@pytest.fixture(scope='session')
def gcs(tmp_path_factory):
    """A local Cloud Storage that TensorFlow's built-in gs:// client reaches.

    Pass `gcs.env()` to subprocesses; `gcs.create_bucket(name)` makes a bucket.
    See tests/gcs_emulator.py.
    """
    with gcs_emulator.GcsEmulator(str(tmp_path_factory.mktemp('gcs'))) as emulator:
        yield emulator


@pytest.fixture(scope='session')
def gcs_taxi_data(gcs, tmp_path_factory):
    """gs://taxi-data/data/ with the CSVs of the taxi data step; returns (dir, its stderr)."""
    rng = random.Random(5)
    wheel = taxi_trips.write_tfx_wheel(tmp_path_factory.mktemp('tfx') / 'tfx.whl',
                                       [taxi_trips.trip(rng) for _ in range(1000)])
    data_dir = gcs.create_bucket('taxi-data') + '/data'
    proc = run_module('taxi_estimator.data', '--out-dir', data_dir, '--source', 'tfx',
                      '--tfx-wheel', wheel, env=gcs.env(), check=0)
    return data_dir, proc.stderr


@pytest.fixture(scope='session')
def gcs_cifar10_data(gcs, cifar10_tarball):
    """gs://cifar-data/data/cifar10 (a submission's default) with TFRecords from the data step."""
    data_dir = gcs.create_bucket('cifar-data') + '/data/cifar10'
    proc = run_module('cifar10_estimator.generate_cifar10_tfrecords', '--data-dir',
                      data_dir, '--source', cifar10_tarball, env=gcs.env(), check=0)
    return data_dir, proc.stderr
