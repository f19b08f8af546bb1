"""Vertex AI job bodies of a `plan.JobPlan` and the aiplatform v1 calls, offline.

Requests go through the real googleapiclient service objects (built from
the bundled discovery document) into `RecordingHttp`, which answers with
canned responses and records what was sent.
"""
import os
from urllib import parse

import google_auth_httplib2
import pytest
import yaml
from google.oauth2 import credentials as oauth2_credentials

import cloud_fakes
from conftest import REPO_ROOT
from estimator_trainers.tools.cloud import configs
from estimator_trainers.tools.cloud import jobs
from estimator_trainers.tools.cloud import schema
from estimator_trainers import registry
from estimator_trainers.tools.cloud import plan as plan_lib
from estimator_trainers.tools.cloud import train_cloud
from estimator_trainers.errors import UserInputError
from taxi_estimator import trainer as taxi_trainer

PROJECT, REGION = 'my-project', 'us-central1'
PARENT = 'projects/my-project/locations/us-central1'
ENDPOINT = 'https://us-central1-aiplatform.googleapis.com/v1/'
JOB = 'train_cifar10_20260101_120000'
JOB_DIR = 'gs://b/jobs/' + JOB
PACKAGE = 'gs://b/staging/%s/estimator-trainers-0.1.0.tar.gz' % JOB
CPU_IMAGE = 'us-docker.pkg.dev/vertex-ai/training/tf-cpu.2-15.py310:latest'
SHIPPED = sorted(name for name in os.listdir(os.path.join(REPO_ROOT, 'configs'))
                 if name.endswith('.yaml'))
CUSTOM_JOB_SCHEMA = 'GoogleCloudAiplatformV1CustomJob'
TUNING_JOB_SCHEMA = 'GoogleCloudAiplatformV1HyperparameterTuningJob'


def _config(name_or_text):
    if name_or_text.endswith('.yaml'):
        return configs.load_config(os.path.join(REPO_ROOT, 'configs', name_or_text))
    return configs.parse_config(yaml.safe_load(name_or_text), 'cfg.yaml')


def _submission(config, model='cifar10', image_uri=None, args=('--train-steps=100',)):
    """The plan train-cloud.sh makes: a trainer on a prebuilt image, or in `image_uri`."""
    trainer = registry.get(model)
    given = list(config.args) + list(args)
    defaults = train_cloud.data_defaults(trainer, 'gs://b', given)
    return plan_lib.JobPlan(
        name=JOB, program=plan_lib.Trainer(trainer), config=config, project=PROJECT,
        region=REGION, job_dir=JOB_DIR, args=tuple(defaults + given),
        staging='gs://b/staging/' + JOB, images={plan_lib.CHIEF: image_uri or CPU_IMAGE},
        package_uris=() if image_uri else (PACKAGE,))


def _vertex(responses):
    http = cloud_fakes.RecordingHttp(responses)
    return jobs.VertexJobs(PROJECT, REGION, http=http), http


def _query(uri):
    return dict(parse.parse_qsl(parse.urlsplit(uri).query))


# ---------------------------------------------------------------- bodies


@pytest.mark.parametrize('image_uri', [None, 'us-docker.pkg.dev/p/r/trainer:1'])
@pytest.mark.parametrize('name', SHIPPED)
def test_shipped_configs_make_schema_valid_bodies(name, image_uri):
    sub = _submission(_config(name), image_uri=image_uri)
    body = jobs.job_body(sub)
    tuning = name == 'hptuning_config.yaml'
    schema.check('aiplatform', 'v1', TUNING_JOB_SCHEMA if tuning else CUSTOM_JOB_SCHEMA, body)
    spec = body['trialJobSpec'] if tuning else body['jobSpec']
    assert spec['baseOutputDirectory'] == {'outputUriPrefix': JOB_DIR}
    pools = [p for p in spec['workerPoolSpecs'] if p]
    assert [int(p['replicaCount']) for p in pools] == [
        pool.replica_count for pool in sub.config.pools]
    for pool in pools:
        runner = pool['containerSpec'] if image_uri else pool['pythonPackageSpec']
        assert ('--job-dir=' + JOB_DIR in runner['args']) is not tuning
        assert ('--hypertune-metric=accuracy' in runner['args']) is tuning


