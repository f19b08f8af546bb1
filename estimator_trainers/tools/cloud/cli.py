"""Command line: submit a trainer to Vertex AI, follow, cancel and list jobs.

    python -m estimator_trainers.tools.cloud submit MODEL [--config FILE] [options] [-- TRAINER_FLAGS]
    python -m estimator_trainers.tools.cloud status|cancel|logs JOB
    python -m estimator_trainers.tools.cloud list

Settings come from flags, then the environment (PROJECT_ID, BUCKET_NAME,
REGION), then the config (`trainingInput.region`, `jobDir`), then
Application Default Credentials (project only). Every check that can fail
(config, trainer flags per pool, project, credentials, data paths, buckets,
job-dir) runs before anything is uploaded (`preflight`); `--dry-run` and the
print-only targets send nothing at all.
"""
import argparse
import json
import os
import re
import sys
import tempfile

import google.auth
from google.auth import exceptions as auth_exceptions
from google.auth.credentials import AnonymousCredentials

from estimator_trainers import flags
from estimator_trainers import google_api
from estimator_trainers import registry
from estimator_trainers.errors import first_line
from estimator_trainers.errors import UserInputError
from estimator_trainers.tools.cloud import api
from estimator_trainers.tools.cloud import build as build_lib
from estimator_trainers.tools.cloud import configs
from estimator_trainers.tools.cloud import credential_files
from estimator_trainers.tools.cloud import gcs_paths
from estimator_trainers.tools.cloud import jobs
from estimator_trainers.tools.cloud import logs
from estimator_trainers.tools.cloud import preflight
from estimator_trainers.tools.cloud import rehearsal
from estimator_trainers.tools.cloud import staging
from estimator_trainers.tools.cloud import submission as submission_lib
from estimator_trainers.tools.cloud import tfjob

DEFAULT_REGION = 'us-central1'
TARGETS = ('vertex', 'ai-platform', 'tfjob')
CLOUD_PLATFORM_SCOPE = 'https://www.googleapis.com/auth/cloud-platform'

# gcloud's own flags (`submit` has --config, --job-dir, --region, --stream-logs too).
GCLOUD_ONLY_FLAGS = ('--runtime-version', '--python-version', '--scale-tier',
                     '--master-machine-type', '--worker-machine-type', '--worker-count',
                     '--parameter-server-machine-type', '--parameter-server-count',
                     '--package-path', '--module-name', '--packages', '--staging-bucket',
                     '--master-image-uri', '--use-chief-in-tf-config')
_REGION_RE = re.compile(r'[a-z]+-[a-z]+[0-9]+')
_PROJECT_RE = re.compile(r'([a-z0-9.-]+:)?[a-z0-9][a-z0-9-]{4,29}')
_REPOSITORY_RE = re.compile(r'[a-z]([a-z0-9-]{0,61}[a-z0-9])?')


class Backend:
    """Where credentials and API clients come from; tests pass their own."""

    def credentials(self):
        """Application Default Credentials and their project (maybe None)."""
        try:
            return google.auth.default(scopes=[CLOUD_PLATFORM_SCOPE])
        except auth_exceptions.DefaultCredentialsError as e:
            raise UserInputError(
                'no usable Application Default Credentials (%s): run `gcloud auth '
                'application-default login`, or set GOOGLE_APPLICATION_CREDENTIALS '
                'to a service account key file' % _credentials_reason(e)) from None
        except Exception as e:  # pylint: disable=broad-except
            # A malformed key fails in whichever parser reads it (ValueError,
            # PyAsn1Error, ...), whose message may quote the key: name the
            # file and the error type only.
            raise UserInputError(
                '%s: not a usable service account key (%s while reading it); '
                'download a new key or unset GOOGLE_APPLICATION_CREDENTIALS to use '
                '`gcloud auth application-default login`'
                % (_credentials_source(), type(e).__name__)) from None

    def transport(self, credentials):
        """The transport every API call goes through (tests record it)."""
        return api.authorized_http(credentials)

    def service(self, api_name, version, credentials):
        """A discovery service (`api.build`) on `transport`."""
        return api.build(api_name, version, self.transport(credentials))

    def vertex(self, project, region, credentials):
        return jobs.VertexJobs(project, region, http=self.transport(credentials))

    def storage(self, project, credentials):
        """The google-cloud-storage client of every storage call (`google_api.storage_client`)."""
        return google_api.storage_client(project, credentials)


def _credentials_source():
    path = os.environ.get('GOOGLE_APPLICATION_CREDENTIALS')
    return ('GOOGLE_APPLICATION_CREDENTIALS=%s' % path if path else
            'the Application Default Credentials file')


