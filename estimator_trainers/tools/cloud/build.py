"""The training image, built by Cloud Build from the Dockerfile: no local Docker.

The build context is what the Dockerfile copies (its COPY/ADD sources) plus
the Dockerfile, less what `.dockerignore` and `.gcloudignore` leave out
(read with `pathspec`, `!` lines included) and less any file that looks like
a credential (`credential_files`: a `.env`, a service-account key, a private
key), which only a `!` line of those files brings back. A directory the
Dockerfile copies whole holds code only: what `.gitignore` leaves out of
the repository, and directories a run writes (a job-dir: checkpoints, event
files, a run record; a data set: TFRecords; a sweep's outputs) are left out
of it too, with a note, so data and experiment outputs neither inflate the
upload nor change the image's hash. It is packed
reproducibly (symlinks as symlinks, never followed out of the checkout); its
content hash, with the CPU/GPU variant, is the image tag, so an unchanged
tree finds its image in Artifact Registry and is not built again:

    REGION-docker.pkg.dev/PROJECT/REPOSITORY/estimator-trainers:<hash>

Otherwise the context goes to `<bucket>/staging/builds/<hash>.tar.gz`, the
repository is created if missing (`artifactregistry v1`), and Cloud Build
(`cloudbuild v1 projects.builds.create`) runs `docker build` there and
pushes the image; the submission waits for it, then sends a `containerSpec`.
"""
import dataclasses
import fnmatch
import glob
import gzip
import hashlib
import json
import os
import posixpath
import re
import shlex
import stat
import tarfile
import time
from typing import IO, Callable, Dict, Iterator, List, Optional, Sequence, TextIO, Tuple

import pathspec

from estimator_trainers import google_api
from estimator_trainers.errors import UserInputError
from estimator_trainers.tools.cloud import api
from estimator_trainers.tools.cloud import credential_files
from estimator_trainers.tools.cloud import gcs_paths
from estimator_trainers.tools.cloud import schema
from estimator_trainers.tools.cloud import staging
from estimator_trainers.tools.cloud.api import Json

IMAGE_NAME = 'estimator-trainers'
DEFAULT_REPOSITORY = 'estimator-trainers'
# An Artifact Registry repository id.
REPOSITORY_RE = re.compile(r'[a-z]([a-z0-9-]{0,61}[a-z0-9])?')
DOCKER_BUILDER = 'gcr.io/cloud-builders/docker'
BUILD_TIMEOUT = '7200s'  # the GPU variant installs CUDA wheels (several GB)
BUILD_DONE = ('SUCCESS', 'FAILURE', 'INTERNAL_ERROR', 'TIMEOUT', 'CANCELLED', 'EXPIRED')
DOCKERFILE = 'Dockerfile'
DOCKERIGNORE = '.dockerignore'
GCLOUDIGNORE = '.gcloudignore'
GITIGNORE = '.gitignore'
# Files that mark a directory as something a run wrote, not code: a job-dir
# (job_dir.py's files, TensorFlow's checkpoint list and event files), a data
# set (TFRecords) or a sweep's outputs (experiment.sh copies its sweep.yaml).
OUTPUT_MARKERS = ('checkpoint', 'run_record.json', 'model_params.json', 'LEASE.json',
                  'events.out.tfevents.*', '*.tfrecords', 'sweep.yaml')
# gcloud's directive that reads another file's patterns into .gcloudignore.
GCLOUDIGNORE_INCLUDE = '#!include:'
# A context larger than this gets a warning naming its largest directories.
LARGE_CONTEXT_BYTES = 64 * 1024 * 1024
_GLOB_CHARS = ('*', '?', '[')


