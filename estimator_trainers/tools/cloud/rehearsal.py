"""`submit --rehearse`: the exact Vertex AI job, run on this machine first.

A rehearsal goes through everything a submission does (config parsing and
translation, the sdist, the request body, staging to the bucket) and then,
instead of `customJobs.create`, plays Vertex AI's part from that very body:

1. installs the package into a fresh virtualenv: the sdist staged in the
   bucket for a `pythonPackageSpec` job, as the executor image does; for the
   built image's `containerSpec` (`python -m MODULE`), an sdist of this
   checkout, as its Dockerfile does (the image is not built). The packages of the
   environment running the rehearsal stand for what the image has
   preinstalled (a `.pth` layer, so a warm install takes seconds); anything
   else resolves through pip as usual, with the repository's constraints and
   the shared pip cache. A module or data file missing from the sdist, or a
   dependency that does not resolve, fails here in one line;
2. imports each pool's `pythonModule` from that virtualenv and parses the
   pool's args with the trainer's own parser, so a bad trainer flag fails in
   one line before anything trains;
3. starts every pool's replicas (at most `--max-replicas` per pool) as local
   processes through the local cluster launcher, each with the environment
   Vertex AI gives it (`replicas`: `TF_CONFIG`, `CLUSTER_SPEC`, `AIP_*`, the
   same the start-up checks decided in); a tuning job runs one trial with
   mid-range parameter values and `CLOUD_ML_TRIAL_ID`, and must report its
   metric. A task that fails ends the rehearsal with its own one-line error
   (its error record, `errors.ERROR_RECORD_ENV`);
4. succeeds only when the chief finished and the job did its job, read from
   what it wrote, never from its log: a trainer of this project's run record
   (`run_record`: succeeded, its final step, its export), else a SavedModel
   written under the job's output directory; it ends with a summary.

The bucket is the real one; or, without credentials or with
`--local-storage`, local storage the pipeline starts (`local_storage`), into
which `--local-input` copies the job's inputs from this machine; or an
emulator `STORAGE_EMULATOR_HOST` names (TensorFlow's gs:// client then also
needs the proxy settings in docs/cloud.md). Machine types and accelerators
are not rehearsed.
"""
import argparse
import dataclasses
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, TextIO, Tuple
from typing import TypedDict, Union

from estimator_trainers import errors
from estimator_trainers import flags
from estimator_trainers import gcs
from estimator_trainers import google_api
from estimator_trainers import run_record
from estimator_trainers.cluster import CHIEF, START_ORDER
from estimator_trainers.errors import UserInputError
from estimator_trainers.tools import local_cluster as launcher_lib
from estimator_trainers.tools.cloud import gcs_paths
from estimator_trainers.tools.cloud import local_inputs
from estimator_trainers.tools.cloud import packages
from estimator_trainers.tools.cloud import replicas as replicas_lib
from estimator_trainers.tools.cloud import roles
from estimator_trainers.tools.cloud import staging
from estimator_trainers.tools.cloud.api import Json
from estimator_trainers.tools.cloud.roles import RoleName

DEFAULT_MAX_REPLICAS = 2
TRIAL_ID = '1'
EMULATOR_VAR = 'STORAGE_EMULATOR_HOST'
# What the rehearsing shell may have set that a Vertex AI task would not have.
_NOT_INHERITED = ('PYTHONPATH', 'PYTHONHOME', 'VIRTUAL_ENV', 'TF_CONFIG', 'CLUSTER_SPEC',
                  'AIP_MODEL_DIR', 'AIP_CHECKPOINT_DIR', 'AIP_TENSORBOARD_LOG_DIR',
                  'CLOUD_ML_TRIAL_ID', 'CLOUD_ML_HP_METRIC_FILE')
# Run by the fresh virtualenv's Python: imports the pool's module (a module
# left out of the package fails here) and parses its args with the trainer's
# parser (a bad flag fails here), found through the registry by module name.
# A refusal is written to the error record `errors.run_cli` keeps.
_PREFLIGHT = '''
import importlib, sys
from estimator_trainers import errors, registry
def check(argv):
    try:
        importlib.import_module(argv[0])
    except Exception as e:
        raise errors.Error('%s: %s' % (type(e).__name__, errors.first_line(e)))
    for trainer in registry.discover().values():
        if trainer.module == argv[0]:
            trainer.parse_args(argv[1:])
errors.run_cli(check, sys.argv[1:])
'''


