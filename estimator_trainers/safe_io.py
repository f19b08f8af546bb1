"""Writing files where other local users may have been first.

The default job-dirs and data dirs live in /tmp, where anyone can create a
directory, plant a symlink named like a temp file we are about to write, or
pre-create a log file. Everything here writes local files under names
nobody can predict, opened with `O_EXCL | O_NOFOLLOW`, and replaces the
target with `rename(2)`, which replaces a planted symlink instead of
following it. `gs://` paths have no such attacks; they are written with
TensorFlow's gfile under unique temp names and renamed (copy + delete).

TensorFlow is loaded only for gs:// paths and staged sets, on first use
(`logs.import_tensorflow`, without its start-up noise): the local launcher,
the cloud tools and the `--help` of the data tools use this module without it.
"""
import contextlib
import email.message
import hashlib
import os
import pwd
import shutil
import stat
import tempfile
import uuid
from typing import BinaryIO, Iterator, Optional, Protocol, Sequence, Union

from estimator_trainers import logs
from estimator_trainers.errors import UserInputError


BOM = '\ufeff'


def is_remote(path: str) -> bool:
    """True for URL-like paths (gs://...) that TensorFlow's gfile handles."""
    return '://' in path


def check_owner(path: str, flag: str) -> None:
    """Refuses a local directory owned by another user.

    Another user's directory (e.g. a `/tmp/taxi` created first) can hold
    symlinks they planted and files they can change under us. A path that
    does not exist yet is fine: it will be created by (and owned by) us.

    A symlink on the way to `path` that another user owns (root's are
    trusted) is refused too, wherever it leads: whoever planted `/tmp/taxi ->
    /home/you/other-job` chooses what a run overwrites.

    Raises:
      UserInputError: `path` exists and is owned by someone else, or is not a
        directory, or a symlink on the way is someone else's.
    """
    if is_remote(path):
        return
    foreign = _foreign_symlink(path)
    if foreign:
        link, uid = foreign
        raise UserInputError(
            '%s %s%s is a symlink owned by user %s, not by you (uid %d); refusing to follow '
            'it: another user chose where it leads. Use a directory of your own'
            % (flag, path, '' if link == os.path.abspath(path) else ': ' + link,
               _user_name(uid), os.geteuid()), flag=flag, path=link)
    try:
        info = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return  # not there yet (the caller says why it cannot be created)
    except OSError as e:
        raise UserInputError('%s %s: %s' % (flag, path, e.strerror)) from None
    if not stat.S_ISDIR(info.st_mode):
        raise UserInputError('%s %s is not a directory' % (flag, path))
    if info.st_uid != os.geteuid():
        raise UserInputError(
            '%s %s is owned by user %s, not by you (uid %d); files another user '
            'controls could redirect what is written there: use a directory of '
            'your own' % (flag, path, _user_name(info.st_uid), os.geteuid()))


def check_writable_directory(path: str, flag: str) -> None:
    """Refuses a local directory `flag` names that cannot be written; writes nothing.

    Raises:
      UserInputError: it (or the directory it would be created in) is a
        file, on a read-only file system, or not writable by this user.
    """
    if is_remote(path):
        return
    existing = os.path.abspath(path)
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise UserInputError('%s %s cannot be created: %s is a file'
                             % (flag, path, existing), flag=flag, path=existing)
    if read_only_mount(existing):
        raise UserInputError('%s %s is on a read-only file system (%s)'
                             % (flag, path, existing), flag=flag, path=existing)
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UserInputError('%s %s%s is not writable by this user'
                             % (flag, path, '' if existing == os.path.abspath(path) else
                                ' cannot be created: %s' % existing), flag=flag,
                             path=existing)


def read_only_mount(path: str) -> bool:
    """Whether the file system holding the existing `path` is mounted read-only."""
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _foreign_symlink(path: str, max_links: int = 40) -> Optional[tuple[str, int]]:
    """(symlink, its owner's uid) of the first symlink resolving `path` meets that
    is owned by neither this user nor root; None if there is none.

    Resolves component by component as the kernel does (stopping at the first
    component that does not exist yet: we create the rest).
    """
    pending = os.path.abspath(path).split(os.sep)[1:]
    current = os.sep
    links = 0
    while pending:
        name = pending.pop(0)
        if name in ('', '.'):
            continue
        if name == '..':
            current = os.path.dirname(current)
            continue
        candidate = os.path.join(current, name)
        try:
            info = os.lstat(candidate)
        except OSError:
            return None
        if not stat.S_ISLNK(info.st_mode):
            current = candidate
            continue
        if info.st_uid not in (os.geteuid(), 0):
            return candidate, info.st_uid
        links += 1
        if links > max_links:
            return None  # a loop: os.stat reports it
        target = os.readlink(candidate)
        if os.path.isabs(target):
            current = os.sep
        pending = target.split(os.sep) + pending
    return None


def _user_name(uid: int) -> str:
    try:
        return '%s (uid %d)' % (pwd.getpwuid(uid).pw_name, uid)
    except KeyError:
        return 'uid %d' % uid


def not_a_regular_file(path: str) -> Optional[str]:
    """What a local `path` is when it exists but is no regular file or directory
    (`'a pipe'`, `'a character device'`, ...), else None."""
    if is_remote(path):
        return None
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    for test, kind in ((stat.S_ISFIFO, 'a pipe'), (stat.S_ISCHR, 'a character device'),
                       (stat.S_ISBLK, 'a block device'), (stat.S_ISSOCK, 'a socket')):
        if test(mode):
            return kind
    return 'not a regular file'


class Download(Protocol):
    """What `copy_at_most` reads: a `urllib` response (`http.client.HTTPResponse`)."""

    @property
    def headers(self) -> Optional[email.message.Message]: ...

    def read(self, amt: int) -> bytes: ...