def test_custom_job_body():
    body = jobs.job_body(_submission(_config('cmle_config.yaml')))
    args = ['--data-dir=gs://b/data/cifar10', '--train-steps=100', '--job-dir=' + JOB_DIR]
    pool = {'executorImageUri': CPU_IMAGE, 'packageUris': [PACKAGE],
            'pythonModule': 'cifar10_estimator.cifar10_main', 'args': args}
    machine = {'machineType': 'n1-standard-16'}
    assert body == {
        'displayName': JOB,
        'jobSpec': {
            'workerPoolSpecs': [
                {'machineSpec': machine, 'replicaCount': '1', 'pythonPackageSpec': pool},
                {'machineSpec': machine, 'replicaCount': '1', 'pythonPackageSpec': pool},
                {'machineSpec': machine, 'replicaCount': '1', 'pythonPackageSpec': pool}],
            'baseOutputDirectory': {'outputUriPrefix': JOB_DIR}}}


def test_taxi_gets_the_sample_data_unless_given():
    body = jobs.job_body(_submission(_config('config_ps.yaml'), model='taxi', args=()))
    chief, workers, ps = body['jobSpec']['workerPoolSpecs']
    assert chief['pythonPackageSpec']['pythonModule'] == 'taxi_estimator.task'
    assert chief['pythonPackageSpec']['args'] == [
        '--train-files=%s/taxi_trips_train.csv' % taxi_trainer.SAMPLE_DATA,
        '--eval-files=%s/taxi_trips_eval.csv' % taxi_trainer.SAMPLE_DATA,
        '--job-dir=' + JOB_DIR]
    assert (workers['replicaCount'], ps['replicaCount']) == ('4', '1')
    own = jobs.job_body(_submission(_config('config_ps.yaml'), model='taxi',
                                    args=('--train-files', 'gs://x/t.csv')))
    assert own['jobSpec']['workerPoolSpecs'][0]['pythonPackageSpec']['args'] == [
        '--eval-files=%s/taxi_trips_eval.csv' % taxi_trainer.SAMPLE_DATA,
        '--train-files', 'gs://x/t.csv', '--job-dir=' + JOB_DIR]


def test_missing_pools_below_a_present_one_are_empty_and_extras_are_translated():
    config = _config("""
trainingInput:
  scaleTier: CUSTOM
  masterType: n1-standard-8
  masterConfig:
    acceleratorConfig: {count: 2, type: NVIDIA_TESLA_V100}
    diskConfig: {bootDiskType: pd-ssd, bootDiskSizeGb: 200}
  evaluatorType: n1-standard-4
  evaluatorCount: 1
  scheduling: {maxRunningTime: 7200s}
  serviceAccount: trainer@my-project.iam.gserviceaccount.com
labels: {team: vision}
""")
    body = jobs.job_body(_submission(config, image_uri='us-docker.pkg.dev/p/r/t:1'))
    chief, worker, ps, evaluator = body['jobSpec']['workerPoolSpecs']
    assert (worker, ps) == ({}, {})
    assert chief['machineSpec'] == {'machineType': 'n1-standard-8',
                                    'acceleratorType': 'NVIDIA_TESLA_V100',
                                    'acceleratorCount': 2}
    assert chief['diskSpec'] == {'bootDiskType': 'pd-ssd', 'bootDiskSizeGb': 200}
    assert evaluator['containerSpec'] == {
        'imageUri': 'us-docker.pkg.dev/p/r/t:1',
        'command': ['python', '-m', 'cifar10_estimator.cifar10_main'],
        'args': ['--data-dir=gs://b/data/cifar10', '--train-steps=100', '--job-dir=' + JOB_DIR]}
    assert 'pythonPackageSpec' not in evaluator
    assert body['jobSpec']['scheduling'] == {'timeout': '7200s'}
    assert body['jobSpec']['serviceAccount'] == 'trainer@my-project.iam.gserviceaccount.com'
    assert body['labels'] == {'team': 'vision'}


