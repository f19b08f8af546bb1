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
from typing import Dict, Final, Mapping, Optional, TextIO, Tuple, TypedDict

from estimator_trainers.errors import UserInputError
from estimator_trainers.tools.cloud import gcloud_config

# The environment a command reads its settings from.
Environ = Mapping[str, str]
DEFAULT_REGION = 'us-central1'
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


TRAINING: Final = Scope.TRAINING
SERVING: Final = Scope.SERVING


class ResourceName(TypedDict):
    """The parts of a full resource name (`parse_name`)."""
    project: str
    region: str
    collection: str
    id: str


_NAME_RES: Dict[Scope, 're.Pattern[str]'] = {
    scope: re.compile(r'projects/(?P<project>[^/]+)/locations/(?P<region>[^/]+)/'
                      r'(?P<collection>%s)/(?P<id>[^/]+)' % collections)
    for scope, collections in ((TRAINING, 'customJobs|hyperparameterTuningJobs'),
                               (SERVING, 'endpoints'))}


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


def parse_name(name: Optional[str], scope: Scope) -> Optional[ResourceName]:
    """The parts of a full resource name of `scope`'s resources (a training job:
    `projects/P/locations/R/customJobs/ID` or `.../hyperparameterTuningJobs/ID`;
    a model's endpoint: `projects/P/locations/R/endpoints/ID`), or None."""
    match = _NAME_RES[scope].fullmatch(name or '')
    if not match:
        return None
    return ResourceName(project=match['project'], region=match['region'],
                        collection=match['collection'], id=match['id'])


def resolve(name: Optional[str], scope: Scope, project_flag: Optional[str],
            region_flag: Optional[str], environ: Optional[Environ],
            err: Optional[TextIO] = None, adc_project: Optional[str] = None
            ) -> Tuple[str, str]:
    """`(project, region)` of a command: those a full resource name of `scope`
    names (`parse_name`), else the rule's (with its note on `err`).

    Raises:
      UserInputError: the rule finds no project, or a value that is none.
    """
    parsed = parse_name(name, scope)
    if parsed:
        return parsed['project'], parsed['region']
    settings = Settings(os.environ if environ is None else environ, scope)
    project = settings.project(project_flag, adc_project)
    region = settings.region(region_flag)
    said = note(project, region)
    if said and err is not None:
        err.write('note: %s\n' % said)
    return project.value, region.value
