"""Ending this process from any thread, with its one line.

Threads that watch the job (the peer watch, the lease heartbeat, the SIGTERM
watchdog) must be able to end a process whose main thread is blocked inside
TensorFlow, where no Python exception reaches it. `exit_now` does: it reports
the error as every command does (`errors.report`), runs the callbacks
registered with `at_exit` (releasing the job-dir lease) and exits at once.
"""
import atexit
import os
import sys
from typing import Callable, NoReturn, Optional, TextIO, overload

from estimator_trainers import errors

_exit_callbacks: list[Callable[[], object]] = []


def at_exit(callback: Callable[[], object]) -> None:
    """Runs `callback()` when the process ends, by `exit_now` or normally."""
    _exit_callbacks.append(callback)
    atexit.register(callback)


@overload
def exit_now(error: errors.Error, code: Optional[int] = None,
             stream: Optional[TextIO] = None) -> NoReturn: ...


@overload
def exit_now(error: None, code: int, stream: Optional[TextIO] = None) -> NoReturn: ...


def exit_now(error: Optional[errors.Error], code: Optional[int] = None,
             stream: Optional[TextIO] = None) -> NoReturn:
    """Reports `error` (None: says nothing), runs the `at_exit` callbacks, exits now.

    Args:
      error: an `errors.Error`, or None when the line was already said.
      code: the exit status (default: the error's own).
      stream: where the line goes (default stderr).
    """
    if error is not None:
        try:
            errors.report(error, stream or sys.stderr)
        except (OSError, ValueError):
            pass  # stderr is gone (a closed terminal): end all the same
    for callback in _exit_callbacks:
        try:
            callback()
        except Exception:  # pylint: disable=broad-except
            pass
    if code is None:
        code = error.exit_code if error is not None else errors.EXIT_FAILED
    os._exit(code)  # pylint: disable=protected-access
