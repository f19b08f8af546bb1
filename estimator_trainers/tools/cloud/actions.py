"""What a command asks the pipelines to do with a plan: one small type per action.

The training pipeline (`pipeline.run`) takes one `TrainingAction`:

- `Submit`: create the job on Vertex AI (and follow it, `stream_logs`);
- `DryRun`: print the staging plan and the request (`json`), or the spec
  `gcloud ai ... create --config` takes (`yaml`); send nothing;
- `Rehearse`: run the job on this machine from its very request;
- `Manifest`: print a Kubernetes manifest (`jobset`, `tfjob`) of the plan;
- `Estimate`: print the estimate and its figures, and stop (a sweep's sum).

`pipeline.cancel` takes a `Cancel`. The serving pipeline
(`serving_pipeline.run`) takes one `ServingAction`: `Deploy` (`versions
create`), `Remove` (`models delete`, `versions delete`), `CreateModel`,
`Predict`, `ListModels`; each either runs or, with `dry_run`, prints its
requests and changes nothing.

Each action holds only what its kind uses, and a typed callback through which
the front hears of what was made (it prints it in its own words).
`training_action` makes the action of a submit command's flags, the same
for both fronts.
"""
import argparse
import dataclasses
from typing import Any, Callable, Dict, Literal, Mapping, Optional, Sequence, TextIO, Tuple
from typing import Union, cast, get_args

from estimator_trainers.errors import UserInputError
from estimator_trainers.tools.cloud import local_inputs as local_inputs_lib
from estimator_trainers.tools.cloud.plan import JobPlan, ServingPlan

# A JSON object an API answered (a job, an endpoint, a prediction response).
Json = Dict[str, Any]
# What `DryRun` prints: the staging plan and the request (JSON), or the spec
# Google's `gcloud ai ... create --config` takes (`vertex_spec`, YAML).
DryRunFormat = Literal['json', 'yaml']
DRY_RUN_FORMATS: Tuple[DryRunFormat, ...] = get_args(DryRunFormat)
# Where `train-cloud.sh submit --target` sends a job: Vertex AI, or a manifest.
Target = Literal['vertex', 'jobset', 'tfjob']
ManifestTarget = Literal['jobset', 'tfjob']
VERTEX: Target = 'vertex'
TARGETS: Tuple[Target, ...] = get_args(Target)
MANIFEST_TARGETS: Tuple[ManifestTarget, ...] = get_args(ManifestTarget)

# `(plan, the job resource, out, err)`: a job was created.
Submitted = Callable[[JobPlan, Json, TextIO, TextIO], None]


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Located:
    """Where: `--project` and `--region` as given (None: `location`'s rule decides)."""
    project: Optional[str] = None
    region_flag: Optional[str] = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Priced(_Located):
    """The estimate's inputs: `--max-cost` USD (else the config's budget) and
    `--throughput-from` (a run record to predict the time from), or None."""
    max_cost: Optional[float] = None
    throughput_from: Optional[str] = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Built(_Priced):
    """`repository`: the Artifact Registry repository of this project's image."""
    repository: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class Submit(_Built):
    """Create the job on Vertex AI.

    Attributes:
      stream_logs: follow the job until it ends (exit 0 only if it succeeded).
      poll_interval: seconds between polls of the job, its logs, image builds.
      on_created: told of the job once it exists.
    """
    stream_logs: bool = False
    poll_interval: float
    on_created: Optional[Submitted] = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class DryRun(_Built):
    """Print what a submission would stage, build and send (`format`); send nothing."""
    format: DryRunFormat = 'json'


@dataclasses.dataclass(frozen=True, kw_only=True)
class Rehearse(_Built):
    """Run the job on this machine from its request.

    Attributes:
      max_replicas: replicas started per pool at most.
      local_storage: on local storage even with credentials (`--local-storage`).
      local_inputs: `--local-input`s copied into local storage (which they imply).
    """
    max_replicas: int
    local_storage: bool = False
    local_inputs: Tuple[local_inputs_lib.Mapping, ...] = ()

    @property
    def on_local_storage(self) -> bool:
        """Asked for local storage (`--local-storage`, or a `--local-input`)."""
        return self.local_storage or bool(self.local_inputs)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Estimate(_Priced):
    """Print the estimate (its figures as JSON on stdout) and stop."""


@dataclasses.dataclass(frozen=True)
class Manifest:
    """Print the plan as a Kubernetes manifest of `target`; nothing is uploaded."""
    target: ManifestTarget


