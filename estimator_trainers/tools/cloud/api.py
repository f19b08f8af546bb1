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
import json
from typing import Any, Dict, Optional

from google.auth import credentials as credentials_lib
from google.auth import exceptions as auth_exceptions
import google_auth_httplib2
from googleapiclient import errors
import httplib2

from estimator_trainers import google_api
from estimator_trainers.errors import first_line
from estimator_trainers.errors import UserInputError
from estimator_trainers.google_api import ApiError

# Vertex AI's display names are at most 128 characters.
DISPLAY_NAME_MAX = 128
# google-api-python-client's untyped surface, kept at this edge: a transport
# (httplib2-compatible), a discovery service, and an unsent request
# (`HttpRequest`: its `method`, `uri`, `body` and `execute`).
Http = Any
Service = Any
Request = Any
# A JSON object as an API answers it or takes it (a body).
Json = Dict[str, Any]


class Unreachable(ApiError):
    """No answer came back: no network, or the API's (or the token endpoint's) host
    cannot be reached. A dry run says so in one line and goes on without it."""


def anonymous_credentials() -> Any:
    """Credentials that sign nothing: a dry run's clients, whose requests are
    built and printed, never sent."""
    # google-auth's AnonymousCredentials is not annotated.
    return credentials_lib.AnonymousCredentials()  # type: ignore[no-untyped-call]


def authorized_http(credentials: Any) -> Http:
    """An httplib2 transport with `credentials` and a `google_api.TIMEOUT_SECS` socket timeout."""
    return google_auth_httplib2.AuthorizedHttp(
        credentials, http=httplib2.Http(timeout=google_api.TIMEOUT_SECS))


def build(api: str, version: str, http: Http, endpoint: Optional[str] = None) -> Service:
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


def execute(request: Request, action: str, api: google_api.Api, project: Optional[str],
            retry: bool = True) -> Json:
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
        answer: Json = request.execute(num_retries=google_api.NUM_RETRIES if retry else 0)
        return answer
    except errors.HttpError as e:
        raise api_error(e, action, api, project) from None
    except auth_exceptions.RefreshError as e:
        raise google_api.refresh_error(action, e) from None
    except auth_exceptions.TransportError as e:
        raise Unreachable(str(google_api.token_endpoint_error(action, e))) from None
    except (OSError, httplib2.HttpLib2Error) as e:
        raise Unreachable('%s: cannot reach %s (%s)'
                          % (action, google_api.host(request.uri), first_line(e))) from None


def api_error(error: errors.HttpError, action: str, api: google_api.Api,
              project: Optional[str]) -> ApiError:
    """An `HttpError` -> `ApiError` whose message says what to check."""
    found: ApiError = google_api.status_error(error.resp.status, error.reason or 'no details',
                                              action, api, project)
    return found


def equals_filter(field: str, value: str, what: str, flag: Optional[str] = None) -> str:
    """The list filter `field="value"` (AIP-160) of a user's `value`.

    The client library has no quoting of its own for filters, so a value that
    could end the quoted string or the filter (a double quote, a backslash, a
    control character) or that no display name can be is refused: a name
    like `m" OR display_name!="` would otherwise select other resources.
    Callers still keep only the results whose field equals `value` exactly.

    Raises:
      UserInputError: one line naming `what` (and `flag`) and the way out.
    """
    bad = next((c for c in value if c in '"\\' or ord(c) < 32 or ord(c) == 127), None)
    if bad is not None or not value or len(value) > DISPLAY_NAME_MAX:
        problem = ('holds %r, which a name looked up in a Vertex AI filter cannot hold'
                   % bad if bad is not None else 'expected 1 to %d characters'
                   % DISPLAY_NAME_MAX)
        raise UserInputError('%s %r: %s; name it by its resource name instead'
                             % (what, value, problem), flag=flag)
    return '%s="%s"' % (field, value)


def request_json(request: Request) -> Json:
    """An unsent googleapiclient request as `{method, uri[, body]}` (no body: a GET),
    as a dry run prints it."""
    printed: Json = {'method': request.method, 'uri': request.uri}
    if request.body:
        printed['body'] = json.loads(request.body)
    return printed
