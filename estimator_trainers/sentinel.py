"""A watcher process that ends its task when the task cannot end itself.

Python runs signal handlers, and any thread, only while some thread can take
the interpreter lock. A few TensorFlow calls keep that lock while they wait
in C++ (`MultiWorkerMirroredStrategy()` waiting for its peers' collective
set-up, for one): then neither a Python handler nor a watchdog thread runs,
SIGTERM is never acted on, and the task hangs until SIGKILL. The sentinel is
a small separate process that needs nothing from the task:

- Python's C-level signal handler writes each signal's number to the
  task's wakeup fd without the lock; that fd is a pipe to the sentinel, which
  passes each byte back on another pipe to the task's own watchdog thread
  (`faults.Termination`), so the task still ends itself whenever it can
  (with its lease released and its own exit status).
- When the task is still alive `grace + MARGIN_SECS` after a signal (its own
  watchdog could not run), the sentinel writes the task's one line to the
  task's stderr and ends it with SIGKILL. Around a call known to keep the
  lock (`Sentinel.window`) it does so at once. There TensorFlow may also
  have taken SIGTERM over (its preemption notifier records it and carries
  on): the sentinel then acts on a SIGTERM sent to the task's process group,
  which reaches it too (the launcher, `kill -TERM -PGID`); one sent to the
  task's pid alone is lost to TensorFlow until the window's deadline.
- A window's deadline is kept by `faulthandler`'s watchdog, a C thread that
  needs no lock: it writes a traceback into a pipe to the sentinel and exits
  the task with status 1; the sentinel writes the window's line instead of
  the traceback (or kills the task `MARGIN_SECS` later should that fail).
- The task tells it its grace and windows in JSON lines on a control pipe;
  the end of that pipe (the task exited) ends the sentinel.

Run by `Sentinel.start` as `python -m estimator_trainers.sentinel PID SIG_FD
CONTROL_FD ECHO_FD DUMP_FD LABEL GRACE_SECS`; besides the standard library it
imports only `errors`, to report the task's error as every command does.
"""
from __future__ import annotations

import contextlib
import faulthandler
import json
import os
import select
import signal
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Iterator, Optional, Sequence, TypedDict

from estimator_trainers import errors

if TYPE_CHECKING:  # typing.Unpack is Python 3.11's; Vertex AI's images run 3.10
    from typing import Unpack

# The signals a task stops on (faults.Termination): cancel/preemption,
# Ctrl-C, a closed terminal.
SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
# What the task's own watchdog gets before the sentinel acts for it.
MARGIN_SECS = 3
# A second Ctrl-C ends the task at once; its own watchdog gets this long.
SECOND_INTERRUPT_SECS = 1


class Control(TypedDict, total=False):
    """One control message from the task (a JSON line; `_Watch.control` applies it).

    Attributes:
      grace_secs: the task's grace after a stop signal, now.
      saving: whether the task is saving a checkpoint (said with `grace_secs`).
      window: the call that keeps the interpreter lock (`Sentinel.window`), or
        None when it returned.
      deadline_secs: how long that call may take, or None.
      deadline_error: the error recorded for the deadline (`errors.Error.record`).
    """
    grace_secs: float
    saving: bool
    window: Optional[str]
    deadline_secs: Optional[float]
    deadline_error: Optional[errors.ErrorRecord]