@dataclasses.dataclass(frozen=True)
class Context:
    """A packed build context (`path`, `sha256`, `size` as `staging.Sdist`).

    Attributes:
      files: the member names (files and symlinks), sorted.
      left_out: `(name, reason)` of files that look like credentials and were
        left out by the built-in list (not already by an ignore file).
      credentials_in: `(name, reason, rule)` of files that look like
        credentials and are packed because `rule` (a `!` line) re-included them.
      raw_bytes: the bytes of its files before compression.
      largest: `(directory, bytes)` of its three largest top-level directories
        (or files).
      outputs: directories left out as outputs of runs (`OUTPUT_MARKERS`) or
        by `.gitignore`.
    """
    path: str
    sha256: str
    size: int
    files: Tuple[str, ...]
    left_out: Tuple[Tuple[str, str], ...] = ()
    credentials_in: Tuple[Tuple[str, str, str], ...] = ()
    raw_bytes: int = 0
    largest: Tuple[Tuple[str, int], ...] = ()
    outputs: Tuple[str, ...] = ()

    @property
    def filename(self) -> str:
        return os.path.basename(self.path)

    def notes(self) -> List[str]:
        """What the submission says about the context before uploading it."""
        notes = ['the build context: %d files, %s (%s compressed)%s' % (
            len(self.files), _size(self.raw_bytes), _size(self.size),
            '; left out as outputs of runs or by .gitignore: %s' % _listed(self.outputs)
            if self.outputs else '')]
        if self.left_out:
            notes.append('left out of the build context, as they look like credentials: %s '
                         '(list them in .dockerignore to leave them out silently)'
                         % ', '.join('%s (%s)' % item for item in self.left_out))
        return notes

    def warnings(self) -> List[str]:
        """Credentials that go into the image because a `!` line says so, and a
        context larger than `LARGE_CONTEXT_BYTES`."""
        warnings: List[str] = []
        if self.credentials_in:
            warnings.append('the build context, and so the image, holds files that look '
                            'like credentials: %s' % ', '.join(
                                '%s (%s; re-included by %s)' % item
                                for item in self.credentials_in))
        if self.raw_bytes > LARGE_CONTEXT_BYTES:
            warnings.append('the build context is %s (largest: %s); list what the image does '
                            'not need in .dockerignore' % (_size(self.raw_bytes), ', '.join(
                                '%s %s' % (name, _size(size)) for name, size in self.largest)))
        return warnings


def _listed(names: Sequence[str], most: int = 5) -> str:
    shown = ', '.join(names[:most])
    return shown + (' and %d more' % (len(names) - most) if len(names) > most else '')


def _size(count: int) -> str:
    """`count` bytes for people: `17 bytes`, `4.9 KiB`, `1.2 GiB`."""
    units = ('bytes', 'KiB', 'MiB', 'GiB')
    power = 0
    while power < len(units) - 1 and count >= 1024 ** (power + 1):
        power += 1
    return ('%d bytes' % count if not power else
            '%.1f %s' % (count / 1024.0 ** power, units[power]))


def dockerfile_sources(text: str) -> List[str]:
    """The source paths of the COPY/ADD instructions of a Dockerfile (in order;
    `COPY --from=<stage>` copies from another stage, URLs and heredocs come
    from elsewhere, not the context)."""
    return [source for _, source in _copy_sources(text)]


def _copy_sources(text: str, where: str = DOCKERFILE) -> List[Tuple[int, str]]:
    """`(line, source)` of each COPY/ADD source from the build context.

    Raises:
      UserInputError: an instruction whose arguments cannot be split.
    """
    sources: List[Tuple[int, str]] = []
    for line, instruction in _instructions(text):
        words = instruction.split(None, 1)
        if len(words) < 2 or words[0].upper() not in ('COPY', 'ADD'):
            continue
        rest = words[1].strip()
        flags: List[str] = []
        while rest.startswith('--'):
            flag, _, rest = rest.partition(' ')
            flags.append(flag)
            rest = rest.strip()
        if any(flag.startswith('--from=') for flag in flags):
            continue
        paths: object = None
        if rest.startswith('['):
            try:
                paths = json.loads(rest)
            except ValueError:
                paths = None  # Docker reads a malformed JSON form as the shell form
        if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
            try:
                paths = shlex.split(rest)
            except ValueError as e:
                raise UserInputError('%s line %d: %s: %s' % (where, line, words[0], e),
                                     path=where) from None
        sources.extend((line, path) for path in paths[:-1]
                       if not path.startswith('<<') and '://' not in path
                       and not path.startswith('git@'))
    return sources


def _instructions(text: str) -> Iterator[Tuple[int, str]]:
    """`(first line, instruction)`: continuations joined, comments dropped."""
    current, first = '', 0
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith('#'):
            continue
        first = first or number
        if stripped.endswith('\\'):
            current += stripped[:-1] + ' '
            continue
        yield first, current + stripped
        current, first = '', 0
    if current:
        yield first, current


