"""Synchronous training with parameter servers, ending cleanly.

`tf.compat.v1.train.SyncReplicasOptimizer` aggregates one gradient per worker
into each global step. Its own session hook (`make_session_run_hook`) stalls
at the end of training:

- the chief's token queue runner always waits in the accumulators for the
  next round of gradients, which never comes once training is over; being
  registered with the coordinator, it holds the chief's session close for
  MonitoredSession's 120 s grace period and then logs a CancelledError;
- a worker still waiting for a token when the chief stops handing them out
  waits forever (until its parameter servers are killed under it).

`SyncReplicasHook` runs the same initialisation, but runs the token queue
runner outside the coordinator's join (errors still stop training), and at
the end of training the chief closes the token queue: waiting workers get
OutOfRangeError, which MonitoredSession treats as a normal end of training.
"""
import threading
from typing import Optional

import tensorflow as tf


# (`SessionRunHook` is TensorFlow's, `Any` to mypy: hence the ignore.)
class SyncReplicasHook(tf.compat.v1.train.SessionRunHook):  # type: ignore[misc]
    """Replaces `SyncReplicasOptimizer.make_session_run_hook(is_chief)`."""

    def __init__(self, sync_optimizer: tf.compat.v1.train.SyncReplicasOptimizer,
                 is_chief: bool) -> None:
        self._optimizer = sync_optimizer
        self._is_chief = is_chief
        self._thread: Optional[threading.Thread] = None

    def begin(self) -> None:
        optimizer = self._optimizer
        runner = optimizer.get_chief_queue_runner()  # raises before apply_gradients
        self._ready_op = optimizer.ready_for_local_init_op
        if self._is_chief:
            self._init_op = optimizer.chief_init_op
            self._tokens_op = optimizer.get_init_tokens_op()
            self._sync_op, = runner.enqueue_ops
            self._close_tokens_op = runner.cancel_op
        else:
            self._init_op = optimizer.local_step_init_op

    def after_create_session(self, session: tf.compat.v1.Session,
                             coord: tf.train.Coordinator) -> None:
        missing = session.run(self._ready_op)
        if len(missing):  # pylint: disable=g-explicit-length-test
            raise RuntimeError('SyncReplicasOptimizer: variables not initialised: %s'
                               % ', '.join(v.decode() for v in missing))
        session.run(self._init_op)
        if self._is_chief:
            session.run(self._tokens_op)
            self._thread = threading.Thread(
                target=self._run_sync_op, args=(session, coord),
                name='sync-replicas-queue-runner', daemon=True)
            self._thread.start()

    def _run_sync_op(self, session: tf.compat.v1.Session, coord: tf.train.Coordinator) -> None:
        """Applies each aggregated round and hands out tokens until the session ends."""
        try:
            while not coord.should_stop():
                session.run(self._sync_op)
        except (tf.errors.OutOfRangeError, tf.errors.CancelledError):
            pass  # token queue closed, or session closed while waiting for gradients
        except Exception as e:  # pylint: disable=broad-except
            if not coord.should_stop():
                coord.request_stop(e)

    def end(self, session: tf.compat.v1.Session) -> None:
        if self._is_chief:
            session.run(self._close_tokens_op)
