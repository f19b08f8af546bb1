"""The TensorBoard tag set every trainer writes, defined once.

Runs (directories) of a job-dir, as TensorBoard lists them:

- `.` (the job-dir): training, written by the chief: `loss`, `accuracy` (and
  `auc` for binary classifiers) of the training batches, `learning_rate/<optimizer>`
  for each optimizer, `examples_per_sec` and `global_step/sec` of the whole
  job, `examples_per_sec/average` (the run summary's figure, at the last
  step), input `images` (CIFAR, rarely), the graph and the HParams of the run.
- `eval`: each evaluated checkpoint: `loss`, `accuracy`, `auc`, ... under the
  same names as in training, so both runs share one chart per metric.
- `workers/<task>` (distributed runs only): `examples_per_sec/worker`, the
  examples each training task (`chief`, `worker-0`, ...) consumes per second,
  each task writing its own directory.

The model_fns call `training_metrics` and `learning_rate`; the training
driver writes throughput and the HParams. Summary ops are created at the top
of the graph: a name scope would prefix their tags.
"""
import contextlib
import weakref
from typing import Callable, Iterator, Optional

import tensorflow as tf

from estimator_trainers import run_steps

LOSS = 'loss'
LEARNING_RATE = 'learning_rate'
EXAMPLES_PER_SEC = 'examples_per_sec'
# The job's examples/sec of the run summary and the run record, at the last step.
EXAMPLES_PER_SEC_AVERAGE = 'examples_per_sec/average'
GLOBAL_STEPS_PER_SEC = 'global_step/sec'
WORKER_EXAMPLES_PER_SEC = 'examples_per_sec/worker'
IMAGES = 'images'
# graph -> {name: tensor} of the progress line (not a graph collection: those
# are serialised into every checkpoint's meta graph, and names are not tensors).
_PROGRESS: weakref.WeakKeyDictionary[tf.Graph, dict[str, tf.Tensor]] = (
    weakref.WeakKeyDictionary())
# graph -> summaries that a hook of the model_fn writes (kept out of SUMMARIES).
_HOOK_SUMMARIES: weakref.WeakKeyDictionary[tf.Graph, list[tf.Tensor]] = (
    weakref.WeakKeyDictionary())
# graph -> boolean tensor: its batch metrics are computed only where true.
_DUE: weakref.WeakKeyDictionary[tf.Graph, Optional[tf.Tensor]] = weakref.WeakKeyDictionary()


def log_progress(name: str, tensor: tf.Tensor) -> None:
    """Adds `tensor` to the values the progress line shows every N steps."""
    _PROGRESS.setdefault(tf.compat.v1.get_default_graph(), {})[name] = tensor


def progress_values() -> dict[str, tf.Tensor]:
    """{name: tensor} that `log_progress` added to the default graph."""
    return dict(_PROGRESS.get(tf.compat.v1.get_default_graph(), {}))


def training_metrics(loss: tf.Tensor, **metrics: tf.Tensor) -> None:
    """Summaries and progress-log values of the training batches.

    `loss` is logged only: Estimator writes the `loss` summary itself.
    `metrics` maps tag (`accuracy`, `auc`) to a scalar tensor of the batch.
    """
    log_progress(LOSS, loss)
    for name, value in sorted(metrics.items()):
        tf.compat.v1.summary.scalar(name, value)
        log_progress(name, value)


def hook_summaries(graph: Optional[tf.Graph] = None) -> list[tf.Tensor]:
    """Summaries of `graph` that a model_fn's hook fetches itself (`input_images`)."""
    return list(_HOOK_SUMMARIES.get(graph or tf.compat.v1.get_default_graph(), ()))


@contextlib.contextmanager
def batch_metrics_when(due: Optional[tf.Tensor]) -> Iterator[None]:
    """Within it, the batch metrics of the default graph (`batch_accuracy`,
    `batch_auc`, `when_due`) are computed only where the boolean tensor `due`
    is true (None: always).

    The steps loop's body: only its last step's batch metrics are read
    after the loop (`steps_loop`), and the batch AUC alone took ~13% of a
    taxi step. Elsewhere they are 0.
    """
    graph = tf.compat.v1.get_default_graph()
    _DUE[graph] = due
    try:
        yield
    finally:
        _DUE.pop(graph, None)


def when_due(compute: Callable[[], tf.Tensor]) -> tf.Tensor:
    """`compute()`, a float32 scalar batch metric; under `batch_metrics_when`
    only when due (else 0). For a model_fn's own batch metrics."""
    due = _DUE.get(tf.compat.v1.get_default_graph())
    if due is None:
        return compute()
    return tf.cond(due, compute, lambda: tf.constant(0.0))


def batch_accuracy(labels: tf.Tensor, classes: tf.Tensor) -> tf.Tensor:
    """Accuracy of the training batch, for `training_metrics(accuracy=...)`.

    In its own name scope: a bare `accuracy` op would take the summary's name.
    """
    with tf.name_scope('batch_metrics'):
        return when_due(lambda: tf.reduce_mean(tf.cast(
            tf.equal(classes, tf.cast(labels, tf.int64)), tf.float32)))


