"""Where a job runs and as whom: the project, the region and the credentials.

The one rule for every command of both fronts, gcloud's own where gcloud had
one (`gcloud_config` reads its settings as gcloud does):

- the region: `--region`; else gcloud's property variable for the command
  (`CLOUDSDK_COMPUTE_REGION` for training jobs, as `jobs submit training` read
  `compute/region`; `CLOUDSDK_AI_PLATFORM_REGION` for models, versions and
  predict, as they read `ai_platform/region`); else this project's `REGION`;
  else that property in gcloud's active configuration; else the config's
  `trainingInput.region` (gcloud let the property override it); else
  `DEFAULT_REGION`;
- the project: `--project`; else `CLOUDSDK_CORE_PROJECT`; else this
  project's `PROJECT_ID`; else `core/project` in gcloud's active
  configuration; else the project of the Application Default Credentials.

Environment before files, gcloud's variables before this project's. When no
flag gave them, one `note:` line says where the project and region came from
(`note`).
"""
import dataclasses
import enum
import os
import re
from typing import Any, Mapping, Optional, TextIO

import google.auth
from google.auth import exceptions as auth_exceptions

from estimator_trainers import google_api
from estimator_trainers.errors import first_line
from estimator_trainers.errors import UserInputError
from estimator_trainers.tools.cloud import api
from estimator_trainers.tools.cloud import endpoints
from estimator_trainers.tools.cloud import gcloud_config
from estimator_trainers.tools.cloud import jobs

DEFAULT_REGION = 'us-central1'
CLOUD_PLATFORM_SCOPE = 'https://www.googleapis.com/auth/cloud-platform'
# This project's own variables (docs/cloud.md), after gcloud's.
PROJECT_VAR = 'PROJECT_ID'
REGION_VAR = 'REGION'
FLAG = 'flag'
# What a note says of the region where nothing set one.
DEFAULT = 'default'
CONFIG_REGION = 'trainingInput.region'
CREDENTIALS = 'the Application Default Credentials'
GLOBAL = 'global'
_REGION_RE = re.compile(r'[a-z]+-[a-z]+[0-9]+')
_PROJECT_RE = re.compile(r'([a-z0-9.-]+:)?[a-z0-9][a-z0-9-]{4,29}')


class Scope(enum.Enum):
    """Which gcloud property names a command's region, as gcloud's command of
    the same words read it."""
    TRAINING = gcloud_config.COMPUTE_REGION
    SERVING = gcloud_config.AI_PLATFORM_REGION


TRAINING = Scope.TRAINING
SERVING = Scope.SERVING


@dataclasses.dataclass(frozen=True)
class Setting:
    """A project or region and where it came from.

    Attributes:
      value: the project id or region.
      source: `FLAG`, `DEFAULT`, a variable's name, a gcloud configuration
        (`gcloud_config.Configuration.describe`), `trainingInput.region` or the
        credentials.
      notes: what was passed over, for the note (`trainingInput.region
        europe-west1`, a `global` region).
    """
    value: str
    source: str
    notes: tuple[str, ...] = ()


class Settings:
    """The project and region of one command by the one rule; gcloud's active
    configuration is read once, when a flag or variable does not decide."""

    def __init__(self, environ: Mapping[str, str], scope: Scope = TRAINING) -> None:
        self.environ = environ
        self.scope = scope
        self._configuration: Optional[gcloud_config.Configuration] = None

    def configuration(self) -> gcloud_config.Configuration:
        """gcloud's active configuration (`gcloud_config.active_configuration`)."""
        if self._configuration is None:
            self._configuration = gcloud_config.active_configuration(self.environ)
        return self._configuration

    def _first(self, flag: Optional[str], prop: gcloud_config.Property, own_var: str,
               passed_over: list[str]) -> Optional[tuple[str, str]]:
        """The first `(value, source)` in the rule's order down to gcloud's
        configuration (read only when reached); a `global` serving region is
        passed over, said in `passed_over`."""
        candidates = ((flag, FLAG), (gcloud_config.from_environment(prop, self.environ),
                                     prop.env_var),
                      (self.environ.get(own_var) or None, own_var), None)
        for candidate in candidates:
            if candidate is None:  # the file, only now
                configuration = self.configuration()
                candidate = (configuration.get(prop),
                             '%s in %s' % (prop, configuration.describe()))
            value, source = candidate
            if value == GLOBAL and self.scope is SERVING and prop is self.scope.value:
                passed_over.append('%s global: Vertex AI has no global endpoint' % (
                    '--region' if source == FLAG else source))
            elif value:
                return value, source
        return None

    def region(self, flag: Optional[str] = None,
               config_region: Optional[str] = None) -> Setting:
        """The region by the rule (`config_region`: the config's trainingInput.region).

        A `global` region of the serving commands (gcloud's global endpoint)
        is passed over with a note: Vertex AI has none.

        Raises:
          UserInputError: the deciding value is not a region name (naming where
            it came from).
        """
        notes: list[str] = []
        found = self._first(flag, self.scope.value, REGION_VAR, notes)
        if found is None:
            found = (config_region, CONFIG_REGION) if config_region else (DEFAULT_REGION,
                                                                          DEFAULT)
        elif config_region and found[1] != FLAG and config_region != found[0]:
            notes.append('trainingInput.region %s comes after it, as in gcloud' % config_region)
        value, source = found
        try:
            region_name(value)
        except ValueError as e:
            raise UserInputError('region %r%s: %s' % (
                value, '' if source == FLAG else ' (%s)' % source, e),
                flag='--region' if source == FLAG else None) from None
        return Setting(value, source, tuple(notes))

    def project(self, flag: Optional[str] = None,
                adc_project: Optional[str] = None) -> Setting:
        """The project by the rule (`adc_project`: the credentials', when loaded).

        Raises:
          UserInputError: none of them names one, or it is not a project id.
        """
        found = self._first(flag, gcloud_config.PROJECT, PROJECT_VAR, [])
        if found is None and adc_project:
            found = (adc_project, CREDENTIALS)
        if found is None:
            raise UserInputError('no project: pass --project, set PROJECT_ID (or '
                                 'CLOUDSDK_CORE_PROJECT), or `gcloud config set project '
                                 'PROJECT`')
        value, source = found
        if not _PROJECT_RE.fullmatch(value):
            raise UserInputError('project %r%s: expected a Google Cloud project id like '
                                 'my-project-123' % (value, '' if source == FLAG else
                                                     ' (%s)' % source),
                                 flag='--project' if source == FLAG else None)
        return Setting(value, source)