def _credentials_reason(error):
    """A DefaultCredentialsError's own sentence, without the wrapped cause
    (whose text may quote the key)."""
    text = error.args[0] if error.args and isinstance(error.args[0], str) else ''
    return '%s: %s' % (_credentials_source(), first_line(text)) if text else \
        _credentials_source()


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
    images = submit.add_mutually_exclusive_group()
    images.add_argument('--build-image', action='store_true',
                        help='Build the Dockerfile with Cloud Build into Artifact '
                             'Registry, tagged with the sources\' content hash (an '
                             'unchanged tree reuses its image), and run it. The '
                             'default unless --image-uri or --executor-image-uri.')
    images.add_argument('--executor-image-uri', help='Stage the package for this '
                        'prebuilt Vertex AI image instead of building one (e.g. %s '
                        'or %s, whose availability ended on 2025-11-14).'
                        % (jobs.EXECUTOR_IMAGES['cpu'], jobs.EXECUTOR_IMAGES['gpu']))
    images.add_argument('--image-uri', help='Run this container (the Dockerfile, '
                        'built and pushed by you); nothing is built or staged.')
    submit.add_argument('--repository', default=build_lib.DEFAULT_REPOSITORY,
                        help='Artifact Registry Docker repository in --region for '
                             '--build-image (created if missing).')
    submit.add_argument('--target', choices=TARGETS, default='vertex',
                        help='vertex (default): submit. ai-platform: print the legacy ml v1 '
                             'jobs.create request. tfjob: print a Kubeflow TFJob '
                             'manifest (needs --image-uri).')
    submit.add_argument('--dry-run', action='store_true',
                        help='Print the staging plan and the exact request; send nothing.')
    submit.add_argument('--stream-logs', action='store_true',
                        help='Print the replicas\' log lines ([chief-0] ...) until the '
                             'job ends; exit 0 only if it succeeded.')
    _add_poll_flag(submit)
    rehearsal.add_flags(submit)

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
    return parser


def _add_location_flags(parser):
    parser.add_argument('--project', default=os.environ.get('PROJECT_ID'),
                        help='Google Cloud project (env PROJECT_ID, else the '
                             'Application Default Credentials project).')
    parser.add_argument('--region', default=os.environ.get('REGION'),
                        help='Vertex AI region (env REGION, else '
                             'trainingInput.region, else %s).' % DEFAULT_REGION)


def _add_poll_flag(parser):
    parser.add_argument('--poll-interval', type=flags.non_negative_float, default=30.0,
                        help='Seconds between polls of the job, its logs and image '
                             'builds (default: 30).')


