"""`bash scripts/ai-platform.sh ...`: what followed `gcloud ai-platform` (or `gcloud ml-engine`).

    ai-platform.sh jobs submit training JOB [--config FILE] [--package-path DIR --module-name M]
                   [--job-dir gs://...] [--region R] [--scale-tier T] [...] [-- USER_ARGS]
    ai-platform.sh jobs describe|stream-logs|cancel JOB
    ai-platform.sh jobs list [--limit N]
    ai-platform.sh local train --package-path DIR --module-name M [--job-dir DIR]
                   [--distributed [--parameter-server-count N] [--worker-count N]
                    [--evaluator-count N] [--start-port P]] [-- USER_ARGS]

The submission goes to Vertex AI through the same path as `train-cloud.sh`
(`cli`): checks before anything is uploaded (here: the package builds,
installs in a fresh virtualenv, its module imports and its flags parse),
this project's image (Cloud Build, by content hash), staging, `--dry-run`,
`--rehearse`, `--stream-logs`. Flags are translated by the table in
`gcloud.FLAGS`. This module parses; `submit_training`, `describe`,
`stream_logs`, `cancel`, `list_jobs` and `local.run_package` do the work
with plain arguments.
"""
import argparse
import json
import os
import sys
import tempfile

from google.auth.credentials import AnonymousCredentials
import yaml

from estimator_trainers import errors
from estimator_trainers import flags
from estimator_trainers import registry
from estimator_trainers.cluster import CHIEF
from estimator_trainers.errors import UserInputError
from estimator_trainers.tools import local
from estimator_trainers.tools.cloud import api
from estimator_trainers.tools.cloud import build as build_lib
from estimator_trainers.tools.cloud import cli
from estimator_trainers.tools.cloud import configs
from estimator_trainers.tools.cloud import gcloud
from estimator_trainers.tools.cloud import gcs_paths
from estimator_trainers.tools.cloud import jobs
from estimator_trainers.tools.cloud import packages
from estimator_trainers.tools.cloud import preflight
from estimator_trainers.tools.cloud import rehearsal
from estimator_trainers.tools.cloud import staging
from estimator_trainers.tools.cloud import submission as submission_lib

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
# AI Platform replica names (`--task-name`) -> Vertex AI's.
_TASK_POOLS = {'master': 0, 'chief': 0, 'worker': 1, 'ps': 2, 'evaluator': 3}


def _arg_type(function):
    """A `gcloud` value parser as an argparse type (its ValueError is the message)."""
    def parse(text):
        try:
            return function(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    parse.__name__ = function.__name__
    return parse


def _machine_type(text):
    try:
        configs.translate_machine(text)
    except configs.MachineError as e:
        raise ValueError(str(e)) from None
    return text


def _accelerator(text):
    value = gcloud.accelerator(text)
    if value['type'] not in configs.GPU_TYPES:
        raise ValueError('unknown GPU type %r (expected one of %s, as nvidia-tesla-t4 '
                         'or NVIDIA_TESLA_T4)' % (value['type'], ', '.join(configs.GPU_TYPES)))
    return value


def _job_dir(text):
    return gcs_paths.directory(text, '--job-dir')


_TYPES = {
    '--job-dir': _job_dir, '--packages': gcloud.package_list,
    '--scale-tier': gcloud.scale_tier, '--use-chief-in-tf-config': gcloud.boolean,
    '--labels': gcloud.labels,
}
for _role in ('master', 'worker', 'parameter-server'):
    _TYPES['--%s-machine-type' % _role] = _machine_type
    _TYPES['--%s-accelerator' % _role] = _accelerator
    _TYPES['--%s-count' % _role] = gcloud.count


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
                                 'worker-replica-1, ps-replica-0 (or workerpool1-0).')
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
    parser.add_argument('job', metavar='JOB', help=gcloud.FLAG_ROWS['JOB'].help)
    for row in gcloud.FLAGS:
        if not row.name.startswith('--') or row.name in ('--async', '--stream-logs'):
            continue
        kwargs = {'help': row.help}
        if row.name == '--enable-web-access':
            kwargs['action'] = 'store_const'
            kwargs['const'] = True
        elif row.name in _TYPES:
            kwargs['type'] = _arg_type(_TYPES[row.name])
        parser.add_argument(row.name, **kwargs)
    for part in ('keyring', 'location', 'project'):
        parser.add_argument('--kms-%s' % part, help='Completes a short --kms-key id.')
    follow = parser.add_mutually_exclusive_group()
    follow.add_argument('--async', action='store_true', dest='async_',
                        help=gcloud.FLAG_ROWS['--async'].help)
    follow.add_argument('--stream-logs', action='store_true',
                        help=gcloud.FLAG_ROWS['--stream-logs'].help)
    _add_global_flags(parser)
    parser.add_argument('--dry-run', action='store_true',
                        help='Run the checks, print the staging plan and the exact request; '
                             'send nothing.')
    parser.add_argument('--repository', default=build_lib.DEFAULT_REPOSITORY,
                        help='Artifact Registry repository for this project\'s image.')
    parser.add_argument('--poll-interval', type=flags.non_negative_float, default=30.0,
                        help='Seconds between polls with --stream-logs.')
    rehearsal.add_flags(parser)