TENSORBOARD = 'projects/my-project/locations/us-central1/tensorboards/4242'
ENGINES_CONFIG = """
trainingInput:
  scaleTier: CUSTOM
  masterType: n1-standard-8
  workerType: n1-standard-8
  workerCount: 2
  parameterServerType: n1-highmem-8
  parameterServerCount: 1
  serviceAccount: trainer@my-project.iam.gserviceaccount.com
  tensorboard: %s
  scheduling: {strategy: SPOT, restartJobOnWorkerRestart: true, disableRetries: false,
               maxRunningTime: 7200s}
""" % TENSORBOARD


def test_tensorboard_spot_and_restarts_reach_the_body_and_fit_the_schema():
    """Vertex AI uploads `<baseOutputDirectory>/logs` ($AIP_TENSORBOARD_LOG_DIR): the
    trainers write there; Spot and the restart settings pass as Vertex AI takes them."""
    plan = _submission(_config(ENGINES_CONFIG), image_uri='us-docker.pkg.dev/p/r/t:1')
    body = jobs.job_body(plan)  # checks the body against the discovery schema itself
    schema.check('aiplatform', 'v1', CUSTOM_JOB_SCHEMA, body)
    spec = body['jobSpec']
    assert spec['tensorboard'] == TENSORBOARD
    assert spec['baseOutputDirectory'] == {'outputUriPrefix': JOB_DIR}
    assert spec['scheduling'] == {'timeout': '7200s', 'strategy': 'SPOT',
                                  'restartJobOnWorkerRestart': True, 'disableRetries': False}
    for pool in spec['workerPoolSpecs']:
        assert pool['containerSpec']['args'][-1] == '--job-dir=%s/logs' % JOB_DIR
    flex = _config(ENGINES_CONFIG.replace('strategy: SPOT', 'strategy: FLEX_START, '
                                                            'maxWaitTime: 1800s'))
    body = jobs.job_body(_submission(flex, image_uri='us-docker.pkg.dev/p/r/t:1'))
    assert body['jobSpec']['scheduling']['maxWaitDuration'] == '1800s'
    assert body['jobSpec']['scheduling']['strategy'] == 'FLEX_START'


@pytest.mark.parametrize('change,message', [
    (('serviceAccount: trainer@my-project.iam.gserviceaccount.com', ''),
     'needs trainingInput.serviceAccount'),
    (('scaleTier: CUSTOM', 'hyperparameters: {goal: MAXIMIZE, hyperparameterMetricTag: '
                           'accuracy, params: [{parameterName: learning-rate, type: DOUBLE, '
                           'minValue: 0.01, maxValue: 0.1}]}\n  scaleTier: CUSTOM'),
     "a tuning job's trials each write under their own"),
])
def test_tensorboard_is_refused_where_vertex_would_upload_nothing(change, message):
    plan = _submission(_config(ENGINES_CONFIG.replace(*change)),
                       image_uri='us-docker.pkg.dev/p/r/t:1')
    with pytest.raises(UserInputError, match=message):
        jobs.job_body(plan)


def test_tuning_job_body():
    config = _config("""
trainingInput:
  scaleTier: BASIC
  hyperparameters:
    goal: MINIMIZE
    hyperparameterMetricTag: loss
    maxTrials: 6
    maxParallelTrials: 3
    maxFailedTrials: 2
    algorithm: RANDOM_SEARCH
    params:
      - {parameterName: learning-rate, type: DOUBLE, minValue: 0.001, maxValue: 1, scaleType: UNIT_LOG_SCALE}
      - {parameterName: num-layers, type: INTEGER, minValue: 20, maxValue: 56.0, scaleType: NONE}
      - {parameterName: data-format, type: CATEGORICAL, categoricalValues: [channels_first, channels_last]}
      - {parameterName: train-batch-size, type: DISCRETE, discreteValues: [64, 128, 256]}
""")
    body = jobs.job_body(_submission(config, args=()))
    assert body['studySpec'] == {
        'metrics': [{'metricId': 'loss', 'goal': 'MINIMIZE'}],
        'parameters': [
            {'parameterId': 'learning-rate', 'doubleValueSpec': {'minValue': 0.001, 'maxValue': 1.0},
             'scaleType': 'UNIT_LOG_SCALE'},
            {'parameterId': 'num-layers', 'integerValueSpec': {'minValue': '20', 'maxValue': '56'}},
            {'parameterId': 'data-format',
             'categoricalValueSpec': {'values': ['channels_first', 'channels_last']}},
            {'parameterId': 'train-batch-size',
             'discreteValueSpec': {'values': [64.0, 128.0, 256.0]}}],
        'algorithm': 'RANDOM_SEARCH'}
    assert (body['maxTrialCount'], body['parallelTrialCount'], body['maxFailedTrialCount']) == (6, 3, 2)
    pool, = body['trialJobSpec']['workerPoolSpecs']
    # No --job-dir: each trial defaults to its own $AIP_MODEL_DIR.
    assert pool['pythonPackageSpec']['args'] == ['--data-dir=gs://b/data/cifar10',
                                                 '--hypertune-metric=loss']
    assert body['trialJobSpec']['baseOutputDirectory'] == {'outputUriPrefix': JOB_DIR}