def _read_text(path: str, name: str) -> Optional[str]:
    """The UTF-8 text of a context file (`Dockerfile`, `.dockerignore`), or None."""
    try:
        with open(path, 'rb') as f:
            raw = f.read()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise UserInputError('%s: %s' % (path, e.strerror), path=path) from None
    try:
        return raw.decode('utf-8-sig')
    except UnicodeDecodeError as e:
        raise UserInputError('%s line %d: not UTF-8 text (byte 0x%02x); save it as UTF-8'
                             % (name, raw.count(b'\n', 0, e.start) + 1, raw[e.start]),
                             path=path) from None


class IgnoreRules:
    """`.dockerignore` and `.gcloudignore`: what the build context leaves out.

    `.dockerignore` has Docker's syntax: patterns relative to the context
    root (`*.pyc` only at the top, `**/*.pyc` anywhere), a matched directory
    takes its contents, later `!` lines re-include. Each line becomes the
    anchored gitignore pattern `/<line>` for `pathspec`, which then agrees
    with Docker on these. `.gcloudignore` has gitignore's syntax as it is
    (`*.pyc` at any depth) and gcloud's `#!include:FILE` line.
    """

    def __init__(self, repo_root: str) -> None:
        self.sources: List[str] = []  # per pattern: 'FILE line N: text', for messages
        docker: List[str] = []
        gcloud: List[str] = []
        text = _read_text(os.path.join(repo_root, DOCKERIGNORE), DOCKERIGNORE)
        for number, line in enumerate((text or '').splitlines(), 1):
            pattern = _docker_pattern(line)
            if pattern:
                docker.append(pattern)
                self.sources.append('%s line %d: %s' % (DOCKERIGNORE, number, line.strip()))
        self._docker_count = len(docker)
        for name, number, line in _gcloudignore_lines(repo_root):
            if line.strip() and not line.startswith('#'):  # gitignore's blanks, comments
                gcloud.append(line)
                self.sources.append('%s line %d: %s' % (name, number, line.strip()))
        self._docker = pathspec.GitIgnoreSpec.from_lines(docker)
        self._gcloud = pathspec.GitIgnoreSpec.from_lines(gcloud)
        self.has_negations = any(p.startswith('!') for p in docker + gcloud)
        git = (_read_text(os.path.join(repo_root, GITIGNORE), GITIGNORE) or '').splitlines()
        self._git = pathspec.GitIgnoreSpec.from_lines(git)
        self._git_negates = any(line.strip().startswith('!') for line in git)

    def untracked(self, relpath: str) -> bool:
        """Whether `.gitignore` leaves `relpath` (a `dir/` for a directory) out of the
        repository: a directory copied whole leaves it out of the context too. With
        `!` lines in `.gitignore`, directories are not left out whole (a `!` line
        may bring a file back), only the files it matches."""
        if relpath.endswith('/') and self._git_negates:
            return False
        return self._git.match_file(relpath)

    def check(self, relpath: str) -> Tuple[bool, Optional[str]]:
        """`(excluded, rule)`: whether a rule leaves `relpath` out, and the line
        that decided (the `!` line that keeps it, when not excluded; None
        when no line matched)."""
        docker = self._docker.check_file(relpath)
        gcloud = self._gcloud.check_file(relpath)
        for result, offset in ((docker, 0), (gcloud, self._docker_count)):
            if result.include and result.index is not None:
                return True, self.sources[offset + result.index]
        for result, offset in ((docker, 0), (gcloud, self._docker_count)):
            if result.include is False and result.index is not None:
                return False, self.sources[offset + result.index]
        return False, None

    def prunes(self, reldir: str) -> bool:
        """Whether nothing under directory `reldir` can be in the context."""
        return not self.has_negations and self.check(reldir + '/')[0]


def _docker_pattern(line: str) -> Optional[str]:
    """A .dockerignore line as an anchored gitignore pattern, or None (Docker
    trims it, drops comments, cleans the path and reads it from the root)."""
    text = line.strip()
    if not text or text.startswith('#'):
        return None
    negate = text.startswith('!')
    text = text[1:].strip() if negate else text
    text = posixpath.normpath(text).lstrip('/') if text else text
    if text in ('', '.'):
        return None
    return ('!' if negate else '') + '/' + text


