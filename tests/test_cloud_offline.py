"""Dry runs need no credentials and no network; names that reach Vertex AI's filters
cannot select other resources.

- Every write verb of `ai-platform.sh` (`models create|delete`, `versions
  create|delete`, `jobs cancel`, `predict`) and `models list` take `--dry-run`
  and print their requests with no credentials and no network: what only a
  lookup finds is a placeholder, said in one `note:` line; `versions create`'s
  check of an export Cloud Storage does not give is a note, not a traceback.
- A name a lookup puts in a filter (`display_name="..."`) is refused in one line
  when it could end the quoted string (a `"`, a `\\`, a control character),
  before any request, in every verb that searches; a `/` in what is no full
  resource name too; and only resources displayed exactly as the name count,
  whatever a filter matched.
"""
import io
import json
import os

import httplib2
import pytest
import yaml

import cloud_fakes
import vertex_fake
from conftest import run_module
from estimator_trainers.errors import UserInputError
from estimator_trainers.tools.cloud import backend as backend_lib
from estimator_trainers.tools.cloud import ai_platform
from estimator_trainers.tools.cloud import api
from estimator_trainers.tools.cloud import train_cloud
from test_cloud_cli import FakeBackend

ENVIRON = {'PROJECT_ID': 'my-project', 'CLOUDSDK_CONFIG': '/nonexistent/gcloud'}
BASE = 'https://us-central1-aiplatform.googleapis.com/v1/projects/my-project/locations/' \
       'us-central1'
# The name (#49), and what else could end a quoted filter string.
INJECTION = 'no_such_model" OR display_name!="'
HOSTILE = [INJECTION, 'a\\" OR display_name:*', 'taxi\nmodel', 'x\x7f', '', 'm' * 129]
NOT_LOOKED_UP = ('note: not looked up (%s): ' % backend_lib.NO_CREDENTIALS)


class NoCredentials(backend_lib.Backend):
    """The real backend without usable credentials, and a transport that fails loudly."""

    def __init__(self):
        self.requests = []

    def credentials(self):
        raise UserInputError('no usable Application Default Credentials (test)')

    def transport(self, credentials):
        raise AssertionError('a dry run without credentials builds no transport')


class Unreachable:
    """An httplib2 transport with no network."""

    def __init__(self):
        self.requests = []

    def request(self, uri, method='GET', **kwargs):
        del kwargs
        self.requests.append((method, uri))
        raise httplib2.ServerNotFoundError('Unable to find the server at %s' % uri)


class Offline(FakeBackend):
    """Credentials, but no network."""

    def __init__(self):
        super().__init__()
        self.http = Unreachable()


def _run(argv, backend, environ=None):
    out, err = io.StringIO(), io.StringIO()
    code = ai_platform.main(argv, backend=backend, out=out, err=err,
                            environ=dict(ENVIRON, **(environ or {})))
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def instances(tmp_path):
    path = tmp_path / 'instances.json'
    path.write_text('{"fare": 1.0}\n')
    return str(path)


def test_every_write_verb_dry_run_needs_no_credentials_or_network(instances):
    backend = NoCredentials()
    job = 'projects/my-project/locations/us-central1/customJobs/5'
    printed = {}
    for words in (['models', 'create', 'taxi_model'], ['models', 'list'],
                  ['models', 'delete', 'taxi_model'],
                  ['versions', 'delete', 'v1', '--model', 'taxi_model'],
                  ['jobs', 'cancel', 'train_1'], ['jobs', 'cancel', '42'],
                  ['jobs', 'cancel', job],
                  ['predict', '--model', 'taxi_model', '--json-instances', instances]):
        code, out, err = _run(words + ['--dry-run'], backend)
        assert code == 0, err
        said = cloud_fakes.said(err)
        looks_up = words[1] == 'delete' or words[-1] in ('train_1', '42')
        assert [l for l in said if l.startswith(NOT_LOOKED_UP)] == said[:1] if looks_up \
            else said == [], (words, said)
        printed[' '.join(words[:3])] = json.loads(out)
    remove = printed['models delete taxi_model']['remove']
    assert [(step['method'], step['uri']) for step in remove] == [
        ('GET', BASE + '/endpoints?pageSize=100&filter=display_name%3D%22taxi_model%22&alt=json'),
        ('POST', BASE + '/endpoints/ENDPOINT_OF_taxi_model:undeployModel?alt=json'),
        ('DELETE', BASE + '/models/MODEL_ID?alt=json'),
        ('DELETE', BASE + '/endpoints/ENDPOINT_OF_taxi_model?alt=json')]
    assert [s['uri'] for s in printed['jobs cancel train_1']['requests']] == [
        BASE + '/customJobs?pageSize=100&filter=display_name%3D%22train_1%22&alt=json',
        BASE + '/hyperparameterTuningJobs?pageSize=100&filter=display_name%3D%22train_1%22'
        '&alt=json', BASE + '/customJobs/JOB_ID_OF_train_1:cancel?alt=json']
    assert printed['jobs cancel %s' % job]['requests'] == [{
        'step': 'cancel job %s' % job, 'method': 'POST',
        'uri': 'https://us-central1-aiplatform.googleapis.com/v1/%s:cancel?alt=json' % job}]
    assert printed['models list']['request']['uri'] == (
        BASE + '/endpoints?pageSize=100&alt=json')
    assert printed['predict --model taxi_model']['request']['uri'] == (
        BASE + '/endpoints/ENDPOINT_OF_taxi_model:predict?alt=json')


