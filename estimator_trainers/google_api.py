"""Google API calls with bounded waits and one-line errors, for the runtime and the tools.

Cloud Storage is google-cloud-storage's client (`storage_client`), the one
storage client of the job-dir lease and the cloud tools (it honours
`STORAGE_EMULATOR_HOST` itself); its calls go through `storage_call`. A
request waits at most `TIMEOUT_SECS` per try and is retried at most
`NUM_RETRIES` times (only when safe), so no network, a refused connection or a
failed DNS lookup ends in one line naming the endpoint within seconds; an HTTP
error becomes one line naming the call, the resource and what to check
(`status_error`, which the tools' discovery services share: `tools/cloud/api`).
"""
import os
import re
from typing import TYPE_CHECKING, Any, Callable, Literal, Optional, TypeVar

from google.auth import exceptions as auth_exceptions

from estimator_trainers.errors import first_line
from estimator_trainers.errors import UserInputError

if TYPE_CHECKING:
    from google.auth import credentials as auth_credentials
    from google.api_core import exceptions as core_exceptions
    from google.cloud import storage

T = TypeVar('T')
# The Google APIs whose 403 answers `status_error` explains (`_ACCESS`).
Api = Literal['aiplatform', 'storage', 'logging', 'cloudbuild', 'artifactregistry',
              'cloudbilling']

TIMEOUT_SECS = 10
NUM_RETRIES = 1
# google-api-core starts an HTTP error's message with the request.
_REQUEST_PREFIX = re.compile(r'^[A-Z]+ \S+: ')
# google-cloud-storage 3.x fetches each bucket's metadata for its tracing in a
# background thread (buckets.get, retried for two minutes) unless this is set.
NO_BUCKET_METADATA_ENV = 'DISABLE_GCS_PYTHON_CLIENT_OTEL_BUCKET_METADATA'

# api -> (what to enable, the role the credentials need), for 403 answers.
_ACCESS: dict[Api, tuple[str, str]] = {
    'aiplatform': ('the Vertex AI API (aiplatform.googleapis.com)', 'roles/aiplatform.user'),
    'storage': ('the Cloud Storage API (storage.googleapis.com)',
                'roles/storage.objectAdmin on the bucket'),
    'logging': ('the Cloud Logging API (logging.googleapis.com)', 'roles/logging.viewer'),
    'cloudbuild': ('the Cloud Build API (cloudbuild.googleapis.com)',
                   'roles/cloudbuild.builds.editor'),
    'artifactregistry': ('the Artifact Registry API (artifactregistry.googleapis.com)',
                         'roles/artifactregistry.admin'),
    'cloudbilling': ('the Cloud Billing API (cloudbilling.googleapis.com)',
                     'no role (the price catalog is public: prices refresh --api-key '
                     'works too)'),
}


class ApiError(UserInputError):
    """A Google API call failed; the message says which call and what to do.

    `status` is the HTTP status, or None when no answer came back.
    """

    def __init__(self, message: str, status: Optional[int] = None) -> None:
        super().__init__(message)
        self.status = status


def storage_client(project: Optional[str],
                   credentials: Optional['auth_credentials.Credentials'],
                   **options: Any) -> 'storage.Client':
    """The google-cloud-storage client every storage call (the lease's, the tools') goes through.

    It talks to `STORAGE_EMULATOR_HOST` when that is set (no credentials
    then). Its background bucket-metadata fetches are switched off
    (`NO_BUCKET_METADATA_ENV`): they trace nothing here and would make
    requests no check asked for.

    Args:
      options: more `storage.Client` arguments (`client_options`, ...).
    """
    os.environ.setdefault(NO_BUCKET_METADATA_ENV, 'true')
    # Imported on first use, here and in `storage_call`: google-cloud-storage takes
    # about 0.4 s to import, which every `--help` of the cloud tools would pay, and
    # google-api-core warns (FutureWarning) before a command can quiet it.
    from google.cloud import storage  # pylint: disable=g-import-not-at-top
    return storage.Client(project=project, credentials=credentials, **options)


