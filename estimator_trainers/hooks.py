"""Session hooks: progress logging, training summaries, divergence and step-aligned
checkpoints.

A `Session.run` may train several steps (`--steps-per-loop`): the hooks
count global-step deltas (`run_steps.step_fetches`), never their own calls.
"""
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf
from tensorflow.python.training import training_util  # pylint: disable=g-direct-tensorflow-import

from estimator_trainers import run_steps
from estimator_trainers import summaries

if TYPE_CHECKING:
    from estimator_trainers import checkpoints
    from estimator_trainers import evaluation

# The hooks below subclass TensorFlow's classes, which are `Any` to mypy (no
# types: `ignore_missing_imports`); strict mode refuses such a base, hence the
# `# type: ignore[misc]` on each of those class lines.

# At least one progress line this often, whatever a step takes (float16 on a
# CPU trains ~180x slower than bfloat16, and 100 steps took ten minutes).
PROGRESS_SECS = 30.0


def format_duration(seconds: float) -> str:
    """`10h02m`, `3m05s` or `42s`: how long, at a glance."""
    seconds = int(round(max(0.0, seconds)))
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    if hours:
        return '%dh%02dm' % (hours, minutes)
    if minutes:
        return '%dm%02ds' % (minutes, seconds)
    return '%ds' % seconds