def main(argv=None, backend=None, out=None, err=None):
    """Runs one command; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    user_args = None
    if '--' in argv:
        split = argv.index('--')
        argv, user_args = argv[:split], argv[split + 1:]
    args = build_parser().parse_args(argv)
    out, err = out or sys.stdout, err or sys.stderr
    backend = backend or cli.Backend()
    if user_args is not None and (args.group, args.command) not in (
            ('jobs', 'submit'), ('local', 'train')):
        raise UserInputError('arguments after -- go with jobs submit training or local train')
    if args.group == 'local':
        return local.run_package(args.package_path, args.module_name, args.job_dir,
                                 user_args or [], args.distributed,
                                 _launcher_options(args))
    if args.command == 'submit':
        values = {row.name: getattr(args, row.name[2:].replace('-', '_'), None)
                  for row in gcloud.FLAGS if row.name.startswith('--')}
        values['--async'] = values['--stream-logs'] = None
        values['--kms-key'] = gcloud.kms_key_name(args.kms_key, args.kms_keyring,
                                                  args.kms_location, args.kms_project)
        return submit_training(
            args.job, values, user_args, project=args.project, dry_run=args.dry_run,
            rehearse=args.rehearse, max_replicas=args.max_replicas,
            repository=args.repository, stream_logs=args.stream_logs,
            poll_interval=args.poll_interval, backend=backend, out=out, err=err)
    vertex, credentials, name = _resolve(args, backend)
    if args.command == 'describe':
        return describe(vertex.get(name), args.format, out)
    if args.command == 'cancel':
        vertex.cancel(name)
        err.write('Cancelled job [%s].\n' % args.job)
        return 0
    if args.command == 'stream-logs':
        return cli.follow_job(backend, credentials, vertex, name, args.polling_interval,
                              out, task_name=vertex_task_name(args.task_name))
    return list_jobs(vertex, args.limit, args.format, out)


def _launcher_options(args):
    options = []
    for option in ('--parameter-server-count', '--worker-count', '--evaluator-count',
                   '--start-port'):
        value = getattr(args, option[2:].replace('-', '_'))
        if value is not None:
            options += [option, str(value)]
    return options


def _location(project_flag, region_flag, backend):
    """(credentials, project, region) for the job commands."""
    credentials, adc_project = backend.credentials()
    project = cli.project_id(project_flag or os.environ.get('PROJECT_ID') or
                             os.environ.get('CLOUDSDK_CORE_PROJECT') or adc_project)
    return credentials, project, cli.region_id(region_flag or _env_region())


def _env_region():
    return os.environ.get('CLOUDSDK_AI_PLATFORM_REGION') or os.environ.get('REGION')


def _resolve(args, backend):
    """(vertex client, credentials, resource name) of `args.job`."""
    parsed = jobs.parse_job_name(getattr(args, 'job', ''))
    credentials, project, region = _location(args.project, args.region, backend)
    if parsed:
        project, region = parsed['project'], parsed['region']
    if args.command == 'list':
        return backend.vertex(project, region, credentials), credentials, None
    vertex = backend.vertex(project, region, credentials)
    return vertex, credentials, vertex.resolve(args.job)


def vertex_task_name(task_name):
    """AI Platform's `master-replica-0` -> Vertex AI's `workerpool0-0` (others unchanged)."""
    if not task_name:
        return None
    role, sep, index = task_name.rpartition('-replica-')
    if sep and role in _TASK_POOLS and index.isdigit():
        return 'workerpool%d-%s' % (_TASK_POOLS[role], index)
    return task_name


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


def submit_training(job_name, values, user_args, *, project=None, dry_run=False,
                    rehearse=False, max_replicas=rehearsal.DEFAULT_MAX_REPLICAS,
                    repository=build_lib.DEFAULT_REPOSITORY, stream_logs=False,
                    poll_interval=30.0, backend=None, out=None, err=None):
    """`jobs submit training JOB` with flag `values` ({flag: value or None}).

    Checks everything before anything is uploaded, then prints (dry run),
    rehearses, or stages, builds the image if needed and creates the job.
    Returns the exit code.
    """
    backend = backend or cli.Backend()
    out, err = out or sys.stdout, err or sys.stderr
    submission_lib.check_job_name(job_name)
    if rehearse and (dry_run or stream_logs):
        raise UserInputError('--rehearse runs the job on this machine; it does not go with '
                             '%s' % ('--dry-run' if dry_run else '--stream-logs'))
    config_path = values.get('--config')
    data = configs.read_config(config_path) if config_path else None
    job = gcloud.build_job(job_name, values, user_args, data, config_path or 'command line')
    for note in job.config.notes:
        err.write('note: %s\n' % note)
    for line in job.config.warnings:
        err.write('warning: %s\n' % line)
    for line in job.warnings:
        err.write(line + '\n')
    region = cli.region_id(values.get('--region') or job.config.region or _env_region())
    if job.kms_key and gcloud.kms_location(job.kms_key) != region:
        raise UserInputError('--kms-key %s: the key is in %s; Vertex AI needs it in the '
                             "job's region %s" % (job.kms_key, gcloud.kms_location(job.kms_key),
                                                  region), flag='--kms-key')
    credentials = adc_project = None
    if not dry_run and not (rehearse and os.environ.get(rehearsal.EMULATOR_VAR)):
        credentials, adc_project = backend.credentials()
    project = cli.project_id(project or os.environ.get('PROJECT_ID') or
                             os.environ.get('CLOUDSDK_CORE_PROJECT') or adc_project)

    with tempfile.TemporaryDirectory(prefix='gcloud-submit-') as tmp:
        archives = _archives(job, tmp)
        if job.runs_package:
            _check_package(job, archives, tmp, err)
        package_uris = tuple(_staged_uri(job, a) for a in archives) + tuple(
            p for p in job.packages if p.startswith('gs://'))
        context = build_body = image = None
        bucket_uri = job.staging and 'gs://%s' % staging.split_gs_uri(job.staging)[0]
        if job.runs_package and job.image_for(CHIEF) is None:
            context = build_lib.pack_context(tmp)
            variant = build_lib.variant(job.config.uses_gpus)
            image = build_lib.image_uri(project, region, repository,
                                        build_lib.image_tag(context.sha256, variant))
            build_body = build_lib.build_body(build_lib.context_uri(bucket_uri, context),
                                              image, variant)
            for note in context.notes():
                err.write('note: %s\n' % note)
            for warning in context.warnings():
                err.write('warning: %s\n' % warning)
        sub = submission_lib.Submission(
            job_name=job_name, trainer=None, config=job.config, project=project,
            region=region, job_dir=job.job_dir, args=tuple(job.config.args),
            image_uri=image, module=job.module, package_uris=package_uris,
            pool_images=dict(job.images), container_commands=dict(job.container_commands),
            primary=job.primary, enable_web_access=job.enable_web_access,
            kms_key=job.kms_key)
        body = jobs.job_body(sub)
        collection = jobs.collection_for(sub)
        if dry_run:
            _dry_run(out, sub, collection, body, archives, context, build_body, bucket_uri,
                     repository)
            return 0

        storage_client = backend.storage(project, credentials)
        checks = preflight.BucketChecks(storage_client, project)
        if job.job_dir:
            checks.check_writable(job.job_dir, '--job-dir')
        if job.staging and (not job.job_dir or staging.split_gs_uri(job.staging)[0] !=
                            staging.split_gs_uri(job.job_dir)[0]):
            checks.check_writable(job.staging, '--staging-bucket')
        vertex = None
        if not rehearse:
            vertex = backend.vertex(project, region, credentials)
            _refuse_existing(vertex, job_name, region)
        for archive in archives:
            cli.stage_archive(storage_client, archive, _staged_uri(job, archive),
                              archive.filename, err)
        if rehearse:
            return rehearsal.rehearse(body, storage_client, max_replicas=max_replicas,
                                      out=out, err=err, build_dir=tmp)
        if context:
            cli.build_image(backend, credentials, sub, repository, poll_interval,
                            storage_client, context, build_body, bucket_uri, err)

    created = cli.create_job(vertex, collection, body, sub)
    _print_submitted(out, err, job_name, created)
    if not stream_logs:
        return 0
    return cli.follow_job(backend, credentials, vertex, created['name'], poll_interval, out)


def _archives(job, tmp):
    """The local archives to stage: the built `--package-path` sdist, then the
    local `--packages`."""
    archives = []
    if job.package_path:
        archives.append(staging.build_package(job.package_path, os.path.join(tmp, 'sdist')))
    for path in job.local_packages:
        if not os.path.isfile(path):
            raise UserInputError('--packages %s: no such file' % path, flag='--packages')
        if not path.endswith(('.tar.gz', '.whl', '.zip', '.tgz')):
            raise UserInputError('--packages %s: expected an sdist (.tar.gz) or a wheel '
                                 '(.whl)' % path, flag='--packages')
        archives.append(staging.archive(path))
    return archives


def _staged_uri(job, archive):
    """gcloud's staging place: `<staging>/<sha256>/<file name>`."""
    return '%s/%s/%s' % (job.staging, archive.sha256, archive.filename)