# The actions that reach Google Cloud (or its stand-ins): a plan located in a project.
CloudAction = Union[Submit, DryRun, Rehearse, Estimate]
TrainingAction = Union[CloudAction, Manifest]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Cancel(_Located):
    """`jobs cancel JOB`: `job` a resource name, numeric id or display name;
    `dry_run`: print the requests, cancel nothing."""
    job: str
    dry_run: bool = False


def training_action(args: argparse.Namespace, on_created: Optional[Submitted]
                    ) -> TrainingAction:
    """The action of a submit command's parsed flags (both fronts name them alike:
    `--rehearse`, `--dry-run`, `--format`, `--stream-logs`; train-cloud.sh also
    `--target`, `--estimate-only`, `--image-uri`).

    Raises:
      UserInputError: flags that do not go together.
    """
    target: Target = getattr(args, 'target', VERTEX)
    if args.rehearse:
        clashes = [flag for flag, given in (
            ('--dry-run', args.dry_run), ('--target %s' % target, target != VERTEX),
            ('--image-uri', getattr(args, 'image_uri', None)),
            ('--stream-logs', args.stream_logs)) if given]
        if clashes:
            raise UserInputError('--rehearse runs the staged package on this machine; it '
                                 'does not go with %s' % ' or '.join(clashes))
        return Rehearse(max_replicas=args.max_replicas, local_storage=args.local_storage,
                        local_inputs=tuple(args.local_input), **_built(args))
    if args.local_storage or args.local_input:
        flag = '--local-input' if args.local_input else '--local-storage'
        raise UserInputError('--local-storage and --local-input go with --rehearse', flag=flag)
    if target != VERTEX:
        return Manifest(cast(ManifestTarget, target))
    if getattr(args, 'estimate_only', False):
        return Estimate(**_priced(args))
    if args.dry_run:
        fmt = args.format or 'json'
        if fmt not in DRY_RUN_FORMATS:
            raise UserInputError('--format %s: a dry run prints json (the request) or yaml '
                                 '(the spec gcloud ai takes)' % fmt, flag='--format')
        return DryRun(format=fmt, **_built(args))
    return Submit(stream_logs=args.stream_logs, poll_interval=args.poll_interval,
                  on_created=on_created, **_built(args))


def _priced(args: argparse.Namespace) -> Dict[str, Any]:
    return dict(project=args.project, region_flag=args.region, max_cost=args.max_cost,
                throughput_from=args.throughput_from)


def _built(args: argparse.Namespace) -> Dict[str, Any]:
    return dict(_priced(args), repository=args.repository)


# ------------------------------------------------------------------ serving


@dataclasses.dataclass(frozen=True)
class Deployed:
    """What a deploy made: the Vertex AI model, the endpoint, and its deployed
    model (None with `--async`: not waited for)."""
    model: str
    endpoint: str
    deployed_model: Optional[Json]


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Serving(_Located):
    """`poll_interval`: seconds between polls of an operation; `dry_run`: print
    the requests, change nothing."""
    poll_interval: float
    dry_run: bool = False


@dataclasses.dataclass(frozen=True, kw_only=True)
class Deploy(_Serving):
    """`versions create`: `plan` checked, uploaded and deployed; `on_created`
    hears of what was made."""
    plan: ServingPlan
    on_created: Optional[Callable[[ServingPlan, Deployed, TextIO, TextIO], None]] = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class Remove(_Serving):
    """`models delete MODEL` (`version` None) or `versions delete VERSION --model
    MODEL`; `on_removed` hears what was removed (when anything was)."""
    model: str
    version: Optional[str] = None
    on_removed: Optional[Callable[[Sequence[str], TextIO], None]] = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class CreateModel(_Serving):
    """`models create MODEL`: an endpoint of that name; `on_created` hears of it
    `(project, the endpoint, err)`."""
    model: str
    description: Optional[str] = None
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    access_logging: bool = False
    on_created: Callable[[str, Json, TextIO], None]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Predict(_Serving):
    """`predict --model MODEL [--version VERSION]`: `instances` sent to the
    model's endpoint; `on_predicted` hears the response `(response, out)`."""
    model: str
    version: Optional[str] = None
    instances: Sequence[Any]
    on_predicted: Callable[[Json, TextIO], None]


@dataclasses.dataclass(frozen=True, kw_only=True)
class ListModels(_Serving):
    """`models list`: `on_listed` hears `(endpoints, project, region, out, err)`."""
    on_listed: Callable[[Sequence[Json], str, str, TextIO, TextIO], None]


ServingAction = Union[Deploy, Remove, CreateModel, Predict, ListModels]
