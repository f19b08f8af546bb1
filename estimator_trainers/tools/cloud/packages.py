"""Python packages in fresh virtualenvs: the install, and the checks of a user's module.

`install` pip-installs archives into a new virtualenv layered over the
packages of a running environment (a `.pth` file naming its site-packages
as plain path entries), so what that environment has (TensorFlow, this
project's pins) counts as installed and only the rest is resolved, with
the repository's constraints when there are any. Three callers:

- the pre-submit checks of a user's package (`check_module`), layered over
  the environment running the submission, standing for the image;
- the rehearsal, which installs what a job's pools install;
- `bootstrap`, in the image at a job's start-up, layered over the image.

`check_module` then runs `probe.py` in that virtualenv: the module imports,
and its flags parse (argparse or absl), before anything is uploaded or paid
for. Results are values: the probe's exit code and error record.
"""
import os
import re
import subprocess
import sys
import sysconfig

from estimator_trainers import errors
from estimator_trainers.errors import UserInputError

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
PROBE = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'probe.py')
PROBE_NOT_CHECKED = 3  # probe.EXIT_NOT_CHECKED (probe.py imports nothing of ours)
PROBE_TIMEOUT_SECS = 300
_PIP_ERROR_RE = re.compile(r'^ERROR: (.*)$', re.M)


def environment_layers():
    """This interpreter's own site-packages (not what their .pth files add, so an
    editable checkout stays out)."""
    return list(dict.fromkeys(sysconfig.get_paths()[k] for k in ('purelib', 'platlib')))


def path_layers():
    """Every site-packages directory on `sys.path` (a virtualenv's own and the
    layers it was given): what a nested virtualenv must see."""
    return list(dict.fromkeys(p for p in sys.path if os.path.basename(p) in (
        'site-packages', 'dist-packages') and os.path.isdir(p)))


def install(archives, venv_dir, environ, layers=None, what=None):
    """pip-installs `archives` (together) into a fresh virtualenv; returns its python.

    Args:
      archives: sdists or wheels (local paths).
      venv_dir: where the virtualenv goes (must not exist yet).
      environ: the environment pip runs with.
      layers: directories the virtualenv sees as installed (default:
        `environment_layers`).
      what: how to name the archives in an error (default: their file names).

    Raises:
      UserInputError: pip failed (its first `ERROR:` line is named).
    """
    archives = [archives] if isinstance(archives, str) else list(archives)
    subprocess.run([sys.executable, '-m', 'venv', '--without-pip', venv_dir],
                   check=True, capture_output=True)
    python = os.path.join(venv_dir, 'bin', 'python')
    site = subprocess.run([python, '-c', 'import sysconfig; print(sysconfig.get_paths()'
                           '["purelib"])'], check=True, capture_output=True,
                          text=True).stdout.strip()
    with open(os.path.join(site, '_executor_image.pth'), 'w') as f:
        f.write(''.join(path + '\n' for path in (layers or environment_layers())))
    command = [sys.executable, '-m', 'pip', '--python', python, 'install',
               '--disable-pip-version-check', '--no-build-isolation', *archives]
    constraints = os.path.join(REPO_ROOT, 'constraints.txt')
    if os.path.isfile(constraints):
        command += ['-c', constraints]
    env = dict(environ)
    env.pop('PYTHONPATH', None)
    proc = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if proc.returncode:
        pip_errors = _PIP_ERROR_RE.findall(proc.stderr)
        lines = proc.stderr.strip().splitlines() or ['exit code %d' % proc.returncode]
        raise UserInputError('installing %s into a fresh virtualenv failed: %s'
                             % (what or ', '.join(os.path.basename(a) for a in archives),
                                pip_errors[0] if pip_errors else lines[-1]))
    return python


def check_module(python, module, args, work_dir, environ):
    """Imports `module` with `python` and parses `args` with its own parser.

    Returns:
      None when checked, else a note saying why the flags were not checked.

    Raises:
      UserInputError: the module does not import (naming the module of the
        package and the line), `--help` does not exit 0, or its parser
        refuses `args`.
    """
    record = os.path.join(work_dir, 'probe-error.json')
    env = {k: v for k, v in environ.items() if k not in ('PYTHONPATH', 'TF_CONFIG',
                                                         'CLUSTER_SPEC')}
    env.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
    try:
        proc = subprocess.run([python, '-I', PROBE, record, module, *args], env=env,
                              cwd=work_dir, stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                              timeout=PROBE_TIMEOUT_SECS, check=False)
    except subprocess.TimeoutExpired:
        raise UserInputError('python -m %s did not finish parsing its flags within %d s'
                             % (module, PROBE_TIMEOUT_SECS)) from None
    error = errors.read_record(record)
    if proc.returncode == 0:
        return None
    if proc.returncode == PROBE_NOT_CHECKED:
        return ('note: %s: flags not checked: %s' % (module, error.message) if error else
                'note: %s parses no flags with argparse or absl: its flags are not '
                'checked before the job runs' % module)
    if error is None:  # the interpreter itself failed: its last words
        lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
        raise UserInputError('checking %s failed: %s' % (
            module, lines[-1] if lines else 'exit code %d' % proc.returncode))
    if isinstance(error, errors.FlagError):
        raise UserInputError('%s rejects the job\'s args: %s' % (module, error.message),
                             path=error.path)
    raise UserInputError(error.message, path=error.path)
