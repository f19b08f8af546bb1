"""What a cloud submission runs: trainer module, flags, job-dir, image.

One `Submission` holds the facts that every target renders in its own format:
the Vertex AI job bodies (`jobs`), the legacy AI Platform body (`jobs`) and
the Kubeflow TFJob manifest (`tfjob`).
"""
import dataclasses
import datetime
import re

from estimator_trainers.errors import UserInputError

JOB_NAME_RE = re.compile(r'[A-Za-z][A-Za-z0-9_]{0,127}')


def default_args(trainer, bucket_uri, user_args):
    """`--flag=value` for each of `trainer`'s cloud data flags that `user_args` does not set."""
    return ['%s=%s' % (flag, value) for flag, value in trainer.cloud_data_args(bucket_uri)
            if not has_flag(user_args, flag)]


def has_flag(args, flag):
    """True when `args` sets `flag` as `--flag value` or `--flag=value`."""
    return any(arg == flag or arg.startswith(flag + '=') for arg in args)


def default_job_name(model, now=None):
    """`train_<model>_<YYYYmmdd_HHMMSS>` (UTC), as the reference scripts named jobs."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    return 'train_%s_%s' % (model, now.strftime('%Y%m%d_%H%M%S'))


def check_job_name(name):
    """Job names double as legacy job ids and storage paths: `[A-Za-z][A-Za-z0-9_]*`."""
    if not JOB_NAME_RE.fullmatch(name):
        raise UserInputError(
            '--job-name %r: expected a letter followed by letters, digits or '
            'underscores (at most 128 characters)' % name)
    return name


@dataclasses.dataclass(frozen=True)
class Submission:
    """Everything a job body or manifest needs.

    Attributes:
      job_name: display name / legacy job id.
      trainer: the `runner.Trainer` to run (from `registry.get`).
      config: the validated `TrainingConfig`.
      project, region: where the job runs.
      job_dir: gs:// directory for checkpoints and exports (Vertex
        `baseOutputDirectory`).
      args: trainer flags from the config, the data defaults and the user,
        without `--job-dir` and `--hypertune-metric` (added per target).
      package_uri: staged sdist for `pythonPackageSpec`, or None.
      executor_image: prebuilt image that installs `package_uri`.
      image_uri: custom container with the package inside (instead of the
        two above).
    """
    job_name: str
    trainer: object
    config: object
    project: str
    region: str
    job_dir: str
    args: tuple
    package_uri: str = None
    executor_image: str = None
    image_uri: str = None

    def trainer_args(self, job_dir_flag):
        """Trainer flags for every task of the job.

        Args:
          job_dir_flag: add `--job-dir`. Vertex tuning trials go without it, so
            that each trial defaults to its own `$AIP_MODEL_DIR`; the legacy
            service adds it from `jobDir` itself.
        """
        args = list(self.args)
        if job_dir_flag:
            args.append('--job-dir=%s' % self.job_dir)
        if self.config.is_tuning:
            args.append('--hypertune-metric=%s'
                        % self.config.hyperparameters['hyperparameterMetricTag'])
        return args
