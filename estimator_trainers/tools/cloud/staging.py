"""Builds sdists and stages them on Cloud Storage for Vertex AI.

Two kinds of sdist, both built with `python -m build --sdist` (setuptools,
no build isolation: the environment's own setuptools, as gcloud used it)
from a copy of the sources in a private temporary directory, so the
checkout is never written to and two builds at once cannot meet there:

- this repository (`build_sdist`, its `pyproject.toml`): what
  `pythonPackageSpec.packageUris` or the Dockerfile installs;
- a user's package (`build_package`), the way `gcloud ai-platform jobs
  submit training --package-path DIR` built it: with the `setup.py` (or
  `pyproject.toml`) beside DIR when there is one, else with a generated
  `setup.py` naming DIR's package (version 0.0.0).

Uploads carry the sdist's content hash in their metadata; resubmitting
unchanged code finds the hash there and skips the upload. The hash covers
member names and bytes, not the timestamps that make two builds of the same
tree differ.
"""
import dataclasses
import glob
import hashlib
import os
import re
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
from typing import Any, Callable, Dict, List, Optional, Protocol, TypeVar, Union

from packaging.specifiers import SpecifierSet

from estimator_trainers import google_api
from estimator_trainers import safe_io
from estimator_trainers import user_files
from estimator_trainers.errors import UserInputError
# The gs:// rule lives in gcs_paths; these names stay for the callers of staging.
from estimator_trainers.tools.cloud.gcs_paths import parse_bucket  # pylint: disable=unused-import
from estimator_trainers.tools.cloud.gcs_paths import split as split_gs_uri

HASH_METADATA_KEY = 'content-sha256'
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))

_T = TypeVar('_T')


class Staged(Protocol):
    """An archive to stage: an `Sdist`, or an image's build context (`build.Context`)."""

    @property
    def path(self) -> str: ...
    @property
    def sha256(self) -> str: ...
    @property
    def size(self) -> int: ...
    @property
    def filename(self) -> str: ...


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
    requires_python: Optional[str] = None

    @property
    def filename(self) -> str:
        return os.path.basename(self.path)


def staging_uri(bucket_uri: str, job_name: str, filename: str) -> str:
    """Where a job's package goes: `<bucket>/staging/<job>/<filename>`."""
    return '%s/staging/%s/%s' % (bucket_uri, job_name, filename)


# Metadata files that make a directory buildable, in the order they are looked for.
BUILD_FILES = ('pyproject.toml', 'setup.py')
# What a source copy leaves out: version control, virtualenvs, caches and
# build outputs (none of them goes into an sdist).
_NOT_SOURCES = ('.git', '.hg', '.svn', '.venv', 'venv', '__pycache__', '.pytest_cache',
                '.mypy_cache', '.tox', '.nox', 'build', 'dist', 'node_modules',
                '.ipynb_checkpoints', '*.egg-info', '*.pyc')
# gcloud's generated setup.py for a package without one.
GENERATED_SETUP = """\
from setuptools import find_packages, setup

setup(name={name!r}, version='0.0.0',
      packages=find_packages(include=[{name!r}, {name!r} + '.*']))
"""


def build_sdist(out_dir: str, repo_root: str = REPO_ROOT) -> Sdist:
    """Builds the sdist of `repo_root` (this repository) into `out_dir`.

    Raises:
      UserInputError: no pyproject.toml (not a checkout) or the build failed.
    """
    if not os.path.isfile(os.path.join(repo_root, 'pyproject.toml')):
        raise UserInputError('no pyproject.toml in %s: submit from a checkout of the '
                             'repository, or pass --image-uri' % repo_root)
    return _build(repo_root, out_dir, 'the package sdist')


def package_root(package_path: str) -> str:
    """The directory gcloud built `--package-path` from: the package's parent."""
    return os.path.dirname(os.path.abspath(package_path.rstrip(os.sep)))


