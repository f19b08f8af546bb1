"""AI Platform `trainingInput` configs: read, validate, translate to Vertex AI pools.

Users keep the config files they passed to `gcloud ai-platform jobs submit
training --config`. They are read by the one bounded reader of user files
(`user_files`, `CONFIG_LIMITS`), checked field by field (`checker`: an
unknown field, a wrong YAML type, a count without a machine type, a GPU that
does not fit the machine: one error naming the field and its line), and
their cluster shape becomes Vertex AI worker pools in the order of `roles`
(pool 0 chief, the legacy master; 1 workers; 2 parameter servers;
3 evaluators), with machines translated by `machines` (legacy names, scale
tiers, retired GPUs). A machine type whose count is 0 or unset
(`parameterServerType` without `parameterServerCount`) runs no replica, as
on AI Platform, with a warning.
"""
import dataclasses
import re
import unicodedata
from typing import Any, Dict, Final, List, Literal, Mapping, Optional, Tuple, TypedDict, Union
from typing import get_args

from estimator_trainers import user_files
from estimator_trainers.tools.cloud import gcs_paths
from estimator_trainers.tools.cloud import roles
from estimator_trainers.tools.cloud.checker import Checker, describe, show
from estimator_trainers.tools.cloud.checker import field as field_of
from estimator_trainers.tools.cloud.machines import CUSTOM, GPU_TYPES, MachineError
from estimator_trainers.tools.cloud.machines import SCALE_TIERS, TPU_REASON, UNSUPPORTED_GPUS
from estimator_trainers.tools.cloud.machines import translate_machine

# A parsed YAML or JSON mapping, as a user wrote it (checked field by field here).
Document = Dict[str, Any]
Number = Union[int, float]
_TRAINING_INPUT_FIELDS = (
    'scaleTier', 'masterType', 'masterConfig', 'workerType', 'workerCount',
    'workerConfig', 'parameterServerType', 'parameterServerCount',
    'parameterServerConfig', 'evaluatorType', 'evaluatorCount',
    'evaluatorConfig', 'useChiefInTfConfig', 'hyperparameters', 'args',
    'jobDir', 'region', 'runtimeVersion', 'pythonVersion', 'scheduling',
    'serviceAccount', 'network', 'tensorboard')
_SHAPE_FIELDS = tuple(f for role in roles.ROLES
                      for f in (role.type_field, role.count_field, role.config_field) if f)
_REPLICA_CONFIG_FIELDS = ('acceleratorConfig', 'diskConfig')
_HYPERPARAMETER_FIELDS = ('goal', 'hyperparameterMetricTag', 'maxTrials',
                          'maxParallelTrials', 'maxFailedTrials', 'algorithm',
                          'params')
_PARAM_FIELDS = ('parameterName', 'type', 'minValue', 'maxValue', 'scaleType',
                 'categoricalValues', 'discreteValues')
# A study's vocabularies (AI Platform's `HyperparameterSpec`, Vertex AI's `StudySpec`).
Goal = Literal['MAXIMIZE', 'MINIMIZE']
ParameterType = Literal['DOUBLE', 'INTEGER', 'CATEGORICAL', 'DISCRETE']
ScaleType = Literal['NONE', 'UNIT_LINEAR_SCALE', 'UNIT_LOG_SCALE', 'UNIT_REVERSE_LOG_SCALE']
Algorithm = Literal['ALGORITHM_UNSPECIFIED', 'GRID_SEARCH', 'RANDOM_SEARCH']
_GOALS: Tuple[Goal, ...] = get_args(Goal)
_PARAM_TYPES: Tuple[ParameterType, ...] = get_args(ParameterType)
_SCALE_TYPES: Tuple[ScaleType, ...] = get_args(ScaleType)
_ALGORITHMS: Tuple[Algorithm, ...] = get_args(Algorithm)
_BOOT_DISK_TYPES = ('pd-ssd', 'pd-standard', 'hyperdisk-balanced')
# Trainer flags the submission sets itself; a tuned parameter must not clash.
_RESERVED_PARAMS = ('job-dir', 'hypertune-metric')

# Legacy fields the translation replaces with something else.
FIELD_HINTS = {
    'packageUris': 'the package is built and staged by the submission',
    'pythonModule': 'the trainer module follows from the model name',
    'imageUri': 'pass --image-uri for a custom container',
    'containerCommand': 'pass --image-uri; the command is python -m <trainer>',
    'containerArgs': 'put trainer flags in trainingInput.args or after --',
    'tpuTfVersion': TPU_REASON,
    'enableTrialEarlyStopping': 'not translated to Vertex AI (the trainers '
                                'report the metric once, at the end)',
}

