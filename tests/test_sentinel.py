"""The sentinel process ends a task whose main thread holds the interpreter lock.

A task stands in for one blocked inside TensorFlow's C++ with the lock held:
it locks a pthread mutex twice through `ctypes.PyDLL`, which keeps the lock
during the call, and a mutex wait, like TensorFlow's, is not interrupted by
signals; neither a Python signal handler nor any thread of the task runs. The
task imports TensorFlow as the trainer command does (`logs.import_tensorflow`,
which `faults` needs) and installs `faults.Termination` as every trainer task
does.
"""
import signal
import subprocess
import sys
import textwrap
import time

import processes
from conftest import cli_env, REPO_ROOT
from estimator_trainers import faults
from estimator_trainers import sentinel

BLOCKED = textwrap.dedent('''\
    import ctypes, sys
    from estimator_trainers import logs
    logs.quiet_console()
    logs.import_tensorflow()
    from estimator_trainers import errors, faults

    def block():
        mutex, libc = ctypes.create_string_buffer(64), ctypes.PyDLL(None)
        libc.pthread_mutex_lock(mutex)
        libc.pthread_mutex_lock(mutex)  # waits for itself, holding the interpreter lock

    termination = faults.Termination('worker-0', print).install()
    print('blocking', flush=True)
    if sys.argv[1] == 'window':
        with termination.inside_tensorflow(
                'waiting inside TensorFlow for worker-1', 3,
                errors.TaskFailure('worker-1 never joined within 3s')):
            block()
    block()
''')


def _start(where):
    process = processes.popen([sys.executable, '-c', BLOCKED, where], cwd=REPO_ROOT,
                              env=cli_env(), stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout.readline() == 'blocking\n'
    time.sleep(0.5)  # inside the call
    return process


def test_a_signal_ends_a_task_its_own_threads_cannot_end():
    process = _start('outside')
    process.send_signal(signal.SIGTERM)
    started = time.monotonic()
    _, stderr = process.communicate(timeout=60)
    bound = faults.QUICK_EXIT_SECS + sentinel.MARGIN_SECS
    assert bound <= time.monotonic() - started <= bound + 5  # its watchdog's turn first
    assert process.returncode == -signal.SIGKILL
    assert stderr == ('error: worker-0: stopped on SIGTERM (it did not end within %ds: its '
                      'main thread is blocked inside TensorFlow)\n' % bound)


def test_inside_a_blocking_call_a_signal_ends_the_task_at_once():
    process = _start('window')
    process.send_signal(signal.SIGHUP)
    started = time.monotonic()
    _, stderr = process.communicate(timeout=60)
    assert time.monotonic() - started <= 2
    assert process.returncode == -signal.SIGKILL
    assert stderr == ('error: worker-0: stopped on SIGHUP (waiting inside TensorFlow for '
                      'worker-1)\n')


def test_a_blocking_call_past_its_deadline_ends_the_task_with_its_line():
    process = _start('window')
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 1  # faulthandler's watchdog exits; the sentinel says why
    assert stderr == 'error: worker-1 never joined within 3s\n'
