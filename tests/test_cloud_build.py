"""--build-image: the Dockerfile's build context, Artifact Registry and Cloud
Build through their real discovery services (recorded answers), the context
staged to a GCS emulator, and the job sent with the image.
"""
import io
import json
import os
import subprocess
from urllib import parse

import pytest

import cloud_fakes
from conftest import REPO_ROOT
from conftest import run_module
from estimator_trainers.errors import UserInputError
from estimator_trainers.tools.cloud import api
from estimator_trainers.tools.cloud import build
from estimator_trainers.tools.cloud import cli
from estimator_trainers.tools.cloud import jobs
from estimator_trainers.tools.cloud import schema

PROJECT, REGION = 'my-project', 'us-central1'
REPOSITORY = 'projects/my-project/locations/us-central1/repositories/estimator-trainers'
REGISTRY = 'https://artifactregistry.googleapis.com/v1/'
CLOUDBUILD = 'https://cloudbuild.googleapis.com/v1/projects/my-project/builds'
VERTEX = 'https://us-central1-aiplatform.googleapis.com/v1/projects/my-project/locations/' \
         'us-central1/customJobs'
BUCKET = 'build-bucket'
IMAGE_PREFIX = 'us-central1-docker.pkg.dev/my-project/estimator-trainers/estimator-trainers:'


# ------------------------------------------------------------ build context


def test_the_context_holds_everything_the_dockerfile_copies():
    with open(os.path.join(REPO_ROOT, 'Dockerfile')) as f:
        sources = build.dockerfile_sources(f.read())
    assert 'requirements.txt' in sources
    with open(os.path.join(REPO_ROOT, '.dockerignore')) as f:
        ignored = [line.strip().strip('/') for line in f
                   if line.strip() and not line.startswith('#')]
    files = set(build.context_files())
    tracked = subprocess.run(['git', 'ls-files'], cwd=REPO_ROOT, capture_output=True,
                             text=True, check=True).stdout.split()
    for source in sources:
        if os.path.isfile(os.path.join(REPO_ROOT, source)):
            assert source in files, source
            continue
        prefix = '' if source in ('.', './') else source.rstrip('/') + '/'
        # Every tracked file under the source that .dockerignore does not leave out.
        wanted = {f for f in tracked if f.startswith(prefix) and not any(
            f == p or f.startswith(p + '/') for p in ignored)}
        assert wanted and wanted <= files, (source, sorted(wanted - files))
    for name in ('Dockerfile', 'setup.py', 'estimator_trainers/runner.py',
                 'cifar10_estimator/trainer.py', 'taxi_estimator/trainer.py',
                 'configs/cmle_config.yaml'):
        assert name in files
    assert not any('__pycache__' in f or '.egg-info' in f for f in files)
    assert not any(f.startswith(('tests/', 'docs/', 'data/', '.git/', '.venv/'))
                   for f in files)


def test_dockerfile_sources_parsing():
    text = """# syntax=docker/dockerfile:1
FROM python:3.11-slim AS base
COPY a.txt b.txt ./
COPY --chown=1000:1000 pkg \\
     ./pkg
ADD ["with space.txt", "/opt/"]
COPY --from=base /usr/lib /usr/lib
RUN echo COPY not-a-source .
"""
    assert build.dockerfile_sources(text) == ['a.txt', 'b.txt', 'pkg', 'with space.txt']


def _tree(root, files):
    for name, text in files.items():
        path = os.path.join(root, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, 'w') as f:
            f.write(text)
    return str(root)


