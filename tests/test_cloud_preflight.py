"""Checks before anything is uploaded: trainer flags, pools, bucket contents,
credentials and a dead network, each refusing with one line.

The storage checks read the suite's fake-gcs-server through the real
google-cloud-storage client, or a `RecordingSession` where the emulator
cannot say no (permissions). Refusals happen before staging: the emulator
bucket then holds nothing under `staging/` and Vertex AI got no request.
"""
import io
import json
import os
import sys

import pytest
import yaml
from google.auth.credentials import AnonymousCredentials

import cloud_fakes
import processes
from conftest import REPO_ROOT
from conftest import cli_env
from conftest import run_module
from estimator_trainers import google_api
from estimator_trainers import registry
from estimator_trainers.errors import UserInputError
from estimator_trainers.tools.cloud import backend as backend_lib
from estimator_trainers.tools.cloud import configs
from estimator_trainers.tools.cloud import preflight
from estimator_trainers.tools.cloud import plan as plan_lib
from estimator_trainers.tools.cloud import train_cloud

MODULE = 'estimator_trainers.tools.cloud'
BUCKET = 'preflight-bucket'
EXECUTOR = 'us-docker.pkg.dev/my-project/executors/tf-2-15:latest'
OFFLINE_ENV = cloud_fakes.OFFLINE_ENV


def _config(name):
    return os.path.join(REPO_ROOT, 'configs', name)


def _one_error_line(proc, expected):
    assert proc.returncode == 2, proc.stderr
    assert 'Traceback' not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith('error: ')]
    assert errors == ['error: ' + expected]
    assert proc.stdout == ''


# ------------------------------------------------------------ trainer flags


@pytest.mark.parametrize('model,flags,expected', [
    ('cifar10', ['--bogus-flag=1'],
     'trainer flags: unrecognized arguments: --bogus-flag=1 (python -m '
     'cifar10_estimator.cifar10_main --help lists them)'),
    ('cifar10', ['--num-layers=45'],
     'trainer flags: argument --num-layers: expected 6n+2 (e.g. 20, 32, 44, 56, 110), '
     'got 45 (python -m cifar10_estimator.cifar10_main --help lists them)'),
    ('taxi', ['--batch-size=0'],
     "trainer flags: argument --batch-size: expected an integer > 0, got '0' "
     '(python -m taxi_estimator.task --help lists them)'),
    # Met only after training and the export: checked against the declaration.
    ('cifar10', ['--hypertune-metric=acuracy'],
     "trainer flags: argument --hypertune-metric: 'acuracy' is not a metric the cifar10 "
     'trainer evaluates (expected one of: accuracy, loss) (python -m '
     'cifar10_estimator.cifar10_main --help lists them)'),
])
def test_the_trainers_own_parser_refuses_a_dry_run(model, flags, expected):
    proc = run_module(MODULE, 'submit', model, '--config', _config('cmle_config.yaml'),
                      '--dry-run', '--', *flags, env=OFFLINE_ENV, timeout=120)
    _one_error_line(proc, expected)


def test_a_tuned_parameter_must_be_a_trainer_flag(tmp_path):
    with open(_config('hptuning_config.yaml')) as f:
        data = yaml.safe_load(f)
    data['trainingInput']['hyperparameters']['params'][0]['parameterName'] = 'lr'
    path = tmp_path / 'tuning.yaml'
    path.write_text(yaml.safe_dump(data))
    sub = _submission(configs.load_config(str(path)))
    with pytest.raises(UserInputError, match=r'^trainer flags: unrecognized arguments: '
                       r'--lr=0\.01 '):
        preflight.check_replicas(sub)
    data['trainingInput']['hyperparameters']['params'][0] = {
        'parameterName': 'learning-rate', 'type': 'CATEGORICAL',
        'categoricalValues': ['0.1', 'fast']}
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(UserInputError, match=r'^trainer flags: argument --learning-rate: '
                       r"expected a number, got 'fast'"):
        preflight.check_replicas(_submission(configs.load_config(str(path))))


def _submission(config, model='cifar10', args=(), job_dir='gs://%s/jobs/j' % BUCKET):
    trainer = registry.get(model)
    defaults = train_cloud.data_defaults(trainer, 'gs://' + BUCKET, list(args))
    return plan_lib.JobPlan(
        name='j', program=plan_lib.Trainer(trainer), config=config, project='my-project',
        region='us-central1', job_dir=job_dir, args=tuple(defaults + list(args)),
        staging='gs://%s/staging/j' % BUCKET)


