"""gs:// paths as the cloud tools take them: the one rule for every flag and field.

A job-dir (`--job-dir`, `trainingInput.jobDir`), a data path (`--data-dir`,
`--train-files`, ...) and the staging bucket (`--bucket`, `BUCKET_NAME`) are
all checked here, so a submission, a config and the bucket checks refuse the
same paths with the same words: what is wrong (no bucket after `gs://`, a
bucket name Cloud Storage refuses, an object name it cannot hold), not just
"expected a gs:// path". The rule on the path itself is the runtime's
(`estimator_trainers.gcs.path_problem`, Cloud Storage's naming rules), which
the trainers apply to their own gs:// flags: the same line everywhere.
"""
from typing import Optional

from estimator_trainers import gcs
from estimator_trainers.errors import UserInputError

NOT_GCS = "expected a gs:// path (the job's machines cannot read files on this one)"
SCHEME = gcs.SCHEME
split = gcs.split
bucket_problem = gcs.bucket_problem
normalized = gcs.normalized
normalized_args = gcs.normalized_args


def problem(uri: object) -> Optional[str]:
    """What is wrong with `uri` as a gs:// file, directory or glob, or None."""
    if not isinstance(uri, str) or not uri.startswith(SCHEME):
        return NOT_GCS
    found: Optional[str] = gcs.path_problem(uri)
    return found


def directory(text: str, what: str) -> str:
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


def parse_bucket(text: str, what: str = '--bucket') -> str:
    """`gs://bucket[/prefix]` or `bucket[/prefix]` -> normalised `gs://bucket[/prefix]`."""
    uri = text if '://' in text else SCHEME + text.lstrip('/')
    reason = problem(uri)
    if reason:
        raise UserInputError('%s %s: %s' % (what, text or "''", reason), flag=what)
    return uri.rstrip('/')
