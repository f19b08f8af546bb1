"""Real CPython interpreters of given versions, for tests that need another Python.

CI's machine image has pyenv builds of 3.9-3.13; elsewhere the system's
`/usr/bin/python3.N` may serve. Tests skip, saying which version is missing,
where neither exists.
"""
import glob
import os
import subprocess

import pytest


def _pyenv_root():
    root = os.environ.get('PYENV_ROOT')
    if root:
        return root
    try:
        return subprocess.run(['pyenv', 'root'], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return os.path.expanduser('~/.pyenv')


def find(minor):
    """Path of a real `python3.<minor>` binary (not a pyenv shim), or None."""
    builds = sorted(glob.glob(os.path.join(_pyenv_root(), 'versions', '3.%d.*' % minor,
                                           'bin', 'python3.%d' % minor)))
    candidates = builds[-1:] + ['/usr/bin/python3.%d' % minor,
                                '/usr/local/bin/python3.%d' % minor]
    return next((path for path in candidates if os.access(path, os.X_OK)), None)


def require(minor):
    """Like `find`, but skips the calling test where that Python is absent."""
    path = find(minor)
    if path is None:
        pytest.skip('needs a Python 3.%d interpreter (none under pyenv versions or '
                    '/usr/bin, /usr/local/bin)' % minor)
    return path
