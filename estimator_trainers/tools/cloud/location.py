"""Where a job runs and as whom: the project, the region and the credentials.

The one rule for every command of both fronts: a flag wins, then the
environment (`PROJECT_ID`, `CLOUDSDK_CORE_PROJECT`; `CLOUDSDK_AI_PLATFORM_REGION`,
`REGION`: gcloud's properties are defaults of its flags, so they beat a
config file), then the config (`trainingInput.region`), then Application
Default Credentials (the project) or `DEFAULT_REGION`.
"""
import os
import re

import google.auth
from google.auth import exceptions as auth_exceptions

from estimator_trainers import google_api
from estimator_trainers.errors import first_line
from estimator_trainers.errors import UserInputError
from estimator_trainers.tools.cloud import api
from estimator_trainers.tools.cloud import endpoints
from estimator_trainers.tools.cloud import jobs

DEFAULT_REGION = 'us-central1'
CLOUD_PLATFORM_SCOPE = 'https://www.googleapis.com/auth/cloud-platform'
PROJECT_VARS = ('PROJECT_ID', 'CLOUDSDK_CORE_PROJECT')
REGION_VARS = ('CLOUDSDK_AI_PLATFORM_REGION', 'REGION')
_REGION_RE = re.compile(r'[a-z]+-[a-z]+[0-9]+')
_PROJECT_RE = re.compile(r'([a-z0-9.-]+:)?[a-z0-9][a-z0-9-]{4,29}')


class Backend:
    """Where credentials and API clients come from; tests pass their own."""

    def credentials(self):
        """Application Default Credentials and their project (maybe None)."""
        try:
            return google.auth.default(scopes=[CLOUD_PLATFORM_SCOPE])
        except auth_exceptions.DefaultCredentialsError as e:
            raise UserInputError(
                'no usable Application Default Credentials (%s): run `gcloud auth '
                'application-default login`, or set GOOGLE_APPLICATION_CREDENTIALS '
                'to a service account key file' % _credentials_reason(e)) from None
        except Exception as e:  # pylint: disable=broad-except
            # A malformed key fails in whichever parser reads it (ValueError,
            # PyAsn1Error, ...), whose message may quote the key: name the
            # file and the error type only.
            raise UserInputError(
                '%s: not a usable service account key (%s while reading it); '
                'download a new key or unset GOOGLE_APPLICATION_CREDENTIALS to use '
                '`gcloud auth application-default login`'
                % (_credentials_source(), type(e).__name__)) from None

    def transport(self, credentials):
        """The transport every API call goes through (tests record it)."""
        return api.authorized_http(credentials)

    def service(self, api_name, version, credentials):
        """A discovery service (`api.build`) on `transport`."""
        return api.build(api_name, version, self.transport(credentials))

    def vertex(self, project, region, credentials):
        return jobs.VertexJobs(project, region, http=self.transport(credentials))

    def serving(self, project, region, credentials):
        """The Vertex AI endpoints and models client (`endpoints.VertexServing`)."""
        return endpoints.VertexServing(project, region, http=self.transport(credentials))

    def storage(self, project, credentials):
        """The google-cloud-storage client of every storage call (`google_api.storage_client`)."""
        return google_api.storage_client(project, credentials)


def _credentials_source():
    path = os.environ.get('GOOGLE_APPLICATION_CREDENTIALS')
    return ('GOOGLE_APPLICATION_CREDENTIALS=%s' % path if path else
            'the Application Default Credentials file')


def _credentials_reason(error):
    """A DefaultCredentialsError's own sentence, without the wrapped cause
    (whose text may quote the key)."""
    text = error.args[0] if error.args and isinstance(error.args[0], str) else ''
    return '%s: %s' % (_credentials_source(), first_line(text)) if text else \
        _credentials_source()


def project_id(flag=None, environ=None, adc_project=None):
    """The project: `flag`, else `PROJECT_VARS`, else the credentials' project.

    Raises:
      UserInputError: none of them names one, or it is not a project id.
    """
    environ = os.environ if environ is None else environ
    project = flag or next((environ[v] for v in PROJECT_VARS if environ.get(v)), None) \
        or adc_project
    if not project:
        raise UserInputError('no project: set PROJECT_ID or pass --project')
    if not _PROJECT_RE.fullmatch(project):
        raise UserInputError('project %r: expected a Google Cloud project id like '
                             'my-project-123' % project)
    return project


def region_id(flag=None, environ=None, config_region=None):
    """The region: `flag`, else `REGION_VARS`, else the config's, else `DEFAULT_REGION`.

    Raises:
      UserInputError: it is not a region name.
    """
    environ = os.environ if environ is None else environ
    region = flag or next((environ[v] for v in REGION_VARS if environ.get(v)), None) \
        or config_region or DEFAULT_REGION
    try:
        return region_name(region)
    except ValueError as e:
        raise UserInputError('region %r: %s' % (region, e), flag='--region') from None


def region_name(text):
    """`text` if it names a region (`us-central1`); ValueError otherwise."""
    if not _REGION_RE.fullmatch(text):
        raise ValueError('expected a Vertex AI region like %s' % DEFAULT_REGION)
    return text


def connect(backend, job_ref=None, project_flag=None, region_flag=None, environ=None):
    """`(vertex client, credentials, job resource name or None)` for the job commands.

    A full resource name (`projects/P/locations/R/customJobs/ID`) names its own
    project and region; a numeric id or a display name is looked up in the
    project and region of the flags and the environment.
    """
    credentials, adc_project = backend.credentials()
    project, region = _named_or_resolved(jobs.parse_job_name(job_ref or ''), project_flag,
                                         region_flag, environ, adc_project)
    vertex = backend.vertex(project, region, credentials)
    return vertex, credentials, vertex.resolve(job_ref) if job_ref else None


def connect_serving(backend, model_ref=None, project_flag=None, region_flag=None,
                    environ=None):
    """`(endpoints client, credentials)` for the serving commands.

    A model given by its endpoint's full resource name
    (`projects/P/locations/R/endpoints/ID`) names its own project and region.
    """
    credentials, adc_project = backend.credentials()
    project, region = _named_or_resolved(endpoints.parse_endpoint_name(model_ref or ''),
                                         project_flag, region_flag, environ, adc_project)
    return backend.serving(project, region, credentials), credentials


def _named_or_resolved(parsed, project_flag, region_flag, environ, adc_project):
    """The project and region a parsed resource name gives, else the flags' and
    the environment's (`project_id`, `region_id`)."""
    if parsed:
        return parsed['project'], parsed['region']
    return (project_id(project_flag, environ, adc_project),
            region_id(region_flag, environ))
