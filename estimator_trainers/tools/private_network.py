"""A private network namespace for the local cluster (Linux).

TensorFlow's gRPC servers bind every interface (`0.0.0.0:port`) and run any
graph a client sends them, unauthenticated: on a machine other hosts can
reach, a local cluster is remote code execution for anyone who finds the
ports. In a network namespace of its own, with only the loopback interface,
nothing outside can reach them. The launcher enters one before it starts
any task, so every task shares it: they talk to each other on 127.0.0.1 as
before, and have no other network (so no gs:// paths, no downloads).

An unprivileged process may create a network namespace inside a new user
namespace; this maps the caller's own uid and gid into it, so files keep
their owner and tasks run as the same user. It must run before the process
starts any thread: the kernel refuses `unshare(CLONE_NEWUSER)` in a
multithreaded process (EINVAL). Importing numpy starts OpenBLAS's threads,
so `tools/local.py` (train-local.sh), which imports the trainers, execs the
launcher as a fresh process instead of calling it.
"""
import ctypes
import fcntl
import os
import socket
import struct

_CLONE_NEWUSER = 0x10000000
_CLONE_NEWNET = 0x40000000
_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1
_IFREQ = '16sh22x'  # struct ifreq: interface name, then the flags union (40 bytes)


class Unavailable(Exception):
    """The kernel (or a sandbox) does not allow a private network namespace."""


class SetupFailed(Exception):
    """The namespace was made but could not be set up; the process is stuck in it."""


def enter() -> None:
    """Moves this process into a new network namespace with loopback up.

    Children started afterwards inherit it.

    Raises:
      Unavailable: with the reason, e.g. "unshare: Operation not permitted",
        or the threads this process already runs; the process is then still
        in the namespace it started in.
      SetupFailed: the namespaces exist but loopback is not up; the process
        cannot go back and must not start tasks.
    """
    uid, gid = os.geteuid(), os.getegid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        unshare = libc.unshare
    except (AttributeError, OSError) as e:
        raise Unavailable('no unshare(2) here (%s)' % e) from None
    threads = thread_count()
    if threads > 1:
        raise Unavailable('this process already runs %d threads; a private network '
                          'namespace must be made before any thread starts' % threads)
    if unshare(_CLONE_NEWUSER | _CLONE_NEWNET) != 0:
        raise Unavailable('unshare: %s' % os.strerror(ctypes.get_errno()))
    try:
        _write('/proc/self/setgroups', 'deny')
        _write('/proc/self/uid_map', '%d %d 1' % (uid, uid))
        _write('/proc/self/gid_map', '%d %d 1' % (gid, gid))
        _loopback_up()
    except OSError as e:
        raise SetupFailed('cannot set up the private network namespace (%s)' % e) from None


def thread_count() -> int:
    """Threads of this process (1 where /proc cannot tell)."""
    try:
        return len(os.listdir('/proc/self/task'))
    except OSError:
        return 1


def _write(path: str, text: str) -> None:
    with open(path, 'w') as f:
        f.write(text)


def _loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack(_IFREQ, b'lo', 0)
        flags = struct.unpack(_IFREQ, fcntl.ioctl(sock, _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, _SIOCSIFFLAGS, struct.pack(_IFREQ, b'lo', flags | _IFF_UP))
