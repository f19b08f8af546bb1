"""The typed plan of a cloud job: made by a front, carried out by `pipeline`.

Each front turns its own words into a `JobPlan` (`train_cloud`: a trainer
name and a trainingInput config; `ai_platform`: a gcloud command line and
its `--config` Job), and nothing else: the pipeline decides the order of
what happens to it, and every target renders it in its own format (a Vertex
AI CustomJob in `jobs`, a Kubeflow TFJob in `tfjob`, the local replicas of a
rehearsal in `rehearsal`). What a plan runs is one of:

- `Trainer`: a trainer this project declares (`registry`), run as
  `python -m <module>` in this project's image, or from this repository's
  sdist on a prebuilt Vertex AI image;
- `Package`: a user's package and module (`--package-path`, `--packages`,
  `--module-name`), installed at start-up by this project's image
  (`bootstrap`) or by a prebuilt Vertex AI image;
- `Container`: a user's own containers, run with their entrypoints.

A plan is made before anything is built; the pipeline fills in what
building reveals (`resolved`: the staged package URIs, the content-hash tag
of this project's image), so every rendering reads one value.

A version to serve is a `ServingPlan` (`versions create`'s words, for
`pipeline.deploy`).
"""
import dataclasses
import datetime
import os
import re
from typing import Any, Iterable, Iterator, List, Literal, Mapping, Optional, Protocol
from typing import Sequence, Tuple

from estimator_trainers import declaration
from estimator_trainers.errors import UserInputError
from estimator_trainers.tools.cloud import gcs_paths
from estimator_trainers.tools.cloud import roles
from estimator_trainers.tools.cloud import staging
from estimator_trainers.tools.cloud.configs import TENSORBOARD_RE
from estimator_trainers.tools.cloud.configs import TrainingConfig
from estimator_trainers.tools.cloud.roles import RoleName

CHIEF = roles.CHIEF
# The module this project's image runs a user's package with.
BOOTSTRAP_MODULE = 'estimator_trainers.tools.cloud.bootstrap'
# Vertex AI's prebuilt training images install packages themselves
# (`pythonPackageSpec.executorImageUri`); any other image that runs a package
# must be this project's (it has `bootstrap`).
PREBUILT_IMAGE_PREFIX = 'us-docker.pkg.dev/vertex-ai/training/'
# The Vertex AI collections of training jobs.
Collection = Literal['customJobs', 'hyperparameterTuningJobs']
CUSTOM_JOBS: Collection = 'customJobs'
TUNING_JOBS: Collection = 'hyperparameterTuningJobs'
JOB_NAME_RE = re.compile(r'[A-Za-z][A-Za-z0-9_]{0,127}')


def default_job_name(model: str, now: Optional[datetime.datetime] = None) -> str:
    """`train_<model>_<YYYYmmdd_HHMMSS>` (UTC), as the reference scripts named jobs."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    return 'train_%s_%s' % (model, now.strftime('%Y%m%d_%H%M%S'))


def check_job_name(name: str) -> str:
    """Job names double as AI Platform job ids and storage paths: `[A-Za-z][A-Za-z0-9_]*`."""
    if not JOB_NAME_RE.fullmatch(name):
        raise UserInputError(
            '--job-name %r: expected a letter followed by letters, digits or '
            'underscores (at most 128 characters)' % name, flag='--job-name')
    return name


class Program(Protocol):
    """What a plan runs: each kind (`Trainer`, `Package`, `Container`) answers
    what the pipeline and the renderings ask of it."""

    @property
    def declared(self) -> Optional[declaration.Trainer]:
        """This project's trainer it runs, whose flags and every replica's
        start-up are checked before anything is uploaded; None: a user's code."""

    def launch(self, plan: 'JobPlan', role: RoleName, image: str,
               args: Tuple[str, ...]) -> 'Launch':
        """What the replicas of pool `role` run on `image`, given `args`."""

    def ships_repository(self) -> bool:
        """It is this repository's code: on an image that installs packages
        itself, this repository's sdist is staged for it (`JobPlan.stages_repository`)."""

    def archives(self, plan: 'JobPlan', build_dir: str) -> List[staging.Sdist]:
        """The archives built on this machine (under `build_dir`) for the pools to
        install, in the order they install them."""

    def given_packages(self) -> Tuple[str, ...]:
        """The gs:// archives the pools install as given (nothing to build)."""

    def installed(self) -> Optional['Installed']:
        """The user's code the checks before upload install in a fresh
        virtualenv (`packages.install`), or None: nothing of the user's to install."""

    def renames_primary(self, plan: 'JobPlan') -> bool:
        """Its replicas see pool 0 named `plan.primary` (`bootstrap` renames it)."""

    def derives_tf_config(self) -> bool:
        """It derives TF_CONFIG from a JobSet pod's variables (this project's
        trainers and `bootstrap` do; a container's own entrypoint does not)."""

    def problems(self, plan: 'JobPlan') -> Iterator[str]:
        """What makes it one `plan` cannot run (`JobPlan.__post_init__`)."""


