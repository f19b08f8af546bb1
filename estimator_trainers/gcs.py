"""Cloud Storage (gs://) paths: which they are, and which client of TensorFlow's reads them.

TensorFlow 2.15 reads and writes gs:// with its built-in client unless
`TF_USE_MODULAR_FILESYSTEM` is set, in which case the tensorflow-io GCS
plugin takes over. That plugin registers no directory rename, so Estimator's
SavedModel export (written to `temp-<timestamp>`, then renamed) fails at the
end of training; Vertex AI tasks run the built-in client. No TensorFlow: a
trainer's command line and the cloud tools warn before importing it.
(`faults.check_buckets` asks for the buckets themselves.)
"""
import os

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
