"""The one order of a cloud job: checks, stage, build, then create, rehearse or print.

Both fronts (`train_cloud`, `ai_platform`) turn their words into a
`plan.JobPlan` and hand it to `run` with an `Action`; nothing else orders
these steps:

1. the plan's notes and warnings, then every replica's start-up
   (`preflight.check_replicas`), before any credential or network;
2. a manifest target (`jobset`, `tfjob`) prints its notes and its manifest
   and stops: nothing is uploaded for a cluster the user applies it to (its
   replicas' start-up was checked in that target's environment);
3. the project and credentials (`location`): none for a dry run, or for a
   rehearsal against a storage emulator;
4. what the pools install is built: a user's package and its `--packages`,
   this repository's sdist for a prebuilt image, the build context of this
   project's image; a user's package is installed into a fresh virtualenv
   (its requirements against this project's pins) and its module read
   (`source_checks`), never run;
5. the request body, checked against the discovery schema; a dry run prints
   the staging plan and the request and stops;
6. the bucket checks (`preflight.check_storage`), a second job of the same
   name refused where the front asks (AI Platform's rule), the archives
   staged;
7. a rehearsal runs the job on this machine from that very body and stops;
8. this project's image built (or found by its sources' hash);
9. the job created, the front told (`Action.on_created`), and followed
   until it ends when asked.
"""
import dataclasses
import json
import os
import sys
import tempfile
from typing import Callable, Optional

from google.auth.credentials import AnonymousCredentials

from estimator_trainers import google_api
from estimator_trainers.errors import UserInputError
from estimator_trainers.tools.cloud import api
from estimator_trainers.tools.cloud import build as build_lib
from estimator_trainers.tools.cloud import credential_files
from estimator_trainers.tools.cloud import gcs_paths
from estimator_trainers.tools.cloud import jobs
from estimator_trainers.tools.cloud import jobset
from estimator_trainers.tools.cloud import location
from estimator_trainers.tools.cloud import logs
from estimator_trainers.tools.cloud import packages
from estimator_trainers.tools.cloud import plan as plan_lib
from estimator_trainers.tools.cloud import preflight
from estimator_trainers.tools.cloud import rehearsal
from estimator_trainers.tools.cloud import source_checks
from estimator_trainers.tools.cloud import staging
from estimator_trainers.tools.cloud import tfjob

SUBMIT, DRY_RUN, REHEARSE = 'submit', 'dry-run', 'rehearse'
JOBSET, TFJOB = jobset.TARGET, tfjob.TARGET
# Manifest targets -> their renderers (`k8s.Manifest`), in the order --target lists them.
MANIFESTS = {JOBSET: jobset.manifest, TFJOB: tfjob.manifest}


@dataclasses.dataclass(frozen=True)
class Action:
    """What to do with a plan, and how the front wants to hear of it.

    Attributes:
      kind: SUBMIT, DRY_RUN, REHEARSE or a manifest target (JOBSET, TFJOB).
      project: `--project`, or None (the environment's, the credentials').
      repository: the Artifact Registry repository of this project's image.
      stream_logs: follow the job until it ends (exit 0 only if it succeeded).
      poll_interval: seconds between polls of the job, its logs, image builds.
      max_replicas: replicas a rehearsal starts per pool at most.
      on_created: `(plan, job resource, out, err)`, called once the job exists.
    """
    kind: str = SUBMIT
    project: Optional[str] = None
    repository: str = build_lib.DEFAULT_REPOSITORY
    stream_logs: bool = False
    poll_interval: float = 30.0
    max_replicas: int = rehearsal.DEFAULT_MAX_REPLICAS
    on_created: Optional[Callable] = None