# Replicas per pool: far above any quota, far below what an int64 holds.
MAX_REPLICAS = 1000
# Vertex AI sends trial and disk counts as int32, INTEGER parameters as int64.
MAX_INT32 = 2**31 - 1
# Bounds on reading a config file; the shipped configs are under 1 KiB,
# 4 levels deep and 60 values.
CONFIG_LIMITS = user_files.Limits(
    expected='a trainingInput config holds a few dozen values in a few hundred bytes')
# Durations are google.protobuf.Duration ("format": "google-duration" in the
# aiplatform v1 discovery document): whole seconds at most 315,576,000,000
# (10,000 years), up to nine fractional digits.
MAX_DURATION_SECS = 315576000000
# An int64 as the API's JSON writes it: a decimal string.
_INT64_TEXT = re.compile(r'0|[1-9][0-9]{0,18}')
_DURATION_RE = re.compile(r'(\d+)(\.\d{1,9})?s')
# Vertex AI labels (CustomJob.labels in the discovery document): keys and
# values at most 64 characters of lowercase letters, digits, underscores and
# dashes, international characters allowed; keys start with a lowercase or
# international letter; at most 64 labels (Resource Manager's label rules).
MAX_LABELS = 64
MAX_LABEL_CHARS = 64
_PARAM_NAME_RE = re.compile(r'[A-Za-z][A-Za-z0-9_-]*')
_EMAIL_RE = re.compile(r'[^@\s]+@[^@\s]+\.[^@\s]+')
# CustomJobSpec.tensorboard: a Vertex AI TensorBoard instance.
TENSORBOARD_RE = re.compile(r'projects/[^/\s]+/locations/[a-z0-9-]+/tensorboards/[^/\s]+')
# Vertex AI's scheduling strategies (`Scheduling.strategy`, without the
# deprecated ON_DEMAND and LOW_COST): STANDARD on-demand machines, SPOT
# (preemptible, cheaper), FLEX_START (Dynamic Workload Scheduler: queues for
# machines, at most `maxWaitTime`).
Strategy = Literal['STANDARD', 'SPOT', 'FLEX_START']
STRATEGIES: Tuple[Strategy, ...] = get_args(Strategy)
FLEX_START: Final = 'FLEX_START'
SPOT: Final = 'SPOT'
# CustomJobSpec.network: `projects/{project number}/global/networks/{network name}`.
_NETWORK_RE = re.compile(r'projects/\d+/global/networks/[a-z]([-a-z0-9]{0,61}[a-z0-9])?')


class DiskSpec(TypedDict, total=False):
    """Vertex AI's `diskSpec` of a pool (trainingInput's `diskConfig`, as written)."""
    bootDiskType: str
    bootDiskSizeGb: int


@dataclasses.dataclass(frozen=True)
class Pool:
    """One Vertex AI worker pool: a role with identical replicas.

    Attributes:
      role: the `roles.Role` its replicas play.
      replica_count: how many (at least 1: a pool of none is left out).
      machine_type: the Compute Engine machine type (`machines.translate_machine`).
      accelerator_type, accelerator_count: each replica's GPUs (None, 0: none).
      boot_disk: Vertex AI's `diskSpec`, or None for the default.
    """
    role: roles.Role
    replica_count: int
    machine_type: str
    accelerator_type: Optional[str] = None
    accelerator_count: int = 0
    boot_disk: Optional[DiskSpec] = None


@dataclasses.dataclass(frozen=True)
class Scheduling:
    """Vertex AI's `Scheduling` of a job (trainingInput.scheduling, translated).

    Attributes:
      timeout: how long the job may run (`maxRunningTime`; a budget may lower
        it: `estimate.for_plan`), a google-duration like `7200s`, or None.
      max_wait_duration: how long it may wait for machines (`maxWaitTime`;
        FLEX_START only), or None.
      strategy: the machines it runs on (`STRATEGIES`), or None (STANDARD).
      restart_job_on_worker_restart, disable_retries: as written, or None.
    """
    timeout: Optional[str] = None
    max_wait_duration: Optional[str] = None
    strategy: Optional[Strategy] = None
    restart_job_on_worker_restart: Optional[bool] = None
    disable_retries: Optional[bool] = None

    def __post_init__(self) -> None:
        if self.max_wait_duration is not None and self.strategy != FLEX_START:
            raise ValueError('maxWaitDuration without strategy FLEX_START')

    @property
    def timeout_secs(self) -> Optional[float]:
        """`timeout` in seconds, or None."""
        return float(self.timeout[:-1]) if self.timeout else None

    def as_json(self) -> Dict[str, Union[str, bool]]:
        """Vertex AI's `Scheduling` (empty: Vertex AI's defaults)."""
        fields: Tuple[Tuple[str, Union[str, bool, None]], ...] = (
            ('timeout', self.timeout), ('maxWaitDuration', self.max_wait_duration),
            ('strategy', self.strategy),
            ('restartJobOnWorkerRestart', self.restart_job_on_worker_restart),
            ('disableRetries', self.disable_retries))
        return {name: value for name, value in fields if value is not None}


