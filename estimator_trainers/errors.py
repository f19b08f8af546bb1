"""Errors as values: what went wrong, which flag or file, and the one line it prints.

Every command of the package (the trainers, `train-local.sh`, the launcher,
`train-cloud.sh`) ends a user's mistake or a machine fault the same way: one
`error: ...` line on stderr and an exit code, never a traceback. The line is
formatted here only (`line`). Programs that run a command and need to know
why it failed (the cloud pre-submit checks, the rehearsal) read its error
*record*, a JSON file the command writes when `ERROR_RECORD_ENV` names one
(`run_cli`), instead of parsing its output.

The kinds:

- `UserInputError`: input the user can fix (a flag, a file, TF_CONFIG);
  exit 2. `FlagError` is the one a flag parser refuses.
- `TaskFailure`: the machine or the cluster failed the task (full disk,
  SIGTERM, a lost peer); its own exit code. `TransientFailure` is the one a
  restart may cure: the cluster was not ready or went away.

The exit codes are a contract with what restarts tasks (the Kubeflow
operator's `restartPolicy: ExitCode`, a JobSet's pod failure policy, the
docs' advice for Vertex AI); `retryable` is its one rule:

| code | meaning | retried |
|---|---|---|
| 0 | succeeded | - |
| 1 (`EXIT_FAILED`) | failed in a way a restart repeats (a diverged loss, a bug, a full disk) | no |
| 2 (`EXIT_USAGE`) | the user's input: a flag, a file, TF_CONFIG (an address no task can have: a port outside 1-65535, a malformed host) | no |
| 128 + N | stopped by signal N: 143 SIGTERM (preemption, cancel), 137 SIGKILL (out of memory, grace exceeded) | yes |
| 203 (`EXIT_RETRYABLE`) | the cluster, not the input: a peer at a well-formed address not reachable at start-up or lost during training, a collective set-up that never completed, Cloud Storage unreachable | yes |

Codes from 128 up are retried, as the Kubeflow training operator's
`ExitCode` policy does (its `IsRetryableExitCode`: exit code >= 128); 203 is
EX_TEMPFAIL (75, sysexits.h) lifted into that range, above every signal's
128 + N, so a log tells the two apart.
"""
import json
import os
import sys
from typing import IO, Callable, Mapping, NoReturn, Optional, TypedDict, Union

EXIT_USAGE = 2
EXIT_FAILED = 1
EXIT_RETRYABLE = 128 + 75
# Exit codes from here up are worth a restart (`retryable`).
FIRST_RETRYABLE = 128
ERROR_RECORD_ENV = 'ESTIMATOR_TRAINERS_ERROR_RECORD'


class ErrorRecord(TypedDict, total=False):
    """An error as JSON (`Error.record`); read back, any key may be missing."""
    kind: str
    text: str
    line: str
    flag: Optional[str]
    path: Optional[str]
    exit_code: int


class Error(Exception):
    """An error that ends a command with one line.

    Attributes:
      flag: the flag at fault (`--job-dir`), or None.
      path: the file or directory at fault, or None.
      exit_code: the command's exit status.
    """
    exit_code = EXIT_FAILED

    def __init__(self, message: str, *, flag: Optional[str] = None,
                 path: Optional[str] = None, exit_code: Optional[int] = None) -> None:
        super().__init__(message)
        self.flag = flag
        self.path = path
        if exit_code is not None:
            self.exit_code = exit_code

    @property
    def message(self) -> str:
        """What the line says after `error: `."""
        return str(self)

    def record(self) -> ErrorRecord:
        """The error as a JSON-ready dict (`from_record` reads it back)."""
        return {'kind': type(self).__name__, 'text': str(self), 'line': line(self),
                'flag': self.flag, 'path': self.path, 'exit_code': self.exit_code}


class UserInputError(Error):
    """Bad input (flag, file, TF_CONFIG) that the user can fix.

    The message names the flag or file and says what was expected.
    """
    exit_code = EXIT_USAGE


class FlagError(UserInputError):
    """A command line its parser refuses: an unknown flag or a bad value."""

    @property
    def message(self) -> str:
        return '%s (see --help)' % self


class TaskFailure(Error):
    """The machine or the cluster failed the task (full disk, SIGTERM, a lost peer)."""

    def __init__(self, message: str, exit_code: int = EXIT_FAILED, *,
                 flag: Optional[str] = None, path: Optional[str] = None) -> None:
        super().__init__(message, exit_code=exit_code, flag=flag, path=path)


class TransientFailure(TaskFailure):
    """The cluster failed the task in a way a restart may cure: a peer that
    was not up yet or went away, Cloud Storage not answering. Exits
    `EXIT_RETRYABLE`, which the Kubernetes targets restart (`retryable`)."""

    def __init__(self, message: str, *, flag: Optional[str] = None,
                 path: Optional[str] = None) -> None:
        super().__init__(message, exit_code=EXIT_RETRYABLE, flag=flag, path=path)


def retryable(exit_code: int) -> bool:
    """Whether a task that exited `exit_code` is worth restarting (the table above)."""
    return exit_code >= FIRST_RETRYABLE


KINDS = {kind.__name__: kind for kind in (Error, UserInputError, FlagError, TaskFailure,
                                          TransientFailure)}


def from_record(record: ErrorRecord) -> Error:
    """The `Error` a `record()` dict describes (unknown kinds become `Error`)."""
    kind = KINDS.get(record.get('kind', ''), Error)
    error = kind.__new__(kind)
    Exception.__init__(error, record.get('text', ''))
    error.flag, error.path = record.get('flag'), record.get('path')
    error.exit_code = record.get('exit_code', kind.exit_code)
    return error


def line(error: BaseException) -> str:
    """The one line a command prints for `error`: `error: <message>`."""
    message = error.message if isinstance(error, Error) else first_line(error)
    return 'error: %s' % message


def first_line(error: Union[BaseException, str]) -> str:
    """The first line of an exception's message (TF errors: without the op trace)
    or of a text."""
    text = (getattr(error, 'message', None) or str(error)).strip()
    return text.splitlines()[0] if text else type(error).__name__


def report(error: BaseException, stream: Optional[IO[str]] = None) -> None:
    """Writes `line(error)` to `stream` (stderr) and the error record, if one is asked for."""
    stream = stream or sys.stderr
    stream.write(line(error) + '\n')
    stream.flush()
    write_record(error)


def write_record(error: BaseException,
                 environ: Optional[Mapping[str, str]] = None) -> None:
    """Writes `error.record()` where `ERROR_RECORD_ENV` says; nothing when unset."""
    path = (os.environ if environ is None else environ).get(ERROR_RECORD_ENV)
    if not path or not isinstance(error, Error):
        return
    try:
        with open(path, 'w', encoding='utf-8') as f:
            json.dump(error.record(), f)
    except OSError:
        pass  # the line on stderr still says it


def read_record(path: str) -> Optional[Error]:
    """The `Error` recorded at `path`, or None when the command recorded none."""
    try:
        with open(path, encoding='utf-8') as f:
            return from_record(json.load(f))
    except (OSError, ValueError, AttributeError):
        return None


def run_cli(main: Callable[[Optional[list[str]]], Optional[int]],
            argv: Optional[list[str]] = None) -> NoReturn:
    """Runs `main(argv)` as a command: an `Error` becomes its line and exit code."""
    try:
        result = main(argv)
    except Error as e:
        report(e)
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        sys.stderr.write('interrupted\n')
        sys.exit(130)
    sys.exit(result or 0)