class TrainingProgressHook(tf.compat.v1.train.SessionRunHook):  # type: ignore[misc]
    """Logs progress with an ETA every N steps and writes the training summaries.

    One line per interval and one at the step target:
    `step 4100/80000, 2.1 steps/s, ETA 10h02m: loss = ... (268.8 examples/sec,
    average 270.1)`, where steps/s and examples/sec are the whole job's (global
    steps, times the examples one global step consumes) over the interval, and
    the average is `average_examples_per_sec` so far: the one figure the
    closing summary block and the run record (`run_record`) report, so the
    last progress line's average is the summary's. The chief writes the
    interval's rates as `examples_per_sec` and `global_step/sec` into the
    job-dir; in a distributed job every training task also writes its own
    rate, `examples_per_sec/worker`, into its own directory
    (`job_dir.worker_dir`), so no two tasks write one event file. Time spent
    evaluating in this process (`evaluation.Clock`) is left out of this
    task's own rates, and of the job's when it trains `alone` (other tasks
    train on meanwhile); the first run after a (re)start, which includes
    graph warm-up, is left out of the averages. At the end of a cluster's
    job the chief sums the tasks' own counts over one interval
    (`run_record.job_throughput`).

    A line is also logged after any run that ends `PROGRESS_SECS` or more
    after the last line, and while a run takes longer than that a thread
    says every `PROGRESS_SECS` which step is running and for how long
    (`step 3/1000, 0.018 steps/s, ETA 15h20m: step 4 running for 41s`), so
    a slow path is never silent.

    With `summary_dir` it is also the chief's one writer of the model's
    training summaries (Estimator's own summary hook is off, see
    `run_config`): at every multiple of `save_summary_steps` and at the step
    target, so the curves land on the same steps whatever `--steps-per-loop`
    and wherever a run resumed.
    """

    def __init__(self, *, examples_per_step: int, every_n_steps: int, train_steps: int,
                 examples_per_global_step: Optional[int] = None,
                 summary_dir: Optional[str] = None, worker_dir: Optional[str] = None,
                 save_summary_steps: Optional[int] = None,
                 eval_clock: Optional['evaluation.Clock'] = None, alone: bool = True) -> None:
        """Creates the hook.

        Args:
          examples_per_step: examples this task consumes per step.
          every_n_steps: log at global steps that are multiples of this.
          train_steps: the global step target (for the ETA).
          examples_per_global_step: examples the whole job consumes per global
            step (default `examples_per_step`).
          summary_dir: the chief's job-dir for job-wide summaries (None: none).
          worker_dir: where this task writes its own rate (None: not distributed).
          save_summary_steps: write the model's training summaries into
            `summary_dir` at multiples of this (None or 0: never).
          eval_clock: `evaluation.Clock` of evaluations run by this process.
          alone: this is the job's only training task: while it evaluates, the
            job trains no step.
        """
        self._examples_per_step = examples_per_step
        self._examples_per_global_step = examples_per_global_step or examples_per_step
        self._every_n_steps = every_n_steps
        self._train_steps = train_steps
        self._summary_dir = summary_dir
        self._worker_dir = worker_dir
        self._save_summary_steps = save_summary_steps
        self._eval_clock = eval_clock
        self._alone = alone
        self.first_step: Optional[int] = None
        self.last_step: Optional[int] = None  # set with first_step
        self.local_steps = 0  # steps this task trained

    def begin(self) -> None:
        if tf.compat.v1.train.get_global_step() is None:
            raise RuntimeError('TrainingProgressHook needs a global step.')
        self._step_fetches = run_steps.step_fetches()
        self._tensors = summaries.progress_values()
        self._writer = self._writer_for(self._summary_dir)
        self._worker_writer = self._writer_for(self._worker_dir)
        self._summary_op = (summaries.merged_training_summaries()
                            if self._summary_dir and self._save_summary_steps else None)
        self._summary_step: Optional[int] = None
        self._last_time: Optional[float] = None
        self._next_log = 0  # (`_start_interval` sets it at the first run)
        self._interval_steps = 0
        self._last_line = time.time()
        self._heartbeat: Optional[_Heartbeat] = None

    @staticmethod
    def _writer_for(directory: Optional[str]) -> Optional[tf.compat.v1.summary.FileWriter]:
        return tf.compat.v1.summary.FileWriterCache.get(directory) if directory else None

    def after_create_session(self, session: tf.compat.v1.Session,
                             coord: tf.compat.v1.train.Coordinator) -> None:
        del coord  # unused
        # Where the first run starts: it may end at a summary step already.
        self._session_step = int(session.run(tf.compat.v1.train.get_global_step()))
        self._created_at = self._last_line = time.time()
        self._heartbeat = _Heartbeat(self._still_running)

    def stop_heartbeat(self) -> None:
        """Ends the thread of `_still_running` lines (training has ended, or failed)."""
        if self._heartbeat is not None:
            self._heartbeat.stop()

    def _still_running(self, now: float) -> None:
        """The line of a run under way `PROGRESS_SECS` after the last line (the
        heartbeat thread's; reads this hook's figures, runs nothing)."""
        if now - self._last_line < PROGRESS_SECS:
            return
        self._last_line = now
        step = self._session_step if self.last_step is None else self.last_step
        secs = self._training_secs(own=self._alone)
        done = None if self.last_step is None else self.last_step - self._first_run_end
        rate = done / secs if done and secs else None
        evaluating = self._eval_clock.running_since if self._eval_clock else None
        doing = ('evaluating for %s' % format_duration(now - evaluating) if evaluating else
                 'step %d running for %s' % (step + 1, format_duration(now - (
                     self._ended_at if self.first_step is not None else self._created_at))))
        tf.compat.v1.logging.info(
            'step %d/%d, %s steps/s, ETA %s: %s', step, self._train_steps,
            '%.3g' % rate if rate else 'n/a',
            format_duration((self._train_steps - step) / rate) if rate else 'n/a', doing)

    def before_run(self, run_context: tf.compat.v1.train.SessionRunContext
                   ) -> tf.compat.v1.train.SessionRunArgs:
        fetches: dict[str, Any] = {'values': self._tensors, 'step': self._step_fetches}
        if self._wants_summary():
            fetches['summary'] = self._summary_op
        return tf.compat.v1.train.SessionRunArgs(fetches)

    def _wants_summary(self) -> bool:
        """True when the next run ends at a summary step (a multiple, or the target)."""
        if self._summary_op is None or not self._save_summary_steps:
            return False
        end: int = run_steps.run_end(self._session_step if self.last_step is None
                                else self.last_step)
        return (end != self._summary_step
                and (end >= self._train_steps or end % self._save_summary_steps == 0))

    def after_run(self, run_context: tf.compat.v1.train.SessionRunContext,
                  run_values: tf.compat.v1.train.SessionRunValues) -> None:
        results = run_values.results
        step: int
        steps: int
        step, steps = run_steps.steps_done(results['step'])
        now = time.time()
        if self._last_time is None and self._writer is not None:
            # TensorBoard drops events a previous run wrote after the step it
            # resumed from (this run trains them again).
            self._writer.add_session_log(
                tf.compat.v1.SessionLog(status=tf.compat.v1.SessionLog.START),
                step - steps + 1)
        if 'summary' in results and self._writer is not None:  # (it is: `_wants_summary`)
            self._writer.add_summary(results['summary'], step)
            self._summary_step = step
        self._ended_at = now
        self._eval_secs_at_end = self._eval_secs_since(0.0)
        self.local_steps += steps
        if self._last_time is None:
            self.first_step = step - steps
            self._first_run_end = step
            self._first_run_steps = steps
            self.last_step = step
            self._started_at = now
            self._eval_secs_at_start = self._eval_secs_since(0.0)
            self._start_interval(now, step)
            return
        self._interval_steps += steps
        self.last_step = step
        if (step < self._next_log and step < self._train_steps
                and now - self._last_line < PROGRESS_SECS):
            return
        elapsed = now - self._last_time - self._eval_secs_since(self._last_eval_secs)
        job_elapsed = elapsed if self._alone else now - self._last_time
        self._log(step, elapsed, job_elapsed, results['values'])
        self._start_interval(now, step)

    def _eval_secs_since(self, mark: float) -> float:
        return self._eval_clock.seconds - mark if self._eval_clock else 0.0

    def _log(self, step: int, elapsed: float, job_elapsed: float,
             values: Mapping[str, float]) -> None:
        rate = self._interval_steps * self._examples_per_step / elapsed if elapsed > 0 else 0.0
        steps_per_sec = (step - self._last_step) / job_elapsed if job_elapsed > 0 else 0.0
        job_rate = steps_per_sec * self._examples_per_global_step
        average = self.average_examples_per_sec()
        if average is None:
            average = job_rate
        eta = ((self._train_steps - step) / steps_per_sec if steps_per_sec > 0 else 0.0)
        self._last_line = time.time()
        tf.compat.v1.logging.info(
            'step %d/%d, %.1f steps/s, ETA %s: %s (%.1f examples/sec, average %.1f)',
            step, self._train_steps, steps_per_sec, format_duration(eta),
            ', '.join('%s = %.5g' % (name, values[name]) for name in sorted(values)),
            job_rate, average)
        if self._writer is not None:
            self._writer.add_summary(tf.compat.v1.Summary(value=[
                tf.compat.v1.Summary.Value(tag=summaries.EXAMPLES_PER_SEC,
                                           simple_value=job_rate),
                tf.compat.v1.Summary.Value(tag=summaries.GLOBAL_STEPS_PER_SEC,
                                           simple_value=steps_per_sec)]), step)
        if self._worker_writer is not None and self._interval_steps and elapsed > 0:
            # An interval in which this task trained no step (the others
            # reached the target first) has no rate of its own.
            self._worker_writer.add_summary(tf.compat.v1.Summary(value=[
                tf.compat.v1.Summary.Value(tag=summaries.WORKER_EXAMPLES_PER_SEC,
                                           simple_value=rate)]), step)
            # A worker may be stopped once the chief is done, before `end`.
            self._worker_writer.flush()

    def average_examples_per_sec(self) -> Optional[float]:
        """Examples the job trained on per second since this task's first run, as
        the global step counts them.

        The first run (graph warm-up) is left out, and so is the time this
        process spent evaluating when it trains `alone`; None before a second run.
        """
        secs = self._training_secs(own=self._alone)
        if secs is None or self.last_step is None or self.last_step <= self._first_run_end:
            return None
        return (self.last_step - self._first_run_end) * self._examples_per_global_step / secs

    def average_worker_examples_per_sec(self) -> Optional[float]:
        """Examples this task trained on per second since its first run (None: too few)."""
        secs = self._training_secs()
        if secs is None or not self.measured_examples():
            return None
        return self.measured_examples() / secs

    def measured_examples(self) -> int:
        """Examples this task trained on after its first run (0 before a second)."""
        if self.first_step is None:
            return 0
        return max(0, self.local_steps - self._first_run_steps) * self._examples_per_step

    def measured_interval(self) -> Optional[Tuple[float, float]]:
        """(start, end), `time.time()` at the end of this task's first and last runs,
        or None before its first."""
        return None if self.first_step is None else (self._started_at, self._ended_at)

    def _training_secs(self, own: bool = True) -> Optional[float]:
        """Seconds from the end of the first run to the last; `own`: without the
        time this process spent evaluating."""
        if self.first_step is None:
            return None
        secs = self._ended_at - self._started_at
        if own:
            secs -= self._eval_secs_at_end - self._eval_secs_at_start
        return secs if secs > 0 else None

    @property
    def examples_per_global_step(self) -> int:
        return self._examples_per_global_step

    def end(self, session: tf.compat.v1.Session) -> None:
        self.stop_heartbeat()
        for writer in (self._writer, self._worker_writer):
            if writer is not None:
                writer.flush()

    def _start_interval(self, now: float, step: int) -> None:
        self._last_time, self._last_step, self._interval_steps = now, step, 0
        self._last_eval_secs = self._eval_secs_since(0.0)
        self._next_log = step - step % self._every_n_steps + self._every_n_steps