@pytest.mark.parametrize('body,message', [
    ({'displayName': 'x', 'jobspec': {}}, 'GoogleCloudAiplatformV1CustomJob.jobspec: unknown field'),
    ({'state': 'JOB_STATE_RUNNING'}, 'GoogleCloudAiplatformV1CustomJob.state: is output only'),
    ({'jobSpec': {'workerPoolSpecs': [{'replicaCount': 2}]}},
     'jobSpec.workerPoolSpecs[0].replicaCount: expected a string, got 2'),
    ({'jobSpec': {'workerPoolSpecs': [{'replicaCount': 'two'}]}},
     "replicaCount: expected an int64 as a decimal string, got 'two'"),
    ({'jobSpec': {'workerPoolSpecs': [{'machineSpec': {'acceleratorCount': '2'}}]}},
     "machineSpec.acceleratorCount: expected an integer, got '2'"),
    ({'jobSpec': {'workerPoolSpecs': [{'machineSpec': {'acceleratorType': 'K80'}}]}},
     "machineSpec.acceleratorType: 'K80' is not one of"),
    ({'jobSpec': {'workerPoolSpecs': {}}}, 'jobSpec.workerPoolSpecs: expected a list, got {}'),
    ({'labels': {'a': 1}}, 'GoogleCloudAiplatformV1CustomJob.labels.a: expected a string, got 1'),
])
def test_schema_check_rejects(body, message):
    with pytest.raises(schema.SchemaError) as raised:
        schema.check('aiplatform', 'v1', CUSTOM_JOB_SCHEMA, body)
    assert message in str(raised.value)


def test_request_schema_names():
    assert schema.request_schema('logging', 'v2', 'entries.list') == 'ListLogEntriesRequest'
    assert schema.request_schema(
        'aiplatform', 'v1', 'projects.locations.customJobs.create') == CUSTOM_JOB_SCHEMA


# ----------------------------------------------------------------- calls


def test_create_posts_the_body_to_the_regional_endpoint():
    body = jobs.job_body(_submission(_config('cmle_config.yaml')))
    vertex, http = _vertex([(200, {'name': PARENT + '/customJobs/123', 'displayName': JOB})])
    job = vertex.create(jobs.CUSTOM_JOBS, body)
    assert job['name'] == PARENT + '/customJobs/123'
    request, = http.requests
    assert request.method == 'POST'
    assert request.uri == ENDPOINT + PARENT + '/customJobs?alt=json'
    assert request.body == body


def test_create_tuning_job_uri():
    body = jobs.job_body(_submission(_config('hptuning_config.yaml')))
    vertex, http = _vertex([(200, {'name': PARENT + '/hyperparameterTuningJobs/9'})])
    assert vertex.create(jobs.TUNING_JOBS, body)['name'].endswith('/hyperparameterTuningJobs/9')
    assert http.requests[0].uri == ENDPOINT + PARENT + '/hyperparameterTuningJobs?alt=json'


