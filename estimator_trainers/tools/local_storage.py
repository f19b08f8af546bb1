"""A local Cloud Storage standing in for a job's buckets: a rehearsal without an account.

`LocalStorage` starts `storage_server` (fake-gcs-server behind a loopback TLS
proxy) in a process and session of its own, so that a Ctrl-C stops the
rehearsal's tasks first while their storage still answers, and stops it at
the end: SIGTERM, then SIGKILL after a bounded wait. The server also stops by
itself when this process is gone, and on Linux the kernel kills the emulator
with it, so nothing is left running. Their output goes to a log file in the
work dir.

`env()` is what a process needs to use it: TensorFlow's built-in gs:// client
(proxy, CA file, a test token instead of credentials, no stale caches,
short retries) and google-cloud-storage (`STORAGE_EMULATOR_HOST`). Nothing
reaches Google: the two Google host names end at the emulator; other hosts
(pip's index, a task's own downloads) are reached as they would be without
it.

The emulator keeps its objects in memory. What should outlive it is kept in
a *mirror*, a local directory with one directory per bucket and the objects
as files (a directory marker as a directory): `load` puts a gs:// prefix's
files from the mirror into the emulator, `save` writes a prefix back,
replacing what the mirror held there. A rehearsal loads and saves its job's
output directory, so a second rehearsal finds its checkpoints as a real
bucket would keep them, and the export can be opened where it was saved.

The cloud tools use it when they find no credentials (`credentials_configured`
says whether any are set up) or when asked to (`--local-storage`); the test
suite uses the same class for its gs:// tests (`tests/gcs_emulator.py`).
"""
import contextlib
import http.client
import json
import os
import select
import shutil
import signal
import stat
import subprocess
import sys
import time
import types
import urllib.parse
from typing import IO, Iterable, Iterator, Mapping, Optional, Sequence

from estimator_trainers import errors
from estimator_trainers import gcs
from estimator_trainers.tools import storage_server

SERVER_MODULE = 'estimator_trainers.tools.storage_server'
EMULATOR_VAR = 'STORAGE_EMULATOR_HOST'
# The mirror of rehearsals without credentials, under the user's cache.
CACHE_SUBDIR = os.path.join('estimator-trainers', 'local-storage')
LOG_FILE = 'local-storage.log'
# Retries per failed gs:// request in the tasks: a local emulator does not
# fail transiently for long, and TensorFlow's default retries for minutes.
DEFAULT_RETRIES = 3
READY_TIMEOUT_SECS = storage_server.START_TIMEOUT_SECS * 2
STOP_TIMEOUT_SECS = storage_server.STOP_TIMEOUT_SECS + 5
ADC_VAR = 'GOOGLE_APPLICATION_CREDENTIALS'
_LIST_PAGE = 1000
_PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))


def default_mirror(environ: Optional[Mapping[str, str]] = None) -> str:
    """`$XDG_CACHE_HOME/estimator-trainers/local-storage` (else under `~/.cache`)."""
    environ = os.environ if environ is None else environ
    cache = environ.get('XDG_CACHE_HOME') or os.path.join(os.path.expanduser('~'), '.cache')
    return os.path.join(cache, CACHE_SUBDIR)


def credentials_configured(environ: Optional[Mapping[str, str]] = None) -> bool:
    """Whether Application Default Credentials are set up at all: a key file
    named by `GOOGLE_APPLICATION_CREDENTIALS`, or gcloud's ADC file.

    When `google.auth.default()` finds none and this is False, there is
    nothing to fix but to log in, and a rehearsal can use local storage; when
    it fails and this is True, the credentials are broken and say so.
    """
    environ = os.environ if environ is None else environ
    if environ.get(ADC_VAR):
        return True
    config = environ.get('CLOUDSDK_CONFIG') or os.path.join(
        os.path.expanduser('~'), '.config', 'gcloud')
    return os.path.exists(os.path.join(config, 'application_default_credentials.json'))


def credentials_missing(environ: Optional[Mapping[str, str]] = None) -> bool:
    """Whether this machine has no Application Default Credentials at all: none
    set up (`credentials_configured`), and google-auth finds none (no metadata
    server either). Broken credentials are not missing: they say what to fix."""
    if credentials_configured(environ):
        return False
    import google.auth  # pylint: disable=import-outside-toplevel
    from google.auth import exceptions  # pylint: disable=import-outside-toplevel
    try:
        google.auth.default()  # type: ignore[no-untyped-call]
    except exceptions.DefaultCredentialsError:
        return True
    return False