@dataclasses.dataclass(frozen=True)
class Parameter:
    """One tuned trainer flag (`hyperparameters.params[i]`), checked.

    Attributes:
      name: the flag's name without `--` (`learning-rate`).
      type: DOUBLE and INTEGER take `min_value`..`max_value`, CATEGORICAL
        `categorical_values`, DISCRETE `discrete_values` (increasing).
      scale_type: how the search scales the values, or None (as NONE).
    """
    name: str
    type: ParameterType
    min_value: Optional[Number] = None
    max_value: Optional[Number] = None
    categorical_values: Tuple[str, ...] = ()
    discrete_values: Tuple[Number, ...] = ()
    scale_type: Optional[ScaleType] = None

    def __post_init__(self) -> None:
        ranged = self.type in ('DOUBLE', 'INTEGER')
        if ranged != (self.min_value is not None and self.max_value is not None) or \
                (self.type == 'CATEGORICAL') != bool(self.categorical_values) or \
                (self.type == 'DISCRETE') != bool(self.discrete_values):
            raise ValueError('parameter %s: the values of a %s parameter' % (self.name,
                                                                              self.type))

    def samples(self) -> Tuple[Union[Number, str], ...]:
        """The values a trial may get at the edges: the bounds (an INTEGER's as
        whole numbers), else every value."""
        if self.min_value is not None and self.max_value is not None:
            bounds = (self.min_value, self.max_value)
            return tuple(int(v) for v in bounds) if self.type == 'INTEGER' else bounds
        return self.categorical_values or self.discrete_values


@dataclasses.dataclass(frozen=True)
class Hyperparameters:
    """A tuning job's study (`trainingInput.hyperparameters`), checked, defaults filled in.

    Attributes:
      metric_tag: the metric the trials report (`hyperparameterMetricTag`).
      goal: MAXIMIZE or MINIMIZE it.
      params: the tuned flags (at least one, names unique).
      max_trials, max_parallel_trials: trials in all, at once (1 <= parallel <= all).
      max_failed_trials: failed trials before the study fails, or None (Vertex
        AI's default).
      algorithm: the search (ALGORITHM_UNSPECIFIED: Vertex AI's default).
    """
    metric_tag: str
    goal: Goal
    params: Tuple[Parameter, ...]
    max_trials: int = 1
    max_parallel_trials: int = 1
    max_failed_trials: Optional[int] = None
    algorithm: Algorithm = 'ALGORITHM_UNSPECIFIED'

    def __post_init__(self) -> None:
        names = [param.name for param in self.params]
        if not self.metric_tag or not names or len(set(names)) != len(names) or \
                not 1 <= self.max_parallel_trials <= self.max_trials:
            raise ValueError('a study needs a metric, parameters of distinct names and '
                             '1 <= maxParallelTrials <= maxTrials')


@dataclasses.dataclass(frozen=True)
class TrainingConfig:
    """A validated config and its Vertex AI translation.

    Attributes:
      source: where the config came from (file path), for messages.
      pools: one `Pool` per role present, in Vertex pool order (the chief first).
      hyperparameters: the study, or None for a plain training job.
      args: trainer flags from `trainingInput.args`.
      labels: job labels.
      scheduling: Vertex AI's `Scheduling` (maybe all defaults).
      notes: translation remarks to show the user (e.g. a K80 substitution).
      warnings: accepted settings that do something surprising (a machine
        type whose count is 0 runs nothing).
      max_cost_usd: `budget.maxCostUsd` (this project's field beside
        `trainingInput`; `--max-cost` overrides it), or None.
      region, job_dir, service_account, network, tensorboard, runtime_version,
        python_version: the trainingInput fields of those names, as written
        (the job-dir normalized: `gcs_paths.normalized`), or None.
      use_chief_in_tf_config: `trainingInput.useChiefInTfConfig`.
    """
    source: str
    pools: Tuple[Pool, ...]
    hyperparameters: Optional[Hyperparameters] = None
    args: Tuple[str, ...] = ()
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    scheduling: Scheduling = Scheduling()
    notes: Tuple[str, ...] = ()
    warnings: Tuple[str, ...] = ()
    max_cost_usd: Optional[float] = None
    region: Optional[str] = None
    job_dir: Optional[str] = None
    service_account: Optional[str] = None
    network: Optional[str] = None
    tensorboard: Optional[str] = None
    runtime_version: Optional[str] = None
    python_version: Optional[str] = None
    use_chief_in_tf_config: bool = False

    def __post_init__(self) -> None:
        order = [pool.role.pool for pool in self.pools]
        if not order or order[0] != 0 or order != sorted(set(order)) or \
                any(pool.replica_count < 1 for pool in self.pools):
            raise ValueError('%s: the pools are a chief, then at most one pool of each other '
                             'role in pool order, each of one replica or more' % self.source)

    @property
    def is_tuning(self) -> bool:
        return self.hyperparameters is not None

    @property
    def uses_gpus(self) -> bool:
        return any(pool.accelerator_count for pool in self.pools)

    def pool(self, role: roles.RoleName) -> Optional[Pool]:
        """The pool of `role`, or None when no replica plays it."""
        return next((pool for pool in self.pools if pool.role.name == role), None)


