"""The run record: what every training session of a job-dir measured, as JSON.

`<job-dir>/run_record.json` (`job_dir.RUN_RECORD_FILE`) is written by the chief at
the end of each session (a run of the trainer on the job-dir: the first, and
every resumption), atomically, local or `gs://` (`safe_io.write_atomic`):

    {"format": 1, "sessions": [SESSION, ...]}      # oldest first; a resumed job appends

A SESSION (all times in seconds, rates in examples/sec):

- `status`: `succeeded`, `failed` (with `error`, the one line the task
  ended with), `terminated` (SIGTERM, e.g. a preemption or Ctrl-C of a
  sweep) or `aborted` (the process was ended from another thread: a lost
  peer or lease); `exit_code`. A run refused for its input before its first
  step (a bad flag, another job's lease, another model's checkpoints) writes
  nothing: it was not a session of this job-dir.
- `started_at`, `ended_at` (ISO 8601, UTC), `started_at_unix`, `wall_secs`.
- `phases`: `startup_secs` (process start to the end of the first training
  step: imports, input checks, graph, session, restore), `training_secs`
  (first to last step, without evaluating and checkpointing), `evaluating_secs`,
  `checkpointing_secs`, `export_secs`, `other_secs` (the rest: final
  evaluation set-up, shutdown). They add up to `wall_secs`.
- `steps`: `from` (the global step it started at), `to` (the global step
  of the final evaluation), `target` (`--train-steps`).
- `examples_per_sec`: the whole job's average while training, as the
  progress hook accounts it (`TrainingProgressHook.average_examples_per_sec`);
  `examples_per_global_step`.
- `workers`: `{task: {"examples_per_sec": ..., "steps": ...}}`, each training
  task's own average (`chief`, `worker-0`, ...); every other task of a
  cluster writes its entry into `<job-dir>/workers/<task>/run_record.json`
  when it stops training, and `read` merges those into the chief's sessions.
- `checkpoints`: `count` saved (the save a session starts with and the
  one at its end included), `secs` spent saving, `mean_secs`, `every_steps`.
- `evaluations`: `count`, `secs`; `final_metrics` (with `global_step`);
  `export_dir`.
- `flags` (every flag value), `cluster` (tasks per role, this task, the
  resolved strategy and whether it is synchronous), `precision` (the
  `--mixed-precision` setting and the compute and variable types it
  resolved to), `determinism` (`random_seed`, `op_determinism`),
  `hardware` (CPU model, cores, memory, GPUs, host, load average at the
  start and the end), `software` (TensorFlow and Python versions),
  `job_id` (the cluster's id, shared by its tasks).

No TensorFlow import at module level: the experiment tools read records.
"""
import contextlib
import datetime
import json
import os
import platform
import socket
import sys
import time

from estimator_trainers import job_dir as job_dir_lib
from estimator_trainers import safe_io
from estimator_trainers.errors import first_line

FORMAT = 1
SUCCEEDED = 'succeeded'
FAILED = 'failed'
TERMINATED = 'terminated'
ABORTED = 'aborted'


def path(job_dir):
    """The chief's run record of `job_dir`."""
    return job_dir_lib.run_record_path(job_dir)


def worker_path(job_dir, task_label):
    """Where training task `task_label` (`worker-0`, ...) records its own rate."""
    return job_dir_lib.worker_run_record_path(job_dir, task_label)


def read(job_dir):
    """The sessions of `job_dir`'s run record, with the workers' entries merged.

    Returns:
      A list of session dicts, oldest first; [] when there is no record.

    Raises:
      ValueError: the record is not a run record (names the file).
    """
    sessions = _read_sessions(path(job_dir))
    for session in sessions:
        if session.get('job_id') and session.get('cluster', {}).get('training_tasks', 1) > 1:
            for label, throughput in _worker_entries(job_dir, session['job_id']):
                session.setdefault('workers', {}).setdefault(label, throughput)
    return sessions


def _worker_labels(job_dir):
    directory = os.path.join(job_dir, job_dir_lib.WORKERS_DIR)
    if safe_io.is_remote(directory):
        import tensorflow as tf  # pylint: disable=g-import-not-at-top
        if not tf.io.gfile.isdir(directory):
            return []
        return sorted(name.rstrip('/') for name in tf.io.gfile.listdir(directory))
    return sorted(os.listdir(directory)) if os.path.isdir(directory) else []


def _read_sessions(record_path):
    text = _read_text(record_path)
    if text is None:
        return []
    try:
        record = json.loads(text)
        sessions = record['sessions']
        if record.get('format') != FORMAT or not isinstance(sessions, list):
            raise ValueError
    except (ValueError, KeyError, TypeError):
        raise ValueError('%s is not a run record (expected {"format": %d, "sessions": '
                         '[...]})' % (record_path, FORMAT)) from None
    return sessions