def run(plan, action, backend=None, out=None, err=None, environ=None):
    """Carries out `action` on `plan` in the documented order; returns the exit code.

    Raises:
      UserInputError: the first check that fails, before anything is uploaded.
      google_api.ApiError: a Google API refused a call.
    """
    backend = backend or location.Backend()
    out, err = out or sys.stdout, err or sys.stderr
    environ = os.environ if environ is None else environ
    for note in plan.notes:
        err.write('note: %s\n' % note)
    for warning in plan.warnings:
        err.write('warning: %s\n' % warning)
    target = action.kind if action.kind in MANIFESTS else preflight.VERTEX
    checked = preflight.check_replicas(plan, target)
    for note in checked.notes:
        err.write('note: %s\n' % note)
    if action.kind in MANIFESTS:
        manifest = MANIFESTS[action.kind](plan)
        for note in manifest.notes:
            err.write('note: %s\n' % note)
        out.write(manifest.text)
        return 0

    credentials = adc_project = None
    if action.kind == SUBMIT or (action.kind == REHEARSE and
                                 not environ.get(rehearsal.EMULATOR_VAR)):
        credentials, adc_project = backend.credentials()
    plan = dataclasses.replace(plan, project=location.project_id(action.project, environ,
                                                                 adc_project))

    with tempfile.TemporaryDirectory(prefix='estimator-trainers-submit-') as tmp:
        archives = _archives(plan, tmp)
        _check_archives(plan, archives, tmp, environ, err)
        context = build_body = None
        if plan.builds_image:
            context = build_lib.pack_context(tmp)
            for note in context.notes():
                err.write('note: %s\n' % note)
            for warning in context.warnings():
                err.write('warning: %s\n' % warning)
            image = build_lib.image_uri(plan.project, plan.region, action.repository,
                                        build_lib.image_tag(context.sha256, _variant(plan)))
            build_body = build_lib.build_body(_context_uri(plan, context), image,
                                              _variant(plan))
            plan = plan.resolved(project_image=image)
        plan = plan.resolved(package_uris=[_staged_uri(plan, a) for a in archives]
                             + [p for p in _given_packages(plan) if p.startswith('gs://')])
        body = jobs.job_body(plan)
        if action.kind == DRY_RUN:
            _print_dry_run(out, plan, body, archives, context, build_body, action.repository)
            return 0

        storage_client = backend.storage(plan.project, credentials)
        preflight.check_storage(preflight.BucketChecks(storage_client, plan.project), plan,
                                checked.parsed)
        vertex = None
        if action.kind == SUBMIT:
            vertex = backend.vertex(plan.project, plan.region, credentials)
            if plan.unique_name:
                _refuse_existing(vertex, plan)
        for archive in archives:
            _stage(storage_client, archive, _staged_uri(plan, archive), err)
        if action.kind == REHEARSE:
            return rehearsal.rehearse(body, storage_client, max_replicas=action.max_replicas,
                                      out=out, err=err, build_dir=tmp)
        if context:
            _build_image(backend, credentials, plan, action, storage_client, context,
                         build_body, err)

    job = _create(vertex, plan, body)
    if action.on_created:
        action.on_created(plan, job, out, err)
    if not action.stream_logs:
        return 0
    final = logs.follow_job(backend, credentials, vertex, job['name'], action.poll_interval, out)
    return 0 if final.get('state') == jobs.SUCCEEDED else 1


def _variant(plan):
    return build_lib.variant(plan.config.uses_gpus)


def _given_packages(plan):
    return plan.program.packages if isinstance(plan.program, plan_lib.Package) else ()


def _archives(plan, tmp):
    """The local archives the pools install: a user's package built from
    `--package-path` and its local `--packages`, or this repository's sdist
    for a prebuilt Vertex AI image."""
    archives = []
    program = plan.program
    if plan.stages_repository:
        archives.append(staging.build_sdist(os.path.join(tmp, 'sdist')))
    if isinstance(program, plan_lib.Package):
        if program.package_path is not None:
            archives.append(staging.build_package(program.package_path,
                                                  os.path.join(tmp, 'sdist')))
        for path in program.local_packages:
            archives.append(staging.archive(path, '--packages'))
    for archive in archives:
        found = credential_files.in_archive(archive.path)
        if found:
            raise UserInputError(
                '%s holds files that look like credentials: %s; keep them out of the '
                'package (and its MANIFEST.in)' % (archive.filename, ', '.join(
                    '%s (%s)' % item for item in found)))
    return archives


