"""`bash scripts/train-cloud.sh`: a trainer of this project on Vertex AI, in this project's words.

    python -m estimator_trainers.tools.cloud submit MODEL [--config FILE] [options] [-- TRAINER_FLAGS]
    python -m estimator_trainers.tools.cloud status|cancel|logs JOB
    python -m estimator_trainers.tools.cloud list
    python -m estimator_trainers.tools.cloud prices show|refresh

A front: it turns its words into a `plan.JobPlan` (`make_plan`) and an
action (`actions.training_action`: a submission, `--dry-run`, `--rehearse`,
`--estimate-only`, a `--target` manifest) and hands them to `pipeline.run`,
which owns the order of everything that follows.
The project and region follow `location`'s rule (flags, then gcloud's and
this project's variables, then gcloud's active configuration, then the
config's `trainingInput.region`); the bucket is `--bucket`, else BUCKET_NAME.
"""
import argparse
import os
import sys
from typing import List, Optional, Sequence, TextIO, TypeAlias

from estimator_trainers import flags
from estimator_trainers import logs as logs_lib
from estimator_trainers import declaration
from estimator_trainers import registry
from estimator_trainers.errors import UserInputError
from estimator_trainers.tools.cloud import actions
from estimator_trainers.tools.cloud import backend as backend_lib
from estimator_trainers.tools.cloud import build as build_lib
from estimator_trainers.tools.cloud import configs
from estimator_trainers.tools.cloud import estimate
from estimator_trainers.tools.cloud import gcs_paths
from estimator_trainers.tools.cloud import jobs
from estimator_trainers.tools.cloud import location
from estimator_trainers.tools.cloud import logs
from estimator_trainers.tools.cloud import pipeline
from estimator_trainers.tools.cloud import plan as plan_lib
from estimator_trainers.tools.cloud import rehearsal
from estimator_trainers.tools.cloud.api import Json

PROG = 'python -m estimator_trainers.tools.cloud'
TARGETS = actions.TARGETS
# Prebuilt Vertex AI training images for TF 2.15 (end of availability
# announced for 2025-11-14): --executor-image-uri's examples.
EXECUTOR_IMAGES = {
    'cpu': plan_lib.PREBUILT_IMAGE_PREFIX + 'tf-cpu.2-15.py310:latest',
    'gpu': plan_lib.PREBUILT_IMAGE_PREFIX + 'tf-gpu.2-15.py310:latest',
}
# gcloud's own flags (`submit` has --config, --job-dir, --region, --stream-logs too).
GCLOUD_ONLY_FLAGS = ('--runtime-version', '--python-version', '--scale-tier',
                     '--master-machine-type', '--worker-machine-type', '--worker-count',
                     '--parameter-server-machine-type', '--parameter-server-count',
                     '--package-path', '--module-name', '--packages', '--staging-bucket',
                     '--master-image-uri', '--use-chief-in-tf-config')


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog='python -m estimator_trainers.tools.cloud',
        description='Train the packaged models on Vertex AI from AI Platform '
                    'trainingInput configs, and follow, cancel or list the jobs.')
    commands = parser.add_subparsers(dest='command', required=True, metavar='COMMAND')
    _add_submit_command(commands)
    _add_job_commands(commands)
    estimate.add_prices_command(commands)
    return parser


# `ArgumentParser.add_subparsers()`: what each command is added to.
_Commands: TypeAlias = 'argparse._SubParsersAction[argparse.ArgumentParser]'