def build_package(package_path: str, out_dir: str) -> Sdist:
    """Builds `--package-path DIR` into an sdist in `out_dir`, as gcloud did.

    The `pyproject.toml` or `setup.py` beside DIR builds it when present
    (with whatever else that project packages); otherwise a generated
    `setup.py` packages DIR and its subpackages as `<DIR name>-0.0.0`.

    Raises:
      UserInputError: DIR is not a Python package, or the build failed.
    """
    flag = '--package-path %s' % package_path
    path = os.path.abspath(package_path.rstrip(os.sep))
    name = os.path.basename(path)
    if not os.path.isdir(path):
        raise UserInputError('%s: no such directory' % flag, flag='--package-path')
    if not os.path.isfile(os.path.join(path, '__init__.py')):
        raise UserInputError('%s: not a Python package (no __init__.py)' % flag,
                             flag='--package-path')
    if not name.isidentifier():
        raise UserInputError('%s: %r is not a Python package name' % (flag, name),
                             flag='--package-path')
    root = package_root(path)
    built_from_root = any(os.path.isfile(os.path.join(root, f)) for f in BUILD_FILES)
    check_package_files(path, root if built_from_root else path, flag)
    os.makedirs(out_dir, exist_ok=True)
    if built_from_root:
        build_file = next(os.path.join(root, f) for f in BUILD_FILES
                          if os.path.isfile(os.path.join(root, f)))
        check_setup_py(build_file, name, flag)
        return _build(root, out_dir, 'the sdist of %s (with %s)' % (flag, build_file),
                      build_file=build_file)
    with tempfile.TemporaryDirectory(prefix='package-', dir=out_dir) as source:
        _copy_sources(path, os.path.join(source, name))
        with open(os.path.join(source, 'setup.py'), 'w') as f:
            f.write(GENERATED_SETUP.format(name=name))
        return _build(source, out_dir, 'the sdist of %s (with a generated setup.py)' % flag,
                      copy=False)


# A setup.py is read whole to see whether it holds code; a real one is a few KiB.
SETUP_PY_LIMITS = user_files.Limits(bytes=1 << 20,
                                    expected='a setup.py is a few dozen lines')
# The last line of a Python traceback: `ValueError: ...`, `pkg.SomeError: ...`.
_EXCEPTION_LINE = re.compile(r'^[A-Za-z_][\w.]*(Error|Exception|Exit): .+')


def check_setup_py(build_file: str, package: str, flag: str) -> None:
    """Refuses an empty `setup.py` beside the package (only blank lines and
    comments), in one line naming it: it builds no package, and the build
    backend's own words do not say so (`ERROR Backend subprocess exited`).

    Raises:
      UserInputError: naming the file and what to do.
    """
    if os.path.basename(build_file) != 'setup.py':
        return
    text = user_files.read_text(build_file, build_file, SETUP_PY_LIMITS, flag='--package-path')
    if any(line.strip() and not line.strip().startswith('#') for line in text.splitlines()):
        return
    raise UserInputError(
        '%s: %s is empty, so it builds no package (gcloud built the package with the '
        'setup.py beside it); make it call setuptools.setup(name=..., packages='
        'find_packages()), or delete it to pack %s/ alone with a generated one'
        % (flag, build_file, package), flag='--package-path')


def _build(source: str, out_dir: str, what: str, copy: bool = True,
           build_file: Optional[str] = None) -> Sdist:
    """`python -m build --sdist` of `source` (a copy of it, unless `copy` is False).

    A failure is one line: the build's own error (the exception its backend
    raised, else its last line), naming `build_file` where it is the user's.
    """
    os.makedirs(out_dir, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix='build-', dir=out_dir) as work:
        tree = source
        if copy:
            tree = os.path.join(work, 'source')
            _copy_sources(source, tree)
        dist = os.path.join(work, 'dist')
        proc = subprocess.run(
            [sys.executable, '-m', 'build', '--sdist', '--no-isolation',
             '--skip-dependency-check', '--outdir', dist, tree],
            cwd=work, capture_output=True, text=True, check=False)
        archives = glob.glob(os.path.join(dist, '*.tar.gz'))
        if proc.returncode or len(archives) != 1:
            lines = [line.strip() for line in (proc.stderr + proc.stdout).splitlines()
                     if line.strip()]
            raised = [line for line in lines if _EXCEPTION_LINE.match(line)]
            reason = (raised or lines or ['no archive written'])[-1]
            raise UserInputError('building %s failed: %s%s'
                                 % (what, '%s: ' % build_file if build_file and raised else '',
                                    reason))
        path = os.path.join(out_dir, os.path.basename(archives[0]))
        shutil.move(archives[0], path)
    return Sdist(path=path, sha256=content_sha256(path), size=os.path.getsize(path),
                 requires_python=_requires_python(path))


