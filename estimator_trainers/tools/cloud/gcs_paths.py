"""gs:// paths as the cloud tools take them: the one rule for every flag and field.

A job-dir (`--job-dir`, `trainingInput.jobDir`), a data path (`--data-dir`,
`--train-files`, ...) and the staging bucket (`--bucket`, `BUCKET_NAME`) are
all checked here, so a submission, a config and the bucket checks refuse the
same paths with the same words: what is wrong (no bucket after `gs://`, a
bucket name Cloud Storage refuses, an object name it cannot hold), not just
"expected a gs:// path".

Cloud Storage naming rules (cloud.google.com/storage/docs/buckets#naming,
/objects#naming): bucket names are 3-63 characters (up to 222 with dots, each
dot-separated part at most 63) of lowercase letters, digits, dashes,
underscores and dots, starting and ending with a letter or digit, not an IP
address, not starting with `goog` and not containing `google`; object names
are at most 1024 bytes of UTF-8 without carriage returns or line feeds.
"""
import re
import unicodedata

from estimator_trainers.errors import UserInputError

SCHEME = 'gs://'
NOT_GCS = "expected a gs:// path (the job's machines cannot read files on this one)"
MAX_OBJECT_NAME_BYTES = 1024

_BUCKET_CHARS = re.compile(r'[a-z0-9][a-z0-9._-]*[a-z0-9]')
_IP_ADDRESS = re.compile(r'\d{1,3}(\.\d{1,3}){3}')


def split(uri):
    """`gs://bucket/some/object` -> `('bucket', 'some/object')` (no checks)."""
    bucket, _, name = uri[len(SCHEME):].partition('/')
    return bucket, name


def bucket_problem(name):
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


def problem(uri):
    """What is wrong with `uri` as a gs:// file, directory or glob, or None."""
    if not isinstance(uri, str) or not uri.startswith(SCHEME):
        return NOT_GCS
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


def normalized(uri):
    """`(uri, note)`: a gs:// directory with its empty path segments dropped, as a
    shell's `$BUCKET/dir` with `BUCKET=gs://b/` means (`gs://b//dir` ->
    `gs://b/dir`), and trailing slashes; the note says so, or is None."""
    if not isinstance(uri, str) or not uri.startswith(SCHEME) or not split(uri)[0]:
        return uri, None
    bucket, name = split(uri)
    cleaned = '%s%s' % (SCHEME, bucket) + ''.join('/' + part for part in name.split('/')
                                                   if part)
    if name.startswith('/') or '//' in name.rstrip('/'):
        return cleaned, '%s is read as %s (empty path segments dropped)' % (uri, cleaned)
    return cleaned, None


def directory(text, what):
    """`text` checked as a gs:// directory and without trailing slashes.

    Args:
      what: the flag or field, for the message (`--job-dir`).

    Raises:
      UserInputError: `<what> <text>: <what is wrong>`.
    """
    reason = problem(text)
    if reason:
        raise UserInputError('%s %s: %s' % (what, text or "''", reason), flag=what)
    return text.rstrip('/')


def parse_bucket(text, what='--bucket'):
    """`gs://bucket[/prefix]` or `bucket[/prefix]` -> normalised `gs://bucket[/prefix]`."""
    uri = text if '://' in text else SCHEME + text.lstrip('/')
    reason = problem(uri)
    if reason:
        raise UserInputError('%s %s: %s' % (what, text or "''", reason), flag=what)
    return uri.rstrip('/')
