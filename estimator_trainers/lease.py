"""One training job per job-dir: a lease object in the job-dir.

Two trainers on one job-dir would overwrite each other's checkpoints
silently. The chief of a job holds `<job-dir>/LEASE.json`, which names the
owner (host, pid, task), the job's cluster id and a heartbeat the owner
refreshes; a second job is refused in one line naming the owner. The other
tasks of the same cluster (same cluster id) share the chief's lease, and a
chief restarted with the same TF_CONFIG takes its predecessor's lease over.
A lease whose heartbeat is older than the timeout, or whose owner process is
gone from this host, is stale and taken over with a line saying so.

Creation is exclusive: locally with `O_CREAT | O_EXCL`; on gs:// with
google-cloud-storage's `if_generation_match=0` (the object must not exist)
where credentials allow, else by write-then-read-back with the
owner's unique token through tf.io.gfile, which leaves a window of one
request in which two starters can both write: the loser then reads another
token back and is refused, and a heartbeat that finds another owner's token
ends its process.
"""
import dataclasses
import hashlib
import json
import math
import os
import socket
import sys
import threading
import time
import uuid
from typing import Callable, Mapping, Optional

from google.auth import exceptions as auth_exceptions
import tensorflow as tf

from estimator_trainers import cluster as cluster_lib
from estimator_trainers import google_api
from estimator_trainers import job_dir as job_dir_lib
from estimator_trainers import process
from estimator_trainers import user_files
from estimator_trainers.errors import TaskFailure
from estimator_trainers.errors import UserInputError

DEFAULT_TIMEOUT_SECS = 300
# A lease is a few hundred bytes of JSON.
LEASE_LIMITS = user_files.Limits(bytes=64 << 10, depth=4, values=100)
# The HTTP status of a create whose `if_generation_match=0` found the object there.
PRECONDITION_FAILED = 412


@dataclasses.dataclass(frozen=True)
class Owner:
    """Who holds a lease (the JSON content of the lease object)."""
    token: str
    cluster_id: str
    host: str
    pid: int
    pid_start: str
    task: str
    heartbeat: float

    def describe(self) -> str:
        """`chief-0 (pid 12 on host, heartbeat ...)`, for messages."""
        return '%s (pid %d on %s, heartbeat %s)' % (
            self.task, self.pid, self.host,
            time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(self.heartbeat)))


def cluster_id(cluster: cluster_lib.ClusterInfo,
               environ: Optional[Mapping[str, str]] = None) -> str:
    """Identifies one job: tasks of one cluster agree on it, other jobs do not.

    A cluster is its TF_CONFIG `cluster` dict plus the job id a platform sets
    (Vertex and AI Platform set `CLOUD_ML_JOB_ID`); a single process without
    TF_CONFIG is a job of its own.
    """
    environ = os.environ if environ is None else environ
    if not cluster.is_distributed:
        return 'local-%s' % uuid.uuid4().hex
    text = json.dumps({'cluster': cluster.cluster,
                       'job': environ.get('CLOUD_ML_JOB_ID', '')}, sort_keys=True)
    return 'cluster-%s' % hashlib.sha256(text.encode()).hexdigest()[:16]


def _well_formed(owner: Owner) -> bool:
    """Whether every field of a lease read back has the type `Owner` gives it.

    A lease edited by hand or garbled (`"pid": "x"`, `"heartbeat": null`) is
    unreadable, like one that is not JSON, rather than a traceback later.
    """
    texts = (owner.token, owner.cluster_id, owner.host, owner.pid_start, owner.task)
    return (all(isinstance(t, str) for t in texts)
            and isinstance(owner.pid, int) and not isinstance(owner.pid, bool)
            and 0 < owner.pid < 2 ** 31
            and isinstance(owner.heartbeat, (int, float))
            and not isinstance(owner.heartbeat, bool) and math.isfinite(owner.heartbeat))


def _pid_start(pid: int) -> str:
    """Start time of `pid` (clock ticks after boot): tells a reused pid apart."""
    try:
        with open('/proc/%d/stat' % pid) as f:
            return f.read().rsplit(')', 1)[1].split()[19]
    except (OSError, IndexError):
        return ''


