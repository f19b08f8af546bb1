"""The command line of every trainer: `python -m <trainer module> [flags]`.

Flags are parsed before TensorFlow is imported, so `--help` and flag errors
are instant and a refused command line is one `error:` line
(`errors.run_cli`). A gs:// path with empty segments (`gs://b//x`) is read
as the cloud tools read it (`gcs.normalized`), with the same note. Only then
is the runner, the layer that runs TensorFlow, imported: the one place where
a command crosses from the declarations into the runtime.
"""
import argparse
import sys
from collections.abc import Sequence
from typing import Optional

from estimator_trainers import errors
from estimator_trainers import gcs
from estimator_trainers import logs
from estimator_trainers.declaration import Trainer


def main(trainer: Trainer, argv: Optional[Sequence[str]] = None) -> int:
    """Parses `argv` with `trainer`'s flags and runs one task. Returns the exit code."""
    argv, notes = gcs.normalized_args(sys.argv[1:] if argv is None else argv)
    args = trainer.parse_args(argv)
    level = logs.quiet_console(args.verbosity)
    for note in notes:
        sys.stderr.write('note: %s\n' % note)
    warning = gcs.modular_filesystem_warning(flag_values(args))
    if warning:
        sys.stderr.write(warning + '\n')
    logs.configure(level)
    # The crossing into the runtime (TensorFlow), once the flags parsed.
    from estimator_trainers import runner  # pylint: disable=g-import-not-at-top
    runner.run(trainer, args)
    return 0


def run(trainer: Trainer) -> None:
    """`python -m <trainer module>`: `main` on sys.argv, errors as one line."""
    errors.run_cli(lambda argv: main(trainer, argv))


def flag_values(args: argparse.Namespace) -> list[str]:
    """Every string value of the parsed flags (lists flattened)."""
    values: list[object] = []
    for value in vars(args).values():
        values.extend(value if isinstance(value, (list, tuple)) else [value])
    return [v for v in values if isinstance(v, str)]
