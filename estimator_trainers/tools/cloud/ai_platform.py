"""`bash scripts/ai-platform.sh ...`: what followed `gcloud ai-platform` (or `gcloud ml-engine`).

    ai-platform.sh jobs submit training JOB [--config FILE] [--package-path DIR --module-name M]
                   [--job-dir gs://...] [--region R] [--scale-tier T] [...]
                   [--dry-run [--format json|yaml]] [-- USER_ARGS]
    ai-platform.sh jobs describe|stream-logs JOB; jobs cancel JOB [--dry-run]
    ai-platform.sh jobs list [--limit N]
    ai-platform.sh local train --package-path DIR --module-name M [--job-dir DIR]
                   [--distributed [--parameter-server-count N] [--worker-count N]
                    [--evaluator-count N] [--start-port P]] [-- USER_ARGS]
    ai-platform.sh local predict --model-dir DIR --json-instances F|--text-instances F
    ai-platform.sh models create|describe|delete MODEL; models list
    ai-platform.sh versions create VERSION --model M --origin gs://.../export/TS [...]
    ai-platform.sh versions list|describe|delete|set-default [VERSION] --model M
    ai-platform.sh predict --model M [--version V] --json-instances F|--text-instances F

A front: `jobs submit training` turns gcloud's words into a `plan.JobPlan`
with the translation table (`gcloud_flags`) and hands it to `pipeline.run`,
which owns the order (checks before anything is uploaded: here the package
builds, installs in a fresh virtualenv with its requirements named against
this project's pins, and its module is read, never run; this project's
image; staging; `--dry-run`, `--dry-run --format yaml` (the spec `gcloud ai
custom-jobs create --config` takes: `vertex_spec`), `--rehearse`,
`--stream-logs`). `jobs cancel` goes through `pipeline.cancel`; the other
commands call the job functions (`describe`, `list_jobs`, `logs`,
`launcher.run_package`) with plain arguments. Every command finds its
project and region by `location`'s rule, gcloud's own settings included.

The serving commands (AI Platform Prediction's, on Vertex AI's Model Registry
and endpoints: `endpoints`) work the same way: `versions create` turns its
words into a `plan.ServingPlan` (`endpoints.version_plan`) for
`pipeline.deploy`, which owns the order (the check of the export, upload,
deploy, rollback); `models delete` and `versions delete` go through
`pipeline.remove` (their dry runs, with or without credentials, through
`pipeline.remove_dry_run`); the others call `endpoints` directly. `local predict`
loads the export with `estimator_trainers.serving` (TensorFlow is imported
only then).
"""
import argparse
import functools
import json
import os
import sys

import yaml

from estimator_trainers import errors
from estimator_trainers import flags
from estimator_trainers import google_api
from estimator_trainers import logs as logs_lib
from estimator_trainers.errors import UserInputError
from estimator_trainers.tools import launcher
from estimator_trainers.tools.cloud import backend as backend_lib
from estimator_trainers.tools.cloud import build as build_lib
from estimator_trainers.tools.cloud import configs
from estimator_trainers.tools.cloud import endpoints
from estimator_trainers.tools.cloud import estimate
from estimator_trainers.tools.cloud import gcloud_flags
from estimator_trainers.tools.cloud import instances
from estimator_trainers.tools.cloud import jobs
from estimator_trainers.tools.cloud import location
from estimator_trainers.tools.cloud import logs
from estimator_trainers.tools.cloud import machines
from estimator_trainers.tools.cloud import pipeline
from estimator_trainers.tools.cloud import plan as plan_lib
from estimator_trainers.tools.cloud import rehearsal
from estimator_trainers.tools.cloud import roles

PROG = 'bash scripts/ai-platform.sh'
# --dry-run of the verbs that look something up before they change it.
DRY_RUN_LOOKUP_HELP = ('Print the requests; change nothing. Needs no credentials: with them, '
                       'what the requests name is looked up (read); without, or offline, '
                       'placeholders name it.')
# ml v1 job states, which scripts compare against (`--format='value(state)'`).
LEGACY_STATES = {
    'JOB_STATE_QUEUED': 'QUEUED', 'JOB_STATE_PENDING': 'PREPARING',
    'JOB_STATE_RUNNING': 'RUNNING', 'JOB_STATE_SUCCEEDED': 'SUCCEEDED',
    'JOB_STATE_FAILED': 'FAILED', 'JOB_STATE_CANCELLING': 'CANCELLING',
    'JOB_STATE_CANCELLED': 'CANCELLED', 'JOB_STATE_PAUSED': 'PREPARING',
    'JOB_STATE_EXPIRED': 'FAILED', 'JOB_STATE_UPDATING': 'RUNNING',
    'JOB_STATE_PARTIALLY_SUCCEEDED': 'FAILED', 'JOB_STATE_UNSPECIFIED': 'STATE_UNSPECIFIED',
}


