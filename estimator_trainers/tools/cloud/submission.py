"""What a cloud submission runs: trainer module, flags, job-dir, image.

One `Submission` holds the facts that every target renders in its own format:
the Vertex AI job bodies (`jobs`), the legacy AI Platform body (`jobs`) and
the Kubeflow TFJob manifest (`tfjob`). What each worker pool runs is decided
here (`pool_program`): a declared trainer (its module in the built image, or
its sdist on a prebuilt executor image), or a user's package and module
(`gcloud ai-platform` submissions), which this project's image installs at
start-up with `bootstrap`, or a container of the user's own.
"""
import dataclasses
import datetime
import re

from estimator_trainers.errors import UserInputError

JOB_NAME_RE = re.compile(r'[A-Za-z][A-Za-z0-9_]{0,127}')
# The module this project's image runs a user's package with.
BOOTSTRAP_MODULE = 'estimator_trainers.tools.cloud.bootstrap'
# Vertex AI's prebuilt training images install packages themselves
# (`pythonPackageSpec.executorImageUri`); any other image that runs a user's
# package must be this project's (it has `bootstrap`).
PREBUILT_IMAGE_PREFIX = 'us-docker.pkg.dev/vertex-ai/training/'


def default_args(trainer, bucket_uri, user_args):
    """`--flag=value` for each of `trainer`'s cloud data flags that `user_args` does not set."""
    return ['%s=%s' % (flag, value)
            for flag, value in trainer.data_trainer(user_args).cloud_data_args(bucket_uri)
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
        two above); for a user's package, this project's image that
        installs it at start-up.
      module: the user package's module (`trainer` is None then), or None.
      package_uris: the user's staged packages (gs://), installed together.
      pool_images: {role: image} of pools given their own image (a prebuilt
        Vertex AI image there installs the packages itself; any other one
        runs its own entrypoint, or `bootstrap` when it runs a package).
      container_commands: {role: [command]} for containers of the user's own.
      primary: TF_CONFIG's name of pool 0 for `bootstrap` (`chief`/`master`).
      enable_web_access, kms_key: `jobSpec.enableWebAccess`, `encryptionSpec`.
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
    module: str = None
    package_uris: tuple = ()
    pool_images: dict = dataclasses.field(default_factory=dict)
    container_commands: dict = dataclasses.field(default_factory=dict)
    primary: str = 'chief'
    enable_web_access: bool = False
    kms_key: str = None

    @property
    def is_package(self):
        """A user's package or container (not a declared trainer)."""
        return self.trainer is None

    def trainer_args(self, job_dir_flag):
        """Trainer flags for every task of the job.

        Args:
          job_dir_flag: add `--job-dir`. Vertex tuning trials go without it, so
            that each trial defaults to its own `$AIP_MODEL_DIR`; the legacy
            service adds it from `jobDir` itself.
        """
        args = list(self.args)
        if self.is_package:
            # As AI Platform did: every task (every trial too) gets the job-dir.
            return args + (['--job-dir=%s' % self.job_dir] if self.job_dir else [])
        if job_dir_flag:
            args.append('--job-dir=%s' % self.job_dir)
        if self.config.is_tuning:
            args.append('--hypertune-metric=%s'
                        % self.config.hyperparameters['hyperparameterMetricTag'])
        return args

    def pool_program(self, role, job_dir_flag):
        """What pool `role` runs: `{'containerSpec': ...}` or `{'pythonPackageSpec': ...}`."""
        args = self.trainer_args(job_dir_flag)
        if not self.is_package:
            if self.image_uri:
                return {'containerSpec': {'imageUri': self.image_uri,
                                          'command': ['python', '-m', self.trainer.module],
                                          'args': args}}
            return {'pythonPackageSpec': {'executorImageUri': self.executor_image,
                                          'packageUris': [self.package_uri],
                                          'pythonModule': self.trainer.module,
                                          'args': args}}
        image = self.pool_images.get(role) or self.pool_images.get('chief')
        if self.module is None:  # the user's own container, its entrypoint
            spec = {'imageUri': image, 'args': args}
            command = self.container_commands.get(role) or self.container_commands.get('chief')
            if command:
                spec['command'] = list(command)
            return {'containerSpec': spec}
        if image and image.startswith(PREBUILT_IMAGE_PREFIX):
            return {'pythonPackageSpec': {'executorImageUri': image,
                                          'packageUris': list(self.package_uris),
                                          'pythonModule': self.module, 'args': args}}
        return {'containerSpec': {
            'imageUri': image or self.image_uri,
            'command': ['python', '-m', BOOTSTRAP_MODULE],
            'args': bootstrap_args(self.package_uris, self.module, self.primary, args)}}


def bootstrap_args(package_uris, module, primary, args):
    """The args of `python -m bootstrap`: install these packages, then run `module` with `args`."""
    return (['--package-uri=%s' % uri for uri in package_uris]
            + ['--module-name=%s' % module]
            + (['--tf-config-primary=%s' % primary] if primary != 'chief' else [])
            + ['--'] + list(args))
