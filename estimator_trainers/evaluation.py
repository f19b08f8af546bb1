"""Evaluations: in the chief's process while it trains, or by an evaluator task.

A chief that evaluates while it trains (`InTrainingEvaluation`) evaluates the
weights it holds at multiples of the plan's evaluation interval
(`checkpoints.CheckpointPlan.eval_every_steps`): it saves them to an
in-memory snapshot (TensorFlow's `ram://` file system, `Snapshot`) and
restores that into the evaluation graph. No checkpoint is needed, so the
checkpoint cadence is the user's and checkpoint time is saving alone. An
evaluator task (`follow`) evaluates the checkpoints the chief saves in the
job-dir, from the first one after step 0. The step target is left to the
training driver's final evaluation, of the last checkpoint.

`Evaluator` builds the evaluation graph and session once per process and
only restores weights into it: `Estimator.evaluate` rebuilds both every time
(about a second for the taxi model, more than its whole evaluation), which
made frequent evaluation expensive. A chief that evaluates while it trains
prepares them in a thread as training starts (`PrepareInBackground`), so that
one-off cost overlaps training instead of pausing it. With a calibration
input (`--precise-batch-norm`), each evaluation first re-estimates the
batch-norm statistics from training batches (`precise_bn`). The graph, once
built, must report the metrics the run needs (`required_metrics`: the tuning
metric), else the first evaluation ends the run in one line.
"""
from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Iterator, Optional

import tensorflow as tf

from estimator_trainers import job_dir as job_dir_lib
from estimator_trainers import precise_bn
from estimator_trainers.errors import TaskFailure
from estimator_trainers import run_steps

if TYPE_CHECKING:
    from estimator_trainers.checkpoints import CheckpointPlan
    from estimator_trainers.declaration import InputFn

# An evaluation's metrics by name, with `global_step` (an int).
Metrics = dict[str, float]
# True once a stop signal arrived (`faults.Termination.requested.is_set`).
StopRequested = Callable[[], bool]

# How long a run that leaves training early (a stop signal, an error) waits for a
# preparation still under way before it exits (`Evaluator.settle`); a stop's
# own grace (`faults.SAVE_GRACE_SECS`) ends the process sooner if it must.
SETTLE_SECS = 20.0


