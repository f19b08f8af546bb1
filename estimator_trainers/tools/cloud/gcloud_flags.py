"""`gcloud ai-platform jobs submit training`, translated to a Vertex AI job plan, as data.

`FLAGS` is the translation table: every flag of the command (and of the
`--config` Job resource it overrides), with its type, the `trainingInput`
field it sets, what it becomes on Vertex AI, and how: carried over
(`FIELD`), mapped to what runs with one warning line (`MAPPED`), refused in
one line (`REFUSED`), or a client behaviour with nothing in the request
(`CLIENT`). The command line (`ai_platform` builds its parser from it), the
docs table (docs/migrating-from-ai-platform.md, `markdown_table`) and the
tests all read this table.

`build_plan` reads the `--config` Job resource, lets each given flag replace
its field (as gcloud did: a flag wins over the file, field by field; the
rest of the file stays), validates the result with the same checks as every
other config (`configs.parse_config`) and returns the `plan.JobPlan`: the
validated pools plus what they run (the user's package and module, or
their containers).
"""
import dataclasses
import re
from typing import Any, Callable, Dict, Iterator, List, Literal, Mapping, NoReturn, Optional
from typing import Sequence, Set, Tuple

from estimator_trainers import registry
from estimator_trainers.errors import UserInputError
from estimator_trainers.tools.cloud import configs
from estimator_trainers.tools.cloud import gcs_paths
from estimator_trainers.tools.cloud import location
from estimator_trainers.tools.cloud import machines
from estimator_trainers.tools.cloud import plan as plan_lib
from estimator_trainers.tools.cloud import roles
from estimator_trainers.tools.cloud.configs import Document, TrainingConfig
from estimator_trainers.tools.cloud.roles import CHIEF, MASTER, PS, VERTEX_PRIMARY, WORKER
from estimator_trainers.tools.cloud.roles import Primary, RoleName

# How a flag reaches Vertex AI (the table's `How` column).
Kind = Literal['carried over', 'mapped', 'refused', 'client']
FIELD: Kind = 'carried over'
MAPPED: Kind = 'mapped'
REFUSED: Kind = 'refused'
CLIENT: Kind = 'client'
# {flag name: its parser's value} (`Flag.parse`: text, a number, a list, a mapping).
Values = Mapping[str, Any]

# What the project's image runs (Dockerfile): the answer to --runtime-version
# and --python-version.
IMAGE_TENSORFLOW = '2.15.1'
IMAGE_PYTHON = '3.11'
_TIERS = ('BASIC', 'BASIC_GPU', 'BASIC_TPU', 'STANDARD_1', 'PREMIUM_1', 'CUSTOM')
_RUNTIME_RE = re.compile(r'(\d+)\.(\d+)')
_KMS_RE = re.compile(r'projects/[^/]+/locations/(?P<location>[^/]+)/keyRings/[^/]+/'
                     r'cryptoKeys/[^/]+')


def scale_tier(text: str) -> str:
    """`basic-gpu`, `BASIC_GPU`, `Basic_Gpu` -> `BASIC_GPU`."""
    tier = text.strip().upper().replace('-', '_')
    if tier not in _TIERS:
        raise ValueError('expected one of %s, got %r'
                         % (', '.join(t.lower().replace('_', '-') for t in _TIERS), text))
    return tier


def accelerator(text: str) -> Dict[str, Any]:
    """`count=2,type=nvidia-tesla-t4` -> `{'count': 2, 'type': 'NVIDIA_TESLA_T4'}`."""
    fields: Dict[str, str] = {}
    for part in text.split(','):
        key, sep, value = part.partition('=')
        if not sep or key.strip() not in ('count', 'type') or key.strip() in fields:
            raise ValueError('expected count=N,type=TYPE, got %r' % text)
        fields[key.strip()] = value.strip()
    if 'type' not in fields:
        raise ValueError('expected count=N,type=TYPE (type is required), got %r' % text)
    count = fields.get('count', '1')
    if not count.isdigit() or int(count) < 1:
        raise ValueError('count: expected an integer >= 1, got %r' % count)
    gpu = fields['type'].upper().replace('-', '_')
    if gpu not in machines.GPU_TYPES:
        raise ValueError('unknown GPU type %r (expected one of %s, as nvidia-tesla-t4 '
                         'or NVIDIA_TESLA_T4)' % (gpu, ', '.join(machines.GPU_TYPES)))
    return {'count': int(count), 'type': gpu}


