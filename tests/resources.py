"""Resource bombs for tests: a CLI's peak memory, and a server that never stops sending."""
import contextlib
import http.server
import subprocess
import sys
import tempfile
import threading

import processes
from conftest import cli_env, REPO_ROOT


# Runs a module as `python -m` does, and at its exit writes the peak resident
# memory of the program itself (VmHWM: its own address space, since exec) to
# the file named by PEAK_FILE_ENV.
_MEASURED = r"""
import atexit, os, runpy, sys

def _peak():
    with open('/proc/self/status') as status:
        kib = next(line.split()[1] for line in status if line.startswith('VmHWM:'))
    with open(os.environ['%s'], 'w') as out:
        out.write(kib)

atexit.register(_peak)
del sys.argv[0]
runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)
"""
PEAK_FILE_ENV = 'ESTIMATOR_TRAINERS_TEST_PEAK_FILE'


def run_measured(module, *args, env=None, timeout=600):
    """Runs `python -m module args`; returns (CompletedProcess, peak RSS in bytes).

    The peak is the program's own (its VmHWM since exec), so a test can tell a
    file that was refused from one that was inflated into memory first. Not
    the `ru_maxrss` of `wait4`: Linux carries a process's high-water mark
    across fork and exec, so a child of the test process (hundreds of MB with
    TensorFlow loaded) reported the test process's size for its own.
    """
    with tempfile.TemporaryFile('w+') as out, tempfile.TemporaryFile('w+') as err, \
            tempfile.NamedTemporaryFile('r') as peak:
        process = processes.popen(
            [sys.executable, '-c', _MEASURED % PEAK_FILE_ENV, module] + [str(a) for a in args],
            cwd=REPO_ROOT, env=dict(cli_env(env), **{PEAK_FILE_ENV: peak.name}),
            stdin=subprocess.DEVNULL, stdout=out, stderr=err, text=True)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            processes.kill_tree(process, grace_secs=0)
            raise
        out.seek(0)
        err.seek(0)
        proc = subprocess.CompletedProcess(process.args, process.returncode, out.read(),
                                           err.read())
        kib = peak.read()
    assert kib, 'no peak recorded (did the module end with os._exit?):\n' + proc.stderr
    return proc, int(kib) * 1024


@contextlib.contextmanager
def endless_download(declared_length=None):
    """An HTTP server on loopback whose every answer is zeros that never end (or, with
    `declared_length`, a Content-Length header declaring that many); yields its URL."""

    class Endless(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # pylint: disable=invalid-name
            self.send_response(200)
            if declared_length is not None:
                self.send_header('Content-Length', str(declared_length))
            self.end_headers()
            try:
                while True:
                    self.wfile.write(b'\0' * (1 << 20))
            except OSError:  # the client stopped reading
                pass

        def log_message(self, *args):
            del args

    server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Endless)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield 'http://127.0.0.1:%d/download' % server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