def add_flags(parser: argparse.ArgumentParser) -> None:
    """The `submit` flags of the rehearsal."""
    parser.add_argument('--rehearse', action='store_true',
                        help='Stage the package, then run the job on this machine '
                             'instead of creating it: install the package from the '
                             'bucket into a fresh virtualenv and start every pool\'s '
                             'replicas with the environment Vertex AI gives them.')
    parser.add_argument('--local-storage', action='store_true',
                        help='With --rehearse: stage to and run against local storage '
                             '(fake-gcs-server) standing in for the job\'s buckets, even '
                             'with credentials; the default when there are none. The '
                             'job-dir is kept in ~/.cache/estimator-trainers/local-storage.')
    local_inputs.add_flag(parser)
    parser.add_argument('--max-replicas', type=flags.positive_int,
                        default=DEFAULT_MAX_REPLICAS,
                        help='With --rehearse: most replicas started per worker pool '
                             '(default: %d).' % DEFAULT_MAX_REPLICAS)


@dataclasses.dataclass(frozen=True)
class Replica:
    """One process of the rehearsed job.

    Attributes:
      pool: worker pool index (0 chief, 1 workers, 2 ps, 3 evaluators).
      role, index: its TF task type and index.
      module, args: what it runs (`python -m module args...`).
      env: the variables Vertex AI sets for it.
    """
    pool: int
    role: RoleName
    index: int
    module: str
    args: Tuple[str, ...]
    env: Dict[str, str]

    @property
    def label(self) -> str:
        return '%s-%d' % (self.role, self.index)


@dataclasses.dataclass(frozen=True)
class Plan:
    """The local version of a job body.

    Attributes:
      replicas: in `START_ORDER`.
      counts: per pool present, `(role, replicas run, replicaCount asked)`.
      base_dir: `baseOutputDirectory.outputUriPrefix`, with the trial for
        tuning (None: the job has none).
      package_uris: the staged packages every pool installs (empty for an image).
      trial: `(metric tag, [(parameter, value)])` for a tuning job, else None.
    """
    replicas: Tuple[Replica, ...]
    counts: Tuple[Tuple[RoleName, int, int], ...]
    base_dir: Optional[str]
    package_uris: Tuple[str, ...]
    trial: Optional['Trial'] = None


# A trial's value of one parameter (`mid_value`).
Value = Union[int, float, str]
# A tuning job's rehearsed trial: `(metric tag, [(parameter, value)])`.
Trial = Tuple[str, List[Tuple[str, Value]]]


class _Program(TypedDict):
    """What a pool runs (`_runs`)."""
    module: str
    args: Sequence[str]
    package_uris: Tuple[str, ...]