def _add_submit_command(commands: _Commands) -> None:
    """`submit MODEL [options] -- TRAINER_FLAGS`."""
    submit = commands.add_parser(
        'submit', help='stage the package and create a training job',
        description='Build and stage the package, then create a Vertex AI '
                    'CustomJob (or HyperparameterTuningJob for a config with '
                    'hyperparameters). Trainer flags go after --.')
    submit.add_argument('model', choices=sorted(registry.discover()),
                        help='Trainer to run.')
    submit.add_argument('--config', help='AI Platform trainingInput YAML '
                        '(default: scaleTier BASIC, one CPU machine).')
    _add_location_flags(submit)
    submit.add_argument('--bucket', default=os.environ.get('BUCKET_NAME'),
                        help='gs://bucket for the package and default job-dir '
                             '(env BUCKET_NAME).')
    submit.add_argument('--job-name', help='Job name (default: '
                        'train_<model>_<YYYYmmdd_HHMMSS>, UTC).')
    submit.add_argument('--job-dir', help='gs:// directory for checkpoints and '
                        'exports (default: trainingInput.jobDir, else '
                        '<bucket>/jobs/<job-name>). Tuning trials write to '
                        '<job-dir>/<trial>/model.')
    _add_image_flags(submit)
    submit.add_argument('--repository', default=build_lib.DEFAULT_REPOSITORY,
                        help='Artifact Registry Docker repository in --region for '
                             '--build-image (created if missing).')
    submit.add_argument('--target', choices=TARGETS, default='vertex',
                        help='vertex (default): submit to Vertex AI. jobset: print a '
                             'Kubernetes JobSet manifest, tfjob: a Kubeflow TFJob manifest '
                             '(both with a NetworkPolicy; need --image-uri; '
                             'docs/distributed.md says which to choose).')
    submit.add_argument('--tensorboard', help='Vertex AI TensorBoard to upload the run '
                        'to while it trains (projects/P/locations/R/tensorboards/ID; '
                        'default: trainingInput.tensorboard). The trainers then write to '
                        '<job-dir>/logs, where Vertex AI uploads from; needs '
                        'trainingInput.serviceAccount.')
    submit.add_argument('--dry-run', action='store_true',
                        help='Print the staging plan and the exact request; send nothing.')
    submit.add_argument('--format', choices=actions.DRY_RUN_FORMATS, default='json',
                        help='What --dry-run prints: json (the staging plan and the request) '
                             'or yaml (the spec `gcloud ai custom-jobs create --config`, or '
                             '`gcloud ai hp-tuning-jobs create --config` for a tuning config, '
                             'takes; the command on stderr).')
    submit.add_argument('--estimate-only', action='store_true',
                        help='Print the estimate (and its figures as one JSON line on '
                             'stdout) and stop: nothing is built or sent.')
    submit.add_argument('--stream-logs', action='store_true',
                        help='Print the replicas\' log lines ([chief-0] ...) until the '
                             'job ends; exit 0 only if it succeeded.')
    _add_poll_flag(submit)
    rehearsal.add_flags(submit)
    estimate.add_flags(submit)


def _add_image_flags(submit: argparse.ArgumentParser) -> None:
    """What the pools run: this project's image built, a prebuilt one, or yours."""
    images = submit.add_mutually_exclusive_group()
    images.add_argument('--build-image', action='store_true',
                        help='Build the Dockerfile with Cloud Build into Artifact '
                             'Registry, tagged with the sources\' content hash (an '
                             'unchanged tree reuses its image), and run it. The '
                             'default unless --image-uri or --executor-image-uri.')
    images.add_argument('--executor-image-uri', help='Stage the package for this '
                        'prebuilt Vertex AI image instead of building one (e.g. %s '
                        'or %s, whose availability ended on 2025-11-14).'
                        % (EXECUTOR_IMAGES['cpu'], EXECUTOR_IMAGES['gpu']))
    images.add_argument('--image-uri', help='Run this container (the Dockerfile, '
                        'built and pushed by you); nothing is built or staged.')


def _add_job_commands(commands: _Commands) -> None:
    """status, cancel, logs and list."""
    for name, text in (('status', 'show a job'), ('cancel', 'cancel a job'),
                       ('logs', 'print a job\'s log lines until it ends')):
        command = commands.add_parser(name, help=text, description=text.capitalize() + '.')
        command.add_argument('job', help='Resource name, numeric id or display name.')
        _add_location_flags(command)
        if name == 'logs':
            _add_poll_flag(command)

    listing = commands.add_parser('list', help='list recent jobs',
                                  description='List custom and tuning jobs, newest first.')
    _add_location_flags(listing)
    listing.add_argument('--limit', type=flags.positive_int, default=20,
                         help='Most jobs to show.')
    listing.add_argument('--filter', help='Vertex AI list filter, e.g. '
                         'state="JOB_STATE_RUNNING".')


