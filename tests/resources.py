"""Resource bombs for tests: a CLI's peak memory, and a server that never stops sending."""
import contextlib
import http.server
import os
import subprocess
import sys
import tempfile
import threading
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