def _gcloudignore_lines(repo_root: str) -> Iterator[Tuple[str, int, str]]:
    """`(file, line number, line)` of .gcloudignore, `#!include:` files read in."""
    text = _read_text(os.path.join(repo_root, GCLOUDIGNORE), GCLOUDIGNORE)
    for number, line in enumerate((text or '').splitlines(), 1):
        if line.startswith(GCLOUDIGNORE_INCLUDE):
            name = line[len(GCLOUDIGNORE_INCLUDE):].strip()
            included = _read_text(os.path.join(repo_root, name), name)
            if included is None:
                raise UserInputError('%s line %d: %s: no such file in %s'
                                     % (GCLOUDIGNORE, number, name, repo_root))
            for inner_number, inner in enumerate(included.splitlines(), 1):
                yield name, inner_number, inner
        else:
            yield GCLOUDIGNORE, number, line


@dataclasses.dataclass(frozen=True)
class _Selection:
    files: Tuple[Tuple[str, str], ...]  # (name, full path), sorted by name
    left_out: Tuple[Tuple[str, str], ...]
    credentials_in: Tuple[Tuple[str, str, str], ...]
    outputs: Tuple[str, ...] = ()  # directories left out as outputs of runs or by .gitignore


def _select(repo_root: str) -> _Selection:
    """What goes into the build context of `repo_root`, and what is kept out."""
    text = _read_text(os.path.join(repo_root, DOCKERFILE), DOCKERFILE)
    if text is None:
        raise UserInputError('no %s in %s: build the image from a checkout of the '
                             'repository, or pass --image-uri or --executor-image-uri'
                             % (DOCKERFILE, repo_root))
    rules = IgnoreRules(repo_root)
    chosen = {DOCKERFILE: os.path.join(repo_root, DOCKERFILE)}
    left_out: Dict[str, str] = {}
    credentials_in: Dict[str, Tuple[str, str]] = {}
    outputs: List[str] = []

    def consider(relpath: str, explicit_line: Optional[int] = None) -> None:
        excluded, rule = rules.check(relpath)
        full = os.path.join(repo_root, relpath)
        if excluded:
            if explicit_line:
                raise UserInputError('%s line %d copies %s, which %s leaves out; the build '
                                     'would not find it' % (DOCKERFILE, explicit_line,
                                                            relpath, rule))
            return
        why = credential_files.reason(relpath, _head(full, relpath))
        if why and not rule:
            if explicit_line:
                raise UserInputError(
                    '%s line %d copies %s, which looks like a credential (%s): keep it out '
                    'of the image (a job gets its credentials from its service account, '
                    'trainingInput.serviceAccount), or re-include it with a !%s line in %s'
                    % (DOCKERFILE, explicit_line, relpath, why, relpath, DOCKERIGNORE))
            left_out[relpath] = why
            return
        if why and rule:
            credentials_in[relpath] = (why, rule)
        chosen[relpath] = full

    for line, source in _copy_sources(text):
        for relpath in _expand(repo_root, line, source):
            full = os.path.join(repo_root, relpath)
            link = _symlinked_parent(repo_root, relpath)
            if link:  # the context holds the link, not what it points to
                consider(link)
            elif relpath == '.' or (os.path.isdir(full) and not os.path.islink(full)):
                _walk(repo_root, relpath, rules, consider, outputs)
            else:
                consider(relpath, explicit_line=line)
    return _Selection(files=tuple(sorted(chosen.items())),
                      left_out=tuple(sorted(left_out.items())),
                      credentials_in=tuple((name,) + credentials_in[name]
                                           for name in sorted(credentials_in)),
                      outputs=tuple(sorted(outputs)))