def test_lookups_that_cannot_reach_vertex_ai_fall_back_to_placeholders():
    backend = Offline()
    code, out, err = _run(['jobs', 'cancel', 'train_1', '--dry-run'], backend)
    assert code == 0
    (note,) = cloud_fakes.said(err)
    assert note.startswith('note: not looked up (customJobs.list in projects/my-project/'
                           'locations/us-central1: cannot reach https://us-central1-'
                           'aiplatform.googleapis.com (Unable to find the server')
    assert json.loads(out)['requests'][-1]['uri'].endswith('/JOB_ID_OF_train_1:cancel?alt=json')
    assert {m for m, _ in backend.http.requests} == {'GET'}  # the lookup (retried), no cancel


def test_lookups_with_credentials_print_what_exists():
    """With credentials the dry run names the resources themselves, and cancels nothing."""
    job = {'name': 'projects/my-project/locations/us-central1/customJobs/7',
           'displayName': 'train_1', 'state': 'JOB_STATE_RUNNING'}
    backend = FakeBackend([(200, {'customJobs': [job]}), (200, {})])
    code, out, _ = _run(['jobs', 'cancel', 'train_1', '--dry-run'], backend)
    assert code == 0
    assert json.loads(out)['requests'] == [{
        'step': 'cancel job %s' % job['name'], 'method': 'POST',
        'uri': 'https://us-central1-aiplatform.googleapis.com/v1/%s:cancel?alt=json'
               % job['name']}]
    assert [r.method for r in backend.http.requests] == ['GET', 'GET']


def test_versions_create_dry_run_offline_is_a_note_not_a_traceback():
    """The export's check needs Cloud Storage: offline it is said in one line (after one
    retry: seconds, not TensorFlow's minutes of back-off), and the requests are printed."""
    proc = run_module('estimator_trainers.tools.cloud.ai_platform', 'versions', 'create', 'v1',
                      '--model', 'taxi_model', '--origin', 'gs://my-bucket/export',
                      '--dry-run', env=dict(cloud_fakes.OFFLINE_ENV,
                                            https_proxy='http://127.0.0.1:9',
                                            http_proxy='http://127.0.0.1:9'),
                      timeout=300, check=0)
    assert 'Traceback' not in proc.stderr
    notes = [l for l in cloud_fakes.said(proc.stderr) if 'cannot read it' in l]
    assert len(notes) == 1 and notes[0].startswith(
        'note: --origin gs://my-bucket/export: cannot read it (')
    printed = json.loads(proc.stdout)
    assert printed['check']['note'].startswith('not checked: --origin gs://my-bucket/export')
    assert [r['method'] for r in printed['requests']] == ['GET', 'POST', 'POST']


# ------------------------------------------------------------------ names in filters


def _serving_fake():
    """One model of this tool's with a version, and another model beside it."""
    fake = vertex_fake.FakeVertex()
    for name in ('taxi_model', 'other_model'):
        fake.add_endpoint(name, labels={'managed-by': 'estimator-trainers'})
    return fake


class Serving(backend_lib.Backend):
    def __init__(self, fake):
        self.fake = fake

    def credentials(self):
        return object(), None

    def transport(self, credentials):
        return self.fake


SEARCHING_VERBS = [
    ['models', 'describe', '{name}'], ['models', 'delete', '{name}'],
    ['models', 'delete', '{name}', '--dry-run'],
    ['versions', 'list', '--model', '{name}'], ['versions', 'describe', 'v1', '--model', '{name}'],
    ['versions', 'delete', 'v1', '--model', '{name}'],
    ['versions', 'delete', 'v1', '--model', '{name}', '--dry-run'],
    ['versions', 'set-default', 'v1', '--model', '{name}'],
    ['predict', '--model', '{name}', '--json-instances', '{instances}'],
    ['predict', '--model', '{name}', '--json-instances', '{instances}', '--dry-run'],
    ['jobs', 'describe', '{name}'], ['jobs', 'cancel', '{name}'],
    ['jobs', 'cancel', '{name}', '--dry-run'], ['jobs', 'stream-logs', '{name}'],
]