def machine_type(text: str) -> str:
    """A machine type Vertex AI (or AI Platform's names) knows."""
    try:
        machines.translate_machine(text)
    except machines.MachineError as e:
        raise ValueError(str(e)) from None
    return text


def labels(text: str) -> Dict[str, str]:
    """`k=v,k2=v2` -> dict (the label rules are `configs`'s, checked with the config)."""
    result: Dict[str, str] = {}
    for part in text.split(','):
        key, sep, value = part.partition('=')
        if not sep or not key:
            raise ValueError('expected KEY=VALUE,..., got %r' % part)
        result[key] = value
    return result


def boolean(text: str) -> bool:
    """gcloud's boolean flag values: true/false (any case), yes/no, 1/0."""
    value = text.strip().lower()
    if value in ('true', 'yes', '1'):
        return True
    if value in ('false', 'no', '0'):
        return False
    raise ValueError('expected true or false, got %r' % text)


def count(text: str) -> int:
    if not text.strip().isdigit() or int(text) > configs.MAX_REPLICAS:
        raise ValueError('expected an integer from 0 to %d, got %r'
                         % (configs.MAX_REPLICAS, text))
    return int(text)


def package_list(text: str) -> List[str]:
    items = [item.strip() for item in text.split(',') if item.strip()]
    if not items:
        raise ValueError('expected archives (local paths or gs:// URIs), got %r' % text)
    return items


def not_empty(text: str) -> str:
    """Any text but an empty one (an unset shell variable)."""
    if not text.strip():
        raise ValueError('expected a value, got %r (an unset variable?)' % text)
    return text


def job_dir(text: str) -> str:
    """A gs:// directory (`gs://b//x` is read as `gs://b/x`: `configs.parse_config`
    says so).

    Raises:
      UserInputError: `--job-dir <text>: <what is wrong>`, as every gs:// flag says it.
    """
    return gcs_paths.directory(gcs_paths.normalized(text)[0], '--job-dir') and text


@dataclasses.dataclass(frozen=True)
class Flag:
    """One row of the translation table.

    Attributes:
      name: the gcloud flag (`JOB` and `USER_ARGS` for the positionals).
      legacy: for the docs, the `ml v1` Job field it set, or what it was.
      vertex: for the docs, what it becomes in the Vertex AI request.
      kind: FIELD, MAPPED, REFUSED or CLIENT.
      note: what differs, for the docs (and the warning of a MAPPED flag).
      help: the flag's help text.
      field: the `trainingInput` path its value replaces (`('masterType',)`),
        or None when `build_plan` handles it otherwise.
      parse: its value's parser (raising ValueError), or None for text;
        `switch` for a flag without a value.
    """
    name: str
    legacy: str
    vertex: str
    kind: Kind
    note: str = ''
    help: str = ''
    field: Optional[Tuple[str, ...]] = None
    parse: Optional[Callable[[str], Any]] = None
    switch: bool = False


def _pool_flags(name: RoleName) -> List[Flag]:
    """The machine, count, accelerator and image flags of one pool."""
    role = roles.role(name)
    prefix, pool = role.flag_prefix, 'jobSpec.workerPoolSpecs[%d]' % role.pool
    rows = [Flag('--%s-machine-type' % prefix, 'trainingInput.' + role.type_field,
                 pool + '.machineSpec.machineType', FIELD,
                 'legacy names (`standard`, `complex_model_m_gpu`, ...) become Compute '
                 'Engine types and GPUs (docs/cloud.md)',
                 'Machine type of the %s pool.' % name, field=(role.type_field,),
                 parse=machine_type)]
    if role.count_field:
        rows.append(Flag('--%s-count' % prefix, 'trainingInput.' + role.count_field,
                         pool + '.replicaCount', FIELD, 'an int64, sent as a string',
                         'Replicas of the %s pool.' % name, field=(role.count_field,),
                         parse=count))
    rows.append(Flag('--%s-accelerator' % prefix,
                     'trainingInput.%s.acceleratorConfig' % role.config_field,
                     pool + '.machineSpec.acceleratorType, acceleratorCount', FIELD,
                     'retired K80s become T4s (V100s for 8), with a note',
                     'GPUs of each %s replica: count=N,type=T (e.g. '
                     'count=1,type=nvidia-tesla-t4).' % name,
                     field=(role.config_field, 'acceleratorConfig'), parse=accelerator))
    rows.append(Flag('--%s-image-uri' % prefix, 'trainingInput.%s.imageUri' % role.config_field,
                     pool + '.containerSpec.imageUri (a Vertex AI prebuilt image: '
                     'pythonPackageSpec.executorImageUri)', FIELD,
                     'with --package-path, the image must be built from this '
                     "repository's Dockerfile (it installs the package at start-up)"
                     + ('' if name == CHIEF else '; unset: the master\'s image, as on '
                        'AI Platform'),
                     'Container image of the %s pool.' % name,
                     field=(role.config_field, 'imageUri'), parse=not_empty))
    return rows