def _check_archives(plan, archives, tmp, environ, err):
    """What the pools install, installed and read before anything is uploaded."""
    if plan.stages_repository:
        executor = plan.image_for(plan_lib.CHIEF)
        problem = staging.python_mismatch(archives[0].requires_python, executor)
        if problem:
            raise UserInputError(problem)
    program = plan.program
    if not isinstance(program, plan_lib.Package):
        return
    if not archives:
        err.write('note: the packages are all gs:// URIs: the checks before upload do not '
                  'install them; --rehearse does\n')
        return
    python = packages.install([a.path for a in archives], os.path.join(tmp, 'check-venv'),
                              environ, what=', '.join(a.filename for a in archives),
                              unpinned=program.unpinned)
    if program.declared is not None:
        return  # this project's trainer: `check_replicas` parsed its flags
    sources = source_checks.read_sources([a.path for a in archives])
    for note in source_checks.check(sources, program.module, plan.task_args(), python,
                                    environ):
        err.write('note: %s\n' % note)


def _staged_uri(plan, archive):
    """Where an archive goes: `<staging>/<its sha256>/<its file name>`."""
    return '%s/%s/%s' % (plan.staging, archive.sha256, archive.filename)


def _context_uri(plan, context):
    return build_lib.context_uri('gs://%s' % gcs_paths.split(plan.staging)[0], context)


def _stage(storage_client, archive, destination, err):
    if staging.stage(storage_client, archive, destination):
        err.write('staged %s (sha256 %s)\n' % (destination, archive.sha256))
    else:
        err.write('%s already holds %s (sha256 %s); upload skipped\n'
                  % (destination, archive.filename, archive.sha256))


def _refuse_existing(vertex, plan):
    existing = vertex.list(limit=1, filter_expr='display_name="%s"' % plan.name)
    if existing:
        raise UserInputError('job %s already exists in %s (%s): AI Platform refused a second '
                             'job of one name, and describe/stream-logs/cancel need one; '
                             'pick another JOB' % (plan.name, plan.region, existing[0]['name']))


def _build_image(backend, credentials, plan, action, storage_client, context, build_body,
                 err):
    """Reuses the image of the same sources, else stages the context and builds it."""
    builder = build_lib.ImageBuilder(
        backend.service('artifactregistry', 'v1', credentials),
        backend.service('cloudbuild', 'v1', credentials), plan.project, plan.region,
        action.repository)
    if builder.ensure_repository():
        err.write('created Artifact Registry repository %s\n' % builder.repository_name)
    tag = plan.project_image.rsplit(':', 1)[1]
    if builder.image_exists(tag):
        err.write('%s exists (built from these sources); build skipped\n' % plan.project_image)
        return
    _stage(storage_client, context, _context_uri(plan, context), err)
    builder.build(build_body, action.poll_interval, err)


def _create(vertex, plan, body):
    """Creates the job; a prebuilt image Vertex AI refuses gets the way out."""
    try:
        return vertex.create(plan.collection, body)
    except google_api.ApiError as e:
        image = plan.image_for(plan_lib.CHIEF)
        if plan.installs_packages(image) and e.status in (400, 403, 404) and \
                'image' in str(e).lower():
            raise google_api.ApiError('%s; Vertex AI refuses the executor image %s: drop '
                                      '--executor-image-uri to build this project\'s image, '
                                      'or pass --image-uri' % (e, image), e.status) from None
        raise


def _print_dry_run(out, plan, body, archives, context, build_body, repository):
    """The staging plan (each archive, the image) and the exact request, as JSON."""
    anonymous = AnonymousCredentials()
    offline = jobs.VertexJobs(plan.project, plan.region, credentials=anonymous)
    printed = {'staging': [staging.plan(archive, _staged_uri(plan, archive))
                           for archive in archives]}
    if context:
        builder = build_lib.ImageBuilder(
            None, api.build('cloudbuild', 'v1', api.authorized_http(anonymous)),
            plan.project, plan.region, repository)
        printed['image'] = dict(
            staging.plan(context, _context_uri(plan, context)), files=len(context.files),
            action='reuse %s if Artifact Registry has it, else upload the build context and '
                   'build it with Cloud Build' % plan.project_image,
            build=request_json(builder.build_request(build_body)))
    printed['request'] = request_json(offline.create_request(plan.collection, body))
    out.write(json.dumps(printed, indent=2) + '\n')


def request_json(request):
    """An unsent googleapiclient request as `{method, uri, body}`."""
    return {'method': request.method, 'uri': request.uri, 'body': json.loads(request.body)}