def mid_value(parameter: Json) -> Value:
    """A Vertex `ParameterSpec`'s middle value (geometric for log scales)."""
    scale = parameter.get('scaleType')
    for kind in ('doubleValueSpec', 'integerValueSpec'):
        if kind in parameter:
            low = float(parameter[kind]['minValue'])
            high = float(parameter[kind]['maxValue'])
            if scale == 'UNIT_LOG_SCALE' and low > 0:
                value = math.sqrt(low * high)
            elif scale == 'UNIT_REVERSE_LOG_SCALE' and high > low:
                value = high + low - math.sqrt(low * high)
            else:
                value = (low + high) / 2
            return int(round(value)) if kind == 'integerValueSpec' else float('%.6g' % value)
    values = (parameter.get('categoricalValueSpec') or parameter['discreteValueSpec'])['values']
    middle: Value = values[(len(values) - 1) // 2]
    return middle


def plan_job(body: Json, max_replicas: int, ports: Optional[Sequence[int]] = None) -> Plan:
    """Turns a CustomJob or HyperparameterTuningJob body into local replicas.

    Each replica gets the environment Vertex AI gives it (`replicas.vertex`),
    with loopback addresses.

    Args:
      body: the request body a submission sends.
      max_replicas: cap on each pool's replicaCount.
      ports: one free port per replica (default: picked now).

    Raises:
      UserInputError: a pool runs a container (only packages are rehearsed).
    """
    tuning = 'trialJobSpec' in body
    spec = body['trialJobSpec'] if tuning else body['jobSpec']
    pools: List[Tuple[roles.Role, _Program, int, int]] = []
    for number, pool in enumerate(spec['workerPoolSpecs']):
        if not pool:
            continue
        asked = int(pool.get('replicaCount', 1))
        pools.append((roles.by_pool(number), _runs(pool), asked, min(asked, max_replicas)))
    base = spec.get('baseOutputDirectory', {}).get('outputUriPrefix', '').rstrip('/') or None
    trial: Optional[Trial] = None
    if tuning:
        study = body['studySpec']
        trial = (study['metrics'][0]['metricId'],
                 [(p['parameterId'], mid_value(p)) for p in study['parameters']])
    counts: Dict[str, int] = {role.name: run for role, _, _, run in pools}
    ports = list(ports or launcher_lib.free_ports(sum(counts.values())))
    addresses: Dict[str, List[str]] = {}
    for role in roles.ROLES:
        count = counts.get(role.name, 0)
        addresses[role.name] = ['%s:%d' % (launcher_lib.LOOPBACK, p) for p in ports[:count]]
        ports = ports[count:]
    programs = {role.name: program for role, program, _, _ in pools}
    found: List[Replica] = []
    for replica in replicas_lib.vertex(counts, base, addresses,
                                       trial=TRIAL_ID if trial else None):
        program = programs[replica.role.name]
        args = list(program['args'])
        if trial:
            args += ['--%s=%s' % (name, value) for name, value in trial[1]]
        found.append(Replica(replica.role.pool, replica.role.name, replica.index,
                             program['module'], tuple(args), dict(replica.env)))
    found.sort(key=lambda r: (START_ORDER.index(r.role), r.index))
    return Plan(replicas=tuple(found),
                counts=tuple((role.name, run, asked) for role, _, asked, run in pools),
                base_dir='%s/%s' % (base, TRIAL_ID) if base and trial else base,
                package_uris=pools[0][1]['package_uris'], trial=trial)


def _runs(pool: Json) -> _Program:
    """`{module, args, package_uris}` of a pool: the staged packages' module, or
    the built image's `python -m MODULE` (no package_uris)."""
    if 'pythonPackageSpec' in pool:
        spec = pool['pythonPackageSpec']
        return {'module': spec['pythonModule'], 'args': spec.get('args', ()),
                'package_uris': tuple(spec['packageUris'])}
    command = pool['containerSpec'].get('command', ())
    if len(command) != 3 or command[:2] != ['python', '-m']:
        raise UserInputError('--rehearse runs `python -m MODULE` containers only (this '
                             'project\'s image); this pool runs %s'
                             % (' '.join(command) if command else
                                'the entrypoint of %s' % pool['containerSpec']['imageUri']))
    return {'module': command[2], 'args': pool['containerSpec'].get('args', ()),
            'package_uris': ()}


def rehearse(body: Json, storage_client: Any, *, max_replicas: int = DEFAULT_MAX_REPLICAS,
             out: Optional[TextIO] = None, err: Optional[TextIO] = None,
             work_dir: Optional[str] = None, environ: Optional[Mapping[str, str]] = None,
             build_dir: Optional[str] = None) -> int:
    """Runs the job `body` describes on this machine; returns the exit code.

    A package job installs the package staged at `pythonPackageSpec.packageUris`.
    A job on the image `--build-image` makes installs, as that image's
    Dockerfile does, an sdist of this checkout built in `build_dir` (the
    image itself is not built).

    Raises:
      UserInputError: the package does not install or cannot run a pool's
        module with its args (before anything trains).
    """
    started = time.monotonic()
    started_at = time.time()
    out = out or sys.stdout
    err = err or sys.stderr
    environ = dict(os.environ if environ is None else environ)
    plan = plan_job(body, max_replicas)
    work_dir = work_dir or tempfile.mkdtemp(prefix='rehearsal-')
    _notes(plan, body, max_replicas, environ, err)

    archives, source = _archives(plan, storage_client, work_dir, build_dir, err)
    python = packages.install(archives, os.path.join(work_dir, 'venv'), environ)
    task_env = _task_environment(environ, python)
    _preflight_pools(plan, python, task_env, work_dir)

    log_dir = os.path.join(work_dir, 'logs')
    os.makedirs(log_dir, exist_ok=True)
    # cloudml-hypertune writes where Vertex AI's agent reads; here, a file we check.
    metric_file = os.path.join(work_dir, 'hypertune', 'output.metrics') if plan.trial else None
    tasks = _tasks(plan, python, task_env, log_dir, metric_file)
    runner = launcher_lib.Launcher(None, tasks, stdout=out, stderr=err, cwd=work_dir)
    runner.say('rehearsing %s with %s installed from %s; logs in %s' % (
        ', '.join('%s x%d' % (role, run) for role, run, _ in plan.counts),
        ', '.join(os.path.basename(a) for a in archives), source, log_dir))
    code: int = runner.run()
    if code:
        return code
    try:
        lines = _outcome(plan, storage_client, metric_file, started_at,
                         elsewhere=(work_dir,))
    except _Failed as e:
        errors.report(e, err)
        failed: int = launcher_lib.EXIT_FAILED
        return failed
    lines += ['  logs: %s' % log_dir, '  wall time: %.0f s' % (time.monotonic() - started)]
    err.write('\n'.join(['rehearsal passed:'] + lines) + '\n')
    return 0


def _archives(plan: Plan, storage_client: Any, work_dir: str, build_dir: Optional[str],
              err: TextIO) -> Tuple[List[str], str]:
    """`(local archives, where they came from)`: the staged packages, downloaded,
    or an sdist of this checkout for a job on the image `--build-image` makes."""
    if plan.package_uris:
        return ([_download(storage_client, uri, work_dir) for uri in plan.package_uris],
                ', '.join(plan.package_uris))
    sdist_dir = os.path.join(build_dir or work_dir, 'rehearsal-sdist')
    os.makedirs(sdist_dir, exist_ok=True)
    archives = [staging.build_sdist(sdist_dir).path]
    err.write('note: the image is not built: its package is installed from an sdist '
              'of this checkout, as the Dockerfile installs it\n')
    return archives, 'this checkout'


def _preflight_pools(plan: Plan, python: str, task_env: Mapping[str, str], work_dir: str) -> None:
    """`preflight` once per distinct module and args, in pool order."""
    checked: set[Tuple[str, Tuple[str, ...]]] = set()
    for replica in sorted(plan.replicas, key=lambda r: (r.pool, r.index)):
        if (replica.module, replica.args) not in checked:
            preflight(python, replica, dict(task_env, **replica.env), work_dir)
            checked.add((replica.module, replica.args))


def _tasks(plan: Plan, python: str, task_env: Mapping[str, str], log_dir: str,
           metric_file: Optional[str]) -> List[Any]:
    """The launcher's `Task` of each replica: its module in the virtualenv, its
    environment, its log file (the chief also reports the trial's metric)."""
    tasks: List[Any] = []  # launcher.Task
    for replica in plan.replicas:
        env = dict(task_env, **replica.env)
        if metric_file and replica.role == CHIEF:
            env['CLOUD_ML_HP_METRIC_FILE'] = metric_file
        tasks.append(launcher_lib.Task(
            replica.role, replica.index, replica.env['TF_CONFIG'],
            os.path.join(log_dir, replica.label + '.log'),
            command=[python, '-m', replica.module, *replica.args], env=env))
    return tasks


class _Failed(errors.TaskFailure):
    """The tasks ended well but the job did not do its job."""


def _outcome(plan: Plan, storage_client: Any, metric_file: Optional[str], started_at: float,
             elsewhere: Sequence[str] = ()) -> List[str]:
    """Summary lines of a finished job; raises `_Failed` without an export or metric.

    A trainer of this project says what it did in its job-dir's run record
    (`run_record`: the final step, the export); for any other module, the
    export is a `saved_model.pb` written under the job's output directory
    during the rehearsal (none needed when the job has no output directory).
    One written under `elsewhere` instead (the tasks' working directory: a
    relative path the package hard-codes) is named: on Vertex AI it would stay
    on the replica's disk, gone with the job.
    """
    chief = next(r for r in plan.replicas if r.role == CHIEF)
    job_dir = _job_dir(chief)
    session = _last_session(job_dir, started_at) if job_dir else None
    if job_dir and session is not None:
        step = session.get('steps', {}).get('to')
        export = session.get('export_dir')
        if session.get('status') != run_record.SUCCEEDED or not export:
            raise _Failed('the chief finished but its run record at %s says %s%s'
                          % (run_record.path(job_dir), session.get('status'),
                             '' if export else ', with no export'))
    else:
        step = None
        exports = _new_saved_models(storage_client, plan.base_dir, started_at) \
            if plan.base_dir else []
        if plan.base_dir and not exports:
            strays = saved_models_written(elsewhere, started_at)
            if strays:
                raise _Failed(
                    'the chief finished but wrote its SavedModel to %s%s, outside the job\'s '
                    'output directory %s: on Vertex AI that is the replica\'s own disk, gone '
                    'when the job ends; save it under --job-dir (or $AIP_MODEL_DIR)'
                    % (os.path.dirname(strays[0]),
                       ' (and %d more)' % (len(strays) - 1) if len(strays) > 1 else '',
                       plan.base_dir))
            raise _Failed('the chief finished but no SavedModel export exists under %s'
                          % plan.base_dir)
        export = exports[-1].rsplit('/', 1)[0] if exports else None
    lines = ['  pools: ' + ', '.join(
                 '%s %d%s' % (role, run, ' of %d' % asked if asked != run else '')
                 for role, run, asked in plan.counts),
             '  final global step: %s' % (step if step is not None else
                                          'not recorded (not a trainer of this project)'),
             '  export: %s' % (export or 'not checked (the job has no --job-dir)')]
    if plan.trial:
        tag, values = plan.trial
        assert metric_file is not None, 'a trial reports to its metric file'
        reported = _reported_metric(metric_file, tag)
        if reported is None:
            raise _Failed('the trial reported no %r metric to the tuning service (%s)'
                          % (tag, metric_file))
        lines.append('  trial %s (%s): %s = %s reported' % (
            TRIAL_ID, ', '.join('--%s=%s' % v for v in values), tag, reported))
    return lines


def _job_dir(chief: Replica) -> Optional[str]:
    """The chief's job-dir: its last `--job-dir`, else Vertex AI's `AIP_MODEL_DIR`."""
    given = [arg.split('=', 1)[1] for arg in chief.args if arg.startswith('--job-dir=')]
    return given[-1] if given else chief.env.get('AIP_MODEL_DIR')


def _last_session(job_dir: str, started_at: float) -> Optional[Dict[str, Any]]:
    """The run record's session of this rehearsal, or None (no record: not a trainer
    of this project)."""
    try:
        sessions = run_record.read(job_dir)
    except ValueError as e:
        raise _Failed(str(e)) from None
    ours: List[Dict[str, Any]] = [s for s in sessions if (s.get('started_at_unix') or 0) >= started_at - 1]
    return ours[-1] if ours else None


def preflight(python: str, replica: Replica, env: Mapping[str, str], cwd: str) -> None:
    """Imports `replica.module` and parses its args in the installed package.

    Raises:
      UserInputError: the module is missing or broken, or the args are refused.
    """
    record = os.path.join(cwd, 'preflight-error-%d.json' % replica.pool)
    env = dict(env, **{errors.ERROR_RECORD_ENV: record})
    proc = subprocess.run([python, '-c', _PREFLIGHT, replica.module, *replica.args],
                          env=env, cwd=cwd, capture_output=True, text=True, check=False)
    if proc.returncode == 0:
        return
    error = errors.read_record(record)
    if isinstance(error, errors.FlagError):
        raise UserInputError('%s rejects the args of worker pool %d (%s): %s'
                             % (replica.module, replica.pool, replica.role, error.message),
                             flag=error.flag)
    if error is not None:
        reason = error.message
    else:  # the interpreter itself failed: its last words
        lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
        reason = lines[-1] if lines else 'exit code %d' % proc.returncode
    raise UserInputError('the staged package cannot run %s (worker pool %d, %s): %s'
                         % (replica.module, replica.pool, replica.role, reason))


def _notes(plan: Plan, body: Json, max_replicas: int, environ: Mapping[str, str],
           err: TextIO) -> None:
    spec = body.get('jobSpec') or body['trialJobSpec']
    machines = sorted({p['machineSpec']['machineType'] for p in spec['workerPoolSpecs'] if p})
    gpus = any(p.get('machineSpec', {}).get('acceleratorType')
               for p in spec['workerPoolSpecs'] if p)
    err.write('note: --rehearse ignores machine types%s (%s): every replica runs on this '
              'machine\'s CPUs\n' % (' and accelerators' if gpus else '', ', '.join(machines)))
    for role, run, asked in plan.counts:
        if run < asked:
            err.write('note: worker pool %d (%s) runs %d of its %d replicas (--max-replicas '
                      '%d)\n' % (roles.role(role).pool, role, run, asked, max_replicas))
    if spec.get('tensorboard') and plan.base_dir:
        err.write('note: Vertex AI TensorBoard %s would upload %s/logs ($AIP_TENSORBOARD_LOG_DIR) '
                  'while the job runs; the rehearsal writes it, uploads nothing\n'
                  % (spec['tensorboard'], plan.base_dir))
    if plan.trial:
        err.write('note: tuning job: rehearsing trial %s with mid-range values %s\n' % (
            TRIAL_ID, ' '.join('--%s=%s' % p for p in plan.trial[1])))
    paths = [plan.base_dir or ''] + [a.split('=', 1)[-1] for r in plan.replicas
                                     for a in r.args]
    warning = gcs.modular_filesystem_warning(paths, environ)
    if warning:
        err.write(warning + '\n')


def _task_environment(environ: Mapping[str, str], python: str) -> Dict[str, str]:
    """This environment as a Vertex AI task would see it, with the venv first on PATH."""
    env = {k: v for k, v in environ.items() if k not in _NOT_INHERITED}
    env['PATH'] = os.path.dirname(python) + os.pathsep + env.get('PATH', '')
    return env


def _download(storage_client: Any, uri: str, work_dir: str) -> str:
    bucket, name = gcs_paths.split(uri)
    path = os.path.join(work_dir, 'package', os.path.basename(name))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    blob = storage_client.bucket(bucket).blob(name)
    google_api.storage_call(
        lambda: blob.download_to_filename(path, timeout=google_api.TIMEOUT_SECS, retry=None),
        'downloading the staged package %s' % uri, storage_client.project,
        storage_client.api_endpoint)
    return path


def _new_saved_models(storage_client: Any, base_dir: str, since: float) -> List[str]:
    """`saved_model.pb` paths under `base_dir` written after `since` (epoch seconds)."""
    if not base_dir.startswith('gs://'):
        found: List[str] = []
        for directory, _, names in os.walk(base_dir):
            path = os.path.join(directory, 'saved_model.pb')
            if 'saved_model.pb' in names and os.path.getmtime(path) >= since:
                found.append(path)
        return sorted(found)
    bucket, prefix = gcs_paths.split(base_dir.rstrip('/') + '/')
    return sorted('gs://%s/%s' % (bucket, blob.name) for blob in
                  storage_client.list_blobs(bucket, prefix=prefix)
                  if blob.name.endswith('/saved_model.pb') and
                  blob.time_created and blob.time_created.timestamp() >= since - 1)


# Bounds on looking for a SavedModel written outside the job's output directory.
_STRAY_SEARCH_DEPTH = 6
_STRAY_SEARCH_ENTRIES = 50000
# What the rehearsal itself put in its working directory.
_REHEARSAL_DIRS = ('venv', 'package', 'logs', 'hypertune', 'rehearsal-sdist')


def saved_models_written(roots: Iterable[Optional[str]], since: float) -> List[str]:
    """Local `saved_model.pb` files under `roots` modified at or after `since`
    (epoch seconds), newest first; the rehearsal's own directories, hidden
    directories and anything past `_STRAY_SEARCH_DEPTH` levels or
    `_STRAY_SEARCH_ENTRIES` entries are not looked into."""
    found: List[str] = []
    seen = 0
    for root in dict.fromkeys(os.path.abspath(r) for r in roots if r):
        for directory, dirs, files in os.walk(root):
            depth = os.path.relpath(directory, root).count(os.sep)
            seen += len(dirs) + len(files)
            if seen > _STRAY_SEARCH_ENTRIES:
                return sorted(found, key=os.path.getmtime, reverse=True)
            dirs[:] = [] if depth >= _STRAY_SEARCH_DEPTH else [
                d for d in dirs if not d.startswith('.') and not (
                    directory == root and d in _REHEARSAL_DIRS)]
            path = os.path.join(directory, 'saved_model.pb')
            if 'saved_model.pb' in files and os.path.getmtime(path) >= since - 1:
                found.append(path)
    return sorted(found, key=os.path.getmtime, reverse=True)


def _reported_metric(path: str, tag: str) -> Optional[float]:
    """The last value reported for `tag` in a cloudml-hypertune metrics file, or None."""
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    reported = [json.loads(line).get(tag) for line in lines if line.strip()]
    values: List[float] = [v for v in reported if v is not None]
    return values[-1] if values else None
