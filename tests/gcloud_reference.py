"""Google's own gcloud as the reference, offline.

The machine image ships Google's Cloud SDK (`gcloud`, the `ai-platform` and
`ai` groups included). Its commands send their real requests to a recording
HTTP server on 127.0.0.1 when a private configuration points the APIs there
(`api_endpoint_overrides/<api>`) and turns credentials off, so a test can
compare what gcloud sends with what this project plans, field by field.

- `Recorder`: a threaded HTTP server that records every request (method,
  path, query, body) and answers with minimal JSON: the request's own body
  with a `name` (a storage upload: the object, with its size as gcloud
  checks it). A test may give its own answers per path.
- `write_configuration`: gcloud's configuration files, as `gcloud config set`
  writes them (`active_config`, `configurations/config_<name>`).
- `Gcloud`: `gcloud` in a private configuration dir, credentials off, every
  given API on the recorder, no prompts, update checks or usage reports.
- `GCLOUD`: gcloud's path, None where it is not installed; `need_gcloud` is
  the mark that skips a test then, with one line.
"""
import configparser
import dataclasses
import http.server
import json
import os
import re
import shutil
import subprocess
import threading
import urllib.parse

import pytest

import processes

GCLOUD = shutil.which('gcloud')
need_gcloud = pytest.mark.skipif(GCLOUD is None, reason='Google\'s gcloud is not installed')
# Quiet and offline: nothing gcloud does besides the command reaches a network.
QUIET = {
    'auth/disable_credentials': 'true',
    'core/disable_usage_reporting': 'true',
    'core/check_gce_metadata': 'false',
    'component_manager/disable_update_check': 'true',
    'survey/disable_prompts': 'true',
    'core/disable_prompts': 'true',
}


# The caller's gcloud variables that say how gcloud runs, not what it sends.
KEPT = ('CLOUDSDK_PYTHON', 'CLOUDSDK_PYTHON_ARGS', 'CLOUDSDK_PYTHON_SITEPACKAGES',
        'CLOUDSDK_ROOT_DIR', 'CLOUDSDK_CORE_CUSTOM_CA_CERTS_FILE')


@dataclasses.dataclass(frozen=True)
class Request:
    """One request as the recorder received it (`body`: parsed JSON, or None)."""
    method: str
    path: str
    query: dict
    body: object
    raw: bytes


class Recorder:
    """An HTTP server on 127.0.0.1 that records requests; a context manager.

    Args:
      answers: `{(method, path prefix): (status, json)}` answers instead of
        the default.
    """

    def __init__(self, answers=None):
        self.requests = []
        self.answers = dict(answers or {})
        recorder = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self):
                length = int(self.headers.get('Content-Length') or 0)
                raw = self.rfile.read(length) if length else b''
                parsed = urllib.parse.urlsplit(self.path)
                request = Request(self.command, parsed.path, dict(
                    urllib.parse.parse_qsl(parsed.query)), _json_or_none(raw), raw)
                recorder.requests.append(request)
                status, answer = recorder.answer(request)
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header('Content-Type', 'application/json')
                self.send_header('Content-Length', str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _answer

            def log_message(self, *args):  # pylint: disable=arguments-differ
                del args

        self._server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Handler)
        self.url = 'http://127.0.0.1:%d/' % self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._server.shutdown()
        self._server.server_close()

    def answer(self, request):
        """`(status, json)` for `request`: a given answer, else the default."""
        for (method, prefix), given in self.answers.items():
            if request.method == method and request.path.startswith(prefix):
                return given
        if request.path.startswith('/upload/storage/'):
            return 200, _uploaded(request)
        body = request.body if isinstance(request.body, dict) else {}
        return 200, dict(body, name=request.path.strip('/').split('/', 1)[-1] + '/1',
                         state=body.get('state', 'QUEUED'))

    def of(self, method, path_part):
        """The recorded requests of `method` whose path holds `path_part`."""
        return [r for r in self.requests if r.method == method and path_part in r.path]


def _json_or_none(raw):
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return None


def _uploaded(request):
    """The object a one-request (multipart) upload creates, with the size gcloud
    checks (from the JSON metadata part, the first one)."""
    metadata = json.loads(re.search(rb'\{.*?\}', request.raw).group(0)) if request.raw else {}
    bucket = request.path.split('/b/', 1)[1].split('/', 1)[0]
    return dict(metadata, bucket=bucket, name=request.query.get('name', ''))


def write_configuration(config_dir, properties, name='default', active=True):
    """Writes gcloud configuration `name` in `config_dir` as `gcloud config set` does.

    Args:
      properties: `{'section/name': value}`, e.g. `{'compute/region': 'europe-west4'}`.
      active: also name it in `active_config`.
    """
    parser = configparser.ConfigParser()
    for key, value in properties.items():
        section, option = key.split('/', 1)
        if not parser.has_section(section):
            parser.add_section(section)
        parser.set(section, option, value)
    os.makedirs(os.path.join(config_dir, 'configurations'), exist_ok=True)
    with open(os.path.join(config_dir, 'configurations', 'config_' + name), 'w') as f:
        parser.write(f)
    if active:
        with open(os.path.join(config_dir, 'active_config'), 'w') as f:
            f.write(name)


class Gcloud:
    """`gcloud` in its own configuration dir, its APIs on `recorder`.

    Args:
      config_dir: the private configuration dir (CLOUDSDK_CONFIG).
      recorder: a started `Recorder`, or None for commands that call no API
        (`ai-platform local train|predict`).
      apis: the APIs sent to the recorder (`ml`, `storage`, `aiplatform`, ...).
      properties: more properties of the active configuration (`core/project`,
        `ml_engine/local_python` for the local commands).
    """

    def __init__(self, config_dir, recorder=None, apis=('ml', 'storage', 'aiplatform'),
                 properties=None):
        self.config_dir = str(config_dir)
        self.recorder = recorder
        settings = dict(QUIET, **{'api_endpoint_overrides/%s' % api: recorder.url
                                  for api in (apis if recorder else ())})
        settings.update(properties or {})
        write_configuration(self.config_dir, settings)

    def env(self, extra=None):
        """gcloud's environment: this dir, none of the caller's gcloud settings."""
        env = {k: v for k, v in os.environ.items()
               if not k.startswith('CLOUDSDK_') or k in KEPT}
        env.update(CLOUDSDK_CONFIG=self.config_dir, **(extra or {}))
        return env

    def run(self, args, cwd=None, env=None, timeout=300):
        """Runs `gcloud ARGS`; returns `(CompletedProcess, the requests it sent)`
        (a recorder shared by commands running at once would mix theirs: give each
        its own)."""
        requests = self.recorder.requests if self.recorder else []
        before = len(requests)
        proc = processes.run([GCLOUD] + [str(a) for a in args], timeout, cwd=cwd,
                             env=self.env(env), stdin=subprocess.DEVNULL)
        return proc, requests[before:]
