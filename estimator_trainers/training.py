"""The training driver the runner hands every task to.

`train_and_evaluate` wraps `tf.estimator.train_and_evaluate` with what users
of a job-dir expect: `--train-steps` is a global-step target (a rerun resumes,
a reached target only evaluates), checkpoints land at exact multiples of
`--checkpoint-num-steps`, progress is logged with examples/sec, and the chief
always finishes with an evaluation, a SavedModel export and one summary line.
"""
import dataclasses
import re

import tensorflow as tf

from estimator_trainers import export
from estimator_trainers import hooks
from estimator_trainers import hypertune
from estimator_trainers import job_dir as job_dir_lib
from estimator_trainers.errors import first_line
from estimator_trainers.errors import UserInputError

PROGRESS_COLLECTION = 'estimator_trainers_progress'


def log_progress(name, tensor):
    """Adds `tensor` to the values the progress hook logs every N steps."""
    tf.compat.v1.add_to_collection(PROGRESS_COLLECTION,
                                   tf.identity(tensor, name='progress_' + name))


@dataclasses.dataclass(frozen=True)
class LoopSettings:
    """Training-loop flag values, as plain data.

    Attributes:
      train_steps: global step target.
      eval_steps: batches per evaluation (None: whole eval set).
      eval_frequency_secs: minimum seconds between evaluations while training.
      log_step_count_steps: progress log interval.
      examples_per_step: examples one task consumes per step (for examples/sec).
      hypertune_metric: metric to report to a tuning study, or None.
    """
    train_steps: int
    eval_steps: int = None
    eval_frequency_secs: int = 600
    log_step_count_steps: int = 100
    examples_per_step: int = 1
    hypertune_metric: str = None

    @classmethod
    def from_flags(cls, args, *, train_steps, examples_per_step):
        """Settings from the shared flag groups; the step target is the trainer's."""
        return cls(train_steps=train_steps,
                   eval_steps=args.eval_steps,
                   eval_frequency_secs=args.eval_frequency_secs,
                   log_step_count_steps=args.log_step_count_steps,
                   examples_per_step=examples_per_step,
                   hypertune_metric=args.hypertune_metric)


def serve_parameters(config):
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


def train_and_evaluate(estimator, loop, cluster, checkpoint_plan, *, train_input_fn,
                       eval_input_fn, serving_input_receiver_fn=None, extra_hooks=()):
    """Trains `estimator` to `loop.train_steps`, evaluates and exports.

    Args:
      estimator: a `tf.estimator.Estimator`; its model_dir is the job-dir.
      loop: `LoopSettings`.
      cluster: `cluster.ClusterInfo` of this process.
      checkpoint_plan: `checkpoints.CheckpointPlan` of this task.
      train_input_fn, eval_input_fn: Estimator input functions.
      serving_input_receiver_fn: export signature; None skips the export.
      extra_hooks: more training hooks, run before the checkpoint saver's.

    Returns:
      The final evaluation metrics on the chief, else None.
    """
    estimator = _with_loss_logging(estimator)
    job_dir = estimator.model_dir
    is_chief = cluster.is_chief
    step = job_dir_lib.latest_checkpoint_step(job_dir)
    if is_chief and step is not None and step >= loop.train_steps:
        tf.compat.v1.logging.info(
            'Checkpoint at global step %d in %s already reaches --train-steps=%d; '
            'evaluating only. Raise --train-steps to train further.',
            step, job_dir, loop.train_steps)
        metrics = None
    else:
        if step is not None and not cluster.is_ps:
            tf.compat.v1.logging.info('Resuming from global step %d in %s (target %d)',
                                      step, job_dir, loop.train_steps)
        train_hooks = [hooks.TrainingProgressHook(
            batch_size=loop.examples_per_step, every_n_steps=loop.log_step_count_steps,
            summary_dir=job_dir if is_chief else None,
            collection=PROGRESS_COLLECTION)] + list(extra_hooks) + (
                checkpoint_plan.saver_hooks())
        train_spec = tf.estimator.TrainSpec(
            train_input_fn, max_steps=loop.train_steps, hooks=train_hooks)
        eval_spec = tf.estimator.EvalSpec(
            eval_input_fn, steps=loop.eval_steps, start_delay_secs=0,
            throttle_secs=loop.eval_frequency_secs)
        result = _train_and_evaluate(estimator, train_spec, eval_spec, cluster)
        metrics = result[0] if isinstance(result, tuple) else None

    if not is_chief:
        return None
    if metrics is None:
        metrics = estimator.evaluate(eval_input_fn, steps=loop.eval_steps)
    if serving_input_receiver_fn is not None:
        export.export_saved_model(estimator, job_dir, serving_input_receiver_fn)
    global_step = int(metrics.get('global_step', 0))
    if loop.hypertune_metric:
        hypertune.report_metric(loop.hypertune_metric, metrics, global_step)
    tf.compat.v1.logging.info(
        'Final evaluation at global step %d: %s', global_step,
        ', '.join('%s = %.4f' % (k, float(v)) for k, v in sorted(metrics.items())
                  if k != 'global_step'))
    return metrics


def _train_and_evaluate(estimator, train_spec, eval_spec, cluster):
    """`tf.estimator.train_and_evaluate` with its errors made actionable.

    An evaluator can pick a checkpoint that the chief deletes before it is
    read (`--keep-checkpoint-max` rotation outpacing an evaluation); it then
    starts over with the newest checkpoint instead of failing the job.
    """
    while True:
        try:
            return tf.estimator.train_and_evaluate(estimator, train_spec, eval_spec)
        except (ValueError, tf.errors.NotFoundError) as e:
            path = _missing_checkpoint(e)
            if not (cluster.is_evaluator and path):
                if isinstance(e, ValueError):
                    raise
                _raise_mismatch(e, estimator.model_dir)
            tf.compat.v1.logging.warning(
                'Checkpoint %s was deleted before this evaluator read it; evaluating '
                'the newest one instead', path)
        except tf.errors.InvalidArgumentError as e:
            _raise_mismatch(e, estimator.model_dir)


def _missing_checkpoint(error):
    """The checkpoint path `error` names, if that checkpoint no longer exists."""
    match = re.search(r'(\S*model\.ckpt-\d+)', str(error))
    if match and not tf.io.gfile.exists(match.group(1) + '.index'):
        return match.group(1)
    return None


def _raise_mismatch(error, job_dir):
    if 'checkpoint' in str(error).lower():
        raise UserInputError(
            '--job-dir %s: its checkpoint does not match this model (%s); use '
            'a new --job-dir' % (job_dir, first_line(error))) from None
    raise error


def _with_loss_logging(estimator):
    """The same estimator, with its training loss added to the progress log.

    Works for custom and canned estimators alike (it wraps `model_fn`), so
    every trainer's progress line shows the loss.
    """
    def model_fn(features, labels, mode, config):
        spec = estimator.model_fn(features, labels, mode, config)
        if mode == tf.estimator.ModeKeys.TRAIN:
            log_progress('loss', spec.loss)
        return spec
    return tf.estimator.Estimator(model_fn, config=estimator.config)