class Evaluator:
    """Evaluates weights of `estimator` on `input_fn`, with one graph and session.

    The graph is Estimator's own evaluation graph (the model_fn's
    `eval_metric_ops` plus the mean `loss` and `global_step`); each call
    restores a checkpoint (or an in-memory snapshot), re-estimates the
    batch-norm statistics when it has a calibration input, resets the metrics
    and the input, runs `steps` batches (None: the whole input) and writes
    the metrics to `<job-dir>/eval` as `Estimator.evaluate` does.
    """

    def __init__(self, estimator: tf.estimator.Estimator, input_fn: InputFn,
                 steps: Optional[int] = None, clock: Optional[Clock] = None,
                 calibration_input_fn: Optional[InputFn] = None,
                 required_metrics: Iterable[tuple[str, str]] = ()) -> None:
        """`calibration_input_fn`: training batches for precise batch norm
        (`precise_bn`), or None to evaluate with the moving averages as saved.
        `required_metrics`: `(flag, metric)` pairs the graph must report."""
        self._estimator = estimator
        self._input_fn = input_fn
        self._steps = steps
        self._clock = clock or Clock()
        self._calibration_input_fn = calibration_input_fn
        self._required_metrics = tuple(required_metrics)
        self._calibration: Optional[precise_bn.Calibration] = None
        self._calibrated = False
        self._session: Optional[tf.compat.v1.Session] = None
        self._preparing: Optional[threading.Thread] = None
        self._prepare_error: Optional[Exception] = None
        # Time evaluations take once warm: building the graph and the first
        # run of its session (graph optimisation) are paid once per process.
        self.run_secs = 0.0
        self.last_run_secs = 0.0
        # Of which re-estimating batch-norm statistics (all evaluations).
        self.calibration_secs = 0.0
        self._warm = False
        self._export_path = 'ram://estimator_trainers/%d/evaluated' % id(self)

    def prepare_in_background(self) -> None:
        """Builds the graph and session and runs them once, in a thread.

        The first run of a session optimises its graph (Grappler), which
        takes longer than a warm evaluation of a small model; it is done here
        on freshly initialised variables, so the first evaluation is warm. The
        thread's graph is its own (TensorFlow's default graph is per thread),
        and the next evaluation waits for it. Does nothing when built already.
        """
        if self._session is None and self._preparing is None:
            # A daemon: a preparation that hangs (an unreachable input) must not
            # keep the process alive; `settle` waits for one that is merely slow.
            self._preparing = threading.Thread(target=self._prepare,
                                               name='prepare-evaluation', daemon=True)
            self._preparing.start()

    def _prepare(self) -> None:
        try:
            self._build()
            with self._live.graph.as_default():
                self._live.run(self._scaffold.init_op)
                self._start_input()
                try:
                    self._live.run(self._update_op)
                except tf.errors.OutOfRangeError:
                    pass  # an empty input: the evaluation says so
                self._live.run(self._metrics)
                if self._calibration is not None:
                    self._calibration.run(self._session, batches=1)
            self._warm = True
        except Exception as e:  # pylint: disable=broad-except
            self._prepare_error = e  # raised by the evaluation that needs the graph

    def settle(self, timeout_secs: float = SETTLE_SECS) -> None:
        """Waits up to `timeout_secs` for a preparation under way to end.

        Call before the process exits with training cut short. An interpreter
        that exits while the preparing thread is inside TensorFlow ends that
        thread with `pthread_exit`, whose unwinding through TensorFlow's C++
        aborts the process ("FATAL: exception not rethrown", SIGABRT): about 1
        in 25 runs stopped by SIGTERM at their first steps, under load, exited
        -6 instead of 143.
        """
        if self._preparing is not None:
            self._preparing.join(timeout_secs)

    def preparing(self) -> bool:
        """True while `prepare_in_background`'s thread is still building or warming up."""
        return self._preparing is not None and self._preparing.is_alive()

    def _wait_for_preparation(self) -> None:
        if self._preparing is not None:
            self._preparing.join()
            self._preparing = None
            if self._prepare_error is not None:
                raise self._prepare_error

    def _build(self) -> None:
        graph = tf.Graph()
        with graph.as_default():
            scaffold, update_op, metrics, hooks = (
                self._estimator._evaluate_build_graph(  # pylint: disable=protected-access
                    without_tuning(self._input_fn), hooks=[]))
            if self._calibration_input_fn is not None:
                self._calibration = precise_bn.Calibration.build(
                    without_tuning(self._calibration_input_fn))
            scaffold = scaffold or tf.compat.v1.train.Scaffold()
            scaffold.finalize()
            for hook in hooks:
                hook.begin()
            self._writer = tf.compat.v1.summary.FileWriterCache.get(
                job_dir_lib.eval_dir(self._estimator.model_dir))
        config = tf.compat.v1.ConfigProto()
        if self._estimator.config.session_config is not None:
            config.CopyFrom(self._estimator.config.session_config)
        del config.device_filters[:]  # a local session: no cluster devices
        self._session = tf.compat.v1.Session(graph=graph, config=config)
        self._scaffold, self._update_op, self._metrics, self._hooks = (
            scaffold, update_op, metrics, hooks)
        self._step = metrics['global_step']
        for flag, name in self._required_metrics:
            if name not in metrics:
                raise TaskFailure(
                    '%s %s: the trainer declares it among its eval_metrics, but its '
                    'evaluation graph reports %s; the declaration is wrong' % (
                        flag, name, ', '.join(sorted(k for k in metrics
                                                     if k != 'global_step'))), flag=flag)

    def __call__(self, checkpoint_path: Optional[str] = None) -> Metrics:
        """Metrics (with `global_step`) of `checkpoint_path` (None: the latest)."""
        checkpoint_path = checkpoint_path or tf.train.latest_checkpoint(
            self._estimator.model_dir)
        with self._clock.timing():
            self._ready()
            with self._live.graph.as_default():
                metrics = self._evaluate(checkpoint_path, time.time())
        assert metrics is not None  # only a stop request drops an evaluation
        return metrics

    def evaluate_weights(self, session: tf.compat.v1.Session, snapshot: Snapshot,
                         stop_requested: Optional[StopRequested] = None) -> Optional[Metrics]:
        """Metrics of the weights `session` holds now, through `snapshot` (`Snapshot`);
        None when `stop_requested()` turned true meanwhile (the evaluation is dropped,
        so a stopping run saves its checkpoint within its grace).

        The snapshot's save counts as evaluation time: it exists for it.
        """
        with self._clock.timing():
            start = time.time()
            path = snapshot.save(session)
            self._ready()
            with self._live.graph.as_default():
                return self._evaluate(path, start, stop_requested)

    @property
    def _live(self) -> tf.compat.v1.Session:
        """The evaluation's session, once `_build` made it."""
        if self._session is None:
            raise RuntimeError('the evaluation graph is not built yet')
        return self._session

    def _ready(self) -> None:
        self._wait_for_preparation()
        if self._session is None:
            self._build()

    def _evaluate(self, checkpoint_path: str, start: float,
                  stop_requested: Optional[StopRequested] = None) -> Optional[Metrics]:
        self._scaffold.saver.restore(self._session, checkpoint_path)
        calibration = ''
        if self._calibration is not None:
            calibration_start = time.time()
            self._calibration.run(self._session)
            secs = time.time() - calibration_start
            self.calibration_secs += secs
            calibration = '; batch norm from %d training batches in %.1fs' % (
                precise_bn.BATCHES, secs)
        self._calibrated = self._calibration is not None
        self._start_input()
        batches = 0
        while self._steps is None or batches < self._steps:
            if stop_requested is not None and stop_requested():
                tf.compat.v1.logging.info('Evaluation of step %d dropped: the run is '
                                          'stopping', self._live.run(self._step))
                return None
            try:
                self._live.run(self._update_op)
            except tf.errors.OutOfRangeError:
                break
            batches += 1
        metrics = self._live.run(self._metrics)
        secs = time.time() - start
        if self._warm:
            self.last_run_secs = secs
            self.run_secs += secs
        self._warm = True
        step = int(metrics['global_step'])
        values: Metrics = {k: float(v) for k, v in metrics.items()
                  if k != 'global_step' and getattr(v, 'size', 1) == 1}
        self._writer.add_summary(tf.compat.v1.Summary(value=[
            tf.compat.v1.Summary.Value(tag=k, simple_value=v)
            for k, v in sorted(values.items())]), step)
        self._writer.flush()
        tf.compat.v1.logging.info(
            'Evaluation of step %d (%d batches, %.1fs%s): %s', step, batches, secs,
            calibration, ', '.join('%s = %.4g' % kv for kv in sorted(values.items())))
        return dict(values, global_step=step)

    def evaluated_checkpoint(self) -> Optional[str]:
        """A checkpoint of the weights the last evaluation measured, or None when
        they are the restored ones as saved.

        With precise batch norm the last evaluation used re-estimated
        statistics; the export takes them from here (an in-memory checkpoint),
        so the SavedModel serves what was evaluated.
        """
        if not self._calibrated:
            return None
        with self._live.graph.as_default():
            path: str = self._scaffold.saver.save(self._session, self._export_path,
                                                  write_meta_graph=False, write_state=False)
        return path

    def _start_input(self) -> None:
        """Resets the metrics and (through the input hooks) the input."""
        self._live.run(self._scaffold.local_init_op)
        for hook in self._hooks:
            hook.after_create_session(self._session, None)


