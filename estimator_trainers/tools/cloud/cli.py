"""Command line: submit a trainer to Vertex AI, follow, cancel and list jobs.

    python -m estimator_trainers.tools.cloud submit MODEL [--config FILE] [options] [-- TRAINER_FLAGS]
    python -m estimator_trainers.tools.cloud status|cancel JOB
    python -m estimator_trainers.tools.cloud list

Settings come from flags, then the environment (PROJECT_ID, BUCKET_NAME,
REGION), then the config (`trainingInput.region`, `jobDir`), then
Application Default Credentials (project only). Every check that can fail
(config, project, bucket, credentials, package) runs before anything is
uploaded; `--dry-run` and the print-only targets send nothing at all.
"""
import argparse
import json
import os
import re
import sys
import tempfile

from estimator_trainers import flags
from estimator_trainers import registry
from estimator_trainers.errors import first_line
from estimator_trainers.tools.cloud import configs
from estimator_trainers.tools.cloud import jobs
from estimator_trainers.tools.cloud import staging
from estimator_trainers.tools.cloud import submission as submission_lib
from estimator_trainers.tools.cloud import tfjob
from estimator_trainers.errors import UserInputError

DEFAULT_REGION = 'us-central1'
TARGETS = ('vertex', 'ai-platform', 'tfjob')
CLOUD_PLATFORM_SCOPE = 'https://www.googleapis.com/auth/cloud-platform'

_REGION_RE = re.compile(r'[a-z]+-[a-z]+[0-9]+')
_PROJECT_RE = re.compile(r'([a-z0-9.-]+:)?[a-z0-9][a-z0-9-]{4,29}')


class Backend:
    """Where credentials and API clients come from; tests pass their own."""

    def credentials(self):
        """Application Default Credentials and their project (maybe None)."""
        import google.auth  # pylint: disable=g-import-not-at-top
        from google.auth import exceptions  # pylint: disable=g-import-not-at-top
        try:
            return google.auth.default(scopes=[CLOUD_PLATFORM_SCOPE])
        except exceptions.DefaultCredentialsError as e:
            raise UserInputError(
                'no Application Default Credentials (%s): run `gcloud auth '
                'application-default login`, or set GOOGLE_APPLICATION_CREDENTIALS '
                'to a service account key file' % first_line(e)) from None

    def vertex(self, project, region, credentials):
        return jobs.VertexJobs(project, region, credentials=credentials)

    def storage(self, project, credentials):
        from google.cloud import storage  # pylint: disable=g-import-not-at-top
        return storage.Client(project=project, credentials=credentials)


def build_parser():
    parser = argparse.ArgumentParser(
        prog='python -m estimator_trainers.tools.cloud',
        description='Train the packaged models on Vertex AI from AI Platform '
                    'trainingInput configs, and follow, cancel or list the jobs.')
    commands = parser.add_subparsers(dest='command', required=True, metavar='COMMAND')

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
    submit.add_argument('--executor-image-uri', help='Prebuilt Vertex AI image '
                        'that installs the package (default: %s, or %s when the '
                        'config has GPUs).' % (jobs.EXECUTOR_IMAGES['cpu'],
                                               jobs.EXECUTOR_IMAGES['gpu']))
    submit.add_argument('--image-uri', help='Custom container with the package '
                        'installed (see Dockerfile); nothing is staged.')
    submit.add_argument('--target', choices=TARGETS, default='vertex',
                        help='vertex (default): submit. ai-platform: print the legacy ml v1 '
                             'jobs.create request. tfjob: print a Kubeflow TFJob '
                             'manifest (needs --image-uri).')
    submit.add_argument('--dry-run', action='store_true',
                        help='Print the staging plan and the exact request; send nothing.')
    submit.add_argument('--stream-logs', action='store_true',
                        help='Follow the job state until it ends; exit 0 only '
                             'if it succeeded.')
    submit.add_argument('--poll-interval', type=flags.non_negative_float, default=30.0,
                        help='Seconds between state polls with --stream-logs '
                             '(default: 30).')

    for name, text in (('status', 'show a job'), ('cancel', 'cancel a job')):
        command = commands.add_parser(name, help=text, description=text.capitalize() + '.')
        command.add_argument('job', help='Resource name, numeric id or display name.')
        _add_location_flags(command)

    listing = commands.add_parser('list', help='list recent jobs',
                                  description='List custom and tuning jobs, newest first.')
    _add_location_flags(listing)
    listing.add_argument('--limit', type=flags.positive_int, default=20,
                         help='Most jobs to show.')
    listing.add_argument('--filter', help='Vertex AI list filter, e.g. '
                         'state="JOB_STATE_RUNNING".')
    return parser


