"""Builds the package sdist and stages it on Cloud Storage for Vertex AI.

Vertex AI pip-installs the trainers from `pythonPackageSpec.packageUris`, so
the submission builds an sdist of this repository (`setup.py`) and uploads it
to `<bucket>/staging/<job>/`. The object carries the sdist's content hash in
its metadata; resubmitting the same job name with unchanged code finds the
hash there and skips the upload. The hash covers member names and bytes, not
the timestamps that make two builds of the same tree differ.
"""
import dataclasses
import glob
import hashlib
import os
import re
import subprocess
import sys
import tarfile

from estimator_trainers.errors import UserInputError
# The gs:// rule lives in gcs_paths; these names stay for the callers of staging.
from estimator_trainers.tools.cloud.gcs_paths import parse_bucket  # pylint: disable=unused-import
from estimator_trainers.tools.cloud.gcs_paths import split as split_gs_uri

HASH_METADATA_KEY = 'content-sha256'
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))


@dataclasses.dataclass(frozen=True)
class Sdist:
    """A built source distribution.

    Attributes:
      path: local path of the `.tar.gz`.
      sha256: hash of its contents (see `content_sha256`).
      size: bytes.
      requires_python: its `Requires-Python` specifier, or None.
    """
    path: str
    sha256: str
    size: int
    requires_python: str = None

    @property
    def filename(self):
        return os.path.basename(self.path)


def staging_uri(bucket_uri, job_name, filename):
    """Where a job's package goes: `<bucket>/staging/<job>/<filename>`."""
    return '%s/staging/%s/%s' % (bucket_uri, job_name, filename)


def build_sdist(out_dir, repo_root=REPO_ROOT):
    """Builds the sdist of `repo_root` into `out_dir` without touching the tree.

    The egg-info goes to `out_dir` too, so the checkout stays clean.

    Raises:
      UserInputError: no setup.py (not a checkout) or the build failed.
    """
    if not os.path.isfile(os.path.join(repo_root, 'setup.py')):
        raise UserInputError('no setup.py in %s: submit from a checkout of the '
                             'repository, or pass --image-uri' % repo_root)
    proc = subprocess.run(
        [sys.executable, 'setup.py', '-q', 'egg_info', '--egg-base', out_dir,
         'sdist', '--dist-dir', out_dir],
        cwd=repo_root, capture_output=True, text=True, check=False)
    archives = glob.glob(os.path.join(out_dir, '*.tar.gz'))
    if proc.returncode or len(archives) != 1:
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        raise UserInputError('building the package sdist failed: %s'
                             % (lines[-1] if lines else 'no archive written'))
    path = archives[0]
    return Sdist(path=path, sha256=content_sha256(path), size=os.path.getsize(path),
                 requires_python=_requires_python(path))


def content_sha256(path):
    """SHA-256 over the sorted member names and file bytes of a tar.gz."""
    digest = hashlib.sha256()
    with tarfile.open(path, 'r:gz') as tar:
        for member in sorted(tar.getmembers(), key=lambda m: m.name):
            if not member.isfile():
                continue
            data = tar.extractfile(member).read()
            digest.update(member.name.encode() + b'\0')
            digest.update(hashlib.sha256(data).digest())
    return digest.hexdigest()


def _requires_python(path):
    with tarfile.open(path, 'r:gz') as tar:
        pkg_info = next((m for m in tar.getmembers()
                         if m.name.count('/') == 1 and m.name.endswith('/PKG-INFO')), None)
        if pkg_info is None:
            return None
        for line in tar.extractfile(pkg_info).read().decode().splitlines():
            if line.startswith('Requires-Python:'):
                return line.split(':', 1)[1].strip()
    return None


def python_mismatch(requires_python, image_uri):
    """Why `image_uri` cannot install a package needing `requires_python`, or None.

    The prebuilt Vertex AI images name their Python (`...tf-cpu.2-15.py310`);
    other images are not checked.
    """
    from packaging.specifiers import SpecifierSet  # pylint: disable=g-import-not-at-top
    match = re.search(r'\.py3(\d{1,2})\b', image_uri or '')
    if not requires_python or not match:
        return None
    version = '3.%s' % match.group(1)
    if SpecifierSet(requires_python).contains(version + '.0'):
        return None
    return ('the package requires Python %s (setup.py) but %s runs Python %s, so '
            'pip cannot install it there; build the container in Dockerfile and '
            'pass --image-uri' % (requires_python, image_uri, version))


def plan(sdist, destination):
    """The staging step as printed by --dry-run."""
    return {
        'package': sdist.filename,
        'sha256': sdist.sha256,
        'bytes': sdist.size,
        'destination': destination,
        'action': 'upload, unless %s already holds an object with metadata %s=%s'
                  % (destination, HASH_METADATA_KEY, sdist.sha256),
    }


def stage(client, sdist, destination):
    """Uploads `sdist` to `destination` unless the same contents are there.

    Returns:
      True when uploaded, False when skipped.
    """
    from google.api_core import exceptions  # pylint: disable=g-import-not-at-top
    bucket_name, object_name = split_gs_uri(destination)
    bucket = client.bucket(bucket_name)
    try:
        existing = bucket.get_blob(object_name)
        if existing is not None and (existing.metadata or {}).get(
                HASH_METADATA_KEY) == sdist.sha256:
            return False
        blob = bucket.blob(object_name)
        blob.metadata = {HASH_METADATA_KEY: sdist.sha256}
        # The precondition makes a concurrent upload to the same name fail
        # instead of silently replacing it.
        blob.upload_from_filename(
            sdist.path, content_type='application/gzip',
            if_generation_match=existing.generation if existing else 0)
    except exceptions.GoogleAPICallError as e:
        raise UserInputError('staging %s failed: %s' % (destination, e.message)) from None
    return True
