"""Runs a sweep's points: commands, resuming, progress, stopping cleanly.

Each point trains its own job-dir (`<out>/runs/<point id>` locally, under a
gs:// directory for rehearse and vertex) in one or more sessions. Whether a
session is done is read from the job-dir's run record (`run_record`): a
succeeded session that reached the session's step target. A rerun of the
sweep skips what is done and reruns the rest with the same command, which
resumes an interrupted point from its checkpoints.

Local points run one at a time (`python -m <module>`, or the local cluster
launcher for a `cluster` shape), each in its own process group with its
output in `<out>/logs/<point id>.log`. Rehearse points run one at a time
through the cloud CLI (`submit --rehearse`). Vertex points are submitted
through the cloud CLI (`submit --stream-logs`), at most `max_parallel` at
once, and followed until they end; the CLI writes each job's name to the file
the runner names in `job_record.JOB_RECORD_ENV` once the job exists, and a
rerun follows the jobs submitted before (`<out>/vertex-jobs.json`) instead of
submitting them again. The cloud
CLI is always driven as a command, so this module never depends on its
internals. SIGINT or SIGTERM stops the running points (SIGTERM to each: a
trainer saves a checkpoint first, the launcher stops its tasks; Vertex jobs
keep running and the next invocation follows them).
"""
import dataclasses
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import types
from typing import IO, Any, List, Mapping, Optional, Sequence

from estimator_trainers import errors
from estimator_trainers import flags
from estimator_trainers import job_record
from estimator_trainers import run_record
from estimator_trainers import safe_io
from estimator_trainers import user_files
from estimator_trainers.errors import UserInputError
from estimator_trainers.tools import local
from estimator_trainers.tools.cloud import estimate
from estimator_trainers.tools.experiment import sweep as sweep_lib

CLOUD_CLI = (sys.executable, '-m', 'estimator_trainers.tools.cloud')
LAUNCHER = (sys.executable, '-m', 'estimator_trainers.tools.launcher')
RUNS_DIR = 'runs'
LOGS_DIR = 'logs'
VERTEX_STATE = 'vertex-jobs.json'
STATE_LIMITS = user_files.Limits(bytes=16 << 20, depth=2, values=200000,
                                 expected='it holds a job name per point')
STOP_GRACE_SECS = 60
# A session of a job-dir's run record (`run_record.read`), and {point id: its sessions}.
Session = dict[str, Any]
Records = dict[str, list[Session]]
# {"POINT#SESSION": Vertex AI job name} of the jobs a sweep submitted (`VERTEX_STATE`).
JobState = dict[str, str]
# A Vertex point being followed: (point, session, process, start time, job record path).
Running = tuple[sweep_lib.Point, int, 'subprocess.Popen[bytes]', float, str]
_POLL_SECS = 0.2


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where a sweep's files go: job-dirs, logs and results."""
    out: str
    job_base: str

    @classmethod
    def of(cls, sweep: sweep_lib.Sweep, out: str,
           environ: Optional[Mapping[str, str]] = None) -> 'Layout':
        """The layout of `sweep` run into `out` (a cloud sweep's job-dirs under gs://)."""
        environ = os.environ if environ is None else environ
        if sweep.target == 'local':
            return cls(out=out, job_base=os.path.join(out, RUNS_DIR))
        base = sweep.cloud.get('job_dir')
        if not base:
            bucket = sweep.cloud.get('bucket') or environ.get('BUCKET_NAME')
            if not bucket:
                raise UserInputError('%s: %s.job_dir or %s.bucket (or BUCKET_NAME) is '
                                     'needed: the job-dirs are gs:// directories'
                                     % (sweep.path, sweep.target, sweep.target),
                                     path=sweep.path)
            base = '%s/experiments/%s' % (bucket.rstrip('/'), sweep.name)
        return cls(out=out, job_base=base.rstrip('/'))

    def job_dir(self, point: sweep_lib.Point) -> str:
        """The point's job-dir."""
        return '%s/%s' % (self.job_base, point.id) if '://' in self.job_base else \
            os.path.join(self.job_base, point.id)

    def log_path(self, point: sweep_lib.Point) -> str:
        """The log of the point's command."""
        return os.path.join(self.out, LOGS_DIR, point.id + '.log')

    def task_log_dir(self, point: sweep_lib.Point) -> str:
        """The task logs of the point's local cluster."""
        return os.path.join(self.out, LOGS_DIR, point.id)


