"""The serving lines users' scripts hold, through `scripts/ai-platform.sh`'s front:
`models`, `versions`, `predict` on Vertex AI (a stateful HttpMock, `vertex_fake`),
with the exports on the gs:// emulator, read by TensorFlow's own client.

- Seed 002's clean-up lines (`models list`, `models delete`) and the Google
  sample's serving half (`models create`, `versions create --origin ...
  --runtime-version 1.15 --framework tensorflow`, `predict --model --version
  --json-instances`), word for word after `gcloud ai-platform`: every body
  fits the discovery schema, every operation is polled to its end, `predict`
  prints the export's own predictions in gcloud's table, and `models delete`
  leaves nothing behind.
- A failure between the upload and the deploy (an HTTP error, a failed
  operation, an interrupt) leaves nothing half-deployed.
- Errors are one line: no credentials, an unknown model, an export without a
  serving signature, malformed instances.
- What this tool did not create is removed only when named exactly.
"""
import collections
import io
import json
import os
import sys

import pytest

import cloud_fakes
import processes
import resources
import vertex_fake
from conftest import cli_env, one_error_line, REPO_ROOT
from estimator_trainers import serving
from estimator_trainers.errors import UserInputError
from estimator_trainers.google_api import ApiError
from estimator_trainers.tools.cloud import backend as backend_lib
from estimator_trainers.tools.cloud import ai_platform
from estimator_trainers.tools.cloud import endpoints
from estimator_trainers.tools.cloud import instances as instances_lib
from estimator_trainers.tools.cloud import schema

BUCKET = 'serving-bkt'
EXPORT_BASE = 'gs://%s/taxi_model_dir/export' % BUCKET
EXPORT = EXPORT_BASE + '/1700000000'
PARENT = 'projects/%s/locations/us-central1' % vertex_fake.PROJECT_NUMBER
OFFLINE = {'PROJECT_ID': 'my-project', 'GOOGLE_APPLICATION_CREDENTIALS': '/nonexistent/key.json',
           'HTTP_PROXY': 'http://127.0.0.1:9', 'HTTPS_PROXY': 'http://127.0.0.1:9',
           'NO_PROXY': '', 'STORAGE_EMULATOR_HOST': ''}


# A tiny classifier with the taxi export's outputs, on two features; and a
# SavedModel without signatures. Saved by a subprocess: TensorFlow's save holds
# the GIL while it writes, and the emulator's proxy is a thread of this process.
MAKE_EXPORTS = """
import sys
import tensorflow as tf


class Tips(tf.Module):
    def __init__(self):
        super().__init__()
        self.w = tf.Variable([0.5, -0.25])

    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name='fare'),
                                  tf.TensorSpec([None], tf.float32, name='trip_miles')])
    def serve(self, fare, trip_miles):
        logit = self.w[0] * fare + self.w[1] * trip_miles
        p = tf.sigmoid(logit)
        return {'class_ids': tf.cast(logit > 0, tf.int64)[:, None],
                'probabilities': tf.stack([1 - p, p], axis=1)}


class Signatureless(tf.Module):
    def __init__(self):
        super().__init__()
        self.w = tf.Variable(1.0)


module = Tips()
tf.saved_model.save(module, sys.argv[1], signatures={'serving_default': module.serve})
tf.saved_model.save(Signatureless(), sys.argv[2])
"""


@pytest.fixture(scope='module')
def gcs_env(gcs):
    """The emulator's environment, its proxy in another process (`gcs_emulator`), with
    a good export and one without a serving signature."""
    gcs.create_bucket(BUCKET)
    with gcs.proxied_from_another_process() as environment:
        proc = processes.run([sys.executable, '-c', MAKE_EXPORTS, EXPORT,
                              'gs://%s/nosig/export/1' % BUCKET], 300, cwd=REPO_ROOT,
                             env=cli_env(environment))
        assert proc.returncode == 0, proc.stderr[-3000:]
        yield environment


@pytest.fixture
def env(gcs_env, monkeypatch):  # pylint: disable=redefined-outer-name
    """TensorFlow's gs:// client on the emulator; no project or region settings."""
    for name, value in gcs_env.items():
        monkeypatch.setenv(name, value)
    for name in ('PROJECT_ID', 'CLOUDSDK_CORE_PROJECT', 'REGION',
                 'CLOUDSDK_AI_PLATFORM_REGION'):
        monkeypatch.delenv(name, raising=False)
    return dict(os.environ, PROJECT_ID='my-project')


