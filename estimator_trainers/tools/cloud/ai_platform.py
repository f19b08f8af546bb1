"""`bash scripts/ai-platform.sh ...`: what followed `gcloud ai-platform` (or `gcloud ml-engine`).

    ai-platform.sh jobs submit training JOB [--config FILE] [--package-path DIR --module-name M]
                   [--job-dir gs://...] [--region R] [--scale-tier T] [...] [-- USER_ARGS]
    ai-platform.sh jobs describe|stream-logs|cancel JOB
    ai-platform.sh jobs list [--limit N]
    ai-platform.sh local train --package-path DIR --module-name M [--job-dir DIR]
                   [--distributed [--parameter-server-count N] [--worker-count N]
                    [--evaluator-count N] [--start-port P]] [-- USER_ARGS]

A front: `jobs submit training` turns gcloud's words into a `plan.JobPlan`
with the translation table (`gcloud_flags`) and hands it to `pipeline.run`,
which owns the order (checks before anything is uploaded: here the package
builds, installs in a fresh virtualenv with its requirements named against
this project's pins, and its module is read, never run; this project's
image; staging; `--dry-run`, `--rehearse`, `--stream-logs`). The other
commands call the job functions (`describe`, `list_jobs`, `logs`,
`launcher.run_package`) with plain arguments.
"""
import argparse
import json
import os
import sys

import yaml

from estimator_trainers import errors
from estimator_trainers import flags
from estimator_trainers import logs as logs_lib
from estimator_trainers.errors import UserInputError
from estimator_trainers.tools import launcher
from estimator_trainers.tools.cloud import build as build_lib
from estimator_trainers.tools.cloud import configs
from estimator_trainers.tools.cloud import gcloud_flags
from estimator_trainers.tools.cloud import jobs
from estimator_trainers.tools.cloud import location
from estimator_trainers.tools.cloud import logs
from estimator_trainers.tools.cloud import pipeline
from estimator_trainers.tools.cloud import plan as plan_lib
from estimator_trainers.tools.cloud import rehearsal
from estimator_trainers.tools.cloud import roles

PROG = 'bash scripts/ai-platform.sh'
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
    return parser


def _add_global_flags(parser):
    """gcloud-wide flags that scripts carry."""
    parser.add_argument('--project', help='Google Cloud project (else PROJECT_ID, '
                        'CLOUDSDK_CORE_PROJECT, the credentials\' project).')
    parser.add_argument('--quiet', '-q', action='store_true',
                        help='Accepted: nothing here prompts.')
    parser.add_argument('--verbosity', help='Accepted, not used.')


def _add_region_flag(parser):
    parser.add_argument('--region', help='Region of the jobs (default: '
                        'CLOUDSDK_AI_PLATFORM_REGION, REGION, us-central1).')


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


def main(argv=None, backend=None, out=None, err=None, environ=None):
    """Runs one command; returns the exit code."""
    argv, user_args = flags.split_at_dashes(sys.argv[1:] if argv is None else argv)
    environ = os.environ if environ is None else environ
    args = build_parser().parse_args(argv)
    out, err = out or sys.stdout, err or sys.stderr
    backend = backend or location.Backend()
    if user_args is not None and (args.group, args.command) not in (
            ('jobs', 'submit'), ('local', 'train')):
        raise UserInputError('arguments after -- go with jobs submit training or local train')
    if args.group == 'local':
        return launcher.run_package(args.package_path, args.module_name, args.job_dir,
                                    user_args or [], args.distributed,
                                    _launcher_options(args))
    if args.command == 'submit':
        return submit_training(args, user_args, backend, out, err, environ)
    vertex, credentials, name = location.connect(
        backend, getattr(args, 'job', None), args.project, args.region, environ)
    if args.command == 'describe':
        return describe(vertex.get(name), args.format, out)
    if args.command == 'cancel':
        vertex.cancel(name)
        err.write('Cancelled job [%s].\n' % args.job)
        return 0
    if args.command == 'stream-logs':
        final = logs.follow_job(backend, credentials, vertex, name, args.polling_interval,
                                out, task_name=args.task_name)
        return 0 if final.get('state') == jobs.SUCCEEDED else 1
    return list_jobs(vertex, args.limit, args.format, out)


def submit_training(args, user_args, backend, out, err, environ):
    """`jobs submit training JOB`: the plan of its flags, through the pipeline."""
    plan_lib.check_job_name(args.job)
    if args.rehearse and (args.dry_run or args.stream_logs):
        raise UserInputError('--rehearse runs the job on this machine; it does not go with '
                             '%s' % ('--dry-run' if args.dry_run else '--stream-logs'))
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
    action = pipeline.Action(
        kind=(pipeline.REHEARSE if args.rehearse else pipeline.DRY_RUN if args.dry_run
              else pipeline.SUBMIT),
        project=args.project, repository=args.repository, stream_logs=args.stream_logs,
        poll_interval=args.poll_interval, max_replicas=args.max_replicas,
        on_created=print_submitted)
    return pipeline.run(plan, action, backend, out, err, environ)


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


def print_submitted(plan, job, out, err):
    """gcloud's closing lines, with this script's commands, and the job as gcloud showed it."""
    err.write('Job [%s] submitted successfully (%s).\n'
              'Your job is still active. You may view the status of your job with the '
              'command\n\n  $ %s jobs describe %s\n\nor continue streaming the logs with '
              'the command\n\n  $ %s jobs stream-logs %s\n'
              % (plan.name, job['name'], PROG, plan.name, PROG, plan.name))
    out.write(yaml.safe_dump(legacy_job(dict(job, state=job.get(
        'state', 'JOB_STATE_QUEUED'))), sort_keys=False))
    out.flush()


if __name__ == '__main__':
    logs_lib.quiet_google_python_notice()
    errors.run_cli(main)