class LocalStorage:
    """The storage server process: `start()`, `env()`, `stop()` (or `with`).

    Attributes:
      work_dir: where its certificate, CA file and log live.
      port: the emulator's plain HTTP port (`request`).
      proxy_port: the proxy's port (`https_proxy`, `STORAGE_EMULATOR_HOST`).
      ca_file: the CA file of the system's authorities plus its certificate.
      pids: the server's and the emulator's process ids, once started.
    """

    def __init__(self, work_dir: str, retries: int = DEFAULT_RETRIES) -> None:
        self.work_dir = os.path.abspath(work_dir)
        self.retries = retries
        self.log_path = os.path.join(self.work_dir, LOG_FILE)
        self.port = 0
        self.proxy_port = 0
        self.ca_file = ''
        self.pids: tuple[int, ...] = ()
        self._process: Optional['subprocess.Popen[str]'] = None

    def start(self) -> 'LocalStorage':
        """Starts the server and waits (at most `READY_TIMEOUT_SECS`) until it answers.

        Raises:
          errors.Error: it could not start (its one line: no emulator
            binary, no openssl, no free port), or did not answer in time.
        """
        os.makedirs(self.work_dir, exist_ok=True)
        record = os.path.join(self.work_dir, 'local-storage-error.json')
        if os.path.exists(record):
            os.remove(record)
        env = dict(os.environ, **{errors.ERROR_RECORD_ENV: record})
        env['PYTHONPATH'] = os.pathsep.join(
            [_PACKAGE_PARENT] + ([env['PYTHONPATH']] if env.get('PYTHONPATH') else []))
        with open(self.log_path, 'ab') as log:
            self._process = subprocess.Popen(  # pylint: disable=consider-using-with
                [sys.executable, '-m', SERVER_MODULE, '--work-dir', self.work_dir,
                 '--log', self.log_path, '--parent', str(os.getpid())],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log, text=True,
                env=env, cwd=self.work_dir, start_new_session=True)
        try:
            ready = self._ready_line()
        except BaseException:
            self.stop()
            raise
        if ready is None:
            self.stop()
            raise errors.read_record(record) or errors.Error(
                'local storage did not start within %d s; its log: %s'
                % (READY_TIMEOUT_SECS, self.log_path))
        self.port, self.proxy_port = ready['port'], ready['proxy_port']
        self.pids = (ready['pid'], ready['emulator_pid'])
        self.ca_file = os.path.join(self.work_dir, storage_server.CA_FILE)
        return self

    def _ready_line(self) -> Optional[dict[str, int]]:
        """The server's ports, or None when it exits or stays silent too long."""
        assert self._process is not None and self._process.stdout is not None
        deadline = time.monotonic() + READY_TIMEOUT_SECS
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            readable, _, _ = select.select([self._process.stdout], [], [], left)
            if readable:
                line = self._process.stdout.readline()
                if not line:
                    return None
                ready = json.loads(line)
                return {key: int(ready[key])
                        for key in ('port', 'proxy_port', 'pid', 'emulator_pid')}

    def stop(self) -> None:
        """Stops the server (SIGTERM, SIGKILL after `STOP_TIMEOUT_SECS`); idempotent."""
        process, self._process = self._process, None
        if process is None:
            return
        for signum, wait in ((signal.SIGTERM, STOP_TIMEOUT_SECS), (signal.SIGKILL, 10)):
            if process.poll() is not None:
                break
            process.send_signal(signum)
            try:
                process.wait(wait)
            except subprocess.TimeoutExpired:
                continue
        if process.stdout is not None:
            process.stdout.close()

    def __enter__(self) -> 'LocalStorage':
        return self.start()

    def __exit__(self, kind: Optional[type], value: Optional[BaseException],
                 trace: Optional[types.TracebackType]) -> None:
        self.stop()

    def env(self) -> dict[str, str]:
        """The variables that point TensorFlow, TensorBoard and google-cloud-storage here."""
        proxy = 'http://127.0.0.1:%d' % self.proxy_port
        return {
            'https_proxy': proxy, 'http_proxy': proxy, 'no_proxy': '127.0.0.1,localhost',
            'CURL_CA_BUNDLE': self.ca_file,
            # TensorFlow's client sends it instead of looking for credentials
            # (and for the metadata server).
            'GOOGLE_AUTH_TOKEN_FOR_TESTING': 'local-storage',
            'GCS_STAT_CACHE_MAX_AGE': '0',
            'GCS_READ_CACHE_MAX_SIZE_MB': '0',
            'GCS_RETRY_CONFIG_MAX_RETRIES': str(self.retries),
            # Through the proxy too, which answers testIamPermissions.
            EMULATOR_VAR: proxy,
        }

    def request(self, method: str, path: str, body: Optional[str] = None) -> tuple[int, str]:
        """One JSON API request straight to the emulator: (status, body text)."""
        return storage_server.request(self.port, method, path, body)

    def create_bucket(self, name: str) -> str:
        """Creates bucket `name` (no-op when it exists); returns `gs://name`."""
        status, body = self.request('POST', '/storage/v1/b?project=local-storage',
                                    json.dumps({'name': name}))
        if status not in (200, 409):
            raise errors.Error('local storage: creating bucket %s: HTTP %d %s'
                               % (name, status, body[:200]))
        return 'gs://' + name

    def list_objects(self, bucket: str, prefix: str = '') -> list[str]:
        """Object names in `bucket` under `prefix` (markers included)."""
        names: list[str] = []
        token = None
        while True:
            query = {'prefix': prefix, 'maxResults': str(_LIST_PAGE)}
            if token:
                query['pageToken'] = token
            status, body = self.request('GET', '/storage/v1/b/%s/o?%s' % (
                urllib.parse.quote(bucket), urllib.parse.urlencode(query)))
            if status == 404:
                return names
            if status != 200:
                raise errors.Error('local storage: listing gs://%s/%s: HTTP %d'
                                   % (bucket, prefix, status))
            page = json.loads(body)
            names += [item['name'] for item in page.get('items', ())]
            token = page.get('nextPageToken')
            if not token:
                return names

    def _connection(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection('127.0.0.1', self.port, timeout=120)

    def upload(self, bucket: str, name: str, path: Optional[str]) -> None:
        """Object `name` with the bytes of file `path` (None: an empty directory marker)."""
        conn = self._connection()
        try:
            target = '/upload/storage/v1/b/%s/o?uploadType=media&name=%s' % (
                urllib.parse.quote(bucket), urllib.parse.quote(name, safe=''))
            headers = {'Content-Type': 'application/octet-stream'}
            if path is None:
                conn.request('POST', target, body=b'', headers=headers)
            else:
                with open(path, 'rb') as f:
                    headers['Content-Length'] = str(os.fstat(f.fileno()).st_size)
                    conn.request('POST', target, body=f, headers=headers)
            response = conn.getresponse()
            response.read()
        finally:
            conn.close()
        if response.status != 200:
            raise errors.Error('local storage: writing gs://%s/%s: HTTP %d'
                               % (bucket, name, response.status))

    def download(self, bucket: str, name: str, target: IO[bytes]) -> None:
        """Writes the bytes of object `name` to `target`."""
        conn = self._connection()
        try:
            conn.request('GET', '/storage/v1/b/%s/o/%s?alt=media' % (
                urllib.parse.quote(bucket), urllib.parse.quote(name, safe='')))
            response = conn.getresponse()
            if response.status != 200:
                raise errors.Error('local storage: reading gs://%s/%s: HTTP %d'
                                   % (bucket, name, response.status))
            shutil.copyfileobj(response, target)
        finally:
            conn.close()

    def load(self, mirror: str, prefixes: Iterable[str]) -> int:
        """Puts the mirror's files under each gs:// prefix into the emulator (their
        buckets created); returns how many objects that made."""
        count = 0
        for uri in prefixes:
            bucket, name = gcs.split(uri.rstrip('/'))
            self.create_bucket(bucket)
            top = _mirror_path(mirror, bucket, name)
            if top is None or not os.path.isdir(top):
                continue
            root = os.path.join(mirror, bucket)
            for directory, dirs, files in os.walk(top):
                dirs.sort()
                relative = os.path.relpath(directory, root).replace(os.sep, '/')
                base = '' if relative == '.' else relative + '/'
                if base:
                    self.upload(bucket, base, None)
                    count += 1
                for file_name in sorted(files):
                    path = os.path.join(directory, file_name)
                    if stat.S_ISREG(os.lstat(path).st_mode):
                        self.upload(bucket, base + file_name, path)
                        count += 1
        return count

    def save(self, mirror: str, prefixes: Iterable[str]) -> dict[str, str]:
        """Writes each gs:// prefix's objects into the mirror, replacing what it
        held there; returns {prefix: mirror directory} of those that hold objects
        (an empty one leaves the mirror as it was)."""
        written = {}
        for uri in prefixes:
            bucket, name = gcs.split(uri.rstrip('/'))
            target = _mirror_path(mirror, bucket, name)
            start = name + '/' if name else ''
            names = self.list_objects(bucket, start)
            if target is None or not names:
                continue
            staging = '%s.saving-%d' % (target, os.getpid())
            shutil.rmtree(staging, ignore_errors=True)
            os.makedirs(staging)
            for object_name in names:
                path = _mirror_path(staging, '', object_name[len(start):])
                if path is None:
                    continue  # not a file name ('..', '//'): a real bucket holds it
                if object_name.endswith('/'):
                    os.makedirs(path, exist_ok=True)
                elif not os.path.isdir(path):
                    os.makedirs(os.path.dirname(path), exist_ok=True)
                    with open(path, 'wb') as f:
                        self.download(bucket, object_name, f)
            old = '%s.old-%d' % (target, os.getpid())
            if os.path.exists(target):
                os.rename(target, old)
            os.rename(staging, target)
            shutil.rmtree(old, ignore_errors=True)
            written[uri] = target
        return written


def mirrored(mirror: str, uri: str) -> Optional[str]:
    """Where `mirror` keeps gs:// `uri` (None for a name that is no relative path)."""
    return _mirror_path(mirror, *gcs.split(uri.rstrip('/')))


def _mirror_path(mirror: str, bucket: str, name: str) -> Optional[str]:
    """Where object (or prefix) `name` of `bucket` lives in `mirror`, or None for a
    name that is not a relative path (empty, `.` or `..` segments)."""
    parts = name.rstrip('/').split('/') if name.rstrip('/') else []
    if any(part in ('', '.', '..') for part in parts):
        return None
    return os.path.join(mirror, bucket, *parts) if bucket else os.path.join(mirror, *parts)


@contextlib.contextmanager
def serving(work_dir: str, mirror: str, kept: Sequence[str], buckets: Iterable[str],
            stream: IO[str]) -> Iterator[LocalStorage]:
    """Local storage for a run, its environment in this process meanwhile.

    Started with `buckets` made and the `kept` gs:// prefixes loaded from
    `mirror`; on leaving (however), the `kept` prefixes are written back to
    the mirror, each said on `stream` (a failure to write is a warning), and
    the storage is stopped.
    """
    with LocalStorage(work_dir) as storage:
        for bucket in sorted(set(buckets)):
            storage.create_bucket(bucket)
        storage.load(mirror, kept)
        with environment(storage.env()):
            try:
                yield storage
            finally:
                try:
                    for uri, path in storage.save(mirror, kept).items():
                        stream.write('local storage: %s is kept in %s\n' % (uri, path))
                except (OSError, errors.Error) as e:
                    stream.write('warning: local storage: %s could not be kept in %s (%s)\n'
                                 % (', '.join(kept), mirror, errors.first_line(e)))
                stream.flush()


@contextlib.contextmanager
def environment(env: Mapping[str, str]) -> Iterator[None]:
    """`env` in this process's environment meanwhile (libraries read it there:
    google-cloud-storage's `STORAGE_EMULATOR_HOST`, TensorFlow's gs:// client)."""
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def say(stream: IO[str], why: str, buckets: Iterable[str], mirror: str,
        project: Optional[str] = None) -> None:
    """The one line that says the storage is local, why, for what, and where it is kept."""
    stream.write('note: %s: rehearsing on local storage (fake-gcs-server) standing in for '
                 '%s%s; nothing reaches Google Cloud, and what the job writes is kept in %s\n'
                 % (why, ', '.join(sorted(set(buckets))) or 'the buckets',
                    ', in project %s' % project if project else '', mirror))
    stream.flush()