def _add_location_flags(parser):
    parser.add_argument('--project', default=os.environ.get('PROJECT_ID'),
                        help='Google Cloud project (env PROJECT_ID, else the '
                             'Application Default Credentials project).')
    parser.add_argument('--region', default=os.environ.get('REGION'),
                        help='Vertex AI region (env REGION, else '
                             'trainingInput.region, else %s).' % DEFAULT_REGION)


def main(argv=None, backend=None, out=None, err=None):
    """Runs one command; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    trainer_flags = []
    if '--' in argv:
        split = argv.index('--')
        argv, trainer_flags = argv[:split], argv[split + 1:]
    args = build_parser().parse_args(argv)
    backend = backend or Backend()
    out = out or sys.stdout
    err = err or sys.stderr
    if trainer_flags and args.command != 'submit':
        raise UserInputError('trainer flags after -- only go with submit')
    if args.command == 'submit':
        return submit(args, trainer_flags, backend, out, err)
    return manage(args, backend, out)


def submit(args, trainer_flags, backend, out, err):
    """Validates everything, then prints (dry run) or stages and creates the job."""
    trainer = registry.get(args.model)
    config = configs.load_config(args.config) if args.config else configs.default_config()
    for note in config.notes:
        err.write('note: %s\n' % note)
    for warning in config.warnings:
        err.write('warning: %s\n' % warning)
    if not args.bucket:
        raise UserInputError('no bucket: set BUCKET_NAME=gs://your-bucket or pass --bucket')
    bucket_uri = staging.parse_bucket(args.bucket)
    job_name = submission_lib.check_job_name(
        args.job_name or submission_lib.default_job_name(trainer.name))
    job_dir = (args.job_dir or config.job_dir or
               '%s/jobs/%s' % (bucket_uri, job_name)).rstrip('/')
    if not job_dir.startswith('gs://'):
        raise UserInputError('--job-dir %s: expected a gs:// path (every task of the '
                             'job must reach it)' % job_dir)
    given = list(config.args) + trainer_flags
    if submission_lib.has_flag(given, '--job-dir'):
        raise UserInputError('--job-dir is a submit option (before --) or '
                             'trainingInput.jobDir, not a trainer flag, so that Vertex '
                             'AI and the trainer agree on it')
    trainer_args = tuple(submission_lib.default_args(trainer, bucket_uri, given) + given)
    region = _region(args.region or config.region)

    def make(project, **kwargs):
        return submission_lib.Submission(
            job_name=job_name, trainer=trainer, config=config, project=project,
            region=region, job_dir=job_dir, args=trainer_args, **kwargs)

    if args.target == 'tfjob':
        out.write(tfjob.render(make(None, image_uri=args.image_uri)))
        return 0

    credentials = adc_project = None
    if args.target == 'vertex' and not args.dry_run:
        credentials, adc_project = backend.credentials()
    project = _project(args.project or adc_project)

    with tempfile.TemporaryDirectory(prefix='estimator-trainers-sdist-') as tmp:
        sdist = package_uri = executor = None
        if not args.image_uri:
            sdist = staging.build_sdist(tmp)
            package_uri = staging.staging_uri(bucket_uri, job_name, sdist.filename)
            executor = args.executor_image_uri or jobs.EXECUTOR_IMAGES[
                'gpu' if config.uses_gpus else 'cpu']
        sub = make(project, package_uri=package_uri, executor_image=executor,
                   image_uri=args.image_uri)

        if args.target == 'ai-platform':
            body = jobs.legacy_job_body(sub)
            plan = dict(staging.plan(sdist, package_uri),
                        action='none: --target ai-platform only prints the request')
            _print_request(out, plan, jobs.legacy_create_request(project, body))
            return 0

        body = jobs.job_body(sub)
        collection = jobs.collection_for(sub)
        problem = sdist and staging.python_mismatch(sdist.requires_python, executor)
        if args.dry_run:
            if problem:
                err.write('warning: %s\n' % problem)
            from google.auth.credentials import AnonymousCredentials  # pylint: disable=g-import-not-at-top
            offline = jobs.VertexJobs(project, region, credentials=AnonymousCredentials())
            plan = (staging.plan(sdist, package_uri) if sdist else
                    {'action': 'none: the container %s has the package' % args.image_uri})
            _print_request(out, plan, offline.create_request(collection, body))
            return 0
        if problem:
            raise UserInputError(problem)

        vertex = backend.vertex(project, region, credentials)
        storage_client = backend.storage(project, credentials)
        staging.check_bucket(storage_client, bucket_uri)
        if sdist:
            if staging.stage(storage_client, sdist, package_uri):
                err.write('staged %s (sha256 %s)\n' % (package_uri, sdist.sha256))
            else:
                err.write('%s already holds this package (sha256 %s); upload skipped\n'
                          % (package_uri, sdist.sha256))

    job = vertex.create(collection, body)
    out.write('%s\n' % job['name'])
    out.flush()
    err.write('created %s %s; follow it with: python -m estimator_trainers.tools.cloud '
              'status %s\n' % (collection, job_name, job['name']))
    if not args.stream_logs:
        return 0
    final = jobs.wait_for_job(vertex, job['name'], args.poll_interval, out=err)
    best = jobs.best_trial(final)
    if best:
        err.write('best trial: %s\n' % best)
    return 0 if final.get('state') == jobs.SUCCEEDED else 1


def manage(args, backend, out):
    """status, cancel, list."""
    parsed = jobs.parse_job_name(getattr(args, 'job', ''))
    credentials, adc_project = backend.credentials()
    if parsed:
        project, region = parsed['project'], parsed['region']
    else:
        project, region = _project(args.project or adc_project), _region(args.region)
    vertex = backend.vertex(project, region, credentials)

    if args.command == 'list':
        for job in vertex.list(limit=args.limit, filter_expr=args.filter):
            info = jobs.parse_job_name(job.get('name', '')) or {}
            kind = 'tuning' if info.get('collection') == jobs.TUNING_JOBS else 'custom'
            out.write('%-28s %-27s %-6s %-20s %s\n' % (
                job.get('state', 'JOB_STATE_UNSPECIFIED'), job.get('createTime', ''),
                kind, info.get('id', job.get('name', '')), job.get('displayName', '')))
        return 0
    name = vertex.resolve(args.job)
    if args.command == 'cancel':
        vertex.cancel(name)
        out.write('cancel requested for %s; `status` shows when it has stopped\n' % name)
        return 0
    for line in jobs.describe(vertex.get(name)):
        out.write(line + '\n')
    return 0


def _print_request(out, plan, request):
    out.write(json.dumps({
        'staging': plan,
        'request': {'method': request.method, 'uri': request.uri,
                    'body': json.loads(request.body)},
    }, indent=2) + '\n')


def _project(project):
    if not project:
        raise UserInputError('no project: set PROJECT_ID or pass --project')
    if not _PROJECT_RE.fullmatch(project):
        raise UserInputError('project %r: expected a Google Cloud project id like '
                             'my-project-123' % project)
    return project


def _region(region):
    region = region or DEFAULT_REGION
    if not _REGION_RE.fullmatch(region):
        raise UserInputError('region %r: expected a Vertex AI region like %s'
                             % (region, DEFAULT_REGION))
    return region