def job_name(sweep: sweep_lib.Sweep, point: sweep_lib.Point, session: int) -> str:
    """A Vertex AI display name: letters, digits and underscores, at most 128."""
    name = re.sub(r'[^A-Za-z0-9_]+', '_', '%s_%s' % (sweep.name, point.id))
    if len(point.sessions) > 1:
        name += '_s%d' % (session + 1)
    if not name[0].isalpha():
        name = 'x' + name
    return name[:128]


def environment(sweep: sweep_lib.Sweep,
                environ: Optional[Mapping[str, str]] = None) -> dict[str, str]:
    """The environment of every command: this repository (and the sweep's package) importable."""
    env = dict(os.environ if environ is None else environ)
    paths = [sweep_lib.REPO_ROOT] + ([sweep.package_dir] if sweep.package_dir else [])
    if env.get('PYTHONPATH'):
        paths.append(env['PYTHONPATH'])
    env['PYTHONPATH'] = os.pathsep.join(paths)
    env.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
    return env


def trainer_argv(sweep: sweep_lib.Sweep, point: sweep_lib.Point, session: int,
                 job_dir: str) -> List[str]:
    """`python -m MODULE ...` of one session of a local point: the data flags, the
    job-dir, the trainer's local defaults, the point's flags and its seed, each
    flag once (`flags.last_wins`: the point's own value over a local default)."""
    data: list[str] = (sweep.trainer.data_args(sweep.data_dir)
                       if sweep.uses_data_args and sweep.data_dir is not None else [])
    return [sys.executable, '-m', sweep.module] + flags.last_wins(
        data + ['--job-dir', job_dir] + list(sweep.trainer.local_args)
        + list(point.sessions[session]) + ['--random-seed=%d' % point.seed],
        sweep.trainer.make_parser())


def command(sweep: sweep_lib.Sweep, layout: Layout, point: sweep_lib.Point, session: int,
            dry_run: bool = False) -> list[str]:
    """argv of one session of `point` on the sweep's target."""
    job_dir = layout.job_dir(point)
    if sweep.target == 'local':
        argv = trainer_argv(sweep, point, session, job_dir)
        if point.cluster is None:
            return argv
        counts: list[str] = []
        for key in sweep_lib.CLUSTER_KEYS:
            counts += ['--' + key, str(point.cluster[key])]
        return (list(LAUNCHER) + ['--job-dir', job_dir, '--log-dir',
                                  layout.task_log_dir(point)] + counts + ['--'] + argv)
    cloud = sweep.cloud
    assert point.config is not None  # `sweep_lib.parse` gives every cloud point one
    argv = list(CLOUD_CLI) + ['submit', str(sweep.trainer.name), '--config', point.config,
                              '--job-dir', job_dir,
                              '--job-name', job_name(sweep, point, session)]
    for key, value in (('project', cloud.get('project')), ('region', cloud.get('region')),
                       ('bucket', cloud.get('bucket'))):
        if value:
            argv += ['--' + key, value]
    if dry_run:
        argv.append('--dry-run')
    elif sweep.target == 'rehearse':
        argv += ['--rehearse', '--max-replicas', str(cloud.get('max_replicas', 1))]
    else:
        argv.append('--stream-logs')
        if cloud.get('poll_interval') is not None:
            argv += ['--poll-interval', str(cloud['poll_interval'])]
    return argv + list(cloud['options']) + ['--'] + list(point.sessions[session]) + [
        '--random-seed=%d' % point.seed]


# --- what is done -------------------------------------------------------------------

def session_done(sessions: Sequence[Session], target: Optional[int]) -> bool:
    """Whether a succeeded session in `sessions` reached `target` (None: any step target)."""
    for session in sessions:
        steps = session.get('steps') or {}
        if session.get('status') != run_record.SUCCEEDED or steps.get('to') is None:
            continue
        if target is not None and steps.get('target') != target:
            continue
        if steps.get('target') is None or steps['to'] >= steps['target']:
            return True
    return False


def done_sessions(point: sweep_lib.Point, sessions: Sequence[Session]) -> int:
    """The leading sessions of `point` its record shows done."""
    count = 0
    for target in point.targets:
        if not session_done(sessions, target):
            break
        count += 1
    return count


def read_records(sweep: sweep_lib.Sweep, layout: Layout) -> Records:
    """{point id: the sessions of its run record} of every point with one."""
    records: Records = {}
    for point in sweep.points:
        sessions = run_record.read(layout.job_dir(point))
        if sessions:
            records[point.id] = sessions
    return records