FLAGS = tuple([
    Flag('JOB', 'jobId', 'displayName', FIELD,
         'a second job of the same name is refused, as AI Platform refused it',
         'Job name: a letter, then letters, digits and underscores.'),
    Flag('--config', 'the Job resource (YAML or JSON)', 'the fields below', FIELD,
         'flags replace the file\'s fields one by one',
         'Job resource YAML or JSON (trainingInput, labels); flags override its fields.',
         parse=not_empty),
    Flag('--job-dir', 'trainingInput.jobDir',
         'jobSpec.baseOutputDirectory.outputUriPrefix, and --job-dir=DIR at the end of '
         'every pool\'s args', FIELD, 'the trainer gets --job-dir as on AI Platform',
         'gs:// directory for the job\'s outputs, passed to the trainer as --job-dir; '
         'packages are staged under DIR/packages unless --staging-bucket.',
         field=('jobDir',), parse=job_dir),
    Flag('--staging-bucket', 'where packageUris were uploaded',
         'packageUris under gs://BUCKET/JOB/', FIELD,
         'also holds the build context of this project\'s image',
         'gs:// bucket for the built packages (default: under --job-dir).',
         parse=not_empty),
    Flag('--package-path', 'trainingInput.packageUris (the built sdist)',
         'jobSpec.workerPoolSpecs[*].containerSpec.args --package-uri=...', FIELD,
         'built as gcloud built it (the setup.py beside it, or a generated one); '
         'installed with its requirements at start-up into this project\'s image',
         'Local Python package to build and stage (its parent\'s setup.py or '
         'pyproject.toml builds it when present).', parse=not_empty),
    Flag('--packages', 'trainingInput.packageUris',
         'jobSpec.workerPoolSpecs[*].containerSpec.args --package-uri=...', FIELD,
         'local archives are staged; gs:// ones are passed as they are',
         'Comma-separated archives (local paths or gs://) installed with the package.',
         field=('packageUris',), parse=package_list),
    Flag('--module-name', 'trainingInput.pythonModule',
         'jobSpec.workerPoolSpecs[*].containerSpec.args --module-name=...', FIELD,
         'the image runs python -m MODULE after installing the packages',
         'Module of the package to run (python -m).', field=('pythonModule',),
         parse=not_empty),
    Flag('--region', 'trainingInput.region',
         'the request\'s location (projects/P/locations/REGION) and endpoint', FIELD,
         'ml v1 regions have Vertex AI namesakes',
         'Region (%s).' % location.region_help(location.TRAINING, with_config=True),
         field=('region',),
         parse=location.region_name),
    Flag('--scale-tier', 'trainingInput.scaleTier',
         'jobSpec.workerPoolSpecs[*] (the tier\'s machines and replica counts)', FIELD,
         'BASIC_TPU is refused (no TPUs for these Estimators)',
         'basic, basic-gpu, standard-1, premium-1 or custom.', field=('scaleTier',),
         parse=scale_tier),
    *_pool_flags(CHIEF),
    *_pool_flags(WORKER),
    *_pool_flags(PS),
    Flag('--use-chief-in-tf-config', 'trainingInput.useChiefInTfConfig',
         'jobSpec.workerPoolSpecs[*].containerSpec.args --tf-config-primary=...', MAPPED,
         'Vertex AI always names pool 0 `chief`; for packages on this project\'s image '
         'the package runner names it `master` where AI Platform did (runtime < 2.1, '
         'custom containers) unless this is true; a container of your own gets `chief`',
         'true: TF_CONFIG names the first pool chief (false: master, as AI Platform '
         'did for custom containers and runtimes before 2.1).',
         field=('useChiefInTfConfig',), parse=boolean),
    Flag('--runtime-version', 'trainingInput.runtimeVersion',
         'jobSpec.workerPoolSpecs[*].containerSpec.imageUri (this project\'s image, '
         'TensorFlow %s)' % IMAGE_TENSORFLOW, MAPPED,
         'no AI Platform runtime exists on Vertex AI; 1.x code runs on TensorFlow %s: '
         'tf.contrib is gone, tf.compat.v1 and tf.estimator are there' % IMAGE_TENSORFLOW,
         'AI Platform runtime: runs on TensorFlow %s (one warning says what differs).'
         % IMAGE_TENSORFLOW, field=('runtimeVersion',)),
    Flag('--python-version', 'trainingInput.pythonVersion',
         'the image\'s Python %s' % IMAGE_PYTHON, MAPPED,
         '2.7 is refused (TensorFlow %s needs Python 3)' % IMAGE_TENSORFLOW,
         'AI Platform Python: runs on Python %s.' % IMAGE_PYTHON,
         field=('pythonVersion',)),
    Flag('--labels', 'labels', 'labels', FIELD, '',
         'KEY=VALUE,... job labels (added to the config\'s).', parse=labels),
    Flag('--service-account', 'trainingInput.serviceAccount', 'jobSpec.serviceAccount',
         FIELD, '', 'Service account the replicas run as.', field=('serviceAccount',)),
    Flag('--network', 'trainingInput.network', 'jobSpec.network', FIELD,
         'gcloud beta', 'VPC network to peer with (projects/N/global/networks/NAME).',
         field=('network',)),
    Flag('--enable-web-access', 'trainingInput.enableWebAccess', 'jobSpec.enableWebAccess',
         FIELD, '', 'Interactive shell access to the replicas.',
         field=('enableWebAccess',), switch=True),
    Flag('--kms-key', 'trainingInput.encryptionConfig.kmsKeyName',
         'encryptionSpec.kmsKeyName', FIELD,
         'the key must be in the job\'s region; --kms-keyring, --kms-location and '
         '--kms-project complete a short key id',
         'Cloud KMS key (full name, or an id with --kms-keyring/--kms-location/'
         '--kms-project).', field=('encryptionConfig', 'kmsKeyName')),
    Flag('--async', 'none (gcloud itself)', 'none: return once the job is created', CLIENT,
         'the default, as in gcloud (the flag was deprecated there)',
         'Return once the job is created (the default).', switch=True),
    Flag('--stream-logs', 'none (gcloud itself)',
         'none: the replicas\' Cloud Logging entries are printed until the job ends',
         CLIENT, 'exit 0 only when the job succeeded',
         'Print the replicas\' log lines until the job ends.', switch=True),
    Flag('--tpu-tf-version', 'trainingInput.masterConfig.tpuTfVersion', 'none', REFUSED,
         'TPUs need TPUEstimator; these runs are for CPUs and GPUs', 'Refused.'),
    Flag('USER_ARGS', 'trainingInput.args',
         'jobSpec.workerPoolSpecs[*].containerSpec.args (pythonPackageSpec.args)', FIELD,
         'given after --, they replace the config\'s args', 'Trainer flags, after --.',
         field=('args',)),
])
FLAG_ROWS = {flag.name: flag for flag in FLAGS}