def _check_package(job, archives, tmp, err):
    """The package builds (done), installs in a fresh virtualenv, its module
    imports and its flags parse: before anything is uploaded."""
    if not archives:
        err.write('note: the packages are all gs:// URIs: the checks before upload do not '
                  'install them; --rehearse does\n')
        return
    python = packages.install([a.path for a in archives], os.path.join(tmp, 'check-venv'),
                              os.environ, what=', '.join(a.filename for a in archives))
    args = job.config.args + (('--job-dir=%s' % job.job_dir,) if job.job_dir else ())
    note = packages.check_module(python, job.module, args, tmp, os.environ)
    declared = next((trainer for trainer in registry.discover().values()
                     if trainer.module == job.module), None)
    if note and declared:  # this repository's trainer: its own parser (flags.py)
        preflight.parse_trainer_args(declared, list(args))
    elif note:
        err.write(note + '\n')


def _refuse_existing(vertex, job_name, region):
    existing = vertex.list(limit=1, filter_expr='display_name="%s"' % job_name)
    if existing:
        raise UserInputError('job %s already exists in %s (%s): AI Platform refused a second '
                             'job of one name, and describe/stream-logs/cancel need one; '
                             'pick another JOB' % (job_name, region, existing[0]['name']))


def _print_submitted(out, err, job_name, created):
    """gcloud's closing lines, with this script's commands."""
    err.write('Job [%s] submitted successfully (%s).\n'
              'Your job is still active. You may view the status of your job with the '
              'command\n\n  $ %s jobs describe %s\n\nor continue streaming the logs with '
              'the command\n\n  $ %s jobs stream-logs %s\n'
              % (job_name, created['name'], PROG, job_name, PROG, job_name))
    out.write(yaml.safe_dump(legacy_job(dict(created, state=created.get(
        'state', 'JOB_STATE_QUEUED'))), sort_keys=False))
    out.flush()


def _dry_run(out, sub, collection, body, archives, context, build_body, bucket_uri,
             repository):
    """The staging plan (each package, the image) and the exact request."""
    anonymous = AnonymousCredentials()
    offline = jobs.VertexJobs(sub.project, sub.region, credentials=anonymous)
    # package_uris: the local archives' staged places first, then gs:// --packages.
    printed = {'staging': [staging.plan(archive, uri)
                           for archive, uri in zip(archives, sub.package_uris)]}
    if context:
        builder = build_lib.ImageBuilder(
            None, api.build('cloudbuild', 'v1', api.authorized_http(anonymous)),
            sub.project, sub.region, repository)
        printed['image'] = dict(
            staging.plan(context, build_lib.context_uri(bucket_uri, context)),
            files=len(context.files),
            action='reuse %s if Artifact Registry has it, else upload the build context and '
                   'build it with Cloud Build' % sub.image_uri,
            build=cli.request_json(builder.build_request(build_body)))
    printed['request'] = cli.request_json(offline.create_request(collection, body))
    out.write(json.dumps(printed, indent=2) + '\n')


if __name__ == '__main__':
    errors.run_cli(main)