@dataclasses.dataclass(frozen=True)
class Installed:
    """A user's package as the checks before upload install it.

    Attributes:
      module: what the pools run (`python -m`).
      unpinned: requirements it may choose over this project's pins.
      read_sources: its module is read (`source_checks`): not this project's
        trainer, whose own parser checks the flags instead.
      labels: how messages name each archive `Program.archives` builds, in
        its order (`--package-path DIR`, `--packages FILE`).
    """
    module: str
    unpinned: Tuple[str, ...]
    read_sources: bool
    labels: Tuple[str, ...] = ()


class _NothingOfTheUsers:
    """What a program with no package of the user's answers: no gs:// archives
    given, nothing installed by the checks, pool 0 as Vertex AI names it."""

    def given_packages(self) -> Tuple[str, ...]:
        return ()

    def installed(self) -> None:
        return None

    def renames_primary(self, plan: 'JobPlan') -> bool:
        return False


@dataclasses.dataclass(frozen=True)
class Trainer(_NothingOfTheUsers):
    """A trainer of this project (`registry`): `python -m <module>` in this
    project's image, or from this repository's sdist on an image that installs
    packages itself."""
    trainer: declaration.Trainer

    @property
    def module(self) -> str:
        module = self.trainer.module
        assert module is not None, 'a declared trainer names its module'
        return module

    @property
    def declared(self) -> declaration.Trainer:
        return self.trainer

    def launch(self, plan: 'JobPlan', role: RoleName, image: str,
               args: Tuple[str, ...]) -> 'Launch':
        if plan.installs_packages(image):
            return Launch(image=image, args=args, module=self.module,
                          package_uris=plan.package_uris)
        return Launch(image=image, args=args, command=('python', '-m', self.module))

    def ships_repository(self) -> bool:
        return True

    def archives(self, plan: 'JobPlan', build_dir: str) -> List[staging.Sdist]:
        if not plan.stages_repository:
            return []
        return [staging.build_sdist(os.path.join(build_dir, 'sdist'))]

    def derives_tf_config(self) -> bool:
        return True

    def problems(self, plan: 'JobPlan') -> Iterator[str]:
        return iter(())


@dataclasses.dataclass(frozen=True)
class Package:
    """A user's package and the module every pool runs: installed at start-up
    by this project's image (`bootstrap`), or by an image that installs
    packages itself (`pythonPackageSpec`).

    Attributes:
      module: `python -m` runs it.
      package_path: the local package directory to build, or None.
      packages: further archives (local paths or gs:// URIs).
      declared: this project's trainer whose module `module` is (a course
        that submits `--package-path cifar10_estimator/`), else None: its
        flags and start-up are checked like a `Trainer`'s.
      unpinned: requirements whose version the package may choose over this
        project's pins (`--unpin`).
    """
    module: str
    package_path: Optional[str] = None
    packages: Tuple[str, ...] = ()
    declared: Optional[declaration.Trainer] = None
    unpinned: Tuple[str, ...] = ()

    @property
    def local_packages(self) -> Tuple[str, ...]:
        return tuple(p for p in self.packages if not p.startswith(gcs_paths.SCHEME))

    def launch(self, plan: 'JobPlan', role: RoleName, image: str,
               args: Tuple[str, ...]) -> 'Launch':
        if plan.installs_packages(image):
            return Launch(image=image, args=args, module=self.module,
                          package_uris=plan.package_uris)
        return Launch(image=image, command=('python', '-m', BOOTSTRAP_MODULE),
                      args=tuple(bootstrap_args(plan.package_uris, self.module, plan.primary,
                                                args, self.unpinned)))

    def ships_repository(self) -> bool:
        return False

    def archives(self, plan: 'JobPlan', build_dir: str) -> List[staging.Sdist]:
        built = [staging.build_package(self.package_path, os.path.join(build_dir, 'sdist'))
                 if self.package_path is not None else None]
        return [a for a in built if a] + [staging.archive(path, '--packages')
                                          for path in self.local_packages]

    def given_packages(self) -> Tuple[str, ...]:
        return tuple(p for p in self.packages if p.startswith(gcs_paths.SCHEME))

    def installed(self) -> Installed:
        return Installed(self.module, self.unpinned, read_sources=self.declared is None,
                         labels=(('--package-path %s' % self.package_path,)
                                 if self.package_path is not None else ())
                         + tuple('--packages %s' % path for path in self.local_packages))

    def renames_primary(self, plan: 'JobPlan') -> bool:
        return not plan.installs_packages(plan.image_for(CHIEF))

    def derives_tf_config(self) -> bool:
        return True

    def problems(self, plan: 'JobPlan') -> Iterator[str]:
        if (self.package_path or self.local_packages) and not plan.staging:
            yield 'a package to stage and no staging'


