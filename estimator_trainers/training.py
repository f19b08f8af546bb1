"""The training driver the runner hands every task to.

`train_and_evaluate` trains with what users of a job-dir expect:
`--train-steps` is a global-step target (a rerun resumes, a reached target
only evaluates), checkpoints land at exact multiples of the plan's interval,
evaluations at multiples of its own (`evaluation`), progress is logged with
an ETA and examples/sec, and the chief always finishes with an evaluation,
a SavedModel export and one summary block (`run_report`). With
`--steps-per-loop N` each Session.run trains up to N steps in an in-graph
loop (`steps_loop`) that ends at all of those steps.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Optional, TypeVar

import tensorflow as tf
from tensorflow.python.eager import context  # pylint: disable=g-direct-tensorflow-import

from estimator_trainers import cluster as cluster_lib
from estimator_trainers import evaluation
from estimator_trainers import export
from estimator_trainers import hooks
from estimator_trainers import hypertune
from estimator_trainers import job_dir as job_dir_lib
from estimator_trainers import resume
from estimator_trainers import run_report
from estimator_trainers import steps_loop
from estimator_trainers.flags import metric_key
from estimator_trainers.errors import first_line
from estimator_trainers.errors import UserInputError

if TYPE_CHECKING:
    from estimator_trainers.checkpoints import CheckpointPlan
    from estimator_trainers.declaration import InputFn, ServingInputFn
    from estimator_trainers.recorder import Recorder

_T = TypeVar('_T')

# The barrier a multi-worker strategy's tasks meet at once done (`_end_together`),
# and how long a worker waits there for the chief's evaluation and export.
END_BARRIER = 'estimator_trainers_end'
END_BARRIER_SECS = 24 * 3600


@dataclasses.dataclass(frozen=True)
class LoopSettings:
    """Training-loop flag values, as plain data.

    Attributes:
      train_steps: global step target.
      eval_steps: batches per evaluation (None: whole eval set).
      log_step_count_steps: progress log interval.
      examples_per_step: examples one task consumes per step (for examples/sec).
      examples_per_global_step: examples the whole job consumes per global
        step (None: `examples_per_step`).
      hypertune_metric: metric to report to a tuning study, or None.
      save_summary_steps: training summary interval.
      steps_per_loop: training steps per Session.run at most.
    """
    train_steps: int
    eval_steps: Optional[int] = None
    log_step_count_steps: int = 100
    examples_per_step: int = 1
    examples_per_global_step: Optional[int] = None
    hypertune_metric: Optional[str] = None
    save_summary_steps: int = 100
    steps_per_loop: int = 1

    @classmethod
    def from_flags(cls, args: argparse.Namespace, *, train_steps: int, examples_per_step: int,
                   examples_per_global_step: Optional[int] = None,
                   steps_per_loop: int = 1) -> LoopSettings:
        """Settings from the shared flag groups; the step target is the trainer's,
        the steps per loop `distribution.steps_per_loop`'s."""
        return cls(train_steps=train_steps,
                   eval_steps=args.eval_steps,
                   log_step_count_steps=args.log_step_count_steps,
                   examples_per_step=examples_per_step,
                   examples_per_global_step=examples_per_global_step,
                   hypertune_metric=args.hypertune_metric,
                   save_summary_steps=args.save_summary_steps,
                   steps_per_loop=steps_per_loop)


def serve_parameters(config: tf.estimator.RunConfig) -> None:
    """A parameter server's whole job: serve variables until the process ends.

    It reads no data and builds no model, so it needs none of the trainer's
    inputs (the reference tutorial's ps tasks needed --data-dir for nothing).
    """
    session = tf.compat.v1.ConfigProto(log_device_placement=False)
    if config.session_config is not None:
        session.gpu_options.CopyFrom(config.session_config.gpu_options)
    server = tf.distribute.Server(config.cluster_spec, job_name=config.task_type,
                                  task_index=config.task_id, config=session,
                                  protocol=config.protocol)
    tf.compat.v1.logging.info('Parameter server %s-%d serving at %s', config.task_type,
                              config.task_id, server.target)
    server.join()