def kms_key_name(key: Optional[str], keyring: Optional[str] = None,
                 location: Optional[str] = None,
                 project: Optional[str] = None) -> Optional[str]:
    """The full KMS key name from --kms-key and its completing flags."""
    if key is None:
        if keyring or location or project:
            raise UserInputError('--kms-keyring, --kms-location and --kms-project '
                                 'complete --kms-key, which is missing', flag='--kms-key')
        return None
    if _KMS_RE.fullmatch(key):
        return key
    missing = [flag for flag, value in (('--kms-keyring', keyring),
                                        ('--kms-location', location),
                                        ('--kms-project', project)) if not value]
    if '/' in key or missing:
        raise UserInputError(
            '--kms-key %s: expected projects/P/locations/L/keyRings/R/cryptoKeys/K, or '
            'a key id with --kms-keyring, --kms-location and --kms-project' % key,
            flag='--kms-key')
    return 'projects/%s/locations/%s/keyRings/%s/cryptoKeys/%s' % (
        project, location, keyring, key)


def kms_location(name: str) -> str:
    """The location of a full KMS key name."""
    match = _KMS_RE.fullmatch(name)
    assert match, 'a full KMS key name (kms_key_name)'
    return match.group('location')


def build_plan(name: str, values: Values, user_args: Optional[Sequence[str]],
               config_data: Any = None, source: str = 'command line', *,
               environ: location.Environ, unpinned: Sequence[str] = ()) -> plan_lib.JobPlan:
    """The `plan.JobPlan` of `jobs submit training NAME` with flag `values`.

    Args:
      name: JOB.
      values: {flag name: parsed value or None} (`ai_platform` parses them
        with this table's parsers).
      user_args: the trainer flags after `--` (None: none given).
      config_data: the `--config` Job resource, parsed (None: no file).
      source: what to name in messages about the config (its path).
      environ: the environment (the region's defaults).
      unpinned: requirements the package may choose over this project's pins.

    Raises:
      UserInputError: one line naming the flag or the config field.
    """
    given = {flag: value for flag, value in values.items() if value is not None}
    config, front = _config_with_flags(given, user_args, config_data, source)
    args, args_notes = gcs_paths.normalized_args(config.args)
    packages, package_notes = gcs_paths.normalized_args(front.package_uris)
    notes = [note for note in args_notes + package_notes if note not in config.notes]
    package_path = given.get('--package-path')
    package_uris = tuple(packages)
    present = {pool.role.name for pool in config.pools}
    images = {role: image for role, image in front.images.items() if role in present}
    program = _program(front, package_path, package_uris, images, present, unpinned)
    module = front.module
    job_dir = config.job_dir
    staging_uri = _staging(given.get('--staging-bucket'), job_dir, name,
                           bool(package_path) or any(not p.startswith('gs://')
                                                     for p in package_uris)
                           or (module is not None and CHIEF not in images))
    warnings: List[str] = []
    primary = _primary(config, module, images, warnings)
    warnings[:0] = _version_warnings(config, images, primary)
    return plan_lib.JobPlan(
        name=name, program=program, config=config, args=tuple(args),
        job_dir=job_dir,
        region=location.region_id(given.get('--region'), environ, config.region),
        staging=staging_uri, images=images, primary=primary,
        enable_web_access=front.enable_web_access, kms_key=front.kms,
        unique_name=True, notes=tuple(config.notes) + tuple(notes),
        warnings=tuple(config.warnings) + tuple(warnings))


