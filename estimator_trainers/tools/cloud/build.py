"""The training image, built by Cloud Build from the Dockerfile: no local Docker.

The build context is what the Dockerfile copies (its COPY/ADD sources, less
what `.dockerignore` excludes) plus the Dockerfile, packed reproducibly; its
content hash (`staging.content_sha256`, with the CPU/GPU variant) is the
image tag, so an unchanged tree finds its image in Artifact Registry and is
not built again:

    REGION-docker.pkg.dev/PROJECT/REPOSITORY/estimator-trainers:<hash>

Otherwise the context goes to `<bucket>/staging/builds/<hash>.tar.gz`, the
repository is created if missing (`artifactregistry v1`), and Cloud Build
(`cloudbuild v1 projects.builds.create`) runs `docker build` there and
pushes the image; the submission waits for it, then sends a `containerSpec`.
"""
import dataclasses
import fnmatch
import gzip
import hashlib
import io
import json
import os
import shlex
import tarfile
import time

from estimator_trainers.errors import UserInputError
from estimator_trainers.tools.cloud import api
from estimator_trainers.tools.cloud import schema
from estimator_trainers.tools.cloud import staging

IMAGE_NAME = 'estimator-trainers'
DEFAULT_REPOSITORY = 'estimator-trainers'
DOCKER_BUILDER = 'gcr.io/cloud-builders/docker'
BUILD_TIMEOUT = '7200s'  # the GPU variant installs CUDA wheels (several GB)
BUILD_DONE = ('SUCCESS', 'FAILURE', 'INTERNAL_ERROR', 'TIMEOUT', 'CANCELLED', 'EXPIRED')
DOCKERFILE = 'Dockerfile'


@dataclasses.dataclass(frozen=True)
class Context:
    """A packed build context (`path`, `sha256`, `size` as `staging.Sdist`)."""
    path: str
    sha256: str
    size: int
    files: tuple

    @property
    def filename(self):
        return os.path.basename(self.path)


def dockerfile_sources(text):
    """The source paths of the COPY/ADD instructions of a Dockerfile (in order;
    `COPY --from=<stage>` copies from another stage, not the context)."""
    sources = []
    for instruction in _instructions(text):
        words = instruction.split(None, 1)
        if len(words) < 2 or words[0].upper() not in ('COPY', 'ADD'):
            continue
        rest = words[1].strip()
        flags = []
        while rest.startswith('--'):
            flag, _, rest = rest.partition(' ')
            flags.append(flag)
            rest = rest.strip()
        if any(flag.startswith('--from=') for flag in flags):
            continue
        paths = json.loads(rest) if rest.startswith('[') else shlex.split(rest)
        sources.extend(paths[:-1])
    return sources


def _instructions(text):
    """Dockerfile instructions with line continuations joined, comments dropped."""
    current = ''
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith('#'):
            continue
        if stripped.endswith('\\'):
            current += stripped[:-1] + ' '
            continue
        yield current + stripped
        current = ''
    if current:
        yield current


def _ignore_patterns(repo_root):
    path = os.path.join(repo_root, '.dockerignore')
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [line.strip() for line in f if line.strip() and not line.startswith('#')]


def _ignored(relpath, patterns):
    parts = relpath.split('/')
    for pattern in patterns:
        pattern = pattern.strip('/')
        if pattern.startswith('**/'):
            tail = pattern[3:]
            if any(fnmatch.fnmatch(part, tail) for part in parts):
                return True
        elif any(fnmatch.fnmatch('/'.join(parts[:i]), pattern)
                 for i in range(1, len(parts) + 1)):
            return True
    return False


def context_files(repo_root=staging.REPO_ROOT):
    """The files of the build context, relative to `repo_root`, sorted.

    Raises:
      UserInputError: no Dockerfile, or a COPY source that does not exist.
    """
    try:
        with open(os.path.join(repo_root, DOCKERFILE)) as f:
            sources = dockerfile_sources(f.read())
    except OSError:
        raise UserInputError('no %s in %s: build the image from a checkout of the '
                             'repository, or pass --image-uri or --executor-image-uri'
                             % (DOCKERFILE, repo_root)) from None
    patterns = _ignore_patterns(repo_root)
    files = {DOCKERFILE}
    for source in sources:
        path = os.path.normpath(os.path.join(repo_root, source))
        if not os.path.exists(path):
            raise UserInputError('%s copies %s, which is not in %s'
                                 % (DOCKERFILE, source, repo_root))
        if os.path.isfile(path):
            files.add(os.path.relpath(path, repo_root))
            continue
        for directory, _, names in os.walk(path):
            for name in names:
                relpath = os.path.relpath(os.path.join(directory, name), repo_root)
                if not _ignored(relpath.replace(os.sep, '/'), patterns):
                    files.add(relpath)
    return tuple(sorted(f.replace(os.sep, '/') for f in files))