@dataclasses.dataclass(frozen=True)
class Container(_NothingOfTheUsers):
    """A user's own containers (`*Config.imageUri`), run with their entrypoints.

    Attributes:
      commands: {role: command} of pools given `containerCommand` (a pool
        without one runs the chief's, else the image's entrypoint).
    """
    commands: Mapping[RoleName, Tuple[str, ...]] = dataclasses.field(default_factory=dict)

    @property
    def declared(self) -> None:
        """A container of the user's runs no trainer of this project that is checked."""
        return None

    def launch(self, plan: 'JobPlan', role: RoleName, image: str,
               args: Tuple[str, ...]) -> 'Launch':
        command = self.commands.get(role) or self.commands.get(CHIEF)
        return Launch(image=image, args=args, command=tuple(command) if command else None)

    def ships_repository(self) -> bool:
        return False

    def archives(self, plan: 'JobPlan', build_dir: str) -> List[staging.Sdist]:
        return []

    def derives_tf_config(self) -> bool:
        return False

    def problems(self, plan: 'JobPlan') -> Iterator[str]:
        if not set(self.commands) <= {pool.role.name for pool in plan.config.pools}:
            yield 'a command for a pool it does not have'
        if not plan.images.get(CHIEF):
            yield 'a container of its own with no image for pool 0'


@dataclasses.dataclass(frozen=True)
class Launch:
    """What the replicas of one pool run, whatever the target.

    Attributes:
      image: the container image.
      args: their arguments.
      command: the command, or None for the image's entrypoint.
      module, package_uris: on a prebuilt Vertex AI image, the module it runs
        and the archives it installs first (`pythonPackageSpec`); else None, ().
    """
    image: str
    args: Tuple[str, ...]
    command: Optional[Tuple[str, ...]] = None
    module: Optional[str] = None
    package_uris: Tuple[str, ...] = ()

    @property
    def python_package(self) -> bool:
        """A prebuilt Vertex AI image installs the packages and runs the module."""
        return self.module is not None