class ServingBackend(backend_lib.Backend):
    """Credentials and the fake Vertex AI; counts credential lookups."""

    def __init__(self, fake):
        self.fake = fake
        self.credential_calls = 0

    def credentials(self):
        self.credential_calls += 1
        return object(), 'adc-project'

    def transport(self, credentials):
        return self.fake


def _run(words, fake, env, backend=None):
    """`gcloud ai-platform WORDS` through the front; (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    code = ai_platform.main(list(words) + ['--poll-interval', '0'],
                            backend=backend or ServingBackend(fake), out=out, err=err,
                            environ=env)
    return code, out.getvalue(), err.getvalue()


def _local_predictions(instances):
    return serving.load(EXPORT).predict(instances)


def _instances_file(tmp_path, rows, name='instances.json'):
    path = tmp_path / name
    path.write_text(''.join(json.dumps(row) + '\n' for row in rows))
    return str(path)


TRIPS = [{'fare': 12.5, 'trip_miles': 3.0}, {'fare': 4.0, 'trip_miles': 10.0}]


def _deployed_model(fake):
    (endpoint,) = fake.endpoints.values()
    return endpoint.get('deployedModels', [])


def test_the_samples_serving_lines_and_seed_002s_clean_up(env, tmp_path):
    fake = vertex_fake.FakeVertex(predictions=_local_predictions)
    code, out, err = _run(['models', 'create', 'taxi_model', '--regions', 'us-central1'],
                          fake, env)
    assert code == 0, err
    (endpoint,) = fake.endpoints.values()
    assert endpoint['displayName'] == 'taxi_model'
    assert endpoint['labels'] == endpoints.MARK
    assert ('Created ai platform model [projects/my-project/models/taxi_model] as Vertex AI '
            'endpoint [%s]' % endpoint['name']) in err

    code, out, err = _run(['versions', 'create', 'v1', '--model', 'taxi_model', '--origin',
                           EXPORT_BASE, '--runtime-version', '1.15', '--framework',
                           'tensorflow', '--python-version', '3.7'], fake, env)
    assert code == 0, err
    notes = [line for line in err.splitlines() if line.startswith('note: ')]
    assert notes == [
        'note: --runtime-version 1.15: Vertex AI has no AI Platform runtimes; the version is '
        'served by TensorFlow 2.15\'s prebuilt prediction image (TensorFlow 2.15); the check '
        'before the upload loads it with this project\'s TensorFlow 2.15.1',
        'note: --python-version 3.7: a TensorFlow SavedModel is served without Python code; '
        'nothing to choose',
        'note: --origin %s holds exports; serving the newest, %s' % (EXPORT_BASE, EXPORT),
        'note: using project my-project from PROJECT_ID and region us-central1, the default']
    # The check called the export's signature on an instance of zeros.
    assert ('checked %s: signature serving_default (inputs fare (float32 [?]), trip_miles '
            '(float32 [?])) predicted {"class_ids": [0], "probabilities": [0.5, 0.5]}'
            % EXPORT) in err
    (model,) = fake.models.values()
    assert model['artifactUri'] == EXPORT
    assert model['containerSpec'] == {
        'imageUri': 'us-docker.pkg.dev/vertex-ai/prediction/tf2-cpu.2-15:latest'}
    assert model['labels'] == endpoints.MARK and model['displayName'] == 'taxi_model/v1'
    (deployed,) = _deployed_model(fake)
    assert deployed['displayName'] == 'v1' and deployed['model'] == model['name']
    assert deployed['dedicatedResources'] == {
        'machineSpec': {'machineType': 'n1-standard-2'}, 'minReplicaCount': 1,
        'maxReplicaCount': 1}
    assert endpoint['trafficSplit'] == {deployed['id']: 100}
    # Both operations were polled until done, with progress lines.
    polled = collections.Counter(r.path for r in fake.requests
                                 if r.method == 'GET' and '/operations/' in r.path)
    assert sorted(polled.values()) == [2, 2, 2]  # create, upload, deploy: done at the 2nd
    assert all(operation['done'] for operation, _, _ in fake.operations.values())
    assert 'upload version v1 of model taxi_model: waiting for operation' in err
    assert 'deploy version v1 of model taxi_model: 0s elapsed, starting model server' in err
    assert ('Created version [v1] of model [taxi_model]: Vertex AI model %s deployed on '
            'endpoint %s as deployed model %s (1 x n1-standard-2, billed while deployed).'
            % (model['name'], endpoint['name'], deployed['id'])) in err

    instances = _instances_file(tmp_path, TRIPS)
    code, out, err = _run(['predict', '--model', 'taxi_model', '--version', 'v1',
                           '--json-instances', instances], fake, env)
    assert code == 0, err
    expected = _local_predictions(TRIPS)
    assert out == instances_lib.render({'predictions': expected})
    assert out.splitlines()[0].split() == ['CLASS_IDS', 'PROBABILITIES']
    assert [r.body for r in fake.requests if r.path.endswith(':predict')] == [
        {'instances': TRIPS}]
    code, out, err = _run(['predict', '--model', 'taxi_model', '--json-instances', instances,
                           '--format', 'json'], fake, env)
    assert json.loads(out) == {'predictions': expected}

    # Seed 002's clean-up: what is deployed, then delete it.
    code, out, err = _run(['models', 'list'], fake, env)
    assert out.splitlines() == [
        'NAME        DEFAULT_VERSION_NAME  VERSIONS  MACHINES',
        'taxi_model  v1                    1         1 x n1-standard-2']
    assert ('1 version(s) deployed on 1 model(s) in us-central1 keep at least 1 machine(s) '
            'running') in err
    code, out, err = _run(['models', 'delete', 'taxi_model'], fake, env)
    assert code == 0, err
    assert err.splitlines()[-1] == (
        'Deleted model [taxi_model]: undeployed version v1 (deployed model %s, 1 x '
        'n1-standard-2); deleted Vertex AI model %s; deleted endpoint %s.'
        % (deployed['id'], model['name'], endpoint['name']))
    assert fake.endpoints == {} and fake.models == {}
    code, out, err = _run(['models', 'list'], fake, env)
    assert out.splitlines() == ['NAME  DEFAULT_VERSION_NAME  VERSIONS  MACHINES']
    assert err == ('note: using project my-project from PROJECT_ID and region us-central1, the '
                   'default\nnothing deployed in us-central1: no machines billed for serving\n')
    assert fake.schema_errors == []
    assert all(not op[0].get('error') for op in fake.operations.values())


@pytest.mark.parametrize('failure', ['http error', 'failed operation', 'interrupt'])
def test_a_failure_between_upload_and_deploy_leaves_nothing_half_deployed(env, failure):
    fake = vertex_fake.FakeVertex()
    assert _run(['models', 'create', 'taxi_model'], fake, env)[0] == 0
    if failure == 'http error':
        fake.fail['endpoints.deployModel'] = (429, 'Quota exceeded for resource '
                                                   'custom_model_serving_cpus')
    elif failure == 'failed operation':
        fake.fail_operation['endpoints.deployModel'] = 'Model server never became ready'
    words = ['versions', 'create', 'v1', '--model', 'taxi_model', '--origin', EXPORT]
    if failure == 'interrupt':
        original = fake.request

        def interrupting(uri, method='GET', body=None, headers=None, **kwargs):
            if method == 'GET' and '/endpoints/' in uri and '/operations/' in uri:
                fake.request = original  # Ctrl-C once, while the deploy is followed
                raise KeyboardInterrupt
            return original(uri, method, body, headers, **kwargs)
        fake.request = interrupting
        out, err = io.StringIO(), io.StringIO()
        with pytest.raises(KeyboardInterrupt):
            ai_platform.main(words + ['--poll-interval', '0'], backend=ServingBackend(fake),
                             out=out, err=err, environ=env)
        assert 'note: rolled back the failed deploy: deleted %s/models/' % PARENT \
            in err.getvalue()
        fake.finish_all()  # Vertex AI goes on with what was not cancelled
    else:
        out, err = io.StringIO(), io.StringIO()
        with pytest.raises(ApiError) as raised:
            ai_platform.main(words + ['--poll-interval', '0'], backend=ServingBackend(fake),
                             out=out, err=err, environ=env)
        assert '\n' not in str(raised.value)
        assert {'http error': 'deployModel on %s/endpoints/' % PARENT,
                'failed operation': 'deploy version v1 of model taxi_model failed: Model '
                                    'server never became ready'}[failure] in str(raised.value)
        assert 'note: rolled back the failed deploy: deleted %s/models/' % PARENT \
            in err.getvalue()
    assert _deployed_model(fake) == []
    assert fake.models == {}
    assert 'POST %s/models:upload' % 'projects/my-project/locations/us-central1' in \
        fake.calls()
    assert fake.schema_errors == []


def test_unknown_model_stops_before_anything_is_uploaded(env, tmp_path):
    fake = vertex_fake.FakeVertex()
    with pytest.raises(UserInputError) as raised:
        _run(['versions', 'create', 'v1', '--model', 'nope', '--origin', EXPORT], fake, env)
    assert str(raised.value) == (
        'model nope: no such model in projects/my-project/locations/us-central1 (`models '
        'list` shows the models there; `models create nope` makes one; --region if it is '
        'elsewhere)')
    assert fake.calls() == ['GET projects/my-project/locations/us-central1/endpoints']
    with pytest.raises(UserInputError, match='^model nope: no such model'):
        _run(['predict', '--model', 'nope', '--json-instances',
              _instances_file(tmp_path, TRIPS)], fake, env)


def test_an_export_without_serving_signature_is_refused_before_any_call(env):
    fake = vertex_fake.FakeVertex()
    backend = ServingBackend(fake)
    origin = 'gs://%s/nosig/export' % BUCKET
    with pytest.raises(UserInputError) as raised:
        _run(['versions', 'create', 'v1', '--model', 'taxi_model', '--origin', origin], fake,
             env, backend)
    assert str(raised.value) == (
        '--origin %s/1: the SavedModel has no serving signature (export it with a '
        'serving_input_receiver_fn, or tf.saved_model.save(..., signatures=...))' % origin)
    assert fake.requests == [] and backend.credential_calls == 0
    with pytest.raises(UserInputError, match='^--origin gs://%s/missing: no SavedModel there'
                       % BUCKET):
        _run(['versions', 'create', 'v1', '--model', 'taxi_model', '--origin',
              'gs://%s/missing' % BUCKET], fake, env, backend)


@pytest.mark.parametrize('content, message', [
    ('{"fare": 1.0, "trip_miles": \n', ' line 1: not valid JSON (Expecting value: '),
    (json.dumps(TRIPS[0]) + '\n\n' + json.dumps(TRIPS[1]) + '\n',
     ' line 2: empty line (gcloud refused them too; an instance per line)'),
    (json.dumps(TRIPS[0]) + '\n' * 0, None),
    ('', ': no instances'),
    (''.join(json.dumps(TRIPS[0]) + '\n' for _ in range(101)),
     ': 101 instances; an online prediction takes at most 100 (split the file)'),
])
def test_malformed_instances_are_one_line(env, tmp_path, content, message):
    fake = vertex_fake.FakeVertex(predictions=_local_predictions)
    path = tmp_path / 'instances.json'
    path.write_text(content)
    words = ['predict', '--model', 'taxi_model', '--json-instances', str(path)]
    if message is None:  # no final newline: still one instance
        fake.add_endpoint('taxi_model', endpoints.MARK)
        with pytest.raises(UserInputError, match='model taxi_model has no versions'):
            _run(words, fake, env)
        return
    with pytest.raises(UserInputError) as raised:
        _run(words, fake, env)
    assert str(raised.value).startswith('--json-instances %s%s' % (path, message))
    assert '\n' not in str(raised.value)
    assert fake.requests == []


@pytest.mark.parametrize('line', [
    '[%s]' % ','.join(['[12,34,56]'] * 2_700_000),  # pixel lists: 10.8M values
    '[%s]' % ','.join(['"a,b"'] * 5_000_000),  # short strings, commas inside them
], ids=['numbers', 'strings'])
def test_a_30_mb_line_is_refused_before_it_is_parsed(tmp_path, line):
    """It took 7-11 s and 1.3 GB to refuse: its values were counted after parsing.
    Measured in memory (the peak of the process), not in time."""
    big, small = tmp_path / 'big.json', tmp_path / 'small.json'
    big.write_text(line + '\n')
    small.write_text('[1, 2\n')
    assert big.stat().st_size > 28 << 20
    runs = {}
    for path in (big, small):
        runs[path] = resources.run_measured(
            'estimator_trainers.tools.cloud.ai_platform', 'local', 'predict',
            '--model-dir', tmp_path / 'no-export', '--json-instances', path, timeout=120)
    one_error_line(runs[big][0], '--json-instances %s line 1: more than 4194304 values; '
                   'split the instances into several files' % big)
    one_error_line(runs[small][0], '--json-instances %s line 1: not valid JSON' % small)
    # The file itself is read into memory (30 MB), and nothing of its size besides.
    assert runs[big][1] < runs[small][1] + (100 << 20), (runs[big][1], runs[small][1])


def test_instances_the_signature_cannot_take_are_one_line(env, tmp_path):
    """local predict names the line, the input and what it expected."""
    path = _instances_file(tmp_path, [TRIPS[0], {'fare': [1.0], 'trip_miles': 2.0}])
    out, err = io.StringIO(), io.StringIO()
    with pytest.raises(UserInputError) as raised:
        ai_platform.main(['local', 'predict', '--model-dir', EXPORT, '--json-instances', path],
                         out=out, err=err, environ=env)
    assert str(raised.value) == ('--json-instances %s line 2, input fare: expected shape [] '
                                 'of float32, got shape [1]' % path)
    path = _instances_file(tmp_path, [{'fare': 1.0}])
    with pytest.raises(UserInputError) as raised:
        ai_platform.main(['local', 'predict', '--model-dir', EXPORT, '--json-instances', path],
                         out=out, err=err, environ=env)
    assert str(raised.value) == ('--json-instances %s line 1: lacks trip_miles (signature '
                                 'serving_default takes fare, trip_miles)' % path)


def test_no_credentials_is_one_line():
    """The real Backend, through the script, with a key file that does not exist."""
    proc = processes.run(['bash', os.path.join(REPO_ROOT, 'scripts', 'ai-platform.sh'),
                          'models', 'list'], 300, cwd=REPO_ROOT, env=cli_env(OFFLINE))
    one_error_line(proc, 'no usable Application Default Credentials '
                         '(GOOGLE_APPLICATION_CREDENTIALS=/nonexistent/key.json')


def test_dry_runs_print_the_requests_and_need_no_credentials(env):
    class NoCredentials(ServingBackend):
        def credentials(self):
            raise AssertionError('a dry run needs no credentials')

    fake = vertex_fake.FakeVertex()
    backend = NoCredentials(fake)
    code, out, err = _run(['versions', 'create', 'v2', '--model', 'taxi_model', '--origin',
                           EXPORT, '--machine-type', 'mls1-c4-m2', '--min-nodes', '0',
                           '--max-nodes', '3', '--labels', 'team=ml', '--dry-run'],
                          fake, env, backend)
    assert code == 0, err
    printed = json.loads(out)
    assert printed['check'] == {
        'export': EXPORT, 'signature': 'serving_default',
        'inputs': 'fare (float32 [?]), trip_miles (float32 [?])',
        'prediction': {'class_ids': [0], 'probabilities': [0.5, 0.5]}}
    find, upload, deploy = printed['requests']
    base = 'https://us-central1-aiplatform.googleapis.com/v1/projects/my-project/locations/' \
           'us-central1'
    assert (find['method'], find['uri']) == (
        'GET', base + '/endpoints?pageSize=100&filter=display_name%3D%22taxi_model%22&alt=json')
    assert (upload['method'], upload['uri']) == ('POST', base + '/models:upload?alt=json')
    schema.check('aiplatform', 'v1', 'GoogleCloudAiplatformV1UploadModelRequest',
                 upload['body'])
    assert upload['body']['model']['labels'] == dict(endpoints.MARK, team='ml')
    assert deploy['uri'] == base + '/endpoints/ENDPOINT_OF_taxi_model:deployModel?alt=json'
    schema.check('aiplatform', 'v1', 'GoogleCloudAiplatformV1DeployModelRequest',
                 deploy['body'])
    assert deploy['body']['deployedModel']['dedicatedResources'] == {
        'machineSpec': {'machineType': 'n1-standard-4'}, 'minReplicaCount': 1,
        'maxReplicaCount': 3}
    assert cloud_fakes.said(err) == [
        'note: --machine-type mls1-c4-m2: AI Platform Prediction\'s machine; Vertex AI '
        'serves on n1-standard-4 instead',
        'note: --min-nodes 0: Vertex AI keeps at least one node of a deployed version, '
        'billed while it is deployed; 1 it is']
    assert fake.requests == []

    code, out, err = _run(['models', 'create', 'taxi_model', '--enable-logging', '--region',
                           'global', '--dry-run'], fake, env, backend)
    assert err == ('note: using project my-project from PROJECT_ID and region us-central1, the '
                   'default (--region global: Vertex AI has no global endpoint)\n')
    request = json.loads(out)['request']
    assert request['uri'] == base + '/endpoints?alt=json'
    assert request['body'] == {'displayName': 'taxi_model', 'labels': dict(
        endpoints.MARK, **{endpoints.ACCESS_LOGGING_LABEL: 'true'})}
    assert fake.requests == []


def test_removal_touches_only_what_this_tool_created(env):
    fake = vertex_fake.FakeVertex()
    foreign = fake.add_endpoint('console_model', {'team': 'ml'})
    assert _run(['models', 'create', 'taxi_model'], fake, env)[0] == 0
    code, out, err = _run(['models', 'list'], fake, env)
    assert sorted(out.splitlines()[1:]) == ['console_model *  -                     0         -',
                                            'taxi_model       -                     0         -']
    assert '* not created by this tool' in err
    with pytest.raises(UserInputError) as raised:
        _run(['models', 'delete', 'console_model'], fake, env)
    assert str(raised.value) == (
        'model console_model is Vertex AI endpoint %s, which this tool did not create; to '
        'delete it anyway, name it exactly: models delete %s' % (foreign['name'],
                                                                 foreign['name']))
    assert foreign['name'] in fake.endpoints
    # A model uploaded elsewhere, deployed on this tool's endpoint: undeployed, kept.
    assert _run(['versions', 'create', 'v1', '--model', 'taxi_model', '--origin', EXPORT],
                fake, env)[0] == 0
    ours = next(iter(fake.models))
    fake.models[ours]['labels'] = {}
    code, out, err = _run(['models', 'delete', 'taxi_model', '--dry-run'], fake, env)
    printed = json.loads(out)
    assert [step['step'].split(' (')[0] for step in printed['remove']] == [
        'undeploy version v1', 'delete endpoint %s' % next(
            name for name in fake.endpoints if name != foreign['name'])]
    assert printed['keep'] == ['%s, the Vertex AI model of version v1: this tool did not '
                               'create it' % ours]
    assert _run(['models', 'delete', 'taxi_model'], fake, env)[0] == 0
    assert list(fake.models) == [ours] and list(fake.endpoints) == [foreign['name']]
    assert _run(['models', 'delete', foreign['name']], fake, env)[0] == 0
    assert fake.endpoints == {}
    assert fake.schema_errors == []


def test_versions_default_traffic_and_deletion(env, tmp_path):
    fake = vertex_fake.FakeVertex(predictions=_local_predictions)
    assert _run(['models', 'create', 'taxi_model'], fake, env)[0] == 0
    for version in ('v1', 'v2'):
        code, _, err = _run(['versions', 'create', version, '--model', 'taxi_model',
                             '--origin', EXPORT], fake, env)
        assert code == 0, err
    code, out, _ = _run(['versions', 'list', '--model', 'taxi_model'], fake, env)
    assert [line.split('  ') for line in out.splitlines()] == [
        line.split('  ') for line in instances_lib.table(
            ['NAME', 'DEPLOYMENT_URI', 'STATE', 'DEFAULT', 'MACHINES'],
            [['v1', EXPORT, 'READY', 'yes', '1 x n1-standard-2'],
             ['v2', EXPORT, 'READY', '', '1 x n1-standard-2']]).splitlines()]
    assert out.splitlines()[2].split() == ['v2', EXPORT, 'READY', '1', 'x', 'n1-standard-2']
    instances = _instances_file(tmp_path, TRIPS)
    with pytest.raises(UserInputError) as raised:
        _run(['predict', '--model', 'taxi_model', '--version', 'v2', '--json-instances',
              instances], fake, env)
    assert str(raised.value).startswith(
        '--version v2: Vertex AI sends predictions by the traffic split, and v2 takes 0% of '
        'model taxi_model\'s traffic; make it the default first (versions set-default v2 '
        '--model taxi_model)')
    code, out, err = _run(['versions', 'set-default', 'v2', '--model', 'taxi_model'], fake,
                          env)
    assert code == 0 and 'isDefault: true' in out
    (endpoint,) = fake.endpoints.values()
    v2 = next(d for d in endpoint['deployedModels'] if d['displayName'] == 'v2')
    assert endpoint['trafficSplit'] == {v2['id']: 100}
    code, out, _ = _run(['predict', '--model', 'taxi_model', '--version', 'v2',
                         '--json-instances', instances], fake, env)
    assert code == 0 and out == instances_lib.render({'predictions': _local_predictions(TRIPS)})
    with pytest.raises(UserInputError, match='^version v2 is the default of model taxi_model'):
        _run(['versions', 'delete', 'v2', '--model', 'taxi_model'], fake, env)
    code, _, err = _run(['versions', 'delete', 'v1', '--model', 'taxi_model'], fake, env)
    assert code == 0 and err.splitlines()[-1].startswith(
        'Deleted version [v1] of model [taxi_model]: undeployed version v1')
    assert [d['displayName'] for d in endpoint['deployedModels']] == ['v2']
    assert len(fake.models) == 1
    code, out, _ = _run(['versions', 'describe', 'v2', '--model', 'taxi_model', '--format',
                         'json'], fake, env)
    described = json.loads(out)
    assert described['name'] == 'projects/my-project/models/taxi_model/versions/v2'
    assert (described['deploymentUri'], described['isDefault']) == (EXPORT, True)
    with pytest.raises(UserInputError, match='^version v2 of model taxi_model already '
                       'exists'):
        _run(['versions', 'create', 'v2', '--model', 'taxi_model', '--origin', EXPORT],
             fake, env)

    # --async returns once the deploy started; when it fails, the uploaded model is
    # what is left, and `versions delete` removes it.
    fake.fail_operation['endpoints.deployModel'] = 'Model server never became ready'
    code, _, err = _run(['versions', 'create', 'v3', '--model', 'taxi_model', '--origin',
                         EXPORT, '--async'], fake, env)
    assert code == 0 and 'note: --async: not waiting for the deploy' in err
    fake.finish_all()
    assert len(fake.models) == 2
    code, _, err = _run(['versions', 'delete', 'v3', '--model', 'taxi_model'], fake, env)
    assert code == 0, err
    assert err.splitlines()[-1].startswith('Deleted version [v3] of model [taxi_model]: '
                                           'deleted Vertex AI model')
    assert [m['displayName'] for m in fake.models.values()] == ['taxi_model/v2']
    assert fake.schema_errors == []


@pytest.mark.parametrize('words, message', [
    (['versions', 'create', 'v1', '--model', 'm', '--origin', '/local/export'],
     '--origin /local/export: Vertex AI serves a SavedModel from Cloud Storage'),
    (['versions', 'create', 'v1', '--model', 'm', '--origin', EXPORT, '--framework',
      'scikit-learn'], '--framework scikit-learn: this tool deploys TensorFlow SavedModels'),
    (['versions', 'create', 'v1', '--model', 'm', '--origin', EXPORT, '--config', 'v.yaml'],
     '--config: not carried over: pass the version\'s fields as flags'),
    (['versions', 'create', 'v-1', '--model', 'm', '--origin', EXPORT],
     'VERSION \'v-1\': expected a letter followed by letters, digits or underscores'),
    (['versions', 'create', 'v1', '--model', 'm', '--origin', EXPORT, '--machine-type',
      'n1-standard-3'], '--machine-type: unknown machine type \'n1-standard-3\': Vertex AI '
                        'serves on n1-standard in sizes 2, 4, 8'),
    (['models', 'create', 'm', '--regions', 'us-central1,europe-west4'],
     '--regions us-central1,europe-west4: Vertex AI endpoints are regional'),
])
def test_flags_vertex_cannot_honour_are_one_line(env, words, message):
    fake = vertex_fake.FakeVertex()
    with pytest.raises(UserInputError) as raised:
        _run(words, fake, env)
    assert str(raised.value).startswith(message)
    assert fake.requests == []


def test_the_prebuilt_prediction_image_has_an_end():
    assert endpoints.prediction_image(False) == endpoints.PREDICTION_IMAGES['cpu']
    assert endpoints.prediction_image(True, today=endpoints.PREDICTION_IMAGES_UNTIL) == \
        endpoints.PREDICTION_IMAGES['gpu']
    with pytest.raises(UserInputError, match='available until 2027-01-14; pass --image-uri'):
        endpoints.prediction_image(False, today=endpoints.PREDICTION_IMAGES_UNTIL.replace(
            day=15))
    assert endpoints.prediction_image(False, 'europe-docker.pkg.dev/p/r/tfs:2.15') == \
        'europe-docker.pkg.dev/p/r/tfs:2.15'


def test_an_operation_still_running_at_its_deadline_is_one_line():
    fake = vertex_fake.FakeVertex(polls=10**6)
    vertex = endpoints.VertexServing('my-project', 'us-central1', http=fake)
    operation = vertex.start(vertex.create_endpoint_request(endpoints.endpoint_body('m')),
                             'create')
    ticks = iter(range(0, 10**6, 30))
    err = io.StringIO()
    with pytest.raises(ApiError) as raised:
        vertex.wait(operation, 'create model m', err, 0, timeout=600,
                    clock=lambda: next(ticks), sleep=lambda s: None)
    assert str(raised.value) == (
        'create model m: operation %s still running after 10m30s; it goes on in Vertex AI '
        '(the console shows it)' % operation['name'])
    progress = err.getvalue().splitlines()
    assert progress[0].startswith('create model m: waiting for operation')
    assert progress[1:3] == ['  create model m: 1m00s elapsed', '  create model m: 2m00s elapsed']


def test_instances_files_as_gcloud_read_them(tmp_path):
    text = tmp_path / 'rows.txt'
    text.write_bytes(b'\xef\xbb\xbfa,1\r\nb,2\n')  # a spreadsheet's BOM and CRLF
    read = instances_lib.read(instances_lib.TEXT_INSTANCES, str(text))
    assert read.values == ('a,1', 'b,2') and read.where(1) == '--text-instances %s line 2' % text
    request = tmp_path / 'request.json'
    request.write_text(json.dumps({'instances': TRIPS}))
    read = instances_lib.read(instances_lib.JSON_REQUEST, str(request))
    assert read.values == tuple(TRIPS) and read.where(0) == \
        '--json-request %s instance 1' % request
    request.write_text(json.dumps(TRIPS))
    with pytest.raises(UserInputError, match=r'expected a request body \{"instances"'):
        instances_lib.read(instances_lib.JSON_REQUEST, str(request))
    read = instances_lib.read(instances_lib.JSON_INSTANCES, '-',
                              stdin=io.BytesIO(b'[1, 2]\n{"x": [3, 4]}\n'))
    assert read.values == ([1, 2], {'x': [3, 4]})
    with pytest.raises(UserInputError, match='is a directory'):
        instances_lib.read(instances_lib.JSON_INSTANCES, str(tmp_path))


def test_predictions_as_gcloud_printed_them():
    rows = [{'probabilities': [0.25, 0.75], 'class_ids': [1], 'classes': ['1']},
            {'probabilities': [0.5, 0.5], 'class_ids': [0], 'classes': ['0']}]
    assert instances_lib.render({'predictions': rows}) == (
        'CLASS_IDS  CLASSES  PROBABILITIES\n'
        '[1]        ["1"]    [0.25, 0.75]\n'
        '[0]        ["0"]    [0.5, 0.5]\n')
    assert instances_lib.render({'predictions': [[0.1, 0.9], [0.8, 0.2]]}) == (
        '[0.1, 0.9]\n[0.8, 0.2]\n')  # one output: a line each, no heading
    assert json.loads(instances_lib.render({'predictions': rows}, 'json')) == {
        'predictions': rows}
    assert instances_lib.render({'predictions': []}) == ''


def test_an_origin_with_empty_segments_reads_as_the_job_dir_does():
    """`--origin $MODEL_DIR/export` with `MODEL_DIR=gs://b/`: one slash, one note."""
    plan = endpoints.version_plan('v1', 'm', 'gs://my-bucket//taxi/export/')
    assert plan.origin == 'gs://my-bucket/taxi/export'
    assert plan.notes == ('gs://my-bucket//taxi/export/ is read as gs://my-bucket/taxi/export '
                          '(empty path segments dropped)',)