def train_and_evaluate(
        estimator: tf.estimator.Estimator, loop: LoopSettings, cluster: cluster_lib.ClusterInfo,
        checkpoint_plan: CheckpointPlan, *, train_input_fn: InputFn, eval_input_fn: InputFn,
        serving_input_receiver_fn: Optional[ServingInputFn] = None,
        extra_hooks: Sequence[tf.estimator.SessionRunHook] = (),
        started: Optional[float] = None, recorder: Optional[Recorder] = None,
        calibration_input_fn: Optional[InputFn] = None,
        stop_requested: Optional[evaluation.StopRequested] = None
) -> Optional[evaluation.Metrics]:
    """Trains `estimator` to `loop.train_steps`, evaluates and exports.

    Args:
      estimator: a `tf.estimator.Estimator`; its model_dir is the job-dir.
      loop: `LoopSettings`.
      cluster: `cluster.ClusterInfo` of this process.
      checkpoint_plan: `checkpoints.CheckpointPlan` of this task.
      train_input_fn, eval_input_fn: Estimator input functions.
      serving_input_receiver_fn: export signature; None skips the export.
      extra_hooks: more training hooks, run before the checkpoint saver's.
      started: when the run started (`time.time()`), for the wall time.
      recorder: `recorder.Recorder` of this task (None: no run record and
        no HParams session), told how the session went.
      calibration_input_fn: training batches that re-estimate batch norm's
        statistics before each evaluation (`precise_bn`); None: off.
      stop_requested: callable, true once a stop signal arrived (an evaluation
        while training is then dropped).

    Returns:
      The final evaluation metrics on the chief, else None.
    """
    started = started or time.time()
    train_input_fn, eval_input_fn = _in_scope(train_input_fn), _in_scope(eval_input_fn)
    job_dir: str = estimator.model_dir
    clock: evaluation.Clock = recorder.eval_clock if recorder else evaluation.Clock()
    evaluate = evaluation.Evaluator(
        estimator, eval_input_fn, loop.eval_steps, clock,
        calibration_input_fn=_in_scope(calibration_input_fn) if calibration_input_fn else None,
        required_metrics=([('--hypertune-metric', metric_key(loop.hypertune_metric))]
                          if loop.hypertune_metric else []))
    if recorder:
        recorder.evaluator = evaluate

    if cluster.is_evaluator:
        _checked(job_dir, lambda: evaluation.follow(
            job_dir, evaluate, loop.train_steps, checkpoint_plan.eval_every_secs))
        return None

    is_chief = cluster.is_chief
    step = resume.latest_checkpoint_step(job_dir)
    progress: Optional[hooks.TrainingProgressHook] = None
    metrics: Optional[evaluation.Metrics] = None
    if is_chief and step is not None and step >= loop.train_steps:
        tf.compat.v1.logging.info('%s', already_trained(job_dir, step, loop.train_steps))
    else:
        if step is not None:
            tf.compat.v1.logging.info('Resuming from global step %d in %s (target %d)',
                                      step, job_dir, loop.train_steps)
        progress = hooks.TrainingProgressHook(
            examples_per_step=loop.examples_per_step,
            examples_per_global_step=loop.examples_per_global_step,
            every_n_steps=loop.log_step_count_steps, train_steps=loop.train_steps,
            summary_dir=job_dir if is_chief else None,
            worker_dir=(job_dir_lib.worker_dir(job_dir, _worker_label(cluster))
                        if cluster.is_distributed else None),
            save_summary_steps=loop.save_summary_steps, eval_clock=clock,
            alone=cluster.num_workers <= 1)
        # A global step of several tasks' batches: synchronous replicas.
        synchronous = (loop.examples_per_global_step or 0) > loop.examples_per_step
        waiting = ([hooks.WaitForChiefHook(estimator.config, loop.train_steps,
                                           chief_first=not synchronous)]
                   if not is_chief and cluster.num_ps else [])
        divergence = hooks.StopOnDivergenceHook()
        listeners = [divergence.listener] + (
            [recorder.checkpoint_listener()] if recorder else [])
        evaluating: list[tf.estimator.SessionRunHook] = []
        if checkpoint_plan.evaluates_while_training:
            evaluating = [evaluation.InTrainingEvaluation(evaluate, loop.train_steps,
                                                          checkpoint_plan, stop_requested),
                          evaluation.PrepareInBackground(evaluate)]
        # The divergence check runs first: no hook acts on a diverged step.
        train_hooks = (waiting + [divergence, progress] + list(extra_hooks)
                       + (recorder.hooks(progress, loop.train_steps, checkpoint_plan,
                                         step or 0)
                          if recorder else [])
                       + hooks.checkpoint_saver_hooks(checkpoint_plan, listeners,
                                                      loop.steps_per_loop)
                       + evaluating + ([recorder.closing_hook()] if recorder else []))
        trained, train_input_fn = _looped(estimator, train_input_fn, loop, checkpoint_plan)
        if recorder and is_chief:
            hparams_writer = run_report.start_session(job_dir, recorder.args,
                                                      recorder.hparams_facts())
        try:
            try:
                metrics = _checked(job_dir, lambda: _train(
                    trained, cluster, train_input_fn, eval_input_fn, loop, train_hooks,
                    checkpoint_plan.eval_every_secs))
            finally:
                progress.stop_heartbeat()
                if recorder:
                    recorder.training_returned()
        except hooks.Diverged as e:
            divergence.annotated(e)
            unverified: tuple[int, ...] = e.unverified_steps
            if checkpoint_plan.directory and unverified:
                # Saved by this run from variables that then gave a non-finite
                # loss: the last checkpoint seen to train stays the latest.
                resume.drop_checkpoints(checkpoint_plan.directory, unverified)
            raise
        finally:
            # The process must not exit under its preparing thread.
            with (recorder.timing('waiting_for_evaluation_thread_secs') if recorder
                  else contextlib.nullcontext()):
                evaluate.settle()

    if not is_chief:
        if recorder:
            recorder.finished()
        _end_together(estimator, cluster)
        return None
    if metrics is None:
        metrics = _checked(job_dir, lambda: evaluate(None))
    export_dir: Optional[str] = None
    if serving_input_receiver_fn is not None:
        with recorder.timing_export() if recorder else contextlib.nullcontext():
            export_dir = export.export_saved_model(
                estimator, job_dir, serving_input_receiver_fn,
                checkpoint_path=evaluate.evaluated_checkpoint())
    global_step = int(metrics.get('global_step', 0))
    if loop.hypertune_metric:
        hypertune.report_metric(loop.hypertune_metric, metrics, global_step)
    tf.compat.v1.logging.info(
        'Final evaluation at global step %d: %s', global_step,
        ', '.join('%s = %.4f' % (k, float(v)) for k, v in sorted(metrics.items())
                  if k != 'global_step'))
    if progress is not None and recorder:
        with recorder.timing('writing_summaries_secs'):
            run_report.end_session(hparams_writer)
    examples_per_sec = progress.average_examples_per_sec() if progress else None
    if recorder:
        recorder.finished(metrics, export_dir)
        examples_per_sec = recorder.examples_per_sec
    if examples_per_sec and progress is not None:
        run_report.write_average(job_dir, global_step, examples_per_sec)
    tf.compat.v1.logging.info('%s', run_report.summary_block(
        wall_secs=time.time() - started,
        # Where this session started: in an asynchronous job the chief's own
        # first step may come after the workers'.
        first_step=(step or 0) if progress else None,
        last_step=progress.last_step if progress else None,
        train_steps=loop.train_steps,
        examples_per_sec=examples_per_sec,
        eval_clock=clock, metrics=metrics, job_dir=job_dir, export_dir=export_dir,
        tasks=recorder.workers if recorder and cluster.is_distributed else None))
    _end_together(estimator, cluster)
    return metrics