@dataclasses.dataclass(frozen=True)
class JobPlan:
    """One cloud job, as every front describes it and every target renders it.

    Attributes:
      name: the job's display name (`[A-Za-z][A-Za-z0-9_]*`).
      program: what runs (`Trainer`, `Package` or `Container`).
      config: the validated trainingInput (pools, tuning, labels, scheduling).
      args: the flags every task gets, without `--job-dir` and
        `--hypertune-metric`, which `task_args` adds per target.
      job_dir: gs:// directory of the job's outputs (`baseOutputDirectory`).
      region: where the job runs.
      project: the project, when known (dry runs and rehearsals may go without).
      staging: gs:// prefix the local archives and the build context go under.
      staging_flag: the flag that named it, for messages.
      images: {role: image} given per pool present (`--master-image-uri`,
        `--image-uri` for all); a pool without one runs the chief's, else this
        project's image.
      executor_image: an image given as one that installs packages itself
        (`--executor-image-uri`), like Vertex AI's prebuilt images.
      primary: TF_CONFIG's name of pool 0 for packages run by `bootstrap`
        (`chief`, or `master` as AI Platform named it).
      enable_web_access, kms_key: as given.
      tensorboard: the Vertex AI TensorBoard to upload to (`--tensorboard`),
        else the config's (`tensorboard_name`).
      unique_name: refuse a second job of this name (AI Platform's rule).
      notes, warnings: one line each, said before anything runs.
      package_uris: the staged archives (`resolved`).
      project_image: this project's image, named by its sources' hash (`resolved`).
    """
    name: str
    program: Program
    config: TrainingConfig
    args: Tuple[str, ...] = ()
    job_dir: Optional[str] = None
    region: str = 'us-central1'
    project: Optional[str] = None
    staging: Optional[str] = None
    staging_flag: str = '--staging-bucket'
    images: Mapping[RoleName, str] = dataclasses.field(default_factory=dict)
    executor_image: Optional[str] = None
    primary: roles.Primary = roles.VERTEX_PRIMARY
    enable_web_access: bool = False
    kms_key: Optional[str] = None
    tensorboard: Optional[str] = None
    unique_name: bool = False
    notes: Tuple[str, ...] = ()
    warnings: Tuple[str, ...] = ()
    package_uris: Tuple[str, ...] = ()
    project_image: Optional[str] = None

    def __post_init__(self) -> None:
        """Refuses a plan no front may make (each front checks the user's words
        first, naming the flag): whichever made it, a plan holds these."""
        problems = list(_plan_problems(self))
        if problems:
            raise ValueError('job plan %r: %s' % (self.name, '; '.join(problems)))

    @property
    def located_project(self) -> str:
        """The project of a located plan (the pipeline sets it before any call)."""
        assert self.project is not None, 'the plan is located in a project'
        return self.project

    @property
    def collection(self) -> Collection:
        return TUNING_JOBS if self.config.is_tuning else CUSTOM_JOBS

    @property
    def declared(self) -> Optional[declaration.Trainer]:
        """This project's trainer the pools run (a `Trainer`, or a `Package` of one)."""
        return self.program.declared

    @property
    def tensorboard_name(self) -> Optional[str]:
        """The Vertex AI TensorBoard the job uploads to (`--tensorboard`, else
        `trainingInput.tensorboard`), or None."""
        return self.tensorboard or self.config.tensorboard

    @property
    def trainer_job_dir(self) -> Optional[str]:
        """The `--job-dir` a trainer of this project gets.

        With a Vertex AI TensorBoard it is `<job-dir>/logs`: Vertex AI sets
        `$AIP_TENSORBOARD_LOG_DIR` to `<baseOutputDirectory>/logs` and uploads
        the event files there while the job runs, so the trainers write
        everything (checkpoints, train and eval events, the export) where it
        reads. A user's package gets the job-dir as AI Platform gave it and
        writes its logs to `$AIP_TENSORBOARD_LOG_DIR` itself.
        """
        if self.tensorboard_name and self.job_dir and self.declared is not None:
            return self.job_dir + '/logs'
        return self.job_dir

    def image_for(self, role: RoleName) -> Optional[str]:
        """The image a pool runs: its own, else the chief's (as AI Platform), else
        this project's (`project_image`, None until resolved)."""
        return self.images.get(role) or self.images.get(CHIEF) or self.project_image

    @property
    def builds_image(self) -> bool:
        """Some pool runs this project's image, built from the Dockerfile."""
        return any(not (self.images.get(pool.role.name) or self.images.get(CHIEF))
                   for pool in self.config.pools)

    def installs_packages(self, image: Optional[str]) -> bool:
        """`image` installs the packages and runs the module itself (`pythonPackageSpec`):
        a prebuilt Vertex AI image, or one given as such."""
        return image is not None and (image == self.executor_image or
                                      image.startswith(PREBUILT_IMAGE_PREFIX))

    @property
    def stages_repository(self) -> bool:
        """A `Trainer` on an image that installs packages installs this repository's sdist."""
        return self.program.ships_repository() and any(
            self.installs_packages(self.image_for(pool.role.name)) for pool in self.config.pools)

    def resolved(self, package_uris: Optional[Sequence[str]] = None,
                 project_image: Optional[str] = None) -> 'JobPlan':
        """This plan with what building revealed."""
        return dataclasses.replace(
            self, package_uris=tuple(package_uris if package_uris is not None
                                     else self.package_uris),
            project_image=project_image or self.project_image)

    def task_args(self, job_dir_flag: bool = True) -> Tuple[str, ...]:
        """The flags of every task.

        A trainer of this project gets the same flags whichever front made the
        plan: `train-cloud.sh MODEL` (a `Trainer`) or `ai-platform.sh ...
        --package-path cifar10_estimator` (a `Package` of it).

        Args:
          job_dir_flag: add `--job-dir` for a trainer of this project. Vertex
            tuning trials go without it, so that each defaults to its own
            `$AIP_MODEL_DIR`, and get `--hypertune-metric` to report the
            study's metric. A user's package or container gets `--job-dir`
            always, as AI Platform gave it (the package adds the trial id
            itself), and no flag it may not define.
        """
        args = list(self.args)
        if self.declared is None:
            return tuple(args + (['--job-dir=%s' % self.job_dir] if self.job_dir else []))
        if job_dir_flag and self.job_dir:
            args.append('--job-dir=%s' % self.trainer_job_dir)
        if self.config.hyperparameters is not None:
            args.append('--hypertune-metric=%s' % self.config.hyperparameters.metric_tag)
        return tuple(args)

    def launch(self, role: RoleName, job_dir_flag: bool = True) -> Launch:
        """What the replicas of pool `role` run.

        Raises:
          ValueError: the pool runs this project's image, not yet `resolved`.
        """
        args = self.task_args(job_dir_flag)
        image = self.image_for(role)
        if image is None:
            raise ValueError('job plan %r: pool %s runs this project\'s image, named once '
                             'built (`resolved`)' % (self.name, role))
        return self.program.launch(self, role, image, args)


