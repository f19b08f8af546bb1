"""Where credentials and the API clients come from: the one client factory.

Every command asks a `Backend` for its credentials and clients (tests pass
their own, recording or refusing); `connect` and `connect_serving` give the
job and serving commands their client in the project and region of
`location`'s rule (a full resource name names its own). Below the fronts and
the pipelines, above the API clients (`jobs`, `endpoints`, `api`) and
`location`'s settings.
"""
import os
from typing import Any, Callable, Optional, TextIO, Tuple

import google.auth
from google.auth import exceptions as auth_exceptions

from estimator_trainers import google_api
from estimator_trainers.errors import UserInputError
from estimator_trainers.tools.cloud import api
from estimator_trainers.tools.cloud import endpoints
from estimator_trainers.tools.cloud import jobs
from estimator_trainers.tools.cloud import location

CLOUD_PLATFORM_SCOPE = 'https://www.googleapis.com/auth/cloud-platform'
# Why there are no credentials; also why a dry run made no lookups (the command
# itself says what to do).
NO_CREDENTIALS = 'no usable Application Default Credentials'
# google-auth's credentials (untyped: any of its credential classes).
Credentials = Any


class Backend:
    """Where credentials and API clients come from; tests pass their own."""

    def credentials(self) -> Tuple[Credentials, Optional[str]]:
        """Application Default Credentials and their project (maybe None).

        Raises:
          UserInputError: none are set up, or their key file is no key (one
            line naming the file, never the key's text).
        """
        try:
            # google-auth's `default` is not annotated: it returns (credentials, project).
            default: Callable[..., Tuple[Credentials, Optional[str]]] = \
                google.auth.default
            return default(scopes=[CLOUD_PLATFORM_SCOPE])
        except auth_exceptions.DefaultCredentialsError as e:
            raise UserInputError(
                '%s (%s): run `gcloud auth application-default login`, or set '
                'GOOGLE_APPLICATION_CREDENTIALS to a service account key file'
                % (NO_CREDENTIALS, _credentials_reason(e))) from None
        except Exception as e:  # pylint: disable=broad-except
            # A malformed key fails in whichever parser reads it (ValueError,
            # PyAsn1Error, ...), whose message may quote the key: name the
            # file and the error type only.
            raise UserInputError(
                '%s: not a usable service account key (%s while reading it); '
                'download a new key or unset GOOGLE_APPLICATION_CREDENTIALS to use '
                '`gcloud auth application-default login`'
                % (_credentials_source(), type(e).__name__)) from None

    def transport(self, credentials: Credentials) -> api.Http:
        """The transport every API call goes through (tests record it)."""
        return api.authorized_http(credentials)

    def service(self, api_name: str, version: str, credentials: Credentials) -> api.Service:
        """A discovery service (`api.build`) on `transport`."""
        return api.build(api_name, version, self.transport(credentials))

    def vertex(self, project: str, region: str, credentials: Credentials) -> jobs.VertexJobs:
        """The Vertex AI training jobs client (`jobs.VertexJobs`)."""
        return jobs.VertexJobs(project, region, http=self.transport(credentials))

    def serving(self, project: str, region: str,
                credentials: Credentials) -> endpoints.VertexServing:
        """The Vertex AI endpoints and models client (`endpoints.VertexServing`)."""
        return endpoints.VertexServing(project, region, http=self.transport(credentials))

    def storage(self, project: str, credentials: Credentials) -> Any:
        """The google-cloud-storage client of every storage call (`google_api.storage_client`)."""
        return google_api.storage_client(project, credentials)


def _credentials_source() -> str:
    path = os.environ.get('GOOGLE_APPLICATION_CREDENTIALS')
    return ('GOOGLE_APPLICATION_CREDENTIALS=%s' % path if path else
            'the Application Default Credentials file')


def _credentials_reason(error: Exception) -> str:
    """A DefaultCredentialsError's own sentence, without the wrapped cause
    (whose text may quote the key)."""
    text = error.args[0].strip() if error.args and isinstance(error.args[0], str) else ''
    return '%s: %s' % (_credentials_source(), text.splitlines()[0]) if text else \
        _credentials_source()


def connect(backend: Backend, job_ref: Optional[str] = None,
            project_flag: Optional[str] = None, region_flag: Optional[str] = None,
            environ: Optional[location.Environ] = None, err: Optional[TextIO] = None
            ) -> Tuple[jobs.VertexJobs, Credentials, Optional[str]]:
    """`(vertex client, credentials, job resource name or None)` for the job commands.

    A full resource name (`projects/P/locations/R/customJobs/ID`) names its own
    project and region; a numeric id or a display name is looked up in the
    project and region of the rule (training's), which `err` hears of (`note`).
    """
    credentials, adc_project = backend.credentials()
    project, region = location.resolve(job_ref, location.TRAINING, project_flag, region_flag,
                                       environ, err, adc_project)
    vertex = backend.vertex(project, region, credentials)
    return vertex, credentials, vertex.resolve(job_ref) if job_ref else None


def connect_serving(backend: Backend, model_ref: Optional[str] = None,
                    project_flag: Optional[str] = None, region_flag: Optional[str] = None,
                    environ: Optional[location.Environ] = None, err: Optional[TextIO] = None
                    ) -> endpoints.VertexServing:
    """The endpoints client for the serving commands.

    A model given by its endpoint's full resource name
    (`projects/P/locations/R/endpoints/ID`) names its own project and region;
    else the rule (serving's) decides, and `err` hears where from (`note`).
    """
    credentials, adc_project = backend.credentials()
    project, region = location.resolve(model_ref, location.SERVING, project_flag, region_flag,
                                       environ, err, adc_project)
    return backend.serving(project, region, credentials)
