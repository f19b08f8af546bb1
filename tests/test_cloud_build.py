"""--build-image: the Dockerfile's build context, Artifact Registry and Cloud
Build through their real discovery services (recorded answers), the context
staged to a GCS emulator, and the job sent with the image.
"""
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from urllib import parse

import pytest

import checkouts
import cloud_fakes
import processes
from conftest import REPO_ROOT
from conftest import cli_env
from conftest import run_module
from estimator_trainers import google_api
from estimator_trainers.errors import UserInputError
from estimator_trainers.tools.cloud import backend as backend_lib
from estimator_trainers.tools.cloud import api
from estimator_trainers.tools.cloud import build
from estimator_trainers.tools.cloud import jobs
from estimator_trainers.tools.cloud import schema
from estimator_trainers.tools.cloud import staging
from estimator_trainers.tools.cloud import train_cloud

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
    for name in ('Dockerfile', 'pyproject.toml', 'estimator_trainers/runner.py',
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


SERVICE_ACCOUNT_KEY = json.dumps({
    'type': 'service_account', 'project_id': 'my-project', 'private_key_id': 'abc',
    'private_key': '-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBg\n-----END PRIVATE KEY-----\n',
    'client_email': 'trainer@my-project.iam.gserviceaccount.com'})
# A checkout as people have them: the code, and credentials lying next to it.
CHECKOUT = {
    'Dockerfile': 'FROM x\nCOPY . ./\n',
    '.dockerignore': '**/__pycache__\n',
    'setup.py': 'print(1)\n',
    'pkg/a.py': 'a = 1\n',
    'pkg/settings.json': '{"learning_rate": 0.1}\n',
    '.env': 'API_TOKEN=hunter2\n',
    'key.json': SERVICE_ACCOUNT_KEY,
    'configs/prod.env': 'DB_PASSWORD=x\n',
    'certs/tls.key': 'not even a key, but named like one\n',
    'notes/creds.txt': '-----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbn\n',
    'deploy/sa.json': SERVICE_ACCOUNT_KEY,
}
LEFT_OUT = (('.env', 'named like a credential (.env)'),
            ('certs/tls.key', 'named like a credential (*.key)'),
            ('configs/prod.env', 'named like a credential (*.env)'),
            ('deploy/sa.json', 'a Google credentials file'),
            ('key.json', 'named like a credential (key.json)'),
            ('notes/creds.txt', 'holds a private key'))


def _members(context):
    with tarfile.open(context.path) as tar:
        return {m.name: m for m in tar.getmembers()}


def test_credentials_are_left_out_of_the_build_context_and_named(tmp_path):
    repo = _tree(tmp_path / 'repo', CHECKOUT)
    context = build.pack_context(str(tmp_path), repo)
    assert sorted(_members(context)) == list(context.files) == [
        '.dockerignore', 'Dockerfile', 'pkg/a.py', 'pkg/settings.json', 'setup.py']
    assert context.left_out == LEFT_OUT
    assert context.notes()[1:] == [
        'left out of the build context, as they look like credentials: %s (list them in '
        '.dockerignore to leave them out silently)'
        % ', '.join('%s (%s)' % item for item in LEFT_OUT)]
    assert context.warnings() == []
    # Files the ignore rules already leave out are not named again.
    _tree(repo, {'.dockerignore': '**/__pycache__\n.env\n**/*.env\ncerts\n'})
    assert [name for name, _ in build.pack_context(str(tmp_path), repo).left_out] == [
        'deploy/sa.json', 'key.json', 'notes/creds.txt']


def test_a_bang_line_brings_a_credential_back_with_a_warning(tmp_path):
    repo = _tree(tmp_path / 'repo', dict(CHECKOUT, **{
        '.dockerignore': '**/__pycache__\n!certs/tls.key\n',
        '.gcloudignore': '# gcloud\n!deploy/sa.json\n'}))
    context = build.pack_context(str(tmp_path), repo)
    assert {'certs/tls.key', 'deploy/sa.json'} <= set(_members(context))
    assert context.warnings() == [
        'the build context, and so the image, holds files that look like credentials: '
        'certs/tls.key (named like a credential (*.key); re-included by .dockerignore line 2: '
        '!certs/tls.key), deploy/sa.json (a Google credentials file; re-included by '
        '.gcloudignore line 2: !deploy/sa.json)']


def test_dockerignore_follows_docker_and_gcloudignore_follows_gitignore(tmp_path):
    repo = _tree(tmp_path / 'repo', {
        'Dockerfile': 'FROM x\nCOPY . ./\n',
        # Docker: patterns start at the root, a directory takes its contents,
        # a later ! line re-includes, even inside a left-out directory.
        '.dockerignore': '# comment\n*.pyc\n/docs/\n!docs/keep.md\n  build  \n./tmp/../cache\n',
        # gitignore: a pattern without a slash matches at any depth.
        '.gcloudignore': '*.log\n#!include:.gitignore\n',
        '.gitignore': 'secret-dir/\n!secret-dir/public.txt\n',
        'top.pyc': '', 'pkg/deep.pyc': '', 'docs/a.md': '', 'docs/keep.md': '',
        'build/out.o': '', 'cache/c': '', 'run.log': '', 'pkg/sub/run.log': '',
        'secret-dir/x': '', 'secret-dir/public.txt': '', 'pkg/a.py': ''})
    assert build.context_files(repo) == (
        '.dockerignore', '.gcloudignore', '.gitignore', 'Dockerfile', 'docs/keep.md',
        'pkg/a.py', 'pkg/deep.pyc', 'secret-dir/public.txt')


def test_an_ignore_file_that_is_not_utf8_is_one_line(tmp_path):
    repo = _tree(tmp_path / 'repo', {'Dockerfile': 'FROM x\nCOPY . ./\n', 'a.py': ''})
    (tmp_path / 'repo' / '.dockerignore').write_bytes(b'tests\ncaf\xe9\n')
    with pytest.raises(UserInputError) as raised:
        build.context_files(repo)
    assert str(raised.value) == ('.dockerignore line 2: not UTF-8 text (byte 0xe9); save it '
                                 'as UTF-8')
    (tmp_path / 'repo' / '.dockerignore').write_text('#!include:nowhere\n')
    (tmp_path / 'repo' / '.gcloudignore').write_text('#!include:nowhere\n')
    with pytest.raises(UserInputError, match=r'^\.gcloudignore line 1: nowhere: no such file '):
        build.context_files(repo)


@pytest.mark.parametrize('dockerfile,files,message', [
    ('COPY key.json /app/\n', {'key.json': SERVICE_ACCOUNT_KEY},
     'Dockerfile line 2 copies key.json, which looks like a credential (named like a '
     'credential (key.json)): keep it out of the image (a job gets its credentials from its '
     'service account, trainingInput.serviceAccount), or re-include it with a !key.json line '
     'in .dockerignore'),
    ('COPY notes.txt /app/\n', {'notes.txt': 'x', '.dockerignore': '*.txt\n'},
     'Dockerfile line 2 copies notes.txt, which .dockerignore line 1: *.txt leaves out; the '
     'build would not find it'),
    ('COPY ../outside.txt /app/\n', {},
     'Dockerfile line 2 copies ../outside.txt, which is outside the build context '),
    ('COPY *.cfg /app/\n', {'a.txt': ''}, 'Dockerfile line 2 copies *.cfg, which matches '
     'nothing in '),
    ('COPY "a b /app/\n', {}, 'Dockerfile line 2: COPY: No closing quotation'),
])
def test_a_copy_the_build_could_not_honour_is_one_line(tmp_path, dockerfile, files, message):
    repo = _tree(tmp_path / 'repo', dict(files, Dockerfile='FROM x\n' + dockerfile))
    with pytest.raises(UserInputError) as raised:
        build.context_files(repo)
    assert str(raised.value).startswith(message)


def test_copy_sources_absolute_globbed_and_json_form(tmp_path):
    repo = _tree(tmp_path / 'repo', {
        'Dockerfile': 'FROM x\nCOPY /a.cfg ./\nCOPY conf/*.yaml ./\nADD ["b c.txt", "/opt/"]\n'
                      'ADD https://example.com/x.tgz /opt/\nCOPY <<EOF /etc/motd\nhi\nEOF\n',
        'a.cfg': '', 'conf/x.yaml': '', 'conf/.hidden.yaml': '', 'conf/y.json': '',
        'b c.txt': ''})
    assert build.context_files(repo) == ('Dockerfile', 'a.cfg', 'b c.txt', 'conf/.hidden.yaml',
                                         'conf/x.yaml')


def test_symlinks_are_packed_as_links_never_followed(tmp_path):
    outside = tmp_path / 'home' / '.ssh'
    outside.mkdir(parents=True)
    (outside / 'id_rsa').write_text('-----BEGIN RSA PRIVATE KEY-----\n')
    repo = _tree(tmp_path / 'repo', {'Dockerfile': 'FROM x\nCOPY . ./\n', 'a.py': ''})
    os.symlink(outside / 'id_rsa', os.path.join(repo, 'notes.txt'))
    os.symlink(outside, os.path.join(repo, 'linked-dir'))
    context = build.pack_context(str(tmp_path), repo)
    members = _members(context)
    assert members['notes.txt'].issym() and members['notes.txt'].linkname == str(
        outside / 'id_rsa')
    assert members['linked-dir'].issym()
    assert not any(name.startswith('linked-dir/') for name in members)
    with tarfile.open(context.path) as tar:
        for member in tar:
            assert not member.isfile() or b'PRIVATE KEY' not in tar.extractfile(member).read()
    os.remove(os.path.join(repo, 'notes.txt'))
    os.symlink(outside, os.path.join(repo, 'notes.txt'))
    assert build.pack_context(str(tmp_path), repo).sha256 != context.sha256
    # A COPY through a symlinked directory packs the link, not the file behind it.
    _tree(repo, {'Dockerfile': 'FROM x\nCOPY linked-dir/id_rsa /root/.ssh/\n'})
    assert build.context_files(repo) == ('Dockerfile', 'linked-dir')


def test_a_named_pipe_is_refused_not_read(tmp_path):
    repo = _tree(tmp_path / 'repo', {'Dockerfile': 'FROM x\nCOPY . ./\n', 'a.py': ''})
    os.mkfifo(os.path.join(repo, 'pipe'))  # reading it would block forever
    with pytest.raises(UserInputError) as raised:
        build.pack_context(str(tmp_path), repo)
    assert str(raised.value) == ('pipe in the build context is a named pipe, not a file, '
                                 'directory or symlink: remove it or list it in .dockerignore')


@pytest.mark.skipif(os.geteuid() == 0, reason='root reads any file')
def test_an_unreadable_file_is_one_line(tmp_path):
    repo = _tree(tmp_path / 'repo', {'Dockerfile': 'FROM x\nCOPY . ./\n', 'a.py': ''})
    os.chmod(os.path.join(repo, 'a.py'), 0)
    with pytest.raises(UserInputError, match=r'^cannot read a.py for the build context '
                       r'\(Permission denied\): make it readable or list it in .dockerignore$'):
        build.pack_context(str(tmp_path), repo)


def test_the_executable_bit_is_part_of_the_hash(tmp_path):
    repo = _tree(tmp_path / 'repo', {'Dockerfile': 'FROM x\nCOPY . ./\n', 'run.sh': 'echo\n'})
    first = build.pack_context(str(tmp_path), repo)
    os.chmod(os.path.join(repo, 'run.sh'), 0o755)
    second = build.pack_context(str(tmp_path), repo)
    assert second.sha256 != first.sha256
    assert _members(second)['run.sh'].mode == 0o755


def test_a_large_context_names_its_largest_directories(tmp_path, monkeypatch):
    monkeypatch.setattr(build, 'LARGE_CONTEXT_BYTES', 4096)
    repo = _tree(tmp_path / 'repo', {'Dockerfile': 'FROM x\nCOPY . ./\n', 'a.py': '',
                                     'assets/logo.txt': 'x' * 3000, 'assets/more.txt': 'y'})
    with open(os.path.join(repo, 'data.bin'), 'wb') as f:
        f.write(b'\0' * 5000)
    context = build.pack_context(str(tmp_path), repo)
    assert context.warnings() == [
        'the build context is 7.8 KiB (largest: data.bin 4.9 KiB, assets/ 2.9 KiB, '
        'Dockerfile 17 bytes); list what the image does not need in .dockerignore']
    assert context.notes()[0].startswith('the build context: 5 files, 7.8 KiB (')


def test_the_context_of_a_checkout_with_data_and_a_finished_sweep_holds_code_only(tmp_path):
    """HW3's checkout: CIFAR-10 TFRecords beside the package and two finished sweeps
    with their job-dirs (checkpoints, events, run records): none of it reaches the
    image, and the context's hash does not move with them; a directory .gitignore
    leaves out stays out too."""
    copy = checkouts.clone(tmp_path / 'checkout')
    before = build.pack_context(str(tmp_path), str(copy))
    _tree(copy, {'cifar-10-data/metadata.json': '{}',
                 'checkpoint-interval/sweep.yaml': 'name: checkpoint-interval\n',
                 'checkpoint-interval/results.csv': 'point,accuracy\n',
                 'checkpoint-interval/runs/every-500/checkpoint': 'model_checkpoint_path\n',
                 'checkpoint-interval/runs/every-500/run_record.json': '{}',
                 'resume/sweep.yaml': 'name: resume\n',
                 'resume/runs/p/eval/events.out.tfevents.1.host': 'x',
                 'resume/runs/p/checkpoint': 'x'})
    noise = os.urandom(8 << 20)  # incompressible: it would show in the context's size
    for name in ('cifar-10-data/train.tfrecords', 'checkpoint-interval/runs/every-500/'
                 'model.ckpt-500.data-00000-of-00001', 'resume/runs/p/model.ckpt-9.data'):
        (copy / name).write_bytes(noise)
    context = build.pack_context(str(tmp_path), str(copy))
    assert context.size < 5 * 1024 * 1024 and context.raw_bytes < 5 * 1024 * 1024
    assert (context.files, context.sha256) == (before.files, before.sha256)
    assert context.outputs == ('checkpoint-interval', 'cifar-10-data', 'resume')
    assert context.notes()[0].endswith('; left out as outputs of runs or by .gitignore: '
                                       'checkpoint-interval, cifar-10-data, resume')

    _tree(copy, {'scratch/notes.py': 'print(1)\n',
                 '.gitignore': (copy / '.gitignore').read_text() + '/scratch/\n'})
    context = build.pack_context(str(tmp_path), str(copy))
    assert 'scratch' in context.outputs
    assert not [name for name in context.files if name.startswith('scratch/')]


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
    with pytest.raises(google_api.ApiError) as raised:
        builder.build(build.build_body('gs://b/c.tar.gz', IMAGE_PREFIX + 'x', 'cpu'), 0,
                      io.StringIO())
    assert str(raised.value) == ('Cloud Build b2 ended FAILURE (step 0 exited 1); its log: '
                                 'https://console/b2')


def test_a_cloud_build_quota_answer_names_the_resource():
    builder, _, _ = _builder([cloud_fakes.error(429, 'Quota exceeded for concurrent builds')])
    with pytest.raises(google_api.ApiError) as raised:
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


class Backend(backend_lib.Backend):
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
    code = train_cloud.main(['submit', 'cifar10', '--config',
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
    with pytest.raises(google_api.ApiError) as raised:
        _submit(backend, '--executor-image-uri', train_cloud.EXECUTOR_IMAGES['cpu'])
    assert str(raised.value).endswith(
        "; Vertex AI refuses the executor image %s: drop --executor-image-uri to build this "
        "project's image, or pass --image-uri" % train_cloud.EXECUTOR_IMAGES['cpu'])
    assert '\n' not in str(raised.value)


def test_dry_run_of_the_default_prints_the_build_and_the_job():
    env = {'PROJECT_ID': 'my-project', 'BUCKET_NAME': 'gs://my-bucket', 'REGION': REGION,
           'GOOGLE_APPLICATION_CREDENTIALS': '/nonexistent/key.json',
           'HTTPS_PROXY': 'http://127.0.0.1:9', 'STORAGE_EMULATOR_HOST': ''}
    proc = run_module('estimator_trainers.tools.cloud', 'submit', 'cifar10', '--config',
                      os.path.join(REPO_ROOT, 'configs', 'cmle_config_gpu.yaml'), '--dry-run',
                      env=env, timeout=120, check=0)
    printed = json.loads(proc.stdout)
    assert printed['staging'] == []
    plan = printed['image']
    request = plan['build']
    assert (request['method'], request['uri']) == ('POST', CLOUDBUILD + '?alt=json')
    schema.check('cloudbuild', 'v1', 'Build', request['body'])
    image = request['body']['images'][0]
    assert image == IMAGE_PREFIX + build.image_tag(plan['sha256'], 'gpu')
    assert plan['destination'] == 'gs://my-bucket/staging/builds/%s.tar.gz' % plan['sha256']
    assert plan['files'] == len(build.context_files())
    pools = printed['request']['body']['jobSpec']['workerPoolSpecs']
    assert {pool['containerSpec']['imageUri'] for pool in pools} == {image}
    (note,) = cloud_fakes.without_estimate(proc.stderr)
    assert re.fullmatch(r'note: the build context: %d files, [\d.]+ [KM]iB \([\d.]+ [KM]iB '
                        r'compressed\)' % plan['files'], note), note


# ------------------------------------------- credentials in a real checkout


def _checkout_with_credentials(tmp_path):
    """This project's tracked files, with a .env, a key.json and a TLS key dropped in."""
    copy = checkouts.clone(tmp_path / 'checkout')
    _tree(copy, {'.env': 'API_TOKEN=hunter2\n', 'key.json': SERVICE_ACCOUNT_KEY,
                 'configs/tls.key': 'x\n'})
    return copy


CHECKOUT_NOTE = (
    'note: left out of the build context, as they look like credentials: .env (named like '
    'a credential (.env)), configs/tls.key (named like a credential (*.key)), key.json (named '
    'like a credential (key.json)) (list them in .dockerignore to leave them out silently)')


def test_dry_run_from_a_checkout_with_credentials_names_them_once(tmp_path):
    copy = _checkout_with_credentials(tmp_path)
    env = cli_env(dict(cloud_fakes.OFFLINE_ENV, PYTHONPATH=str(copy)))
    proc = processes.run([sys.executable, '-m', 'estimator_trainers.tools.cloud', 'submit',
                          'cifar10', '--dry-run'], 120, cwd=str(copy), env=env,
                         stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert cloud_fakes.without_estimate(proc.stderr)[1:] == [CHECKOUT_NOTE]
    assert cloud_fakes.without_estimate(proc.stderr)[0].startswith('note: the build context: ')
    assert json.loads(proc.stdout)['image']['files'] == len(build.context_files(str(copy)))


def test_the_uploaded_build_context_holds_no_credentials(gcs, tmp_path, monkeypatch):
    copy = _checkout_with_credentials(tmp_path)
    monkeypatch.setattr(staging, 'REPO_ROOT', str(copy))
    backend = Backend([(200, {'name': REPOSITORY}), cloud_fakes.error(404, 'Tag not found'),
                       (200, {'metadata': {'build': {'id': 'b9'}}}),
                       (200, {'id': 'b9', 'status': 'SUCCESS'}),
                       (200, {'name': 'projects/my-project/locations/us-central1/customJobs/9'})],
                      gcs)
    code, err = _submit(backend, '--job-name', 'train_with_keys_around')
    assert code == 0
    assert CHECKOUT_NOTE in err.splitlines()
    source = backend.http.requests[2].body['source']['storageSource']
    uploaded = tmp_path / 'uploaded.tar.gz'
    gcs.bucket(source['bucket']).blob(source['object']).download_to_filename(str(uploaded))
    with tarfile.open(uploaded) as tar:
        names = tar.getnames()
        contents = b''.join(tar.extractfile(m).read() for m in tar if m.isfile())
    assert 'estimator_trainers/tools/cloud/train_cloud.py' in names
    assert not {'.env', 'key.json', 'configs/tls.key'} & set(names)
    assert b'hunter2' not in contents and b'MIIEvQIBADANBg' not in contents


def test_an_sdist_holding_a_credential_is_refused(tmp_path):
    """A key pasted into configs/ reaches the sdist through MANIFEST.in."""
    copy = _checkout_with_credentials(tmp_path)
    _tree(copy, {'configs/deploy.yaml': SERVICE_ACCOUNT_KEY})  # JSON is YAML
    env = cli_env(dict(cloud_fakes.OFFLINE_ENV, PYTHONPATH=str(copy)))
    proc = processes.run([sys.executable, '-m', 'estimator_trainers.tools.cloud', 'submit',
                          'cifar10', '--dry-run', '--executor-image-uri',
                          train_cloud.EXECUTOR_IMAGES['cpu']], 120, cwd=str(copy), env=env,
                         stdin=subprocess.DEVNULL)
    assert (proc.returncode, proc.stdout) == (2, ''), proc.stderr[-3000:]
    assert cloud_fakes.without_estimate(proc.stderr) == [
        'error: estimator-trainers-0.1.0.tar.gz holds files that look like credentials: '
        'estimator-trainers-0.1.0/configs/deploy.yaml (a Google credentials file); keep them '
        'out of the package (and its MANIFEST.in)']