@pytest.mark.parametrize('status,reason,message', [
    (401, 'Request had invalid authentication credentials.',
     'the credentials were rejected (Request had invalid authentication credentials.); '
     'run `gcloud auth application-default login`'),
    (403, "Permission 'aiplatform.customJobs.create' denied on resource.",
     "permission denied (Permission 'aiplatform.customJobs.create' denied on resource.); "
     'check that the Vertex AI API (aiplatform.googleapis.com) is enabled in project '
     'my-project and that your Application Default Credentials hold roles/aiplatform.user'),
    (404, 'Location us-central2 not found.', 'not found (Location us-central2 not found.)'),
    (409, 'already exists', "conflict with the resource's current state (already exists)"),
    (400, 'Invalid machine type', 'the request was rejected (Invalid machine type)'),
    (429, 'Quota exceeded for custom_model_training_cpus',
     'quota exceeded (Quota exceeded for custom_model_training_cpus)'),
    (500, 'Internal error', 'HTTP 500 (Internal error)'),
])
def test_http_errors_become_clear_messages(status, reason, message):
    vertex, http = _vertex([cloud_fakes.error(status, reason)])
    with pytest.raises(jobs.ApiError) as raised:
        vertex.create(jobs.CUSTOM_JOBS, {'displayName': 'x'})
    assert str(raised.value) == 'customJobs.create in %s: %s' % (PARENT, message)
    assert raised.value.status == status
    assert len(http.requests) == 1  # create is never retried blindly


def test_get_retries_transient_errors(monkeypatch):
    monkeypatch.setattr('googleapiclient.http.time.sleep', lambda seconds: None)
    vertex, http = _vertex([cloud_fakes.error(503, 'Unavailable'),
                            (200, {'name': PARENT + '/customJobs/1', 'state': 'JOB_STATE_RUNNING'})])
    assert vertex.get(PARENT + '/customJobs/1')['state'] == 'JOB_STATE_RUNNING'
    assert [r.method for r in http.requests] == ['GET', 'GET']
    assert http.requests[0].uri == ENDPOINT + PARENT + '/customJobs/1?alt=json'


def test_cancel_uses_the_job_collection():
    vertex, http = _vertex([(200, {}), (200, {})])
    vertex.cancel(PARENT + '/customJobs/1')
    vertex.cancel(PARENT + '/hyperparameterTuningJobs/2')
    assert [(r.method, r.uri) for r in http.requests] == [
        ('POST', ENDPOINT + PARENT + '/customJobs/1:cancel?alt=json'),
        ('POST', ENDPOINT + PARENT + '/hyperparameterTuningJobs/2:cancel?alt=json')]


def test_cancel_of_a_finished_job_says_why():
    vertex, _ = _vertex([cloud_fakes.error(
        400, 'Cannot cancel CustomJob 1 because it is in state JOB_STATE_SUCCEEDED.')])
    with pytest.raises(jobs.ApiError, match=r'^cancel %s/customJobs/1: the request was rejected '
                       r'\(Cannot cancel CustomJob 1 because it is in state '
                       r'JOB_STATE_SUCCEEDED.\)$' % PARENT):
        vertex.cancel(PARENT + '/customJobs/1')


def test_list_pages_through_both_kinds_newest_first():
    vertex, http = _vertex([
        (200, {'customJobs': [{'name': PARENT + '/customJobs/1', 'createTime': '2026-01-01T00:00:00Z'}],
               'nextPageToken': 'tok'}),
        (200, {'customJobs': [{'name': PARENT + '/customJobs/2', 'createTime': '2026-01-03T00:00:00Z'}]}),
        (200, {'hyperparameterTuningJobs': [
            {'name': PARENT + '/hyperparameterTuningJobs/3', 'createTime': '2026-01-02T00:00:00Z'}]}),
    ])
    names = [job['name'].rsplit('/', 2)[-2:] for job in
             vertex.list(limit=10, filter_expr='state="JOB_STATE_RUNNING"')]
    assert names == [['customJobs', '2'], ['hyperparameterTuningJobs', '3'], ['customJobs', '1']]
    assert [parse.urlsplit(r.uri).path for r in http.requests] == [
        '/v1/%s/customJobs' % PARENT, '/v1/%s/customJobs' % PARENT,
        '/v1/%s/hyperparameterTuningJobs' % PARENT]
    assert _query(http.requests[0].uri) == {
        'pageSize': '10', 'filter': 'state="JOB_STATE_RUNNING"', 'alt': 'json'}
    assert _query(http.requests[1].uri)['pageToken'] == 'tok'