def note(project: Optional[Setting], region: Optional[Setting]) -> Optional[str]:
    """The one line saying where the project and region came from (None: flags
    gave both, or nothing was resolved)."""
    parts = []
    for what, setting in (('project', project), ('region', region)):
        if setting is None or (setting.source == FLAG and not setting.notes):
            continue
        if setting.source == DEFAULT:
            said = '%s %s, the default' % (what, setting.value)
        elif setting.source == FLAG:
            said = '%s %s' % (what, setting.value)
        else:
            said = '%s %s from %s' % (what, setting.value, setting.source)
        parts.append(said + ''.join(' (%s)' % n for n in setting.notes))
    return 'using %s' % ' and '.join(parts) if parts else None


def region_help(scope: Scope, with_config: bool = False) -> str:
    """The rule for a --region help text."""
    return 'default: %s, else REGION, else %s in gcloud\'s active configuration%s, else %s' % (
        scope.value.env_var, scope.value, ', else trainingInput.region' if with_config else '',
        DEFAULT_REGION)


PROJECT_HELP = ('Google Cloud project (default: CLOUDSDK_CORE_PROJECT, else PROJECT_ID, else '
                'core/project in gcloud\'s active configuration, else the Application Default '
                'Credentials\' project).')


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


def project_id(flag: Optional[str] = None, environ: Optional[Mapping[str, str]] = None,
               adc_project: Optional[str] = None) -> str:
    """The project by the rule (`Settings.project`)."""
    return Settings(os.environ if environ is None else environ).project(
        flag, adc_project).value


def region_id(flag: Optional[str] = None, environ: Optional[Mapping[str, str]] = None,
              config_region: Optional[str] = None, scope: Scope = TRAINING) -> str:
    """The region by the rule (`Settings.region`)."""
    return Settings(os.environ if environ is None else environ, scope).region(
        flag, config_region).value


def region_name(text: str) -> str:
    """`text` if it names a region (`us-central1`); ValueError otherwise."""
    if not _REGION_RE.fullmatch(text):
        raise ValueError('expected a Vertex AI region like %s' % DEFAULT_REGION)
    return text


def connect(backend: Backend, job_ref: Optional[str] = None,
            project_flag: Optional[str] = None, region_flag: Optional[str] = None,
            environ: Optional[Mapping[str, str]] = None,
            err: Optional[TextIO] = None) -> tuple[Any, Any, Optional[str]]:
    """`(vertex client, credentials, job resource name or None)` for the job commands.

    A full resource name (`projects/P/locations/R/customJobs/ID`) names its own
    project and region; a numeric id or a display name is looked up in the
    project and region of the rule (training's), which `err` hears of (`note`).
    """
    credentials, adc_project = backend.credentials()
    project, region = resolve(jobs.parse_job_name(job_ref or ''), project_flag, region_flag,
                              environ, TRAINING, err, adc_project)
    vertex = backend.vertex(project, region, credentials)
    return vertex, credentials, vertex.resolve(job_ref) if job_ref else None


def connect_serving(backend: Backend, model_ref: Optional[str] = None,
                    project_flag: Optional[str] = None, region_flag: Optional[str] = None,
                    environ: Optional[Mapping[str, str]] = None,
                    err: Optional[TextIO] = None) -> tuple[Any, Any]:
    """`(endpoints client, credentials)` for the serving commands.

    A model given by its endpoint's full resource name
    (`projects/P/locations/R/endpoints/ID`) names its own project and region;
    else the rule (serving's) decides, and `err` hears where from (`note`).
    """
    credentials, adc_project = backend.credentials()
    project, region = resolve(endpoints.parse_endpoint_name(model_ref or ''), project_flag,
                              region_flag, environ, SERVING, err, adc_project)
    return backend.serving(project, region, credentials), credentials


def resolve(parsed: Optional[Mapping[str, str]], project_flag: Optional[str],
            region_flag: Optional[str], environ: Optional[Mapping[str, str]],
            scope: Scope, err: Optional[TextIO] = None,
            adc_project: Optional[str] = None) -> tuple[str, str]:
    """`(project, region)`: a parsed resource name's, else the rule's (with its
    note on `err`)."""
    if parsed:
        return parsed['project'], parsed['region']
    settings = Settings(os.environ if environ is None else environ, scope)
    project = settings.project(project_flag, adc_project)
    region = settings.region(region_flag)
    said = note(project, region)
    if said and err is not None:
        err.write('note: %s\n' % said)
    return project.value, region.value

