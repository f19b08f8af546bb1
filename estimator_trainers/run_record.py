"""The run record: what every training session of a job-dir measured, as JSON.

`<job-dir>/run_record.json` (`job_dir.RUN_RECORD_FILE`) is written by the chief at
the end of each session (a run of the trainer on the job-dir: the first, and
every resumption), atomically, local or `gs://` (`safe_io.write_atomic`), and
after each checkpoint it saves while training as a `running` session that the
next write replaces (a process killed outright leaves that one):

    {"format": 1, "sessions": [SESSION, ...]}      # oldest first; a resumed job appends

A SESSION (all times in seconds, rates in examples/sec):

- `status`: `succeeded`, `failed` (with `error`, the one line the task
  ended with), `terminated` (a stop signal: SIGTERM, SIGINT, SIGHUP, e.g. a
  preemption or a sweep's Ctrl-C), `aborted` (the process was ended from another thread: a lost
  peer or lease) or `running` (as of its latest checkpoint: still running,
  or killed outright, e.g. SIGKILL or a lost machine); `exit_code`;
  `session_id`, unique per session. A run refused for its input before its first
  step (a bad flag, another job's lease, another model's checkpoints) writes
  nothing: it was not a session of this job-dir.
- `started_at`, `ended_at` (ISO 8601, UTC), `started_at_unix`, `wall_secs`;
  `cpu_secs`, the CPU time the process used (all its threads): on a shared
  machine it varies much less than the wall time.
- `phases`: `startup_secs` (process start to the end of the first training
  step: imports, input checks, graph, session, restore), `training_secs`
  (first to last step, without evaluating and checkpointing), `evaluating_secs`
  (the final evaluation included), `checkpointing_secs`, `export_secs`, and
  what the end of a session spends besides (`recorder.ENDING_PHASES`):
  `closing_hooks_secs` (the training hooks' ends: writers flushed),
  `closing_session_secs` (the training session's close: its threads joined;
  tf.data's autotuning thread ends its sleep first, which can take up to a
  minute after a long run), `waiting_for_evaluation_thread_secs`,
  `writing_summaries_secs` (the HParams session's end),
  `waiting_for_workers_secs` (a cluster's chief waiting for the other tasks'
  records); `other_secs` is the rest. They add up to `wall_secs`.
- `steps`: `from` (the global step it started at), `to` (the global step
  of the final evaluation), `target` (`--train-steps`).
- `examples_per_sec`: the whole job's average while training, as the
  progress hook accounts it (`TrainingProgressHook.average_examples_per_sec`);
  `examples_per_global_step`.
- `workers`: `{task: {"examples_per_sec": ..., "steps": ...}}`, each training
  task's own average (`chief`, `worker-0`, ...); every other task of a
  cluster writes its entry into `<job-dir>/workers/<task>/run_record.json`
  when it stops training, and `read` merges those into the chief's sessions.
- `checkpoints`: `count` saved (a new job-dir's save at step 0 and the
  one at the session's end included), `secs` spent saving (saving alone:
  evaluations need no checkpoint), `mean_secs`, `every_steps`.
- `evaluations`: `count`, `secs` (the in-memory snapshots they evaluate
  included), `final_secs` (the final evaluation's), `every_steps` (the in-training interval; None where evaluator
  tasks or the end alone evaluate), `precise_batch_norm_secs` (of `secs`,
  re-estimating batch norm's statistics); `final_metrics` (with
  `global_step`); `export_dir`.
- `flags` (every flag value), `cluster` (tasks per role, this task, the
  resolved strategy and whether it is synchronous), `precision` (the
  `--mixed-precision` setting and the compute and variable types it
  resolved to), `determinism` (`random_seed`, `op_determinism`),
  `hardware` (CPU model, cores, memory, GPUs, host, load average at the
  start and the end), `software` (TensorFlow and Python versions),
  `job_id` (the cluster's id, shared by its tasks).

`recorder.Recorder` measures and writes the sessions; this module is the
format and reading it (the machine's facts come from `host`), without TensorFlow at
import (the experiment tools read records). A record is read like every file
a user could have put there (`user_files`): bounded, regular, UTF-8; a gs://
record through `tf.io.gfile`, loaded then by `logs.import_tensorflow`.
"""
from __future__ import annotations

import datetime
import json
import os
from typing import (TYPE_CHECKING, Any, Dict, Final, List, Literal, Mapping, Optional,
                    Tuple, TypedDict, Union)

from estimator_trainers import cluster as cluster_lib
from estimator_trainers import job_dir as job_dir_lib
from estimator_trainers import logs
from estimator_trainers import safe_io
from estimator_trainers import user_files
from estimator_trainers.errors import UserInputError

if TYPE_CHECKING:  # typing.Required is Python 3.11's; Vertex AI's images run 3.10
    from typing import Required
    from estimator_trainers import declaration

FORMAT = 1
# The fields of a session that hold mappings (readers look into them).
_MAPPINGS = ('steps', 'phases', 'checkpoints', 'evaluations', 'final_metrics', 'workers',
             'flags', 'cluster', 'precision', 'determinism', 'hardware', 'software')