def _add_location_flags(parser: argparse.ArgumentParser) -> None:
    flags.add_console_flag(parser)
    parser.add_argument('--project', help=location.PROJECT_HELP)
    parser.add_argument('--region', help='Vertex AI region (%s).'
                        % location.region_help(location.TRAINING, with_config=True))


def _add_poll_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument('--poll-interval', type=flags.non_negative_float, default=30.0,
                        help='Seconds between polls of the job, its logs and image '
                             'builds (default: 30).')


def main(argv: Optional[Sequence[str]] = None, backend: Optional[backend_lib.Backend] = None,
         out: Optional[TextIO] = None, err: Optional[TextIO] = None,
         environ: Optional[location.Environ] = None) -> int:
    """Runs one command; returns the exit code."""
    argv, trainer_flags = flags.split_at_dashes(sys.argv[1:] if argv is None else argv)
    trainer_flags = trainer_flags or []
    environ = os.environ if environ is None else environ
    gcloud_only = [arg.split('=')[0] for arg in argv if arg.split('=')[0] in GCLOUD_ONLY_FLAGS]
    if gcloud_only:
        raise UserInputError('%s is a flag of gcloud ai-platform jobs submit training: run your '
                             'gcloud line as bash scripts/ai-platform.sh jobs submit training '
                             'JOB ... (docs/migrating-from-ai-platform.md)' % gcloud_only[0],
                             flag=gcloud_only[0])
    args = build_parser().parse_args(argv)
    logs_lib.quiet_console(getattr(args, 'verbosity', None), for_children=True)
    backend = backend or backend_lib.Backend()
    out = out or sys.stdout
    err = err or sys.stderr
    if trainer_flags and args.command != 'submit':
        raise UserInputError('trainer flags after -- only go with submit')
    if args.command == 'submit':
        action = actions.training_action(args, print_submitted)
        return pipeline.run(make_plan(args, trainer_flags, environ), action, backend, out,
                            err, environ)
    if args.command == 'prices':
        return estimate.prices_command(args, backend, out, err, environ)
    return manage(args, backend, out, environ, err)


def data_defaults(trainer: declaration.Trainer, bucket_uri: str,
                  given: Sequence[str]) -> List[str]:
    """`--flag=value` for each cloud data flag of the trainer that the flags
    `given` run (`data_trainer`: the Keras MLP reads CIFAR-10) which they do not set."""
    return ['%s=%s' % (flag, value)
            for flag, value in trainer.data_trainer(given).cloud_data_args(bucket_uri)
            if not has_flag(given, flag)]


def make_plan(args: argparse.Namespace, trainer_flags: Sequence[str],
              environ: location.Environ) -> plan_lib.JobPlan:
    """The `plan.JobPlan` of `submit MODEL [options] -- TRAINER_FLAGS`.

    Raises:
      UserInputError: a flag, the config or a trainer flag that cannot work.
    """
    trainer = registry.get(args.model)
    config = configs.load_config(args.config) if args.config else configs.default_config()
    if not args.bucket:
        raise UserInputError('no bucket: set BUCKET_NAME=gs://your-bucket or pass --bucket')
    bucket_uri = gcs_paths.parse_bucket(args.bucket)
    job_name = plan_lib.check_job_name(
        args.job_name or plan_lib.default_job_name(trainer.name))
    notes: List[str] = []
    if args.job_dir is not None:
        job_dir, note = gcs_paths.normalized(args.job_dir)
        job_dir = gcs_paths.directory(job_dir, '--job-dir')
        notes += [note] if note else []
    else:  # trainingInput.jobDir passed the same rule in `configs`
        job_dir = (config.job_dir or '%s/jobs/%s' % (bucket_uri, job_name)).rstrip('/')
    given, given_notes = gcs_paths.normalized_args(list(config.args) + list(trainer_flags))
    notes += [note for note in given_notes if note not in notes]
    if has_flag(given, '--job-dir'):
        raise UserInputError('--job-dir is a submit option (before --) or '
                             'trainingInput.jobDir, not a trainer flag, so that Vertex '
                             'AI and the trainer agree on it')
    defaults = data_defaults(trainer, bucket_uri, given)
    if not build_lib.REPOSITORY_RE.fullmatch(args.repository):
        raise UserInputError('--repository %r: expected an Artifact Registry repository id '
                             '(lowercase letters, digits and dashes, starting with a letter)'
                             % args.repository, flag='--repository')
    if args.tensorboard and configs.tensorboard_problem(args.tensorboard):
        raise UserInputError('--tensorboard: %s' % configs.tensorboard_problem(args.tensorboard),
                             flag='--tensorboard')
    image = args.image_uri or args.executor_image_uri
    return plan_lib.JobPlan(
        name=job_name, program=plan_lib.Trainer(trainer), config=config,
        args=tuple(defaults + given), job_dir=job_dir,
        region=location.region_id(args.region, environ, config.region),
        staging='%s/staging/%s' % (bucket_uri, job_name), staging_flag='--bucket',
        images={plan_lib.CHIEF: image} if image else {},
        executor_image=args.executor_image_uri, tensorboard=args.tensorboard,
        notes=tuple(config.notes) + tuple(notes), warnings=tuple(config.warnings))