def test_the_course_config_dry_runs_with_its_warning(tmp_path):
    path = tmp_path / 'course.yaml'
    path.write_text(cloud_fakes.COURSE_CONFIG)
    proc = run_module(MODULE, 'submit', 'cifar10', '--config', path, '--dry-run',
                      '--job-name', 'train_cifar10_course', env=OFFLINE_ENV, timeout=120,
                      check=0)
    assert cloud_fakes.said(proc.stderr) == [
        'warning: %s: trainingInput.parameterServerType set but parameterServerCount is '
        'unset: no ps replica runs (as on AI Platform); set parameterServerCount to run '
        'one' % path]
    pools = json.loads(proc.stdout)['request']['body']['jobSpec']['workerPoolSpecs']
    assert [(p['machineSpec']['machineType'], p['replicaCount']) for p in pools] == [
        ('n1-standard-16', '1'), ('n1-standard-16', '1')]


# ------------------------------------------------------------------- pools


def test_num_gpus_above_a_pools_gpus_is_refused_naming_the_pool():
    gpu = configs.load_config(_config('cmle_config_gpu.yaml'))
    checked = preflight.check_replicas(_submission(gpu, args=['--num-gpus=4']))
    assert checked.parsed.num_gpus == 4  # a parameter server claims no GPUs (test_startup)
    with pytest.raises(UserInputError) as raised:
        preflight.check_replicas(_submission(gpu, args=['--num-gpus=8']))
    assert str(raised.value) == (
        'worker pool 0 (chief, n1-standard-16 with 4 x NVIDIA_TESLA_T4), replica 0 would '
        'refuse to start: --num-gpus=8 but this machine has 4 GPU(s); give '
        'trainingInput.masterConfig an acceleratorConfig with 8 GPUs or lower --num-gpus')
    evaluator = configs.parse_config(yaml.safe_load(
        open(_config('cmle_config_gpu.yaml')).read().replace(
            'parameterServerType: n1-highmem-8\n  parameterServerCount: 1',
            'evaluatorType: n1-highmem-8\n  evaluatorCount: 1')), 'cfg.yaml')
    with pytest.raises(UserInputError, match=r'^worker pool 3 \(evaluator, n1-highmem-8 with no '
                       r'GPUs\), replica 0 would refuse to start: --num-gpus=4 but this '
                       r'machine has 0 GPU\(s\); give trainingInput.evaluatorConfig an '
                       r'acceleratorConfig with 4 GPUs'):
        preflight.check_replicas(_submission(evaluator, args=['--num-gpus', '4']))
    # multi_worker_mirrored (chief and workers, no ps) replicates over every GPU.
    with pytest.raises(UserInputError, match=r'^worker pool 0 .*: multi_worker_mirrored '
                       r'replicates over all 4 GPUs of each worker, not 2'):
        preflight.check_replicas(_submission(evaluator, args=['--num-gpus', '2']))


@pytest.mark.parametrize('config, flags, message', [
    # mirrored runs in one process; a job with workers cannot.
    ('config_mwms.yaml', ['--distribution-strategy=mirrored'],
     r'^worker pool 0 \(chief, n1-standard-8 with no GPUs\), replica 0 would refuse to start: '
     r'--distribution-strategy=mirrored runs in one process without TF_CONFIG'),
    ('config_ps.yaml', ['--distribution-strategy=multi_worker_mirrored'],
     r'^worker pool 0 \(chief, n1-standard-4 with no GPUs\), replica 0 would refuse to start: '
     r'--distribution-strategy=multi_worker_mirrored does not use parameter servers'),
    ('cmle_config.yaml', ['--distribution-strategy=none'],
     r'^worker pool 0 \(chief, n1-standard-16 with no GPUs\), replica 0 would refuse to '
     r'start: --distribution-strategy=none does not use parameter servers'),
    # The trainer's own checks of its flags (cifar10's --sync), before upload too.
    ('config_mwms.yaml', ['--sync'],
     r'^worker pool 0 .*would refuse to start: --sync wraps the optimizer for parameter '
     r'servers; --distribution-strategy=multi_worker_mirrored is synchronous already$'),
], ids=['mirrored-with-workers', 'mwms-with-ps', 'none-with-ps', 'sync-under-mwms'])
def test_a_job_one_replica_would_refuse_is_refused_naming_the_pool(config, flags, message):
    with pytest.raises(UserInputError, match=message):
        preflight.check_replicas(_submission(configs.load_config(_config(config)), args=flags))