def learning_rate(rate: tf.Tensor, optimizer: str) -> None:
    """`learning_rate/<optimizer>` (e.g. `dnn_adam`): one chart per optimizer."""
    name = LEARNING_RATE + '/' + optimizer
    tf.compat.v1.summary.scalar(name, rate)
    log_progress(name, rate)


def input_images(images: tf.Tensor, output_dir: str, every_steps: int,
                 max_images: int = 3) -> 'RareSummaryHook':
    """A chief-only hook writing `max_images` input images every `every_steps`.

    The image summary is kept out of the merged summaries Estimator writes
    every `--save-summary-steps`: images are large, so they are written rarely.

    Args:
      images: float [batch, height, width, channels] in [0, 255], as trained on.
    """
    with tf.name_scope('input_images'):
        pixels = tf.cast(tf.clip_by_value(images[:max_images], 0, 255), tf.uint8)
    summary = tf.compat.v1.summary.image(IMAGES, pixels, max_outputs=max_images,
                                         collections=[])
    _HOOK_SUMMARIES.setdefault(summary.graph, []).append(summary)
    return RareSummaryHook(summary, output_dir, every_steps)


# (TensorFlow's classes are `Any` to mypy: strict mode refuses them as a base.)
class RareSummaryHook(tf.compat.v1.train.SessionRunHook):  # type: ignore[misc]
    """Writes `summary_op` after the second run of a session, then every `every_steps`.

    Not a second `SummarySaverHook`: that writes a "session start" event, and
    TensorBoard drops what was written at or after the step of such an event
    before it; the progress hook writes one at the first run. A run may
    train several steps (`--steps-per-loop`): the step comes from
    `run_steps`, and the summary is fetched for the run that reaches the
    next multiple.
    """

    def __init__(self, summary_op: tf.Tensor, output_dir: str, every_steps: int) -> None:
        self._summary_op = summary_op
        self._output_dir = output_dir
        self._every_steps = every_steps

    def begin(self) -> None:
        self._writer = tf.compat.v1.summary.FileWriterCache.get(self._output_dir)
        self._step_fetches = run_steps.step_fetches()
        self._next_step: Optional[int] = None
        self._last_step: Optional[int] = None

    def before_run(self, run_context: tf.compat.v1.train.SessionRunContext
                   ) -> tf.compat.v1.train.SessionRunArgs:
        fetches = {'step': self._step_fetches}
        if (self._next_step is not None and self._last_step is not None
                and run_steps.run_end(self._last_step) >= self._next_step):
            fetches['summary'] = self._summary_op
        return tf.compat.v1.train.SessionRunArgs(fetches)

    def after_run(self, run_context: tf.compat.v1.train.SessionRunContext,
                  run_values: tf.compat.v1.train.SessionRunValues) -> None:
        step, _ = run_steps.steps_done(run_values.results['step'])
        if self._next_step is None:
            self._next_step = step + 1
        elif 'summary' in run_values.results:
            self._writer.add_summary(run_values.results['summary'], step)
            self._next_step = step - step % self._every_steps + self._every_steps
        self._last_step = step


def merged_training_summaries() -> Optional[tf.Tensor]:
    """The training graph's merged summary op (None: no summaries).

    Scaffold's own choice: the `SUMMARY_OP` collection, else all summaries
    merged. A model trained in a loop (`steps_loop`) puts the merge of the
    summaries' after-loop copies there.
    """
    return tf.compat.v1.train.Scaffold.get_or_default(
        'summary_op', tf.compat.v1.GraphKeys.SUMMARY_OP, tf.compat.v1.summary.merge_all)


def batch_auc(labels: tf.Tensor, probabilities: tf.Tensor) -> tf.Tensor:
    """Area under the ROC curve of one batch (0.5 when it holds a single class).

    The share of (positive, negative) pairs the model ranks right, ties half.
    """
    with tf.name_scope('batch_auc'):
        return when_due(lambda: _auc_of_pairs(labels, probabilities))


def _auc_of_pairs(labels: tf.Tensor, probabilities: tf.Tensor) -> tf.Tensor:
    labels = tf.reshape(tf.cast(labels, tf.bool), [-1])
    scores = tf.reshape(tf.cast(probabilities, tf.float32), [-1])
    positive = tf.boolean_mask(scores, labels)
    negative = tf.boolean_mask(scores, tf.logical_not(labels))
    diff = positive[:, None] - negative[None, :]
    wins = (tf.reduce_sum(tf.cast(diff > 0, tf.float32))
            + 0.5 * tf.reduce_sum(tf.cast(tf.equal(diff, 0), tf.float32)))
    pairs = tf.cast(tf.size(diff), tf.float32)
    return tf.where(pairs > 0, wins / tf.maximum(pairs, 1.0), 0.5)