def already_trained(job_dir: str, step: int, train_steps: int) -> str:
    """The line a run says when its job-dir has reached the step target already."""
    return ('job-dir %s is already at step %d (target %d): nothing to train; use a new '
            '--job-dir or a higher --train-steps' % (job_dir, step, train_steps))


def _end_together(estimator: tf.estimator.Estimator, cluster: cluster_lib.ClusterInfo) -> None:
    """Under a multi-worker strategy, the chief and the workers end together.

    Their coordination service (in the chief) counts a task that exits while
    others run as failed: a worker that ended after its last step while the
    chief evaluated and exported was reported 10 s later as `Coordination
    agent is set to ERROR: UNAVAILABLE: ... heartbeat timeout`, after a run
    that succeeded. Every task waits at one barrier once it is done; a chief
    that fails never reaches it, and the service fails the barrier then.
    """
    if (not cluster.is_distributed or estimator.config.train_distribute is None
            or context.context().coordination_service is None):
        return
    try:
        context.context().wait_at_barrier(END_BARRIER, END_BARRIER_SECS * 1000)
    except tf.errors.OpError as e:
        tf.compat.v1.logging.warning('Not every task of the job reached its end: %s',
                                     first_line(e))


def _in_scope(input_fn: InputFn) -> InputFn:
    """`input_fn` building its ops in an `input` name scope (a readable graph)."""
    def scoped() -> tf.data.Dataset:
        with tf.name_scope('input'):
            return input_fn()
    return scoped