def default_config() -> TrainingConfig:
    """The config of a submission without `--config`: scale tier BASIC."""
    return parse_config({'trainingInput': {'scaleTier': 'BASIC'}},
                        '(default BASIC config)')


def load_config(path: str) -> TrainingConfig:
    """Reads and validates the YAML config at `path`.

    The file is read within `CONFIG_LIMITS` (`user_files`: regular, UTF-8,
    bounded in size, depth and values with aliases expanded, no key given
    twice).

    Raises:
      UserInputError: naming the file, the line where known and the field.
    """
    data, written = _read(path)
    return parse_config(data, path, written)


def read_config(path: str) -> Any:
    """The YAML (or JSON) document at `path`, read within `CONFIG_LIMITS` and
    parsed, but not validated (a front end merges flags into it before
    `parse_config`).

    Raises:
      UserInputError: the file cannot be read, is not UTF-8 YAML, exceeds a
        bound or repeats a key.
    """
    return _read(path)[0]


def _read(path: str) -> Tuple[Any, user_files.Written]:
    """`read_config`'s document and where each of its fields was written."""
    data, written = user_files.read_yaml(path, '--config %s' % path, CONFIG_LIMITS,
                                         flag='--config')
    return data, written


def parse_config(data: Any, source: str,
                 written: Optional[user_files.Written] = None) -> TrainingConfig:
    """Validates an already parsed config (`{'trainingInput': {...}}`).

    Args:
      source: the file (or a description), for messages.
      written: where and how the file wrote each field (`user_files.Written`), for messages.

    Raises:
      UserInputError: naming the source, the line where known and the field.
    """
    check = Checker(source, written, FIELD_HINTS)
    check.mapping(data, '', ('trainingInput', 'labels', 'budget'))
    if 'trainingInput' not in data:
        check.fail('trainingInput', 'required (the AI Platform config format '
                   'puts every setting under trainingInput)')
    ti = data['trainingInput']
    check.mapping(ti, 'trainingInput', _TRAINING_INPUT_FIELDS)
    labels = data.get('labels') or {}
    _labels(check, labels)
    max_cost = _budget(check, data.get('budget'))
    notes: List[str] = []
    if isinstance(ti.get('jobDir'), str):
        ti = dict(ti)
        ti['jobDir'], note = gcs_paths.normalized(ti['jobDir'])
        notes += [note] if note else []
    warnings: List[str] = []
    shape = _shape(check, ti)
    pools = tuple(pool for pool in (_pool(check, role, shape, notes, warnings)
                                    for role in roles.ROLES) if pool)
    args = ti.get('args', [])
    check.string_list(args, 'trainingInput.args')
    for i, arg in enumerate(args):
        if '\0' in arg:
            check.fail('trainingInput.args[%d]' % i, '%s: a NUL character cannot be passed '
                       'to a program' % show(arg))
    _check_texts(check, ti, data['trainingInput'].get('jobDir'))
    if 'useChiefInTfConfig' in ti:
        check.boolean(ti['useChiefInTfConfig'], 'trainingInput.useChiefInTfConfig')
    hyperparameters = None
    if 'hyperparameters' in ti:
        hyperparameters = _hyperparameters(check, ti['hyperparameters'])
    return TrainingConfig(
        source=source, pools=pools, hyperparameters=hyperparameters, args=tuple(args),
        labels=dict(labels), scheduling=_scheduling(check, ti.get('scheduling')),
        notes=tuple(notes), warnings=tuple(warnings), max_cost_usd=max_cost,
        region=ti.get('region'), job_dir=ti.get('jobDir'),
        service_account=ti.get('serviceAccount'), network=ti.get('network'),
        tensorboard=ti.get('tensorboard'), runtime_version=ti.get('runtimeVersion'),
        python_version=ti.get('pythonVersion'),
        use_chief_in_tf_config=bool(ti.get('useChiefInTfConfig')))