class _Heartbeat:
    """Calls `check(time.time())` ten times per `PROGRESS_SECS` in a daemon thread
    until `stop`."""

    def __init__(self, check: Callable[[float], None]) -> None:
        self._check = check
        self._tick = PROGRESS_SECS / 10
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._loop, name='progress-heartbeat',
                                        daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stopped.wait(self._tick):
            self._check(time.time())

    def stop(self) -> None:
        self._stopped.set()


class WaitForChiefHook(tf.compat.v1.train.SessionRunHook):  # type: ignore[misc]
    """A worker of a parameter-server job joins once the chief has initialized the
    shared variables and taken its first step, checking every `poll_secs`.

    TensorFlow's worker session checks for initialized variables every 30 s
    (its SessionManager's recovery wait): a worker that connects a moment
    before the chief has initialized them idles for 30 s, longer than a
    default taxi run (workers 1-3 of the 1-ps/4-worker run trained no step).
    And workers that start at once, while the chief still writes its graph
    and start-up checkpoint, can finish a short run before the chief's first
    step. So the chief leads, as Estimator's own start-up delays intend, and
    the workers follow at once; the session TensorFlow then creates finds
    the model ready. Synchronous replicas (`chief_first=False`) cannot wait
    for the chief's step, which needs theirs: they wait for the variables only.
    """

    def __init__(self, run_config: tf.estimator.RunConfig, train_steps: int,
                 chief_first: bool = True, poll_secs: float = 0.1) -> None:
        self._master = run_config.master
        self._session_config = run_config.session_config
        self._train_steps = train_steps
        self._chief_first = chief_first
        self._poll_secs = poll_secs

    def begin(self) -> None:
        uninitialized = tf.compat.v1.report_uninitialized_variables(
            tf.compat.v1.global_variables())
        global_step = tf.compat.v1.train.get_global_step()
        with tf.compat.v1.Session(self._master, config=self._session_config) as session:
            while session.run(uninitialized).size:
                time.sleep(self._poll_secs)
            start = session.run(global_step)
            while (self._chief_first and start < self._train_steps
                   and session.run(global_step) == start):
                time.sleep(self._poll_secs)


