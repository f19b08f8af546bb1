"""Checks about Cloud Storage (gs://) paths that trainers and tools run before any I/O.

TensorFlow 2.15 reads and writes gs:// with its built-in client unless
`TF_USE_MODULAR_FILESYSTEM` is set, in which case the tensorflow-io GCS
plugin takes over. That plugin registers no directory rename, so Estimator's
SavedModel export (written to `temp-<timestamp>`, then renamed) fails at the
end of training; Vertex AI tasks run the built-in client.

The built-in client retries a failing request for minutes (ten times, with
backoff), and on some errors (a bucket that does not exist, for
`makedirs`) loops for good: `check_buckets` asks once for every bucket a
run names, within a deadline, before any other gs:// request.
"""
import os
import threading

from estimator_trainers.errors import first_line
from estimator_trainers.errors import TaskFailure
from estimator_trainers.errors import UserInputError

MODULAR_FILESYSTEM_VAR = 'TF_USE_MODULAR_FILESYSTEM'


def is_gcs_path(path):
    return str(path).startswith('gs://')


def modular_filesystem_warning(paths, environ=None):
    """One warning line when the GCS plugin would handle one of `paths`, else None.

    Args:
      paths: the run's paths (data, job-dir, ...); None entries are skipped.
      environ: the environment to check (default `os.environ`).
    """
    environ = os.environ if environ is None else environ
    if not environ.get(MODULAR_FILESYSTEM_VAR, '').strip():
        return None
    remote = [str(p) for p in paths if p is not None and is_gcs_path(p)]
    if not remote:
        return None
    return ('warning: %s is set, so TensorFlow reads and writes %s through its GCS '
            'plugin, which cannot rename directories: the SavedModel export fails. '
            'Unset it to use TensorFlow\'s built-in gs:// client.'
            % (MODULAR_FILESYSTEM_VAR, remote[0] if len(remote) == 1 else 'gs:// paths'))


def bucket_of(path):
    """`gs://bucket` of a gs:// path."""
    return 'gs://' + str(path)[len('gs://'):].split('/', 1)[0]


def check_buckets(paths, timeout_secs):
    """Refuses gs:// paths whose bucket does not exist or does not answer in time.

    Args:
      paths: (flag, path) pairs; paths that are not gs:// are skipped.
      timeout_secs: how long all the buckets together may take to answer.

    Raises:
      UserInputError: a bucket does not exist.
      TaskFailure: Cloud Storage does not answer within `timeout_secs`, or
        fails (offline, a proxy or firewall in the way, no credentials).
    """
    buckets = {}
    for flag, path in paths:
        if path is not None and is_gcs_path(path):
            buckets.setdefault(bucket_of(path), (flag, path))
    if not buckets:
        return
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    answers = {}

    def ask():
        # A daemon thread: one blocked inside TensorFlow's client cannot keep
        # the process from ending with the line below.
        for bucket in buckets:
            try:
                tf.io.gfile.stat(bucket)
                answers[bucket] = None
            except tf.errors.PermissionDeniedError:
                answers[bucket] = None  # it exists; what may be done there shows later
            except tf.errors.OpError as e:
                answers[bucket] = e

    thread = threading.Thread(target=ask, name='bucket-check', daemon=True)
    thread.start()
    thread.join(timeout_secs)
    for bucket, (flag, path) in buckets.items():
        if bucket not in answers:
            raise TaskFailure(
                '%s %s: Cloud Storage did not answer within %gs (offline, or a proxy or '
                'firewall in the way?); --storage-timeout-secs sets how long to wait'
                % (flag, path, timeout_secs), flag=flag, path=path)
        error = answers[bucket]
        if isinstance(error, tf.errors.NotFoundError):
            raise UserInputError('%s %s: there is no bucket %s; create it or correct the '
                                 'name' % (flag, path, bucket), flag=flag, path=path)
        if error is not None:
            raise TaskFailure('%s %s: cannot reach Cloud Storage (%s)'
                              % (flag, path, first_line(error)), flag=flag, path=path)