def _shape(check: Checker, ti: Document) -> Mapping[str, Any]:
    """The cluster shape's fields: a CUSTOM config's own, else its scale tier's."""
    tier = ti.get('scaleTier', 'BASIC')
    check.string(tier, 'trainingInput.scaleTier')
    if tier == 'BASIC_TPU':
        check.fail('trainingInput.scaleTier', 'BASIC_TPU: %s' % TPU_REASON)
    if tier != CUSTOM and tier not in SCALE_TIERS:
        check.fail('trainingInput.scaleTier', 'unknown tier %s (expected one of %s)'
                   % (show(tier), ', '.join(list(SCALE_TIERS) + [CUSTOM])))
    if tier == CUSTOM:
        if 'masterType' not in ti:
            check.fail('trainingInput.masterType', 'required with scaleTier: CUSTOM')
        return ti
    for field in _SHAPE_FIELDS:
        if field in ti:
            check.fail('trainingInput.%s' % field,
                       'only allowed with scaleTier: CUSTOM (scaleTier is %s)' % tier)
    return SCALE_TIERS[tier]


def _check_texts(check: Checker, ti: Document, job_dir_as_written: Any) -> None:
    """The text fields of trainingInput: each text, and of its own form."""
    for field in ('jobDir', 'region', 'runtimeVersion', 'pythonVersion',
                  'serviceAccount', 'network', 'tensorboard'):
        if field in ti:
            check.string(ti[field], 'trainingInput.%s' % field)
    if 'jobDir' in ti and gcs_paths.problem(ti['jobDir']):
        check.fail('trainingInput.jobDir', '%s: %s'
                   % (show(job_dir_as_written), gcs_paths.problem(ti['jobDir'])))
    if 'serviceAccount' in ti and not _EMAIL_RE.fullmatch(ti['serviceAccount']):
        check.fail('trainingInput.serviceAccount', 'expected a service account email like '
                   'trainer@my-project.iam.gserviceaccount.com, got %s'
                   % show(ti['serviceAccount']))
    if 'network' in ti and not _NETWORK_RE.fullmatch(ti['network']):
        check.fail('trainingInput.network', 'expected projects/PROJECT_NUMBER/global/networks/'
                   'NETWORK (the project number, not its id), got %s' % show(ti['network']))
    if 'tensorboard' in ti:
        problem = tensorboard_problem(ti['tensorboard'])
        if problem:
            check.fail('trainingInput.tensorboard', problem)


def _int64(value: Any) -> Any:
    """An int64 field as the API's JSON writes it (`workerCount: '2'`, as `gcloud
    ai-platform jobs describe` and gcloud's own request have it) read as the number;
    any other value as it is, for the checks to name."""
    return int(value) if isinstance(value, str) and _INT64_TEXT.fullmatch(value) else value


def _pool(check: Checker, role: roles.Role, shape: Mapping[str, Any], notes: List[str],
          warnings: List[str]) -> Optional[Pool]:
    """The pool of `role` in `shape`, or None when it runs no replica (a warning
    when a machine was set for it anyway)."""
    type_field, count_field, config_field = role.type_field, role.count_field, role.config_field
    prefix = 'trainingInput.'
    count: Any = 1
    if count_field is not None:
        count = _int64(shape.get(count_field, 0))
        check.count(count, prefix + count_field, maximum=MAX_REPLICAS)
    machine: Any = shape.get(type_field)
    if count and machine is None:
        check.fail(prefix + str(count_field), '%d replicas need %s%s'
                   % (count, prefix, type_field))
    if not count:
        # AI Platform defaulted the count to 0 and ran no such replica.
        unused = [f for f in (type_field, config_field) if shape.get(f) is not None]
        if unused:
            warnings.append('%s: %s set but %s is %s: no %s replica runs (as on AI '
                            'Platform); set %s to run one'
                            % (check.source, ' and '.join(prefix + f for f in unused),
                               count_field, 'unset' if count_field not in shape else 0,
                               role.name, count_field))
        return None
    check.string(machine, prefix + type_field)
    accelerator_type, accelerator_count, boot_disk = None, 0, None
    replica_config = shape.get(config_field)
    if replica_config is not None:
        path = prefix + config_field
        check.mapping(replica_config, path, _REPLICA_CONFIG_FIELDS)
        if 'acceleratorConfig' in replica_config:
            accelerator_type, accelerator_count = _accelerator(
                check, replica_config['acceleratorConfig'], path + '.acceleratorConfig')
        if 'diskConfig' in replica_config:
            boot_disk = _disk(check, replica_config['diskConfig'], path + '.diskConfig')
    try:
        machine_type, accelerator_type, accelerator_count, note = translate_machine(
            machine, accelerator_type, accelerator_count)
    except MachineError as e:
        check.fail(prefix + config_field + '.acceleratorConfig' if e.on_accelerator
                   else prefix + type_field, str(e))
    if note:
        notes.append(note)
    return Pool(role, count, machine_type, accelerator_type, accelerator_count, boot_disk)


