"""Checks that run before anything is uploaded or provisioned.

A mistake found by a provisioned cluster costs minutes and money; these
checks find it on the user's machine instead:

- every replica's start-up (`check_replicas`): for a trainer of this
  project (a `plan.Trainer`, or a user's `--package-path` of one), the
  flags each pool gets are parsed by the trainer's own parser (with each
  tuned parameter at its bounds or values), and each replica's start-up
  decisions (`startup.decide`: cluster, devices, strategy, steps per loop)
  are made in the environment its target will give it (`replicas`: Vertex
  AI's, the Kubeflow operator's or JobSet's, `ENVIRONMENTS`), on its pool's
  GPUs, so a job that any replica would refuse is refused here, naming the
  pool, the replica and the reason;
- in the bucket: the data paths in the flags exist (globs match something),
  the buckets of the job-dir and of the staged files are writable, and a
  job-dir that already holds checkpoints was trained with the same model.

Storage is read with google-cloud-storage (`BucketChecks`), the tools' one
storage client, which honours `STORAGE_EMULATOR_HOST` itself.
"""
import argparse
import dataclasses
import re
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, TypeVar

from estimator_trainers import google_api
from estimator_trainers import job_dir as job_dir_lib
from estimator_trainers import startup
from estimator_trainers.errors import FlagError
from estimator_trainers.errors import UserInputError
from estimator_trainers import declaration
from estimator_trainers.tools.cloud import actions
from estimator_trainers.tools.cloud import gcs_paths
from estimator_trainers.tools.cloud import k8s
from estimator_trainers.tools.cloud import replicas as replicas_lib
from estimator_trainers.tools.cloud.configs import Pool, TrainingConfig
from estimator_trainers.tools.cloud.plan import JobPlan

WRITE_PERMISSIONS = ('storage.objects.create', 'storage.objects.get',
                     'storage.objects.list')
_GLOB_CHARS = re.compile(r'[*?\[]')
_MAX_LIST_PAGES = 10
_LIST_PAGE_SIZE = 1000
VERTEX = actions.VERTEX
_T = TypeVar('_T')
# Target -> the environment of each replica of a plan, given {role: replicas}.
ENVIRONMENTS: Dict[actions.Target, Callable[[JobPlan, Mapping[str, int]],
                                           Sequence[replicas_lib.Replica]]] = {
    VERTEX: lambda plan, counts: replicas_lib.vertex(counts),
    'tfjob': lambda plan, counts: replicas_lib.tfjob(counts, k8s.resource_name(plan, 'tfjob')),
    'jobset': lambda plan, counts: replicas_lib.jobset(counts,
                                                       k8s.resource_name(plan, 'jobset')),
}
# A job-dir's model_params.json is a few hundred bytes; a larger one is not read.
MAX_MODEL_PARAMS_BYTES = 1024 * 1024


def parse_trainer_args(trainer: declaration.Trainer, argv: Sequence[str]) -> argparse.Namespace:
    """Parses `argv` with the trainer's own parser, as its tasks will.

    Returns:
      The `argparse.Namespace`.

    Raises:
      UserInputError: the parser's own refusal (an unknown flag, a bad
        value), naming the trainer, with the flag it names.
    """
    if '-h' in argv or '--help' in argv:
        raise UserInputError('--help is not a flag to submit; run python -m %s --help'
                             % trainer.module, flag='--help')
    try:
        parsed: argparse.Namespace = trainer.parse_args(list(argv))
        return parsed
    except FlagError as e:
        raise UserInputError('trainer flags: %s (python -m %s --help lists them)'
                             % (e, trainer.module), flag=e.flag) from None


@dataclasses.dataclass(frozen=True)
class Checked:
    """What the start-up checks of a job found.

    Attributes:
      parsed: the chief's parsed trainer flags (None: not a trainer of this
        project, nothing parsed).
      notes: one line each, what runs differently from what was written.
    """
    parsed: Optional[argparse.Namespace] = None
    notes: Tuple[str, ...] = ()


