"""Checks that run before anything is uploaded or provisioned.

A mistake found by a provisioned cluster costs minutes and money; these
checks find it on the user's machine instead:

- the trainer flags, parsed by the trainer's own parser as every task gets
  them (and with each tuned parameter at its bounds or values);
- per pool: `--num-gpus` above the GPUs a pool's machines have;
- in the bucket: the data paths in the flags exist (globs match something),
  the buckets of the job-dir and of the staged files are writable, and a
  job-dir that already holds checkpoints was trained with the same model.

Storage is read through the `storage v1` discovery service (`api`), with
`STORAGE_EMULATOR_HOST` honoured as google-cloud-storage does.
"""
import re

from estimator_trainers import job_dir as job_dir_lib
from estimator_trainers.cluster import PS
from estimator_trainers.errors import FlagError
from estimator_trainers.errors import UserInputError
from estimator_trainers.tools.cloud import api
from estimator_trainers.tools.cloud import configs
from estimator_trainers.tools.cloud.staging import split_gs_uri

WRITE_PERMISSIONS = ('storage.objects.create', 'storage.objects.get',
                     'storage.objects.list')
NUM_GPUS_FLAG = '--num-gpus'
_GLOB_CHARS = re.compile(r'[*?\[]')
_MAX_LIST_PAGES = 10


def parse_trainer_args(trainer, argv):
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
        return trainer.parse_args(list(argv))
    except FlagError as e:
        raise UserInputError('trainer flags: %s (python -m %s --help lists them)'
                             % (e, trainer.module), flag=e.flag) from None


def check_trainer_flags(sub):
    """Parses the job's trainer flags and checks them against every pool.

    Returns:
      The parsed flags.

    Raises:
      UserInputError: a flag the trainer rejects, a tuned parameter it does
        not take or a value it refuses, a tuning metric it does not evaluate,
        or `--num-gpus` above the GPUs of a pool that computes (naming the pool).
    """
    _check_tuning_metric(sub.trainer, sub.config)
    argv = sub.trainer_args(job_dir_flag=True)
    parsed = parse_trainer_args(sub.trainer, argv)
    trials = [parse_trainer_args(sub.trainer, argv + extra)
              for extra in _tuned_flag_samples(sub.config)]
    for pool in sub.config.pools:
        if pool.role == PS:
            continue  # the runner never gives a parameter server GPUs
        for flags in [parsed] + trials:
            _check_gpus(pool, flags)
    return parsed


def _check_tuning_metric(trainer, config):
    """Refuses a study whose metric the trainer's evaluations never report
    (the trial would fail after training, at its report)."""
    if not config.is_tuning:
        return
    tag = config.hyperparameters['hyperparameterMetricTag']
    if tag.startswith('eval/'):
        tag = tag[len('eval/'):]
    if tag not in trainer.eval_metrics:
        raise UserInputError(
            'trainingInput.hyperparameters.hyperparameterMetricTag: %r is not a metric '
            'the %s trainer evaluates (expected one of: %s)'
            % (tag, trainer.name, ', '.join(trainer.eval_metrics)))


def _check_gpus(pool, parsed):
    wanted = getattr(parsed, NUM_GPUS_FLAG[2:].replace('-', '_'), None)
    if wanted and wanted > pool.accelerator_count:
        type_field, _, config_field = configs.ROLE_FIELDS[pool.role]
        raise UserInputError(
            '%s=%d but the %s pool (%s %s) has %s; give trainingInput.%s an '
            'acceleratorConfig with %d GPUs or lower %s'
            % (NUM_GPUS_FLAG, wanted, pool.role, type_field,
               pool.machine_type, '%d GPU(s)' % pool.accelerator_count
               if pool.accelerator_count else 'no GPUs', config_field, wanted,
               NUM_GPUS_FLAG))


def _tuned_flag_samples(config):
    """`[--name=value]` lists for each tuned parameter at its bounds and values,
    as Vertex AI will pass them to trials."""
    if not config.is_tuning:
        return []
    samples = []
    for param in config.hyperparameters['params']:
        kind = param['type']
        if kind in ('DOUBLE', 'INTEGER'):
            values = [param['minValue'], param['maxValue']]
            if kind == 'INTEGER':
                values = [int(v) for v in values]
        elif kind == 'CATEGORICAL':
            values = param['categoricalValues']
        else:
            values = param['discreteValues']
        samples.extend(['--%s=%s' % (param['parameterName'], value)] for value in values)
    return samples


def data_paths(trainer, parsed):
    """`(flag, path)` for each data path the flags name (the trainer's data flags)."""
    paths = []
    for flag, _ in trainer.cloud_data_args('gs://bucket'):
        value = getattr(parsed, flag[2:].replace('-', '_'))
        for path in value if isinstance(value, list) else [value]:
            paths.append((flag, path))
    return paths