def storage_call(call: Callable[[], T], action: str, project: Optional[str],
                 endpoint: str, retry: bool = True) -> T:
    """Runs `call()`, google-cloud-storage requests made with `retry=None` and
    `timeout=TIMEOUT_SECS`; any failure becomes an `ApiError` naming `action`.

    Args:
      call: a function making the requests and returning the result.
      action: the call and its resource, e.g. `checking --data-dir gs://b/d`.
      project: the project, for messages.
      endpoint: the client's endpoint (`client.api_endpoint`), for messages.
      retry: retry transient failures (5xx, 429, connection errors) up to
        `NUM_RETRIES` times; only for calls that are safe to repeat.
    """
    # On first use, as in `storage_client`: google-cloud-storage brings these.
    from google.api_core import exceptions as core_exceptions  # pylint: disable=g-import-not-at-top
    import requests  # pylint: disable=g-import-not-at-top
    retries_left = NUM_RETRIES if retry else 0
    while True:
        try:
            return call()
        except core_exceptions.GoogleAPICallError as e:
            if retries_left and (e.code == 429 or (e.code or 0) >= 500):
                retries_left -= 1
                continue
            raise status_error(e.code or 0, _storage_reason(e), action, 'storage',
                               project) from None
        except auth_exceptions.RefreshError as e:
            raise refresh_error(action, e) from None
        except auth_exceptions.TransportError as e:
            raise token_endpoint_error(action, e) from None
        except (requests.exceptions.RequestException, OSError) as e:
            if retries_left:
                retries_left -= 1
                continue
            raise ApiError('%s: cannot reach %s (%s)'
                           % (action, host(endpoint), first_line(e))) from None


def _storage_reason(error: 'core_exceptions.GoogleAPICallError') -> str:
    """The server's message of a google-cloud-storage error, without the
    `METHOD URL: ` google-api-core puts before it."""
    return first_line(_REQUEST_PREFIX.sub('', error.message or '')) or 'no details'


def status_error(status: int, reason: str, action: str, api: Api,
                 project: Optional[str]) -> ApiError:
    """An `ApiError` for HTTP `status` of `action` that says what to check."""
    if status == 401:
        message = ('%s: the credentials were rejected (%s); run `gcloud auth '
                   'application-default login`' % (action, reason))
    elif status == 403:
        service, role = _ACCESS[api]
        message = ('%s: permission denied (%s); check that %s is enabled in project %s '
                   'and that your Application Default Credentials hold %s'
                   % (action, reason, service, project, role))
    elif status == 404:
        message = '%s: not found (%s)' % (action, reason)
    elif status == 409:
        message = '%s: conflict with the resource\'s current state (%s)' % (action, reason)
    elif status == 400:
        message = '%s: the request was rejected (%s)' % (action, reason)
    elif status == 429:
        message = '%s: quota exceeded (%s)' % (action, reason)
    else:
        message = '%s: HTTP %d (%s)' % (action, status, reason)
    return ApiError(message, status)


def refresh_error(action: str, error: auth_exceptions.RefreshError) -> ApiError:
    """The `ApiError` for credentials that could not be refreshed."""
    return ApiError('%s: the Application Default Credentials could not be refreshed '
                    '(%s); run `gcloud auth application-default login` or point '
                    'GOOGLE_APPLICATION_CREDENTIALS at a valid key file'
                    % (action, _refresh_reason(error)))


def token_endpoint_error(action: str, error: auth_exceptions.TransportError) -> ApiError:
    """The `ApiError` for a token endpoint that did not answer."""
    return ApiError('%s: cannot reach the Google token endpoint to refresh the '
                    'Application Default Credentials (%s)' % (action, first_line(error)))


def host(uri: str) -> str:
    """`https://host` of a URL, for messages."""
    scheme, _, rest = uri.partition('://')
    return '%s://%s' % (scheme, rest.split('/', 1)[0])


def _refresh_reason(error: auth_exceptions.RefreshError) -> str:
    """The refresh error's text; google-auth puts the server's answer in args[0]."""
    return first_line(error.args[0]) if error.args and isinstance(error.args[0], str) \
        else type(error).__name__
