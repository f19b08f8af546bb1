"""gcloud's own settings, read as gcloud reads them (its `core/properties.py` and
`core/configurations/named_configs.py`).

A property `section/name` (`compute/region`) is, in gcloud's order:

1. its environment variable `CLOUDSDK_<SECTION>_<NAME>` (`CLOUDSDK_COMPUTE_REGION`);
2. the active configuration's file: the configuration is named by
   `CLOUDSDK_ACTIVE_CONFIG_NAME`, else by the file `<config dir>/active_config`,
   else `default` (`NONE` names none); its file is
   `<config dir>/configurations/config_<name>`, an INI file (`[compute]`,
   `region = europe-west4`). The config dir is `CLOUDSDK_CONFIG`, else
   `~/.config/gcloud` (`%APPDATA%\\gcloud` on Windows).

gcloud's `--configuration` flag and the installation's own `properties` file
are not read. The configuration's files are a user's input: read through
`user_files` (bounded, regular files, UTF-8); one that cannot be read or
parsed is one line naming it.
"""
import configparser
import dataclasses
import os
import re
from typing import Mapping, Optional

from estimator_trainers import user_files
from estimator_trainers.errors import UserInputError

CONFIG_DIR_VAR = 'CLOUDSDK_CONFIG'
ACTIVE_CONFIG_VAR = 'CLOUDSDK_ACTIVE_CONFIG_NAME'
DEFAULT_CONFIGURATION = 'default'
NO_CONFIGURATION = 'NONE'
# gcloud's `_VALID_CONFIG_NAME_REGEX`; a name it does not take it ignores.
_CONFIGURATION_NAME_RE = re.compile(r'[a-z][-a-z0-9]*')
_LIMITS = user_files.Limits(bytes=64 * 1024,
                            expected='a gcloud configuration holds a few short lines')


@dataclasses.dataclass(frozen=True)
class Property:
    """A gcloud property, `section/name`."""
    section: str
    name: str

    @property
    def env_var(self) -> str:
        """The environment variable gcloud reads it from first."""
        return 'CLOUDSDK_%s_%s' % (self.section.upper(), self.name.upper())

    def __str__(self) -> str:
        return '%s/%s' % (self.section, self.name)


PROJECT = Property('core', 'project')
# `jobs submit training` reads this one (jobs_util.SubmitTraining) ...
COMPUTE_REGION = Property('compute', 'region')
# ... the models, versions and predict commands this one (region_util.GetRegion).
AI_PLATFORM_REGION = Property('ai_platform', 'region')


@dataclasses.dataclass(frozen=True)
class Configuration:
    """A gcloud configuration: its name, its file (None: none) and its properties."""
    name: str
    path: Optional[str]
    values: Mapping[str, Mapping[str, str]]

    def get(self, prop: Property) -> Optional[str]:
        """The property's value in the file, None when unset or empty."""
        return self.values.get(prop.section, {}).get(prop.name) or None

    def describe(self) -> str:
        """How notes name it: `gcloud configuration "default" (PATH)`."""
        return 'gcloud configuration "%s" (%s)' % (self.name, self.path)


def config_dir(environ: Mapping[str, str]) -> Optional[str]:
    """gcloud's config dir in `environ`; None when there is no home to find it in."""
    given = environ.get(CONFIG_DIR_VAR)
    if given:
        return given
    if os.name == 'nt':
        appdata = environ.get('APPDATA')
        return os.path.join(appdata, 'gcloud') if appdata else None
    home = environ.get('HOME')
    return os.path.join(home, '.config', 'gcloud') if home else None


def from_environment(prop: Property, environ: Mapping[str, str]) -> Optional[str]:
    """The property's environment variable, None when unset or empty."""
    return environ.get(prop.env_var) or None


def active_configuration(environ: Mapping[str, str]) -> Configuration:
    """The active configuration, read as gcloud reads it (none: no values).

    Raises:
      UserInputError: its file (or `active_config`) cannot be read, or is not
        an INI file of properties.
    """
    directory = config_dir(environ)
    name = environ.get(ACTIVE_CONFIG_VAR) or _named_in_file(directory) \
        or DEFAULT_CONFIGURATION
    if directory is None or name == NO_CONFIGURATION:
        return Configuration(name, None, {})
    path = os.path.join(directory, 'configurations', 'config_' + name)
    text = user_files.read_text(path, _what(path), _LIMITS, optional=True)
    return Configuration(name, path, {} if text is None else parse(text, path))


def parse(text: str, path: str) -> dict[str, dict[str, str]]:
    """`{section: {name: value}}` of a configuration file, as gcloud's
    `ConfigParser` reads it (without `%` interpolation, which gcloud never writes).

    Raises:
      UserInputError: not an INI file (one line naming `path` and the line).
    """
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(text, source=path)
    except configparser.Error as e:
        line = getattr(e, 'lineno', None) or next(
            (number for number, _ in getattr(e, 'errors', ())), None)
        raise UserInputError('%s: not a configuration of properties (%s); `gcloud config '
                             'list` shows what gcloud makes of it' % (
                                 user_files.where(_what(path), line), _problem(e)),
                             path=path) from None
    return {section: dict(parser.items(section)) for section in parser.sections()}


def _what(path: str) -> str:
    return 'gcloud configuration %s' % path


def _problem(error: configparser.Error) -> str:
    if isinstance(error, configparser.MissingSectionHeaderError):
        return 'a line before the first [section]'
    if isinstance(error, configparser.DuplicateSectionError):
        return 'section [%s] given twice' % error.section
    if isinstance(error, configparser.DuplicateOptionError):
        return '%s given twice in [%s]' % (error.option, error.section)
    return 'a line that is neither [section] nor name = value'


def _named_in_file(directory: Optional[str]) -> Optional[str]:
    """The configuration `<directory>/active_config` names, None when there is
    none or gcloud would not take it."""
    if directory is None:
        return None
    path = os.path.join(directory, 'active_config')
    text = user_files.read_text(path, 'gcloud\'s active configuration %s' % path, _LIMITS,
                                optional=True)
    name = (text or '').strip()
    if name == NO_CONFIGURATION or _CONFIGURATION_NAME_RE.fullmatch(name):
        return name
    return None