def _expand(repo_root: str, line: int, source: str) -> List[str]:
    """The context paths (relative, `/`-separated) a COPY source names."""
    cleaned = posixpath.normpath(source.lstrip('/') or '.')
    if cleaned == '..' or cleaned.startswith('../'):
        raise UserInputError('%s line %d copies %s, which is outside the build context %s'
                             % (DOCKERFILE, line, source, repo_root))
    if any(char in cleaned for char in _GLOB_CHARS):
        matches = sorted(os.path.relpath(path, repo_root).replace(os.sep, '/') for path in
                         glob.glob(os.path.join(repo_root, cleaned), include_hidden=True))
        if not matches:
            raise UserInputError('%s line %d copies %s, which matches nothing in %s'
                                 % (DOCKERFILE, line, source, repo_root))
        return matches
    if not os.path.lexists(os.path.join(repo_root, cleaned)):
        raise UserInputError('%s copies %s, which is not in %s' % (DOCKERFILE, source, repo_root))
    return [cleaned]


def _symlinked_parent(repo_root: str, relpath: str) -> Optional[str]:
    """The first directory of `relpath` that is a symlink, or None."""
    parts = relpath.split('/')
    for end in range(1, len(parts)):
        parent = '/'.join(parts[:end])
        if os.path.islink(os.path.join(repo_root, parent)):
            return parent
    return None


def _walk(repo_root: str, top: str, rules: IgnoreRules, consider: Callable[[str], None],
          outputs: List[str]) -> None:
    """Calls `consider` on every file and symlink under directory `top`, never
    entering a symlinked directory, one the rules leave out whole, one
    `.gitignore` leaves out or one a run wrote (added to `outputs`)."""
    for directory, dirs, names in os.walk(os.path.join(repo_root, top)):
        reldir = os.path.relpath(directory, repo_root).replace(os.sep, '/')
        prefix = '' if reldir == '.' else reldir + '/'
        kept: List[str] = []
        for name in sorted(dirs):
            if os.path.islink(os.path.join(directory, name)):
                consider(prefix + name)  # packed as the symlink it is
            elif rules.prunes(prefix + name):
                continue
            elif rules.untracked(prefix + name + '/') or _is_output(
                    os.path.join(directory, name)):
                outputs.append(prefix + name)
            else:
                kept.append(name)
        dirs[:] = kept
        for name in sorted(names):
            if not rules.untracked(prefix + name):
                consider(prefix + name)


def _is_output(directory: str) -> bool:
    """Whether `directory` holds a file of `OUTPUT_MARKERS` (a run wrote it)."""
    try:
        names = os.listdir(directory)
    except OSError:
        return False
    return any(fnmatch.fnmatch(name, marker) for name in names for marker in OUTPUT_MARKERS)


def _head(path: str, relpath: str) -> Optional[bytes]:
    """The first bytes of a regular file (None for a symlink); refuses what a
    build context cannot hold."""
    try:
        mode = os.lstat(path).st_mode
        if stat.S_ISLNK(mode):
            return None
        if not stat.S_ISREG(mode):
            raise UserInputError('%s in the build context is %s, not a file, directory or '
                                 'symlink: remove it or list it in %s'
                                 % (relpath, _kind(mode), DOCKERIGNORE))
        with open(path, 'rb') as f:
            return f.read(credential_files.HEAD_BYTES)
    except OSError as e:
        raise UserInputError('cannot read %s for the build context (%s): make it readable '
                             'or list it in %s' % (relpath, e.strerror, DOCKERIGNORE)) from None


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, 'a named pipe'), (stat.S_ISSOCK, 'a socket'),
                       (stat.S_ISCHR, 'a character device'), (stat.S_ISBLK, 'a block device')):
        if test(mode):
            return name
    return 'an unknown kind of file'


def context_files(repo_root: Optional[str] = None) -> Tuple[str, ...]:
    """The member names of the build context of `repo_root` (default: this
    checkout, `staging.REPO_ROOT`), files and symlinks, sorted.

    Raises:
      UserInputError: no Dockerfile, a COPY source that does not exist or is
        left out, a file that cannot be read or packed.
    """
    return tuple(name for name, _ in _select(repo_root or staging.REPO_ROOT).files)


class _HashingReader:
    """A file object that feeds what is read from it into a hash."""

    def __init__(self, f: IO[bytes], digest: 'hashlib._Hash') -> None:
        self.f = f
        self.digest = digest

    def read(self, size: int = -1) -> bytes:
        data = self.f.read(size)
        self.digest.update(data)
        return data