# ---------------------------------------------------------------- storage


@pytest.fixture(scope='module')
def gcs(gcs):  # pylint: disable=redefined-outer-name
    """A google-cloud-storage client of the suite's fake-gcs-server (conftest's gcs)."""
    with cloud_fakes.storage_client(gcs, BUCKET) as client:
        bucket = client.bucket(BUCKET)
        for name in ('data/cifar10/metadata.json', 'taxi/train-1.csv', 'taxi/train-2.csv',
                     'taxi/eval.csv', 'taxi/old/train-0.csv'):
            bucket.blob(name).upload_from_string('x')
        yield client


def _checks(responses=None):
    """BucketChecks on the emulator, or on recorded answers (and their session)."""
    if responses is None:
        return preflight.BucketChecks(google_api.storage_client('test-project', None),
                                      'my-project'), None
    client, session = cloud_fakes.recorded_storage_client(responses)
    return preflight.BucketChecks(client, 'my-project'), session


def _offline_checks(endpoint):
    """BucketChecks whose client calls `endpoint` (no emulator, no credentials)."""
    return preflight.BucketChecks(google_api.storage_client(
        'my-project', AnonymousCredentials(), client_options={'api_endpoint': endpoint}),
        'my-project')


@pytest.mark.parametrize('flag,path', [
    ('--data-dir', 'gs://%s/data/cifar10' % BUCKET),
    ('--data-dir', 'gs://%s/data/cifar10/' % BUCKET),
    ('--train-files', 'gs://%s/taxi/train-*.csv' % BUCKET),
    ('--train-files', 'gs://%s/taxi/train-[12].csv' % BUCKET),
    ('--eval-files', 'gs://%s/taxi/eval.csv' % BUCKET),
])
def test_data_that_exists(gcs, flag, path):
    _checks()[0].check_data(flag, path)


@pytest.mark.parametrize('flag,path,message', [
    ('--data-dir', 'gs://%s/data/cifar100' % BUCKET,
     'no such object or directory in the bucket'),
    ('--train-files', 'gs://%s/taxi/*.tsv' % BUCKET, 'no object matches'),
    ('--train-files', 'gs://%s/taxi/train-0*.csv' % BUCKET, 'no object matches'),
    # * stays within one path segment (taxi/old/train-0.csv does not match)
    ('--train-files', 'gs://%s/taxi/*train-0.csv' % BUCKET, 'no object matches'),
    ('--eval-files', 'gs://%s/taxi/eval.csv.gz' % BUCKET,
     'no such object or directory in the bucket'),
    ('--data-dir', 'gs://no-such-bucket/data', 'bucket gs://no-such-bucket does not exist'),
    ('--data-dir', 'data/cifar10', "expected a gs:// path (the job's machines cannot read "
     'files on this one)'),
])
def test_missing_data_is_named(gcs, flag, path, message):
    with pytest.raises(UserInputError) as raised:
        _checks()[0].check_data(flag, path)
    assert str(raised.value) == '%s %s: %s' % (flag, path, message)


def test_a_writable_bucket_passes_and_a_missing_one_is_named(gcs):
    checks, _ = _checks()
    checks.check_writable('gs://%s/jobs/x' % BUCKET, '--job-dir')
    with pytest.raises(UserInputError) as raised:
        checks.check_writable('gs://no-such-bucket/jobs/x', '--job-dir')
    assert str(raised.value) == ('--job-dir gs://no-such-bucket/jobs/x: bucket '
                                 'gs://no-such-bucket does not exist')


def test_a_bucket_these_credentials_cannot_write_is_named():
    checks, http = _checks([(200, {'permissions': ['storage.objects.get',
                                                   'storage.objects.list']})])
    with pytest.raises(UserInputError) as raised:
        checks.check_writable('gs://shared-bucket/jobs/j', '--job-dir')
    assert str(raised.value) == (
        '--job-dir gs://shared-bucket/jobs/j: these credentials cannot write to bucket '
        'gs://shared-bucket (missing storage.objects.create); grant them '
        'roles/storage.objectAdmin there')
    request, = http.requests
    assert request.method == 'GET'
    assert request.uri.startswith('https://storage.googleapis.com/storage/v1/b/shared-bucket/'
                                  'iam/testPermissions?permissions=storage.objects.create&')