def _accelerator(check: Checker, config: Any, path: str) -> Tuple[str, int]:
    """`(GPU type, count)` of an `acceleratorConfig`."""
    check.mapping(config, path, ('count', 'type'))
    for field in ('count', 'type'):
        if field not in config:
            check.fail('%s.%s' % (path, field), 'required')
    count, gpu = _int64(config['count']), config['type']
    check.count(count, path + '.count', minimum=1, maximum=MAX_INT32)
    check.string(gpu, path + '.type')
    if gpu in UNSUPPORTED_GPUS:
        check.fail(path + '.type', '%s is not supported: %s' % (gpu, UNSUPPORTED_GPUS[gpu]))
    if gpu not in GPU_TYPES:
        check.fail(path + '.type', 'unknown GPU %s (expected one of %s)'
                   % (show(gpu), ', '.join(GPU_TYPES)))
    return gpu, count


def _disk(check: Checker, config: Any, path: str) -> Optional[DiskSpec]:
    """Vertex AI's `diskSpec` of a `diskConfig`, or None when it sets nothing."""
    check.mapping(config, path, ('bootDiskType', 'bootDiskSizeGb'))
    disk = DiskSpec()
    if 'bootDiskType' in config:
        check.choice(config['bootDiskType'], path + '.bootDiskType', _BOOT_DISK_TYPES)
        disk['bootDiskType'] = config['bootDiskType']
    if 'bootDiskSizeGb' in config:
        size = config['bootDiskSizeGb']
        check.count(size, path + '.bootDiskSizeGb', minimum=100, maximum=64000)
        disk['bootDiskSizeGb'] = size
    return disk or None


def tensorboard_problem(name: str) -> Optional[str]:
    """Why `name` is no Vertex AI TensorBoard resource name, or None."""
    if TENSORBOARD_RE.fullmatch(name):
        return None
    return ('expected a Vertex AI TensorBoard like projects/PROJECT/locations/REGION/'
            'tensorboards/ID, got %s' % show(name))


def _scheduling(check: Checker, scheduling: Any) -> Scheduling:
    """trainingInput.scheduling -> Vertex AI's `Scheduling`.

    AI Platform's `maxRunningTime` is Vertex AI's `timeout`; Vertex AI's own
    `strategy`, `restartJobOnWorkerRestart` and `disableRetries` are taken as
    they are. `maxWaitTime` becomes `maxWaitDuration`, which Vertex AI applies
    only under `strategy: FLEX_START`: without it the wait would not be
    bounded at all, so the config is refused rather than silently ignored.
    """
    if scheduling is None:
        return Scheduling()
    path = 'trainingInput.scheduling'
    check.mapping(scheduling, path, ('maxRunningTime', 'maxWaitTime', 'strategy',
                                     'restartJobOnWorkerRestart', 'disableRetries'))
    timeout, wait = (_duration(check, scheduling.get(field), '%s.%s' % (path, field))
                     for field in ('maxRunningTime', 'maxWaitTime'))
    if 'strategy' in scheduling:
        check.choice(scheduling['strategy'], path + '.strategy', STRATEGIES)
    for field in ('restartJobOnWorkerRestart', 'disableRetries'):
        if field in scheduling:
            check.boolean(scheduling[field], '%s.%s' % (path, field))
    if wait is not None and scheduling.get('strategy') != FLEX_START:
        check.fail(path + '.maxWaitTime', 'Vertex AI bounds the wait for machines only '
                   'under strategy: FLEX_START (Dynamic Workload Scheduler); add it to wait '
                   'at most %s, or drop maxWaitTime (a job then waits as long as Vertex AI '
                   'queues it)' % wait)
    return Scheduling(timeout=timeout, max_wait_duration=wait,
                      strategy=scheduling.get('strategy'),
                      restart_job_on_worker_restart=scheduling.get('restartJobOnWorkerRestart'),
                      disable_retries=scheduling.get('disableRetries'))