def pack_context(out_dir: str, repo_root: Optional[str] = None) -> Context:
    """Packs the build context of `repo_root` (default: this checkout) into
    `out_dir`; the same tree gives the same bytes.

    The hash covers each member's name, kind, mode and contents (a symlink's
    target), so a changed executable bit or link changes the image tag.
    """
    selection = _select(repo_root or staging.REPO_ROOT)
    path = os.path.join(out_dir, 'build-context.tar.gz')
    digest = hashlib.sha256()
    sizes: List[Tuple[int, str]] = []
    with open(path, 'wb') as raw:
        # mtime=0 in the gzip header and in every member: reproducible bytes.
        with gzip.GzipFile(fileobj=raw, mode='wb', mtime=0) as gz:
            with tarfile.open(fileobj=gz, mode='w', format=tarfile.PAX_FORMAT) as tar:
                for name, full in selection.files:
                    info = tarfile.TarInfo(name)
                    mode = os.lstat(full).st_mode
                    if stat.S_ISLNK(mode):
                        info.type, info.linkname = tarfile.SYMTYPE, os.readlink(full)
                        info.mode = 0o777
                        digest.update(('%s\0link\0%s\0' % (name, info.linkname)).encode())
                        tar.addfile(info)
                        continue
                    info.mode = 0o755 if mode & 0o111 else 0o644
                    _add_file(tar, info, full, name, digest)
                    sizes.append((info.size, name))
    tops: Dict[str, int] = {}
    for size, name in sizes:
        top = name.split('/')[0] + ('/' if '/' in name else '')
        tops[top] = tops.get(top, 0) + size
    largest = sorted(tops.items(), key=lambda item: (-item[1], item[0]))[:3]
    return Context(path=path, sha256=digest.hexdigest(), size=os.path.getsize(path),
                   files=tuple(name for name, _ in selection.files),
                   left_out=selection.left_out, credentials_in=selection.credentials_in,
                   raw_bytes=sum(size for size, _ in sizes), largest=tuple(largest),
                   outputs=selection.outputs)


def _add_file(tar: tarfile.TarFile, info: tarfile.TarInfo, full: str, name: str,
              digest: 'hashlib._Hash') -> None:
    """Streams one file into the archive (never whole into memory)."""
    file_digest = hashlib.sha256()
    try:
        with open(full, 'rb') as f:
            info.size = os.fstat(f.fileno()).st_size
            tar.addfile(info, _HashingReader(f, file_digest))
    except OSError as e:
        raise UserInputError('cannot pack %s into the build context (%s): did it change '
                             'meanwhile? Try again, or list it in %s'
                             % (name, e.strerror or e, DOCKERIGNORE)) from None
    digest.update(('%s\0%o\0' % (name, info.mode)).encode() + file_digest.digest())


def variant(uses_gpus: bool) -> str:
    """The Dockerfile's VARIANT build argument for a config."""
    return 'gpu' if uses_gpus else 'cpu'


def image_tag(context_sha256: str, build_variant: str) -> str:
    """The image tag: the hash of the context and the variant it was built with."""
    return hashlib.sha256(('%s VARIANT=%s' % (context_sha256, build_variant))
                          .encode()).hexdigest()


def image_uri(project: Optional[str], region: str, repository: str, tag: str) -> str:
    return '%s-docker.pkg.dev/%s/%s/%s:%s' % (region, project, repository, IMAGE_NAME, tag)


def context_uri(bucket_uri: str, context: Context) -> str:
    return '%s/staging/builds/%s.tar.gz' % (bucket_uri, context.sha256)


def build_body(context_gs_uri: str, image: str, build_variant: str) -> Json:
    """The Cloud Build `Build`: docker build of the staged context, image pushed."""
    bucket, name = gcs_paths.split(context_gs_uri)
    body: Json = {
        'source': {'storageSource': {'bucket': bucket, 'object': name}},
        'steps': [{'name': DOCKER_BUILDER,
                   'args': ['build', '--build-arg', 'VARIANT=%s' % build_variant,
                            '-t', image, '.']}],
        'images': [image],
        'timeout': BUILD_TIMEOUT,
        'tags': [IMAGE_NAME, build_variant],
    }
    schema.check('cloudbuild', 'v1', schema.request_schema(
        'cloudbuild', 'v1', 'projects.builds.create'), body)
    return body


