"""Processes the tests start: each in its own process group, none outliving its test.

`popen` and `run` start a command in a new session (its process group id is
its pid) and register it. The autouse fixture `kill_test_processes` stops every
registered process tree still running when its test ends, whether it passed,
failed or timed out: SIGTERM to the group first (the launcher then stops its
tasks, which run in their own groups), SIGKILL to the whole tree after a grace
period. `no_leftover_processes` (session, autouse) then fails the run loudly
if any process of the suite is still alive at its end: a descendant of pytest
(pytest is made a child subreaper, so orphans of killed tasks count too), or a
process whose command line or environment names this session's temporary
directory. Linux only (it reads /proc).
"""
import ctypes
import os
import signal
import subprocess
import time

import pytest

_PR_SET_CHILD_SUBREAPER = 36
_STARTED = []  # Popen objects of the current test


def popen(command, **kwargs):
    """`subprocess.Popen` in a new session, killed (with its tree) after the test."""
    process = subprocess.Popen(command, start_new_session=True,  # pylint: disable=consider-using-with
                               **kwargs)
    _STARTED.append(process)
    return process


def run(command, timeout, **kwargs):
    """Like `subprocess.run(capture_output=True, text=True)` in a new session.

    On a timeout (or any interruption) the whole process tree is killed
    before the exception propagates.
    """
    process = popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                    **kwargs)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except BaseException:
        kill_tree(process, grace_secs=0)
        process.communicate()
        raise
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def _processes():
    """pid -> (ppid, pgrp, state) of every process, from /proc."""
    table = {}
    for name in os.listdir('/proc'):
        if not name.isdigit():
            continue
        try:
            with open('/proc/%s/stat' % name) as f:
                fields = f.read().rsplit(')', 1)[1].split()
        except OSError:  # exited meanwhile
            continue
        table[int(name)] = (int(fields[1]), int(fields[2]), fields[0])
    return table


def _descendants(roots, table):
    """`roots` and every process below them in `table`, zombies excluded."""
    children = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = set(), list(roots)
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, ()))
    return {pid for pid in found if pid in table and table[pid][2] != 'Z'}


def _tree(process):
    """Live members of `process`'s group and their descendants, below pytest only.

    Limiting the search to pytest's descendants keeps a reused process id
    (pid_max can be 32768) from naming someone else's process group.
    """
    table = _processes()
    ours = _descendants([os.getpid()], table)
    group = [pid for pid in ours if table[pid][1] == process.pid]
    return _descendants(group, table) & ours


def _alive(pids):
    table = _processes()
    return {pid for pid in pids if pid in table and table[pid][2] != 'Z'}


def kill_tree(process, grace_secs=10):
    """Stops `process`, its group and its descendants; SIGKILL after `grace_secs`."""
    tree = _tree(process)
    if grace_secs and tree and process.poll() is None:  # unreaped: the group id is ours
        os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_secs
        while _alive(tree) and time.monotonic() < deadline:
            time.sleep(0.1)
    tree |= _tree(process)
    for pid in _alive(tree):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    process.poll()


@pytest.fixture(autouse=True)
def kill_test_processes():
    """Stops whatever the test started and left running (e.g. after it failed)."""
    yield
    while _STARTED:
        process = _STARTED.pop()
        kill_tree(process)
        if process.returncode is None:
            process.wait(10)


def _mentions(pid, text):
    """True if the command line or environment of `pid` contains `text`."""
    for part in ('cmdline', 'environ'):
        try:
            with open('/proc/%d/%s' % (pid, part), 'rb') as f:
                if text in f.read():
                    return True
        except OSError:  # gone, or not ours
            pass
    return False


def _describe(pid):
    try:
        with open('/proc/%d/cmdline' % pid, 'rb') as f:
            return '%d: %s' % (pid, f.read().replace(b'\0', b' ').decode(errors='replace'))
    except OSError:
        return '%d: (exited)' % pid


def leftover_processes(basetemp):
    """Live processes of this pytest run other than pytest itself."""
    me = os.getpid()
    table = _processes()
    marker = os.fsencode(str(basetemp).rstrip('/') + '/')
    left = _descendants([me], table) - {me}
    left |= {pid for pid, (_, _, state) in table.items()
             if state != 'Z' and pid != me and _mentions(pid, marker)}
    return sorted(left)


@pytest.fixture(scope='session', autouse=True)
def no_leftover_processes(tmp_path_factory):
    """Fails the session if any process the suite started is still running."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (AttributeError, OSError):
        pass  # orphans then escape the descendant scan; the path scan remains
    yield
    basetemp = tmp_path_factory.getbasetemp()
    left = leftover_processes(basetemp)
    deadline = time.monotonic() + 10  # trees being stopped by a test's own teardown
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = leftover_processes(basetemp)
    if left:
        described = [_describe(pid) for pid in left]
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        pytest.fail('processes of the test suite were left running (now killed):\n  %s'
                    % '\n  '.join(described), pytrace=False)
