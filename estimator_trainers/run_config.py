"""`tf.estimator.RunConfig`, its `tf.distribute` strategy and session settings,
built from flag values and the task's `distribution.Distribution`."""
from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, ContextManager, Optional

import tensorflow as tf
from tensorflow.python.distribute import multi_worker_util  # pylint: disable=g-direct-tensorflow-import
from tensorflow.python.eager import context  # pylint: disable=g-direct-tensorflow-import
from tensorflow.tsl.protobuf import coordination_config_pb2  # pylint: disable=g-direct-tensorflow-import

from estimator_trainers import cluster as cluster_lib
from estimator_trainers import distribution as distribution_lib
from estimator_trainers.errors import Error
from estimator_trainers.errors import first_line
from estimator_trainers.errors import TaskFailure
from estimator_trainers.errors import TransientFailure

if TYPE_CHECKING:
    from estimator_trainers.checkpoints import CheckpointPlan

# `faults.Termination.inside_tensorflow`: `(what, deadline_secs, deadline_error)` ->
# the guard a call that waits inside TensorFlow runs in.
InsideTensorFlow = Callable[[str, Optional[float], Optional[Error]], ContextManager[None]]
# A Keras optimizer's `gradient_aggregator`: (gradient, variable) pairs, reduced.
GradsAndVars = list[tuple[Optional[tf.Tensor], tf.Variable]]


def session_config(num_intra_threads: int = 0, num_inter_threads: int = 0,
                   log_device_placement: bool = False,
                   num_cpu_devices: Optional[int] = None) -> tf.compat.v1.ConfigProto:
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


def configure_threads(num_intra_threads: int = 0, num_inter_threads: int = 0) -> bool:
    """Sizes TensorFlow's process-wide thread pools to the `--num-*-threads` flags.

    Call it before any TensorFlow op runs. The kernels' intra-op pool belongs
    to the process: the first op that runs (a data check, say) creates it from
    the eager context's settings, and every Session shares it whatever its
    ConfigProto asks for, so `session_config` alone left `--num-intra-threads`
    without effect on the kernels. Once TensorFlow is running the pools stay
    as they are; returns whether they were configured.
    """
    try:
        tf.config.threading.set_intra_op_parallelism_threads(
            num_intra_threads or os.cpu_count() or 1)
        tf.config.threading.set_inter_op_parallelism_threads(num_inter_threads)
    except RuntimeError:  # TensorFlow is running already (a caller in this process)
        return False
    return True


def make_run_config(job_dir: str, *, keep_checkpoint_max: int = 5,
                    random_seed: Optional[int] = None,
                    session: Optional[tf.compat.v1.ConfigProto] = None,
                    distribution: Optional[distribution_lib.Distribution] = None,
                    train_distribute: Optional[tf.distribute.Strategy] = None,
                    max_worker_delay_secs: Optional[int] = None) -> tf.estimator.RunConfig:
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
      distribution: `distribution.Distribution` of this task.
      train_distribute: the strategy `train_distribute(distribution)`
        built, which the runner does before any TensorFlow op runs.
      max_worker_delay_secs: cap on worker i's start-up delay
        (`distribution.max_worker_delay_secs`; None: TensorFlow's 60 s).
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
        experimental_max_worker_delay_secs=max_worker_delay_secs)
    return _with_device_filters(config)


def from_flags(args: argparse.Namespace,
               distribution: Optional[distribution_lib.Distribution] = None,
               checkpoint_plan: Optional[CheckpointPlan] = None,
               num_cpu_devices: Optional[int] = None,
               train_distribute: Optional[tf.distribute.Strategy] = None,
               train_steps: Optional[int] = None) -> tf.estimator.RunConfig:
    """`make_run_config` with the values of the shared flag groups; `train_steps`
    (the run's step target) sizes the default worker start-up delay."""
    return make_run_config(
        args.job_dir, keep_checkpoint_max=checkpoint_plan.keep_max if checkpoint_plan else 5,
        random_seed=args.random_seed,
        session=session_config(args.num_intra_threads, args.num_inter_threads,
                               args.log_device_placement,
                               num_cpu_devices=num_cpu_devices),
        distribution=distribution, train_distribute=train_distribute,
        max_worker_delay_secs=distribution_lib.max_worker_delay_secs(
            distribution.max_worker_delay_secs if distribution else None, train_steps))