class CallAtEndHook(tf.compat.v1.train.SessionRunHook):  # type: ignore[misc]
    """Calls `callback` when training ends (e.g. `distribution.PeerWatch.stop`)."""

    def __init__(self, callback: Callable[[], object]) -> None:
        self._callback = callback

    def end(self, session: tf.compat.v1.Session) -> None:
        self._callback()


class Diverged(Exception):
    """Training diverged: its loss, or the variables it would save, are not finite.

    Attributes:
      step: the global step at which it was seen.
      loss: the loss of the step (None: the variables were seen first).
      start_step: the global step this process started (or resumed) at.
      at_start: no run of this process had a finite loss: the variables it
        started from (a checkpoint it resumed from) already diverge.
      unverified_steps: steps of checkpoints this process saved after the last
        finite loss it saw: their variables are finite, but were never seen to
        give a finite loss (the loss of a step comes from the variables before
        its update), so a rerun from them could diverge at once.
    """

    def __init__(self, step: int, loss: Optional[float] = None) -> None:
        super().__init__('training diverged at step %d: %s' % (
            step, 'loss = %s' % loss if loss is not None else
            'its variables are no longer all finite'))
        self.step = step
        self.loss = loss
        self.start_step: Optional[int] = None
        self.at_start = False
        self.unverified_steps: Tuple[int, ...] = ()