def pack_context(out_dir, repo_root=staging.REPO_ROOT):
    """Packs the build context into `out_dir`; the same tree gives the same bytes."""
    files = context_files(repo_root)
    path = os.path.join(out_dir, 'build-context.tar.gz')
    with open(path, 'wb') as raw:
        # mtime=0 in the gzip header and in every member: reproducible bytes.
        with gzip.GzipFile(fileobj=raw, mode='wb', mtime=0) as gz:
            with tarfile.open(fileobj=gz, mode='w') as tar:
                for name in files:
                    full = os.path.join(repo_root, name)
                    info = tarfile.TarInfo(name)
                    info.size = os.path.getsize(full)
                    info.mode = 0o755 if os.access(full, os.X_OK) else 0o644
                    with open(full, 'rb') as f:
                        tar.addfile(info, io.BytesIO(f.read()))
    sha = staging.content_sha256(path)
    return Context(path=path, sha256=sha, size=os.path.getsize(path), files=files)


def variant(uses_gpus):
    """The Dockerfile's VARIANT build argument for a config."""
    return 'gpu' if uses_gpus else 'cpu'


def image_tag(context_sha256, build_variant):
    """The image tag: the hash of the context and the variant it was built with."""
    return hashlib.sha256(('%s VARIANT=%s' % (context_sha256, build_variant))
                          .encode()).hexdigest()


def image_uri(project, region, repository, tag):
    return '%s-docker.pkg.dev/%s/%s/%s:%s' % (region, project, repository, IMAGE_NAME, tag)


def context_uri(bucket_uri, context):
    return '%s/staging/builds/%s.tar.gz' % (bucket_uri, context.sha256)


def build_body(context_gs_uri, image, build_variant):
    """The Cloud Build `Build`: docker build of the staged context, image pushed."""
    bucket, name = staging.split_gs_uri(context_gs_uri)
    body = {
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


def repository_body():
    body = {'format': 'DOCKER',
            'description': 'Training images of estimator-trainers (--build-image)'}
    schema.check('artifactregistry', 'v1', schema.request_schema(
        'artifactregistry', 'v1', 'projects.locations.repositories.create'), body)
    return body


class ImageBuilder:
    """Artifact Registry and Cloud Build calls for one image repository."""

    def __init__(self, registry, cloudbuild, project, region, repository,
                 sleep=time.sleep):
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

    def _repositories(self):
        return self.registry.projects().locations().repositories()

    def _run(self, request, action, api_name='artifactregistry', retry=True):
        return api.execute(request, action, api_name, self.project, retry=retry)

    def ensure_repository(self, poll_interval=2.0):
        """Creates the Docker repository unless it exists; True when created."""
        try:
            self._run(self._repositories().get(name=self.repository_name),
                      'get %s' % self.repository_name)
            return False
        except api.ApiError as e:
            if e.status != 404:
                raise
        action = 'repositories.create %s' % self.repository_name
        operation = self._run(self._repositories().create(
            parent=self.parent, repositoryId=self.repository, body=repository_body()),
            action, retry=False)
        operations = self.registry.projects().locations().operations()
        while not operation.get('done'):
            self.sleep(poll_interval)
            operation = self._run(operations.get(name=operation['name']),
                                  'get %s' % operation['name'])
        if operation.get('error'):
            raise api.ApiError('%s: %s' % (action, operation['error'].get('message')))
        return True

    def image_exists(self, tag):
        """True when the repository holds `estimator-trainers:<tag>`."""
        name = '%s/packages/%s/tags/%s' % (self.repository_name, IMAGE_NAME, tag)
        try:
            self._run(self._repositories().packages().tags().get(name=name), 'get %s' % name)
            return True
        except api.ApiError as e:
            if e.status == 404:
                return False
            raise

    def build_request(self, body):
        """The unsent `projects.builds.create` request."""
        return self.cloudbuild.projects().builds().create(projectId=self.project, body=body)

    def build(self, body, poll_interval, out):
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
            raise api.ApiError('Cloud Build %s ended %s (%s); its log: %s'
                               % (build_id, status, build.get('statusDetail', 'no details'),
                                  build.get('logUrl', '(none)')))
        return build