def _arg_type(function):
    """A `gcloud` value parser as an argparse type (its ValueError is the message)."""
    def parse(text):
        try:
            return function(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    parse.__name__ = function.__name__
    return parse


def build_parser():
    parser = flags.make_parser(PROG, 'Your `gcloud ai-platform` (or `gcloud ml-engine`) '
                               'command lines, on Vertex AI and on this machine.')
    groups = parser.add_subparsers(dest='group', required=True, metavar='GROUP')
    jobs_parser = groups.add_parser('jobs', help='submit and manage training jobs')
    commands = jobs_parser.add_subparsers(dest='command', required=True, metavar='COMMAND')
    submit = commands.add_parser('submit', help='submit a job')
    kinds = submit.add_subparsers(dest='kind', required=True, metavar='KIND')
    training = kinds.add_parser(
        'training', help='submit a training job',
        description='Submit a training job to Vertex AI, as gcloud ai-platform jobs '
                    'submit training did (docs/migrating-from-ai-platform.md).')
    _add_submit_flags(training)

    for name, text in (('describe', 'describe a job'), ('cancel', 'cancel a job'),
                       ('stream-logs', 'print a job\'s log lines until it ends')):
        command = commands.add_parser(name, help=text, description=text.capitalize() + '.')
        command.add_argument('job', metavar='JOB', help='Job name (or Vertex AI resource '
                             'name or numeric id).')
        _add_global_flags(command)
        _add_region_flag(command)
        if name == 'describe':
            command.add_argument('--format', default='yaml',
                                 help='yaml, json or value(FIELD,...).')
        if name == 'cancel':
            command.add_argument('--dry-run', action='store_true', help=DRY_RUN_LOOKUP_HELP)
        if name == 'stream-logs':
            command.add_argument('--polling-interval', type=flags.non_negative_float,
                                 default=60.0, help='Seconds between polls.')
            command.add_argument('--task-name', help='Only this replica: master-replica-0, '
                                 'worker-replica-1, ps-replica-0 (or workerpool1-0).',
                                 type=_arg_type(vertex_task_name))
            command.add_argument('--allow-multiline-logs', action='store_true',
                                 help='Accepted: each entry\'s lines are printed anyway.')
    listing = commands.add_parser('list', help='list jobs')
    _add_global_flags(listing)
    _add_region_flag(listing)
    listing.add_argument('--limit', type=flags.positive_int, default=100,
                         help='Most jobs to show.')
    listing.add_argument('--page-size', type=flags.positive_int,
                         help='Accepted (pages are fetched as needed).')
    listing.add_argument('--format', default='table', help='table, yaml, json or '
                         'value(FIELD,...).')

    local_parser = groups.add_parser('local', help='run a package on this machine')
    local_commands = local_parser.add_subparsers(dest='command', required=True,
                                                 metavar='COMMAND')
    train = local_commands.add_parser(
        'train', help='run a training package locally',
        description='Run python -m MODULE from the package\'s directory, once, or with '
                    '--distributed once per task of a local TensorFlow cluster.')
    train.add_argument('--package-path', help='The package directory (its parent goes on '
                       'PYTHONPATH; default: the current directory holds the module).')
    train.add_argument('--module-name', required=True, help='Module to run (python -m).')
    train.add_argument('--job-dir', help='Passed to the module as --job-dir; task logs go '
                       'to JOB_DIR/logs with --distributed.')
    train.add_argument('--distributed', action='store_true',
                       help='Run a chief plus parameter servers, workers and evaluators.')
    for option, default, text in (
            ('--parameter-server-count', 2, 'Parameter servers'),
            ('--worker-count', 2, 'Workers besides the chief'),
            ('--evaluator-count', 0, 'Evaluators')):
        train.add_argument(option, type=flags.non_negative_int,
                           help='%s with --distributed (default %d).' % (text, default))
    train.add_argument('--start-port', type=flags.positive_int,
                       help='First port to try (default: free ports).')
    _add_global_flags(train)
    _add_serving_parsers(groups, local_commands)
    return parser


def _add_global_flags(parser):
    """gcloud-wide flags that scripts carry."""
    parser.add_argument('--project', help=location.PROJECT_HELP)
    parser.add_argument('--quiet', '-q', action='store_true',
                        help='Accepted: nothing here prompts.')
    parser.add_argument('--verbosity', help='Accepted, not used.')


def _add_region_flag(parser):
    parser.add_argument('--region', help='Region of the jobs (%s).'
                        % location.region_help(location.TRAINING))


def _add_submit_flags(parser):
    parser.add_argument('job', metavar='JOB', help=gcloud_flags.FLAG_ROWS['JOB'].help)
    for row in gcloud_flags.FLAGS:
        if not row.name.startswith('--') or row.name in ('--async', '--stream-logs'):
            continue
        kwargs = {'help': row.help}
        if row.switch:
            kwargs.update(action='store_const', const=True)
        elif row.parse:
            kwargs['type'] = _arg_type(row.parse)
        parser.add_argument(row.name, **kwargs)
    for part in ('keyring', 'location', 'project'):
        parser.add_argument('--kms-%s' % part, help='Completes a short --kms-key id.')
    follow = parser.add_mutually_exclusive_group()
    follow.add_argument('--async', action='store_true', dest='async_',
                        help=gcloud_flags.FLAG_ROWS['--async'].help)
    follow.add_argument('--stream-logs', action='store_true',
                        help=gcloud_flags.FLAG_ROWS['--stream-logs'].help)
    _add_global_flags(parser)
    parser.add_argument('--dry-run', action='store_true',
                        help='Run the checks, print the staging plan and the exact request; '
                             'send nothing. Never runs the package\'s code.')
    parser.add_argument('--format', help='With --dry-run: json (the default: the staging '
                        'plan and the request) or yaml (the spec `gcloud ai custom-jobs create '
                        '--config`, or `gcloud ai hp-tuning-jobs create --config` for a tuning '
                        'config, takes; the command on stderr). Else how the submitted job is '
                        'printed: yaml (the default), json or value(FIELD,...).')
    parser.add_argument('--unpin', type=_arg_type(gcloud_flags.package_list), default=[],
                        metavar='NAME[,NAME...]',
                        help='Let the package\'s requirements choose the version of these '
                             'distributions over this project\'s pins (constraints.txt); '
                             'not TensorFlow\'s own. --rehearse checks that the job still '
                             'runs with them.')
    parser.add_argument('--repository', default=build_lib.DEFAULT_REPOSITORY,
                        help='Artifact Registry repository for this project\'s image.')
    parser.add_argument('--poll-interval', type=flags.non_negative_float, default=30.0,
                        help='Seconds between polls with --stream-logs.')
    rehearsal.add_flags(parser)
    estimate.add_flags(parser)


def main(argv=None, backend=None, out=None, err=None, environ=None):
    """Runs one command; returns the exit code."""
    argv, user_args = flags.split_at_dashes(sys.argv[1:] if argv is None else argv)
    environ = os.environ if environ is None else environ
    args = build_parser().parse_args(argv)
    out, err = out or sys.stdout, err or sys.stderr
    backend = backend or backend_lib.Backend()
    if user_args is not None and (args.group, args.command) not in (
            ('jobs', 'submit'), ('local', 'train')):
        raise UserInputError('arguments after -- go with jobs submit training or local train')
    if args.group in SERVING_GROUPS or (args.group, args.command) == ('local', 'predict'):
        return serving_command(args, backend, out, err, environ)
    if args.group == 'local':
        return launcher.run_package(args.package_path, args.module_name, args.job_dir,
                                    user_args or [], args.distributed,
                                    _launcher_options(args))
    if args.command == 'submit':
        return submit_training(args, user_args, backend, out, err, environ)
    if args.command == 'cancel':
        pipeline.cancel(backend, args.job, pipeline.Action(
            kind=pipeline.DRY_RUN if args.dry_run else pipeline.SUBMIT, project=args.project,
            region_flag=args.region), out, err, environ)
        if not args.dry_run:
            err.write('Cancelled job [%s].\n' % args.job)
        return 0
    vertex, credentials, name = backend_lib.connect(
        backend, getattr(args, 'job', None), args.project, args.region, environ, err)
    if args.command == 'describe':
        job = vertex.get(name)
        describe(job, args.format, out)
        estimate.print_cost(job, err, environ)
        return 0
    if args.command == 'stream-logs':
        final = logs.follow_job(backend, credentials, vertex, name, args.polling_interval,
                                out, task_name=args.task_name)
        estimate.print_cost(final, err, environ)
        return 0 if final.get('state') == jobs.SUCCEEDED else 1
    return list_jobs(vertex, args.limit, args.format, out)


def submit_training(args, user_args, backend, out, err, environ):
    """`jobs submit training JOB`: the plan of its flags, through the pipeline."""
    if args.rehearse and (args.dry_run or args.stream_logs):
        raise UserInputError('--rehearse runs the job on this machine; it does not go with '
                             '%s' % ('--dry-run' if args.dry_run else '--stream-logs'))
    if args.dry_run and args.format not in (None,) + pipeline.DRY_RUN_FORMATS:
        raise UserInputError('--format %s: a dry run prints json (the request) or yaml (the '
                             'spec gcloud ai takes)' % args.format, flag='--format')
    plan = training_plan(args, user_args, environ)
    action = pipeline.Action(
        kind=(pipeline.REHEARSE if args.rehearse else pipeline.DRY_RUN if args.dry_run
              else pipeline.SUBMIT),
        project=args.project, region_flag=args.region, repository=args.repository,
        stream_logs=args.stream_logs, poll_interval=args.poll_interval,
        max_replicas=args.max_replicas, dry_run_format=args.format or 'json',
        local_storage=args.local_storage, local_inputs=tuple(args.local_input),
        on_created=functools.partial(print_submitted, fmt=args.format or 'yaml'),
        max_cost=args.max_cost, throughput_from=args.throughput_from)
    return pipeline.run(plan, action, backend, out, err, environ)


def training_plan(args, user_args, environ):
    """The `plan.JobPlan` of `jobs submit training JOB` with parsed `args`.

    Raises:
      UserInputError: a flag, the config or their combination that cannot work.
    """
    plan_lib.check_job_name(args.job)
    values = {row.name: getattr(args, row.name[2:].replace('-', '_'), None)
              for row in gcloud_flags.FLAGS if row.name.startswith('--')}
    values['--async'] = values['--stream-logs'] = None
    values['--kms-key'] = gcloud_flags.kms_key_name(args.kms_key, args.kms_keyring,
                                                    args.kms_location, args.kms_project)
    config_path = values.get('--config')
    data = configs.read_config(config_path) if config_path else None
    plan = gcloud_flags.build_plan(args.job, values, user_args, data,
                                   config_path or 'command line', environ=environ,
                                   unpinned=args.unpin)
    if plan.kms_key and gcloud_flags.kms_location(plan.kms_key) != plan.region:
        raise UserInputError('--kms-key %s: the key is in %s; Vertex AI needs it in the '
                             "job's region %s" % (plan.kms_key,
                                                  gcloud_flags.kms_location(plan.kms_key),
                                                  plan.region), flag='--kms-key')
    return plan



def _launcher_options(args):
    options = []
    for option in ('--parameter-server-count', '--worker-count', '--evaluator-count',
                   '--start-port'):
        value = getattr(args, option[2:].replace('-', '_'))
        if value is not None:
            options += [option, str(value)]
    return options


def vertex_task_name(task_name):
    """AI Platform's `master-replica-0` (or Vertex AI's `workerpool0-0`) -> Vertex AI's."""
    parsed = roles.parse_replica(task_name)
    if not parsed:
        raise ValueError('expected a replica like master-replica-0, worker-replica-1, '
                         'ps-replica-0 or workerpool1-0, got %r' % task_name)
    return parsed[0].replica(parsed[1])


def legacy_job(job):
    """A Vertex AI job resource in the shape `gcloud ai-platform jobs describe` printed."""
    info = jobs.parse_job_name(job.get('name', '')) or {}
    legacy = {'jobId': job.get('displayName', ''),
              'state': LEGACY_STATES.get(job.get('state', 'JOB_STATE_UNSPECIFIED'),
                                         job.get('state'))}
    for key in ('createTime', 'startTime', 'endTime'):
        if job.get(key):
            legacy[key] = job[key]
    if job.get('error', {}).get('message'):
        legacy['errorMessage'] = job['error']['message']
    if job.get('labels'):
        legacy['labels'] = job['labels']
    best = jobs.best_trial(job)
    if best:
        legacy['bestTrial'] = best
    legacy['vertexJob'] = job.get('name', '')
    if info:
        legacy['consoleUrl'] = ('https://console.cloud.google.com/vertex-ai/locations/%s/'
                                'training/%s?project=%s' % (info['region'], info['id'],
                                                            info['project']))
    return legacy


def _formatted(record, fmt):
    if fmt == 'json':
        return json.dumps(record, indent=2) + '\n'
    if fmt == 'yaml':
        return yaml.safe_dump(record, sort_keys=False)
    if fmt.startswith('value(') and fmt.endswith(')'):
        fields = [f.strip() for f in fmt[len('value('):-1].split(',') if f.strip()]
        return '\t'.join(str(record.get(f, '')) for f in fields) + '\n'
    raise UserInputError("--format %s: expected yaml, json or value(FIELD,...)" % fmt,
                         flag='--format')


def describe(job, fmt, out):
    """Prints `job` as gcloud's describe did (`legacy_job`) in `fmt`."""
    out.write(_formatted(legacy_job(job), fmt))
    return 0


def list_jobs(vertex, limit, fmt, out):
    """gcloud's `jobs list`: a table of JOB_ID, STATUS, CREATED (or `fmt`)."""
    records = [legacy_job(job) for job in vertex.list(limit=limit)]
    if fmt == 'table':
        out.write('%-40s %-12s %s\n' % ('JOB_ID', 'STATUS', 'CREATED'))
        for record in records:
            out.write('%-40s %-12s %s\n' % (record['jobId'], record['state'],
                                             record.get('createTime', '')))
        return 0
    if fmt.startswith('value('):
        for record in records:
            out.write(_formatted(record, fmt))
        return 0
    out.write(_formatted(records, fmt) if fmt != 'yaml' else yaml.safe_dump(
        records, sort_keys=False))
    return 0


def print_submitted(plan, job, out, err, fmt='yaml'):
    """gcloud's closing lines, with this script's commands, and the job as gcloud showed
    it (in `fmt`: yaml, json or value(FIELD,...))."""
    err.write('Job [%s] submitted successfully (%s).\n'
              'Your job is still active. You may view the status of your job with the '
              'command\n\n  $ %s jobs describe %s\n\nor continue streaming the logs with '
              'the command\n\n  $ %s jobs stream-logs %s\n'
              % (plan.name, job['name'], PROG, plan.name, PROG, plan.name))
    out.write(_formatted(legacy_job(dict(job, state=job.get('state', 'JOB_STATE_QUEUED'))),
                         fmt))
    out.flush()



# ------------------------------------------------------------------ serving


SERVING_GROUPS = ('models', 'versions', 'predict')
# versions create flags of gcloud that this tool does not carry over: the line each gets.
REFUSED_VERSION_FLAGS = {
    '--config': 'pass the version\'s fields as flags (--origin, --machine-type, --min-nodes, '
                '--max-nodes, --labels, --description)',
    '--staging-bucket': 'Vertex AI serves from Cloud Storage: copy the export there and pass '
                        'its gs:// path as --origin',
    '--prediction-class': 'custom prediction routines are not deployed by this tool (a '
                          'TensorFlow SavedModel is)',
    '--package-uris': 'custom prediction routines are not deployed by this tool (a '
                      'TensorFlow SavedModel is)',
    '--explanation-method': 'Vertex AI Explainable AI is not set up by this tool',
    '--metric-targets': 'Vertex AI scales a deployed model on CPU use (--min-nodes, '
                        '--max-nodes); targets are not set by this tool',
}


def _add_serving_parsers(groups, local_commands):
    """`local predict`, `models`, `versions` and `predict` (AI Platform Prediction's words)."""
    local = local_commands.add_parser(
        'predict', help='predict with a SavedModel on this machine',
        description='Call a SavedModel\'s serving signature on instances, as gcloud ai-platform '
                    'local predict did (and Vertex AI\'s TensorFlow image does): any export, '
                    'this project\'s trainers\' or your package\'s.')
    local.add_argument('--model-dir', required=True, type=flags.path,
                       help='The export (holding saved_model.pb), or a directory of '
                            'timestamped exports (the newest is used).')
    _add_instances_flags(local)
    local.add_argument('--signature-name', help='The signature to call (default '
                       'serving_default, else the only one).')
    local.add_argument('--framework', default='tensorflow',
                       help='tensorflow (the only one this tool serves).')
    _add_predict_format(local)
    _add_global_flags(local)

    commands = _command_group(groups, 'models', 'models: Vertex AI endpoints',
                              'AI Platform models, as Vertex AI endpoints.')
    create = commands.add_parser(
        'create', help='create a model (an empty endpoint: free until a version is deployed)',
        description='Create a model: a Vertex AI endpoint of that name, labelled as this '
                    'tool\'s. Nothing is billed until a version is deployed on it.')
    create.add_argument('model', metavar='MODEL', help='The model\'s name.')
    create.add_argument('--regions', help='One region (Vertex AI endpoints are regional).')
    create.add_argument('--description', help='Its description.')
    create.add_argument('--labels', type=_arg_type(gcloud_flags.labels), default={},
                        metavar='KEY=VALUE,...', help='Labels of the endpoint.')
    create.add_argument('--enable-logging', action='store_true',
                        help='Access logs of its versions\' predictions (Vertex AI\'s '
                             'enableAccessLogging, set on each version deployed here).')
    create.add_argument('--enable-console-logging', action='store_true',
                        help='Accepted: Vertex AI sends the serving container\'s logs to '
                             'Cloud Logging anyway.')
    _add_serving_flags(create, dry_run='Print the request; send nothing.')
    listing = commands.add_parser(
        'list', help='list models, their versions and the machines they keep',
        description='Every endpoint of the region, with its default version, versions and '
                    'the machines deployed for them (billed while deployed).')
    listing.add_argument('--format', default='table', help='table, yaml or json.')
    _add_serving_flags(listing, dry_run='Print the request; send nothing (no credentials '
                                        'needed).')
    describe_model = commands.add_parser('describe', help='describe a model')
    describe_model.add_argument('model', metavar='MODEL',
                                help='The model\'s name (or its endpoint\'s resource name).')
    describe_model.add_argument('--format', default='yaml', help='yaml, json or '
                                'value(FIELD,...).')
    _add_serving_flags(describe_model)
    delete = commands.add_parser(
        'delete', help='undeploy a model\'s versions and delete it',
        description='Undeploy every version of MODEL, delete the Vertex AI models this tool '
                    'uploaded for them and its endpoint; say what was removed. An endpoint '
                    'this tool did not create is deleted only when named by its resource '
                    'name.')
    delete.add_argument('model', metavar='MODEL',
                        help='The model\'s name (or its endpoint\'s resource name).')
    _add_serving_flags(delete, dry_run=DRY_RUN_LOOKUP_HELP)

    commands = _command_group(groups, 'versions', 'versions: models deployed on an endpoint',
                              'AI Platform versions, as Vertex AI models deployed on the '
                              'model\'s endpoint.')
    create = commands.add_parser(
        'create', help='upload a SavedModel and deploy it as a version',
        description='Check the export on this machine (load it, call its serving signature '
                    'on one instance), upload it to the Vertex AI Model Registry with '
                    'TensorFlow 2.15\'s prebuilt prediction image and deploy it on the '
                    'model\'s endpoint; a failure rolls back.')
    create.add_argument('version', metavar='VERSION', help='The version\'s name.')
    create.add_argument('--model', required=True, help='The model (from models create).')
    create.add_argument('--origin', required=True,
                        help='gs:// export (holding saved_model.pb), or a directory of '
                             'timestamped exports (the newest is served).')
    create.add_argument('--runtime-version', help='Accepted: says what serves instead.')
    create.add_argument('--python-version', help='Accepted: a SavedModel has no Python code.')
    create.add_argument('--framework', help='tensorflow (the only one this tool deploys).')
    create.add_argument('--machine-type', help='Each node\'s machine (default %s; '
                        'mls1-c1-m2 and mls1-c4-m2 map to n1-standard-2 and -4).'
                        % machines.PREDICTION_MACHINE_TYPE)
    create.add_argument('--accelerator', type=_arg_type(gcloud_flags.accelerator),
                        metavar='count=N,type=TYPE', help='GPUs per node (the GPU image '
                        'serves then).')
    create.add_argument('--min-nodes', type=flags.non_negative_int,
                        help='Nodes kept (default 1; Vertex AI keeps at least 1).')
    create.add_argument('--max-nodes', type=flags.positive_int,
                        help='Nodes at most (default --min-nodes).')
    create.add_argument('--description', help='The Vertex AI model\'s description.')
    create.add_argument('--labels', type=_arg_type(gcloud_flags.labels), default={},
                        metavar='KEY=VALUE,...', help='Labels of the Vertex AI model.')
    create.add_argument('--service-account', help='The service account the version runs as.')
    create.add_argument('--image-uri', '--image', dest='image_uri',
                        help='A serving image instead of TensorFlow 2.15\'s prebuilt '
                             'prediction image (needed after %s).'
                             % endpoints.PREDICTION_IMAGES_UNTIL)
    create.add_argument('--signature-name', help='The signature the check calls (default '
                        'serving_default).')
    create.add_argument('--check-instances', type=flags.path, metavar='FILE',
                        help='JSON instances (as --json-instances); the check calls the '
                             'signature on the first (default: one made of zeros).')
    create.add_argument('--async', action='store_true', dest='async_',
                        help='Return once the deploy started (a later failure is then not '
                             'rolled back).')
    for flag in REFUSED_VERSION_FLAGS:
        create.add_argument(flag, help='Not carried over: %s.' % REFUSED_VERSION_FLAGS[flag])
    _add_serving_flags(create, dry_run='Check the export and print the requests; send '
                                       'nothing.')
    for name, text in (('list', 'list a model\'s versions'),
                       ('describe', 'describe a version'),
                       ('delete', 'undeploy a version and delete its Vertex AI model'),
                       ('set-default', 'send all of a model\'s traffic to a version')):
        command = commands.add_parser(name, help=text, description=text.capitalize() + '.')
        if name != 'list':
            command.add_argument('version', metavar='VERSION', help='The version\'s name.')
        command.add_argument('--model', required=True, help='The model\'s name (or its '
                             'endpoint\'s resource name).')
        if name in ('list', 'describe'):
            command.add_argument('--format', default='table' if name == 'list' else 'yaml',
                                 help='table (list), yaml, json or value(FIELD,...).')
        _add_serving_flags(command, dry_run=DRY_RUN_LOOKUP_HELP if name == 'delete' else None)

    predict = groups.add_parser(
        'predict', help='online predictions of a deployed model',
        description='Send instances to the model\'s endpoint (:predict); Vertex AI routes '
                    'them by its traffic split (the default version).')
    predict.set_defaults(command=None)
    predict.add_argument('--model', required=True, help='The model\'s name (or its '
                         'endpoint\'s resource name).')
    predict.add_argument('--version', help='A version taking all of the model\'s traffic.')
    _add_instances_flags(predict)
    predict.add_argument('--signature-name', help='Accepted: Vertex AI\'s TensorFlow image '
                         'calls serving_default.')
    _add_predict_format(predict)
    _add_serving_flags(predict, dry_run='Print the request; send nothing.')


def _command_group(groups, name, text, description):
    """A group of commands (`models`, `versions`): its subparsers."""
    group = groups.add_parser(name, help=text, description=description)
    return group.add_subparsers(dest='command', required=True, metavar='COMMAND')


def _add_instances_flags(parser):
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument(instances.JSON_INSTANCES, metavar='FILE',
                        help='One JSON instance per line (- for standard input).')
    source.add_argument(instances.TEXT_INSTANCES, metavar='FILE',
                        help='One string instance per line.')
    source.add_argument(instances.JSON_REQUEST, metavar='FILE',
                        help='A request body: {"instances": [...]}.')


def _add_predict_format(parser):
    parser.add_argument('--format', default='table', choices=instances.FORMATS,
                        help='table (gcloud\'s: a column per output), json or yaml.')


def _add_serving_flags(parser, dry_run=None):
    _add_global_flags(parser)
    parser.add_argument('--region', help='Region of the endpoints (%s; global: the same).'
                        % location.region_help(location.SERVING))
    parser.add_argument('--poll-interval', type=flags.non_negative_float, default=10.0,
                        help='Seconds between polls of an operation.')
    if dry_run:
        parser.add_argument('--dry-run', action='store_true', help=dry_run)


def _instances_of(args, limit=None):
    for flag in instances.FLAGS:
        path = getattr(args, flag[2:].replace('-', '_'))
        if path is not None:
            return instances.read(flag, path, limit)
    raise UserInputError('one of %s is required' % ', '.join(instances.FLAGS))


def serving_command(args, backend, out, err, environ):
    """The serving commands: `local predict`, `models ...`, `versions ...`, `predict`."""
    if args.group == 'local':
        return local_predict(args, out)
    if (args.group, args.command) == ('versions', 'create'):
        return create_version(args, backend, out, err, environ)
    if args.group == 'predict':
        return online_predict(args, backend, out, err, environ)
    if (args.group, args.command) == ('models', 'create'):
        return create_model(args, backend, out, err, environ)
    model = getattr(args, 'model', None)
    action = pipeline.Action(kind=pipeline.DRY_RUN if getattr(args, 'dry_run', False)
                             else pipeline.REMOVE, project=args.project,
                             region_flag=args.region, poll_interval=args.poll_interval)
    if action.kind == pipeline.DRY_RUN:
        return serving_dry_run(args, model, action, backend, out, err, environ)
    vertex = backend_lib.connect_serving(backend, model, args.project, args.region, environ,
                                         err)
    if args.group == 'models':
        if args.command == 'list':
            return list_models(vertex, args.format, out, err)
        if args.command == 'describe':
            out.write(_formatted(describe_model(vertex, model), args.format))
            return 0
        removed = pipeline.remove(vertex, model, None, action, out, err)
        if removed:
            err.write('Deleted model [%s]: %s.\n' % (model, '; '.join(removed)))
        return 0
    endpoint = endpoints.find_model(vertex, model)
    if args.command == 'list':
        return list_versions(vertex, endpoint, args.format, out)
    if args.command == 'describe':
        deployed = endpoints.find_version(endpoint, args.version)
        out.write(_formatted(endpoints.legacy_version(
            endpoint, deployed, _models_of(vertex, [deployed]).get(deployed.get('model')),
            vertex.project), args.format))
        return 0
    if args.command == 'set-default':
        updated = endpoints.set_default(vertex, endpoint, args.version)
        err.write('Version [%s] is the default of model [%s]: it takes all of its traffic.\n'
                  % (args.version, model))
        deployed = endpoints.find_version(updated, args.version)
        out.write(_formatted(endpoints.legacy_version(updated, deployed, None, vertex.project),
                             'yaml'))
        return 0
    removed = pipeline.remove(vertex, model, args.version, action, out, err)
    if removed:
        err.write('Deleted version [%s] of model [%s]: %s.\n'
                  % (args.version, model, '; '.join(removed)))
    return 0


def serving_dry_run(args, model, action, backend, out, err, environ):
    """`models list|delete --dry-run`, `versions delete --dry-run`: the requests, no change."""
    if args.command == 'list':
        offline = pipeline.offline_serving(None, args.project, args.region, environ, err)
        out.write(json.dumps({'request': pipeline.request_json(
            offline.list_endpoints_request())}, indent=2) + '\n')
        return 0
    pipeline.remove_dry_run(backend, model, getattr(args, 'version', None), action, out, err,
                            environ)
    return 0


def local_predict(args, out):
    """`local predict`: the export's signature on the instances, printed as gcloud did."""
    if args.framework.lower() != 'tensorflow':
        raise UserInputError('--framework %s: this tool serves TensorFlow SavedModels '
                             '(--framework tensorflow)' % args.framework, flag='--framework')
    read = _instances_of(args)
    # The instances are read without TensorFlow; the export needs it.
    logs_lib.quiet_tensorflow_native_logs()
    logs_lib.import_tensorflow()
    from estimator_trainers import serving  # pylint: disable=import-outside-toplevel
    signature = serving.load(serving.find_export(args.model_dir), args.signature_name)
    predictions = signature.predict(list(read.values), read.where)
    out.write(instances.render({'predictions': predictions}, args.format))
    return 0


def create_model(args, backend, out, err, environ):
    """`models create MODEL`: an endpoint of that name (free until a version is deployed)."""
    plan_lib.check_serving_name(args.model, 'MODEL')
    if args.regions and ',' in args.regions:
        raise UserInputError('--regions %s: Vertex AI endpoints are regional; give one region'
                             % args.regions, flag='--regions')
    region = args.region or args.regions
    if args.labels:
        configs.check_labels(args.labels)
    if args.enable_console_logging:
        err.write('note: --enable-console-logging: Vertex AI sends the serving container\'s '
                  'logs to Cloud Logging by default\n')
    body = endpoints.endpoint_body(args.model, args.description, args.labels,
                                   args.enable_logging)
    if args.dry_run:
        offline = pipeline.offline_serving(None, args.project, region, environ, err)
        out.write(json.dumps({'request': pipeline.request_json(
            offline.create_endpoint_request(body))}, indent=2) + '\n')
        return 0
    vertex = backend_lib.connect_serving(backend, None, args.project, region, environ, err)
    created = endpoints.create_model(vertex, args.model, err, args.description, args.labels,
                                     args.enable_logging, args.poll_interval)
    err.write('Created ai platform model [projects/%s/models/%s] as Vertex AI endpoint [%s]; '
              'nothing is billed until a version is deployed on it.\n'
              % (vertex.project, args.model, created.get('name', '?')))
    return 0


def create_version(args, backend, out, err, environ):
    """`versions create VERSION --model M --origin gs://...`: its plan, through the pipeline."""
    for flag in REFUSED_VERSION_FLAGS:
        if getattr(args, flag[2:].replace('-', '_')) is not None:
            raise UserInputError('%s: not carried over: %s' % (flag, REFUSED_VERSION_FLAGS[flag]),
                                 flag=flag)
    parsed = endpoints.parse_endpoint_name(args.model)
    region = parsed['region'] if parsed else location.region_id(
        args.region, environ, scope=location.SERVING)
    check = (instances.read(instances.JSON_INSTANCES, args.check_instances,
                            instances.ONLINE_MAX_INSTANCES).values
             if args.check_instances else ())
    plan = endpoints.version_plan(
        args.version, args.model, args.origin, region, runtime_version=args.runtime_version,
        python_version=args.python_version, framework=args.framework,
        machine_type=args.machine_type, accelerator=args.accelerator,
        min_nodes=args.min_nodes, max_nodes=args.max_nodes, description=args.description,
        labels=args.labels, service_account=args.service_account, image_uri=args.image_uri,
        signature_name=args.signature_name, check_instances=check, wait=not args.async_)
    action = pipeline.Action(kind=pipeline.DRY_RUN if args.dry_run else pipeline.DEPLOY,
                             project=args.project, region_flag=args.region,
                             poll_interval=args.poll_interval, on_created=print_deployed)
    return pipeline.deploy(plan, action, backend, out, err, environ)


def print_deployed(plan, deployed, out, err):
    """gcloud's closing line of versions create, with the Vertex AI names."""
    if deployed.deployed_model is None:
        err.write('Deploying version [%s] of model [%s]: Vertex AI model %s on endpoint %s '
                  '(not waited for: `versions list --model %s` shows it once deployed).\n'
                  % (plan.version, plan.model, deployed.model, deployed.endpoint, plan.model))
    else:
        err.write('Created version [%s] of model [%s]: Vertex AI model %s deployed on '
                  'endpoint %s as deployed model %s (%s, billed while deployed).\n' % (
                      plan.version, plan.model, deployed.model, deployed.endpoint,
                      deployed.deployed_model.get('id', '?'),
                      endpoints.machines_of(deployed.deployed_model)[1]))
    err.flush()


def online_predict(args, backend, out, err, environ):
    """`predict --model M [--version V]`: the endpoint's :predict, printed as gcloud did."""
    read = _instances_of(args, instances.ONLINE_MAX_INSTANCES)
    body = endpoints.predict_body(read.values)
    if args.signature_name:
        err.write('note: --signature-name %s: not sent; Vertex AI\'s TensorFlow image calls '
                  'serving_default (`local predict --signature-name` calls others)\n'
                  % args.signature_name)
    if args.dry_run:
        offline = pipeline.offline_serving(args.model, args.project, args.region, environ, err)
        out.write(json.dumps({'request': pipeline.request_json(offline.predict_request(
            pipeline.endpoint_placeholder(offline, args.model), body))}, indent=2) + '\n')
        return 0
    vertex = backend_lib.connect_serving(backend, args.model, args.project, args.region,
                                         environ, err)
    endpoint = endpoints.find_model(vertex, args.model)
    response = endpoints.predict(vertex, endpoint, args.version, body)
    out.write(instances.render({'predictions': response.get('predictions', [])}, args.format))
    return 0


def describe_model(vertex, model):
    """`models describe`: the endpoint as AI Platform's Model, with its versions' origins."""
    endpoint = endpoints.find_model(vertex, model)
    return endpoints.legacy_model(endpoint, _models_of(vertex, endpoint.get('deployedModels')
                                                       or []), vertex.project)


def _models_of(vertex, deployed):
    """{Vertex AI model name: model} of deployed models (a deleted one is left out)."""
    found = {}
    for item in deployed:
        try:
            found[item['model']] = vertex.get_model(item['model'])
        except google_api.ApiError as e:
            if e.status != 404:
                raise
    return found


def list_models(vertex, fmt, out, err):
    """`models list`: every endpoint of the region, its versions and the machines they keep."""
    records = [endpoints.legacy_model(e, project=vertex.project)
               for e in vertex.list_endpoints()]
    if fmt == 'table':
        out.write(instances.table(
            ['NAME', 'DEFAULT_VERSION_NAME', 'VERSIONS', 'MACHINES'],
            [[r['name'].rsplit('/', 1)[-1] + ('' if r['createdByThisTool'] else ' *'),
              r.get('defaultVersion', {}).get('name', '').rsplit('/', 1)[-1] or '-',
              str(len(r['versions'])), r['machines'] or '-'] for r in records]))
    else:
        out.write(_formatted_list(records, fmt))
    nodes = sum(r['nodes'] for r in records)
    versions = sum(len(r['versions']) for r in records)
    if versions:
        err.write('%d version(s) deployed on %d model(s) in %s keep at least %d machine(s) '
                  'running, billed while deployed whether used or not; `models delete MODEL` '
                  'removes a model and its versions\n' % (
                      versions, sum(1 for r in records if r['versions']), vertex.region,
                      nodes))
    else:
        err.write('nothing deployed in %s: no machines billed for serving\n' % vertex.region)
    if any(not r['createdByThisTool'] for r in records):
        err.write('* not created by this tool: `models delete` removes it only when named by '
                  'its resource name (`models list --format yaml` shows it as vertexEndpoint)\n')
    return 0


def list_versions(vertex, endpoint, fmt, out):
    """`versions list --model M`: gcloud's NAME, DEPLOYMENT_URI, STATE, and the machines."""
    deployed = endpoint.get('deployedModels') or []
    models = _models_of(vertex, deployed)
    records = [endpoints.legacy_version(endpoint, d, models.get(d.get('model')), vertex.project)
               for d in deployed]
    if fmt == 'table':
        out.write(instances.table(
            ['NAME', 'DEPLOYMENT_URI', 'STATE', 'DEFAULT', 'MACHINES'],
            [[r['name'].rsplit('/', 1)[-1], r['deploymentUri'] or '-', r['state'],
              'yes' if r['isDefault'] else '', r['machines']] for r in records]))
    else:
        out.write(_formatted_list(records, fmt))
    return 0


def _formatted_list(records, fmt):
    if fmt == 'json':
        return json.dumps(records, indent=2) + '\n'
    if fmt == 'yaml':
        return yaml.safe_dump(records, sort_keys=False)
    if fmt.startswith('value('):
        return ''.join(_formatted(record, fmt) for record in records)
    raise UserInputError('--format %s: expected table, yaml, json or value(FIELD,...)' % fmt,
                         flag='--format')

if __name__ == '__main__':
    logs_lib.quiet_google_python_notice()
    errors.run_cli(main)