def check_flags(sweep: sweep_lib.Sweep, point: sweep_lib.Point,
                sessions: Sequence[Session]) -> None:
    """Refuses a job-dir trained with other flags than the sweep now gives its point.

    Raises:
      UserInputError: naming the point, the flag and both values.
    """
    parser = sweep_lib._flag_parser(sweep.trainer)  # pylint: disable=protected-access
    defaults = vars(parser.parse_args([]))
    given = vars(parser.parse_args(list(point.sessions[0])))
    recorded = sessions[0].get('flags', {})
    for name, value in sorted(given.items()):
        if name == 'train_steps' or value == defaults.get(name) or name not in recorded:
            continue
        value = run_record.json_value(value)
        if recorded[name] != value:
            raise UserInputError(
                '%s: point %s: its job-dir was trained with --%s=%s, the sweep now says '
                '%s; use another --out, or remove that job-dir to retrain it'
                % (sweep.path, point.label, name.replace('_', '-'), recorded[name], value),
                path=sweep.path)


# --- running ------------------------------------------------------------------------

class Stop(Exception):
    """SIGINT or SIGTERM arrived: the sweep stops after the running points."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class Signals:
    """SIGINT/SIGTERM noted for the polling loops (installed from the main thread)."""

    def __init__(self) -> None:
        self.received: Optional[int] = None

    def install(self) -> 'Signals':
        """Installs the handlers; returns itself."""
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, self._on_signal)
        return self

    def _on_signal(self, signum: int, frame: Optional[types.FrameType]) -> None:
        del frame
        self.received = self.received or signum


def error_record_path(log_path: str) -> str:
    """Where a command started with `start` records the error it ends with."""
    return log_path[:-len('.log')] + '.error.json'


def start(argv: Sequence[str], env: Mapping[str, str], log_path: str,
          stdout_path: Optional[str] = None) -> 'subprocess.Popen[bytes]':
    """Starts `argv` in its own process group, its output appended to `log_path`.

    The command records the error it ends with (`errors.ERROR_RECORD_ENV`) for
    `failure`.
    """
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    record = error_record_path(log_path)
    _remove(record)
    env = dict(env, **{errors.ERROR_RECORD_ENV: record})
    with open(log_path, 'ab') as log:
        log.write(('$ %s\n' % shlex.join(argv)).encode())
        log.flush()
        stdout = open(stdout_path, 'wb') if stdout_path else log  # pylint: disable=consider-using-with
        try:
            return subprocess.Popen(argv, stdout=stdout, stderr=log, env=env,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        finally:
            if stdout_path:
                stdout.close()


def _remove(path: str) -> None:
    """Removes `path` if it exists."""
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


def stop(process: 'subprocess.Popen[bytes]', grace_secs: float = STOP_GRACE_SECS
         ) -> Optional[int]:
    """SIGTERM to the process group (the trainer saves, the launcher stops its
    tasks), SIGKILL after `grace_secs`; returns its exit code."""
    for signum, wait in ((signal.SIGTERM, grace_secs), (signal.SIGKILL, 10)):
        try:
            os.killpg(process.pid, signum)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            return process.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
    return process.poll()


def wait(process: 'subprocess.Popen[bytes]', signals: Signals) -> int:
    """Waits for `process`; on a signal stops it and raises `Stop`."""
    while process.poll() is None:
        if signals.received:
            stop(process)
            raise Stop(signals.received)
        time.sleep(_POLL_SECS)
    return process.returncode


def failure(log_path: str) -> str:
    """Why a command `start` ran failed: its error record, else its log's last line."""
    error = errors.read_record(error_record_path(log_path))
    if error is not None:
        line: str = errors.line(error)
        return line
    try:
        with open(log_path, encoding='utf-8', errors='replace') as f:
            lines = [line.rstrip() for line in f if line.strip()]
    except OSError:
        return ''
    return (lines or [''])[-1][:300]


@dataclasses.dataclass
class Progress:
    """Progress lines with an ETA for the whole sweep, on `stream`."""
    total: int
    stream: IO[str]
    parallel: int = 1
    durations: list[float] = dataclasses.field(default_factory=list)
    remaining: int = 0

    def say(self, point: sweep_lib.Point, text: str) -> None:
        """`[3/8] num-layers=8 seed=1: TEXT`."""
        self.stream.write('[%d/%d] %s: %s\n' % (point.index + 1, self.total, point.label, text))
        self.stream.flush()

    def finished(self, point: sweep_lib.Point, secs: float, text: str) -> None:
        """A point ended after `secs`: says so with the sweep's ETA."""
        self.durations.append(secs)
        self.remaining -= 1
        self.say(point, '%s in %s; %s' % (text, _duration(secs), self.eta()))

    def eta(self) -> str:
        """`sweep ETA 3m05s (2 points to go)` from the mean time of the finished points."""
        if not self.remaining:
            return 'sweep done'
        mean = sum(self.durations) / len(self.durations)
        left = mean * self.remaining / self.parallel
        return 'sweep ETA %s (%d point%s to go)' % (
            _duration(left), self.remaining, '' if self.remaining == 1 else 's')