class BucketChecks:
    """Reads Cloud Storage through the `storage v1` service; writes nothing."""

    def __init__(self, service, project):
        self.service = service
        self.project = project

    def _run(self, request, action):
        return api.execute(request, action, 'storage', self.project)

    def check_data(self, flag, path):
        """Raises unless `path` (a file, a directory or a glob) names objects."""
        if not path.startswith('gs://'):
            raise UserInputError('%s %s: expected a gs:// path (the job\'s machines '
                                 'cannot read files on this one)' % (flag, path))
        bucket, name = split_gs_uri(path)
        try:
            if _GLOB_CHARS.search(name):
                if not self._glob_matches(bucket, name):
                    raise UserInputError('%s %s: no object matches' % (flag, path))
                return
            if name and self._object(bucket, name, 'checking %s %s' % (flag, path)):
                return
            prefix = name.rstrip('/') + '/' if name else ''
            listing = self._run(self.service.objects().list(
                bucket=bucket, prefix=prefix, maxResults=1, fields='items/name'),
                'listing %s for %s' % (path, flag))
        except api.ApiError as e:
            if e.status == 404:  # objects.list answers 404 only for the bucket
                raise UserInputError('%s %s: bucket gs://%s does not exist'
                                     % (flag, path, bucket)) from None
            raise
        if not listing.get('items'):
            raise UserInputError('%s %s: no such object or directory in the bucket'
                                 % (flag, path))

    def _object(self, bucket, name, action):
        try:
            return self._run(self.service.objects().get(bucket=bucket, object=name),
                             action)
        except api.ApiError as e:
            if e.status == 404:
                return None
            raise

    def _glob_matches(self, bucket, pattern):
        prefix = pattern[:_GLOB_CHARS.search(pattern).start()]
        regex = glob_regex(pattern)
        objects = self.service.objects()
        request = objects.list(bucket=bucket, prefix=prefix, fields='items/name,nextPageToken')
        for _ in range(_MAX_LIST_PAGES):
            if request is None:
                break
            response = self._run(request, 'listing gs://%s/%s' % (bucket, prefix))
            if any(regex.fullmatch(item['name']) for item in response.get('items', [])):
                return True
            request = objects.list_next(request, response)
        return False

    def check_writable(self, uri, what):
        """Raises unless these credentials may create objects in `uri`'s bucket."""
        bucket, _ = split_gs_uri(uri)
        try:
            answer = self._run(self.service.buckets().testIamPermissions(
                bucket=bucket, permissions=list(WRITE_PERMISSIONS)),
                'checking access to bucket gs://%s' % bucket)
        except api.ApiError as e:
            if e.status == 404:
                raise UserInputError('%s %s: bucket gs://%s does not exist'
                                     % (what, uri, bucket)) from None
            raise
        missing = sorted(set(WRITE_PERMISSIONS) - set(answer.get('permissions', [])))
        if missing:
            raise UserInputError(
                '%s %s: these credentials cannot write to bucket gs://%s (missing %s); '
                'grant them roles/storage.objectAdmin there'
                % (what, uri, bucket, ', '.join(missing)))

    def check_job_dir_model(self, job_dir, params):
        """Raises when `job_dir` holds checkpoints of a model with other `params`."""
        bucket, name = split_gs_uri(job_dir)
        path = (job_dir_lib.model_params_path(name.rstrip('/')) if name
                else job_dir_lib.MODEL_PARAMS_FILE)
        action = 'reading gs://%s/%s' % (bucket, path)
        if self._object(bucket, path, action) is None:
            return
        data = self._run(self.service.objects().get_media(bucket=bucket, object=path),
                         action)
        if isinstance(data, bytes):
            data = data.decode('utf-8', errors='replace')
        recorded = job_dir_lib.parse_model_params(data, 'gs://%s/%s' % (bucket, path))
        job_dir_lib.compare_model_params(recorded, params, job_dir)


def check_storage(checks, sub, parsed, params, bucket_uri):
    """The bucket checks of a submission, in the order a user would fix them.

    Args:
      checks: a `BucketChecks`.
      sub: the `Submission`.
      parsed: the chief's parsed trainer flags.
      params: `sub.trainer.model_params(parsed)` (None: not compared).
      bucket_uri: where the package (or build context) will be staged.
    """
    for flag, path in data_paths(sub.trainer, parsed):
        checks.check_data(flag, path)
    checks.check_writable(sub.job_dir, '--job-dir')
    if split_gs_uri(bucket_uri)[0] != split_gs_uri(sub.job_dir)[0]:
        checks.check_writable(bucket_uri, '--bucket')
    if params is not None and not sub.config.is_tuning:
        checks.check_job_dir_model(sub.job_dir, params)


def glob_regex(pattern):
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
