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
   rehearsal against a storage emulator; a rehearsal that finds none (or
   is asked to, `--local-storage`, `--local-input`) uses local storage
   instead, and says so in one line; one note says where the project and
   region came from when no flag gave them; then the estimate
   (`estimate.for_plan`): prices per pool, the predicted time and cost; a job
   above its budget stops here, one below it gets the `scheduling.timeout`
   that bounds it, every job a run id label;
4. what the pools install is built: a user's package and its `--packages`,
   this repository's sdist for a prebuilt image, the build context of this
   project's image; a user's package is installed into a fresh virtualenv
   (its requirements against this project's pins) and its module read
   (`source_checks`), never run;
5. the request body, checked against the discovery schema; a dry run prints
   the staging plan and the request (or the spec `gcloud ai ... create
   --config` takes: `vertex_spec`) and stops;
6. on local storage: it starts (`local_storage`: the buckets of the
   job-dir and staging made, the job-dir's earlier contents loaded from its
   mirror) and the `--local-input` directories are copied in; then the
   bucket checks (`preflight.check_storage`; on local storage a missing
   input names `--local-input`), a second job of the same name refused where
   the front asks (AI Platform's rule), the archives staged;
7. a rehearsal runs the job on this machine from that very body and stops
   (on local storage the job-dir is then written back to its mirror and the
   storage stopped);
8. this project's image built (or found by its sources' hash);
9. the job created, the front told (`Action.on_created`), and followed
   until it ends when asked.

The serving actions (`deploy`, `remove`) and `cancel` have their orders
below; their dry runs need no credentials and no network.
"""
import contextlib
import dataclasses
import importlib.metadata
import json
import os
import shlex
import sys
import tempfile
from typing import Callable, Optional

from google.auth.credentials import AnonymousCredentials

from estimator_trainers import google_api
from estimator_trainers import job_record
from estimator_trainers import logs as logs_lib
from estimator_trainers.errors import first_line
from estimator_trainers.errors import UserInputError
from estimator_trainers.tools import local_storage
from estimator_trainers.tools.cloud import api
from estimator_trainers.tools.cloud import build as build_lib
from estimator_trainers.tools.cloud import credential_files
from estimator_trainers.tools.cloud import endpoints
from estimator_trainers.tools.cloud import estimate
from estimator_trainers.tools.cloud import gcs_paths
from estimator_trainers.tools.cloud import jobs
from estimator_trainers.tools.cloud import jobset
from estimator_trainers.tools.cloud import local_inputs
from estimator_trainers.tools.cloud import location
from estimator_trainers.tools.cloud import logs
from estimator_trainers.tools.cloud import packages
from estimator_trainers.tools.cloud import plan as plan_lib
from estimator_trainers.tools.cloud import preflight
from estimator_trainers.tools.cloud import rehearsal
from estimator_trainers.tools.cloud import source_checks
from estimator_trainers.tools.cloud import staging
from estimator_trainers.tools.cloud import tfjob
from estimator_trainers.tools.cloud import vertex_spec

SUBMIT, DRY_RUN, REHEARSE = 'submit', 'dry-run', 'rehearse'
# What a dry run prints: the staging plan and the request (JSON), or the spec
# Google's `gcloud ai ... create --config` takes (`vertex_spec`, YAML).
DRY_RUN_FORMATS = ('json', 'yaml')
# Prints the estimate (and its figures as JSON on stdout) and stops: a sweep's sum.
ESTIMATE = 'estimate'
JOBSET, TFJOB = jobset.TARGET, tfjob.TARGET
# Manifest targets -> their renderers (`k8s.Manifest`), in the order --target lists them.
MANIFESTS = {JOBSET: jobset.manifest, TFJOB: tfjob.manifest}
# The project a rehearsal on local storage names when none is given (no account).
LOCAL_PROJECT = 'local-rehearsal'


@dataclasses.dataclass(frozen=True)
class Action:
    """What to do with a plan, and how the front wants to hear of it.

    Attributes:
      kind: SUBMIT, DRY_RUN, REHEARSE, ESTIMATE or a manifest target (JOBSET, TFJOB).
      project: `--project`, or None (`location`'s rule: the environment's,
        gcloud's configuration's, the credentials').
      region_flag: `--region`, or None: the plan's region then came from
        `location`'s rule, and the note says where from.
      repository: the Artifact Registry repository of this project's image.
      stream_logs: follow the job until it ends (exit 0 only if it succeeded).
      poll_interval: seconds between polls of the job, its logs, image builds.
      max_replicas: replicas a rehearsal starts per pool at most.
      dry_run_format: `DRY_RUN_FORMATS`: json, the staging plan and the request;
        yaml, the `vertex_spec` of the request.
      local_storage: rehearse on local storage even with credentials.
      local_inputs: `local_inputs.Mapping`s copied into local storage (which they imply).
      on_created: `(plan, job resource, out, err)`, called once the job exists.
      max_cost: `--max-cost` USD (`estimate.for_plan`), or None.
      throughput_from: a run record to estimate the time from, or None.
    """
    kind: str = SUBMIT
    project: Optional[str] = None
    region_flag: Optional[str] = None
    repository: str = build_lib.DEFAULT_REPOSITORY
    stream_logs: bool = False
    poll_interval: float = 30.0
    max_replicas: int = rehearsal.DEFAULT_MAX_REPLICAS
    dry_run_format: str = 'json'
    local_storage: bool = False
    local_inputs: tuple = ()
    on_created: Optional[Callable] = None
    max_cost: Optional[float] = None
    throughput_from: Optional[str] = None


def run(plan, action, backend=None, out=None, err=None, environ=None):
    """Carries out `action` on `plan` in the documented order; returns the exit code.

    Raises:
      UserInputError: the first check that fails, before anything is uploaded.
      google_api.ApiError: a Google API refused a call.
    """
    backend = backend or location.Backend()
    out, err = out or sys.stdout, err or sys.stderr
    environ = os.environ if environ is None else environ
    if action.kind != REHEARSE and (action.local_storage or action.local_inputs):
        raise UserInputError('--local-storage and --local-input go with --rehearse',
                             flag='--local-input' if action.local_inputs else '--local-storage')
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

    credentials = adc_project = local = None
    if action.kind == SUBMIT:
        credentials, adc_project = backend.credentials()
    elif action.kind == REHEARSE and not environ.get(rehearsal.EMULATOR_VAR):
        credentials, adc_project, local = _rehearsal_credentials(action, backend, environ)
    emulated = action.kind == REHEARSE and bool(local or environ.get(rehearsal.EMULATOR_VAR))
    settings = location.Settings(environ, location.TRAINING)
    project = settings.project(action.project,
                               adc_project or (LOCAL_PROJECT if emulated else None))
    said = location.note(project, settings.region(action.region_flag, plan.config.region))
    if said:
        err.write('note: %s\n' % said)
    plan = dataclasses.replace(plan, project=project.value)
    plan, found = estimate.for_plan(plan, checked.parsed, action.max_cost,
                                    action.throughput_from, environ, err)
    if action.kind == ESTIMATE:
        out.write(estimate.as_json(found) + '\n')
        return 0

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
        if action.kind == DRY_RUN and action.dry_run_format == 'yaml':
            _print_spec(out, err, plan, body, archives, context)
            return 0
        if action.kind == DRY_RUN:
            _print_dry_run(out, plan, body, archives, context, build_body, action.repository)
            return 0

        with _local_storage(plan, local, action.local_inputs, err, environ) if local else \
                contextlib.nullcontext() as work_dir:
            storage_client = backend.storage(plan.project, credentials)
            hint = None
            if emulated:
                local_inputs.copy(storage_client, action.local_inputs, err)
                hint = _missing_hint(plan)
            checks = preflight.BucketChecks(storage_client, plan.project, missing_hint=hint)
            preflight.check_storage(checks, plan, checked.parsed)
            if emulated and checked.parsed is None:
                _note_missing_inputs(checks, plan, err)
            vertex = None
            if action.kind == SUBMIT:
                vertex = backend.vertex(plan.project, plan.region, credentials)
                if plan.unique_name:
                    _refuse_existing(vertex, plan)
            for archive in archives:
                _stage(storage_client, archive, _staged_uri(plan, archive), err)
            if action.kind == REHEARSE:
                code = rehearsal.rehearse(body, storage_client,
                                          max_replicas=action.max_replicas, out=out, err=err,
                                          work_dir=work_dir, build_dir=tmp)
        if action.kind == REHEARSE:
            if code == 0:  # on local storage, from the job-dir's mirror it was kept in
                estimate.keep_rehearsal(plan, err, environ, job_dir=local_storage.mirrored(
                    local_storage.default_mirror(environ), plan.trainer_job_dir)
                                        if local and plan.trainer_job_dir else None)
            return code
        if context:
            _build_image(backend, credentials, plan, action, storage_client, context,
                         build_body, err)

    job = _create(vertex, plan, body)
    job_record.write_if_asked(environ, job['name'], plan.region, plan.project)
    if action.on_created:
        action.on_created(plan, job, out, err)
    if not action.stream_logs:
        return 0
    final = logs.follow_job(backend, credentials, vertex, job['name'], action.poll_interval, out)
    return 0 if final.get('state') == jobs.SUCCEEDED else 1


def _rehearsal_credentials(action, backend, environ):
    """`(credentials, their project, why the rehearsal uses local storage or None)`."""
    if action.local_storage or action.local_inputs:
        return None, None, '--local-storage' if action.local_storage else '--local-input'
    try:
        credentials, project = backend.credentials()
    except UserInputError:
        if local_storage.credentials_configured(environ):
            raise  # set up, but broken: its line says what to fix
        return None, None, 'no Application Default Credentials found'
    return credentials, project, None


@contextlib.contextmanager
def _local_storage(plan, why, inputs, err, environ):
    """Local storage for a rehearsal, its environment in this process meanwhile.

    Started with the buckets of the job-dir and staging, the job-dir loaded
    from its mirror (what earlier rehearsals left there); on leaving, the
    job-dir is written back to the mirror and the storage stopped. Yields the
    rehearsal's work dir, where the storage's log is too.
    """
    work_dir = tempfile.mkdtemp(prefix='rehearsal-')
    mirror = local_storage.default_mirror(environ)
    kept = [plan.job_dir] if plan.job_dir else []
    buckets = {gcs_paths.split(uri)[0] for uri in kept + [plan.staging] if uri}
    local_storage.say(err, why, ['gs://' + b for b in buckets | {gcs_paths.split(m.uri)[0]
                                                              for m in inputs}],
                      mirror, plan.project if plan.project == LOCAL_PROJECT else None)
    with local_storage.serving(os.path.join(work_dir, 'storage'), mirror, kept, buckets,
                               err):
        yield work_dir


def _missing_hint(plan):
    """`(flag, path) -> text` for a data path missing on local storage: the
    `--local-input` that gives it, with this checkout's data directory of the
    trainer when that is where the flag points and it holds the data."""
    trainer = plan.declared
    data = trainer.data_trainer(plan.task_args()) if trainer is not None else None
    local_dir = os.path.join(staging.REPO_ROOT, 'data', data.name) if data else None

    def hint(flag, path):
        suggested = None
        if data is not None and data.data_args(local_dir) == [flag, local_dir] and \
                data.data_ready(local_dir):
            suggested = os.path.relpath(local_dir)
        return local_inputs.missing_hint(path, suggested)
    return hint


def _note_missing_inputs(checks, plan, err):
    """For a package whose flags are not known here: a note for each gs:// path in
    its args (not its job-dir or staging) that local storage does not hold."""
    outputs = [uri for uri in (plan.job_dir, plan.staging) if uri]
    for arg in plan.task_args():
        value = arg if arg.startswith(gcs_paths.SCHEME) else arg.partition('=')[2]
        if not value.startswith(gcs_paths.SCHEME) or any(
                value == uri or value.startswith(uri + '/') for uri in outputs):
            continue
        try:
            checks.check_data(arg, value)
        except UserInputError:
            err.write('note: %s (in the job\'s args) is not on local storage; if the job '
                      'reads it, give it with %s %s=DIR\n' % (value, local_inputs.FLAG, value))


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
    source_checks.check_top_level_names(
        _user_archives(plan, archives), program.module,
        importlib.metadata.packages_distributions(),
        own=[source_checks.top_level(archives[0].path).distribution or '']
        if plan.stages_repository else ())
    python = packages.install([a.path for a in archives], os.path.join(tmp, 'check-venv'),
                              environ, what=', '.join(a.filename for a in archives),
                              unpinned=program.unpinned)
    if program.declared is not None:
        return  # this project's trainer: `check_replicas` parsed its flags
    sources = source_checks.read_sources([a.path for a in archives])
    for note in source_checks.check(sources, program.module, plan.task_args(), python,
                                    environ):
        err.write('note: %s\n' % note)


def _user_archives(plan, archives):
    """`(flag and value, path)` of the user's archives among `archives` (`_archives`
    order: this repository's sdist, the `--package-path` build, `--packages`)."""
    program = plan.program
    user = archives[1:] if plan.stages_repository else archives
    labels = (['--package-path %s' % program.package_path]
              if program.package_path is not None else []) + [
                  '--packages %s' % path for path in program.local_packages]
    return [(label, archive.path) for label, archive in zip(labels, user)]


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
    existing = [job for job in vertex.list(limit=100, filter_expr=api.equals_filter(
        'display_name', plan.name, 'JOB')) if job.get('displayName') == plan.name]
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


def _print_spec(out, err, plan, body, archives, context):
    """The request as `gcloud ai ... create --config` takes it (`vertex_spec`); what
    it names that a dry run does not upload or build, and the command, on `err`."""
    written = vertex_spec.spec(body, plan.collection, plan.project, plan.region)
    missing = [_staged_uri(plan, a) for a in archives] + (
        [plan.project_image] if context else [])
    if missing:
        err.write('note: the spec names what a dry run does not upload or build: %s; a submit '
                  'stages and builds them (--rehearse stages the archives)\n'
                  % ', '.join(missing))
    err.write('note: the spec is the --config of: %s\n' % ' '.join(
        shlex.quote(word) for word in written.command))
    out.write(written.text)


def request_json(request):
    """An unsent googleapiclient request as `{method, uri[, body]}` (no body: a GET)."""
    printed = {'method': request.method, 'uri': request.uri}
    if request.body:
        printed['body'] = json.loads(request.body)
    return printed


# ------------------------------------------------------------------ serving


DEPLOY, REMOVE = 'deploy', 'remove'
# Why a dry run's lookups were not made (the command itself says what to do).
NO_CREDENTIALS = 'no usable Application Default Credentials'
# TensorFlow's retries of a gs:// request (its default: 10, minutes of back-off).
GCS_RETRIES_VAR = 'GCS_RETRY_CONFIG_MAX_RETRIES'


def deploy(plan, action, backend=None, out=None, err=None, environ=None):
    """`versions create`: a `plan.ServingPlan` deployed in this order; returns the exit code.

    1. the plan's notes, then the check: the export loaded from its gs://
       origin and its serving signature called on one instance
       (`serving.check_export`), before any credential; a broken export
       stops here;
    2. a dry run prints the check and the requests, and stops;
    3. the model's endpoint found (an unknown model stops here, before
       anything is uploaded) and a second version of one name refused;
    4. the SavedModel uploaded to the Model Registry (an operation, polled);
    5. deployed on the endpoint (an operation, polled; the first version
       takes all the traffic);
    6. the front told (`Action.on_created`).

    Any failure or interrupt after the upload started rolls back
    (`_roll_back`): the pending operation cancelled, the uploaded model
    undeployed and deleted; what was removed, or is left with the command
    to remove it, is said. `plan.wait` False (`--async`) returns once the
    deploy started: its later failure leaves the uploaded model, which
    `versions delete` removes.

    Raises:
      UserInputError: a failed check, an unknown model, an existing version.
      google_api.ApiError: a Google API refused a call or an operation failed.
    """
    backend = backend or location.Backend()
    out, err = out or sys.stdout, err or sys.stderr
    environ = os.environ if environ is None else environ
    for note in plan.notes:
        err.write('note: %s\n' % note)
    checked = _check_export(plan, err, dry_run=action.kind == DRY_RUN)
    plan = dataclasses.replace(plan, origin=checked.export_dir)
    if action.kind == DRY_RUN:
        project, region = location.resolve(endpoints.parse_endpoint_name(plan.model),
                                           action.project, action.region_flag, environ,
                                           location.SERVING, err)
        _print_deploy_dry_run(out, dataclasses.replace(plan, project=project, region=region),
                              checked)
        return 0
    vertex, _ = location.connect_serving(backend, plan.model, action.project,
                                         action.region_flag, environ, err)
    plan = dataclasses.replace(plan, project=vertex.project, region=vertex.region)
    endpoint = endpoints.find_model(vertex, plan.model)
    for deployed in endpoint.get('deployedModels') or []:
        if deployed.get('displayName') == plan.version:
            raise UserInputError('version %s of model %s already exists (deployed model %s); '
                                 'pick another VERSION' % (plan.version, plan.model,
                                                           deployed.get('id')))
    result = _upload_and_deploy(vertex, plan, endpoint, action.poll_interval, err)
    if action.on_created:
        action.on_created(plan, result, out, err)
    return 0


def _check_export(plan, err, dry_run=False):
    """The check before anything is uploaded (TensorFlow loads here, not before).

    An export Cloud Storage does not give (no network, no access) is one line:
    an error, or for a dry run a note (the check is then not made), after one
    retry instead of TensorFlow's ten (minutes of back-off offline).
    """
    if dry_run and 'tensorflow' not in sys.modules:
        # Read when TensorFlow's gs:// file system is made, at its import.
        os.environ.setdefault(GCS_RETRIES_VAR, '1')
    tf = logs_lib.import_tensorflow()
    from estimator_trainers import serving  # pylint: disable=import-outside-toplevel
    try:
        checked = serving.check_export(plan.origin, plan.signature_name, plan.check_instances)
    except tf.errors.OpError as e:
        problem = '--origin %s: cannot read it (%s)' % (plan.origin, first_line(e))
        if not dry_run:
            raise UserInputError(problem, flag='--origin') from None
        err.write('note: %s; the export is not checked, the requests serve it as given\n'
                  % problem)
        return serving.Checked(plan.origin, None, None, note='not checked: %s' % problem)
    if checked.export_dir != plan.origin:
        err.write('note: --origin %s holds exports; serving the newest, %s\n'
                  % (plan.origin, checked.export_dir))
    if checked.note:
        err.write('note: %s\n' % checked.note)
    else:
        err.write('checked %s: signature %s (inputs %s) predicted %s\n' % (
            checked.export_dir, checked.signature, checked.inputs,
            _short(json.dumps(checked.prediction, sort_keys=True))))
    return checked


def _short(text, limit=200):
    return text if len(text) <= limit else text[:limit - 3] + '...'


@dataclasses.dataclass(frozen=True)
class Deployed:
    """What a deploy made: the Vertex AI model, its deployed model (None with
    `--async`) and the endpoint."""
    model: str
    endpoint: str
    deployed_model: Optional[dict]


def _upload_and_deploy(vertex, plan, endpoint, poll_interval, err):
    """Steps 4 and 5 of `deploy`; on any failure or interrupt, `_roll_back`."""
    uploaded = None
    pending = []
    what = 'version %s of model %s' % (plan.version, plan.model)
    try:
        operation = vertex.start(vertex.upload_request(endpoints.upload_body(
            plan, endpoint.get('displayName'))), 'models.upload in %s' % vertex.parent)
        uploaded = endpoints.model_of_operation(operation.get('name'))
        pending.append(operation)
        response = vertex.wait(operation, 'upload %s' % what, err, poll_interval)
        pending.remove(operation)
        uploaded = response.get('model') or uploaded
        if not uploaded:
            raise google_api.ApiError('models.upload in %s: the answer names no model'
                                      % vertex.parent)
        err.write('uploaded %s\n' % uploaded)
        body = endpoints.deploy_body(plan, uploaded, first=not endpoint.get('deployedModels'),
                                     access_logging=endpoints.access_logging(endpoint))
        operation = vertex.start(vertex.deploy_request(endpoint['name'], body),
                                 'deployModel on %s' % endpoint['name'])
        if not plan.wait:
            err.write('note: --async: not waiting for the deploy (operation %s); if it fails, '
                      '`versions delete %s --model %s` removes the uploaded model\n'
                      % (operation.get('name'), plan.version, plan.model))
            return Deployed(uploaded, endpoint['name'], None)
        pending.append(operation)
        response = vertex.wait(operation, 'deploy %s' % what, err, poll_interval)
        pending.remove(operation)
        return Deployed(uploaded, endpoint['name'], dict(body['deployedModel'], **(
            response.get('deployedModel') or {})))
    except BaseException:
        _roll_back(vertex, plan, endpoint['name'], uploaded, pending, poll_interval, err)
        raise


def _roll_back(vertex, plan, endpoint_name, model_name, pending, poll_interval, err):
    """Leaves nothing of a failed deploy: cancels its pending operations,
    undeploys and deletes the uploaded model; says what was removed and what
    is left (with the command that removes it)."""
    removed, left = [], []
    try:
        for operation in pending:
            try:
                vertex.cancel_operation(operation['name'])
                vertex.wait(vertex.get_operation(operation['name']),
                            'cancel %s' % operation['name'], err, poll_interval, timeout=600)
            except google_api.ApiError:
                pass  # cancelled (its error says so), or it ended first: what exists is below
        if model_name:
            endpoint = vertex.get_endpoint(endpoint_name)
            for deployed in endpoint.get('deployedModels') or []:
                if _model_id(deployed.get('model')) == _model_id(model_name):
                    step = _undeploy_step(vertex, endpoint, deployed)
                    _run_step(vertex, step, poll_interval, err)
                    removed.append(step.done)
            try:
                _run_step(vertex, Step('delete the uploaded model %s' % model_name,
                                       vertex.delete_model_request(model_name),
                                       'delete %s' % model_name, 'deleted %s' % model_name),
                          poll_interval, err)
                removed.append('deleted %s' % model_name)
            except google_api.ApiError as e:
                if e.status != 404:  # 404: the upload never made it
                    raise
    except (google_api.ApiError, KeyboardInterrupt) as e:
        left.append('%s (%s)' % (model_name, 'interrupted' if isinstance(e, KeyboardInterrupt)
                                 else e))
    err.write('note: rolled back the failed deploy: %s\n'
              % ('; '.join(removed) or 'nothing had been created'))
    if left:
        err.write('warning: left behind: %s; `versions delete %s --model %s` removes it\n'
                  % ('; '.join(left), plan.version, plan.model))
    err.flush()


def _model_id(name):
    """`projects/P/locations/R/models/ID[@version]` -> ID (projects go by number or id)."""
    return (name or '').rsplit('/models/', 1)[-1].split('@')[0]


def offline_serving(model, project_flag, region_flag, environ, err):
    """The serving client of a dry run that looks nothing up: no credentials, its
    requests built and printed, never sent. `model`'s endpoint resource name
    names its project and region, else `location`'s rule (its note on `err`)."""
    project, region = location.resolve(endpoints.parse_endpoint_name(model or ''),
                                       project_flag, region_flag, environ, location.SERVING,
                                       err)
    return endpoints.VertexServing(project, region, credentials=AnonymousCredentials())


def endpoint_placeholder(vertex, model):
    """`model`'s endpoint as a dry run names it before any lookup: its resource
    name, or `<parent>/endpoints/ENDPOINT_OF_<model>` (a name a lookup takes:
    `endpoints.model_filter`)."""
    if endpoints.parse_endpoint_name(model):
        return model
    endpoints.model_filter(model)
    return '%s/endpoints/ENDPOINT_OF_%s' % (vertex.parent, model)


def _print_deploy_dry_run(out, plan, checked):
    """The check's result and the requests of a deploy, as JSON."""
    offline = endpoints.VertexServing(plan.project, plan.region,
                                      credentials=AnonymousCredentials())
    parsed = endpoints.parse_endpoint_name(plan.model)
    endpoint_name = endpoint_placeholder(offline, plan.model)
    model_name = '%s/models/UPLOADED_MODEL_ID' % offline.parent
    requests = []
    if not parsed:
        requests.append(dict(step='find model %s: the endpoint displayed as %s' % (
            plan.model, plan.model), **request_json(offline.list_endpoints_request(
                endpoints.model_filter(plan.model)))))
    requests.append(dict(
        step='upload the SavedModel to the Model Registry (an operation, polled)',
        **request_json(offline.upload_request(endpoints.upload_body(plan)))))
    requests.append(dict(
        step='deploy it on the endpoint (an operation, polled); the first version takes all '
             'the traffic ("0": the model being deployed), a later one none',
        **request_json(offline.deploy_request(endpoint_name, endpoints.deploy_body(
            plan, model_name, first=True)))))
    check = {'export': checked.export_dir, 'signature': checked.signature,
             'inputs': checked.inputs}
    check.update({'note': checked.note} if checked.note else
                 {'prediction': checked.prediction})
    out.write(json.dumps({'check': check, 'requests': requests}, indent=2) + '\n')


@dataclasses.dataclass(frozen=True)
class Step:
    """One removal: what it does, its unsent request, how its operation is
    named, and how it is said once done."""
    description: str
    request: object
    what: str
    done: str


def remove(vertex, model, version, action, out, err):
    """`models delete M` (`version` None) or `versions delete V --model M`, in this order.

    1. the model's endpoint found; one this tool did not create is touched
       only when `model` names it by its full resource name;
    2. the versions undeployed, those without traffic first (a default
       version with others beside it is refused for `versions delete`, as
       AI Platform did);
    3. their Vertex AI models deleted where this tool created them and
       nothing else deploys them (else kept, and said), and the models it
       uploaded for the model (or the version) that nothing deploys: what a
       failed `--async` deploy, or an unfinished roll back, left;
    4. for `models delete`, the endpoint deleted.

    A dry run prints the requests and removes nothing. A failed step stops
    with one line naming what was removed and what was not.

    Returns:
      The descriptions of what was removed, in order.
    """
    endpoint = endpoints.find_model(vertex, model)
    exact = endpoints.parse_endpoint_name(model) is not None
    if not exact and not endpoints.created_here(endpoint):
        raise UserInputError(
            'model %s is Vertex AI endpoint %s, which this tool did not create; to remove '
            'from it anyway, name it exactly: --model %s' % (model, endpoint['name'],
                                                            endpoint['name'])
            if version is not None else
            'model %s is Vertex AI endpoint %s, which this tool did not create; to delete it '
            'anyway, name it exactly: models delete %s' % (model, endpoint['name'],
                                                           endpoint['name']))
    steps, kept = _removal_steps(vertex, endpoint, version)
    if action.kind == DRY_RUN:
        out.write(json.dumps({
            'remove': [dict(step=s.description, **request_json(s.request)) for s in steps],
            'keep': kept}, indent=2) + '\n')
        return []
    for note in kept:
        err.write('note: keeping %s\n' % note)
    removed = []
    for i, step in enumerate(steps):
        try:
            _run_step(vertex, step, action.poll_interval, err)
        except google_api.ApiError as e:
            raise google_api.ApiError('%s; removed: %s; not removed: %s' % (
                e, '; '.join(removed) or 'nothing', '; '.join(
                    s.description for s in steps[i:])), e.status) from None
        removed.append(step.done)
    return removed


def remove_dry_run(backend, model, version, action, out, err, environ):
    """`remove`'s dry run, removing nothing: with credentials its lookups (reads) are
    made and the exact requests printed; without credentials, or when Vertex AI
    cannot be reached, the requests are printed with placeholders for what the
    lookups find, and one line says why."""
    parsed = endpoints.parse_endpoint_name(model)
    try:
        credentials, adc_project = backend.credentials()
    except UserInputError:
        why = NO_CREDENTIALS
        vertex = offline_serving(model, action.project, action.region_flag, environ, err)
    else:
        vertex = backend.serving(*location.resolve(
            parsed, action.project, action.region_flag, environ, location.SERVING, err,
            adc_project), credentials)
        try:
            remove(vertex, model, version, action, out, err)
            return
        except api.Unreachable as e:
            why = str(e)
    endpoint = endpoint_placeholder(vertex, model)
    deployed = 'DEPLOYED_MODEL_OF_%s' % version if version else 'DEPLOYED_MODEL_ID'
    steps = [] if parsed else [
        dict(step='find model %s: the endpoint displayed as %s' % (model, model),
             **request_json(vertex.list_endpoints_request(endpoints.model_filter(model))))]
    steps.append(dict(step='undeploy %s: each of its deployed models the lookup finds' % (
        'version %s' % version if version else 'every version'), **request_json(
            vertex.undeploy_request(endpoint, endpoints.undeploy_body(deployed)))))
    steps.append(dict(step='delete the Vertex AI model this tool uploaded for each, unless '
                           'deployed elsewhere', **request_json(vertex.delete_model_request(
                               '%s/models/MODEL_ID' % vertex.parent))))
    if version is None:
        steps.append(dict(step='delete endpoint %s (model %s)' % (endpoint, model),
                          **request_json(vertex.delete_endpoint_request(endpoint))))
    err.write('note: not looked up (%s): the requests name what the lookups find by '
              'placeholders\n' % why)
    out.write(json.dumps({'remove': steps, 'keep': []}, indent=2) + '\n')


def _removal_steps(vertex, endpoint, version):
    """The steps of `remove` and what it keeps (with why)."""
    deployed = endpoint.get('deployedModels') or []
    name = endpoint.get('displayName', endpoint['name'])
    leftovers = endpoints.undeployed_versions(vertex, endpoint, version)
    if version is not None and not any(version in (d.get('displayName'), d.get('id'))
                                       for d in deployed) and leftovers:
        targets = []  # a version whose deploy failed: only its uploaded model is left
    elif version is not None:
        target = endpoints.find_version(endpoint, version)
        if endpoints.traffic(endpoint, target) and len(deployed) > 1:
            others = [d.get('displayName') or d['id'] for d in deployed if d is not target]
            raise UserInputError(
                'version %s is the default of model %s (it takes %d%% of the traffic); make '
                'another the default first (versions set-default %s --model %s), or delete '
                'the model' % (version, name, endpoints.traffic(endpoint, target), others[0],
                               name))
        targets = [target]
    else:
        targets = sorted(deployed, key=lambda d: endpoints.traffic(endpoint, d))
    steps, kept = [], []
    current = endpoint
    for target in targets:
        steps.append(_undeploy_step(vertex, current, target))
        current = dict(current, trafficSplit=endpoints.split_without(current, target),
                       deployedModels=[d for d in current.get('deployedModels') or []
                                       if d is not target])
    for target in targets:
        model = _model_or_none(vertex, target.get('model'))
        if model is None:
            continue
        elsewhere = [r for r in model.get('deployedModels') or []
                     if r.get('deployedModelId') != target['id']]
        if not endpoints.created_here(model):
            kept.append('%s, the Vertex AI model of version %s: this tool did not create it'
                        % (model['name'], target.get('displayName')))
        elif elsewhere:
            kept.append('%s, the Vertex AI model of version %s: also deployed on %s' % (
                model['name'], target.get('displayName'), elsewhere[0].get('endpoint')))
        else:
            steps.append(_delete_model_step(vertex, model, target.get('displayName')))
    for model in leftovers:
        steps.append(_delete_model_step(vertex, model, model.get('displayName', '').split(
            '/', 1)[-1] + ', not deployed'))
    if version is None:
        steps.append(Step('delete endpoint %s (model %s)' % (endpoint['name'], name),
                          vertex.delete_endpoint_request(endpoint['name']),
                          'delete endpoint %s' % endpoint['name'],
                          'deleted endpoint %s' % endpoint['name']))
    return steps, kept


def _delete_model_step(vertex, model, version):
    return Step('delete Vertex AI model %s (version %s)' % (model['name'], version),
                vertex.delete_model_request(model['name']), 'delete %s' % model['name'],
                'deleted Vertex AI model %s' % model['name'])


def _model_or_none(vertex, name):
    try:
        return vertex.get_model(name)
    except google_api.ApiError as e:
        if e.status == 404:
            return None
        raise


def _undeploy_step(vertex, endpoint, deployed):
    body = endpoints.undeploy_body(deployed['id'], endpoints.split_without(endpoint, deployed))
    what = 'version %s (deployed model %s, %s)' % (
        deployed.get('displayName'), deployed['id'], endpoints.machines_of(deployed)[1])
    return Step('undeploy ' + what, vertex.undeploy_request(endpoint['name'], body),
                'undeploy %s' % (deployed.get('displayName') or deployed['id']),
                'undeployed ' + what)


def _run_step(vertex, step, poll_interval, err):
    operation = vertex.start(step.request, step.description)
    vertex.wait(operation, step.what, err, poll_interval)


# ------------------------------------------------------------------- cancel


def cancel(backend, job, action, out, err, environ):
    """`jobs cancel JOB`: the job found (by resource name, numeric id or name)
    and cancelled; returns its resource name.

    A dry run cancels nothing and prints the requests: a job named by its
    resource name needs no credentials; a name or an id is looked up with
    the credentials (a read), and without credentials, or when Vertex AI
    cannot be reached, the lookups and the cancel are printed with a
    placeholder, and one line says why.
    """
    if action.kind != DRY_RUN:
        vertex, _, name = location.connect(backend, job, action.project, action.region_flag,
                                           environ, err)
        vertex.cancel(name)
        return name
    parsed = jobs.parse_job_name(job)
    credentials = adc_project = why = None
    if not parsed:
        try:
            credentials, adc_project = backend.credentials()
        except UserInputError:
            why = NO_CREDENTIALS
    project, region = location.resolve(parsed, action.project, action.region_flag, environ,
                                       location.TRAINING, err, adc_project)
    if parsed or why:
        vertex = jobs.VertexJobs(project, region, credentials=AnonymousCredentials())
    else:
        vertex = backend.vertex(project, region, credentials)
    steps = []
    name = job if parsed else None
    if name is None and why is None:
        try:
            name = vertex.resolve(job)
        except api.Unreachable as e:
            why = str(e)
    if name is None:
        err.write('note: not looked up (%s): the cancel names the job by a placeholder\n' % why)
        steps = [dict(step='find job %s' % job, **request_json(request))
                 for request in vertex.find_requests(job)]
        name = '%s/%s/%s' % (vertex.parent, jobs.COLLECTIONS[0],
                             job if job.isdigit() else 'JOB_ID_OF_%s' % job)
    steps.append(dict(step='cancel job %s%s' % (name, ' (or its hyperparameter tuning job, '
                                                      'whichever the lookup finds)'
                                                if why and job.isdigit() else ''),
                      **request_json(vertex.cancel_request(name))))
    out.write(json.dumps({'requests': steps}, indent=2) + '\n')
    return name
