"""Cloud Storage (gs://) paths: which they are, and which client of TensorFlow's reads them.

TensorFlow 2.15 reads and writes gs:// with its built-in client unless
`TF_USE_MODULAR_FILESYSTEM` is set, in which case the tensorflow-io GCS
plugin takes over. That plugin registers no directory rename, so Estimator's
SavedModel export (written to `temp-<timestamp>`, then renamed) fails at the
end of training; Vertex AI tasks run the built-in client. No TensorFlow: a
trainer's command line and the cloud tools warn before importing it.
(`faults.check_buckets` asks for the buckets themselves.)

`normalized` is the one reading of a path a user hands over with empty
segments (`gs://b//x`, what a shell's `$BUCKET/x` makes of `BUCKET=gs://b/`):
`gs://b/x`, said in one note. The cloud tools apply it to every gs:// path of
a plan (job-dir, data flags, packages) before anything is checked or sent,
and a trainer to its own command line (`normalized_args`), so the dry run,
the rehearsal and the trainer read the same path.

`path_problem` is the one rule for a gs:// path, for the trainers' flags
(`faults.check_buckets`) and the cloud tools' (`tools/cloud/gcs_paths`)
alike, from Cloud Storage's naming rules
(cloud.google.com/storage/docs/buckets#naming, /objects#naming): bucket
names are 3-63 characters (up to 222 with dots, each dot-separated part at
most 63) of lowercase letters, digits, dashes, underscores and dots,
starting and ending with a letter or digit, not an IP address, not starting
with `goog` and not containing `google`; object names are at most 1024 bytes
of UTF-8 without carriage returns or line feeds.
"""
import os
import re
import unicodedata
from typing import Iterable, Mapping, Optional, overload

MODULAR_FILESYSTEM_VAR = 'TF_USE_MODULAR_FILESYSTEM'
SCHEME = 'gs://'
MAX_OBJECT_NAME_BYTES = 1024

_BUCKET_CHARS = re.compile(r'[a-z0-9][a-z0-9._-]*[a-z0-9]')
_IP_ADDRESS = re.compile(r'\d{1,3}(\.\d{1,3}){3}')


def is_gcs_path(path: object) -> bool:
    """Whether `path` (a str or path-like) names a gs:// location."""
    return str(path).startswith(SCHEME)


def split(uri: str) -> tuple[str, str]:
    """`gs://bucket/some/object` -> `('bucket', 'some/object')` (no checks)."""
    bucket, _, name = uri[len(SCHEME):].partition('/')
    return bucket, name


@overload
def normalized(uri: str) -> tuple[str, Optional[str]]: ...


@overload
def normalized(uri: None) -> tuple[None, None]: ...


def normalized(uri: Optional[str]) -> tuple[Optional[str], Optional[str]]:
    """`(uri, note)`: a gs:// path with its empty path segments and trailing
    slashes dropped (`gs://b//dir/` -> `gs://b/dir`); the note says so when a
    segment was empty, else it is None. Anything else is returned as it is."""
    if not isinstance(uri, str) or not uri.startswith(SCHEME) or not split(uri)[0]:
        return uri, None
    bucket, name = split(uri)
    cleaned = SCHEME + bucket + ''.join('/' + part for part in name.split('/') if part)
    if name.startswith('/') or '//' in name.rstrip('/'):
        return cleaned, '%s is read as %s (empty path segments dropped)' % (uri, cleaned)
    return cleaned, None


def normalized_args(args: Iterable[str]) -> tuple[list[str], list[str]]:
    """`(args, notes)`: a command line whose gs:// values (`gs://...`,
    `--flag=gs://...`) with empty path segments are `normalized`; one note per
    path changed, each said once. Other arguments are kept as they are."""
    result, notes = [], []
    for arg in args:
        flag, sep, value = arg.partition('=') if arg.startswith('-') else ('', '', arg)
        cleaned, note = normalized(value)
        if note is None:
            result.append(arg)
            continue
        result.append(flag + sep + cleaned)
        if note not in notes:
            notes.append(note)
    return result, notes


def bucket_problem(name: str) -> Optional[str]:
    """What Cloud Storage refuses in bucket `name`, or None."""
    if not _BUCKET_CHARS.fullmatch(name) or not 3 <= len(name) <= 222:
        return ('bucket name %r is not valid: 3 to 63 lowercase letters, digits, dashes, '
                'underscores or dots, starting and ending with a letter or digit' % name)
    if '.' not in name and len(name) > 63:
        return 'bucket name %r is longer than 63 characters' % name
    if any(len(part) > 63 or not part for part in name.split('.')):
        return 'bucket name %r has a dot-separated part that is empty or over 63 characters' % name
    if _IP_ADDRESS.fullmatch(name):
        return 'bucket name %r is an IP address, which Cloud Storage refuses' % name
    if name.startswith('goog') or 'google' in name:
        return 'bucket name %r starts with goog or contains google, which Cloud Storage refuses' % name
    return None


def path_problem(uri: str) -> Optional[str]:
    """What is wrong with the gs:// path `uri` (a file, directory or glob), or None."""
    bucket, name = split(uri)
    if not bucket:
        return 'no bucket name after gs://'
    reason = bucket_problem(bucket)
    if reason:
        return reason
    name = name.rstrip('/')
    if '\n' in name or '\r' in name:
        return 'object names cannot hold line breaks'
    if any(unicodedata.category(char) == 'Cc' for char in name):
        return 'control characters in an object name'
    if len(name.encode('utf-8', 'surrogatepass')) > MAX_OBJECT_NAME_BYTES:
        return 'object names are at most %d bytes' % MAX_OBJECT_NAME_BYTES
    segments = name.split('/') if name else []
    if '' in segments:
        return "empty path segment ('//')"
    if '.' in segments or '..' in segments:
        return ("'.' and '..' are not directories in Cloud Storage (object names are "
                "taken literally)")
    return None


def modular_filesystem_warning(paths: Iterable[object],
                               environ: Optional[Mapping[str, str]] = None) -> Optional[str]:
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


def bucket_of(path: object) -> str:
    """`gs://bucket` of a gs:// path."""
    return 'gs://' + str(path)[len('gs://'):].split('/', 1)[0]