def check_package_files(package: str, source: str, flag: str) -> None:
    """Refuses a package that cannot be built or run, before anything is copied.

    Args:
      package: the `--package-path` directory.
      source: the tree its sdist is built from (`package`, or its parent
        when a build file is there).
      flag: `--package-path DIR`, for the message.

    Raises:
      UserInputError: a named pipe, socket or device in what the build copies
        (copying a pipe waits for a writer; the build failed with a
        `shutil.Error` traceback), or a package with no module besides
        `__init__.py` (nothing for `--module-name` to run).
    """
    ignore = _source_filter(source)
    for directory, dirs, files in os.walk(source):
        ignored = ignore(directory, dirs + files)
        dirs[:] = [name for name in dirs if name not in ignored]
        for name in files:
            path = os.path.join(directory, name)
            mode = os.lstat(path).st_mode
            if name in ignored or stat.S_ISREG(mode) or stat.S_ISLNK(mode):
                continue  # symlinks are packed as links
            raise UserInputError('%s: %s is %s; a package holds files and directories, '
                                 'so the sdist cannot be built: move it out'
                                 % (flag, path, safe_io.not_a_regular_file(path)
                                    or 'not a regular file'), flag='--package-path')
    for _, _, files in os.walk(package):
        if any(name.endswith('.py') and name != '__init__.py' for name in files):
            return
    raise UserInputError('%s: the package holds no module besides __init__.py; expected '
                         'the module --module-name runs (e.g. %s)'
                         % (flag, os.path.join(package, 'task.py')), flag='--package-path')


def _copy_sources(source: str, destination: str) -> None:
    """Copies `source` without what never goes into an sdist (`_NOT_SOURCES`,
    virtualenvs) and without top-level directories that hold no Python file
    and that no build file names (data, outputs), which can be large."""
    shutil.copytree(source, destination, ignore=_source_filter(source), symlinks=True)


def _source_filter(source: str) -> Callable[[str, List[str]], set[str]]:
    """The `shutil.copytree` ignore function of `_copy_sources`."""
    named = ''
    for build_file in BUILD_FILES + ('setup.cfg', 'MANIFEST.in'):
        try:  # a pipe there is refused, not waited on (check_package_files names it)
            named += (user_files.read_bytes(os.path.join(source, build_file), build_file,
                                            optional=True) or b'').decode('utf-8', 'replace')
        except UserInputError:
            pass
    skip = shutil.ignore_patterns(*_NOT_SOURCES)

    def ignore(directory: str, names: List[str]) -> set[str]:
        ignored = set(skip(directory, names))
        for name in names:
            path = os.path.join(directory, name)
            if not os.path.isdir(path) or name in ignored:
                continue
            if os.path.exists(os.path.join(path, 'pyvenv.cfg')):
                ignored.add(name)
            elif directory == source and name not in named and not _holds_python(path):
                ignored.add(name)
        return ignored

    return ignore


def _holds_python(directory: str) -> bool:
    for _, _, names in os.walk(directory):
        if any(name.endswith('.py') for name in names):
            return True
    return False


def archive(path: str, flag: str = '--packages') -> Sdist:
    """An existing archive (a `--packages` sdist or wheel) as an `Sdist`.

    Raises:
      UserInputError: no such file, or not an sdist or a wheel.
    """
    if not os.path.isfile(path):
        raise UserInputError('%s %s: no such file' % (flag, path), flag=flag)
    if not path.endswith(('.tar.gz', '.whl', '.zip', '.tgz')):
        raise UserInputError('%s %s: expected an sdist (.tar.gz) or a wheel (.whl)'
                             % (flag, path), flag=flag)
    if path.endswith(('.tar.gz', '.tgz')):
        digest = content_sha256(path)
    else:
        digest = safe_io.file_digest(path, 'sha256')
    return Sdist(path=os.path.abspath(path), sha256=digest, size=os.path.getsize(path))