def main(argv=None, backend=None, out=None, err=None):
    """Runs one command; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    trainer_flags = []
    if '--' in argv:
        split = argv.index('--')
        argv, trainer_flags = argv[:split], argv[split + 1:]
    gcloud_only = [arg.split('=')[0] for arg in argv if arg.split('=')[0] in GCLOUD_ONLY_FLAGS]
    if gcloud_only:
        raise UserInputError('%s is a flag of gcloud ai-platform jobs submit training: run your '
                             'gcloud line as bash scripts/ai-platform.sh jobs submit training '
                             'JOB ... (docs/migrating-from-ai-platform.md)' % gcloud_only[0],
                             flag=gcloud_only[0])
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
    rehearsal.check_options(args)
    trainer = registry.get(args.model)
    config = configs.load_config(args.config) if args.config else configs.default_config()
    for note in config.notes:
        err.write('note: %s\n' % note)
    for warning in config.warnings:
        err.write('warning: %s\n' % warning)
    if not args.bucket:
        raise UserInputError('no bucket: set BUCKET_NAME=gs://your-bucket or pass --bucket')
    bucket_uri = gcs_paths.parse_bucket(args.bucket)
    job_name = submission_lib.check_job_name(
        args.job_name or submission_lib.default_job_name(trainer.name))
    if args.job_dir is not None:
        job_dir = gcs_paths.directory(args.job_dir, '--job-dir')
    else:  # trainingInput.jobDir passed the same rule in `configs`
        job_dir = (config.job_dir or '%s/jobs/%s' % (bucket_uri, job_name)).rstrip('/')
    given = list(config.args) + trainer_flags
    if submission_lib.has_flag(given, '--job-dir'):
        raise UserInputError('--job-dir is a submit option (before --) or '
                             'trainingInput.jobDir, not a trainer flag, so that Vertex '
                             'AI and the trainer agree on it')
    trainer_args = tuple(submission_lib.default_args(trainer, bucket_uri, given) + given)
    region = region_id(args.region or config.region)
    if not _REPOSITORY_RE.fullmatch(args.repository):
        raise UserInputError('--repository %r: expected an Artifact Registry repository id '
                             '(lowercase letters, digits and dashes, starting with a letter)'
                             % args.repository)

    def make(project, **kwargs):
        return submission_lib.Submission(
            job_name=job_name, trainer=trainer, config=config, project=project,
            region=region, job_dir=job_dir, args=trainer_args, **kwargs)

    parsed = preflight.check_trainer_flags(make(None, image_uri=args.image_uri))
    params = trainer.model_params(parsed)
    if args.target == 'tfjob':
        out.write(tfjob.render(make(None, image_uri=args.image_uri)))
        return 0

    credentials = adc_project = None
    if args.target == 'vertex' and not args.dry_run and rehearsal.needs_credentials(args):
        credentials, adc_project = backend.credentials()
    project = project_id(args.project or adc_project)

    with tempfile.TemporaryDirectory(prefix='estimator-trainers-sdist-') as tmp:
        sdist, context, build_body, image = _image(args, config, project, region,
                                                   bucket_uri, tmp)
        if context:
            for note in context.notes():
                err.write('note: %s\n' % note)
            for warning in context.warnings():
                err.write('warning: %s\n' % warning)
        package_uri = sdist and staging.staging_uri(bucket_uri, job_name, sdist.filename)
        executor = sdist and (args.executor_image_uri or jobs.EXECUTOR_IMAGES[
            'gpu' if config.uses_gpus else 'cpu'])
        sub = make(project, package_uri=package_uri, executor_image=executor,
                   image_uri=image)

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
            _dry_run(out, sub, collection, body, sdist, context, build_body, bucket_uri,
                     args.repository)
            return 0
        if problem:
            raise UserInputError(problem)

        vertex = None if args.rehearse else backend.vertex(project, region, credentials)
        storage_client = backend.storage(project, credentials)
        preflight.check_storage(preflight.BucketChecks(storage_client, project), sub, parsed,
                                params, bucket_uri)
        if sdist:
            stage_archive(storage_client, sdist, package_uri, 'this package', err)
        if context and not args.rehearse:
            build_image(backend, credentials, sub, args.repository, args.poll_interval,
                        storage_client, context, build_body, bucket_uri, err)
        if args.rehearse:
            return rehearsal.rehearse(body, storage_client, max_replicas=args.max_replicas,
                                      out=out, err=err, build_dir=tmp)

    job = create_job(vertex, collection, body, sub)
    out.write('%s\n' % job['name'])
    out.flush()
    _print_submitted(err, collection, job, sub)
    if not args.stream_logs:
        return 0
    return follow_job(backend, credentials, vertex, job['name'], args.poll_interval, out)


def _image(args, config, project, region, bucket_uri, tmp):
    """What the pools run: `(sdist, context, build_body, image_uri)`.

    `--image-uri`: that image. `--executor-image-uri` or `--target ai-platform`:
    the package sdist. Otherwise (`--build-image`, the default) the build
    context, and the image it builds, named by its content hash.
    """
    if args.image_uri:
        return None, None, None, args.image_uri
    if args.executor_image_uri or args.target != 'vertex':
        sdist = staging.build_sdist(tmp)
        found = credential_files.in_archive(sdist.path)
        if found:
            raise UserInputError(
                'the package sdist holds files that look like credentials: %s; keep them '
                'out of the packages and MANIFEST.in' % ', '.join('%s (%s)' % item
                                                                  for item in found))
        return sdist, None, None, None
    context = build_lib.pack_context(tmp)
    variant = build_lib.variant(config.uses_gpus)
    image = build_lib.image_uri(project, region, args.repository,
                                build_lib.image_tag(context.sha256, variant))
    body = build_lib.build_body(build_lib.context_uri(bucket_uri, context), image, variant)
    return None, context, body, image


def stage_archive(storage_client, archive, destination, what, err):
    if staging.stage(storage_client, archive, destination):
        err.write('staged %s (sha256 %s)\n' % (destination, archive.sha256))
    else:
        err.write('%s already holds %s (sha256 %s); upload skipped\n'
                  % (destination, what, archive.sha256))


def build_image(backend, credentials, sub, repository, poll_interval, storage_client,
                context, build_body, bucket_uri, err):
    """Reuses the image of the same sources, else stages the context and builds it."""
    builder = build_lib.ImageBuilder(
        backend.service('artifactregistry', 'v1', credentials),
        backend.service('cloudbuild', 'v1', credentials), sub.project, sub.region,
        repository)
    if builder.ensure_repository():
        err.write('created Artifact Registry repository %s\n' % builder.repository_name)
    tag = sub.image_uri.rsplit(':', 1)[1]
    if builder.image_exists(tag):
        err.write('%s exists (built from these sources); build skipped\n' % sub.image_uri)
        return
    stage_archive(storage_client, context, build_lib.context_uri(bucket_uri, context),
           'this build context', err)
    builder.build(build_body, poll_interval, err)


def create_job(vertex, collection, body, sub):
    """Creates the job; an executor image Vertex AI refuses gets the way out."""
    try:
        return vertex.create(collection, body)
    except google_api.ApiError as e:
        if sub.executor_image and e.status in (400, 403, 404) and \
                'image' in str(e).lower():
            raise google_api.ApiError('%s; Vertex AI refuses the executor image %s: drop '
                               '--executor-image-uri to build the image (--build-image), '
                               'or pass --image-uri' % (e, sub.executor_image),
                               e.status) from None
        raise


def _print_submitted(err, collection, job, sub):
    """Where the job is and how to follow, watch and cancel it."""
    info = jobs.parse_job_name(job['name']) or {}
    command = 'python -m estimator_trainers.tools.cloud'
    err.write(
        'created %s %s: %s\n'
        'console:     https://console.cloud.google.com/vertex-ai/locations/%s/training/%s'
        '?project=%s\n'
        'job-dir:     %s\n'
        'tensorboard: tensorboard --logdir %s --load_fast=false\n'
        'follow:      %s logs %s\n'
        'cancel:      %s cancel %s\n'
        % (collection, sub.job_name, job['name'], sub.region, info.get('id', '?'),
           sub.project, sub.job_dir, sub.job_dir, command, job['name'], command,
           job['name']))


def follow_job(backend, credentials, vertex, name, poll_interval, out, task_name=None):
    """Prints the job's log lines until it ends; 0 only if it succeeded."""
    info = jobs.parse_job_name(name)
    reader = logs.LogReader(backend.service('logging', 'v2', credentials),
                            info['project'], info['id'], task_name)
    final = logs.follow(vertex, reader, name, poll_interval, out=out)
    return 0 if final.get('state') == jobs.SUCCEEDED else 1