@pytest.mark.parametrize('name', HOSTILE)
def test_no_name_leaves_its_filter(name):
    with pytest.raises(UserInputError) as raised:
        api.equals_filter('display_name', name, 'model', '--model')
    assert str(raised.value).startswith('model %r: ' % name)
    assert str(raised.value).endswith('; name it by its resource name instead')


@pytest.mark.parametrize('name', [INJECTION, 'projects/my-project/locations/us-central1'])
def test_a_name_that_would_leave_its_filter_is_one_line_before_any_request(name, instances):
    fake = _serving_fake()
    before = json.dumps(fake.endpoints, sort_keys=True)
    for words in SEARCHING_VERBS:
        argv = [w.format(name=name, instances=instances) for w in words]
        backend = Serving(fake) if words[0] != 'jobs' else FakeBackend()
        with pytest.raises(UserInputError) as raised:
            _run(argv, backend)
        assert '\n' not in str(raised.value), argv
        assert ('name it by its resource name instead' in str(raised.value)
                or 'full resource name (projects/P/locations/R/' in str(raised.value)), (
                    argv, str(raised.value))
        assert fake.requests == [] and getattr(backend, 'http', None) is None or \
            backend.http.requests == [], argv
    for words in (['status', name], ['cancel', name], ['logs', name]):
        backend = FakeBackend()
        with pytest.raises(UserInputError):
            train_cloud.main(words, backend=backend, out=io.StringIO(), err=io.StringIO(),
                             environ=ENVIRON)
        assert backend.http.requests == []
    assert json.dumps(fake.endpoints, sort_keys=True) == before


class IgnoresFilters(vertex_fake.FakeVertex):
    """A Vertex AI that answers every list with everything (what a filter the
    service reads differently would do)."""

    def _endpoints_list(self, parent, data, query):
        return super()._endpoints_list(parent, data, {})


def test_only_exact_display_names_are_taken():
    fake = IgnoresFilters()
    fake.add_endpoint('other_model', labels={'managed-by': 'estimator-trainers'})
    with pytest.raises(UserInputError, match='^model no_such_model: no such model in '):
        _run(['models', 'delete', 'no_such_model', '--dry-run'], Serving(fake))
    with pytest.raises(UserInputError, match='^model no_such_model: no such model in '):
        _run(['models', 'delete', 'no_such_model', '--poll-interval', '0'], Serving(fake))
    assert len(fake.endpoints) == 1
    other = {'name': 'projects/my-project/locations/us-central1/customJobs/8',
             'displayName': 'other_job'}
    backend = FakeBackend([(200, {'customJobs': [other]}), (200, {})])
    with pytest.raises(UserInputError, match="^no job named 'no_such_job' in "):
        _run(['jobs', 'cancel', 'no_such_job'], backend)
    assert [r.method for r in backend.http.requests] == ['GET', 'GET']


# ---------------------------------------------------------------------- the spec


def test_the_spec_is_the_dry_runs_job_spec_and_the_command_creates_it():
    """train-cloud.sh's --format yaml (ai-platform.sh's is run through the real gcloud in
    tests/test_gcloud_reference.py): stdout is the request's jobSpec, stderr the command."""
    argv = ['submit', 'taxi', '--image-uri', 'us-docker.pkg.dev/p/r/taxi:1', '--bucket',
            'gs://my-bucket', '--job-name', 'taxi_1', '--region', 'europe-west4', '--dry-run']
    printed = {}
    for fmt in ('json', 'yaml'):
        out, err = io.StringIO(), io.StringIO()
        assert train_cloud.main(argv + ['--format', fmt], backend=NoCredentials(), out=out,
                                err=err, environ=ENVIRON) == 0
        printed[fmt] = out.getvalue(), err.getvalue()
    body = json.loads(printed['json'][0])['request']['body']
    assert yaml.safe_load(printed['yaml'][0]) == body['jobSpec']
    assert printed['yaml'][1].splitlines()[-1] == (
        'note: the spec is the --config of: gcloud ai custom-jobs create --project=my-project '
        '--region=europe-west4 --display-name=taxi_1 --config=spec.yaml --labels=%s' % ','.join(
            '%s=%s' % item for item in sorted(body['labels'].items())))