def _duration(check: Checker, value: Any, field: str) -> Optional[str]:
    """A duration field (`7200s`) as Vertex AI takes it, or None when unset."""
    if value is None:
        return None
    check.string(value, field)
    match = _DURATION_RE.fullmatch(value)
    if not match:
        check.fail(field, 'expected seconds like 7200s, got %s' % show(value))
    whole = match.group(1).lstrip('0') or '0'
    if len(whole) > len(str(MAX_DURATION_SECS)) or int(whole) > MAX_DURATION_SECS:
        check.fail(field, '%s is longer than Vertex AI accepts (a '
                   'google.protobuf.Duration: at most %ds)'
                   % (show(value), MAX_DURATION_SECS))
    if field.endswith('.maxRunningTime') and float(value[:-1]) == 0:
        check.fail(field, 'expected more than 0s (no job runs in 0s; leave it out '
                   'for Vertex AI\'s 7-day default)')
    return str(value)


def _budget(check: Checker, budget: Any) -> Optional[float]:
    """`budget: {maxCostUsd: N}`: the most a job may cost (`estimate.check_budget`)."""
    if budget is None:
        return None
    check.mapping(budget, 'budget', ('maxCostUsd',))
    if 'maxCostUsd' not in budget:
        check.fail('budget.maxCostUsd', 'required in budget (the most the job may cost, USD)')
    value = budget['maxCostUsd']
    check.number(value, 'budget.maxCostUsd')
    if value <= 0:
        check.fail('budget.maxCostUsd', 'expected more than 0 USD, got %s' % show(value))
    return float(value)


def _labels(check: Checker, labels: Any) -> None:
    """Vertex AI's label rules, which AI Platform's configs did not check."""
    check.mapping(labels, 'labels', None)
    if len(labels) > MAX_LABELS:
        check.fail('labels', '%d labels; Vertex AI takes at most %d' % (len(labels), MAX_LABELS))
    for key, value in labels.items():
        field = field_of('labels', key)
        check.string(key, field)
        check.string(value, field)
        if not key:
            check.fail(field, 'empty label key')
        for text, what in ((key, 'key'), (value, 'value')):
            if len(text) > MAX_LABEL_CHARS:
                check.fail(field, 'label %s %s is longer than %d characters'
                           % (what, show(text), MAX_LABEL_CHARS))
            for i, char in enumerate(text):
                starts_key = what == 'key' and i == 0
                if not _label_char(char, starts_key):
                    check.fail(field, 'label %s %s: %s is not allowed (%s)' % (
                        what, show(text), show(char),
                        'a key starts with a lowercase letter' if starts_key else
                        'lowercase letters, digits, _ and - only'))


def check_labels(labels: Mapping[str, str], source: str = '--labels') -> None:
    """Raises `UserInputError` unless `labels` follow Vertex AI's label rules
    (the labels of a serving resource, given with `--labels`)."""
    _labels(Checker(source), labels)


def _label_char(char: str, first: bool) -> bool:
    """Whether Vertex AI takes `char` in a label (`first`: a key's first one)."""
    category = unicodedata.category(char)
    if category in ('Ll', 'Lo'):
        return True
    return not first and (category.startswith('N') or char in '_-')


def _hyperparameters(check: Checker, spec: Any) -> Hyperparameters:
    """`trainingInput.hyperparameters`, checked, with AI Platform's defaults."""
    path = 'trainingInput.hyperparameters'
    check.mapping(spec, path, _HYPERPARAMETER_FIELDS)
    for field in ('goal', 'hyperparameterMetricTag', 'params'):
        if field not in spec:
            check.fail('%s.%s' % (path, field), 'required')
    check.choice(spec['goal'], path + '.goal', _GOALS)
    check.string(spec['hyperparameterMetricTag'], path + '.hyperparameterMetricTag')
    if not spec['hyperparameterMetricTag']:
        check.fail(path + '.hyperparameterMetricTag', 'must not be empty')
    trials, parallel = spec.get('maxTrials', 1), spec.get('maxParallelTrials', 1)
    check.count(trials, path + '.maxTrials', minimum=1, maximum=MAX_INT32)
    check.count(parallel, path + '.maxParallelTrials', minimum=1, maximum=MAX_INT32)
    if parallel > trials:
        check.fail(path + '.maxParallelTrials', '%d is more than maxTrials (%d)'
                   % (parallel, trials))
    if 'maxFailedTrials' in spec:
        check.count(spec['maxFailedTrials'], path + '.maxFailedTrials', maximum=MAX_INT32)
    algorithm = spec.get('algorithm', 'ALGORITHM_UNSPECIFIED')
    check.choice(algorithm, path + '.algorithm', _ALGORITHMS)
    params = spec['params']
    if not isinstance(params, list) or not params:
        check.fail(path + '.params', 'expected a non-empty list of parameters, got %s'
                   % describe(params))
    parsed: List[Parameter] = []
    for i, param in enumerate(params):
        parsed.append(_param(check, param, '%s.params[%d]' % (path, i)))
        if parsed[-1].name in [p.name for p in parsed[:-1]]:
            check.fail('%s.params[%d].parameterName' % (path, i),
                       'duplicate %s' % show(parsed[-1].name))
        if algorithm == 'GRID_SEARCH' and parsed[-1].type == 'DOUBLE':
            check.fail('%s.params[%d].type' % (path, i),
                       'GRID_SEARCH needs INTEGER, CATEGORICAL or DISCRETE parameters')
    return Hyperparameters(
        metric_tag=spec['hyperparameterMetricTag'], goal=spec['goal'], params=tuple(parsed),
        max_trials=trials, max_parallel_trials=parallel,
        max_failed_trials=spec.get('maxFailedTrials'), algorithm=algorithm)