def check_replicas(plan: JobPlan, target: actions.Target = VERTEX) -> Checked:
    """Every replica's start-up, as it will happen on `target` (`ENVIRONMENTS`).

    Returns:
      A `Checked`.

    Raises:
      UserInputError: a flag the trainer rejects, a tuned parameter it does
        not take or a value it refuses, a tuning metric it does not evaluate,
        or a replica that would refuse to start (naming its pool and index).
    """
    trainer = plan.declared
    if trainer is None:
        return Checked()
    _check_tuning_metric(trainer, plan.config)
    argv = list(plan.task_args(job_dir_flag=True))
    parsed = parse_trainer_args(trainer, argv)
    trials = [parse_trainer_args(trainer, argv + extra)
              for extra in _tuned_flag_samples(plan.config)]
    pools = {pool.role.name: pool for pool in plan.config.pools}
    renamed = plan.program.renames_primary(plan)
    notes: Dict[str, Dict[int, str]] = {}  # note -> the pools it applies to
    for replica in ENVIRONMENTS[target](plan, {role: pool.replica_count
                                               for role, pool in pools.items()}):
        env = dict(replica.env)
        if renamed:  # `bootstrap` names pool 0 as AI Platform did
            env = replicas_lib.package_env(env, plan.primary)
        pool = pools[replica.role.name]
        for flags in [parsed] + trials:
            try:
                decided = startup.decide(trainer, flags, env,
                                         visible_gpus=pool.accelerator_count)
            except UserInputError as e:
                hint = ('; give trainingInput.%s an acceleratorConfig with %d GPUs or lower '
                        '--num-gpus' % (replica.role.config_field, flags.num_gpus)
                        if e.flag == '--num-gpus' else '')
                raise UserInputError('worker pool %d (%s, %s), replica %d would refuse to '
                                     'start: %s%s' % (replica.role.pool, replica.role.name,
                                                      _machine(pool), replica.index, e, hint),
                                     flag=e.flag) from None
            for note in decided.notes:
                notes.setdefault(note, {})[replica.role.pool] = replica.role.name
    return Checked(parsed=parsed, notes=tuple(
        'worker pool%s %s: %s' % ('s' if len(pools_) > 1 else '', ', '.join(
            '%d (%s)' % item for item in sorted(pools_.items())), note)
        for note, pools_ in notes.items()))


def _machine(pool: Pool) -> str:
    if not pool.accelerator_count:
        return '%s with no GPUs' % pool.machine_type
    return '%s with %d x %s' % (pool.machine_type, pool.accelerator_count,
                                pool.accelerator_type)


def _check_tuning_metric(trainer: declaration.Trainer, config: TrainingConfig) -> None:
    """Refuses a study whose metric the trainer's evaluations never report
    (the trial would fail after training, at its report)."""
    if config.hyperparameters is None:
        return
    problem = trainer.unknown_metric(config.hyperparameters.metric_tag)
    if problem:
        raise UserInputError('trainingInput.hyperparameters.hyperparameterMetricTag: %s'
                             % problem)


def _tuned_flag_samples(config: TrainingConfig) -> List[List[str]]:
    """`[--name=value]` lists for each tuned parameter at its bounds and values,
    as Vertex AI will pass them to trials."""
    if config.hyperparameters is None:
        return []
    return [['--%s=%s' % (param.name, value)] for param in config.hyperparameters.params
            for value in param.samples()]


def data_paths(trainer: declaration.Trainer,
               parsed: argparse.Namespace) -> List[Tuple[str, str]]:
    """`(flag, path)` for each data path the flags name (the trainer's data flags)."""
    paths: List[Tuple[str, str]] = []
    for flag, _ in trainer.cloud_data_args('gs://bucket'):
        value = getattr(parsed, flag[2:].replace('-', '_'))
        for path in value if isinstance(value, list) else [value]:
            paths.append((flag, path))
    return paths