class _LocalStore:
    """The lease object on a local file system."""

    def __init__(self, path: str) -> None:
        self.path = path

    def create(self, text: str) -> bool:
        """Writes `text` if no lease exists; returns whether it did."""
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                         0o644)
        except FileExistsError:
            return False
        try:
            with os.fdopen(fd, 'w') as f:
                f.write(text)
        except OSError:
            os.remove(self.path)  # e.g. a full disk: leave no empty lease behind
            raise
        return True

    def read(self) -> Optional[str]:
        """The lease's text; None when there is none, '' when it cannot be read (a
        pipe or a huge file planted there: unreadable, so stale)."""
        try:
            return user_files.read_text(self.path, self.path, LEASE_LIMITS, optional=True)
        except UserInputError:
            return ''

    def replace(self, text: str) -> None:
        """Puts `text` in place of the lease, whole (a rename)."""
        tmp = job_dir_lib.lease_temp_name(self.path)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, 'w') as f:
            f.write(text)
        os.replace(tmp, self.path)

    def delete(self) -> None:
        """Removes the lease; none there is fine."""
        try:
            os.remove(self.path)
        except FileNotFoundError:
            pass


class _GfileStore(_LocalStore):
    """The lease object on gs:// (or any tf.io.gfile file system)."""

    def create(self, text: str) -> bool:
        created = _create_gcs_object(self.path, text)
        if created is not None:
            return created
        if tf.io.gfile.exists(self.path):
            return False
        self.replace(text)
        return self.read() == text

    def replace(self, text: str) -> None:
        with tf.io.gfile.GFile(self.path, 'w') as f:
            f.write(text)

    def delete(self) -> None:
        try:
            tf.io.gfile.remove(self.path)
        except tf.errors.NotFoundError:
            pass


def _create_gcs_object(path: str, text: str) -> Optional[bool]:
    """Creates gs:// `path` only if absent (`if_generation_match=0`), through the one
    storage client (`google_api.storage_client`), not retried (a lost answer to a
    create that succeeded would read as another job's lease).

    Returns whether it did, or None where google-cloud-storage cannot be used
    (not a gs:// path, no credentials, no answer): then the caller falls back
    to write-then-read-back.
    """
    if not path.startswith('gs://'):
        return None
    bucket, _, name = path[len('gs://'):].partition('/')
    try:
        client = google_api.storage_client(None, None)
        blob = client.bucket(bucket).blob(name)
        google_api.storage_call(
            lambda: blob.upload_from_string(text, if_generation_match=0, retry=None,
                                            timeout=google_api.TIMEOUT_SECS),
            'creating the job-dir lease %s' % path, None, client.api_endpoint, retry=False)
    except google_api.ApiError as e:
        return False if e.status == PRECONDITION_FAILED else None
    except (auth_exceptions.GoogleAuthError, OSError):
        return None
    return True


def _store(job_dir: str) -> _LocalStore:
    """The store of `job_dir`'s lease: local, or gs:// (any tf.io.gfile path)."""
    path = job_dir_lib.lease_path(job_dir)
    return _GfileStore(path) if '://' in job_dir else _LocalStore(path)


