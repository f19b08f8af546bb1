"""The one runner every trainer runs on: the order of a run, with TensorFlow.

`cli.main` parses a trainer's flags without TensorFlow and calls `run`, which
owns the order of everything else; each step is where it is for a reason:

1. The cluster is read from `TF_CONFIG` / `CLUSTER_SPEC` and written back in
   normalised form, because `tf.estimator.RunConfig` reads `TF_CONFIG` itself;
   then stop signals are taken over (`faults.Termination`), so that SIGTERM,
   Ctrl-C or SIGHUP end the task wherever it is from here on.
2. TensorFlow's thread pools are sized to the flags, then devices and the
   distribution strategy are resolved, and the strategy is built, before any
   TensorFlow op runs (reading data included): the first op fixes the
   process's pools, and `multi_worker_mirrored` must configure collectives
   first, once its peers accept connections.
3. A parameter server stops here and serves variables; it needs no data.
4. A job-dir another user owns is refused, then the trainer's runtime
   (`declaration.Runtime.check`) validates every input; nothing has been
   written yet.
5. The job-dir: a model that cannot restore its checkpoints is refused, then
   the chief records what the job-dir must remember (`prepare_job_dir`).
6. The checkpoint and evaluation cadence (`checkpoints.plan`) and the
   `RunConfig` are made once, from the flags and the run's length; the task
   waits for its peers, saying so, before TensorFlow's own endless wait.
7. `training.train_and_evaluate` trains, evaluates, exports and summarises;
   the chief records the run's flags for TensorBoard's HParams dashboard and,
   however the session ends once it holds the job-dir, its measurements in
   the job-dir's run record (`recorder`, `run_record`). A seed makes the run
   reproducible (`make_deterministic`).
"""
import argparse
import os
import random
import time
from collections.abc import Mapping
from typing import Any, Optional

import numpy as np
import tensorflow as tf

from estimator_trainers import checkpoints
from estimator_trainers import cluster as cluster_lib
from estimator_trainers import declaration
from estimator_trainers import devices as devices_lib
from estimator_trainers import distribution as distribution_lib
from estimator_trainers import errors
from estimator_trainers import faults
from estimator_trainers import hooks
from estimator_trainers import job_dir as job_dir_lib
from estimator_trainers import lease
from estimator_trainers import resume
from estimator_trainers import startup
from estimator_trainers import run_config
from estimator_trainers import run_record
from estimator_trainers import recorder as recorder_lib
from estimator_trainers import training
from estimator_trainers.evaluation import Metrics


def run(trainer: declaration.Trainer, args: argparse.Namespace) -> Optional[Metrics]:
    """Runs one task of `trainer`'s job with parsed `args`, in the documented order.

    Returns:
      The final evaluation metrics on the chief, else None.
    """
    started = time.time()
    # The start-up decisions read the environment as it was given: the
    # normalised TF_CONFIG exported next has no evaluator count to read.
    environ = dict(os.environ)
    cluster = cluster_lib.load_cluster(environ)
    cluster_lib.export_tf_config(cluster)
    # From here a stop signal ends the task wherever it is. A parameter server
    # waits inside TensorFlow: it ends at once.
    # A task other than the chief stopped after the chief finished ends normally;
    # `cluster` is the one the start-up decisions settle on when it is asked.
    termination = faults.Termination(
        cluster.task_label, _log, quick_exit_secs=0 if cluster.is_ps else None,
        serves=cluster.is_ps, chief_finished=(
            None if cluster.is_chief or not cluster.is_distributed else lambda: _chief_finished(
                args.job_dir, lease.cluster_id(cluster), started))).install()
    with termination.ending_run():
        run_config.configure_threads(args.num_intra_threads, args.num_inter_threads)
        task, steps_per_loop = _task(trainer, args, environ, termination)
        cluster = task.cluster
        if cluster.is_ps:
            config = run_config.from_flags(args, task.distribution)
            training.serve_parameters(config)
            return None

        runtime = trainer.load_runtime()
        faults.check_buckets(_path_flags(args), args.storage_timeout_secs)
        job_dir_lib.check_owner(args.job_dir)
        plan = runtime.check(args, task)
        _check_batch(plan, task)
        with faults.guarded_run(args.job_dir, cluster, log=_log,
                                lease_timeout_secs=args.lease_timeout_secs):
            recorder = recorder_lib.Recorder(args, task, started,
                                             job_id=lease.cluster_id(cluster))
            with recorder.recording_failures(termination.job_ended), termination.stop_wins():
                return _train(trainer, runtime, args, task, plan, termination, recorder,
                              steps_per_loop)