def _read_text(record_path):
    if safe_io.is_remote(record_path):
        import tensorflow as tf  # pylint: disable=g-import-not-at-top
        if not tf.io.gfile.exists(record_path):
            return None
        with tf.io.gfile.GFile(record_path) as f:
            return f.read()
    try:
        with open(record_path, encoding='utf-8') as f:
            return f.read()
    except FileNotFoundError:
        return None


def _append(record_path, session):
    """Appends `session` to the record at `record_path`, replacing the file atomically."""
    try:
        sessions = _read_sessions(record_path)
    except ValueError:
        sessions = []  # not ours to keep: a fresh record replaces it whole
    safe_io.write_atomic(record_path, json.dumps(
        {'format': FORMAT, 'sessions': sessions + [session]}, indent=1, sort_keys=True) + '\n')


def _iso(unix):
    return datetime.datetime.fromtimestamp(unix, datetime.timezone.utc).isoformat(
        timespec='seconds')


# --- what the machine is --------------------------------------------------------

def cpu_model(cpuinfo_path='/proc/cpuinfo'):
    """The CPU's model name (`Intel(R) Xeon(R) ...`), else what `platform` knows."""
    try:
        with open(cpuinfo_path) as f:
            for line in f:
                if line.startswith('model name'):
                    return line.split(':', 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def memory_bytes(meminfo='/proc/meminfo'):
    """Total memory (MemTotal), or None where unknown."""
    try:
        with open(meminfo) as f:
            for line in f:
                if line.startswith('MemTotal:'):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def process_started_at():
    """When this process started (`time.time()` scale), from /proc; None where unknown.

    A run's wall time and start-up count from here: importing TensorFlow is
    part of what a run costs.
    """
    try:
        with open('/proc/self/stat') as f:
            start_ticks = int(f.read().rsplit(')', 1)[1].split()[19])
        with open('/proc/uptime') as f:
            uptime = float(f.read().split()[0])
        return time.time() - (uptime - start_ticks / os.sysconf('SC_CLK_TCK'))
    except (OSError, ValueError, IndexError):
        return None


def load_average():
    """The 1, 5 and 15 minute load averages (a shared machine's figures say why), or None."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def gpus():
    """The GPUs TensorFlow sees: `[{"name": ..., "compute_capability": ...}]`."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    found = []
    for device in tf.config.list_physical_devices('GPU'):
        details = tf.config.experimental.get_device_details(device) or {}
        capability = details.get('compute_capability')
        found.append({'device': device.name,
                      'name': details.get('device_name', device.name),
                      'compute_capability': '.'.join(map(str, capability))
                      if capability else None})
    return found


def hardware():
    return {'cpu_model': cpu_model(), 'cpu_cores': os.cpu_count(),
            'memory_bytes': memory_bytes(), 'gpus': gpus(),
            'host': socket.gethostname(), 'platform': platform.platform()}


def precision(args, num_gpus):
    """The `--mixed-precision` setting and what it resolved to on this task."""
    from estimator_trainers import devices  # pylint: disable=g-import-not-at-top
    setting = getattr(args, 'mixed_precision', None)
    compute = devices.resolve_mixed_precision(setting, num_gpus) if setting else 'none'
    return {'flag': setting, 'compute': 'float32' if compute == 'none' else compute,
            'variables': 'float32'}


def cluster_facts(task):
    """Tasks per role, this task, the resolved strategy (`declaration.Task`)."""
    cluster = task.cluster
    roles = {role: len(cluster.addresses(role)) for role in ('chief', 'master', 'worker', 'ps')}
    facts = {role: count for role, count in roles.items() if count}
    if not cluster.is_distributed:
        facts = {'chief': 1}
    facts.update(evaluator=cluster.num_evaluators, training_tasks=cluster.num_workers,
                 task=cluster.task_label, strategy=task.distribution.strategy,
                 synchronous=task.distribution.synchronous,
                 replicas_in_sync=task.distribution.replicas_in_sync)
    return facts


def hparams_facts(task, args):
    """The cluster shape, strategy and precision, for the HParams dashboard."""
    facts = cluster_facts(task)
    return {'training_tasks': facts['training_tasks'],
            'parameter_servers': facts.get('ps', 0),
            'strategy': facts['strategy'],
            'precision': precision(args, task.num_gpus)['compute']}


def _json_value(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_json_value(v) for v in value]
    return str(value)


# --- recording one session -------------------------------------------------------

class Recorder:
    """Measures one session of a training task and records it when it ends.

    The chief appends its session to `<job-dir>/run_record.json`; another
    training task records its own throughput under `workers/<task>/`.
    It works beside the training driver: one session hook, one checkpoint
    listener and a timer around the export.
    """

    def __init__(self, args, task, started, job_id=None):
        """Args:
          args: the parsed flags.
          task: `declaration.Task` of this process.
          started: `time.time()` when the run started; the process's own start
            where /proc tells it (`process_started_at`).
          job_id: the cluster's id, which its tasks share (`lease.cluster_id`).
        """
        from estimator_trainers import evaluation  # pylint: disable=g-import-not-at-top
        self.args = args
        self._task = task
        self.started = min(started, process_started_at() or started)
        self._job_id = job_id
        self._load_at_start = load_average()
        self._progress = None
        # The driver's evaluation clock: time this process spent evaluating.
        self.eval_clock = evaluation.Clock()
        self._checkpoint_every = None
        self._train_steps = getattr(args, 'train_steps', None)
        self._checkpoints = 0
        self._checkpoint_secs = 0.0
        self._export_secs = 0.0
        # (time, checkpoint secs, evaluation secs) at the first and last step's end.
        self._first = None
        self._last = None
        self._written = False

    @property
    def is_chief(self):
        return self._task.cluster.is_chief

    def hparams_facts(self):
        """Cluster shape, strategy and precision for the HParams session."""
        return hparams_facts(self._task, self.args)

    # Calls from the training driver.

    def hooks(self, progress, train_steps, checkpoint_every):
        """The session hooks that time training.

        Args:
          progress: the driver's `hooks.TrainingProgressHook`, whose step
            accounting gives the rates.
          train_steps: the step target the trainer resolved (e.g. from epochs).
          checkpoint_every: the plan's checkpoint interval.
        """
        self._progress = progress
        self._train_steps = train_steps
        self._checkpoint_every = checkpoint_every
        return [_timeline_hook(self)]

    def checkpoint_listener(self):
        """A saver listener timing each save; put it first (the evaluation listener
        runs after saving, and its time is the evaluation's)."""
        return _checkpoint_timer(self)

    @contextlib.contextmanager
    def timing_export(self):
        start = time.time()
        try:
            yield
        finally:
            self._export_secs += time.time() - start

    def finished(self, metrics=None, export_dir=None):
        """Records a session that ended normally (the chief's with its final metrics)."""
        self._write(SUCCEEDED, 0, None, metrics, export_dir)

    @contextlib.contextmanager
    def recording_failures(self):
        """Records the session as failed when the block raises, then re-raises.

        Also records it as `aborted` when `process.exit_now` ends the process
        from another thread (a lost peer or lease) before the block completes.
        """
        from estimator_trainers import process  # pylint: disable=g-import-not-at-top
        process.at_exit(self._aborted)
        try:
            yield self
        except BaseException as e:  # pylint: disable=broad-except
            from estimator_trainers import errors  # pylint: disable=g-import-not-at-top
            if isinstance(e, errors.UserInputError) and not self._trained:
                # Refused for its input (another model's checkpoints): not a
                # session of this job-dir, which stays as it was.
                self._written = True
                raise
            status, code = failure_status(e)
            self._write(status, code, first_line(e) if str(e) else
                        'stopped on SIGTERM' if status == TERMINATED else type(e).__name__,
                        None, None)
            raise

    @property
    def _trained(self):
        return self._progress is not None and self._progress.first_step is not None

    def _aborted(self):
        self._write(ABORTED, None, 'the process was ended before the session completed',
                    None, None)

    def _step_ended(self, now):
        mark = (now, self._checkpoint_secs, self.eval_clock.seconds)
        if self._first is None:
            self._first = mark
        self._last = mark

    def _saved(self, secs):
        self._checkpoints += 1
        self._checkpoint_secs += secs

    # The record.

    def _write(self, status, exit_code, error, metrics, export_dir):
        if self._written:
            return
        self._written = True
        try:
            if self.is_chief:
                _append(path(self.args.job_dir),
                        self.session(status, exit_code, error, metrics, export_dir))
            elif self._trained:
                _append(worker_path(self.args.job_dir, self._task.cluster.task_label),
                        {'job_id': self._job_id, 'status': status,
                         'throughput': self._own_throughput()})
        except Exception as e:  # pylint: disable=broad-except
            # The run's own outcome stands: a record that cannot be written
            # (a full disk) must not replace its error.
            sys.stderr.write('warning: run record not written: %s\n' % first_line(e))

    def _own_throughput(self):
        return {'examples_per_sec': self._progress.average_worker_examples_per_sec(),
                'steps': self._progress.local_steps}

    def session(self, status, exit_code, error, metrics, export_dir):
        """The session dict (see the module docstring)."""
        import tensorflow as tf  # pylint: disable=g-import-not-at-top
        ended = time.time()
        wall = ended - self.started
        progress = self._progress
        eval_secs = self.eval_clock.seconds
        phases = {'evaluating_secs': eval_secs, 'checkpointing_secs': self._checkpoint_secs,
                  'export_secs': self._export_secs}
        if self._first is not None:
            (start, ckpt0, eval0), (end, ckpt1, eval1) = self._first, self._last
            # The save a session starts with counts as checkpointing, not start-up.
            phases['startup_secs'] = start - self.started - ckpt0 - eval0
            phases['training_secs'] = max(0.0, end - start - (ckpt1 - ckpt0) - (eval1 - eval0))
        else:
            phases['startup_secs'] = max(0.0, wall - sum(phases.values()))
            phases['training_secs'] = 0.0
        phases['other_secs'] = wall - sum(phases.values())
        metrics = {k: (int(v) if k == 'global_step' else float(v))
                   for k, v in (metrics or {}).items()}
        trained = self._trained
        workers = {}
        if trained:
            workers['chief' if self._task.cluster.is_distributed else 'local'] = (
                self._own_throughput())
        if self._job_id:
            for label, throughput in _worker_entries(self.args.job_dir, self._job_id):
                workers.setdefault(label, throughput)
        flags = vars(self.args)
        return {
            'status': status, 'exit_code': exit_code, 'error': error,
            'started_at': _iso(self.started), 'ended_at': _iso(ended),
            'started_at_unix': self.started, 'wall_secs': wall,
            'phases': phases,
            'steps': {'from': progress.first_step if trained else None,
                      'to': metrics.get('global_step',
                                        progress.last_step if trained else None),
                      'target': self._train_steps},
            'examples_per_sec': progress.average_examples_per_sec() if trained else None,
            'examples_per_global_step': progress.examples_per_global_step if progress else None,
            'workers': workers,
            'checkpoints': {'count': self._checkpoints, 'secs': self._checkpoint_secs,
                            'mean_secs': (self._checkpoint_secs / self._checkpoints
                                          if self._checkpoints else None),
                            'every_steps': self._checkpoint_every},
            'evaluations': {'count': self.eval_clock.count, 'secs': eval_secs},
            'final_metrics': metrics, 'export_dir': export_dir,
            'flags': {k: _json_value(v) for k, v in sorted(flags.items())},
            'cluster': cluster_facts(self._task),
            'precision': precision(self.args, self._task.num_gpus),
            'determinism': {'random_seed': flags.get('random_seed'),
                            'op_determinism': flags.get('random_seed') is not None},
            'hardware': dict(hardware(), load_average={'start': self._load_at_start,
                                                       'end': load_average()}),
            'software': {'tensorflow': tf.__version__, 'python': platform.python_version()},
            'job_id': self._job_id,
        }


def _worker_entries(job_dir, job_id):
    """(task, throughput) of the other training tasks of job `job_id` that recorded theirs."""
    entries = []
    try:
        for label in _worker_labels(job_dir):
            for entry in _read_sessions(worker_path(job_dir, label)):
                if entry.get('job_id') == job_id:
                    entries.append((label, entry['throughput']))
    except (OSError, ValueError):
        pass
    return entries


def failure_status(error):
    """(status, exit code) of a session that ended with `error`."""
    from estimator_trainers import errors  # pylint: disable=g-import-not-at-top
    from estimator_trainers import faults  # pylint: disable=g-import-not-at-top
    if isinstance(error, faults.Terminated):
        return TERMINATED, faults.EXIT_SIGTERM
    if isinstance(error, errors.TaskFailure):
        return (TERMINATED if error.exit_code == faults.EXIT_SIGTERM else FAILED,
                error.exit_code)
    if isinstance(error, errors.UserInputError):
        return FAILED, errors.EXIT_USAGE
    if isinstance(error, KeyboardInterrupt):
        return TERMINATED, 130
    return FAILED, 1


def _timeline_hook(recorder):
    """A session hook noting when each step ends (the first and last bound training)."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    class TimelineHook(tf.compat.v1.train.SessionRunHook):
        def after_run(self, run_context, run_values):
            recorder._step_ended(time.time())  # pylint: disable=protected-access

    return TimelineHook()


def _checkpoint_timer(recorder):
    """A checkpoint listener adding each save's duration to `recorder`."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    class CheckpointTimer(tf.compat.v1.train.CheckpointSaverListener):
        def before_save(self, session, global_step_value):
            self._start = time.time()

        def after_save(self, session, global_step_value):
            recorder._saved(time.time() - self._start)  # pylint: disable=protected-access

    return CheckpointTimer()