def _param(check: Checker, param: Any, path: str) -> Parameter:
    """One of `hyperparameters.params`, checked."""
    check.mapping(param, path, _PARAM_FIELDS)
    for field in ('parameterName', 'type'):
        if field not in param:
            check.fail('%s.%s' % (path, field), 'required')
    name = param['parameterName']
    check.string(name, path + '.parameterName')
    if not _PARAM_NAME_RE.fullmatch(name):
        check.fail(path + '.parameterName', 'expected a trainer flag name like '
                   'learning-rate, got %s' % show(name))
    if name in _RESERVED_PARAMS:
        check.fail(path + '.parameterName', '--%s is set by the submission' % name)
    kind = param['type']
    check.choice(kind, path + '.type', _PARAM_TYPES)
    allowed = {'DOUBLE': ('minValue', 'maxValue', 'scaleType'),
               'INTEGER': ('minValue', 'maxValue', 'scaleType'),
               'CATEGORICAL': ('categoricalValues',),
               'DISCRETE': ('discreteValues', 'scaleType')}[kind]
    for field in param:
        if field not in ('parameterName', 'type') + allowed:
            check.fail(field_of(path, field), 'not used with type %s' % kind)
    for field in allowed:
        if field != 'scaleType' and field not in param:
            check.fail('%s.%s' % (path, field), 'required with type %s' % kind)
    values = _param_values(check, param, path)
    if 'scaleType' in param:
        scale = param['scaleType']
        check.choice(scale, path + '.scaleType', _SCALE_TYPES)
        if scale in ('UNIT_LOG_SCALE', 'UNIT_REVERSE_LOG_SCALE') and min(values) <= 0:
            check.fail(path + '.scaleType', '%s needs values > 0' % scale)
    return Parameter(name=name, type=kind, min_value=param.get('minValue'),
                     max_value=param.get('maxValue'),
                     categorical_values=tuple(param.get('categoricalValues', ())),
                     discrete_values=tuple(param.get('discreteValues', ())),
                     scale_type=param.get('scaleType'))


def _param_values(check: Checker, param: Document, path: str) -> Tuple[Number, ...]:
    """A parameter's values, checked: what a scale type must keep above 0 (the
    lower bound, every discrete value; none of a categorical one)."""
    kind = param['type']
    if kind in ('DOUBLE', 'INTEGER'):
        low, high = param['minValue'], param['maxValue']
        check.number(low, path + '.minValue', integral=kind == 'INTEGER')
        check.number(high, path + '.maxValue', integral=kind == 'INTEGER')
        if low > high:
            check.fail(path + '.minValue', '%s is above maxValue %s' % (low, high))
        return (low,)
    if kind == 'CATEGORICAL':
        check.string_list(param['categoricalValues'], path + '.categoricalValues')
        if not param['categoricalValues']:
            check.fail(path + '.categoricalValues', 'must not be empty')
        return ()
    values = param['discreteValues']
    if not isinstance(values, list) or not values:
        check.fail(path + '.discreteValues', 'expected a non-empty list of '
                   'numbers, got %s' % describe(values))
    for j, value in enumerate(values):
        check.number(value, '%s.discreteValues[%d]' % (path, j))
    if any(a >= b for a, b in zip(values, values[1:])):
        check.fail(path + '.discreteValues', 'must be strictly increasing')
    return tuple(values)