def test_a_server_error_is_retried_once_then_named():
    checks, http = _checks([cloud_fakes.error(503, 'backend unavailable')] * 2)
    with pytest.raises(google_api.ApiError) as raised:
        checks.check_writable('gs://shared-bucket/jobs/j', '--job-dir')
    assert str(raised.value) == ('checking access to bucket gs://shared-bucket: HTTP 503 '
                                 '(backend unavailable)')
    assert len(http.requests) == 1 + google_api.NUM_RETRIES


def test_a_permission_answer_names_the_resource_and_the_role():
    checks, _ = _checks([cloud_fakes.error(403, 'caller does not have '
                                                'storage.objects.list access')])
    with pytest.raises(google_api.ApiError) as raised:
        checks.check_data('--data-dir', 'gs://locked/data')
    assert str(raised.value) == (
        'checking --data-dir gs://locked/data: permission denied (caller does not have '
        'storage.objects.list access); check that the Cloud Storage API '
        '(storage.googleapis.com) is enabled in project my-project and that your '
        'Application Default Credentials hold roles/storage.objectAdmin on the bucket')


def test_a_job_dir_of_another_model_is_named(gcs):
    checks, _ = _checks()
    job_dir = 'gs://%s/jobs/named' % BUCKET  # no other test writes here
    checks.check_job_dir_model(job_dir, {'num-layers': 44})  # nothing recorded yet
    gcs.bucket(BUCKET).blob('jobs/named/model_params.json').upload_from_string(
        json.dumps({'num-layers': 20}))
    checks.check_job_dir_model(job_dir, {'num-layers': 20})
    with pytest.raises(UserInputError) as raised:
        checks.check_job_dir_model(job_dir, {'num-layers': 44})
    assert str(raised.value) == (
        '--num-layers=44 does not match the checkpoints in --job-dir %s, which were '
        'trained with --num-layers=20; use a new --job-dir or the same value' % job_dir)


def test_a_huge_model_params_file_is_not_downloaded(gcs):
    checks, _ = _checks()
    job_dir = 'gs://%s/jobs/huge' % BUCKET
    gcs.bucket(BUCKET).blob('jobs/huge/model_params.json').upload_from_string(
        b' ' * (preflight.MAX_MODEL_PARAMS_BYTES + 1))
    with pytest.raises(UserInputError) as raised:
        checks.check_job_dir_model(job_dir, {'num-layers': 44})
    assert str(raised.value) == (
        '--job-dir %s: %s/model_params.json is %d bytes, not the model parameters a trainer '
        'writes (a few hundred bytes); use a new --job-dir'
        % (job_dir, job_dir, preflight.MAX_MODEL_PARAMS_BYTES + 1))


# ------------------------------------------- refusals in a full submission


class Backend(backend_lib.Backend):
    """Real storage client on the emulator, recorded Vertex AI answers."""

    def __init__(self, storage_client):
        self.http = cloud_fakes.RecordingHttp([])
        self.storage_client = storage_client

    def credentials(self):
        return object(), 'my-project'

    def transport(self, credentials):
        return self.http

    def storage(self, project, credentials):
        return self.storage_client


@pytest.mark.parametrize('extra,config,message', [
    (['--', '--data-dir=gs://%s/data/missing' % BUCKET], 'cmle_config.yaml',
     '--data-dir gs://%s/data/missing: no such object or directory in the bucket' % BUCKET),
    (['--job-dir', 'gs://no-such-bucket/jobs/x'], 'cmle_config.yaml',
     '--job-dir gs://no-such-bucket/jobs/x: bucket gs://no-such-bucket does not exist'),
    (['--job-dir', 'gs://%s/jobs/resnet' % BUCKET, '--', '--num-layers=56'], 'cmle_config.yaml',
     '--num-layers=56 does not match the checkpoints in --job-dir gs://%s/jobs/resnet'
     % BUCKET),
    (['--', '--num-gpus=1'], 'cmle_config.yaml',
     'worker pool 0 (chief, n1-standard-16 with no GPUs), replica 0 would refuse to start: '
     '--num-gpus=1 but this machine has 0 GPU(s)'),
    (['--', '--bogus-flag'], 'cmle_config.yaml',
     'trainer flags: unrecognized arguments: --bogus-flag'),
])
def test_every_check_refuses_before_anything_is_staged(gcs, extra, config, message):
    gcs.bucket(BUCKET).blob('jobs/resnet/model_params.json').upload_from_string(
        json.dumps({'num-layers': 20}))
    backend = Backend(gcs)
    for image in (['--executor-image-uri', EXECUTOR], ['--build-image']):
        argv = ['submit', 'cifar10', '--config', _config(config), '--bucket', 'gs://' + BUCKET,
                '--project', 'my-project', '--job-name', 'train_refused'] + image + extra
        with pytest.raises(UserInputError) as raised:
            train_cloud.main(argv, backend=backend, out=io.StringIO(), err=io.StringIO())
        assert str(raised.value).startswith(message)
        assert '\n' not in str(raised.value)
    assert backend.http.requests == []
    assert [b.name for b in gcs.list_blobs(BUCKET, prefix='staging/')] == []


