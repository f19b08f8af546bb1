"""`python -m estimator_trainers.tools.cloud` (train-cloud.sh's front): dry runs in
subprocesses, full submissions in process against recorded Vertex AI answers and
a GCS emulator.
"""
import dataclasses
import io
import json
import os
import re
import shutil

import pytest
import yaml

import cloud_fakes
import processes
from conftest import REPO_ROOT
from conftest import run_module
from estimator_trainers import job_record
from estimator_trainers.tools.cloud import backend as backend_lib
from estimator_trainers.tools.cloud import jobs
from estimator_trainers.tools.cloud import schema
from estimator_trainers.tools.cloud import staging
from estimator_trainers.tools.cloud import train_cloud
from estimator_trainers.errors import UserInputError

MODULE = 'estimator_trainers.tools.cloud'
PARENT = 'projects/my-project/locations/us-central1'
ENDPOINT = 'https://us-central1-aiplatform.googleapis.com/v1/'
BUCKET = 'cli-bucket'
# An executor image whose Python version is not encoded in its name (not checked).
EXECUTOR = 'us-docker.pkg.dev/my-project/executors/tf-2-15:latest'
CONTAINER = 'us-central1-docker.pkg.dev/my-project/trainers/estimator-trainers:cpu'


def _config(name):
    return os.path.join(REPO_ROOT, 'configs', name)


# Dry runs must need no credentials and touch no network: the key file does not
# exist and every proxy points at a closed port.
OFFLINE_ENV = cloud_fakes.OFFLINE_ENV


def _dry_run(*args, check=0):
    proc = run_module(MODULE, 'submit', *args, env=OFFLINE_ENV, timeout=120, check=check)
    assert 'Traceback' not in proc.stderr
    for line in proc.stderr.splitlines():
        assert line.startswith(('note: ', 'warning: ', 'error: ', 'estimate: ')), line
    return proc


def test_dry_run_prints_the_staging_plan_and_the_exact_request():
    proc = _dry_run('cifar10', '--config', _config('cmle_config_gpu.yaml'), '--dry-run',
                    '--job-name', 'train_cifar10_e2e', '--executor-image-uri',
                    train_cloud.EXECUTOR_IMAGES['gpu'], '--', '--train-steps=10000')
    printed = json.loads(proc.stdout)
    (plan,) = printed['staging']
    assert re.fullmatch('[0-9a-f]{64}', plan['sha256'])
    package = 'gs://my-bucket/staging/train_cifar10_e2e/%s/estimator-trainers-0.1.0.tar.gz' \
        % plan['sha256']
    assert plan['destination'] == package
    assert plan['package'] == 'estimator-trainers-0.1.0.tar.gz' and plan['bytes'] > 0
    assert 'image' not in printed  # the prebuilt image installs the package
    request = printed['request']
    assert request['method'] == 'POST'
    assert request['uri'] == ENDPOINT + PARENT + '/customJobs?alt=json'
    body = request['body']
    schema.check('aiplatform', 'v1', 'GoogleCloudAiplatformV1CustomJob', body)
    assert body['displayName'] == 'train_cifar10_e2e'
    chief, workers, ps = body['jobSpec']['workerPoolSpecs']
    assert chief['machineSpec'] == {'machineType': 'n1-standard-16',
                                    'acceleratorType': 'NVIDIA_TESLA_T4', 'acceleratorCount': 4}
    assert (workers['replicaCount'], ps['machineSpec']) == ('2', {'machineType': 'n1-highmem-8'})
    job_dir = 'gs://my-bucket/jobs/train_cifar10_e2e'
    assert chief['pythonPackageSpec'] == {
        'executorImageUri': train_cloud.EXECUTOR_IMAGES['gpu'], 'packageUris': [package],
        'pythonModule': 'cifar10_estimator.cifar10_main',
        'args': ['--data-dir=gs://my-bucket/data/cifar10', '--train-steps=10000',
                 '--job-dir=' + job_dir]}
    assert body['jobSpec']['baseOutputDirectory'] == {'outputUriPrefix': job_dir}


