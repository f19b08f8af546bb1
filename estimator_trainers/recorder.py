"""Records one session of a training task into its job-dir's run record.

The runner makes a `Recorder` per training task once it holds the job-dir;
the training driver hands it its progress hook and evaluation clock, adds
its session hook and checkpoint listener, and tells it how the session
ended. The chief appends the session to `<job-dir>/run_record.json`; every
other training task records its own throughput in
`<job-dir>/workers/<task>/run_record.json`. The record's format and reading
it are `run_record`'s (no TensorFlow there).
"""
import argparse
import contextlib
import os
import platform
import resource
import signal
import socket
import sys
import threading
import time
import uuid
from typing import TYPE_CHECKING, Callable, Iterator, Literal, Mapping, Optional, Union

import tensorflow as tf

from estimator_trainers import cluster as cluster_lib
from estimator_trainers import devices
from estimator_trainers import errors
from estimator_trainers import evaluation
from estimator_trainers import faults
from estimator_trainers import host
from estimator_trainers import process
from estimator_trainers import run_record
from estimator_trainers.errors import first_line

if TYPE_CHECKING:
    from estimator_trainers import checkpoints
    from estimator_trainers import declaration
    from estimator_trainers import hooks as hooks_lib

# The hooks and listeners below subclass TensorFlow's classes, which are `Any` to mypy (no
# types: `ignore_missing_imports`); strict mode refuses such a base, hence the
# `# type: ignore[misc]` on each of those class lines.

# How long a cluster's chief waits, once done, for the other training tasks'
# records (`Recorder.finished`).
WORKER_RECORD_WAIT_SECS = 15

# After this long closing the training session, a line says what it waits for.
CLOSING_NOTICE_SECS = 5.0

# What a session spends its time on after its last training step, besides
# checkpointing, evaluating and exporting: each a phase of the run record.
# `closing_hooks_secs`: the training hooks' ends (the progress writers'
# flush; the final save is checkpointing); `closing_session_secs`: the
# training session's close (its threads joined) and Estimator's return;
# `waiting_for_evaluation_thread_secs`: a run that leaves training early waits
# for the evaluation's preparing thread (`evaluation.Evaluator.settle`);
# `writing_summaries_secs`: the HParams session's end; `waiting_for_workers_secs`:
# a cluster's chief waits for the other tasks' records.
EndingPhase = Literal['closing_hooks_secs', 'closing_session_secs',
                      'waiting_for_evaluation_thread_secs', 'writing_summaries_secs',
                      'waiting_for_workers_secs']
ENDING_PHASES: tuple[EndingPhase, ...] = (
    'closing_hooks_secs', 'closing_session_secs', 'waiting_for_evaluation_thread_secs',
    'writing_summaries_secs', 'waiting_for_workers_secs')
# (time, checkpoint secs, evaluation secs) at a moment of the session (`Recorder._mark`).
_Mark = tuple[float, float, float]


def gpus() -> list[dict[str, Optional[str]]]:
    """The GPUs TensorFlow sees: `[{"device", "name", "compute_capability"}]`."""
    found = []
    for device in tf.config.list_physical_devices('GPU'):
        details = tf.config.experimental.get_device_details(device) or {}
        capability = details.get('compute_capability')
        found.append({'device': device.name,
                      'name': details.get('device_name', device.name),
                      'compute_capability': '.'.join(map(str, capability))
                      if capability else None})
    return found


def hardware() -> dict[str, object]:
    """This machine: CPU model and cores, memory, GPUs, host, platform."""
    return {'cpu_model': host.cpu_model(), 'cpu_cores': os.cpu_count(),
            'memory_bytes': host.memory_bytes(), 'gpus': gpus(),
            'host': socket.gethostname(), 'platform': platform.platform()}


def precision(args: argparse.Namespace, num_gpus: int) -> run_record.Precision:
    """The `--mixed-precision` setting and what it resolved to on this task."""
    setting = getattr(args, 'mixed_precision', None)
    compute = devices.resolve_mixed_precision(setting, num_gpus) if setting else 'none'
    return {'flag': setting, 'compute': 'float32' if compute == 'none' else compute,
            'variables': 'float32'}


def hparams_facts(task: 'declaration.Task',
                  args: argparse.Namespace) -> dict[str, Union[int, str, bool]]:
    """The cluster shape, strategy and precision, for the HParams dashboard."""
    facts = run_record.cluster_facts(task)
    return {'training_tasks': facts['training_tasks'],
            'parameter_servers': facts.get(cluster_lib.PS, 0),
            'strategy': facts['strategy'],
            'precision': precision(args, task.num_gpus)['compute']}