def all_variables_finite() -> tf.Tensor:
    """A bool tensor: every floating-point global variable holds only finite values.

    Each variable is checked on its own device (a parameter server's on the
    parameter server), so one bool per variable crosses the network.
    """
    checks = []
    for variable in tf.compat.v1.global_variables():
        if variable.dtype.base_dtype.is_floating:
            with tf.device(variable.device):
                checks.append(tf.reduce_all(tf.math.is_finite(variable)))
    return tf.reduce_all(tf.stack(checks)) if checks else tf.constant(True)


class StopOnDivergenceHook(tf.compat.v1.train.SessionRunHook):  # type: ignore[misc]
    """Raises `Diverged` at the first run of the training op whose loss is NaN or infinite.

    The loss is the one Estimator trains on (the last it adds to the LOSSES
    collection before its session starts, as its own NaN hook uses). With
    several steps per session run (an in-graph loop) it is the loss of the
    run's last step; non-finite values propagate, so a divergence inside the
    loop shows there too. Run it first among the training hooks: no other
    hook may act on a diverged step (the checkpoint saver would save it). The
    saver also refuses non-finite variables itself (`AlignedCheckpointSaverHook`),
    since a step's update can diverge after its loss was computed; and
    `listener` tells this hook which checkpoints were saved since the last
    finite loss (`Diverged.unverified_steps`).
    """

    def __init__(self) -> None:
        hook = self

        class _Saves(tf.compat.v1.train.CheckpointSaverListener):  # type: ignore[misc]
            def after_save(self, session: tf.compat.v1.Session, global_step_value: int) -> None:
                if global_step_value != hook.start_step:  # not the start's re-save
                    hook._unverified.append(int(global_step_value))  # pylint: disable=protected-access

        self.listener = _Saves()
        self.start_step: Optional[int] = None
        self._unverified: list[int] = []
        self._finite_seen = False

    def begin(self) -> None:
        losses = tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.LOSSES)
        self._loss = losses[-1] if losses else None
        self._global_step = tf.compat.v1.train.get_global_step()

    def after_create_session(self, session: tf.compat.v1.Session,
                             coord: tf.compat.v1.train.Coordinator) -> None:
        self.start_step = int(session.run(self._global_step))

    def before_run(self, run_context: tf.compat.v1.train.SessionRunContext
                   ) -> Optional[tf.compat.v1.train.SessionRunArgs]:
        if self._loss is None:
            return None
        return tf.compat.v1.train.SessionRunArgs(self._loss)

    def after_run(self, run_context: tf.compat.v1.train.SessionRunContext,
                  run_values: tf.compat.v1.train.SessionRunValues) -> None:
        loss = run_values.results
        if loss is None or np.all(np.isfinite(loss)):
            self._finite_seen = True
            del self._unverified[:]
            return
        raise self.annotated(Diverged(int(run_context.session.run(self._global_step)),
                                      float(np.asarray(loss).ravel()[0])))

    def annotated(self, error: Diverged) -> Diverged:
        """`error` with what this hook saw (`Diverged.start_step` and after)."""
        error.start_step = self.start_step
        error.at_start = error.loss is not None and not self._finite_seen
        error.unverified_steps = tuple(self._unverified)
        return error


class _AlignedStepTimer(tf.compat.v1.train.SecondOrStepTimer):  # type: ignore[misc]
    """Triggers at exact multiples of `every_steps`, whatever step it starts at.

    Asynchronous workers can move the global step past a multiple between two
    checks; the next trigger is still the next multiple, not N steps later.
    """

    def update_last_triggered_step(self, step: Optional[int]
                                   ) -> Tuple[Optional[float], Optional[int]]:
        # (elapsed seconds, elapsed steps) since the last trigger, TensorFlow's.
        result: Tuple[Optional[float], Optional[int]] = super().update_last_triggered_step(step)
        if step is not None:
            self._last_triggered_step = step - step % self._every_steps
        return result


class _NoSummaries:
    """Stands in for a summary writer where no one would read the events."""

    def __getattr__(self, name: str) -> Callable[..., None]:
        return lambda *args, **kwargs: None