def test_packing_is_reproducible_and_follows_the_sources(tmp_path):
    repo = _tree(tmp_path / 'repo', {
        'Dockerfile': 'FROM x\nCOPY setup.py ./\nCOPY pkg ./pkg\n',
        '.dockerignore': '**/__pycache__\n',
        'setup.py': 'print(1)\n', 'pkg/a.py': 'a = 1\n', 'pkg/__pycache__/a.pyc': 'junk',
        'notes.txt': 'not copied\n'})
    first = build.pack_context(str(tmp_path), repo)
    assert first.files == ('Dockerfile', 'pkg/a.py', 'setup.py')
    with open(first.path, 'rb') as f:
        packed = f.read()
    again = build.pack_context(str(tmp_path), repo)
    with open(again.path, 'rb') as f:
        assert f.read() == packed
    _tree(repo, {'notes.txt': 'changed, but not copied\n'})
    assert build.pack_context(str(tmp_path), repo).sha256 == first.sha256
    _tree(repo, {'pkg/a.py': 'a = 2\n'})
    assert build.pack_context(str(tmp_path), repo).sha256 != first.sha256
    os.remove(os.path.join(repo, 'setup.py'))
    with pytest.raises(UserInputError, match=r'^Dockerfile copies setup.py, which is not in '):
        build.pack_context(str(tmp_path), repo)
    os.remove(os.path.join(repo, 'Dockerfile'))
    with pytest.raises(UserInputError, match=r'^no Dockerfile in .*: build the image from a '
                       r'checkout of the repository, or pass --image-uri or '
                       r'--executor-image-uri$'):
        build.pack_context(str(tmp_path), repo)


def test_the_tag_is_a_hash_of_the_context_and_the_variant():
    cpu, gpu = build.image_tag('ab' * 32, 'cpu'), build.image_tag('ab' * 32, 'gpu')
    assert cpu != gpu and len(cpu) == 64 and int(cpu, 16) >= 0
    assert build.image_tag('cd' * 32, 'cpu') != cpu


# ------------------------------------------- Artifact Registry, Cloud Build


def _builder(responses):
    http = cloud_fakes.RecordingHttp(responses)
    sleeps = []
    builder = build.ImageBuilder(api.build('artifactregistry', 'v1', http),
                                 api.build('cloudbuild', 'v1', http), PROJECT, REGION,
                                 'estimator-trainers', sleep=sleeps.append)
    return builder, http, sleeps


def _query(uri):
    return dict(parse.parse_qsl(parse.urlsplit(uri).query))


def test_a_missing_repository_is_created_and_waited_for():
    builder, http, sleeps = _builder([
        cloud_fakes.error(404, 'Requested entity was not found.'),
        (200, {'name': 'projects/my-project/locations/us-central1/operations/op1'}),
        (200, {'name': 'projects/my-project/locations/us-central1/operations/op1',
               'done': True, 'response': {}}),
        (200, {'name': REPOSITORY})])
    assert builder.ensure_repository(poll_interval=3) is True
    assert builder.ensure_repository() is False
    get, create, operation, get_again = http.requests
    assert (get.method, get.uri) == ('GET', REGISTRY + REPOSITORY + '?alt=json')
    assert create.method == 'POST'
    assert create.uri.startswith(REGISTRY + 'projects/my-project/locations/us-central1/'
                                 'repositories?')
    assert _query(create.uri)['repositoryId'] == 'estimator-trainers'
    schema.check('artifactregistry', 'v1', 'Repository', create.body)
    assert create.body['format'] == 'DOCKER'
    assert operation.uri == REGISTRY + 'projects/my-project/locations/us-central1/operations/' \
                                       'op1?alt=json'
    assert sleeps == [3]
    assert get_again.uri == get.uri


def test_an_existing_image_is_found_by_its_tag():
    builder, http, _ = _builder([(200, {'name': 'tag'}), cloud_fakes.error(404, 'no tag')])
    assert builder.image_exists('abc') is True
    assert builder.image_exists('def') is False
    assert [r.uri for r in http.requests] == [
        REGISTRY + REPOSITORY + '/packages/estimator-trainers/tags/%s?alt=json' % tag
        for tag in ('abc', 'def')]