class Recorder:
    """Measures one session of a training task and records it when it ends.

    The chief appends its session to `<job-dir>/run_record.json`; another
    training task records its own throughput under `workers/<task>/`.
    It works beside the training driver: one session hook, one checkpoint
    listener and a timer around the export.
    """

    def __init__(self, args: argparse.Namespace, task: 'declaration.Task', started: float,
                 job_id: Optional[str] = None) -> None:
        """Args:
          args: the parsed flags.
          task: `declaration.Task` of this process.
          started: `time.time()` when the run started; the process's own start
            where /proc tells it (`host.process_started_at`).
          job_id: the cluster's id, which its tasks share (`lease.cluster_id`).
        """
        self.args = args
        self._task = task
        self._cluster = task.cluster
        self.started = min(started, host.process_started_at() or started)
        self._job_id = job_id
        self._load_at_start = host.load_average()
        self._progress: Optional[hooks_lib.TrainingProgressHook] = None
        # The driver's evaluation clock: time this process spent evaluating.
        self.eval_clock = evaluation.Clock()
        # The driver's `evaluation.Evaluator` (its precise batch norm time).
        self.evaluator: Optional[evaluation.Evaluator] = None
        self._checkpoint_every: Optional[int] = None
        self._eval_every: Optional[int] = None
        self._train_steps: Optional[int] = getattr(args, 'train_steps', None)
        self._start_step: Optional[int] = None
        self._checkpoints = 0
        self._checkpoint_secs = 0.0
        self._export_secs = 0.0
        # (time, checkpoint secs, evaluation secs) at the first and last step's end,
        # when the training hooks had ended and when training returned.
        self._first: Optional[_Mark] = None
        self._last: Optional[_Mark] = None
        self._hooks_ended: Optional[_Mark] = None
        self._training_returned: Optional[_Mark] = None
        self._closing_notice: Optional[threading.Timer] = None
        self._ending: dict[EndingPhase, float] = {name: 0.0 for name in ENDING_PHASES}
        self._written = False
        self._warned = False
        self._session_id = uuid.uuid4().hex
        # Each training task's figures and the job's examples/sec, as the chief
        # last recorded them.
        self.workers: dict[str, run_record.Throughput] = {}
        self.examples_per_sec: Optional[float] = None

    @property
    def is_chief(self) -> bool:
        chief: bool = self._cluster.is_chief
        return chief

    def hparams_facts(self) -> dict[str, Union[int, str, bool]]:
        """Cluster shape, strategy and precision for the HParams session."""
        return hparams_facts(self._task, self.args)

    # Calls from the training driver.

    def hooks(self, progress: 'hooks_lib.TrainingProgressHook', train_steps: int,
              checkpoint_plan: 'checkpoints.CheckpointPlan',
              start_step: int) -> list[tf.compat.v1.train.SessionRunHook]:
        """The session hooks that time training.

        Args:
          progress: the driver's `hooks.TrainingProgressHook`, whose step
            accounting gives the rates.
          train_steps: the step target the trainer resolved (e.g. from epochs).
          checkpoint_plan: the `checkpoints.CheckpointPlan` (its intervals).
          start_step: the global step of the checkpoint the session starts
            from (0 for a new job-dir). The progress hook's first step can be
            one more: it reads the global step while the first update runs.
        """
        self._progress = progress
        self._train_steps = train_steps
        self._checkpoint_every = checkpoint_plan.every_steps
        self._eval_every = (checkpoint_plan.eval_every_steps
                            if checkpoint_plan.evaluates_while_training else None)
        self._start_step = start_step
        return [_TimelineHook(self)]

    def checkpoint_listener(self) -> '_CheckpointTimer':
        """A saver listener timing each save; put it first (the evaluation listener
        runs after saving, and its time is the evaluation's)."""
        return _CheckpointTimer(self)

    def closing_hook(self) -> tf.compat.v1.train.SessionRunHook:
        """A hook noting when the training hooks have ended: put it last."""
        return _HooksEndedHook(self)

    def training_returned(self) -> None:
        """Training has returned to the driver, its session closed (call once it
        returns, normally or not)."""
        if self._closing_notice is not None:
            self._closing_notice.cancel()
        if self._hooks_ended is not None:
            self._training_returned = self._mark(time.time())

    def _hooks_end(self) -> None:
        """The training hooks have ended: the session closes next.

        Closing it destroys the training input's iterator, which waits for
        tf.data's autotuning thread to wake from its sleep (TensorFlow 2.15
        does not wake it); the sleeps double up to a minute while training
        runs, so a long run can sit silent that long after its last
        checkpoint (32 and 38 s in two of four 40-second CIFAR-10 runs). Past
        `CLOSING_NOTICE_SECS` one line says so.
        """
        self._hooks_ended = self._mark(time.time())
        if not self.is_chief:
            # Its figures are final: recorded now, the chief need not wait for the close.
            self._write(run_record.SUCCEEDED, 0, None, None, None)
        self._closing_notice = threading.Timer(CLOSING_NOTICE_SECS, _closing_notice)
        self._closing_notice.daemon = True
        self._closing_notice.start()

    @contextlib.contextmanager
    def timing(self, phase: EndingPhase) -> Iterator[None]:
        """Adds the block's seconds to `phase`."""
        start = time.time()
        try:
            yield
        finally:
            self._ending[phase] += time.time() - start

    @contextlib.contextmanager
    def timing_export(self) -> Iterator[None]:
        start = time.time()
        try:
            yield
        finally:
            self._export_secs += time.time() - start

    def finished(self, metrics: Optional[Mapping[str, float]] = None,
                 export_dir: Optional[str] = None) -> None:
        """Records a session that ended normally (the chief's with its final metrics).

        The chief of a cluster first waits, at most `WORKER_RECORD_WAIT_SECS`,
        for the other training tasks to record theirs (they stop once they
        see the step target, while the chief evaluates and exports), so that
        the record and the summary block have every task's steps.
        """
        if self.is_chief:
            with self.timing('waiting_for_workers_secs'):
                self._wait_for_workers()
        self._write(run_record.SUCCEEDED, 0, None, metrics, export_dir)

    def _wait_for_workers(self) -> None:
        cluster = self._cluster
        expected = {'%s-%d' % (cluster_lib.WORKER, i)
                    for i in range(len(cluster.addresses(cluster_lib.WORKER)))}
        if not expected or not self._job_id:
            return
        deadline = time.time() + WORKER_RECORD_WAIT_SECS
        while time.time() < deadline:
            found = {label for label, _ in run_record.worker_entries(self.args.job_dir,
                                                                     self._job_id)}
            if expected <= found:
                return
            time.sleep(0.2)

    @contextlib.contextmanager
    def recording_failures(self, job_ended: Optional[Callable[[int], object]] = None
                           ) -> Iterator['Recorder']:
        """Records the session as failed when the block raises, then re-raises.

        Also records it as `aborted` when `process.exit_now` ends the process
        from another thread (a lost peer or lease) before the block completes.

        Args:
          job_ended: `faults.Termination.job_ended`: a stop signal it answers
            for (SIGTERM after the chief finished) ends the session as it
            would have ended by itself: `succeeded` for a task that trained,
            nothing for an evaluator.
        """
        process.at_exit(self._aborted)
        try:
            yield self
        except BaseException as e:  # pylint: disable=broad-except
            if isinstance(e, errors.UserInputError) and not self._trained:
                # Refused for its input (another model's checkpoints): not a
                # session of this job-dir, which stays as it was.
                self._written = True
                raise
            if isinstance(e, faults.Terminated) and job_ended and job_ended(e.signum):
                if self._trained:
                    self._write(run_record.SUCCEEDED, 0, None, None, None)
                self._written = True
                raise
            status, code = failure_status(e)
            if isinstance(e, faults.Terminated):
                text = 'stopped on %s' % signal.Signals(e.signum).name
            else:
                text = first_line(e) if str(e) else type(e).__name__
            self._write(status, code, text, None, None)
            raise

    @property
    def _trained(self) -> bool:
        return self._progress is not None and self._progress.first_step is not None

    def _aborted(self) -> None:
        self._write(run_record.ABORTED, None,
                    'the process was ended before the session completed', None, None)

    def _mark(self, now: float) -> tuple[float, float, float]:
        return (now, self._checkpoint_secs, self.eval_clock.seconds)

    def _step_ended(self, now: float) -> None:
        mark = self._mark(now)
        if self._first is None:
            self._first = mark
        self._last = mark

    def _saved(self, secs: float, step: int) -> None:
        self._checkpoints += 1
        self._checkpoint_secs += secs
        if self.is_chief and self._trained and not self._written:
            self._write_running(step)

    def _write_running(self, step: int) -> None:
        """Records the session so far as `running`: what a process killed outright
        (SIGKILL, a lost machine) leaves, up to its latest checkpoint, for a
        sweep to add to the session that resumes from it. The session's final
        write replaces it; a failure to write is the session's one warning."""
        try:
            session = self.session(run_record.RUNNING, None, None, None, None)
            session['steps']['to'] = int(step)  # where a resumed session starts
            run_record.append(run_record.path(self.args.job_dir), session)
        except Exception as e:  # pylint: disable=broad-except
            self._warn(e)

    # The record.

    def _write(self, status: run_record.Status, exit_code: Optional[int], error: Optional[str],
               metrics: Optional[Mapping[str, float]], export_dir: Optional[str]) -> None:
        if self._written:
            return
        self._written = True
        try:
            if self.is_chief:
                run_record.append(run_record.path(self.args.job_dir), self.session(
                    status, exit_code, error, metrics, export_dir))
            elif self._trained or status == run_record.SUCCEEDED:
                # A task that trained no step (the others reached the target
                # first) records that too: the chief's table shows 0 steps.
                run_record.append(
                    run_record.worker_path(self.args.job_dir, self._cluster.task_label),
                    run_record.WorkerEntry(job_id=self._job_id, status=status,
                                           throughput=self._own_throughput()))
        except Exception as e:  # pylint: disable=broad-except
            # The run's own outcome stands: a record that cannot be written
            # (a full disk) must not replace its error.
            self._warn(e)

    def _warn(self, error: BaseException) -> None:
        """The one warning line of a record that cannot be written (once per session)."""
        if not self._warned:
            self._warned = True
            sys.stderr.write('warning: run record not written: %s\n' % first_line(error))

    def _own_throughput(self) -> run_record.Throughput:
        """This task's own figures (`run_record.job_throughput` sums them)."""
        progress = self._progress
        # An interval once it trained (`_trained`): the end of its first run.
        interval = progress.measured_interval() if progress is not None else None
        if progress is None or interval is None:
            return {'examples_per_sec': None, 'steps': 0, 'examples': 0}
        return {'examples_per_sec': progress.average_worker_examples_per_sec(),
                'steps': progress.local_steps,
                'examples': progress.measured_examples(),
                'trained_from_unix': interval[0], 'trained_to_unix': interval[1]}

    def session(self, status: run_record.Status, exit_code: Optional[int], error: Optional[str],
                metrics: Optional[Mapping[str, float]],
                export_dir: Optional[str]) -> run_record.Session:
        """The session dict (see the module docstring)."""
        ended = time.time()
        wall = ended - self.started
        progress = self._progress
        # The progress hook of a session that trained (`_trained`), else None.
        trained_progress = progress if self._trained else None
        eval_secs = self.eval_clock.seconds
        phases = {'evaluating_secs': eval_secs, 'checkpointing_secs': self._checkpoint_secs,
                  'export_secs': self._export_secs}
        if self._first is not None and self._last is not None:  # set together
            (start, ckpt0, eval0), (end, ckpt1, eval1) = self._first, self._last
            # The save a session starts with counts as checkpointing, not start-up.
            phases['startup_secs'] = start - self.started - ckpt0 - eval0
            phases['training_secs'] = max(0.0, end - start - (ckpt1 - ckpt0) - (eval1 - eval0))
        else:
            phases['startup_secs'] = max(0.0, wall - sum(phases.values()))
            phases['training_secs'] = 0.0
        phases.update(self._ending.items())
        if self._last is not None:
            phases['closing_hooks_secs'] = _between(self._last, self._hooks_ended)
            phases['closing_session_secs'] = _between(self._hooks_ended or self._last,
                                                      self._training_returned)
        phases['other_secs'] = wall - sum(phases.values())
        final_metrics: dict[str, float] = {k: (int(v) if k == 'global_step' else float(v))
                                           for k, v in (metrics or {}).items()}
        trained = trained_progress is not None
        workers: dict[str, run_record.Throughput] = {}
        if trained:
            workers[cluster_lib.CHIEF if self._cluster.is_distributed else 'local'] = (
                self._own_throughput())
        if self._job_id:
            for label, throughput in run_record.worker_entries(self.args.job_dir,
                                                               self._job_id):
                workers.setdefault(label, throughput)
        examples_per_sec = (trained_progress.average_examples_per_sec()
                            if trained_progress is not None else None)
        interval = None
        if trained and self._cluster.is_distributed:
            examples_per_sec, workers, interval = run_record.job_throughput(workers)
        self.workers = workers
        self.examples_per_sec = examples_per_sec
        flags = vars(self.args)
        last_step = (int(final_metrics['global_step']) if 'global_step' in final_metrics
                     else trained_progress.last_step if trained_progress is not None else None)
        return {
            'status': status, 'exit_code': exit_code, 'error': error,
            'started_at': run_record.iso_time(self.started),
            'ended_at': run_record.iso_time(ended),
            'started_at_unix': self.started, 'wall_secs': wall,
            'cpu_secs': _cpu_secs(),
            'phases': phases,
            'steps': {'from': self._start_step if trained else None, 'to': last_step,
                      'target': self._train_steps},
            'examples_per_sec': examples_per_sec,
            'examples_per_sec_interval_secs': interval,
            'examples_per_global_step': progress.examples_per_global_step if progress else None,
            'workers': workers,
            'checkpoints': {'count': self._checkpoints, 'secs': self._checkpoint_secs,
                            'mean_secs': (self._checkpoint_secs / self._checkpoints
                                          if self._checkpoints else None),
                            'every_steps': self._checkpoint_every},
            'evaluations': {'count': self.eval_clock.count, 'secs': eval_secs,
                            # The driver's final evaluation is the session's last.
                            'final_secs': self.eval_clock.last_secs if final_metrics else None,
                            'every_steps': self._eval_every,
                            'precise_batch_norm_secs': (self.evaluator.calibration_secs
                                                        if self.evaluator else 0.0)},
            'final_metrics': final_metrics, 'export_dir': export_dir,
            'flags': {k: run_record.json_value(v) for k, v in sorted(flags.items())},
            'cluster': run_record.cluster_facts(self._task),
            'precision': precision(self.args, self._task.num_gpus),
            'determinism': {'random_seed': flags.get('random_seed'),
                            'op_determinism': flags.get('random_seed') is not None},
            'hardware': dict(hardware(), load_average={'start': self._load_at_start,
                                                       'end': host.load_average()}),
            'software': {'tensorflow': tf.__version__, 'python': platform.python_version()},
            'job_id': self._job_id,
            'session_id': self._session_id,
        }