def test_verbosity_debug_shows_the_libraries_notices():
    """What `_dry_run` finds absent by default (#48): google-api-core's notice."""
    proc = run_module(MODULE, 'submit', 'taxi', '--config', _config('config_ps.yaml'),
                      '--dry-run', '--image-uri', CONTAINER, '--verbosity', 'debug',
                      env=OFFLINE_ENV, timeout=120, check=0)
    assert 'FutureWarning: You are using a Python version' in proc.stderr


def test_dry_run_of_a_tuning_config_and_the_default_job_name():
    proc = _dry_run('cifar10', '--config', _config('hptuning_config.yaml'), '--dry-run',
                    '--image-uri', CONTAINER)
    printed = json.loads(proc.stdout)
    assert printed['staging'] == [] and 'image' not in printed  # the container has it
    assert printed['request']['uri'] == ENDPOINT + PARENT + '/hyperparameterTuningJobs?alt=json'
    body = printed['request']['body']
    schema.check('aiplatform', 'v1', 'GoogleCloudAiplatformV1HyperparameterTuningJob', body)
    assert re.fullmatch(r'train_cifar10_\d{8}_\d{6}', body['displayName'])
    assert body['studySpec']['metrics'] == [{'metricId': 'accuracy', 'goal': 'MAXIMIZE'}]
    pool, = body['trialJobSpec']['workerPoolSpecs']
    assert pool['containerSpec']['args'] == ['--data-dir=gs://my-bucket/data/cifar10',
                                             '--hypertune-metric=accuracy']


def test_the_retired_ai_platform_target_is_refused():
    """AI Platform Training was shut down on 2025-01-31: nothing prints its request."""
    proc = run_module(MODULE, 'submit', 'taxi', '--target', 'ai-platform', env=OFFLINE_ENV,
                      timeout=120, check=2)
    assert "argument --target: invalid choice: 'ai-platform'" in proc.stderr
    assert proc.stdout == ''


def test_target_tfjob_prints_a_manifest():
    proc = _dry_run('cifar10', '--config', _config('config_mwms.yaml'), '--target', 'tfjob',
                    '--image-uri', CONTAINER, '--job-name', 'train_cifar10_k8s')
    manifest, policy = yaml.safe_load_all(proc.stdout)
    assert manifest['metadata']['name'] == 'train-cifar10-k8s'
    assert {k: v['replicas'] for k, v in manifest['spec']['tfReplicaSpecs'].items()} == {
        'Chief': 1, 'Worker': 2}
    assert policy['kind'] == 'NetworkPolicy'


def test_bad_input_is_one_error_line(tmp_path):
    bad = tmp_path / 'bad.yaml'
    bad.write_text('trainingInput:\n  scaleTier: CUSTOM\n  masterType: standard\n  workerCount: 2\n')
    proc = _dry_run('cifar10', '--config', str(bad), '--dry-run', check=2)
    assert proc.stderr.splitlines() == [
        'error: %s line 4: trainingInput.workerCount: 2 replicas need trainingInput.workerType'
        % bad]
    assert proc.stdout == ''
    proc = run_module(MODULE, 'submit', 'taxi', '--dry-run', check=2,
                      env=dict(OFFLINE_ENV, BUCKET_NAME=''))
    assert proc.stderr.splitlines() == [
        'error: no bucket: set BUCKET_NAME=gs://your-bucket or pass --bucket']


def test_train_cloud_sh_usage():
    bash = shutil.which('bash')
    proc = processes.run([bash, 'scripts/train-cloud.sh', '--help'], 60, cwd=REPO_ROOT)
    assert proc.returncode == 0
    assert proc.stdout.startswith('Usage: bash scripts/train-cloud.sh MODEL')
    proc = processes.run([bash, 'scripts/train-cloud.sh'], 60, cwd=REPO_ROOT)
    assert proc.returncode == 2
    assert proc.stderr.startswith('Usage: ')


# ------------------------------------------------- in-process submissions