def test_a_build_is_followed_until_it_ends():
    image = IMAGE_PREFIX + 'abc'
    body = build.build_body('gs://b/staging/builds/abc.tar.gz', image, 'gpu')
    builder, http, sleeps = _builder([
        (200, {'name': 'operations/build/my-project/b1',
               'metadata': {'build': {'id': 'b1', 'logUrl': 'https://console/b1'}}}),
        (200, {'id': 'b1', 'status': 'QUEUED'}),
        (200, {'id': 'b1', 'status': 'WORKING'}),
        (200, {'id': 'b1', 'status': 'SUCCESS'})])
    out = io.StringIO()
    builder.build(body, poll_interval=5, out=out)
    create = http.requests[0]
    assert (create.method, create.uri) == ('POST', CLOUDBUILD + '?alt=json')
    schema.check('cloudbuild', 'v1', 'Build', create.body)
    assert create.body['source'] == {'storageSource': {'bucket': 'b',
                                                       'object': 'staging/builds/abc.tar.gz'}}
    step, = create.body['steps']
    assert step['args'] == ['build', '--build-arg', 'VARIANT=gpu', '-t', image, '.']
    assert create.body['images'] == [image]
    assert [r.uri for r in http.requests[1:]] == [CLOUDBUILD + '/b1?alt=json'] * 3
    assert sleeps == [5, 5]
    assert out.getvalue().splitlines() == [
        'building %s with Cloud Build b1; its log: https://console/b1' % image,
        'build b1: QUEUED', 'build b1: WORKING', 'build b1: SUCCESS']


def test_a_failed_build_is_one_line_with_its_log():
    builder, _, _ = _builder([
        (200, {'metadata': {'build': {'id': 'b2', 'logUrl': 'https://console/b2'}}}),
        (200, {'id': 'b2', 'status': 'FAILURE', 'statusDetail': 'step 0 exited 1',
               'logUrl': 'https://console/b2'})])
    with pytest.raises(api.ApiError) as raised:
        builder.build(build.build_body('gs://b/c.tar.gz', IMAGE_PREFIX + 'x', 'cpu'), 0,
                      io.StringIO())
    assert str(raised.value) == ('Cloud Build b2 ended FAILURE (step 0 exited 1); its log: '
                                 'https://console/b2')


def test_a_cloud_build_quota_answer_names_the_resource():
    builder, _, _ = _builder([cloud_fakes.error(429, 'Quota exceeded for concurrent builds')])
    with pytest.raises(api.ApiError) as raised:
        builder.build(build.build_body('gs://b/c.tar.gz', IMAGE_PREFIX + 'x', 'cpu'), 0,
                      io.StringIO())
    assert str(raised.value) == ('builds.create in projects/my-project: quota exceeded '
                                 '(Quota exceeded for concurrent builds)')


# ---------------------------------------------------------- full submission


@pytest.fixture(scope='module')
def gcs(gcs):  # pylint: disable=redefined-outer-name
    """A google-cloud-storage client of the suite's fake-gcs-server (conftest's gcs)."""
    with cloud_fakes.storage_client(gcs, BUCKET) as client:
        client.bucket(BUCKET).blob('data/cifar10/metadata.json').upload_from_string('{}')
        yield client


class Backend(cli.Backend):
    def __init__(self, responses, storage_client):
        self.http = cloud_fakes.RecordingHttp(responses)
        self.storage_client = storage_client

    def credentials(self):
        return object(), PROJECT

    def transport(self, credentials):
        return self.http

    def storage(self, project, credentials):
        return self.storage_client


def _submit(backend, *extra):
    err = io.StringIO()
    code = cli.main(['submit', 'cifar10', '--config',
                     os.path.join(REPO_ROOT, 'configs', 'cmle_config.yaml'),
                     '--bucket', 'gs://' + BUCKET, '--project', PROJECT,
                     '--job-name', 'train_built', *extra],
                    backend=backend, out=io.StringIO(), err=err)
    return code, err.getvalue()