def _closing_notice() -> None:
    tf.compat.v1.logging.info(
        'Closing the training session: tf.data stops the input\'s autotuning thread '
        'when it next wakes, up to a minute after a long run (closing_session_secs in '
        'the run record)')


def _between(start: Optional[tuple[float, float, float]],
             end: Optional[tuple[float, float, float]]) -> float:
    """Seconds from mark `start` to mark `end` (`Recorder._mark`) that were neither
    checkpointing nor evaluating; 0 when either is missing."""
    if start is None or end is None:
        return 0.0
    return max(0.0, (end[0] - start[0]) - (end[1] - start[1]) - (end[2] - start[2]))


def _cpu_secs() -> float:
    """CPU seconds this process used, all threads (robust to a shared machine's load)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def failure_status(error: BaseException) -> tuple[run_record.Status, int]:
    """(status, exit code) of a session that ended with `error`."""
    stopped = {faults.exit_code(signum) for signum in faults.STOP_SIGNALS}
    if isinstance(error, faults.Terminated):
        return run_record.TERMINATED, faults.exit_code(error.signum)
    if isinstance(error, errors.TaskFailure):
        return (run_record.TERMINATED if error.exit_code in stopped else run_record.FAILED,
                error.exit_code)
    if isinstance(error, errors.UserInputError):
        return run_record.FAILED, errors.EXIT_USAGE
    if isinstance(error, KeyboardInterrupt):
        return run_record.TERMINATED, faults.exit_code(signal.SIGINT)
    return run_record.FAILED, errors.EXIT_FAILED


class _TimelineHook(tf.compat.v1.train.SessionRunHook):  # type: ignore[misc]
    """Notes when each step ends (the first and last bound training)."""

    def __init__(self, recorder: Recorder) -> None:
        self._recorder = recorder

    def after_run(self, run_context: tf.compat.v1.train.SessionRunContext,
                  run_values: tf.compat.v1.train.SessionRunValues) -> None:
        self._recorder._step_ended(time.time())  # pylint: disable=protected-access


class _HooksEndedHook(tf.compat.v1.train.SessionRunHook):  # type: ignore[misc]
    """Notes when the training hooks before it have ended (last in the list)."""

    def __init__(self, recorder: Recorder) -> None:
        self._recorder = recorder

    def end(self, session: tf.compat.v1.Session) -> None:
        self._recorder._hooks_end()  # pylint: disable=protected-access


class _CheckpointTimer(tf.compat.v1.train.CheckpointSaverListener):  # type: ignore[misc]
    """Adds each save's duration to the recorder."""

    def __init__(self, recorder: Recorder) -> None:
        self._recorder = recorder
        self._start = 0.0  # set by `before_save`, which TensorFlow calls first

    def before_save(self, session: tf.compat.v1.Session, global_step_value: int) -> None:
        self._start = time.time()

    def after_save(self, session: tf.compat.v1.Session, global_step_value: int) -> None:
        self._recorder._saved(time.time() - self._start, global_step_value)  # pylint: disable=protected-access
