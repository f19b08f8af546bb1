"""A clone of this repository for tests that build from a checkout: its tracked files,
copied as `git clone` would give them (no virtualenv, no outputs, no caches)."""
import os
import shutil
import subprocess

from conftest import REPO_ROOT


def clone(directory):
    """Copies the tracked files of this repository into `directory` (a pathlib.Path)."""
    names = subprocess.run(['git', 'ls-files', '-z'], cwd=REPO_ROOT, check=True,
                           capture_output=True).stdout.decode().split('\0')
    for name in filter(None, names):
        if os.path.isfile(os.path.join(REPO_ROOT, name)):
            (directory / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(os.path.join(REPO_ROOT, name), directory / name)
    return directory