class BucketChecks:
    """Reads Cloud Storage with a google-cloud-storage client; writes nothing.

    Every request waits at most `google_api.TIMEOUT_SECS` and is retried at most
    `google_api.NUM_RETRIES` times (`google_api.storage_call`), not the library's default
    of retrying for two minutes.
    """

    def __init__(self, client: Any, project: Optional[str],
                 missing_hint: Optional[Callable[[str, str], str]] = None) -> None:
        """
        Args:
          client: a `google.cloud.storage.Client` (`cli.Backend.storage`).
          project: the project, for messages.
          missing_hint: `(flag, path) -> text` added to the line of a data path that
            is not there (on local storage: the flag that gives it), or None.
        """
        self.client = client
        self.project = project
        self.missing_hint = missing_hint

    def _missing(self, flag: str, path: str, why: str) -> UserInputError:
        hint = self.missing_hint(flag, path) if self.missing_hint else ''
        return UserInputError('%s %s: %s%s' % (flag, path, why, hint), flag=flag)

    def _run(self, call: Callable[[], _T], action: str) -> _T:
        result: _T = google_api.storage_call(call, action, self.project,
                                             self.client.api_endpoint)
        return result

    def check_data(self, flag: str, path: str) -> None:
        """Raises unless `path` (a file, a directory or a glob) names objects."""
        reason = gcs_paths.problem(path)
        if reason:
            raise UserInputError('%s %s: %s' % (flag, path, reason), flag=flag)
        bucket, name = gcs_paths.split(path)
        try:
            if _GLOB_CHARS.search(name):
                if not self._run(lambda: self._glob_matches(bucket, name),
                                 'listing gs://%s/%s for %s' % (bucket, name, flag)):
                    raise self._missing(flag, path, 'no object matches')
                return
            if name and self._blob(bucket, name, 'checking %s %s' % (flag, path)):
                return
            prefix = name.rstrip('/') + '/' if name else ''
            found = self._run(lambda: list(self.client.list_blobs(
                bucket, prefix=prefix, max_results=1, fields='items/name',
                timeout=google_api.TIMEOUT_SECS, retry=None)), 'listing %s for %s' % (path, flag))
        except google_api.ApiError as e:
            if e.status == 404:  # a listing answers 404 only for the bucket
                raise self._missing(flag, path, 'bucket gs://%s does not exist'
                                    % bucket) from None
            raise
        if not found:
            raise self._missing(flag, path, 'no such object or directory in the bucket')

    def _blob(self, bucket: str, name: str, action: str) -> Any:
        """The object's metadata (a `Blob`), or None when there is none."""
        return self._run(lambda: self.client.bucket(bucket).get_blob(
            name, timeout=google_api.TIMEOUT_SECS, retry=None), action)

    def _glob_matches(self, bucket: str, pattern: str) -> bool:
        """Whether an object in the first `_MAX_LIST_PAGES` pages matches."""
        glob = _GLOB_CHARS.search(pattern)
        prefix = pattern[:glob.start()] if glob else pattern
        regex = glob_regex(pattern)
        listing = self.client.list_blobs(bucket, prefix=prefix, fields='items/name,nextPageToken',
                                         page_size=_LIST_PAGE_SIZE,
                                         timeout=google_api.TIMEOUT_SECS, retry=None)
        for _, page in zip(range(_MAX_LIST_PAGES), listing.pages):
            if any(regex.fullmatch(blob.name) for blob in page):
                return True
        return False

    def check_writable(self, uri: str, what: str) -> None:
        """Raises unless these credentials may create objects in `uri`'s bucket."""
        bucket, _ = gcs_paths.split(uri)
        try:
            granted = self._run(lambda: self.client.bucket(bucket).test_iam_permissions(
                list(WRITE_PERMISSIONS), timeout=google_api.TIMEOUT_SECS, retry=None),
                'checking access to bucket gs://%s' % bucket)
        except google_api.ApiError as e:
            if e.status == 404:
                raise UserInputError('%s %s: bucket gs://%s does not exist'
                                     % (what, uri, bucket), flag=what) from None
            raise
        missing = sorted(set(WRITE_PERMISSIONS) - set(granted or ()))
        if missing:
            raise UserInputError(
                '%s %s: these credentials cannot write to bucket gs://%s (missing %s); '
                'grant them roles/storage.objectAdmin there'
                % (what, uri, bucket, ', '.join(missing)), flag=what)

    def check_job_dir_model(self, job_dir: str, params: Mapping[str, Any]) -> None:
        """Raises when `job_dir` holds checkpoints of a model with other `params`."""
        bucket, name = gcs_paths.split(job_dir)
        path = (job_dir_lib.model_params_path(name.rstrip('/')) if name
                else job_dir_lib.MODEL_PARAMS_FILE)
        uri = 'gs://%s/%s' % (bucket, path)
        blob = self._blob(bucket, path, 'reading %s' % uri)
        if blob is None:
            return
        if (blob.size or 0) > MAX_MODEL_PARAMS_BYTES:
            raise UserInputError('--job-dir %s: %s is %d bytes, not the model parameters a '
                                 'trainer writes (a few hundred bytes); use a new --job-dir'
                                 % (job_dir, uri, blob.size), flag='--job-dir', path=uri)
        data = self._run(lambda: blob.download_as_bytes(
            end=MAX_MODEL_PARAMS_BYTES, timeout=google_api.TIMEOUT_SECS, retry=None),
            'reading %s' % uri)
        recorded = job_dir_lib.parse_model_params(data.decode('utf-8', errors='replace'), uri)
        job_dir_lib.compare_model_params(recorded, params, job_dir)


def check_storage(checks: BucketChecks, plan: JobPlan,
                  parsed: Optional[argparse.Namespace]) -> None:
    """The bucket checks of a job, in the order a user would fix them.

    Args:
      checks: a `BucketChecks`.
      plan: the `plan.JobPlan`.
      parsed: the chief's parsed trainer flags (`Checked.parsed`), or None.
    """
    trainer = plan.declared  # parsed flags are a declared trainer's
    if parsed is not None and trainer is not None:
        for flag, path in data_paths(trainer, parsed):
            checks.check_data(flag, path)
    if plan.job_dir:
        checks.check_writable(plan.job_dir, '--job-dir')
    if plan.staging and (not plan.job_dir or gcs_paths.split(plan.staging)[0] !=
                         gcs_paths.split(plan.job_dir)[0]):
        checks.check_writable(plan.staging, plan.staging_flag)
    if parsed is not None and trainer is not None and plan.trainer_job_dir and \
            not plan.config.is_tuning:
        checks.check_job_dir_model(plan.trainer_job_dir, trainer.model_params(parsed))


def glob_regex(pattern: str) -> 're.Pattern[str]':
    """A gs:// object-name glob as TensorFlow reads it (`*` and `?` stay within
    one path segment, `[...]` a character class) -> compiled regex."""
    out = []
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if char == '*':
            out.append('[^/]*')
        elif char == '?':
            out.append('[^/]')
        elif char == '[' and ']' in pattern[i + 1:]:
            end = pattern.index(']', i + 1)
            body = pattern[i + 1:end]
            out.append('[%s%s]' % ('^' if body.startswith('!') else '',
                                   body.lstrip('!').replace('\\', '\\\\')))
            i = end
        else:
            out.append(re.escape(char))
        i += 1
    return re.compile(''.join(out))
