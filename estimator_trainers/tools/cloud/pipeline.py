"""The one order of a cloud job: checks, stage, build, then create, rehearse or print.

Both fronts (`train_cloud`, `ai_platform`) turn their words into a
`plan.JobPlan` and hand it to `run` with one `actions.TrainingAction`
(`Submit`, `DryRun`, `Rehearse`, `Manifest`, `Estimate`: what the front's
flags ask, `actions.training_action`); nothing else orders these steps:

1. the plan's notes and warnings, then every replica's start-up
   (`preflight.check_replicas`), before any credential or network;
2. a `Manifest` (`jobset`, `tfjob`) prints its notes and its manifest
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
9. the job created, the front told (`Submit.on_created`), and followed
   until it ends when asked.

What the plan runs is asked of its program (`plan.Program`: what it
launches, which archives it builds, what of the user's is installed and
read); the pipeline never asks which kind it is. `cancel` (`actions.Cancel`)
has its order below; its dry run needs no credentials and no network. The
serving commands have their own pipeline (`serving_pipeline`).
"""
import contextlib
import dataclasses
import importlib.metadata
import json
import os
import shlex
import sys
import tempfile
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, TextIO

from estimator_trainers import google_api
from estimator_trainers import job_record
from estimator_trainers.errors import UserInputError
from estimator_trainers.tools import local_storage
from estimator_trainers.tools.cloud import actions
from estimator_trainers.tools.cloud import api
from estimator_trainers.tools.cloud import backend as backend_lib
from estimator_trainers.tools.cloud import build as build_lib
from estimator_trainers.tools.cloud import credential_files
from estimator_trainers.tools.cloud import estimate
from estimator_trainers.tools.cloud import gcs_paths
from estimator_trainers.tools.cloud import jobs
from estimator_trainers.tools.cloud import jobset
from estimator_trainers.tools.cloud import k8s
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
from estimator_trainers.tools.cloud.actions import Json
from estimator_trainers.tools.cloud.backend import Backend, Credentials
from estimator_trainers.tools.cloud.plan import JobPlan

# Manifest targets -> their renderers, in the order --target lists them.
MANIFESTS: Dict[actions.ManifestTarget, Callable[[JobPlan], k8s.Manifest]] = {
    jobset.TARGET: jobset.manifest, tfjob.TARGET: tfjob.manifest}
# The project a rehearsal on local storage names when none is given (no account).
LOCAL_PROJECT = 'local-rehearsal'


@dataclasses.dataclass(frozen=True)
class _Access:
    """What an action runs with.

    Attributes:
      credentials, adc_project: the Application Default Credentials and their
        project, or None (a dry run, an estimate, a rehearsal without them).
      local: why a rehearsal runs on local storage this pipeline starts, or None.
      emulated: the storage stands in for the buckets (local storage, or the
        emulator `rehearsal.EMULATOR_VAR` names).
    """
    credentials: Optional[Credentials] = None
    adc_project: Optional[str] = None
    local: Optional[str] = None
    emulated: bool = False


@dataclasses.dataclass(frozen=True)
class _Built:
    """What a job installs and sends, built and checked on this machine.

    Attributes:
      plan: the plan with what building revealed (`JobPlan.resolved`).
      archives: the local archives the pools install (staged by a submission).
      context, build_body: this project's image's build context and Cloud
        Build request, when a pool runs that image; else None.
      body: the request body, checked against the discovery schema.
    """
    plan: JobPlan
    archives: Sequence[staging.Sdist]
    context: Optional[build_lib.Context]
    build_body: Optional[Json]
    body: Json