def _duration(secs: float) -> str:
    """`42.1s`, `3m05s` or `1h02m`, as the trainers' progress lines show times."""
    if secs < 60:
        return '%.1fs' % secs
    minutes, seconds = divmod(int(round(secs)), 60)
    hours, minutes = divmod(minutes, 60)
    return '%dh%02dm' % (hours, minutes) if hours else '%dm%02ds' % (minutes, seconds)


def describe(sessions: Sequence[Session], metric: str) -> str:
    """`accuracy 0.8125, 1234.5 examples/sec` of a point's last succeeded session."""
    done = [s for s in sessions if s.get('status') == run_record.SUCCEEDED]
    if not done:
        return 'no run record'
    last = done[-1]
    parts: list[str] = []
    value = (last.get('final_metrics') or {}).get(metric)
    if value is not None:
        parts.append('%s %.4g' % (metric, value))
    if last.get('examples_per_sec'):
        parts.append('%.1f examples/sec' % last['examples_per_sec'])
    return ', '.join(parts) or 'recorded'


class Runner:
    """Runs the points of `sweep` that are not done, with progress on `stream`."""

    def __init__(self, sweep: sweep_lib.Sweep, layout: Layout, stream: IO[str],
                 signals: Signals, environ: Optional[Mapping[str, str]] = None,
                 cloud_cli: Sequence[str] = CLOUD_CLI) -> None:
        self.sweep = sweep
        self.layout = layout
        self.stream = stream
        self.signals = signals
        self.env = environment(sweep, environ)
        self.cloud_cli = tuple(cloud_cli)
        self.failed: list[sweep_lib.Point] = []

    def _argv(self, point: sweep_lib.Point, session: int) -> list[str]:
        """`command`, with this runner's cloud CLI."""
        argv = command(self.sweep, self.layout, point, session)
        if argv[:len(CLOUD_CLI)] == list(CLOUD_CLI):
            argv = list(self.cloud_cli) + argv[len(CLOUD_CLI):]
        return argv

    def run(self, records: Records) -> None:
        """Runs every point whose sessions `records` do not show done.

        Raises:
          Stop: a signal arrived (the running points were stopped first).
        """
        todo: list[tuple[sweep_lib.Point, int]] = []
        progress = Progress(total=len(self.sweep.points), stream=self.stream,
                            parallel=(self.sweep.cloud.get('max_parallel',
                                                            sweep_lib.DEFAULT_MAX_PARALLEL)
                                      if self.sweep.target == 'vertex' else 1))
        for point in self.sweep.points:
            sessions = records.get(point.id, [])
            done = done_sessions(point, sessions)
            if done == len(point.sessions):
                progress.say(point, 'done earlier (%s), skipped'
                             % describe(sessions, self.sweep.metric))
            else:
                todo.append((point, done))
        progress.remaining = len(todo)
        if not todo:
            return
        if self.sweep.target == 'local':
            self._prepare_data()
        if self.sweep.target == 'vertex':
            for line in self.sweep_estimate(todo):
                self.stream.write(line + '\n')
            self._run_vertex(todo, progress)
        else:
            for point, done in todo:
                self._run_point(point, done, progress)

    def sweep_estimate(self, todo: Sequence[tuple[sweep_lib.Point, int]]) -> list[str]:
        """What the sweep's remaining Vertex AI jobs will cost, summed before any starts
        (each point's `--estimate-only`, `tools/cloud/estimate.py`); a point the cloud
        CLI cannot estimate is said and left out of the sum."""
        figures: list[dict[str, Any]] = []
        lines: list[str] = []
        for point, session in todo:
            argv = self._argv(point, session)
            split = argv.index('--') if '--' in argv else len(argv)
            proc = subprocess.run(argv[:split] + ['--estimate-only'] + argv[split:],
                                  env=self.env, capture_output=True, text=True,
                                  stdin=subprocess.DEVNULL, check=False)
            try:
                figures.append(user_files.loads(proc.stdout.strip().splitlines()[-1]))
            except (IndexError, ValueError):
                lines.append('note: point %s: no estimate (%s)' % (point.label, (
                    proc.stderr.strip().splitlines() or ['exit %d' % proc.returncode])[-1]))
        return lines + (estimate.sweep_lines(figures) if figures else [])

    def _prepare_data(self) -> None:
        """Runs the trainer's data step when the sweep's data directory lacks the data."""
        if not self.sweep.uses_data_args:
            return
        assert self.sweep.data_dir is not None  # `uses_data_args`
        code = local.prepare_data(self.sweep.trainer, self.sweep.data_dir, self.env)
        if code:
            raise UserInputError('the data step of %s for %s failed (exit %d)'
                                 % (self.sweep.trainer.name, self.sweep.data_dir, code),
                                 path=self.sweep.data_dir)

    def _run_point(self, point: sweep_lib.Point, done: int, progress: Progress) -> None:
        """Runs the sessions of a local or rehearse point from session `done` on."""
        started = time.time()
        log = self.layout.log_path(point)
        for session in range(done, len(point.sessions)):
            what = 'training' if len(point.sessions) == 1 else 'session %d of %d' % (
                session + 1, len(point.sessions))
            if session == done and self._has_checkpoints(point):
                what = 'resuming from its checkpoints (%s)' % what
            progress.say(point, '%s (log %s)' % (what, log))
            process = start(self._argv(point, session), self.env, log)
            code = wait(process, self.signals)
            if code:
                self.failed.append(point)
                progress.finished(point, time.time() - started, 'FAILED (exit %d: %s)'
                                  % (code, failure(log)))
                return
            # A cluster's tasks inherit the path: a parameter server stopped at
            # the end records its SIGTERM there. Only a failure's record is kept.
            _remove(error_record_path(log))
        sessions = run_record.read(self.layout.job_dir(point))
        progress.finished(point, time.time() - started,
                          'done (%s)' % describe(sessions, self.sweep.metric))

    def _has_checkpoints(self, point: sweep_lib.Point) -> bool:
        """Whether the point's local job-dir holds checkpoints (a run resumes)."""
        job_dir = self.layout.job_dir(point)
        return '://' not in job_dir and os.path.isfile(os.path.join(job_dir, 'checkpoint'))

    # Vertex AI: bounded parallel submission, following, resuming the following.

    def _run_vertex(self, todo: Sequence[tuple[sweep_lib.Point, int]],
                    progress: Progress) -> None:
        """Submits (or follows) the Vertex AI points, at most `progress.parallel` at once."""
        state_path = os.path.join(self.layout.out, VERTEX_STATE)
        state = _read_state(state_path)
        limit = progress.parallel
        queue = list(todo)
        running: dict[str, Running] = {}  # by point id
        try:
            while queue or running:
                while queue and len(running) < limit:
                    point, session = queue.pop(0)
                    running[point.id] = self._launch(point, session, state, progress)
                for point_id, (point, session, process, started, record) in list(
                        running.items()):
                    self._note_job(point, session, record, state, state_path)
                    if process.poll() is None:
                        continue
                    del running[point_id]
                    self._note_job(point, session, record, state, state_path)
                    log = self.layout.log_path(point)
                    if process.returncode:
                        state.pop(_state_key(point, session), None)
                        _write_state(state_path, state)
                        self.failed.append(point)
                        progress.finished(point, time.time() - started, 'FAILED (exit %d: %s)'
                                          % (process.returncode, failure(log)))
                    elif session + 1 < len(point.sessions):
                        queue.insert(0, (point, session + 1))
                        progress.remaining += 1
                        progress.finished(point, time.time() - started,
                                          'session %d done' % (session + 1))
                    else:
                        sessions = run_record.read(self.layout.job_dir(point))
                        progress.finished(point, time.time() - started, 'done (%s)'
                                          % describe(sessions, self.sweep.metric))
                if self.signals.received:
                    raise Stop(self.signals.received)
                time.sleep(_POLL_SECS)
        except Stop:
            for point, session, process, _, record in running.values():
                stop(process, grace_secs=10)
                self._note_job(point, session, record, state, state_path)
            if running:
                self.stream.write(
                    'stopped following %d Vertex AI job(s), which keep running: rerun the '
                    'same command to follow them, or cancel them with %s cancel JOB\n'
                    % (len(running), shlex.join(CLOUD_CLI[1:])))
            raise

    def _launch(self, point: sweep_lib.Point, session: int, state: JobState,
                progress: Progress) -> Running:
        """Starts submitting a session, or following the job submitted for it before."""
        key = _state_key(point, session)
        log = self.layout.log_path(point)
        out = log[:-len('.log')] + '.out'
        record = log[:-len('.log')] + '.job.json'
        _remove(record)
        if state.get(key):
            argv = list(self.cloud_cli) + ['logs', state[key]]
            if self.sweep.cloud.get('poll_interval') is not None:
                argv += ['--poll-interval', str(self.sweep.cloud['poll_interval'])]
            progress.say(point, 'following %s (log %s)' % (state[key], log))
        else:
            argv = self._argv(point, session)
            progress.say(point, 'submitting%s (log %s)' % (
                '' if len(point.sessions) == 1 else ' session %d of %d' % (
                    session + 1, len(point.sessions)), log))
        env = dict(self.env, **{job_record.JOB_RECORD_ENV: record})
        return point, session, start(argv, env, log, stdout_path=out), time.time(), record

    def _note_job(self, point: sweep_lib.Point, session: int, record_path: str,
                  state: JobState, state_path: str) -> None:
        """Keeps the name of the job `submit` recorded creating, so a rerun follows it."""
        key = _state_key(point, session)
        if state.get(key):
            return
        record = job_record.read(record_path)
        if record is not None:
            state[key] = record.name
            _write_state(state_path, state)