class Lease:
    """The job-dir lease of this process's job.

    Args:
      job_dir: the --job-dir (it must exist).
      cluster_id: see `cluster_id`.
      task: this task's label (`chief-0`, `local`).
      timeout_secs: a heartbeat older than this is stale.
      log: callable taking one line (takeovers are logged through it).
    """

    def __init__(self, job_dir: str, cluster_id: str, task: str,
                 timeout_secs: float = DEFAULT_TIMEOUT_SECS,
                 log: Optional[Callable[[str], object]] = None) -> None:
        self.job_dir = job_dir
        self.cluster_id = cluster_id
        self.task = task
        self.timeout_secs = timeout_secs
        self._log = log or (lambda line: sys.stderr.write(line + '\n'))
        self._store = _store(job_dir)
        self._token = uuid.uuid4().hex
        self._held = False
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    @property
    def held(self) -> bool:
        """Whether this process holds the lease now."""
        return self._held

    def _owner_text(self) -> str:
        return json.dumps(dataclasses.asdict(Owner(
            token=self._token, cluster_id=self.cluster_id, host=socket.gethostname(),
            pid=os.getpid(), pid_start=_pid_start(os.getpid()), task=self.task,
            heartbeat=time.time())), sort_keys=True)

    def current_owner(self) -> Optional[Owner]:
        """The `Owner` in the job-dir, or None (no lease, or an unreadable one)."""
        text = self._store.read()
        if not text:
            return None
        try:
            owner = Owner(**user_files.parse_json(text, self._store.path, LEASE_LIMITS))
        except (UserInputError, TypeError):
            return None
        return owner if _well_formed(owner) else None

    def stale_reason(self, owner: Optional[Owner]) -> Optional[str]:
        """Why `owner`'s lease no longer counts, or None while it does."""
        if owner is None:
            return 'it is unreadable'
        if owner.host == socket.gethostname() and owner.pid_start != _pid_start(owner.pid):
            return 'its process %d on this host is gone' % owner.pid
        age = time.time() - owner.heartbeat
        if age > self.timeout_secs:
            return 'its heartbeat is %ds old (timeout %ds)' % (age, self.timeout_secs)
        return None

    def check_shared(self) -> None:
        """A non-chief task: refuses a job-dir leased to another job (no lease: fine)."""
        owner = self.current_owner()
        if owner is not None and owner.cluster_id != self.cluster_id:
            if self.stale_reason(owner) is None:
                raise self._refusal(owner)

    def acquire(self) -> 'Lease':
        """Takes the lease, or raises `UserInputError` naming its owner."""
        for _ in range(3):
            if self._store.create(self._owner_text()):
                return self._hold()
            owner = self.current_owner()
            if owner is None and self._store.read() is None:
                continue  # released meanwhile: try again
            if owner is not None and owner.cluster_id == self.cluster_id:
                self._log('Job-dir lease: taking over from %s, an earlier process of '
                          'this cluster' % owner.describe())
            else:
                reason = self.stale_reason(owner)
                if owner is not None and reason is None:  # (no owner: unreadable, stale)
                    raise self._refusal(owner)
                self._log('Job-dir lease: taking over the stale lease of %s: %s'
                          % (owner.describe() if owner else job_dir_lib.LEASE_FILE, reason))
            self._store.delete()
        raise UserInputError('--job-dir %s: could not take its lease %s; another job '
                             'keeps taking it' % (self.job_dir, job_dir_lib.LEASE_FILE))

    def _refusal(self, owner: Owner) -> UserInputError:
        return UserInputError(
            '--job-dir %s is in use by %s of another job (lease %s); wait for it to '
            'finish, use another --job-dir, or delete the lease if that job is gone'
            % (self.job_dir, owner.describe(), job_dir_lib.lease_path(self.job_dir)))

    def _hold(self) -> 'Lease':
        self._held = True
        self._thread = threading.Thread(target=self._beat, name='lease-heartbeat',
                                        daemon=True)
        self._thread.start()
        return self

    def _beat(self) -> None:
        """Refreshes the heartbeat; ends the process if another job took the lease."""
        while not self._stop.wait(max(1.0, self.timeout_secs / 5)):
            try:
                owner = self.current_owner()
                if owner is None or owner.token != self._token:
                    self._held = False
                    process.exit_now(TaskFailure(
                        '--job-dir %s: lost its lease to %s; stopping so that only one '
                        'job writes there' % (self.job_dir, owner.describe() if owner
                                              else 'nobody (it was deleted)'),
                        flag='--job-dir'))
                self._store.replace(self._owner_text())
            except Exception as e:  # pylint: disable=broad-except
                self._log('Job-dir lease: heartbeat failed (%s); retrying' % e)

    def release(self) -> None:
        """Deletes the lease if this process still holds it."""
        self._stop.set()
        if not self._held:
            return
        self._held = False
        try:
            owner = self.current_owner()
            if owner is not None and owner.token == self._token:
                self._store.delete()
        except Exception:  # pylint: disable=broad-except
            pass