def repository_body() -> Json:
    body: Json = {'format': 'DOCKER',
            'description': 'Training images of estimator-trainers (--build-image)'}
    schema.check('artifactregistry', 'v1', schema.request_schema(
        'artifactregistry', 'v1', 'projects.locations.repositories.create'), body)
    return body


class ImageBuilder:
    """Artifact Registry and Cloud Build calls for one image repository."""

    def __init__(self, registry: Optional[api.Service], cloudbuild: api.Service,
                 project: Optional[str], region: str, repository: str,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        """
        Args:
          registry, cloudbuild: the `artifactregistry v1` and `cloudbuild v1`
            services (`api.build`).
        """
        self.registry = registry
        self.cloudbuild = cloudbuild
        self.project = project
        self.region = region
        self.repository = repository
        self.parent = 'projects/%s/locations/%s' % (project, region)
        self.repository_name = '%s/repositories/%s' % (self.parent, repository)
        self.sleep = sleep

    def _locations(self) -> api.Service:
        """Artifact Registry's locations (a dry run's builder has no registry)."""
        assert self.registry is not None, 'a builder that calls Artifact Registry'
        return self.registry.projects().locations()

    def _repositories(self) -> api.Service:
        return self._locations().repositories()

    def _run(self, request: api.Request, action: str,
             api_name: google_api.Api = 'artifactregistry',
             retry: bool = True) -> Json:
        return api.execute(request, action, api_name, self.project, retry=retry)

    def ensure_repository(self, poll_interval: float = 2.0) -> bool:
        """Creates the Docker repository unless it exists; True when created."""
        try:
            self._run(self._repositories().get(name=self.repository_name),
                      'get %s' % self.repository_name)
            return False
        except google_api.ApiError as e:
            if e.status != 404:
                raise
        action = 'repositories.create %s' % self.repository_name
        operation = self._run(self._repositories().create(
            parent=self.parent, repositoryId=self.repository, body=repository_body()),
            action, retry=False)
        operations = self._locations().operations()
        while not operation.get('done'):
            self.sleep(poll_interval)
            operation = self._run(operations.get(name=operation['name']),
                                  'get %s' % operation['name'])
        if operation.get('error'):
            raise google_api.ApiError('%s: %s' % (action, operation['error'].get('message')))
        return True

    def image_exists(self, tag: str) -> bool:
        """True when the repository holds `estimator-trainers:<tag>`."""
        name = '%s/packages/%s/tags/%s' % (self.repository_name, IMAGE_NAME, tag)
        try:
            self._run(self._repositories().packages().tags().get(name=name), 'get %s' % name)
            return True
        except google_api.ApiError as e:
            if e.status == 404:
                return False
            raise

    def build_request(self, body: Json) -> api.Request:
        """The unsent `projects.builds.create` request."""
        return self.cloudbuild.projects().builds().create(projectId=self.project, body=body)

    def build(self, body: Json, poll_interval: float, out: TextIO) -> Json:
        """Runs the build and waits for it; raises unless it succeeded."""
        operation = self._run(self.build_request(body),
                              'builds.create in projects/%s' % self.project,
                              api_name='cloudbuild', retry=False)
        build = operation.get('metadata', {}).get('build', {})
        build_id = build.get('id')
        out.write('building %s with Cloud Build %s; its log: %s\n'
                  % (body['images'][0], build_id, build.get('logUrl', '(none)')))
        out.flush()
        last = None
        while True:
            build = self._run(self.cloudbuild.projects().builds().get(
                projectId=self.project, id=build_id),
                'builds.get %s in projects/%s' % (build_id, self.project),
                api_name='cloudbuild')
            status = build.get('status', 'STATUS_UNKNOWN')
            if status != last:
                out.write('build %s: %s\n' % (build_id, status))
                out.flush()
                last = status
            if status in BUILD_DONE:
                break
            self.sleep(poll_interval)
        if status != 'SUCCESS':
            raise google_api.ApiError('Cloud Build %s ended %s (%s); its log: %s'
                               % (build_id, status, build.get('statusDetail', 'no details'),
                                  build.get('logUrl', '(none)')))
        return build