def _dry_run(out, sub, collection, body, sdist, context, build_body, bucket_uri,
             repository):
    """Prints the staging plan, the image build (if any) and the exact request."""
    anonymous = AnonymousCredentials()
    offline = jobs.VertexJobs(sub.project, sub.region, credentials=anonymous)
    if sdist:
        plan = staging.plan(sdist, sub.package_uri)
    elif context:
        plan = dict(staging.plan(context, build_lib.context_uri(bucket_uri, context)),
                    files=len(context.files),
                    action='reuse %s if Artifact Registry has it, else upload the build '
                           'context and build it with Cloud Build' % sub.image_uri)
        builder = build_lib.ImageBuilder(
            None, api.build('cloudbuild', 'v1', api.authorized_http(anonymous)),
            sub.project, sub.region, repository)
        plan['build'] = request_json(builder.build_request(build_body))
    else:
        plan = {'action': 'none: the container %s has the package' % sub.image_uri}
    out.write(json.dumps({'staging': plan,
                          'request': request_json(offline.create_request(collection, body))},
                         indent=2) + '\n')


def request_json(request):
    return {'method': request.method, 'uri': request.uri, 'body': json.loads(request.body)}


def manage(args, backend, out):
    """status, cancel, logs, list."""
    parsed = jobs.parse_job_name(getattr(args, 'job', ''))
    credentials, adc_project = backend.credentials()
    if parsed:
        project, region = parsed['project'], parsed['region']
    else:
        project, region = project_id(args.project or adc_project), region_id(args.region)
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
    if args.command == 'logs':
        return follow_job(backend, credentials, vertex, name, args.poll_interval, out)
    if args.command == 'cancel':
        vertex.cancel(name)
        out.write('cancel requested for %s; `status` shows when it has stopped\n' % name)
        return 0
    for line in jobs.describe(vertex.get(name)):
        out.write(line + '\n')
    return 0


def _print_request(out, plan, request):
    out.write(json.dumps({'staging': plan, 'request': request_json(request)},
                         indent=2) + '\n')


def project_id(project):
    if not project:
        raise UserInputError('no project: set PROJECT_ID or pass --project')
    if not _PROJECT_RE.fullmatch(project):
        raise UserInputError('project %r: expected a Google Cloud project id like '
                             'my-project-123' % project)
    return project


def region_id(region):
    region = region or DEFAULT_REGION
    if not _REGION_RE.fullmatch(region):
        raise UserInputError('region %r: expected a Vertex AI region like %s'
                             % (region, DEFAULT_REGION))
    return region