# A session is a few KiB: thousands of sessions fit.
LIMITS = user_files.Limits(bytes=16 << 20, depth=32, values=2000000,
                           expected='a run record holds a few KiB per session')
Status = Literal['succeeded', 'running', 'failed', 'terminated', 'aborted']
SUCCEEDED: Final = 'succeeded'
RUNNING: Final = 'running'
FAILED: Final = 'failed'
TERMINATED: Final = 'terminated'
ABORTED: Final = 'aborted'

# A flag's value as the record holds it (`json_value`).
JsonValue = Union[None, bool, int, float, str, List['JsonValue']]


class Throughput(TypedDict, total=False):
    """A training task's own figures (`recorder.Recorder`); `job_throughput`
    turns `examples_per_sec` into its share of the job's and keeps its own rate
    as `own_examples_per_sec`. Records written before the interval figures
    lack `trained_from_unix` and `trained_to_unix`."""
    examples_per_sec: Required[Optional[float]]
    steps: Required[int]
    examples: Required[int]
    trained_from_unix: float
    trained_to_unix: float
    own_examples_per_sec: Optional[float]


# The session's `steps` (`from` is a keyword: the functional form).
Steps = TypedDict('Steps', {'from': Optional[int], 'to': Optional[int],
                            'target': Optional[int]})


class Checkpoints(TypedDict):
    count: int
    secs: float
    mean_secs: Optional[float]
    every_steps: Optional[int]


class Evaluations(TypedDict):
    count: int
    secs: float
    final_secs: Optional[float]
    every_steps: Optional[int]
    precise_batch_norm_secs: float


# Tasks per role (the roles the cluster has; a single process: one chief),
# `evaluator`, `training_tasks`, this `task`, the resolved `strategy`, whether
# it is `synchronous` and its `replicas_in_sync` (`cluster_facts`).
ClusterFacts = Dict[str, Union[int, str, bool]]


class Precision(TypedDict):
    flag: Optional[str]
    compute: str
    variables: str


class Determinism(TypedDict):
    random_seed: Optional[int]
    op_determinism: bool


class Session(TypedDict):
    """A session of the chief's record, as `recorder.Recorder` writes it (the
    module docstring says what each holds). `read` returns the records as
    JSON gives them: older ones lack later fields."""
    status: Status
    exit_code: Optional[int]
    error: Optional[str]
    started_at: str
    ended_at: str
    started_at_unix: float
    wall_secs: float
    cpu_secs: float
    phases: Dict[str, float]
    steps: Steps
    examples_per_sec: Optional[float]
    examples_per_sec_interval_secs: Optional[float]
    examples_per_global_step: Optional[int]
    workers: Dict[str, Throughput]
    checkpoints: Checkpoints
    evaluations: Evaluations
    final_metrics: Dict[str, float]
    export_dir: Optional[str]
    flags: Dict[str, JsonValue]
    cluster: ClusterFacts
    precision: Precision
    determinism: Determinism
    hardware: Dict[str, object]
    software: Dict[str, str]
    job_id: Optional[str]
    session_id: str


class WorkerEntry(TypedDict):
    """What another training task records under `workers/<task>/`."""
    job_id: Optional[str]
    status: Status
    throughput: Throughput


def path(job_dir: str) -> str:
    """The chief's run record of `job_dir`."""
    record: str = job_dir_lib.run_record_path(job_dir)
    return record


def worker_path(job_dir: str, task_label: str) -> str:
    """Where training task `task_label` (`worker-0`, ...) records its own rate."""
    record: str = job_dir_lib.worker_run_record_path(job_dir, task_label)
    return record


def read(job_dir: str) -> List[Dict[str, Any]]:
    """The sessions of `job_dir`'s run record, with the workers' entries merged.

    Returns:
      A list of session dicts, oldest first; [] when there is no record.

    Raises:
      UserInputError: the file there is not a run record, or cannot be read
        (names the file).
    """
    sessions = _read_sessions(path(job_dir))
    for session in sessions:
        if session.get('job_id') and session.get('cluster', {}).get('training_tasks', 1) > 1:
            for label, throughput in worker_entries(job_dir, session['job_id']):
                session.setdefault('workers', {}).setdefault(label, throughput)
    return sessions


def _worker_labels(job_dir: str) -> List[str]:
    directory = os.path.join(job_dir, job_dir_lib.WORKERS_DIR)
    if safe_io.is_remote(directory):
        tf = logs.import_tensorflow()
        if not tf.io.gfile.isdir(directory):
            return []
        return sorted(name.rstrip('/') for name in tf.io.gfile.listdir(directory))
    return sorted(os.listdir(directory)) if os.path.isdir(directory) else []