def without_tuning(input_fn: InputFn) -> InputFn:
    """`input_fn` whose dataset runs without tf.data's autotuning and graph rewrites.

    Every evaluation re-initialises the input's iterator. Replacing an
    autotuned one waited on its tuning thread: 1 to 27 s at random for five
    CIFAR-10 batches that take 0.3 s; and each initialisation optimised the
    dataset's graph anew: a third of a taxi evaluation's 0.1 s
    (benchmarks/RESULTS.md, benchmark 6).
    """
    def wrapped() -> tf.data.Dataset:
        result = input_fn()
        if isinstance(result, tf.data.Dataset):
            options = tf.data.Options()
            options.autotune.enabled = False
            options.experimental_optimization.apply_default_optimizations = False
            result = result.with_options(options)
        return result
    return wrapped


# (`SessionRunHook` is TensorFlow's, `Any` to mypy: hence the ignore.)
class PrepareInBackground(tf.compat.v1.train.SessionRunHook):  # type: ignore[misc]
    """Starts `Evaluator.prepare_in_background` once the training session exists.

    Not before: building the training graph holds Python's lock, while the
    training session's first runs (graph optimisation, the first steps)
    leave it free for the evaluation graph's construction.
    """

    def __init__(self, evaluator: Evaluator) -> None:
        self._evaluator = evaluator

    def after_create_session(self, session: tf.compat.v1.Session,
                             coord: tf.train.Coordinator) -> None:
        del session, coord  # unused
        self._evaluator.prepare_in_background()