def _looped(estimator: tf.estimator.Estimator, train_input_fn: InputFn, loop: LoopSettings,
            checkpoint_plan: CheckpointPlan
            ) -> tuple[tf.estimator.Estimator, Callable[[], object]]:
    """The estimator and input_fn to train with (`steps_loop`).

    With N > 1 steps per run, a run ends at every step some hook acts on:
    checkpoints, evaluations, progress lines, summaries and the target. With
    one, the hooks still learn the exact step of each run, except under a
    `tf.distribute` strategy (which N > 1 refuses).
    """
    if loop.steps_per_loop <= 1 and estimator.config.train_distribute is not None:
        return estimator, train_input_fn
    settings = steps_loop.settings(
        loop.steps_per_loop, train_steps=loop.train_steps,
        every_steps=[checkpoint_plan.every_steps, loop.log_step_count_steps,
                     loop.save_summary_steps]
        + ([checkpoint_plan.eval_every_steps]
           if checkpoint_plan.evaluates_while_training else []))
    if loop.steps_per_loop <= 1:
        return steps_loop.wrap(estimator, settings), train_input_fn
    return (steps_loop.wrap(estimator, settings),
            steps_loop.wrap_input_fn(train_input_fn))


def _worker_label(cluster: cluster_lib.ClusterInfo) -> str:
    """`chief`, `worker-0`, ...: the run name of a task's own throughput."""
    return cluster_lib.CHIEF if cluster.is_chief else cluster.task_label


def _train(estimator: tf.estimator.Estimator, cluster: cluster_lib.ClusterInfo,
           train_input_fn: Callable[[], object], eval_input_fn: InputFn, loop: LoopSettings,
           train_hooks: list[tf.estimator.SessionRunHook],
           eval_every_secs: Optional[float]) -> Optional[evaluation.Metrics]:
    """Trains to the target; returns the final metrics if training produced them.

    A single process trains directly (its evaluations are the plan's listener);
    a cluster task goes through `tf.estimator.train_and_evaluate`, which
    starts its server and waits for its peers (a `master` also evaluates
    there, at most every `eval_every_secs`).
    """
    if not cluster.is_distributed:
        estimator.train(train_input_fn, max_steps=loop.train_steps, hooks=train_hooks)
        return None
    train_spec = tf.estimator.TrainSpec(
        train_input_fn, max_steps=loop.train_steps, hooks=train_hooks)
    eval_spec = tf.estimator.EvalSpec(eval_input_fn, steps=loop.eval_steps,
                                      start_delay_secs=0,
                                      throttle_secs=eval_every_secs or 0)
    result = tf.estimator.train_and_evaluate(estimator, train_spec, eval_spec)
    metrics: Optional[evaluation.Metrics] = result[0] if isinstance(result, tuple) else None
    return metrics


def _checked(job_dir: str, action: Callable[[], _T]) -> _T:
    """`action()`, with a checkpoint that does not fit the model made a user error."""
    try:
        return action()
    except (tf.errors.NotFoundError, tf.errors.InvalidArgumentError) as e:
        if 'checkpoint' in str(e).lower():
            raise UserInputError(
                '--job-dir %s: its checkpoint does not match this model (%s); use '
                'a new --job-dir' % (job_dir, first_line(e))) from None
        raise
