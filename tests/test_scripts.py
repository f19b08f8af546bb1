"""The shell entry points: usage and argument errors (set-up: test_setup_venv.py)."""
import shutil
import subprocess

import processes
from conftest import REPO_ROOT


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