# ------------------------------------------------- credentials and network


@pytest.mark.parametrize('body,expected', [
    # pyasn1 rejects the DER inside (the PyAsn1Error traceback users saw)
    ('MIIBOgIBAAJBAKj34GkxFhD90vcNLYLInFEX6Ppy1tPf9Cnzj4p4WGeKLs1Pt8Qu',
     'error: GOOGLE_APPLICATION_CREDENTIALS={key}: not a usable service account key '
     '(PyAsn1Error while reading it); download a new key or unset '
     'GOOGLE_APPLICATION_CREDENTIALS to use `gcloud auth application-default login`'),
    # google-auth wraps the base64 error
    ('MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQCsecretsecret',
     'error: no usable Application Default Credentials (GOOGLE_APPLICATION_CREDENTIALS='
     '{key}: Failed to load service account credentials from {key}): run `gcloud auth '
     'application-default login`, or set GOOGLE_APPLICATION_CREDENTIALS to a service '
     'account key file'),
])
def test_a_malformed_key_is_one_line_without_key_material(tmp_path, body, expected):
    key = tmp_path / 'key.json'
    key.write_text(json.dumps({
        'type': 'service_account', 'project_id': 'my-project', 'private_key_id': 'abc',
        'private_key': '-----BEGIN PRIVATE KEY-----\n%s\n-----END PRIVATE KEY-----\n' % body,
        'client_email': 'trainer@my-project.iam.gserviceaccount.com', 'client_id': '1',
        'token_uri': 'https://oauth2.googleapis.com/token'}))
    env = dict(OFFLINE_ENV, GOOGLE_APPLICATION_CREDENTIALS=str(key))
    for argv in (['submit', 'cifar10', '--config', _config('cmle_config.yaml')], ['list']):
        proc = run_module(MODULE, *argv, env=env, timeout=120)
        assert proc.returncode == 2
        assert proc.stderr.splitlines() == [expected.format(key=key)]
        assert body[-12:] not in proc.stderr and 'PRIVATE KEY' not in proc.stderr


def test_a_refused_connection_is_one_line_naming_the_endpoint(refused_port):
    port = refused_port
    checks = _offline_checks('http://127.0.0.1:%d' % port)
    with pytest.raises(google_api.ApiError) as raised:
        checks.check_writable('gs://my-bucket/jobs/x', '--job-dir')
    assert str(raised.value).startswith('checking access to bucket gs://my-bucket: cannot reach '
                                        'http://127.0.0.1:%d (' % port)
    assert raised.value.status is None


def test_a_failed_dns_lookup_is_one_line_naming_the_endpoint():
    # .invalid never resolves (RFC 6761).
    checks = _offline_checks('https://storage.nonexistent.invalid')
    with pytest.raises(google_api.ApiError) as raised:
        checks.check_data('--data-dir', 'gs://my-bucket/data')
    assert str(raised.value).startswith('checking --data-dir gs://my-bucket/data: cannot reach '
                                        'https://storage.nonexistent.invalid (')


def test_no_network_through_the_cli_is_one_line(tmp_path):
    """A real submit with a proxy that refuses: one line, no retry storm."""
    token = tmp_path / 'adc.json'
    token.write_text(json.dumps({'type': 'authorized_user', 'client_id': 'c',
                                 'client_secret': 's', 'refresh_token': 'r'}))
    env = cli_env(dict(OFFLINE_ENV, GOOGLE_APPLICATION_CREDENTIALS=str(token)))
    proc = processes.run(
        [sys.executable, '-m', MODULE, 'submit', 'cifar10', '--executor-image-uri', EXECUTOR,
         '--', '--data-dir=gs://cloud-samples-data/cifar10'], 120, cwd=REPO_ROOT, env=env)
    assert proc.returncode == 2 and 'Traceback' not in proc.stderr, proc.stderr
    line, = cloud_fakes.without_estimate(proc.stderr)
    assert line.startswith('error: checking --data-dir gs://cloud-samples-data/cifar10: '
                           'cannot reach ')
