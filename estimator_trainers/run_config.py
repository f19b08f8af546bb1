"""`tf.estimator.RunConfig` and session settings built from flag values."""
import os

import tensorflow as tf


def session_config(num_intra_threads=0, num_inter_threads=0,
                   log_device_placement=False, num_cpu_devices=None):
    """A ConfigProto with thread pools sized to this machine.

    Args:
      num_intra_threads: threads inside one op; 0 means one per CPU core.
      num_inter_threads: ops in parallel; 0 lets TensorFlow choose.
      log_device_placement: log where each op runs.
      num_cpu_devices: expose this many logical CPU devices (multi-device
        towers on a CPU-only machine); None keeps one.
    """
    config = tf.compat.v1.ConfigProto(
        allow_soft_placement=True,
        log_device_placement=log_device_placement,
        intra_op_parallelism_threads=num_intra_threads or os.cpu_count() or 1,
        inter_op_parallelism_threads=num_inter_threads)
    config.gpu_options.allow_growth = True
    if num_cpu_devices and num_cpu_devices > 1:
        config.device_count['CPU'] = num_cpu_devices
    return config


def make_run_config(job_dir, *, keep_checkpoint_max=5, random_seed=None, session=None,
                    distribution=None, train_distribute=None):
    """RunConfig for `job_dir`, which never saves checkpoints or summaries by itself.

    Checkpoints are the `checkpoints.CheckpointPlan`'s saver hook's alone (step
    aligned, on the tasks the plan names), so RunConfig's own savers are off;
    training summaries are the training driver's progress hook's (at exact
    multiples of `--save-summary-steps`, with any `--steps-per-loop`), so
    Estimator's summary hook is off too.
    TF_CONFIG is read by RunConfig itself: call `cluster.export_tf_config`
    first. Estimator's own loss/steps-per-second logging is off: the training
    driver's progress hook logs one line with loss, learning rate and
    examples/sec.

    Args:
      keep_checkpoint_max: recent checkpoints to keep (the plan's `keep_max`).
      distribution: `distribution.Distribution` of this task (None:
        TensorFlow's worker start-up delays).
      train_distribute: the strategy `distribution.make_train_distribute()`
        built, which the runner does before any TensorFlow op runs.
    """
    config = tf.estimator.RunConfig(
        model_dir=job_dir,
        tf_random_seed=random_seed,
        save_summary_steps=0,
        save_checkpoints_steps=None,
        save_checkpoints_secs=None,
        keep_checkpoint_max=keep_checkpoint_max,
        log_step_count_steps=None,
        session_config=session,
        train_distribute=train_distribute,
        experimental_max_worker_delay_secs=(
            distribution.max_worker_delay_secs if distribution else None))
    return _with_device_filters(config)


def from_flags(args, distribution=None, checkpoint_plan=None, num_cpu_devices=None,
               train_distribute=None):
    """`make_run_config` with the values of the shared flag groups."""
    return make_run_config(
        args.job_dir, keep_checkpoint_max=checkpoint_plan.keep_max if checkpoint_plan else 5,
        random_seed=args.random_seed,
        session=session_config(args.num_intra_threads, args.num_inter_threads,
                               args.log_device_placement,
                               num_cpu_devices=num_cpu_devices),
        distribution=distribution, train_distribute=train_distribute)


def _with_device_filters(config):
    """Limits a between-graph task's session to the ps tasks and itself.

    RunConfig sets these device filters only when it is given no session
    config. Without them every chief/worker session spans the whole cluster:
    creating one waits until every other worker is up (a restarted chief
    waits for workers that may have finished), and closing one calls workers
    that may be gone.
    """
    if (not config.cluster_spec or config.session_config is None
            or getattr(config, '_distribute_coordinator_mode', None)
            or config.task_type not in ('chief', 'master', 'worker')):
        return config
    own = '/job:' + config.task_type
    if config.task_type == 'worker':
        own += '/task:%d' % config.task_id
    session = tf.compat.v1.ConfigProto()
    session.CopyFrom(config.session_config)
    session.device_filters[:] = ['/job:ps', own]
    return config.replace(session_config=session)
