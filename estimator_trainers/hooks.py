"""Session hooks: progress logging and step-aligned checkpoints."""
import time

import tensorflow as tf


class TrainingProgressHook(tf.compat.v1.train.SessionRunHook):
    """Logs step, chosen tensors and examples/sec every N steps.

    Writes `examples_per_sec` and `global_step/sec` to TensorBoard (chief only,
    so workers do not write competing event files). The first interval after a
    (re)start includes graph warm-up and is reported but left out of the
    average.
    """

    def __init__(self, batch_size, every_n_steps, summary_dir=None, collection=None):
        """Creates the hook.

        Args:
          batch_size: examples consumed per step by this task.
          every_n_steps: log at global steps that are multiples of this.
          summary_dir: write `examples_per_sec` summaries here (None: don't).
          collection: graph collection of `progress_<name>` tensors to log
            (loss, learning rate, ...), looked up when the session starts.
        """
        self._collection = collection
        self._batch_size = batch_size
        self._every_n_steps = every_n_steps
        self._summary_dir = summary_dir

    def begin(self):
        self._global_step = tf.compat.v1.train.get_global_step()
        if self._global_step is None:
            raise RuntimeError('TrainingProgressHook needs a global step.')
        tensors = (tf.compat.v1.get_collection(self._collection)
                   if self._collection else [])
        self._tensors = {t.op.name.split('/')[-1][len('progress_'):]: t
                         for t in tensors}
        self._writer = (tf.compat.v1.summary.FileWriterCache.get(self._summary_dir)
                        if self._summary_dir else None)
        self._last_time = None
        self._next_log = None
        self._local_steps = 0
        self._total_time = 0.0
        self._total_steps = 0
        self._intervals = 0

    def before_run(self, run_context):
        fetches = dict(self._tensors, step=self._global_step)
        return tf.compat.v1.train.SessionRunArgs(fetches)

    def after_run(self, run_context, run_values):
        results = run_values.results
        # The global step is read concurrently with the update: +1 is this step.
        step = int(results['step']) + 1
        now = time.time()
        if self._last_time is None:
            self._start_interval(now, step)
            return
        self._local_steps += 1
        if step < self._next_log:
            return
        elapsed = now - self._last_time
        rate = self._local_steps * self._batch_size / elapsed if elapsed > 0 else 0.0
        global_rate = (step - self._last_step) / elapsed if elapsed > 0 else 0.0
        self._intervals += 1
        if self._intervals > 1:
            self._total_time += elapsed
            self._total_steps += self._local_steps
        average = (self._total_steps * self._batch_size / self._total_time
                   if self._total_time > 0 else rate)
        values = ', '.join('%s = %.5g' % (name, results[name])
                           for name in sorted(self._tensors))
        tf.compat.v1.logging.info(
            'step %d: %s (%.1f examples/sec, average %.1f)', step, values, rate, average)
        if self._writer is not None:
            summary = tf.compat.v1.Summary(value=[
                tf.compat.v1.Summary.Value(tag='examples_per_sec', simple_value=rate),
                tf.compat.v1.Summary.Value(tag='global_step/sec',
                                           simple_value=global_rate)])
            self._writer.add_summary(summary, step)
        self._start_interval(now, step)

    def _start_interval(self, now, step):
        self._last_time, self._last_step, self._local_steps = now, step, 0
        self._next_log = step - step % self._every_n_steps + self._every_n_steps


class _AlignedStepTimer(tf.compat.v1.train.SecondOrStepTimer):
    """Triggers at exact multiples of `every_steps`, whatever step it starts at.

    Asynchronous workers can move the global step past a multiple between two
    checks; the next trigger is still the next multiple, not N steps later.
    """

    def update_last_triggered_step(self, step):
        result = super().update_last_triggered_step(step)
        if step is not None:
            self._last_triggered_step = step - step % self._every_steps
        return result


class AlignedCheckpointSaverHook(tf.compat.v1.train.CheckpointSaverHook):
    """CheckpointSaverHook that saves at global steps N, 2N, 3N, ...

    Estimator's own saver counts N steps from wherever training (re)started, so
    a resumed run saves at 1300, 1600, ... for N=300. Passing this hook in the
    train hooks replaces Estimator's default saver (it detects any
    CheckpointSaverHook), and saving listeners such as train_and_evaluate's
    evaluation trigger attach to it as usual.
    """

    def __init__(self, checkpoint_dir, save_steps):
        super().__init__(checkpoint_dir, save_steps=save_steps)
        self._timer = _AlignedStepTimer(every_steps=save_steps)