def checkpoint_saver_hooks(
        checkpoint_plan: 'checkpoints.CheckpointPlan',
        listeners: Sequence[tf.compat.v1.train.CheckpointSaverListener] = (),
        steps_per_run: int = 1) -> list['AlignedCheckpointSaverHook']:
    """The training hooks that carry out a `checkpoints.CheckpointPlan` (none: no saving).

    `steps_per_run`: the most steps one `Session.run` trains (`--steps-per-loop`).
    """
    if not checkpoint_plan.directory:
        return []
    return [AlignedCheckpointSaverHook(
        checkpoint_plan.directory, save_steps=checkpoint_plan.every_steps,
        listeners=list(listeners), write_summaries=checkpoint_plan.write_summaries,
        steps_per_run=steps_per_run)]


class AlignedCheckpointSaverHook(tf.compat.v1.train.CheckpointSaverHook):  # type: ignore[misc]
    """CheckpointSaverHook that saves at global steps N, 2N, 3N, ..., and at the end.

    It saves as training starts only at step 0 (a new job-dir): a resumed run
    does not save again the checkpoint it resumed from.

    Estimator's own saver counts N steps from wherever training (re)started, so
    a resumed run saves at 1300, 1600, ... for N=300. Passing this hook in the
    train hooks replaces Estimator's default saver (it detects any
    CheckpointSaverHook), and saving listeners such as the in-training
    evaluation attach to it as usual. With `steps_per_run` > 1 (the most steps
    one `Session.run` trains) it reads the real global step after any run
    that may have reached a multiple.

    With `write_summaries=False` (a multi_worker_mirrored worker saving only
    because the save ops all-reduce) it writes no graph and no events: no one
    reads them.

    A checkpoint is saved only when every variable is finite: a diverged
    step raises `Diverged` instead, so the job-dir's latest checkpoint stays
    the last good one, which a rerun resumes from.
    """

    def __init__(self, checkpoint_dir: str, save_steps: int,
                 listeners: Optional[list[tf.compat.v1.train.CheckpointSaverListener]] = None,
                 write_summaries: bool = True, steps_per_run: int = 1) -> None:
        super().__init__(checkpoint_dir, save_steps=save_steps, listeners=listeners,
                         save_graph_def=write_summaries)
        self._timer = _AlignedStepTimer(every_steps=save_steps)
        self._write_summaries = write_summaries
        self._resumed = False
        self._saved_step: Optional[int] = None
        self._set_steps_per_run(steps_per_run)

    def after_create_session(self, session: tf.compat.v1.Session,
                             coord: tf.compat.v1.train.Coordinator) -> None:
        # TensorFlow's start-up save: kept for a new job-dir (step 0), not for
        # the checkpoint a run resumed from, which exists already. Every
        # worker that saves reads the same global step, so under
        # multi_worker_mirrored they all skip it or all save.
        self._resumed = int(session.run(self._global_step_tensor)) > 0
        try:
            super().after_create_session(session, coord)
        finally:
            self._resumed = False

    def _save(self, session: tf.compat.v1.Session, step: int) -> bool:
        if self._resumed:
            return False
        if not session.run(self._all_finite):
            raise Diverged(int(step))
        self._saved_step = int(step)
        stop: bool = super()._save(session, step)  # a listener asked to stop training
        return stop

    def end(self, session: tf.compat.v1.Session) -> None:
        # TensorFlow's end saves unless its timer triggered at the last step; the
        # aligned timer remembers the multiple instead, so a last step past one
        # (an asynchronous job's overshoot, 3005 of 3000) was saved twice.
        if int(session.run(self._global_step_tensor)) == self._saved_step:
            for listener in self._listeners:
                listener.end(session, self._saved_step)
            return
        super().end(session)

    def begin(self) -> None:
        self._all_finite = all_variables_finite()
        if self._write_summaries:
            super().begin()
            return
        # CheckpointSaverHook.begin, without creating an event file (which also
        # created the directory the saver needs).
        tf.io.gfile.makedirs(self._checkpoint_dir)
        self._summary_writer = _NoSummaries()
        self._global_step_tensor = training_util._get_or_create_global_step_read()  # pylint: disable=protected-access
        for listener in self._listeners:
            listener.begin()