class Clock:
    """Seconds this process spent evaluating, and how many evaluations it ran."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.count = 0
        self.last_secs = 0.0  # the latest evaluation's
        self.running_since: Optional[float] = None  # when the one under way started

    @contextlib.contextmanager
    def timing(self) -> Iterator[None]:
        start = self.running_since = time.time()
        try:
            yield
        finally:
            self.running_since = None
            self.last_secs = time.time() - start
            self.seconds += self.last_secs
            self.count += 1


class Snapshot:
    """The training graph's weights, saved in memory (TensorFlow's `ram://` file system).

    Build it while the training graph is open (a hook's `begin`). Its saver
    is not sharded: the save runs in this task (on parameter servers a
    sharded save would write each shard into the memory of the ps that holds
    it), reading the variables wherever they live. Each save replaces the
    last one.
    """

    def __init__(self) -> None:
        self._saver = tf.compat.v1.train.Saver(sharded=False, max_to_keep=1)
        self.path = 'ram://estimator_trainers/%d/weights' % id(self)

    def save(self, session: tf.compat.v1.Session) -> str:
        """Saves the weights `session` holds; returns the checkpoint prefix."""
        prefix: str = self._saver.save(session, self.path, write_meta_graph=False,
                                       write_state=False)
        return prefix


# (`SessionRunHook` is TensorFlow's, `Any` to mypy: hence the ignore.)
class InTrainingEvaluation(tf.compat.v1.train.SessionRunHook):  # type: ignore[misc]
    """Evaluates the weights the chief holds at multiples of the evaluation interval.

    Training pauses while it evaluates, so which multiples are evaluated is
    the plan's decision (`checkpoints.CheckpointPlan.evaluation_due`); this
    hook measures what it needs. Building the evaluation graph is not counted:
    the final evaluation needs it anyway. The step a run (re)starts at holds
    no training of this run, and the step target is left to the driver's
    final evaluation. A run that is stopping (a stop signal) evaluates no more.
    """

    def __init__(self, evaluator: Evaluator, train_steps: int,
                 checkpoint_plan: CheckpointPlan,
                 stop_requested: Optional[StopRequested] = None) -> None:
        """Args:
          evaluator: the process's `Evaluator`.
          train_steps: the step target (evaluated by the driver).
          checkpoint_plan: `checkpoints.CheckpointPlan` with the cadence and budget.
          stop_requested: callable, true once a stop signal arrived: an evaluation
            under way is dropped and training stops.
        """
        self._stop_requested = stop_requested
        self._evaluator = evaluator
        self._train_steps = train_steps
        self._plan = checkpoint_plan
        self._every = checkpoint_plan.eval_every_steps

    def begin(self) -> None:
        self._step_fetches = run_steps.step_fetches()
        self._snapshot = Snapshot()
        self._global_step = tf.compat.v1.train.get_global_step()

    def after_create_session(self, session: tf.compat.v1.Session,
                             coord: tf.train.Coordinator) -> None:
        del coord  # unused
        self.start(int(session.run(self._global_step)))

    def before_run(
            self, run_context: tf.estimator.SessionRunContext) -> tf.estimator.SessionRunArgs:
        return tf.compat.v1.train.SessionRunArgs(self._step_fetches)

    def after_run(self, run_context: tf.estimator.SessionRunContext,
                  run_values: tf.estimator.SessionRunValues) -> None:
        step, _ = run_steps.steps_done(run_values.results)
        if self.due(step) and not run_context.stop_requested:
            if self._evaluator.evaluate_weights(run_context.session, self._snapshot,
                                                self._stop_requested) is None:
                run_context.request_stop()
                return
            self.evaluated()

    def start(self, step: int) -> None:
        """Training (re)starts at global step `step`."""
        self._start_step = step
        self._last_multiple = step // self._every
        self._start = time.time()
        self._start_spent = self._evaluator.run_secs
        self._last_end: Optional[float] = None
        self._count = 0

    def due(self, step: int) -> bool:
        """Whether to evaluate the weights held at global step `step`, where a run ended."""
        multiple = step // self._every
        if multiple <= self._last_multiple or step >= self._train_steps:
            return False
        self._last_multiple = multiple
        now = time.time()
        due: bool = self._plan.evaluation_due(
            evaluations=self._count,
            spent_secs=self._evaluator.run_secs - self._start_spent,
            estimate_secs=self._evaluator.last_run_secs,
            elapsed_secs=now - self._start,
            since_last_secs=None if self._last_end is None else now - self._last_end,
            progress=(step - self._start_step) / max(1, self._train_steps - self._start_step),
            preparing=self._evaluator.preparing())
        return due

    def evaluated(self) -> None:
        """An evaluation `due` asked for has ended."""
        self._count += 1
        self._last_end = time.time()


def follow(job_dir: str, evaluate: Callable[[str], Metrics],
           train_steps: int, every_secs: Optional[float] = None,
           poll_secs: float = 1.0) -> Metrics:
    """An evaluator task: evaluates the newest checkpoint each time there is a new one.

    Starts with the first checkpoint after step 0 and ends after evaluating one
    at `train_steps` or beyond. When the chief deletes the checkpoint chosen
    before it is read (`--keep-checkpoint-max` rotation outpacing evaluation),
    it evaluates the newest one instead.

    Args:
      evaluate: function(checkpoint_path) -> metrics, with `global_step`.
      every_secs: start evaluations at least this many seconds apart (None: 0).

    Returns:
      The metrics of the last evaluation.
    """
    evaluated: Optional[str] = None
    waiting_logged = False
    while True:
        path = tf.train.latest_checkpoint(job_dir)
        step = job_dir_lib.checkpoint_step(path) if path else None
        if not step or path == evaluated:
            if not waiting_logged and not evaluated:
                tf.compat.v1.logging.info(
                    'Waiting for the first checkpoint after step 0 in %s', job_dir)
                waiting_logged = True
            time.sleep(poll_secs)
            continue
        start = time.time()
        try:
            metrics = evaluate(path)
        except (ValueError, tf.errors.NotFoundError) as e:
            if not missing_checkpoint(e):
                raise
            tf.compat.v1.logging.warning(
                'Checkpoint %s was deleted before this evaluator read it; evaluating '
                'the newest one instead', path)
            continue
        evaluated = path
        # The step the weights were saved at: in asynchronous training a worker
        # can step between the chief naming the checkpoint and saving it.
        step = int(metrics['global_step'])
        if step >= train_steps:
            tf.compat.v1.logging.info('Exiting evaluation, global_step=%d >= train '
                                      'max_steps=%d', step, train_steps)
            return metrics
        time.sleep(max(0.0, (every_secs or 0) - (time.time() - start)))


def missing_checkpoint(error: Exception) -> Optional[str]:
    """The checkpoint path `error` names, if that checkpoint no longer exists."""
    match = re.search(r'(\S*model\.ckpt-\d+)', str(error))
    if match and not tf.io.gfile.exists(match.group(1) + '.index'):
        return match.group(1)
    return None