def _config_with_flags(given: Values, user_args: Optional[Sequence[str]], config_data: Any,
                       source: str) -> Tuple[TrainingConfig, '_Front']:
    """The `--config` Job resource with each given flag replacing its field,
    checked (`configs.parse_config`), and the fields of what the pools run."""
    if config_data is not None and not isinstance(config_data, dict):
        raise UserInputError('%s: expected a Job resource (a mapping with trainingInput), '
                             'got %s' % (source, type(config_data).__name__))
    data = dict(config_data or {})
    data.pop('jobId', None)  # JOB names the job, as in gcloud
    if 'trainingInput' in data and not isinstance(data['trainingInput'], dict):
        raise UserInputError('%s: trainingInput: expected a mapping' % source)
    ti = dict(data.get('trainingInput') or {})
    for flag in given:
        if FLAG_ROWS[flag].kind == REFUSED:
            raise UserInputError('%s: not supported: %s' % (flag, FLAG_ROWS[flag].note),
                                 flag=flag)

    _override(ti, given, user_args)
    _check_flag_shape(ti, given)
    front, ti = _front_end_fields(ti, source)
    data['trainingInput'] = ti
    if '--labels' in given:
        data['labels'] = dict(data.get('labels') or {}, **given['--labels'])
    return configs.parse_config(data, source), front