def _plan_problems(plan: JobPlan) -> Iterator[str]:
    """What makes `plan` one no front may make (nothing: a plan to run)."""
    if not JOB_NAME_RE.fullmatch(plan.name):
        yield 'not a job name'
    if not set(plan.images) <= {pool.role.name for pool in plan.config.pools}:
        yield 'an image for a pool it does not have'
    if plan.executor_image is not None and plan.executor_image not in plan.images.values():
        yield 'an executor image no pool runs'
    if plan.primary not in (CHIEF, roles.MASTER):
        yield 'pool 0 named %r' % plan.primary
    if not all(uri.startswith(gcs_paths.SCHEME) for uri in (
            plan.job_dir or gcs_paths.SCHEME, plan.staging or gcs_paths.SCHEME,
            *plan.package_uris)):
        yield 'a job-dir, staging or package URI not on Cloud Storage'
    if (plan.builds_image or plan.stages_repository) and not plan.staging:
        yield 'something to stage (this project\'s image or sdist) and no staging'
    if plan.tensorboard is not None and not TENSORBOARD_RE.fullmatch(plan.tensorboard):
        yield 'a TensorBoard %r' % plan.tensorboard
    yield from plan.program.problems(plan)


def bootstrap_args(package_uris: Iterable[str], module: str, primary: roles.Primary,
                   args: Iterable[str], unpinned: Iterable[str] = ()) -> List[str]:
    """The args of `python -m bootstrap`: install these packages (with these
    requirements free of this project's pins), then run `module` with `args`."""
    return (['--package-uri=%s' % uri for uri in package_uris]
            + ['--module-name=%s' % module]
            + (['--tf-config-primary=%s' % primary] if primary != CHIEF else [])
            + ['--unpin=%s' % name for name in unpinned]
            + ['--'] + list(args))


# AI Platform's model and version names: a letter, then letters, digits and
# underscores (its `models create` / `versions create` rule).
SERVING_NAME_RE = re.compile(r'[A-Za-z][A-Za-z0-9_]{0,127}')


def check_serving_name(name: str, what: str) -> str:
    """`name` if it is an AI Platform model or version name (`what`: `MODEL`, `--model`...)."""
    if not SERVING_NAME_RE.fullmatch(name):
        raise UserInputError('%s %r: expected a letter followed by letters, digits or '
                             'underscores (at most 128 characters), as AI Platform named '
                             'models and versions' % (what, name), flag=what)
    return name


@dataclasses.dataclass(frozen=True)
class ServingPlan:
    """A version to deploy (`versions create`), as the front read it; `pipeline.deploy`
    carries it out and `endpoints` renders its requests.

    Attributes:
      model: the AI Platform model (a Vertex AI endpoint of that display name,
        or its full resource name).
      version: the version's name (the deployed model's display name).
      origin: the gs:// SavedModel directory (or a directory of timestamped
        exports: the newest is served).
      region, project: where the endpoint is, once the serving pipeline has
        resolved it (None until then).
      image: the serving container (TF 2.15's prebuilt prediction image, or
        `--image-uri`).
      machine_type, accelerator_type, accelerator_count: each node's machine.
      min_nodes, max_nodes: the nodes Vertex AI keeps (billed while deployed).
      description, labels, service_account: as given (labels besides the mark
        `endpoints` adds).
      signature_name, check_instances: what the check before the upload calls
        and on what (none: an instance made from the signature).
      wait: follow the deploy to its end (`--async`: return once it started).
      notes: one line each, said before anything runs.
    """
    model: str
    version: str
    origin: str
    image: str
    region: Optional[str] = None
    project: Optional[str] = None
    machine_type: str = 'n1-standard-2'
    accelerator_type: Optional[str] = None
    accelerator_count: int = 0
    min_nodes: int = 1
    max_nodes: int = 1
    description: Optional[str] = None
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    service_account: Optional[str] = None
    signature_name: Optional[str] = None
    check_instances: Tuple[Any, ...] = ()
    wait: bool = True
    notes: Tuple[str, ...] = ()