class FakeBackend(backend_lib.Backend):
    """Credentials and clients for the in-process runs: recorded Vertex AI
    answers and the emulator's storage client."""

    def __init__(self, responses=(), storage_client=None, adc_project='adc-project'):
        self.http = cloud_fakes.RecordingHttp(responses)
        self.storage_client = storage_client
        self.adc_project = adc_project
        self.calls = []

    def credentials(self):
        self.calls.append('credentials')
        return object(), self.adc_project

    def transport(self, credentials):
        return self.http

    def vertex(self, project, region, credentials):
        self.calls.append(('vertex', project, region))
        return jobs.VertexJobs(project, region, http=self.http)

    def storage(self, project, credentials):
        self.calls.append('storage')
        return self.storage_client


@pytest.fixture(scope='module')
def gcs(gcs):  # pylint: disable=redefined-outer-name
    """A google-cloud-storage client of the suite's fake-gcs-server (conftest's gcs)."""
    with cloud_fakes.storage_client(gcs, BUCKET) as client:
        # The data the cifar10 trainer reads by default (<bucket>/data/cifar10).
        client.bucket(BUCKET).blob('data/cifar10/metadata.json').upload_from_string('{}')
        yield client


@pytest.fixture(autouse=True)
def _no_env_settings(monkeypatch):
    for name in ('PROJECT_ID', 'BUCKET_NAME', 'REGION'):
        monkeypatch.delenv(name, raising=False)