def _program(front: '_Front', package_path: Optional[str], package_uris: Tuple[str, ...],
             images: Mapping[RoleName, str], present: Set[RoleName],
             unpinned: Sequence[str]) -> plan_lib.Program:
    """What the pools run: the user's package and module, or their containers."""
    module = front.module
    if (package_path or package_uris) and not module:
        raise UserInputError('--module-name is required with --package-path or --packages '
                             '(the module the job runs, e.g. trainer.task)',
                             flag='--module-name')
    if not module and CHIEF not in images:
        raise UserInputError('nothing to run: give --package-path (or --packages) with '
                             '--module-name, or --master-image-uri for a container',
                             flag='--module-name')
    if module:
        declared = next((trainer for trainer in registry.discover().values()
                         if trainer.module == module), None)
        return plan_lib.Package(module=module, package_path=package_path,
                                packages=package_uris, declared=declared,
                                unpinned=tuple(unpinned))
    if unpinned:
        raise UserInputError('--unpin goes with a package (--package-path or '
                             '--packages): your containers install what they need',
                             flag='--unpin')
    return plan_lib.Container(commands={
        role: command for role, command in front.commands.items() if role in present})


def _override(ti: Document, given: Values, user_args: Optional[Sequence[str]]) -> None:
    """Sets each given flag's trainingInput field in `ti`, replacing the file's."""
    for flag, value in given.items():
        path = FLAG_ROWS[flag].field
        if path is None:
            continue
        node = ti
        for key in path[:-1]:
            node[key] = dict(node.get(key) or {})
            node = node[key]
        node[path[-1]] = list(value) if isinstance(value, (list, tuple)) else value
    if user_args:
        ti['args'] = list(user_args)


def _check_flag_shape(ti: Document, given: Values) -> None:
    """Names the flags of a cluster shape that cannot work (before the config
    checks, which name fields)."""
    tier = ti.get('scaleTier', 'BASIC')
    for role in roles.ROLES:
        if not role.flag_prefix:
            continue
        type_field = role.type_field
        type_flag = '--%s-machine-type' % role.flag_prefix
        count_flag = '--%s-count' % role.flag_prefix
        if tier != machines.CUSTOM:
            for flag in (type_flag, count_flag, '--%s-accelerator' % role.flag_prefix):
                if flag in given:
                    raise UserInputError('%s needs --scale-tier custom (the scale tier is %s)'
                                         % (flag, tier), flag=flag)
        elif count_flag in given and given[count_flag] and type_field not in ti:
            raise UserInputError('%s %d needs %s' % (count_flag, given[count_flag], type_flag),
                                 flag=count_flag)
    if tier == machines.CUSTOM and 'masterType' not in ti:
        raise UserInputError('--scale-tier custom needs --master-machine-type (or '
                             'trainingInput.masterType in --config)',
                             flag='--master-machine-type')


@dataclasses.dataclass
class _Front:
    """The trainingInput fields this module handles: what the pools run.

    Attributes:
      module: `pythonModule`, or None.
      package_uris: `packageUris` (local paths or gs:// URIs).
      enable_web_access: `enableWebAccess`.
      kms: `encryptionConfig.kmsKeyName`, or None.
      images: {role: `<pool>Config.imageUri`}.
      commands: {role: `<pool>Config.containerCommand`}.
    """
    module: Optional[str] = None
    package_uris: List[str] = dataclasses.field(default_factory=list)
    enable_web_access: bool = False
    kms: Optional[str] = None
    images: Dict[RoleName, str] = dataclasses.field(default_factory=dict)
    commands: Dict[RoleName, Tuple[str, ...]] = dataclasses.field(default_factory=dict)