def _with_device_filters(config: tf.estimator.RunConfig) -> tf.estimator.RunConfig:
    """Limits a between-graph task's session to the ps tasks and itself.

    RunConfig sets these device filters only when it is given no session
    config. Without them every chief/worker session spans the whole cluster:
    creating one waits until every other worker is up (a restarted chief
    waits for workers that may have finished), and closing one calls workers
    that may be gone.
    """
    if (not config.cluster_spec or config.session_config is None
            or getattr(config, '_distribute_coordinator_mode', None)
            or config.task_type not in cluster_lib.TRAINING_ROLES):
        return config
    own = '/job:' + config.task_type
    if config.task_type == cluster_lib.WORKER:
        own += '/task:%d' % config.task_id
    session = tf.compat.v1.ConfigProto()
    session.CopyFrom(config.session_config)
    session.device_filters[:] = ['/job:ps', own]
    return config.replace(session_config=session)


def train_distribute(
        distribution: distribution_lib.Distribution,
        log: Optional[Callable[[str], None]] = None,
        inside_tensorflow: Optional[InsideTensorFlow] = None) -> Optional[tf.distribute.Strategy]:
    """The `train_distribute` strategy for RunConfig of `distribution`, or None.

    Built on demand because a multi-worker strategy reads TF_CONFIG and
    configures the process's collective ops when created: call it after
    `cluster.export_tf_config` and before anything starts TensorFlow's
    runtime (running an op, listing logical devices).

    Creating `multi_worker_mirrored` waits inside TensorFlow, holding the
    interpreter lock, until every peer joins its collective set-up: no
    signal handler and no thread of this process runs meanwhile. So the
    peers are waited for first, in Python (`distribution.wait_for_peers`,
    listening on this task's own port meanwhile so they can see it too), and the call
    runs in `inside_tensorflow(what, deadline_secs, deadline_error)`
    (`faults.Termination.inside_tensorflow`), which ends the task on a
    signal, or when a peer that was up never joins within
    `peer_timeout_secs` (TensorFlow itself would wait forever).

    Args:
      log: callable taking one line, for progress while waiting for peers.
      inside_tensorflow: see above (default: the call runs unguarded).

    Raises:
      TransientFailure: a peer never accepted connections, or the peers were
        reachable but the set-up failed (retryable: `errors`).
      UserInputError: this task's own port is taken.
    """
    if not distribution.builds_strategy:
        return None
    if distribution.strategy == distribution_lib.MIRRORED:
        on_gpus = all('gpu' in d.lower() for d in distribution.devices)
        # Collective all-reduce between CPU devices can deadlock in a
        # graph session on few cores; reducing on one device cannot.
        return tf.distribute.MirroredStrategy(
            list(distribution.devices),
            cross_device_ops=None if on_gpus else tf.distribute.ReductionToOneDevice())
    say: Callable[[str], None] = log or (lambda line: None)
    distribution_lib.wait_for_peers(distribution, say, listen=True)
    peers = ', '.join('%s at %s' % peer for peer in distribution.peers)
    say('Setting up multi_worker_mirrored with %s (from TF_CONFIG; up to '
        '--peer-timeout-secs=%g)' % (peers, distribution.peer_timeout_secs))
    guard = (inside_tensorflow or _unguarded)(
        'waiting inside TensorFlow for the collective set-up of multi_worker_mirrored '
        'with %s' % peers, distribution.peer_timeout_secs,
        TaskFailure('%s: the collective set-up of multi_worker_mirrored with %s (from '
                    'TF_CONFIG) did not complete within %gs; did one of them die? '
                    '(--peer-timeout-secs)'
                    % (distribution.label, peers, distribution.peer_timeout_secs),
                    flag='--peer-timeout-secs'))
    configure_coordination(distribution)
    try:
        with guard:
            return tf.compat.v1.distribute.experimental.MultiWorkerMirroredStrategy()
    except RuntimeError as e:
        raise RuntimeError(
            'multi_worker_mirrored must be set up before TensorFlow starts its '
            'runtime: build the RunConfig before running any TensorFlow op or '
            'listing logical devices (%s)' % e) from e
    except tf.errors.OpError as e:
        raise TransientFailure(
            '%s: the collective set-up of multi_worker_mirrored with %s (from '
            'TF_CONFIG) failed: %s; did one of them die? (--peer-timeout-secs)'
            % (distribution.label, peers, first_line(e)),
            flag='--peer-timeout-secs') from None


