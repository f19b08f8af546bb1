"""The shell entry points: Python version gate, usage and argument errors."""
import os
import shutil
import subprocess

from conftest import REPO_ROOT


def _bash(script, *args, env=None, cwd=REPO_ROOT):
    return subprocess.run([shutil.which('bash'), script, *args], cwd=cwd, capture_output=True,
                          text=True, env=env, timeout=120, stdin=subprocess.DEVNULL)


def test_setup_refuses_other_python_versions(tmp_path):
    repo = tmp_path / 'repo'
    (repo / 'scripts').mkdir(parents=True)
    shutil.copy(os.path.join(REPO_ROOT, 'scripts', 'setup-venv.sh'), repo / 'scripts')
    fake_bin = tmp_path / 'bin'
    fake_bin.mkdir()
    for name in ('python3', 'python'):
        fake = fake_bin / name
        fake.write_text('#!/bin/sh\nexit 1\n')  # "sys.version_info != (3, 11)"
        fake.chmod(0o755)
    os.symlink(shutil.which('dirname'), fake_bin / 'dirname')
    env = {'PATH': str(fake_bin), 'HOME': str(tmp_path)}
    proc = _bash(str(repo / 'scripts' / 'setup-venv.sh'), env=env, cwd=str(repo))
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        'error: Python 3.11 is required (TensorFlow 2.15.1, the last release with '
        'tf.estimator, has no wheels for other versions); install python3.11 or set '
        'PYTHON=/path/to/python3.11']
    assert not (repo / '.venv').exists()


def test_train_local_help_and_errors():
    proc = _bash('scripts/train-local.sh', '--help')
    assert proc.returncode == 0
    assert proc.stdout.startswith('Usage: bash scripts/train-local.sh')
    proc = _bash('scripts/train-local.sh', 'mnist')
    assert proc.returncode == 2
    assert "unknown model 'mnist'" in proc.stderr
    proc = _bash('scripts/train-local.sh', '--bogus')
    assert proc.returncode == 2
    assert "unknown option '--bogus'" in proc.stderr


def test_tensorboard_help_and_errors(tmp_path):
    proc = _bash('scripts/tensorboard.sh', '--help')
    assert proc.returncode == 0 and proc.stdout.startswith('Usage: bash scripts/tensorboard.sh')
    proc = _bash('scripts/tensorboard.sh', str(tmp_path / 'missing'))
    assert proc.returncode == 2
    assert proc.stderr == 'error: JOB_DIR %s: no such directory (train first, or give a ' \
                          'gs:// path)\n' % (tmp_path / 'missing')
    proc = _bash('scripts/tensorboard.sh', str(tmp_path), '--port', 'http')
    assert proc.returncode == 2 and "--port expects a port number, got 'http'" in proc.stderr