class _FieldCheck:
    """Refuses a front-end field of the config in one line naming it."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, field: str, message: str) -> NoReturn:
        raise UserInputError('%s: trainingInput.%s: %s' % (self.source, field, message))


def _front_end_fields(ti: Document, source: str) -> Tuple[_Front, Document]:
    """Takes out the fields this module handles (what the pools run), checks
    their types, and returns `(front, rest)`; `rest` goes to `parse_config`."""
    ti = dict(ti)
    front = _Front()
    check = _FieldCheck(source)
    _job_fields(ti, front, check)
    for role in roles.ROLES:
        _pool_fields(ti, role, front, check)
    if front.commands and front.module is not None:
        check.fail('masterConfig.containerCommand', 'a package runs python -m pythonModule; '
                   'containerCommand goes with a container of your own only')
    return front, ti


def _job_fields(ti: Document, front: _Front, check: _FieldCheck) -> None:
    """The job-wide fields: the module, the packages, web access, the KMS key."""
    if 'pythonModule' in ti:
        module = ti.pop('pythonModule')
        if not isinstance(module, str) or not all(
                part.isidentifier() for part in module.split('.')):
            check.fail('pythonModule', 'expected a module name like trainer.task, got %r'
                       % (module,))
        front.module = module
    if 'packageUris' in ti:
        uris = ti.pop('packageUris')
        if not isinstance(uris, list) or not all(isinstance(u, str) and u for u in uris):
            check.fail('packageUris', 'expected a list of archives (local paths or gs:// URIs)')
        front.package_uris = uris
    if 'enableWebAccess' in ti:
        web_access = ti.pop('enableWebAccess')
        if not isinstance(web_access, bool):
            check.fail('enableWebAccess', 'expected true or false')
        front.enable_web_access = web_access
    if 'encryptionConfig' in ti:
        encryption = ti.pop('encryptionConfig')
        if not isinstance(encryption, dict) or set(encryption) != {'kmsKeyName'} or \
                not _KMS_RE.fullmatch(str(encryption['kmsKeyName'])):
            check.fail('encryptionConfig', 'expected {kmsKeyName: projects/P/locations/L/'
                       'keyRings/R/cryptoKeys/K}')
        front.kms = encryption['kmsKeyName']


def _pool_fields(ti: Document, role: roles.Role, front: _Front, check: _FieldCheck) -> None:
    """A pool's image and command (`<pool>Config`), taken out of `ti`; what it
    cannot take refused."""
    config_field = role.config_field
    replica = ti.get(config_field)
    if not isinstance(replica, dict):
        return
    replica = dict(replica)
    image = replica.pop('imageUri', None)
    if image is not None:
        if not isinstance(image, str) or not image or '://' in image:
            check.fail(config_field + '.imageUri', 'expected a container image like '
                       'us-central1-docker.pkg.dev/PROJECT/REPO/IMAGE:TAG, got %r' % (image,))
        front.images[role.name] = image
    command = replica.pop('containerCommand', None)
    if command is not None:
        if not isinstance(command, list) or not all(isinstance(c, str) for c in command):
            check.fail(config_field + '.containerCommand', 'expected a list of text')
        front.commands[role.name] = tuple(command)
    if 'containerArgs' in replica:
        check.fail(config_field + '.containerArgs', 'not supported: put the arguments in '
                   'trainingInput.args or after --, which every pool gets')
    if 'tpuTfVersion' in replica:
        check.fail(config_field + '.tpuTfVersion', 'not supported: %s'
                   % FLAG_ROWS['--tpu-tf-version'].note)
    if replica:
        ti[config_field] = replica
    else:
        ti.pop(config_field)


def _staging(bucket: Optional[str], job_dir: Optional[str], name: str,
             needed: bool) -> Optional[str]:
    """Where local packages go: gs://BUCKET/JOB, else JOB_DIR/packages (gcloud's rule)."""
    if bucket:
        return '%s/%s' % (gcs_paths.parse_bucket(bucket, '--staging-bucket'), name)
    if job_dir:
        return '%s/packages' % job_dir.rstrip('/')
    if needed:
        raise UserInputError('local packages (and the build context of this project\'s '
                             'image) are staged to Cloud Storage: give --staging-bucket or '
                             '--job-dir (as gcloud required)', flag='--staging-bucket')
    return None


def runtime_version(text: Any) -> Optional[Tuple[int, int]]:
    """`(major, minor)` of an AI Platform runtime version, or None when unset."""
    if text is None:
        return None
    match = _RUNTIME_RE.fullmatch(str(text).strip())
    if not match:
        raise UserInputError('--runtime-version %s: expected an AI Platform runtime version '
                             'like 1.15 or 2.11' % text, flag='--runtime-version')
    return int(match.group(1)), int(match.group(2))


