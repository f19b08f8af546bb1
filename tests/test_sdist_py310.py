"""The package as Vertex AI's prebuilt TF 2.15 images run it: an sdist on Python 3.10.

Vertex pip-installs the staged sdist (`pythonPackageSpec.packageUris`) into
its image's Python 3.10 and runs `python -m <trainer module>`. This builds the
sdist the way the submission does, pip-installs it with its install_requires
(pinned by the repo's constraints) into a fresh 3.10 venv, and runs the
trainers from there, outside the checkout, with nothing of the repo on
sys.path.

The wheels come from a persistent wheelhouse that `pip download` fills (the
first run downloads TensorFlow's 3.10 wheel, ~500 MB; later ones only read
index pages): pip's own HTTP cache stays empty where the route to PyPI strips
caching headers, as on this project's machines.
"""
import os
import subprocess

import pytest

import interpreters
import taxi_trips
from conftest import REPO_ROOT, USER_CACHE
from estimator_trainers.tools.cloud import staging
from taxi_trips import exports, final_metrics

pytestmark = pytest.mark.slow
WHEELHOUSE = os.path.join(USER_CACHE, 'estimator-trainers', 'wheels-py310')


def run(python, *args, cwd, timeout=600):
    """Runs `python args...` in `cwd` without the repo on PYTHONPATH; asserts exit 0."""
    env = {k: v for k, v in os.environ.items() if k not in ('PYTHONPATH', 'TF_CONFIG')}
    env['TF_CPP_MIN_LOG_LEVEL'] = '2'
    proc = subprocess.run([python, *[str(a) for a in args]], cwd=str(cwd), env=env,
                          capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, ('exit %d\n--- stdout\n%s\n--- stderr\n%s' % (
        proc.returncode, proc.stdout[-3000:], proc.stderr[-6000:]))
    return proc


@pytest.fixture(scope='module')
def python310(tmp_path_factory):
    """The python of a 3.10 venv with the package's sdist pip-installed."""
    base_python = interpreters.require(10)
    tmp = tmp_path_factory.mktemp('sdist310')
    sdist = staging.build_sdist(str(tmp), repo_root=REPO_ROOT)
    venv = tmp / 'venv'
    run(base_python, '-m', 'venv', venv, cwd=tmp)
    python = str(venv / 'bin' / 'python')
    constraints = os.path.join(REPO_ROOT, 'constraints.txt')
    run(python, '-m', 'pip', 'download', '--quiet', '--disable-pip-version-check',
        '-d', WHEELHOUSE, '-r', os.path.join(REPO_ROOT, 'requirements.txt'), '-c', constraints,
        cwd=tmp, timeout=1800)
    run(python, '-m', 'pip', 'install', '--quiet', '--disable-pip-version-check',
        '--no-index', '--find-links', WHEELHOUSE, sdist.path, '-c', constraints, cwd=tmp)
    return python


def test_installed_package_is_the_one_imported(python310, tmp_path):
    proc = run(python310, '-c', 'import sys, taxi_estimator, cifar10_estimator, tensorflow as tf; '
               'print(sys.version_info[:2], tf.__version__, taxi_estimator.__file__, '
               'cifar10_estimator.__file__)', cwd=tmp_path)
    version, tf_version, *files = proc.stdout.rsplit(None, 3)
    assert (version, tf_version) == ('(3, 10)', '2.15.1')
    site = os.path.join(os.path.dirname(os.path.dirname(python310)), 'lib', 'python3.10',
                        'site-packages')
    assert all(f.startswith(site + os.sep) for f in files), files


def test_taxi_trains_and_exports_on_310(python310, tmp_path):
    data = tmp_path / 'data'
    data.mkdir()
    train, evals = taxi_trips.write_layout_files(data, train_rows=300, eval_rows=100)
    job_dir = tmp_path / 'job'
    proc = run(python310, '-m', 'taxi_estimator.task', '--train-files', train,
               '--eval-files', evals, '--job-dir', job_dir, '--train-steps', '60',
               '--batch-size', '32', '--checkpoint-num-steps', '30',
               '--eval-frequency-secs', '0', cwd=tmp_path)
    step, metrics = final_metrics(proc.stderr)
    assert step == 60
    assert {'auc', 'accuracy', 'loss'} <= set(metrics), metrics
    assert 'Training data: 300 rows in 1 file(s); eval data: 100 rows' in proc.stderr
    assert len(exports(str(job_dir))) == 1


def test_cifar10_help_on_310(python310, tmp_path):
    proc = run(python310, '-m', 'cifar10_estimator.cifar10_main', '--help', cwd=tmp_path)
    assert proc.stdout.startswith('usage: python -m cifar10_estimator.cifar10_main')
    assert '--data-dir' in proc.stdout and '--train-steps' in proc.stdout
