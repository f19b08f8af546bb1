"""Running a CLI with its peak memory measured: resource bombs must stay bounded."""
import os
import subprocess
import sys
import tempfile
import time

import processes
from conftest import cli_env, REPO_ROOT


def run_measured(module, *args, env=None, timeout=600):
    """Runs `python -m module args`; returns (CompletedProcess, peak RSS in bytes).

    The peak is the process's own (reaped with `wait4`), so a test can tell a
    file that was refused from one that was inflated into memory first.
    """
    with tempfile.TemporaryFile('w+') as out, tempfile.TemporaryFile('w+') as err:
        process = processes.popen([sys.executable, '-m', module] + [str(a) for a in args],
                                  cwd=REPO_ROOT, env=cli_env(env), stdin=subprocess.DEVNULL,
                                  stdout=out, stderr=err, text=True)
        deadline = time.monotonic() + timeout
        while True:
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                processes.kill_tree(process, grace_secs=0)
                raise subprocess.TimeoutExpired(process.args, timeout)
            time.sleep(0.05)
        process.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        proc = subprocess.CompletedProcess(process.args, process.returncode, out.read(),
                                           err.read())
    return proc, usage.ru_maxrss * 1024  # Linux reports KiB
