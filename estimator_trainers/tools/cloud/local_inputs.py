"""`--local-input gs://BUCKET[/PREFIX]=DIR`: a rehearsal's gs:// inputs, given from this machine.

Rehearsing on local storage (no credentials, `--local-storage`, or an
emulator `STORAGE_EMULATOR_HOST` names), the job's data is in no bucket.
Each mapping copies the files under DIR (or the one file DIR names) into the
storage under the gs:// prefix, before the bucket checks: the checks, the
tasks and TensorFlow's gs:// client then read them as they would read the
real bucket. A file whose object is there already with the same size and
modification time (an earlier rehearsal on the same emulator) is not copied
again; nothing under the prefix is deleted. A data path the bucket checks do
not find on local storage names this flag (`missing_hint`).
"""
import argparse
import dataclasses
import os
import stat
import time
from typing import IO, Any, Optional, Sequence

from estimator_trainers import google_api
from estimator_trainers import safe_io
from estimator_trainers.errors import UserInputError
from estimator_trainers.tools.cloud import gcs_paths

FLAG = '--local-input'
METADATA_KEY = 'local-input'
# A copy this long or longer says how far it is, every this many seconds.
PROGRESS_SECS = 5.0


@dataclasses.dataclass(frozen=True)
class Mapping:
    """One `--local-input`: the gs:// prefix (or object) and the local directory (or file)."""
    uri: str
    path: str

    @property
    def text(self) -> str:
        return '%s=%s' % (self.uri, self.path)


def parse(text: str) -> Mapping:
    """argparse type of `--local-input`: `gs://BUCKET[/PREFIX]=DIR` (split at the last `=`)."""
    uri, sep, path = text.rpartition('=')
    if not sep or not uri or not path.strip():
        raise argparse.ArgumentTypeError('expected gs://BUCKET[/PREFIX]=DIR (a directory or '
                                         'file of this machine), got %r' % text)
    problem = gcs_paths.problem(uri)
    if problem:
        raise argparse.ArgumentTypeError('%s: %s' % (uri, problem))
    return Mapping(uri.rstrip('/'), path)


def add_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(FLAG, action='append', type=parse, default=[],
                        metavar='GS_PREFIX=DIR',
                        help='With --rehearse: the objects under GS_PREFIX (e.g. '
                             'gs://my-bucket/data/cifar10) are the files under the local '
                             'DIR, copied into local storage (implies --local-storage); '
                             'repeat for more inputs.')


def files(mapping: Mapping) -> list[tuple[str, str, os.stat_result]]:
    """`(object name, local path, its stat)` of each file the mapping copies.

    Raises:
      UserInputError: DIR does not exist, holds no file, or holds something
        that is not a regular file (a pipe would block the copy), or a file
        name that Cloud Storage cannot hold.
    """
    bucket, prefix = gcs_paths.split(mapping.uri)
    top = os.path.abspath(mapping.path)
    if not os.path.exists(top):
        raise UserInputError('%s %s: no such file or directory' % (FLAG, mapping.text),
                             flag=FLAG, path=mapping.path)
    if not os.path.isdir(top):
        found = [(prefix, top)]
    else:
        found = []
        for directory, dirs, names in os.walk(top):
            dirs.sort()
            relative = os.path.relpath(directory, top)
            for name in sorted(names):
                parts = ([] if relative == '.' else relative.split(os.sep)) + [name]
                found.append(('/'.join(([prefix] if prefix else []) + parts),
                              os.path.join(directory, name)))
    listed = []
    for name, path in found:
        kind = safe_io.not_a_regular_file(path)
        if kind:
            raise UserInputError('%s %s: %s is %s; only regular files are copied'
                                 % (FLAG, mapping.text, path, kind), flag=FLAG, path=path)
        problem = gcs_paths.problem('gs://%s/%s' % (bucket, name)) if name else \
            'a file needs an object name: gs://BUCKET/NAME=FILE'
        if problem:
            raise UserInputError('%s %s: %s cannot be an object: %s'
                                 % (FLAG, mapping.text, path, problem), flag=FLAG, path=path)
        listed.append((name, path, os.stat(path)))
    if not listed:
        raise UserInputError('%s %s: %s holds no files' % (FLAG, mapping.text, mapping.path),
                             flag=FLAG, path=mapping.path)
    return listed


def copy(client: Any, mappings: Sequence[Mapping], err: IO[str]) -> None:
    """Copies every mapping into the storage `client` (google-cloud-storage) talks to.

    Raises:
      UserInputError: a mapping's files cannot be copied (`files`).
      google_api.ApiError: the storage refused a write.
    """
    planned = [(mapping, files(mapping)) for mapping in mappings]
    for mapping, listed in planned:
        bucket_name = gcs_paths.split(mapping.uri)[0]
        _ensure_bucket(client, bucket_name)
        bucket = client.bucket(bucket_name)
        total = sum(info.st_size for _, _, info in listed)
        started = last = time.monotonic()
        done = copied = 0
        for name, path, info in listed:
            stamp = '%d:%d' % (info.st_size, info.st_mtime_ns)
            action = 'copying %s to gs://%s/%s (%s)' % (path, bucket_name, name, FLAG)
            existing = _call(client, lambda name=name: bucket.get_blob(
                name, timeout=google_api.TIMEOUT_SECS, retry=None), action)
            if existing is None or (existing.metadata or {}).get(METADATA_KEY) != stamp:
                blob = bucket.blob(name)
                blob.metadata = {METADATA_KEY: stamp}
                _call(client, lambda blob=blob, path=path: blob.upload_from_filename(
                    path, timeout=google_api.TIMEOUT_SECS, retry=None), action)
                copied += 1
            done += info.st_size
            now = time.monotonic()
            if now - last >= PROGRESS_SECS and done < total:
                last = now
                err.write('%s %s: %s of %s copied, ETA %.0f s\n' % (
                    FLAG, mapping.uri, safe_io.size_text(done), safe_io.size_text(total),
                    (now - started) * (total - done) / max(done, 1)))
                err.flush()
        what = '%d file%s (%s) from %s' % (len(listed), '' if len(listed) == 1 else 's',
                                           safe_io.size_text(total), mapping.path)
        err.write('%s %s: %s\n' % (FLAG, mapping.uri, (
            '%s copied in %.1f s' % (what, time.monotonic() - started) if copied else
            '%s, unchanged since they were copied' % what)))
        err.flush()


def _call(client: Any, call: Any, action: str) -> Any:
    return google_api.storage_call(call, action, client.project, client.api_endpoint)


def _ensure_bucket(client: Any, name: str) -> None:
    """Creates bucket `name` in the (local) storage unless it exists."""
    exists = _call(client, lambda: client.lookup_bucket(
        name, timeout=google_api.TIMEOUT_SECS, retry=None), 'looking up gs://%s' % name)
    if exists is None:
        _call(client, lambda: client.create_bucket(name, timeout=google_api.TIMEOUT_SECS,
                                                    retry=None),
              'creating gs://%s for %s' % (name, FLAG))


def missing_hint(uri: str, local_dir: Optional[str] = None) -> str:
    """What a data path not found on local storage adds to its line: the flag that gives it."""
    prefix = uri
    bucket, name = gcs_paths.split(uri)
    glob = next((i for i, char in enumerate(name) if char in '*?['), None)
    if glob is not None:
        prefix = 'gs://%s/%s' % (bucket, name[:glob].rpartition('/')[0])
    return '; on local storage, give it from this machine: %s %s=%s' % (
        FLAG, prefix.rstrip('/'), local_dir or 'DIR')