class Sentinel:
    """The task's side: start it, give Python's wakeup fd to it, tell it windows."""

    def __init__(self, process: 'subprocess.Popen[bytes]', wakeup_fd: int, control_fd: int,
                 echo_fd: int, dump_fd: int) -> None:
        self.process = process  # held: never reaped while the task runs
        self.wakeup_fd = wakeup_fd  # for signal.set_wakeup_fd
        self.echo_fd = echo_fd  # the signal numbers, back for the task's watchdog
        self._control_fd = control_fd
        self._dump_fd = dump_fd

    @classmethod
    def start(cls, label: str, grace_secs: float) -> Optional['Sentinel']:
        """Starts the sentinel of this process; None where it cannot be started."""
        sig_r, sig_w = os.pipe()
        control_r, control_w = os.pipe()
        echo_r, echo_w = os.pipe()
        dump_r, dump_w = os.pipe()
        os.set_blocking(sig_w, False)
        theirs = (sig_r, control_r, echo_w, dump_r)
        try:
            process = subprocess.Popen(  # pylint: disable=consider-using-with
                [sys.executable, '-m', 'estimator_trainers.sentinel', str(os.getpid())]
                + [str(fd) for fd in theirs] + [label, str(grace_secs)],
                pass_fds=theirs, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        except OSError:
            for fd in theirs + (sig_w, control_w, echo_r, dump_w):
                os.close(fd)
            return None
        for fd in theirs:
            os.close(fd)
        return cls(process, sig_w, control_w, echo_r, dump_w)

    def tell(self, **message: Unpack[Control]) -> None:
        """Sends one control message (see `_Watch.control`); lost if the sentinel is gone."""
        try:
            os.write(self._control_fd, (json.dumps(message) + '\n').encode())
        except OSError:
            pass

    @contextlib.contextmanager
    def window(self, what: str, deadline_secs: Optional[float] = None,
               deadline_error: Optional[errors.Error] = None) -> Iterator[None]:
        """Marks a call that keeps the interpreter lock while it waits in TensorFlow.

        Inside, a signal ends the task at once with a line naming `what`;
        `deadline_secs` passing ends it with status 1 and `deadline_error`'s
        line (an `errors.Error`).
        """
        self.tell(window=what, deadline_secs=deadline_secs,
                  deadline_error=deadline_error.record() if deadline_error else None)
        if deadline_secs is not None:
            faulthandler.dump_traceback_later(deadline_secs, exit=True, file=self._dump_fd)
        try:
            yield
        finally:
            if deadline_secs is not None:
                faulthandler.cancel_dump_traceback_later()
            self.tell(window=None)


class _Watch:
    """The sentinel's state: the task's grace, its window, the signal being acted on."""

    def __init__(self, echo_fd: int, label: str, grace_secs: float) -> None:
        self.echo_fd = echo_fd
        self.label = label
        self.grace_secs = grace_secs
        self.saving = False
        self.window: Optional[str] = None
        self.deadline: Optional[tuple[float, errors.Error]] = None  # (monotonic time, error)
        # (signal number, monotonic time to act)
        self.pending: Optional[tuple[int, float]] = None

    def control(self, message: Control) -> None:
        """Applies one message: `grace_secs`/`saving`, or `window` (None ends it)."""
        if 'grace_secs' in message:
            self.grace_secs = message['grace_secs']
            self.saving = bool(message.get('saving'))
            if self.pending:
                self.pending = (self.pending[0], self._due())
        if 'window' in message:
            self.window = message['window']
            secs = message.get('deadline_secs')
            record = message.get('deadline_error')
            self.deadline = ((time.monotonic() + secs + MARGIN_SECS,
                              errors.from_record(record))
                             if self.window and secs is not None and record else None)

    def _due(self) -> float:
        return time.monotonic() + self.grace_secs + MARGIN_SECS

    def stopped(self, signum: int, why: str) -> errors.TaskFailure:
        """The task's error for a stop by `signum`, `why` it is the sentinel's to say."""
        return errors.TaskFailure('%s: stopped on %s (%s)' % (
            self.label, signal.Signals(signum).name, why), exit_code=128 + signum)

    def on_signal(self, signum: int) -> Optional[errors.Error]:
        """Returns the error to end the task with now, or None."""
        try:
            os.write(self.echo_fd, bytes([signum]))
        except OSError:
            pass
        if signum not in SIGNALS:
            return None
        if self.window:
            return self.stopped(signum, self.window)
        if self.pending is None:
            self.pending = (signum, self._due())
        elif signum == signal.SIGINT:  # Ctrl-C after a stop signal: at once
            self.pending = (signum, min(self.pending[1],
                                        time.monotonic() + SECOND_INTERRUPT_SECS))
        return None

    def next_timeout(self) -> Optional[float]:
        """Seconds until the next deadline or pending stop, None when there is none."""
        times = [t for t in (self.deadline and self.deadline[0],
                             self.pending and self.pending[1]) if t]
        return max(0.0, min(times) - time.monotonic()) if times else None

    def expired(self) -> Optional[errors.Error]:
        """The error to end the task with when a deadline passed, else None."""
        now = time.monotonic()
        if self.deadline and now >= self.deadline[0]:
            return self.deadline[1]
        if self.pending and now >= self.pending[1]:
            return self.stopped(self.pending[0], 'it did not end within %gs: its main thread '
                                'is blocked inside TensorFlow%s' % (
                                    self.grace_secs + MARGIN_SECS,
                                    '; no checkpoint saved' if self.saving else ''))
        return None


def main(argv: Sequence[str]) -> int:
    """The sentinel process (arguments: see the module's docstring)."""
    pid, sig_fd, control_fd, echo_fd, dump_fd = (int(a) for a in argv[1:6])
    label, grace_secs = argv[6], float(argv[7])
    # Signals sent to the task's process group reach the sentinel too; only
    # inside a window, where TensorFlow may have taken them, does it act.
    own_r, own_w = os.pipe()
    os.set_blocking(own_w, False)
    signal.set_wakeup_fd(own_w, warn_on_full_buffer=False)
    for stop_signal in SIGNALS:
        signal.signal(stop_signal, lambda *_: None)
    watch = _Watch(echo_fd, label, grace_secs)
    buffered = b''
    readers = [dump_fd, sig_fd, control_fd, own_r]
    while True:
        ready = select.select(readers, [], [], watch.next_timeout())[0]
        error: Optional[errors.Error] = None
        if own_r in ready:
            for signum in os.read(own_r, 256):
                if watch.window and signum == signal.SIGTERM:
                    error = watch.stopped(signum, watch.window)
        if dump_fd in ready:
            if not os.read(dump_fd, 65536):
                readers.remove(dump_fd)
            elif watch.deadline:
                # faulthandler's watchdog: the window's deadline passed, the task exits 1.
                _report(watch.deadline[1])
                watch.deadline = None
        if control_fd in ready:
            data = os.read(control_fd, 65536)
            if not data:
                return 0  # the task has ended
            buffered += data
            while b'\n' in buffered:
                message, buffered = buffered.split(b'\n', 1)
                watch.control(json.loads(message))
        if sig_fd in ready:
            data = os.read(sig_fd, 256)
            if not data:
                return 0
            for signum in data:
                error = error or watch.on_signal(signum)
        error = error or watch.expired()
        if error:
            _end(pid, control_fd, error)
            return 0


def _end(pid: int, control_fd: int, error: errors.Error) -> None:
    """Reports the task's `error` and kills it, unless it has ended meanwhile."""
    if select.select([control_fd], [], [], 0)[0] and not os.read(control_fd, 65536):
        return
    _report(error)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _report(error: errors.Error) -> None:
    """The task's line on the stderr it shares with the task (gone after SIGHUP: silent)."""
    try:
        errors.report(error, sys.stderr)
    except (OSError, ValueError):
        pass


if __name__ == '__main__':
    sys.exit(main(sys.argv))
