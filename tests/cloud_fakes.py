"""Offline stand-ins for Google Cloud in the cloud tests.

- `RecordingHttp`: googleapiclient's `HttpMockSequence` that also records
  every request (method, uri, parsed body, headers), so tests drive the real
  `aiplatform v1` service objects and assert what was sent.
- `RecordingSession`: the same for google-cloud-storage's transport (a
  `requests.Session`), for answers an emulator cannot give (a 403, missing
  permissions).
- `storage_client`: a google-cloud-storage client of the suite's
  fake-gcs-server (conftest's `gcs`), with `STORAGE_EMULATOR_HOST` set as the
  emulator's `env()` sets it for the CLIs.
"""
import collections
import contextlib
import json
import os
from unittest import mock

import requests
from google.auth.credentials import AnonymousCredentials
from googleapiclient import http as googleapiclient_http

from estimator_trainers import google_api

Request = collections.namedtuple('Request', 'method uri body headers')

# The environment of a dry run, which must need no credentials and touch no
# network: the key file does not exist and every proxy points at a closed port.
OFFLINE_ENV = {
    'PROJECT_ID': 'my-project', 'BUCKET_NAME': 'gs://my-bucket', 'REGION': 'us-central1',
    'GOOGLE_APPLICATION_CREDENTIALS': '/nonexistent/key.json',
    'HTTP_PROXY': 'http://127.0.0.1:9', 'HTTPS_PROXY': 'http://127.0.0.1:9', 'NO_PROXY': '',
    'STORAGE_EMULATOR_HOST': '',
}

# A user without an account, offline: no credentials (an empty key variable
# stops google-auth before the metadata server), no project, no bucket, every
# proxy a closed port, pip offline; a test adds CLOUDSDK_CONFIG (no gcloud
# credentials) and XDG_CACHE_HOME (the local storage's mirror) of its own.
NO_ACCOUNT_ENV = {
    'GOOGLE_APPLICATION_CREDENTIALS': '', 'PROJECT_ID': '', 'CLOUDSDK_CORE_PROJECT': '',
    'BUCKET_NAME': '', 'HTTP_PROXY': 'http://127.0.0.1:9', 'HTTPS_PROXY': 'http://127.0.0.1:9',
    'NO_PROXY': '', 'STORAGE_EMULATOR_HOST': '', 'PIP_NO_INDEX': '1',
}


def no_account_env(tmp_path, **extra):
    """`NO_ACCOUNT_ENV` with its own gcloud configuration and cache under `tmp_path`."""
    return dict(NO_ACCOUNT_ENV, CLOUDSDK_CONFIG=str(tmp_path / 'gcloud'),
                XDG_CACHE_HOME=str(tmp_path / 'cache'), TMPDIR=str(tmp_path), **extra)


def mirror(tmp_path, uri):
    """Where local storage keeps `uri` for `no_account_env(tmp_path)`."""
    return tmp_path / 'cache' / 'estimator-trainers' / 'local-storage' / uri[len('gs://'):]


class RecordingHttp(googleapiclient_http.HttpMockSequence):
    """Answers with canned `(status, json)` pairs and records the requests."""

    def __init__(self, responses):
        super().__init__([({'status': str(status)}, json.dumps(content))
                          for status, content in responses])
        self.requests = []

    def request(self, uri, method='GET', body=None, headers=None, redirections=1,
                connection_type=None):
        self.requests.append(Request(method, uri, json.loads(body) if body else None,
                                     dict(headers or {})))
        return super().request(uri, method, body, headers, redirections, connection_type)


def error(status, message):
    """A Google API error answer."""
    return status, {'error': {'code': status, 'message': message}}


class RecordingSession(requests.Session):
    """Answers with canned `(status, json)` pairs and records the requests."""

    def __init__(self, responses):
        super().__init__()
        self.responses = list(responses)
        self.requests = []

    def request(self, method, url, data=None, headers=None, **kwargs):  # pylint: disable=arguments-differ
        self.requests.append(Request(method, url, data, dict(headers or {})))
        status, content = self.responses.pop(0)
        response = requests.Response()
        response.status_code = status
        response._content = json.dumps(content).encode()  # pylint: disable=protected-access
        response.headers['Content-Type'] = 'application/json'
        response.request = requests.Request(method, url).prepare()
        return response


def recorded_storage_client(responses):
    """A google-cloud-storage client whose requests get `responses`; and its session."""
    session = RecordingSession(responses)
    # The real endpoint, not STORAGE_EMULATOR_HOST (an emulator fixture may set it).
    return google_api.storage_client('my-project', AnonymousCredentials(), _http=session,
                              client_options={'api_endpoint': 'https://storage.googleapis.com'}
                              ), session


@contextlib.contextmanager
def storage_client(emulator, bucket):
    """A google-cloud-storage client of `emulator` (a `gcs_emulator.GcsEmulator`)
    holding `bucket`; `STORAGE_EMULATOR_HOST` points at it meanwhile."""
    emulator.create_bucket(bucket)
    host = emulator.env()['STORAGE_EMULATOR_HOST']
    with mock.patch.dict(os.environ, {'STORAGE_EMULATOR_HOST': host}):
        yield google_api.storage_client('test-project', None)


# The AI Platform config a course hands out (docs/cloud.md): a parameter-server
# type with no parameterServerCount.
COURSE_CONFIG = """\
trainingInput:
  scaleTier: CUSTOM
  masterType: n1-standard-16
  workerType: n1-standard-16
  parameterServerType: n1-standard-16
  workerCount: 1
"""


CONTEXT_NOTE = 'note: the build context: '
# Where the project and region came from (tests/test_cloud_settings.py checks it).
SETTINGS_NOTE = 'note: using '


def without_estimate(stderr):
    """The lines of a cloud command's stderr but the job's estimate (`estimate: ...`,
    printed by every submission; tests/test_cloud_costs.py checks it) and where its
    project and region came from (`SETTINGS_NOTE`; tests/test_cloud_settings.py)."""
    return [line for line in stderr.splitlines()
            if not line.startswith(('estimate: ', SETTINGS_NOTE))]


def said(stderr):
    """The `error:`, `warning:` and `note:` lines of a cloud command's stderr, without
    the build context's size (every build prints it; tests/test_cloud_build.py checks it)
    and where the project and region came from."""
    return [line for line in stderr.splitlines()
            if line.startswith(('error: ', 'warning: ', 'note: '))
            and not line.startswith((CONTEXT_NOTE, SETTINGS_NOTE))]