def run(plan: JobPlan, action: actions.TrainingAction, backend: Optional[Backend] = None,
        out: Optional[TextIO] = None, err: Optional[TextIO] = None,
        environ: Optional[location.Environ] = None) -> int:
    """Carries out `action` on `plan` in the documented order; returns the exit code.

    Raises:
      UserInputError: the first check that fails, before anything is uploaded.
      google_api.ApiError: a Google API refused a call.
    """
    backend = backend or Backend()
    out, err = out or sys.stdout, err or sys.stderr
    environ = os.environ if environ is None else environ
    for note in plan.notes:
        err.write('note: %s\n' % note)
    for warning in plan.warnings:
        err.write('warning: %s\n' % warning)
    checked = preflight.check_replicas(plan, action.target if isinstance(
        action, actions.Manifest) else preflight.VERTEX)
    for note in checked.notes:
        err.write('note: %s\n' % note)
    if isinstance(action, actions.Manifest):
        manifest = MANIFESTS[action.target](plan)
        for note in manifest.notes:
            err.write('note: %s\n' % note)
        out.write(manifest.text)
        return 0
    access = _access(action, backend, environ)
    plan = _located(plan, action, access, environ, err)
    plan, found = estimate.for_plan(plan, checked.parsed, action.max_cost,
                                    action.throughput_from, environ, err)
    if isinstance(action, actions.Estimate):
        out.write(estimate.as_json(found) + '\n')
        return 0
    with tempfile.TemporaryDirectory(prefix='estimator-trainers-submit-') as tmp:
        built = _build(plan, action.repository, tmp, environ, err)
        if isinstance(action, actions.DryRun):
            _print_dry_run(built, action, out, err)
            return 0
        if isinstance(action, actions.Rehearse):
            return _rehearse(built, action, access, backend, checked, tmp, out, err, environ)
        vertex = _stage_for_submission(built, action, access, backend, checked, err)
    job = _create(vertex, built.plan, built.body)
    job_record.write_if_asked(environ, job['name'], built.plan.region,
                              built.plan.located_project)
    if action.on_created:
        action.on_created(built.plan, job, out, err)
    if not action.stream_logs:
        return 0
    final = logs.follow_job(backend, access.credentials, vertex, job['name'],
                            action.poll_interval, out)
    return 0 if final.get('state') == jobs.SUCCEEDED else 1


def _access(action: actions.CloudAction, backend: Backend,
            environ: location.Environ) -> _Access:
    """The credentials an action runs with: a submission needs them; a
    rehearsal uses them when there are any (else local storage); a dry run
    and an estimate go without."""
    if isinstance(action, actions.Submit):
        return _Access(*backend.credentials())
    if not isinstance(action, actions.Rehearse):
        return _Access()
    if environ.get(rehearsal.EMULATOR_VAR):
        return _Access(emulated=True)
    if action.on_local_storage:
        return _Access(local='--local-storage' if action.local_storage else '--local-input',
                       emulated=True)
    try:
        return _Access(*backend.credentials())
    except UserInputError:
        if local_storage.credentials_configured(environ):
            raise  # set up, but broken: its line says what to fix
        return _Access(local='no Application Default Credentials found', emulated=True)


def _located(plan: JobPlan, action: actions.CloudAction, access: _Access,
             environ: location.Environ, err: TextIO) -> JobPlan:
    """The plan in its project (`location`'s rule; a rehearsal on stand-in
    storage may go without one); one note says where the project and region
    came from when no flag gave them."""
    settings = location.Settings(environ, location.TRAINING)
    project = settings.project(action.project, access.adc_project or (
        LOCAL_PROJECT if access.emulated else None))
    said = location.note(project, settings.region(action.region_flag, plan.config.region))
    if said:
        err.write('note: %s\n' % said)
    return dataclasses.replace(plan, project=project.value)


def _build(plan: JobPlan, repository: str, tmp: str, environ: location.Environ,
           err: TextIO) -> _Built:
    """What the pools install, built and checked; this project's image named by
    its sources' hash; the request body."""
    archives = _archives(plan, tmp)
    _check_archives(plan, archives, tmp, environ, err)
    context = build_body = None
    if plan.builds_image:
        context = build_lib.pack_context(tmp)
        for note in context.notes():
            err.write('note: %s\n' % note)
        for warning in context.warnings():
            err.write('warning: %s\n' % warning)
        variant = build_lib.variant(plan.config.uses_gpus)
        image = build_lib.image_uri(plan.project, plan.region, repository,
                                    build_lib.image_tag(context.sha256, variant))
        build_body = build_lib.build_body(_context_uri(plan, context), image, variant)
        plan = plan.resolved(project_image=image)
    plan = plan.resolved(package_uris=[_staged_uri(plan, a) for a in archives]
                         + list(plan.program.given_packages()))
    return _Built(plan, archives, context, build_body, jobs.job_body(plan))