def _version_warnings(config: TrainingConfig, images: Mapping[RoleName, str],
                      primary: Primary) -> Iterator[str]:
    """The one line each for --runtime-version and --python-version (MAPPED)."""
    runtime = runtime_version(config.runtime_version)
    python = config.python_version
    own_image = images.get(CHIEF) and not images[CHIEF].startswith(
        plan_lib.PREBUILT_IMAGE_PREFIX)
    if python is not None:
        if str(python).strip() in ('2', '2.7'):
            raise UserInputError('--python-version %s: not supported: TensorFlow %s needs '
                                 'Python 3; port the package to Python 3'
                                 % (python, IMAGE_TENSORFLOW), flag='--python-version')
        if not re.fullmatch(r'3\.\d+', str(python).strip()):
            raise UserInputError('--python-version %s: expected 3.5, 3.7 or another 3.x'
                                 % python, flag='--python-version')
    if runtime is not None and own_image:
        yield ('--runtime-version %s: ignored: the pools run your container %s, '
               'which has its own TensorFlow' % (config.runtime_version, images[CHIEF]))
    elif runtime is not None:
        if runtime[0] < 2:
            differs = ('tf.contrib is gone, tf.compat.v1 and tf.estimator are there '
                       '(import tensorflow.compat.v1 as tf)')
        else:
            differs = 'tf.estimator is still there (2.15 is its last release)'
        named = ("; TF_CONFIG names pool 0 'master' as AI Platform did"
                 if primary == MASTER else '')
        yield ('--runtime-version %s: Vertex AI has no AI Platform runtimes; the '
               'job runs TensorFlow %s (%s): %s%s'
               % (config.runtime_version, IMAGE_TENSORFLOW if not images.get(CHIEF) else '2.15',
                  images.get(CHIEF) or "this project's image", differs, named))
    if python is not None and str(python).strip() != IMAGE_PYTHON and not own_image:
        yield ('--python-version %s: the job runs Python %s (%s)'
               % (python, '3.10' if images.get(CHIEF) else IMAGE_PYTHON,
                  images.get(CHIEF) or "this project's image"))


def _legacy_primary(config: TrainingConfig, module: Optional[str],
                    images: Mapping[RoleName, str]) -> Primary:
    """What AI Platform named pool 0 in TF_CONFIG for this job."""
    if config.use_chief_in_tf_config:
        return VERTEX_PRIMARY
    if images.get(CHIEF) and not images[CHIEF].startswith(plan_lib.PREBUILT_IMAGE_PREFIX):
        return MASTER
    runtime = runtime_version(config.runtime_version)
    return MASTER if runtime is not None and runtime < (2, 1) else VERTEX_PRIMARY


def _primary(config: TrainingConfig, module: Optional[str], images: Mapping[RoleName, str],
             warnings: List[str]) -> Primary:
    """TF_CONFIG's pool 0 name for the package runner; a warning where Vertex AI's
    `chief` cannot be renamed (a container of the user's own)."""
    legacy = _legacy_primary(config, module, images)
    if legacy == MASTER and not module:
        warnings.append("trainingInput.useChiefInTfConfig is not true: AI Platform "
                        "named the first pool 'master' in your container's TF_CONFIG; "
                        "Vertex AI names it 'chief' (code that looks for 'master' must "
                        "look for 'chief')")
        return VERTEX_PRIMARY
    if legacy == MASTER and images.get(CHIEF, '').startswith(plan_lib.PREBUILT_IMAGE_PREFIX):
        warnings.append("%s runs the package with TF_CONFIG naming the first pool "
                        "'chief', where AI Platform said 'master' (Estimator's chief does "
                        "not evaluate; add an evaluator pool or use this project's image)"
                        % images[CHIEF])
        return VERTEX_PRIMARY
    return legacy


def markdown_table() -> str:
    """The docs table of `FLAGS` (docs/migrating-from-ai-platform.md holds it verbatim)."""
    rows = ['| gcloud flag | AI Platform (`ml v1`) | Vertex AI | How | Notes |',
            '|---|---|---|---|---|']
    for flag in FLAGS:
        rows.append('| `%s` | %s | %s | %s | %s |' % (
            flag.name, _code(flag.legacy), _code(flag.vertex), flag.kind, flag.note))
    return '\n'.join(rows) + '\n'


def _code(text: str) -> str:
    """Field paths in backticks, prose as it is."""
    if re.fullmatch(r'[A-Za-z][\w.\[\]*]*', text):
        return '`%s`' % text
    return text
