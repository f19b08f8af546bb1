"""A sweep's `--out` as carefully as a job-dir: one sweep at a time, faults in one line.

- `Lock`: `<out>/LOCK.json`, held with `flock(2)` while a sweep runs into
  `--out`; a second sweep there is refused in one line naming the first (two
  sweeps on one `--out` ran each other's points into their job-dir leases).
  The kernel releases a `flock` however its process ends (`kill -9` too), so
  a lock is never stale.
- `faults_as_lines`: a write under `--out` that fails because the file system
  is full or read-only (results, plots, logs, the lock) ends the command with
  one line naming `--out` and the file, not a traceback. Every file there is
  written whole (`safe_io.write_atomic`), so a failure leaves the previous
  file and no temporary.

No TensorFlow (the experiment CLI's `--help` stays instant).
"""
import contextlib
import datetime
import errno
import fcntl
import json
import os
import shlex
import socket
import stat
import sys
import types
from typing import Iterator, Optional, Sequence

from estimator_trainers import user_files
from estimator_trainers.errors import TaskFailure
from estimator_trainers.errors import UserInputError

LOCK_FILE = 'LOCK.json'
LOCK_LIMITS = user_files.Limits(bytes=64 << 10, depth=4, values=1000)
_FULL = (errno.ENOSPC, errno.EDQUOT)


class Lock:
    """`<out>/LOCK.json` held by this process while its sweep runs (a context manager).

    Args:
      out: the sweep's `--out` (it must exist).
      argv: this command's arguments, named in a refusal of another sweep.
    """

    def __init__(self, out: str, argv: Sequence[str]) -> None:
        self.path = os.path.join(out, LOCK_FILE)
        self.out = out
        self._argv = list(argv)
        self._fd: Optional[int] = None

    def __enter__(self) -> 'Lock':
        for _ in range(3):
            fd = self._open()
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise UserInputError(
                    '--out %s is in use by another sweep: %s (lock %s); wait for it to '
                    'finish or use another --out' % (self.out, self._holder(), self.path),
                    flag='--out', path=self.path) from None
            # Locked: but a holder that was just releasing may have removed the
            # file this descriptor opened; lock the file the path names.
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(self.path, follow_symlinks=False))
            except FileNotFoundError:
                same = False
            if same:
                self._fd = fd
                break
            os.close(fd)
        else:
            raise UserInputError('--out %s: could not take its lock %s; another sweep keeps '
                                 'taking it' % (self.out, self.path), flag='--out')
        text = json.dumps({'pid': os.getpid(), 'host': socket.gethostname(),
                           'started_at': datetime.datetime.now(datetime.timezone.utc)
                           .isoformat(timespec='seconds'),
                           'command': shlex.join([os.path.basename(sys.executable), '-m',
                                                  'estimator_trainers.tools.experiment']
                                                 + self._argv)})
        os.ftruncate(fd, 0)
        os.pwrite(fd, text.encode('utf-8'), 0)
        return self

    def __exit__(self, exc_type: Optional[type[BaseException]],
                 exc: Optional[BaseException],
                 traceback: Optional[types.TracebackType]) -> None:
        # Removed while still locked: a sweep that opens it meanwhile finds
        # another file at the path once it has the lock, and tries again.
        with contextlib.suppress(OSError):
            os.remove(self.path)
        if self._fd is not None:
            os.close(self._fd)
        self._fd = None

    def _open(self) -> int:
        """The lock file, opened (created if absent) without following a symlink."""
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
                         | os.O_NONBLOCK, 0o644)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise UserInputError('--out %s: %s is a symlink; refusing to write through '
                                     'it (remove it)' % (self.out, self.path),
                                     flag='--out', path=self.path) from None
            raise
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
            os.close(fd)
            raise UserInputError('--out %s: %s is not a regular file of yours; refusing to '
                                 'use it as the lock (remove it)' % (self.out, self.path),
                                 flag='--out', path=self.path)
        return fd

    def _holder(self) -> str:
        """`pid P on HOST since T: COMMAND` of the sweep holding the lock, as it wrote it."""
        try:
            owner = user_files.read_json(self.path, limits=LOCK_LIMITS)
        except UserInputError:
            owner = None
        if not isinstance(owner, dict):
            return 'a sweep that has not written its name yet'
        return 'pid %s on %s since %s: %s' % tuple(
            _shown(owner.get(key)) for key in ('pid', 'host', 'started_at', 'command'))


def _shown(value: object) -> str:
    """A field of another sweep's lock as one bounded line."""
    text = ''.join(c if c.isprintable() else '?' for c in str(value))
    return text if len(text) <= 300 else text[:297] + '...'


@contextlib.contextmanager
def faults_as_lines(out: str) -> Iterator[None]:
    """Ends a failing write under `out` (`--out`) with one line instead of a traceback.

    Raises:
      TaskFailure: the file system is full (exit 1): free space and rerun.
      UserInputError: it is read-only, or the file cannot be written (exit 2).
    """
    try:
        yield
    except OSError as e:
        where = ' (writing %s)' % e.filename if e.filename else ''
        if e.errno in _FULL:
            raise TaskFailure(
                'the file system of --out %s is full (%s)%s; the points that finished '
                'are kept in their job-dirs: free space and rerun the same command (they '
                'are skipped)' % (out, os.strerror(e.errno), where), flag='--out',
                path=out) from None
        if e.errno == errno.EROFS:
            raise UserInputError('--out %s is on a read-only file system%s' % (out, where),
                                 flag='--out', path=out) from None
        if e.filename and e.errno in (errno.EACCES, errno.EPERM, errno.ENAMETOOLONG,
                                      errno.ENOTDIR, errno.EISDIR):
            raise UserInputError('--out %s: cannot write %s (%s)' % (
                out, e.filename, e.strerror), flag='--out', path=e.filename) from None
        raise