def _archives(plan: JobPlan, tmp: str) -> List[staging.Sdist]:
    """The local archives the pools install (`Program.archives`), none holding
    what looks like a credential."""
    archives = plan.program.archives(plan, tmp)
    for archive in archives:
        found = credential_files.in_archive(archive.path)
        if found:
            raise UserInputError(
                '%s holds files that look like credentials: %s; keep them out of the '
                'package (and its MANIFEST.in)' % (archive.filename, ', '.join(
                    '%s (%s)' % item for item in found)))
    return archives


def _check_archives(plan: JobPlan, archives: Sequence[staging.Sdist], tmp: str,
                    environ: location.Environ, err: TextIO) -> None:
    """What the pools install, installed and read before anything is uploaded."""
    if plan.stages_repository:
        executor = plan.image_for(plan_lib.CHIEF)
        problem = staging.python_mismatch(archives[0].requires_python, executor)
        if problem:
            raise UserInputError(problem)
    user = plan.program.installed()
    if user is None:
        return
    if not archives:
        err.write('note: the packages are all gs:// URIs: the checks before upload do not '
                  'install them; --rehearse does\n')
        return
    # A name the image already has would shadow it (or be shadowed) at start-up.
    source_checks.check_top_level_names(
        zip(user.labels, [a.path for a in archives]), user.module,
        importlib.metadata.packages_distributions())
    python = packages.install([a.path for a in archives], os.path.join(tmp, 'check-venv'),
                              environ, what=', '.join(a.filename for a in archives),
                              unpinned=user.unpinned)
    if not user.read_sources:
        return  # this project's trainer: `check_replicas` parsed its flags
    sources = source_checks.read_sources([a.path for a in archives])
    for note in source_checks.check(sources, user.module, plan.task_args(), python,
                                    environ):
        err.write('note: %s\n' % note)


def _rehearse(built: _Built, action: actions.Rehearse, access: _Access, backend: Backend,
              checked: preflight.Checked, tmp: str, out: TextIO, err: TextIO,
              environ: location.Environ) -> int:
    """Stages the archives and runs the job on this machine from its body (on
    local storage when `access.local` says why); keeps a passing rehearsal's
    measurements for the estimates."""
    plan = built.plan
    with _local_storage(plan, access.local, action.local_inputs, err, environ) \
            if access.local else contextlib.nullcontext() as work_dir:
        storage_client = backend.storage(plan.located_project, access.credentials)
        hint = None
        if access.emulated:
            local_inputs.copy(storage_client, action.local_inputs, err)
            hint = _missing_hint(plan)
        checks = preflight.BucketChecks(storage_client, plan.project, missing_hint=hint)
        preflight.check_storage(checks, plan, checked.parsed)
        if access.emulated and checked.parsed is None:
            _note_missing_inputs(checks, plan, err)
        for archive in built.archives:
            _stage(storage_client, archive, _staged_uri(plan, archive), err)
        code = rehearsal.rehearse(built.body, storage_client, max_replicas=action.max_replicas,
                                  out=out, err=err, work_dir=work_dir, build_dir=tmp)
    if code == 0:  # on local storage, from the job-dir's mirror it was kept in
        estimate.keep_rehearsal(plan, err, environ, job_dir=local_storage.mirrored(
            local_storage.default_mirror(environ), plan.trainer_job_dir)
                                if access.local and plan.trainer_job_dir else None)
    return code