def test_resolve_by_resource_name_id_and_display_name():
    vertex, http = _vertex([])
    assert vertex.resolve(PARENT + '/customJobs/5') == PARENT + '/customJobs/5'
    assert http.requests == []

    vertex, http = _vertex([cloud_fakes.error(404, 'not found'),
                            (200, {'name': PARENT + '/hyperparameterTuningJobs/7'})])
    assert vertex.resolve('7') == PARENT + '/hyperparameterTuningJobs/7'
    assert [r.uri for r in http.requests] == [
        ENDPOINT + PARENT + '/customJobs/7?alt=json',
        ENDPOINT + PARENT + '/hyperparameterTuningJobs/7?alt=json']

    vertex, http = _vertex([(200, {'customJobs': [{'name': PARENT + '/customJobs/8',
                                                   'displayName': JOB}]}), (200, {})])
    assert vertex.resolve(JOB) == PARENT + '/customJobs/8'
    assert _query(http.requests[0].uri)['filter'] == 'display_name="%s"' % JOB


def test_resolve_failures():
    vertex, _ = _vertex([cloud_fakes.error(404, 'x'), cloud_fakes.error(404, 'x')])
    with pytest.raises(jobs.ApiError, match=r'^no custom or hyperparameter tuning job with id 7 '
                       r'in %s$' % PARENT):
        vertex.resolve('7')
    vertex, _ = _vertex([cloud_fakes.error(403, 'denied')])
    with pytest.raises(jobs.ApiError, match='permission denied'):
        vertex.resolve('7')
    vertex, _ = _vertex([(200, {}), (200, {})])
    with pytest.raises(jobs.ApiError, match=r"^no job named 'nope' in %s" % PARENT):
        vertex.resolve('nope')
    vertex, _ = _vertex([(200, {'customJobs': [{'name': PARENT + '/customJobs/1',
                                                'displayName': 'twin'}]}),
                         (200, {'hyperparameterTuningJobs': [
                             {'name': PARENT + '/hyperparameterTuningJobs/2',
                              'displayName': 'twin'}]})])
    with pytest.raises(jobs.ApiError, match=r"^2 jobs are named 'twin': "):
        vertex.resolve('twin')


def test_credentials_go_in_the_header_and_never_in_messages():
    token = 'ya29.secret-access-token'
    http = cloud_fakes.RecordingHttp([cloud_fakes.error(403, 'The caller does not have permission')])
    authorized = google_auth_httplib2.AuthorizedHttp(
        oauth2_credentials.Credentials(token=token), http=http)
    vertex = jobs.VertexJobs(PROJECT, REGION, http=authorized)
    with pytest.raises(jobs.ApiError) as raised:
        vertex.get(PARENT + '/customJobs/1')
    assert http.requests[0].headers['authorization'] == 'Bearer ' + token
    assert token not in str(raised.value)


# ------------------------------------------------------------- describing


def test_describe_a_tuning_job_names_the_best_trial():
    job = {'name': PARENT + '/hyperparameterTuningJobs/4', 'displayName': JOB,
           'state': 'JOB_STATE_SUCCEEDED', 'createTime': '2026-01-01T00:00:00Z',
           'studySpec': {'metrics': [{'metricId': 'accuracy', 'goal': 'MAXIMIZE'}]},
           'trials': [
               {'id': '1', 'parameters': [{'parameterId': 'learning-rate', 'value': 0.1}],
                'finalMeasurement': {'metrics': [{'metricId': 'accuracy', 'value': 0.61}]}},
               {'id': '2', 'parameters': [{'parameterId': 'learning-rate', 'value': 0.05}],
                'finalMeasurement': {'metrics': [{'metricId': 'accuracy', 'value': 0.72}]}},
               {'id': '3', 'state': 'INFEASIBLE'}]}
    assert jobs.describe(job) == [
        'name: %s/hyperparameterTuningJobs/4' % PARENT, 'displayName: ' + JOB,
        'state: JOB_STATE_SUCCEEDED', 'createTime: 2026-01-01T00:00:00Z',
        'bestTrial: 2 accuracy=0.72 (learning-rate=0.05)']