def _train(trainer: declaration.Trainer, runtime: declaration.Runtime[Any],
           args: argparse.Namespace, task: declaration.Task, plan: declaration.Plan[Any],
           termination: faults.Termination, recorder: recorder_lib.Recorder,
           steps_per_loop: int) -> Optional[Metrics]:
    """Steps 5 to 7 of `run`, on a job-dir this task may write (the runtime's facts
    are its own: `Any` here, only handed back to it)."""
    cluster = task.cluster
    if args.random_seed is not None:
        make_deterministic(args.random_seed)
    params = trainer.model_params(args)
    resume.check_model_params(args.job_dir, params, write=False)
    if cluster.is_chief:  # it restores them; nothing has been written yet
        resume.check_checkpoints(args.job_dir)
        resume.check_model_params(args.job_dir, params)  # recorded if absent
        runtime.prepare_job_dir(args, task, plan)

    checkpoint_plan = checkpoints.plan(
        args.job_dir, cluster, task.distribution,
        every_steps=args.checkpoint_num_steps, train_steps=plan.train_steps,
        default_steps=trainer.checkpoint_steps, keep_max=args.keep_checkpoint_max,
        eval_every_steps=args.eval_every_steps, eval_every_secs=args.eval_frequency_secs)
    config = run_config.from_flags(
        args, task.distribution, checkpoint_plan,
        num_cpu_devices=len(task.devices) if not task.num_gpus else None,
        train_distribute=task.train_distribute, train_steps=plan.train_steps)
    distribution_lib.wait_for_peers(task.distribution, _log)
    watch = distribution_lib.watch_peers(task.distribution)
    tf.compat.v1.logging.debug('%d examples per step on this task (progress lines: '
                               'step/target)', plan.examples_per_step)
    train_input_fn, eval_input_fn = runtime.input_fns(args, task, plan)
    loop = training.LoopSettings.from_flags(
        args, train_steps=plan.train_steps, examples_per_step=plan.examples_per_step,
        examples_per_global_step=examples_per_global_step(plan, task),
        steps_per_loop=steps_per_loop)
    try:
        return training.train_and_evaluate(
            runtime.estimator(args, task, plan, config), loop, cluster, checkpoint_plan,
            train_input_fn=train_input_fn, eval_input_fn=eval_input_fn,
            serving_input_receiver_fn=(runtime.serving_input_receiver_fn(args, plan)
                                       if trainer.exports else None),
            extra_hooks=[termination.hook(checkpoint_plan.stop_save_dir,
                                          save_needs=task.distribution.peers)] + (
                [hooks.CallAtEndHook(watch.stop)] if watch else []),
            started=recorder.started, recorder=recorder,
            calibration_input_fn=(runtime.calibration_input_fn(args, task, plan)
                                  if trainer.precise_batch_norm and args.precise_batch_norm
                                  else None),
            stop_requested=termination.requested.is_set)
    except hooks.Diverged as e:
        raise _divergence_failure(e, trainer, task, checkpoint_plan) from None


def _divergence_failure(diverged: hooks.Diverged, trainer: declaration.Trainer,
                        task: declaration.Task,
                        checkpoint_plan: checkpoints.CheckpointPlan) -> errors.TaskFailure:
    """The one line for a run that diverged: where, the checkpoint a rerun resumes
    from (no checkpoint that is not finite is saved), and which flag to lower."""
    rates = sorted(action.option_strings[-1] for action in trainer.make_parser()._actions  # pylint: disable=protected-access
                   if action.dest.endswith('learning_rate'))
    hint = 'lower %s' % ' or '.join(rates) if rates else 'lower the learning rate'
    label = '' if task.cluster.task_label == 'local' else '%s: ' % task.cluster.task_label
    good = (faults.last_good_checkpoint(checkpoint_plan.directory)
            if task.cluster.is_chief and checkpoint_plan.directory else None)
    # With parameter servers another task may have diverged the shared variables
    # before this task's first step: only a task training alone (or in lockstep)
    # can blame the checkpoint it resumed from.
    if diverged.at_start and diverged.start_step and not task.cluster.num_ps:
        return errors.TaskFailure(
            '%s%s, at the first step from the checkpoint it resumed from, %s: its '
            'variables do not train; it was saved by a run that diverged: move it '
            '(and its line in the checkpoint file) away to resume from an earlier '
            'one, or use a new --job-dir, and %s' % (label, diverged, good, hint))
    kept = ''
    if task.cluster.is_chief:
        kept = ('; the latest checkpoint stays %s, the last whose variables gave a '
                'finite loss, and a rerun resumes from it' % good if good else
                '; no checkpoint was saved')
    return errors.TaskFailure('%s%s%s; %s' % (label, diverged, kept, hint))