def _stage_for_submission(built: _Built, action: actions.Submit, access: _Access,
                          backend: Backend, checked: preflight.Checked,
                          err: TextIO) -> jobs.VertexJobs:
    """The bucket checks, a second job of the same name refused (where the
    front asks), the archives staged, this project's image built (or found);
    returns the Vertex AI client to create the job with."""
    plan = built.plan
    storage_client = backend.storage(plan.located_project, access.credentials)
    preflight.check_storage(preflight.BucketChecks(storage_client, plan.project), plan,
                            checked.parsed)
    vertex = backend.vertex(plan.located_project, plan.region, access.credentials)
    if plan.unique_name:
        _refuse_existing(vertex, plan)
    for archive in built.archives:
        _stage(storage_client, archive, _staged_uri(plan, archive), err)
    if built.context:
        _build_image(backend, access.credentials, plan, action, storage_client, built, err)
    return vertex


@contextlib.contextmanager
def _local_storage(plan: JobPlan, why: str, inputs: Sequence[local_inputs.Mapping],
                   err: TextIO, environ: location.Environ) -> Iterator[str]:
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


def _missing_hint(plan: JobPlan) -> Callable[[str, str], str]:
    """`(flag, path) -> text` for a data path missing on local storage: the
    `--local-input` that gives it, with this checkout's data directory of the
    trainer when that is where the flag points and it holds the data."""
    trainer = plan.declared
    data = trainer.data_trainer(plan.task_args()) if trainer is not None else None
    local_dir = os.path.join(staging.REPO_ROOT, 'data', data.name) if data else None

    def hint(flag: str, path: str) -> str:
        suggested = None
        if data is not None and local_dir is not None and data.data_args(local_dir) == [
                flag, local_dir] and data.data_ready(local_dir):
            suggested = os.path.relpath(local_dir)
        return local_inputs.missing_hint(path, suggested)
    return hint


def _note_missing_inputs(checks: preflight.BucketChecks, plan: JobPlan, err: TextIO) -> None:
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


def _staged_uri(plan: JobPlan, archive: staging.Sdist) -> str:
    """Where an archive goes: `<staging>/<its sha256>/<its file name>`."""
    return '%s/%s/%s' % (plan.staging, archive.sha256, archive.filename)


def _context_uri(plan: JobPlan, context: build_lib.Context) -> str:
    return build_lib.context_uri('gs://%s' % gcs_paths.split(plan.staging or '')[0], context)


def _stage(storage_client: Any, archive: staging.Staged, destination: str,
           err: TextIO) -> None:
    if staging.stage(storage_client, archive, destination):
        err.write('staged %s (sha256 %s)\n' % (destination, archive.sha256))
    else:
        err.write('%s already holds %s (sha256 %s); upload skipped\n'
                  % (destination, archive.filename, archive.sha256))


def _refuse_existing(vertex: jobs.VertexJobs, plan: JobPlan) -> None:
    existing = [job for job in vertex.list(limit=100, filter_expr=api.equals_filter(
        'display_name', plan.name, 'JOB')) if job.get('displayName') == plan.name]
    if existing:
        raise UserInputError('job %s already exists in %s (%s): AI Platform refused a second '
                             'job of one name, and describe/stream-logs/cancel need one; '
                             'pick another JOB' % (plan.name, plan.region, existing[0]['name']))


def _build_image(backend: Backend, credentials: Credentials, plan: JobPlan,
                 action: actions.Submit, storage_client: Any, built: _Built,
                 err: TextIO) -> None:
    """Reuses the image of the same sources, else stages the context and builds it."""
    assert built.context is not None and built.build_body is not None and plan.project_image
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
    _stage(storage_client, built.context, _context_uri(plan, built.context), err)
    builder.build(built.build_body, action.poll_interval, err)


def _create(vertex: jobs.VertexJobs, plan: JobPlan, body: Json) -> Json:
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