def _read_sessions(record_path: str) -> List[Dict[str, Any]]:
    """The sessions of the record at `record_path` ([] when there is none).

    Read within `LIMITS` (`user_files`): a named pipe planted there is refused
    without blocking, a huge file unread.
    """
    record = user_files.read_json(record_path, limits=LIMITS, optional=True)
    if record is None:
        return []
    sessions = record.get('sessions') if isinstance(record, dict) else None
    if not isinstance(sessions, list) or record.get('format') != FORMAT or not all(
            isinstance(session, dict) and all(isinstance(session.get(key) or {}, dict)
                                              for key in _MAPPINGS)
            for session in sessions):
        raise UserInputError('%s is not a run record (expected {"format": %d, "sessions": '
                             '[...]})' % (record_path, FORMAT), path=record_path)
    return sessions


def append(record_path: str, session: Mapping[str, object]) -> None:
    """Appends `session` to the record at `record_path`, replacing the file atomically.

    A session already there with the same `session_id` (the `running` entry
    of this session) is replaced.

    Raises:
      UserInputError: the file there is not a run record or cannot be read
        (it is left as it is).
      OSError: it cannot be written.
    """
    sessions = [s for s in _read_sessions(record_path)
                if session.get('session_id') is None
                or s.get('session_id') != session['session_id']]
    safe_io.write_atomic(record_path, json.dumps(
        {'format': FORMAT, 'sessions': sessions + [session]}, indent=1, sort_keys=True) + '\n')


def iso_time(unix: float) -> str:
    return datetime.datetime.fromtimestamp(unix, datetime.timezone.utc).isoformat(
        timespec='seconds')


def cluster_facts(task: 'declaration.Task') -> ClusterFacts:
    """Tasks per role, this task, the resolved strategy (`declaration.Task`)."""
    cluster = task.cluster
    strategy = task.distribution
    roles = {role: len(cluster.addresses(role)) for role in (
        cluster_lib.CHIEF, cluster_lib.MASTER, cluster_lib.WORKER, cluster_lib.PS)}
    facts: ClusterFacts = {role: count for role, count in roles.items() if count}
    if not cluster.is_distributed:
        facts = {cluster_lib.CHIEF: 1}
    facts.update(evaluator=cluster.num_evaluators, training_tasks=cluster.num_workers,
                 task=cluster.task_label, strategy=strategy.strategy,
                 synchronous=strategy.synchronous, replicas_in_sync=strategy.replicas_in_sync)
    return facts


def json_value(value: object) -> JsonValue:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [json_value(v) for v in value]
    return str(value)


def job_throughput(tasks: Dict[str, Throughput]) -> Tuple[
        Optional[float], Dict[str, Throughput], Optional[float]]:
    """(the job's examples/sec, `tasks` with each task's share, the interval's
    seconds) of a cluster's training tasks, from their own figures
    (`recorder.Recorder`): the examples every task trained after its first
    run, over one interval, from the earliest task's first run's end to the
    latest task's last step. Each task's `examples_per_sec` becomes its
    examples over that interval, so the job's figure is their sum; its own
    rate while it trained stays as `own_examples_per_sec`. A task that
    trained no step counts 0; one without those figures (a record written
    before them) keeps its own and is not counted. (None, `tasks`, None) when
    no task has them.
    """
    timed = {label: figures for label, figures in tasks.items()
             if figures.get('trained_from_unix') is not None}
    counted = {label for label, figures in tasks.items()
               if label in timed or not figures.get('steps')}
    if not timed:
        return None, tasks, None
    secs = (max(figures['trained_to_unix'] for figures in timed.values())
            - min(figures['trained_from_unix'] for figures in timed.values()))
    if secs <= 0:
        return None, tasks, None
    shares = {label: (tasks[label].get('examples') or 0) / secs for label in counted}
    shared: Dict[str, Throughput] = {
        label: ({**figures, 'own_examples_per_sec': figures.get('examples_per_sec'),
                 'examples_per_sec': shares[label]} if label in counted else figures)
        for label, figures in tasks.items()}
    return sum(shares.values()), shared, secs


def worker_entries(job_dir: str, job_id: str) -> List[Tuple[str, Throughput]]:
    """(task, throughput) of the other training tasks of job `job_id` that recorded theirs."""
    entries = []
    try:
        for label in _worker_labels(job_dir):
            for entry in _read_sessions(worker_path(job_dir, label)):
                if entry.get('job_id') == job_id:
                    entries.append((label, entry['throughput']))
    except (OSError, UserInputError):
        pass
    return entries


def chief_succeeded(job_dir: str, job_id: str, since: float) -> Optional[Dict[str, Any]]:
    """The chief's session of job `job_id` that succeeded and ended after `since`
    (epoch seconds: when the asking task started), or None.

    A cluster's other tasks ask when a stop signal reaches them: a launcher
    (gcloud's `local train --distributed`, this project's, Vertex AI) stops
    what still runs once the chief exits, which is the job's normal end. An
    unreadable record answers None (the stop stays an error).
    """
    try:
        sessions = _read_sessions(path(job_dir))
    except (OSError, UserInputError):
        return None
    for session in sessions[::-1]:
        ended = (session.get('started_at_unix') or 0) + (session.get('wall_secs') or 0)
        if (session.get('job_id') == job_id and session.get('status') == SUCCEEDED
                and ended >= since):
            return session
    return None