def content_sha256(path: str) -> str:
    """SHA-256 over the sorted member names and file bytes of a tar.gz."""
    digest = hashlib.sha256()
    with tarfile.open(path, 'r:gz') as tar:
        for member in sorted(tar.getmembers(), key=lambda m: m.name):
            if not member.isfile():
                continue
            data = _member_bytes(tar, member)
            digest.update(member.name.encode() + b'\0')
            digest.update(hashlib.sha256(data).digest())
    return digest.hexdigest()


def _member_bytes(tar: tarfile.TarFile, member: tarfile.TarInfo) -> bytes:
    """A regular member's bytes (`extractfile` is None only for other kinds)."""
    data = tar.extractfile(member)
    assert data is not None
    return data.read()


def _requires_python(path: str) -> Optional[str]:
    with tarfile.open(path, 'r:gz') as tar:
        pkg_info = next((m for m in tar.getmembers()
                         if m.name.count('/') == 1 and m.name.endswith('/PKG-INFO')), None)
        if pkg_info is None:
            return None
        for line in _member_bytes(tar, pkg_info).decode().splitlines():
            if line.startswith('Requires-Python:'):
                return line.split(':', 1)[1].strip()
    return None


def python_mismatch(requires_python: Optional[str], image_uri: Optional[str]) -> Optional[str]:
    """Why `image_uri` cannot install a package needing `requires_python`, or None.

    The prebuilt Vertex AI images name their Python (`...tf-cpu.2-15.py310`);
    other images are not checked.
    """
    match = re.search(r'\.py3(\d{1,2})\b', image_uri or '')
    if not requires_python or not match:
        return None
    version = '3.%s' % match.group(1)
    if SpecifierSet(requires_python).contains(version + '.0'):
        return None
    return ('the package requires Python %s (pyproject.toml) but %s runs Python %s, so '
            'pip cannot install it there; build the container in Dockerfile and '
            'pass --image-uri' % (requires_python, image_uri, version))


def plan(sdist: Staged, destination: str) -> Dict[str, Union[str, int]]:
    """The staging step as printed by --dry-run."""
    return {
        'package': sdist.filename,
        'sha256': sdist.sha256,
        'bytes': sdist.size,
        'destination': destination,
        'action': 'upload, unless %s already holds an object with metadata %s=%s'
                  % (destination, HASH_METADATA_KEY, sdist.sha256),
    }


def stage(client: Any, sdist: Staged, destination: str) -> bool:
    """Uploads `sdist` to `destination` unless the same contents are there.

    Returns:
      True when uploaded, False when skipped.
    """
    bucket_name, object_name = split_gs_uri(destination)
    bucket = client.bucket(bucket_name)
    action = 'staging %s' % destination

    def call(function: Callable[[], _T], retry: bool = True) -> _T:
        result: _T = google_api.storage_call(function, action, client.project,
                                             client.api_endpoint, retry=retry)
        return result

    existing = call(lambda: bucket.get_blob(object_name, timeout=google_api.TIMEOUT_SECS,
                                            retry=None))
    if existing is not None and (existing.metadata or {}).get(
            HASH_METADATA_KEY) == sdist.sha256:
        return False
    blob = bucket.blob(object_name)
    blob.metadata = {HASH_METADATA_KEY: sdist.sha256}
    # The precondition makes a concurrent upload to the same name fail instead
    # of silently replacing it (and a repeat of it would fail on its own upload).
    call(lambda: blob.upload_from_filename(
        sdist.path, content_type='application/gzip',
        if_generation_match=existing.generation if existing else 0,
        timeout=google_api.TIMEOUT_SECS, retry=None), retry=False)
    return True