def _print_dry_run(built: _Built, action: actions.DryRun, out: TextIO, err: TextIO) -> None:
    """`json`: the staging plan (each archive, the image) and the exact request;
    `yaml`: the spec `gcloud ai ... create --config` takes (`vertex_spec`)."""
    plan = built.plan
    if action.format == 'yaml':
        _print_spec(built, out, err)
        return
    anonymous = api.anonymous_credentials()
    offline = jobs.VertexJobs(plan.located_project, plan.region, credentials=anonymous)
    printed: Json = {'staging': [staging.plan(archive, _staged_uri(plan, archive))
                                 for archive in built.archives]}
    if built.context and built.build_body:
        builder = build_lib.ImageBuilder(
            None, api.build('cloudbuild', 'v1', api.authorized_http(anonymous)),
            plan.project, plan.region, action.repository)
        printed['image'] = dict(
            staging.plan(built.context, _context_uri(plan, built.context)),
            files=len(built.context.files),
            action='reuse %s if Artifact Registry has it, else upload the build context and '
                   'build it with Cloud Build' % plan.project_image,
            build=api.request_json(builder.build_request(built.build_body)))
    printed['request'] = api.request_json(offline.create_request(plan.collection, built.body))
    out.write(json.dumps(printed, indent=2) + '\n')


def _print_spec(built: _Built, out: TextIO, err: TextIO) -> None:
    """The request as `gcloud ai ... create --config` takes it (`vertex_spec`); what
    it names that a dry run does not upload or build, and the command, on `err`."""
    plan = built.plan
    written = vertex_spec.spec(built.body, plan.collection, plan.project or '', plan.region)
    missing = [_staged_uri(plan, a) for a in built.archives] + (
        [plan.project_image] if built.context and plan.project_image else [])
    if missing:
        err.write('note: the spec names what a dry run does not upload or build: %s; a submit '
                  'stages and builds them (--rehearse stages the archives)\n'
                  % ', '.join(missing))
    err.write('note: the spec is the --config of: %s\n' % ' '.join(
        shlex.quote(word) for word in written.command))
    out.write(written.text)


# ------------------------------------------------------------------- cancel


def cancel(action: actions.Cancel, backend: Optional[Backend] = None,
           out: Optional[TextIO] = None, err: Optional[TextIO] = None,
           environ: Optional[location.Environ] = None) -> str:
    """`jobs cancel JOB`: the job found (by resource name, numeric id or name)
    and cancelled; returns its resource name.

    A dry run cancels nothing and prints the requests: a job named by its
    resource name needs no credentials; a name or an id is looked up with
    the credentials (a read), and without credentials, or when Vertex AI
    cannot be reached, the lookups and the cancel are printed with a
    placeholder, and one line says why.
    """
    backend = backend or Backend()
    out, err = out or sys.stdout, err or sys.stderr
    if not action.dry_run:
        vertex, _, name = backend_lib.connect(backend, action.job, action.project,
                                              action.region_flag, environ, err)
        assert name is not None
        vertex.cancel(name)
        return name
    job = action.job
    parsed = location.parse_name(job, location.TRAINING)
    credentials = adc_project = why = None
    if not parsed:
        try:
            credentials, adc_project = backend.credentials()
        except UserInputError:
            why = backend_lib.NO_CREDENTIALS
    project, region = location.resolve(job, location.TRAINING, action.project,
                                       action.region_flag, environ, err, adc_project)
    vertex = (jobs.VertexJobs(project, region, credentials=api.anonymous_credentials())
              if parsed or why else backend.vertex(project, region, credentials))
    name = job if parsed else None
    if name is None and why is None:
        try:
            name = vertex.resolve(job)
        except api.Unreachable as e:
            why = str(e)
    steps = []
    if name is None:
        err.write('note: not looked up (%s): the cancel names the job by a placeholder\n' % why)
        steps = [dict(step='find job %s' % job, **api.request_json(request))
                 for request in vertex.find_requests(job)]
        name = '%s/%s/%s' % (vertex.parent, jobs.COLLECTIONS[0],
                             job if job.isdigit() else 'JOB_ID_OF_%s' % job)
    steps.append(dict(step='cancel job %s%s' % (name, ' (or its hyperparameter tuning job, '
                                                      'whichever the lookup finds)'
                                                if why and job.isdigit() else ''),
                      **api.request_json(vertex.cancel_request(name))))
    out.write(json.dumps({'requests': steps}, indent=2) + '\n')
    return name
