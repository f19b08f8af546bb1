"""The shell entry points: usage and argument errors (set-up: test_setup_venv.py)."""
import os
import shutil
import subprocess
import sys

import processes
from conftest import cli_env, REPO_ROOT


def _bash(script, *args, env=None, cwd=REPO_ROOT):
    return processes.run([shutil.which('bash'), script, *args], 120, cwd=cwd, env=env,
                         stdin=subprocess.DEVNULL)


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


def test_experiment_help_and_errors(tmp_path):
    proc = _bash('scripts/experiment.sh', '--help')
    assert proc.returncode == 0
    assert proc.stdout.startswith('usage: bash scripts/experiment.sh')
    assert '--dry-run' in proc.stdout and '--full' in proc.stdout
    proc = _bash('scripts/experiment.sh', str(tmp_path / 'missing.yaml'))
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[-1] == 'error: %s: no such file' % (
        tmp_path / 'missing.yaml')
    proc = _bash('scripts/experiment.sh', 'configs/experiments/resume.yaml', '--bogus')
    assert proc.returncode == 2 and '--bogus' in proc.stderr.splitlines()[-1]


def test_empty_job_dir_is_refused_not_replaced_by_a_default(tmp_path):
    """`train-local.sh taxi --job-dir "$UNSET"` trained in the shared /tmp/taxi, and the
    launcher with `--job-dir ''` wrote its task logs into ./logs."""
    proc = _bash('scripts/train-local.sh', 'taxi', '--job-dir', '', '--', '--train-steps',
                 '1')
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines() == [
        "error: --job-dir: expected a path, got '' (an unset variable?)"]
    proc = processes.run([sys.executable, '-m', 'estimator_trainers.tools.launcher',
                          '--job-dir', '', '--', 'true'], 120, cwd=tmp_path,
                         env=cli_env(), stdin=subprocess.DEVNULL)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines() == [
        "error: argument --job-dir: expected a path, got '' (an unset variable?) "
        '(see --help)']
    assert os.listdir(tmp_path) == []