def copy_at_most(response: Download, target: BinaryIO, limit: int) -> bool:
    """Copies a download (`urllib` response) to the file `target`, up to `limit` bytes.

    Returns whether the whole download fit: False as soon as its
    Content-Length declares more, or its bytes pass `limit` (a mirror that
    serves an endless stream would otherwise fill the disk).
    """
    declared = response.headers.get('Content-Length') if response.headers else None
    if declared and declared.isdigit() and int(declared) > limit:
        return False
    left = limit + 1
    while left:
        chunk = response.read(min(1 << 20, left))
        if not chunk:
            return True
        target.write(chunk)
        left -= len(chunk)
    return False


def size_text(count: float) -> str:
    """`64 KiB`, `1.5 GiB`: a byte count for messages."""
    units = ('bytes', 'KiB', 'MiB', 'GiB', 'TiB')
    power = 0
    while count >= 1024 and power < len(units) - 1:
        count /= 1024.0
        power += 1
    unit = units[power]
    text = ('%d %s' if unit == 'bytes' or count == int(count) else '%.1f %s')
    return text % (count, unit)


def write_atomic(path: str, text: Union[str, bytes]) -> None:
    """Writes `text` (str, as UTF-8, or bytes) to `path` (local or gs://) so readers
    see old or new, whole; a failure (a full disk) leaves no temporary file."""
    if is_remote(path):
        mode = 'wb' if isinstance(text, bytes) else 'w'
        tf = logs.import_tensorflow()
        tmp = '%s.tmp-%s' % (path, uuid.uuid4().hex)
        try:
            with tf.io.gfile.GFile(tmp, mode) as f:
                f.write(text)
            tf.io.gfile.rename(tmp, path, overwrite=True)
        except BaseException:
            with contextlib.suppress(tf.errors.OpError):
                tf.io.gfile.remove(tmp)
            raise
        return
    data = text if isinstance(text, bytes) else text.encode('utf-8')
    directory = os.path.dirname(path) or '.'
    # mkstemp: O_CREAT | O_EXCL | O_NOFOLLOW, mode 0600, unpredictable name.
    fd, tmp = tempfile.mkstemp(dir=directory, prefix='.%s.' % os.path.basename(path),
                               suffix='.tmp')
    try:
        with os.fdopen(fd, 'wb') as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644 & ~_umask())
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError) and e.filename is None:
            e.filename = path  # a full disk's write names no file: say which
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def open_append(path: str, what: str) -> BinaryIO:
    """Opens a local file of ours for appending (binary), creating it if absent.

    Refuses (one line) a symlink or a file someone else owns at `path`,
    rather than writing through it.
    """
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | getattr(os, 'O_CLOEXEC', 0)
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as e:
        if os.path.islink(path):
            raise UserInputError('%s %s is a symlink; refusing to write through it '
                                 '(remove it)' % (what, path)) from None
        raise UserInputError('%s %s: %s' % (what, path, e.strerror)) from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
        os.close(fd)
        raise UserInputError('%s %s is not a regular file of yours; refusing to write '
                             'to it (remove it)' % (what, path))
    return os.fdopen(fd, 'ab')


@contextlib.contextmanager
def staged_files(directory: str, names: Sequence[str], flag: str) -> Iterator[str]:
    """Writes a set of files that must change together, then publishes them.

    Yields a fresh private staging directory inside `directory` (so renames
    stay on one file system, and a bucket root works too); the caller writes
    every file of `names` there. Only when the block completes are they moved
    into `directory`, last name last: it is removed from `directory` first,
    so an interrupted publish leaves the set without its last file (e.g. a
    data set without `metadata.json`, which readers refuse) rather than a
    mix that looks complete. A failure inside the block leaves `directory`
    as it was. The staging directory is removed either way.

    Raises:
      UserInputError: (before anything is written) `directory` is a file, or
        one of `names` in it is a directory; `flag` names the directory.
    """
    tf = logs.import_tensorflow()
    gfile = tf.io.gfile
    if gfile.exists(directory) and not gfile.isdir(directory):
        raise UserInputError('%s %s is a file; expected a directory' % (flag, directory))
    for name in names:
        if gfile.isdir(os.path.join(directory, name)):
            raise UserInputError('%s %s: %s is a directory; expected to write a file '
                                 'there (move it away)' % (flag, directory, name))
    gfile.makedirs(directory)
    if is_remote(directory):
        staging = os.path.join(directory, '.staging-%s' % uuid.uuid4().hex)
        gfile.makedirs(staging)
    else:
        staging = tempfile.mkdtemp(dir=directory, prefix='.staging-')
    try:
        yield staging
        missing = [n for n in names if not gfile.exists(os.path.join(staging, n))]
        if missing:
            raise RuntimeError('staged set lacks %s' % ', '.join(missing))
        last = os.path.join(directory, names[-1])
        if gfile.exists(last):
            gfile.remove(last)
        for name in names:
            gfile.rename(os.path.join(staging, name), os.path.join(directory, name),
                         overwrite=True)
    finally:
        if is_remote(staging):
            with contextlib.suppress(tf.errors.OpError):
                gfile.rmtree(staging)
        else:
            shutil.rmtree(staging, ignore_errors=True)


def file_digest(path: str, algorithm: str) -> str:
    """Hex digest (`hashlib` algorithm name, e.g. sha256) of a local file, read in 1 MiB chunks."""
    digest = hashlib.new(algorithm)
    with open(path, 'rb') as f:
        for chunk in iter(lambda: f.read(1 << 20), b''):
            digest.update(chunk)
    return digest.hexdigest()