def has_flag(args: Sequence[str], flag: str) -> bool:
    """True when `args` sets `flag` as `--flag value` or `--flag=value`."""
    return any(arg == flag or arg.startswith(flag + '=') for arg in args)


def print_submitted(plan: plan_lib.JobPlan, job: Json, out: TextIO, err: TextIO) -> None:
    """The job's name (stdout), where it is and how to follow, watch and cancel it."""
    out.write('%s\n' % job['name'])
    out.flush()
    info = jobs.parse_job_name(job['name'])
    if plan.tensorboard_name:
        err.write('vertex tensorboard: %s (uploads %s while the job runs)\n'
                  % (plan.tensorboard_name, plan.trainer_job_dir))
    err.write(
        'created %s %s: %s\n'
        'console:     https://console.cloud.google.com/vertex-ai/locations/%s/training/%s'
        '?project=%s\n'
        'job-dir:     %s\n'
        'tensorboard: tensorboard --logdir %s --load_fast=false\n'
        'follow:      %s logs %s\n'
        'cancel:      %s cancel %s\n'
        % (plan.collection, plan.name, job['name'], plan.region, info['id'] if info else '?',
           plan.project, plan.trainer_job_dir, plan.trainer_job_dir, PROG, job['name'], PROG,
           job['name']))


def manage(args: argparse.Namespace, backend: backend_lib.Backend, out: TextIO,
           environ: location.Environ, err: Optional[TextIO] = None) -> int:
    """status, cancel, logs, list; a finished job's status and logs end with its
    metered cost beside its estimate (`estimate.after_job`); `err` also hears where
    the project and region came from."""
    err = err or sys.stderr
    vertex, credentials, name = backend_lib.connect(
        backend, getattr(args, 'job', None), args.project, args.region, environ, err)
    if args.command == 'list':
        for job in vertex.list(limit=args.limit, filter_expr=args.filter):
            info = jobs.parse_job_name(job.get('name', ''))
            kind = 'tuning' if info and info['collection'] == plan_lib.TUNING_JOBS else 'custom'
            out.write('%-28s %-27s %-6s %-20s %s\n' % (
                job.get('state', 'JOB_STATE_UNSPECIFIED'), job.get('createTime', ''),
                kind, info['id'] if info else job.get('name', ''), job.get('displayName', '')))
        return 0
    assert name is not None, 'logs, cancel and status name a job'
    if args.command == 'logs':
        final = logs.follow_job(backend, credentials, vertex, name, args.poll_interval, out)
        estimate.print_cost(final, err, environ)
        return 0 if final.get('state') == jobs.SUCCEEDED else 1
    if args.command == 'cancel':
        vertex.cancel(name)
        out.write('cancel requested for %s; `status` shows when it has stopped\n' % name)
        return 0
    job = vertex.get(name)
    for line in jobs.describe(job):
        out.write(line + '\n')
    estimate.print_cost(job, out, environ)
    return 0