def _chief_finished(job_dir: str, job_id: str, started: float) -> Optional[str]:
    """`at step N` once the chief of job `job_id` recorded its success in the
    job-dir's run record after this task `started`, else None."""
    session = run_record.chief_succeeded(job_dir, job_id, started)
    return None if session is None else 'at step %s' % session['steps']['to']


def _path_flags(args: argparse.Namespace) -> list[tuple[str, str]]:
    """(flag, value) of every string flag value (gs:// paths among them)."""
    pairs: list[tuple[str, str]] = []
    for dest, value in sorted(vars(args).items()):
        for item in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(item, str):
                pairs.append(('--' + dest.replace('_', '-'), item))
    return pairs


def make_deterministic(seed: int) -> None:
    """`--random-seed` means the same run: seeded Python and NumPy, deterministic ops.

    With TensorFlow's op determinism, ops use deterministic algorithms (or
    raise where they have none) and tf.data runs stateful map functions in
    order; the trainers' input functions seed their shuffles and use
    stateless random augmentation keyed by the seed and the batch, so they
    keep their parallelism. The graph-level seed is RunConfig's.
    """
    random.seed(seed)
    np.random.seed(seed % 2 ** 32)
    tf.config.experimental.enable_op_determinism()


def _log(line: str) -> None:
    tf.compat.v1.logging.info(line)


def _check_batch(plan: declaration.Plan[Any], task: declaration.Task) -> None:
    """Refuses a step larger than the training set or than the memory available."""
    if plan.train_examples is not None and plan.examples_per_step > plan.train_examples:
        raise errors.UserInputError(
            '%s=%d is larger than the %d training examples; a step may not use an '
            'example twice' % (plan.batch_flag, plan.examples_per_step,
                               plan.train_examples), flag=plan.batch_flag)
    if task.num_gpus:
        tf.compat.v1.logging.debug('Memory: not estimated for GPUs')
        return
    # The estimate is said at DEBUG; the console hears of memory when it is short.
    faults.check_memory(plan.memory, plan.examples_per_step, plan.batch_flag,
                        tf.compat.v1.logging.debug)


def examples_per_global_step(plan: declaration.Plan[Any], task: declaration.Task) -> int:
    """Examples the whole job trains on per global step (job-wide examples/sec).

    Asynchronous tasks each add their own steps; under multi_worker_mirrored
    every training task contributes its batch to each step.
    """
    if plan.examples_per_global_step:
        return plan.examples_per_global_step
    if task.distribution.every_worker_saves:
        return plan.examples_per_step * task.cluster.num_workers
    return plan.examples_per_step


def _task(trainer: declaration.Trainer, args: argparse.Namespace, environ: Mapping[str, str],
          termination: faults.Termination) -> tuple[declaration.Task, int]:
    """`(Task, steps per loop)` of this task (given `environ`, the process
    environment at start), before any TensorFlow op runs.

    The decisions are `startup.decide`'s (the cloud tools make the same ones
    for every replica before a job is submitted); the cluster is exported
    again when a decision renamed a task. An all-reduce strategy waits for
    its peers first (`wait_for_peers`), and its set-up runs inside
    `termination.inside_tensorflow`.
    """
    decided = startup.decide(trainer, args, environ, visible_gpus=devices_lib.gpu_count(),
                             cpu_devices=devices_lib.cpu_devices())
    for note in decided.notes:
        _log(note)
    cluster_lib.export_tf_config(decided.cluster)
    dist = decided.distribution
    return declaration.Task(cluster=decided.cluster, distribution=dist, devices=decided.devices,
                            num_gpus=decided.num_gpus,
                            train_distribute=run_config.train_distribute(
                                dist, _log, inside_tensorflow=termination.inside_tensorflow)
                            ), decided.steps_per_loop