def _main(argv, backend):
    out, err = io.StringIO(), io.StringIO()
    code = train_cloud.main(argv, backend=backend, out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def _submit_args(job_name, *extra):
    return ['submit', 'cifar10', '--config', _config('cmle_config.yaml'), '--bucket',
            'gs://' + BUCKET, '--project', 'my-project', '--job-name', job_name,
            '--executor-image-uri', EXECUTOR, *extra, '--', '--train-steps=10']


def _entry(task, second, text, insert_id=None):
    return {'logName': 'projects/my-project/logs/workerpool0-0',
            'insertId': insert_id or '%s-%d' % (task, second),
            'timestamp': '2026-01-01T00:00:%02dZ' % second, 'textPayload': text,
            'resource': {'type': 'ml_job', 'labels': {'job_id': '42', 'task_name': task}}}


def test_submit_stages_creates_and_follows_the_job(gcs, tmp_path, monkeypatch):
    name = PARENT + '/customJobs/42'
    record = tmp_path / 'job.json'  # where a program running the command asks for the job
    monkeypatch.setenv(job_record.JOB_RECORD_ENV, str(record))
    backend = FakeBackend([
        (200, {'name': name, 'displayName': 'train_cifar10_cli'}),
        (200, {'name': name, 'state': 'JOB_STATE_PENDING'}),
        (200, {}),
        (200, {'name': name, 'state': 'JOB_STATE_RUNNING'}),
        (200, {'entries': [_entry('workerpool0-0', 1, 'step 1'),
                           _entry('workerpool2-0', 2, 'ps started')]}),
        (200, {'name': name, 'state': 'JOB_STATE_SUCCEEDED'}),
        (200, {'entries': [_entry('workerpool2-0', 2, 'ps started'),
                           _entry('workerpool1-0', 3, 'worker done')]}),
        (200, {})], gcs)
    code, out, err = _main(_submit_args('train_cifar10_cli', '--stream-logs',
                                        '--poll-interval', '0'), backend)
    assert code == 0
    assert job_record.read(str(record)) == job_record.JobRecord(name, 'us-central1',
                                                                'my-project')
    assert out.splitlines() == [
        name, '[job] JOB_STATE_PENDING', '[job] JOB_STATE_RUNNING', '[chief-0] step 1',
        '[ps-0] ps started', '[job] JOB_STATE_SUCCEEDED', '[worker-0] worker done']
    (blob,) = gcs.bucket(BUCKET).list_blobs(prefix='staging/train_cifar10_cli/')
    package = blob.name
    assert re.fullmatch(r'staging/train_cifar10_cli/[0-9a-f]{64}/estimator-trainers-0\.1\.0'
                        r'\.tar\.gz', package)
    assert package.split('/')[2] == blob.metadata['content-sha256']
    assert 'staged gs://%s/%s (sha256 %s)' % (BUCKET, package, blob.metadata['content-sha256']) in err
    job_dir = 'gs://%s/jobs/train_cifar10_cli' % BUCKET
    assert err.splitlines()[-6:] == [
        'created customJobs train_cifar10_cli: ' + name,
        'console:     https://console.cloud.google.com/vertex-ai/locations/us-central1/'
        'training/42?project=my-project',
        'job-dir:     ' + job_dir,
        'tensorboard: tensorboard --logdir %s --load_fast=false' % job_dir,
        'follow:      python -m estimator_trainers.tools.cloud logs ' + name,
        'cancel:      python -m estimator_trainers.tools.cloud cancel ' + name]

    create, *polls = backend.http.requests
    assert (create.method, create.uri) == ('POST', ENDPOINT + PARENT + '/customJobs?alt=json')
    schema.check('aiplatform', 'v1', 'GoogleCloudAiplatformV1CustomJob', create.body)
    spec = create.body['jobSpec']['workerPoolSpecs'][0]['pythonPackageSpec']
    assert spec['packageUris'] == ['gs://%s/%s' % (BUCKET, package)]
    assert spec['executorImageUri'] == EXECUTOR
    logging = 'https://logging.googleapis.com/v2/entries:list?alt=json'
    assert [(r.method, r.uri) for r in polls] == [
        ('GET', ENDPOINT + name + '?alt=json'), ('POST', logging)] * 3 + [('POST', logging)]
    assert polls[1].body['filter'] == 'resource.type="ml_job" AND resource.labels.job_id="42"'
    assert polls[5].body['filter'].endswith(' AND timestamp>="2026-01-01T00:00:02Z"')
    assert backend.calls == ['credentials', 'storage', ('vertex', 'my-project', 'us-central1')]


def test_resubmitting_the_same_job_skips_the_upload_and_a_failed_job_exits_1(gcs):
    name = PARENT + '/customJobs/43'
    answers = [(200, {'name': name}), (200, {'name': name, 'state': 'JOB_STATE_FAILED',
                                             'error': {'message': 'replica exited with 1'}})]
    code, _, err = _main(_submit_args('train_cifar10_again'), FakeBackend(answers[:1], gcs))
    assert code == 0 and 'staged gs://' in err
    (blob,) = gcs.bucket(BUCKET).list_blobs(prefix='staging/train_cifar10_again/')

    code, out, err = _main(_submit_args('train_cifar10_again', '--stream-logs',
                                        '--poll-interval', '0'),
                           FakeBackend(answers + [(200, {}), (200, {})], gcs))
    assert code == 1
    assert 'already holds estimator-trainers-0.1.0.tar.gz' in err and 'upload skipped' in err
    assert out.splitlines()[-1] == 'error: replica exited with 1'
    assert gcs.bucket(BUCKET).get_blob(blob.name).generation == blob.generation


def test_a_package_the_executor_cannot_install_stops_before_upload(gcs, monkeypatch):
    build = staging.build_sdist
    monkeypatch.setattr(staging, 'build_sdist', lambda out_dir: dataclasses.replace(
        build(out_dir), requires_python='==3.11.*'))
    backend = FakeBackend([], gcs)
    argv = _submit_args('train_cifar10_py')
    argv[argv.index(EXECUTOR)] = train_cloud.EXECUTOR_IMAGES['cpu']
    with pytest.raises(UserInputError, match=r'^the package requires Python ==3\.11\.\* '
                       r'\(pyproject\.toml\) but .*tf-cpu\.2-15\.py310:latest runs Python 3\.10'):
        _main(argv, backend)
    assert backend.http.requests == []
    assert list(gcs.bucket(BUCKET).list_blobs(prefix='staging/train_cifar10_py/')) == []


def test_a_missing_bucket_is_an_error_before_any_upload(gcs):
    backend = FakeBackend([], gcs)
    argv = _submit_args('train_cifar10_nobucket')
    argv[argv.index('gs://' + BUCKET)] = 'gs://missing-bucket'
    with pytest.raises(UserInputError, match=r'^--data-dir gs://missing-bucket/data/cifar10: '
                       r'bucket gs://missing-bucket does not exist$'):
        _main(argv, backend)
    assert backend.http.requests == []


class RealStorage(FakeBackend):
    """Recorded credentials, and the storage client the environment names (as
    `backend_lib.Backend` makes it: local storage, when the pipeline starts one)."""

    def storage(self, project, credentials):
        self.calls.append('storage')
        return backend_lib.Backend.storage(self, project, credentials)


class NoCredentials(RealStorage):
    """A machine without Application Default Credentials, as `backend_lib.Backend` says it."""

    def credentials(self):
        self.calls.append('credentials')
        raise UserInputError('no usable Application Default Credentials (...)')


@pytest.fixture(scope='module')
def sdist(tmp_path_factory):
    """This repository's sdist, built once for the rehearsals that stop before staging."""
    return staging.build_sdist(str(tmp_path_factory.mktemp('sdist')))


@pytest.fixture
def built(sdist, monkeypatch):
    monkeypatch.setattr(staging, 'build_sdist', lambda out_dir: sdist)


def _rehearse(argv, backend, environ):
    """`argv` with --rehearse in process: (the error it ends with, its stderr)."""
    err = io.StringIO()
    with pytest.raises(UserInputError) as raised:
        train_cloud.main(argv[:argv.index('--')] + ['--rehearse'] + argv[argv.index('--'):],
                         backend=backend, out=io.StringIO(), err=err, environ=environ)
    return str(raised.value), err.getvalue()


def test_a_rehearsal_with_credentials_uses_the_real_buckets(gcs, built, tmp_path):
    """Credentials found: the backend's storage client, no local storage, no hint."""
    argv = _submit_args('train_cifar10_real')
    argv[argv.index('gs://' + BUCKET)] = 'gs://missing-bucket'
    backend = FakeBackend([], gcs)
    environ = {'XDG_CACHE_HOME': str(tmp_path)}  # no emulator named
    error, err = _rehearse(argv, backend, environ)
    assert error == ('--data-dir gs://missing-bucket/data/cifar10: bucket gs://missing-bucket '
                     'does not exist')
    assert backend.calls == ['credentials', 'storage']
    assert 'local storage' not in err and not os.listdir(tmp_path)


def test_without_credentials_the_rehearsal_runs_on_local_storage(built, tmp_path):
    """No credentials set up: local storage, said in one line; the missing data
    is one line naming --local-input; nothing is left running."""
    backend = NoCredentials([])
    environ = cloud_fakes.no_account_env(tmp_path)
    argv = _submit_args('train_cifar10_local')
    argv.remove('--project')
    argv.remove('my-project')
    before = dict(os.environ)
    error, err = _rehearse(argv, backend, environ)
    assert dict(os.environ) == before  # the storage's environment was this process's meanwhile
    assert error == ('--data-dir gs://cli-bucket/data/cifar10: no such object or directory in '
                     'the bucket; on local storage, give it from this machine: --local-input '
                     'gs://cli-bucket/data/cifar10=DIR')
    assert cloud_fakes.said(err)[-1:] == [
        'note: no Application Default Credentials found: rehearsing on local storage '
        '(fake-gcs-server) standing in for gs://cli-bucket, in project local-rehearsal; '
        'nothing reaches Google Cloud, and what the job writes is kept in %s'
        % cloud_fakes.mirror(tmp_path, 'gs://')]
    assert backend.calls == ['credentials', 'storage']
    # Credentials that are set up but broken are not missing: their own line.
    environ['GOOGLE_APPLICATION_CREDENTIALS'] = str(tmp_path / 'key.json')
    error, _ = _rehearse(argv, NoCredentials([]), environ)
    assert error == 'no usable Application Default Credentials (...)'


def test_local_storage_on_request_and_the_inputs_it_is_given(built, tmp_path):
    """--local-storage: no credentials asked for; --local-input copies a directory."""
    data = tmp_path / 'data'
    (data / 'sub').mkdir(parents=True)
    (data / 'sub' / 'a.txt').write_text('a')
    backend = RealStorage([])
    argv = _submit_args('train_cifar10_asked', '--local-storage', '--local-input',
                        'gs://inputs-bkt/copied=%s' % data)
    error, err = _rehearse(argv, backend, cloud_fakes.no_account_env(tmp_path))
    assert error.startswith('--data-dir gs://cli-bucket/data/cifar10: no such object ')
    assert 'credentials' not in backend.calls
    assert cloud_fakes.said(err)[-1].startswith(
        'note: --local-storage: rehearsing on local storage (fake-gcs-server) standing in for '
        'gs://cli-bucket, gs://inputs-bkt; nothing reaches Google Cloud')
    assert re.search(r'^--local-input gs://inputs-bkt/copied: 1 file \(1 bytes\) from %s '
                     r'copied in \d+\.\d s$' % re.escape(str(data)), err, re.M)


@pytest.mark.parametrize('extra', [[], ['--dry-run']], ids=['submit', 'dry-run'])
def test_a_body_the_schema_rejects_is_never_printed_staged_or_sent(gcs, monkeypatch, extra):
    """The CLI checks each body itself: a builder bug must stop before any output.

    Injected builder bug: Vertex pools with an int64 count as a number. No
    response is queued, so a request that went out would fail differently;
    nothing may be printed or uploaded.
    """
    pools = jobs.worker_pool_specs
    monkeypatch.setattr(jobs, 'worker_pool_specs', lambda *args: [
        dict(spec, replicaCount=int(spec['replicaCount'])) if spec else spec
        for spec in pools(*args)])
    invalid = r'\.replicaCount: expected a string, got 1$'
    backend = FakeBackend([], gcs)
    out, err = io.StringIO(), io.StringIO()
    with pytest.raises(schema.SchemaError, match=invalid):
        train_cloud.main(_submit_args('train_cifar10_invalid', *extra), backend=backend, out=out,
                 err=err)
    assert out.getvalue() == ''
    assert backend.http.requests == []
    assert list(gcs.bucket(BUCKET).list_blobs(prefix='staging/train_cifar10_invalid/')) == []


@pytest.mark.parametrize('argv,message', [
    (['submit', 'taxi'], 'no bucket: set BUCKET_NAME=gs://your-bucket or pass --bucket'),
    (['submit', 'taxi', '--bucket', 'gs://my-bucket', '--job-name', 'train-taxi'],
     "--job-name 'train-taxi': expected a letter followed by letters, digits or underscores"),
    (['submit', 'taxi', '--bucket', 'gs://my-bucket', '--job-dir', '/tmp/x'],
     '--job-dir /tmp/x: expected a gs:// path'),
    (['submit', 'taxi', '--bucket', 'gs://my-bucket', '--region', 'Europe'],
     "region 'Europe': expected a Vertex AI region like us-central1"),
    (['submit', 'taxi', '--bucket', 'gs://my-bucket', '--', '--job-dir=gs://b/x'],
     '--job-dir is a submit option (before --) or trainingInput.jobDir, not a trainer flag'),
    (['submit', 'taxi', '--bucket', 'gs://my-bucket', '--target', 'tfjob'], '--target tfjob needs --image-uri'),
    (['status', '1', '--', '--x'], 'trainer flags after -- only go with submit'),
    (['submit', 'taxi', '--bucket', 'gs://my-bucket', '--repository', 'My_Repo'],
     "--repository 'My_Repo': expected an Artifact Registry repository id"),
    (['submit', 'cifar10', '--bucket', 'gs://my-bucket', '--', '--num-layers=45'],
     'trainer flags: argument --num-layers: expected 6n+2'),
    (['submit', 'cifar10', '--runtime-version', '1.15', '--config', 'configs/cmle_config.yaml'],
     '--runtime-version is a flag of gcloud ai-platform jobs submit training: run your gcloud '
     'line as bash scripts/ai-platform.sh jobs submit training JOB ...'),
    (['submit', 'cifar10', '--scale-tier=CUSTOM', '--master-machine-type', 'n1-standard-4'],
     '--scale-tier is a flag of gcloud ai-platform jobs submit training'),
])
def test_input_errors_before_credentials(argv, message):
    backend = FakeBackend()
    with pytest.raises(UserInputError) as raised:
        _main(argv, backend)
    assert str(raised.value).startswith(message)
    assert backend.calls == []


def test_project_comes_from_flag_env_or_credentials(monkeypatch):
    no_project = '^no project: pass --project, set PROJECT_ID'
    with pytest.raises(UserInputError, match=no_project):
        _main(['submit', 'taxi', '--bucket', 'gs://my-bucket', '--dry-run'], FakeBackend())
    with pytest.raises(UserInputError, match=no_project):
        _main(['list'], FakeBackend(adc_project=None))
    backend = FakeBackend([(200, {}), (200, {})])
    _main(['list'], backend)
    assert backend.calls[-1] == ('vertex', 'adc-project', 'us-central1')
    monkeypatch.setenv('PROJECT_ID', 'env-project')
    monkeypatch.setenv('REGION', 'asia-east1')
    backend = FakeBackend([(200, {}), (200, {})])
    code, _, _ = _main(['list'], backend)
    assert code == 0 and backend.calls[-1] == ('vertex', 'env-project', 'asia-east1')


def test_missing_credentials_with_the_real_backend(monkeypatch):
    monkeypatch.setenv('GOOGLE_APPLICATION_CREDENTIALS', '/nonexistent/key.json')
    with pytest.raises(UserInputError, match=r'^no usable Application Default Credentials '
                       r'\(GOOGLE_APPLICATION_CREDENTIALS=/nonexistent/key.json: File '
                       r'/nonexistent/key.json was not found.\): run `gcloud auth '
                       r'application-default login`'):
        train_cloud.main(['submit', 'taxi', '--bucket', 'gs://my-bucket', '--project', 'my-project'])


def test_status_cancel_and_list():
    job = {'name': PARENT + '/customJobs/7', 'displayName': 'train_taxi_1',
           'state': 'JOB_STATE_RUNNING', 'createTime': '2026-01-02T03:04:05Z'}
    backend = FakeBackend([(200, job), (200, job)])
    code, out, _ = _main(['status', '7', '--project', 'my-project'], backend)
    assert code == 0
    assert out.splitlines() == ['name: %s/customJobs/7' % PARENT, 'displayName: train_taxi_1',
                                'state: JOB_STATE_RUNNING', 'createTime: 2026-01-02T03:04:05Z']

    other = 'projects/other/locations/europe-west4/hyperparameterTuningJobs/9'
    backend = FakeBackend([(200, {})])
    code, out, _ = _main(['cancel', other], backend)
    assert code == 0 and out.startswith('cancel requested for %s' % other)
    assert backend.calls == ['credentials', ('vertex', 'other', 'europe-west4')]
    assert (backend.http.requests[0].method, backend.http.requests[0].uri) == (
        'POST', 'https://europe-west4-aiplatform.googleapis.com/v1/%s:cancel?alt=json' % other)

    backend = FakeBackend([(200, {'customJobs': [job]}), (200, {'hyperparameterTuningJobs': [
        {'name': PARENT + '/hyperparameterTuningJobs/8', 'displayName': 'train_cifar10_hp',
         'state': 'JOB_STATE_SUCCEEDED', 'createTime': '2026-01-03T00:00:00Z'}]})])
    code, out, _ = _main(['list', '--project', 'my-project', '--limit', '5'], backend)
    assert [line.split() for line in out.splitlines()] == [
        ['JOB_STATE_SUCCEEDED', '2026-01-03T00:00:00Z', 'tuning', '8', 'train_cifar10_hp'],
        ['JOB_STATE_RUNNING', '2026-01-02T03:04:05Z', 'custom', '7', 'train_taxi_1']]


def test_api_errors_of_status_are_one_line():
    backend = FakeBackend([cloud_fakes.error(404, 'CustomJob does not exist.')])
    with pytest.raises(jobs.ApiError, match=r'^get %s/customJobs/1: not found \(CustomJob does '
                       r'not exist.\)$' % PARENT):
        _main(['status', PARENT + '/customJobs/1'], backend)