# The coordination service's heartbeat timeout is --peer-timeout-secs, and at least
# this: the tasks of a finished job leave within it, however loaded their machines.
MIN_HEARTBEAT_TIMEOUT_SECS = 60
# A day at most (the end-of-job barrier's own bound, `training.END_BARRIER_SECS`).
MAX_HEARTBEAT_TIMEOUT_SECS = 24 * 3600


def heartbeat_timeout_secs(peer_timeout_secs: float) -> float:
    """The coordination service's heartbeat timeout for `--peer-timeout-secs`."""
    return min(max(peer_timeout_secs, MIN_HEARTBEAT_TIMEOUT_SECS),
               MAX_HEARTBEAT_TIMEOUT_SECS)


def configure_coordination(distribution: distribution_lib.Distribution) -> None:
    """Configures the coordination service multi_worker_mirrored starts, as it would
    (in the chief, over the chief and the workers of TF_CONFIG), but with a heartbeat
    timeout of `heartbeat_timeout_secs`.

    TensorFlow's default is 10 s, with a heartbeat every 5 s, and the tasks of
    a finished job leave the end-of-job barrier (`training._end_together`) at
    once but exit seconds apart (interpreter teardown, seconds more on a
    loaded machine). A chief still alive 10 s after a worker's last heartbeat
    declared it failed ("heartbeat timeout", "Coordination agent is set to
    ERROR", collectives aborted); a worker still alive at its next heartbeat
    after the chief had gone logged the failed heartbeat. Nothing in a
    finished job takes a heartbeat interval, half the timeout, to leave. A
    peer that dies while training is still found at once by the collectives'
    own failed calls, and one that stops answering within
    `--peer-timeout-secs` (`distribution.watch_peers`).
    """
    spec = tf.distribute.cluster_resolver.TFConfigClusterResolver().cluster_spec()
    jobs = [coordination_config_pb2.CoordinatedJob(name=job, num_tasks=spec.num_tasks(job))
            for job in (cluster_lib.CHIEF, cluster_lib.WORKER) if job in spec.jobs]
    context.context().configure_coordination_service(
        service_type='standalone',
        service_leader=multi_worker_util.coordination_leader(spec),
        coordinated_jobs=jobs,
        heartbeat_timeout_in_ms=int(heartbeat_timeout_secs(
            distribution.peer_timeout_secs) * 1000))


@contextlib.contextmanager
def _unguarded(what: str, deadline_secs: Optional[float],
               deadline_error: Optional[Error]) -> Iterator[None]:
    del what, deadline_secs, deadline_error
    yield


def dense_gradient_aggregator(
        config: tf.estimator.RunConfig) -> Optional[Callable[[GradsAndVars], GradsAndVars]]:
    """A Keras optimizer `gradient_aggregator` for RunConfig `config`'s strategy, or None.

    Under TF 2.15's multi_worker_mirrored in an Estimator graph, all-reducing
    sparse gradients (IndexedSlices from embeddings and sparse linear columns)
    fails with "Shape mismatch in the collective instance" as soon as workers'
    slices differ in length. This aggregator makes them dense first and sums
    them like any other gradient. None elsewhere, keeping Keras' default
    (sparse gradients stay sparse, which matters with parameter servers).
    """
    if not isinstance(config.train_distribute,
                      tf.compat.v1.distribute.experimental.MultiWorkerMirroredStrategy):
        return None

    def all_reduce_dense(grads_and_vars: GradsAndVars) -> GradsAndVars:
        pairs = [(tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g, v)
                 for g, v in grads_and_vars]
        present = [g for g, _ in pairs if g is not None]
        reduced = iter(tf.distribute.get_replica_context().all_reduce(
            tf.distribute.ReduceOp.SUM, present) if present else ())
        return [(None if g is None else next(reduced), v) for g, v in pairs]

    return all_reduce_dense
