"""Finds the trainers: packages that declare themselves, never a list to edit.

A trainer is a top-level package with a `trainer.py` that declares
`TRAINER = <a declaration.Trainer subclass>()`. Every tool that needs the
trainers (train-local.sh, train-cloud.sh, the rehearsal, the launcher)
asks `get(name)` or `discover()`; packaging (pyproject.toml, the Dockerfile)
ships every package of the repository. Candidates are recognised from the
text of their `trainer.py` before anything is imported, so scanning
site-packages imports nothing else.
"""
import importlib
import os
import re
import sys
from typing import Optional, Sequence

from estimator_trainers import declaration
from estimator_trainers.errors import UserInputError

DECLARATION = 'trainer'
_DECLARES = re.compile(r'^TRAINER\s*=', re.MULTILINE)


def candidate_packages(paths: Optional[Sequence[str]] = None) -> list[str]:
    """Names of top-level packages on `paths` (default sys.path) that declare a trainer."""
    seen: list[str] = []
    for entry in (sys.path if paths is None else paths):
        entry = entry or os.getcwd()
        try:
            names = sorted(os.listdir(entry))
        except OSError:
            continue
        for name in names:
            if name in seen or not name.isidentifier():
                continue
            declaration = os.path.join(entry, name, DECLARATION + '.py')
            if not os.path.isfile(os.path.join(entry, name, '__init__.py')):
                continue
            try:
                with open(declaration, encoding='utf-8', errors='replace') as f:
                    text = f.read(65536)
            except OSError:
                continue
            if 'estimator_trainers' in text and _DECLARES.search(text):
                seen.append(name)
    return seen


def discover(paths: Optional[Sequence[str]] = None) -> dict[str, declaration.Trainer]:
    """{name: Trainer} of every declared trainer; the first on the path wins a name."""
    trainers: dict[str, declaration.Trainer] = {}
    for package in candidate_packages(paths):
        trainer = getattr(importlib.import_module('%s.%s' % (package, DECLARATION)),
                          'TRAINER', None)
        if not isinstance(trainer, declaration.Trainer):
            continue
        name: Optional[str] = trainer.name  # None: a declaration that names no model
        if name is not None and name not in trainers:
            trainers[name] = trainer
    return trainers


def get(name: str, paths: Optional[Sequence[str]] = None) -> declaration.Trainer:
    """The trainer called `name`.

    Raises:
      UserInputError: no package declares it (the message lists those found).
    """
    trainers = discover(paths)
    if name not in trainers:
        raise UserInputError("unknown model '%s' (expected one of: %s)"
                             % (name, ', '.join(sorted(trainers)) or 'none found'))
    return trainers[name]