def _state_key(point: sweep_lib.Point, session: int) -> str:
    """`POINT#SESSION`, a key of `VERTEX_STATE`."""
    return '%s#%d' % (point.id, session)


def _read_state(path: str) -> JobState:
    """{point#session: Vertex AI job name} of the jobs an earlier invocation submitted.

    Raises:
      UserInputError: the file is not such a mapping (a rerun would submit
        those jobs again): naming it.
    """
    state = user_files.read_json(path, limits=STATE_LIMITS, optional=True)
    if state is None:
        return {}
    if not isinstance(state, dict) or not all(isinstance(v, str) for v in state.values()):
        raise UserInputError('%s is not the Vertex AI jobs this sweep submitted (expected '
                             '{"POINT#SESSION": "projects/.../customJobs/ID"}); restore it, or '
                             'remove it to submit those points again' % path, path=path)
    return state


def _write_state(path: str, state: JobState) -> None:
    """Writes `VERTEX_STATE` whole."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    safe_io.write_atomic(path, json.dumps(state, indent=1, sort_keys=True) + '\n')


# --- dry runs -----------------------------------------------------------------------

def dry_run(sweep: sweep_lib.Sweep, layout: Layout, stream: IO[str],
            environ: Optional[Mapping[str, str]] = None,
            cloud_cli: Sequence[str] = CLOUD_CLI) -> None:
    """Prints every point's command (local) or request (rehearse, vertex); runs nothing
    that trains. A cloud point's request comes from the cloud CLI's own `--dry-run`.

    Raises:
      UserInputError: the cloud CLI refused a point (its error line).
    """
    env = environment(sweep, environ)
    for point in sweep.points:
        for session in range(len(point.sessions)):
            header = '== [%d/%d] %s%s: %s' % (
                point.index + 1, len(sweep.points), point.label,
                '' if len(point.sessions) == 1 else ' (session %d of %d)' % (
                    session + 1, len(point.sessions)), layout.job_dir(point))
            stream.write(header + '\n')
            argv = command(sweep, layout, point, session, dry_run=True)
            if sweep.target == 'local':
                stream.write(shlex.join(argv) + '\n')
                continue
            argv = list(cloud_cli) + argv[len(CLOUD_CLI):]
            with tempfile.TemporaryDirectory(prefix='sweep-dry-run-') as tmp:
                record = os.path.join(tmp, 'error.json')
                proc = subprocess.run(argv, env=dict(env, **{errors.ERROR_RECORD_ENV: record}),
                                      capture_output=True, text=True,
                                      stdin=subprocess.DEVNULL, check=False)
                error = errors.read_record(record)
            if proc.returncode:
                why = error.message if error else (proc.stderr.strip().splitlines()
                                                   or ['exit %d' % proc.returncode])[-1]
                raise UserInputError('%s: point %s: the cloud CLI refused it: %s' % (
                    sweep.path, point.label, why), path=sweep.path)
            request = user_files.loads(proc.stdout)['request']
            stream.write(json.dumps(request, indent=1, sort_keys=True) + '\n')
    stream.write('(PYTHONPATH=%s)\n' % env['PYTHONPATH'])

