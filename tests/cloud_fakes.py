"""Offline stand-ins for Google Cloud in the cloud tests.

- `RecordingHttp`: googleapiclient's `HttpMockSequence` that also records
  every request (method, uri, parsed body, headers), so tests drive the real
  `aiplatform v1` service objects and assert what was sent.
- `storage_emulator`: an in-process gcp-storage-emulator on a loopback port
  it binds itself, with `STORAGE_EMULATOR_HOST` pointing at it.
"""
import collections
import contextlib
import json
import os
from unittest import mock

from googleapiclient import http as googleapiclient_http

Request = collections.namedtuple('Request', 'method uri body headers')

# The environment of a dry run, which must need no credentials and touch no
# network: the key file does not exist and every proxy points at a closed port.
OFFLINE_ENV = {
    'PROJECT_ID': 'my-project', 'BUCKET_NAME': 'gs://my-bucket', 'REGION': 'us-central1',
    'GOOGLE_APPLICATION_CREDENTIALS': '/nonexistent/key.json',
    'HTTP_PROXY': 'http://127.0.0.1:9', 'HTTPS_PROXY': 'http://127.0.0.1:9', 'NO_PROXY': '',
    'STORAGE_EMULATOR_HOST': '',
}


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


@contextlib.contextmanager
def storage_emulator(bucket):
    """Runs a GCS emulator holding `bucket`; yields a storage client for it."""
    from gcp_storage_emulator.server import create_server  # pylint: disable=g-import-not-at-top
    from google.cloud import storage  # pylint: disable=g-import-not-at-top
    server = create_server('127.0.0.1', 0, in_memory=True, default_bucket=bucket)
    server.start()
    # The emulator has no accessor for the port it bound.
    port = server._api._httpd.server_address[1]  # pylint: disable=protected-access
    try:
        with mock.patch.dict(os.environ,
                             {'STORAGE_EMULATOR_HOST': 'http://127.0.0.1:%d' % port}):
            yield storage.Client(project='test-project')
    finally:
        server.stop()


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