def test_submit_builds_once_then_reuses_the_image(gcs):
    job = {'name': 'projects/my-project/locations/us-central1/customJobs/7'}
    backend = Backend([
        cloud_fakes.error(404, 'Repository not found'),
        (200, {'name': 'op', 'done': True}),
        cloud_fakes.error(404, 'Tag not found'),
        (200, {'metadata': {'build': {'id': 'b1', 'logUrl': 'https://console/b1'}}}),
        (200, {'id': 'b1', 'status': 'SUCCESS'}),
        (200, job)], gcs)
    code, err = _submit(backend, '--build-image')
    assert code == 0
    registry_get, create_repository, tag_get, build_create, build_get, vertex = \
        backend.http.requests
    image = build_create.body['images'][0]
    assert image.startswith(IMAGE_PREFIX)
    assert tag_get.uri.endswith('/packages/estimator-trainers/tags/%s?alt=json'
                                % image.rsplit(':', 1)[1])
    source = build_create.body['source']['storageSource']
    context = gcs.bucket(BUCKET).get_blob(source['object'])
    assert source['bucket'] == BUCKET and context is not None
    assert source['object'] == 'staging/builds/%s.tar.gz' % context.metadata['content-sha256']
    assert (vertex.method, vertex.uri) == ('POST', VERTEX + '?alt=json')
    schema.check('aiplatform', 'v1', 'GoogleCloudAiplatformV1CustomJob', vertex.body)
    for pool in vertex.body['jobSpec']['workerPoolSpecs']:
        assert pool['containerSpec']['imageUri'] == image
        assert pool['containerSpec']['command'] == ['python', '-m',
                                                    'cifar10_estimator.cifar10_main']
        assert 'pythonPackageSpec' not in pool
    assert 'created Artifact Registry repository %s' % REPOSITORY in err
    generation = context.generation

    backend = Backend([(200, {'name': REPOSITORY}), (200, {'name': 'tag'}), (200, job)], gcs)
    code, err = _submit(backend)  # building is the default
    assert code == 0
    assert '%s exists (built from these sources); build skipped' % image in err
    assert [r.method for r in backend.http.requests] == ['GET', 'GET', 'POST']
    assert backend.http.requests[-1].body == vertex.body
    assert gcs.bucket(BUCKET).get_blob(source['object']).generation == generation


def test_an_executor_image_vertex_refuses_says_what_to_use(gcs):
    backend = Backend([cloud_fakes.error(
        400, 'Invalid image URI us-docker.pkg.dev/vertex-ai/training/tf-cpu.2-15.py310:latest: '
             'the image is no longer available')], gcs)
    with pytest.raises(api.ApiError) as raised:
        _submit(backend, '--executor-image-uri', jobs.EXECUTOR_IMAGES['cpu'])
    assert str(raised.value).endswith(
        '; Vertex AI refuses the executor image %s: drop --executor-image-uri to build the '
        'image (--build-image), or pass --image-uri' % jobs.EXECUTOR_IMAGES['cpu'])
    assert '\n' not in str(raised.value)


def test_dry_run_of_the_default_prints_the_build_and_the_job():
    env = {'PROJECT_ID': 'my-project', 'BUCKET_NAME': 'gs://my-bucket', 'REGION': REGION,
           'GOOGLE_APPLICATION_CREDENTIALS': '/nonexistent/key.json',
           'HTTPS_PROXY': 'http://127.0.0.1:9', 'STORAGE_EMULATOR_HOST': ''}
    proc = run_module('estimator_trainers.tools.cloud', 'submit', 'cifar10', '--config',
                      os.path.join(REPO_ROOT, 'configs', 'cmle_config_gpu.yaml'), '--dry-run',
                      env=env, timeout=120, check=0)
    printed = json.loads(proc.stdout)
    plan = printed['staging']
    request = plan['build']
    assert (request['method'], request['uri']) == ('POST', CLOUDBUILD + '?alt=json')
    schema.check('cloudbuild', 'v1', 'Build', request['body'])
    image = request['body']['images'][0]
    assert image == IMAGE_PREFIX + build.image_tag(plan['sha256'], 'gpu')
    assert plan['destination'] == 'gs://my-bucket/staging/builds/%s.tar.gz' % plan['sha256']
    assert plan['files'] == len(build.context_files())
    pools = printed['request']['body']['jobSpec']['workerPoolSpecs']
    assert {pool['containerSpec']['imageUri'] for pool in pools} == {image}
    assert proc.stderr == ''
