"""Google API calls of the cloud tools, with bounded waits and one-line errors.

Vertex AI, Cloud Logging, Cloud Build and Artifact Registry are
google-api-python-client services built from the discovery documents bundled
with the library, so nothing is fetched to build them (`build`, `execute`).
Cloud Storage is `google_api.storage_client`, the one storage client of the
runtime and the tools. Either way a request waits at most
`google_api.TIMEOUT_SECS` per try and is retried at most
`google_api.NUM_RETRIES` times (only when safe), and an HTTP error becomes one
line naming the call, the resource and what to check (`google_api.status_error`).
"""
from google.auth import exceptions as auth_exceptions
import google_auth_httplib2
from googleapiclient import errors
import httplib2

from estimator_trainers import google_api
from estimator_trainers.errors import first_line
from estimator_trainers.google_api import ApiError


def authorized_http(credentials):
    """An httplib2 transport with `credentials` and a `google_api.TIMEOUT_SECS` socket timeout."""
    return google_auth_httplib2.AuthorizedHttp(
        credentials, http=httplib2.Http(timeout=google_api.TIMEOUT_SECS))


def build(api, version, http, endpoint=None):
    """The `api` `version` service from the bundled discovery document.

    Args:
      http: the transport (`authorized_http`, or a test's `HttpMockSequence`).
      endpoint: a root URL other than the document's (regional endpoints,
        emulators), with its scheme.
    """
    # Imported on first use: it brings google-api-core, whose import warns
    # (FutureWarning) before a command can quiet it (`logs.quiet_console`).
    from googleapiclient import discovery  # pylint: disable=g-import-not-at-top
    options = {'api_endpoint': endpoint} if endpoint else None
    return discovery.build(api, version, http=http, client_options=options,
                           static_discovery=True, cache_discovery=False)


def execute(request, action, api, project, retry=True):
    """Runs `request`; any failure becomes an `ApiError` naming `action`.

    Args:
      request: an unsent googleapiclient `HttpRequest`.
      action: the call and its resource, e.g. `customJobs.create in projects/p/...`.
      api: the API name, for what to check on a 403.
      project: the project, for messages.
      retry: retry transient failures (5xx, 429, connection errors); off for
        calls that must not run twice (job creation).
    """
    try:
        return request.execute(num_retries=google_api.NUM_RETRIES if retry else 0)
    except errors.HttpError as e:
        raise api_error(e, action, api, project) from None
    except auth_exceptions.RefreshError as e:
        raise google_api.refresh_error(action, e) from None
    except auth_exceptions.TransportError as e:
        raise google_api.token_endpoint_error(action, e) from None
    except (OSError, httplib2.HttpLib2Error) as e:
        raise ApiError('%s: cannot reach %s (%s)'
                       % (action, google_api.host(request.uri), first_line(e))) from None


def api_error(error, action, api, project):
    """An `HttpError` -> `ApiError` whose message says what to check."""
    return google_api.status_error(error.resp.status, error.reason or 'no details', action,
                                   api, project)
