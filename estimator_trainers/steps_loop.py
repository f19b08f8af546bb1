"""Many training steps per `Session.run`: an in-graph loop over the input iterator.

`--steps-per-loop N` is TPUEstimator's `iterations_per_loop` for CPU/GPU
Estimators. A small model's step pays a per-call overhead (Python,
`Session.run`, the hooks) besides its ops; running N steps in one call pays
it once (the taxi model: ~1.3x the examples per CPU-second,
benchmarks/RESULTS.md). `wrap` turns any Estimator (a canned one included)
into one whose training graph is

    while i < N and step < target and (i == 0 or step is at no boundary):
        features, labels = iterator.get_next()
        the trainer's model_fn(features, labels, TRAIN)   # its train_op
        i, step = i + 1, global_step

The construction, and why:

- The trainer's whole model_fn is called once, inside the loop body, as
  TPUEstimator does. TF1 variables cannot take an initial value computed in
  a loop, but every variable the trainers create (`get_variable`, Keras
  layers and optimizers, metrics) takes an initializer function, which
  TensorFlow lifts out of the loop (`init_scope`); variable names are those
  of a plain build, so checkpoints restore across N.
- The body reads its own batch from the input iterator (`wrap_input_fn`
  keeps it per graph), so a run consumes exactly one batch per step. It
  reads it on the step's own thread (`_next_batch`).
- `parallel_iterations=1` and the loop variables depending on the train op
  make the steps strictly sequential: step i+1 reads the weights step i wrote.
- The loop ends at every multiple of the run's boundaries (checkpoint,
  progress and summary intervals) and at the step target, reading the real
  global step in the graph, so checkpoints, evaluations, summaries and
  progress lines land on the same steps as with N=1; a resumed run at an
  unaligned step first runs to the next multiple.
- Tensors the hooks need from the last step (the loss, the training
  summaries, those a model_fn's hook fetches (`summaries.hook_summaries`),
  the progress values) cannot be fetched from inside a loop: each is copied into
  a local (unsaved) variable at every step and read after the loop; the
  model_fn's own hooks have their fetches mapped to those copies. The batch
  metrics (`summaries.batch_accuracy`, `batch_auc`) are computed at the last
  step only, where this task alone moves the global step (it knows that step
  in advance): every other step's would be overwritten unread. Hooks of
  the training driver learn the step a run ended at and how many steps it
  ran from `run_steps`, with or without a loop.

Strategies that replicate the model_fn (`mirrored`, `multi_worker_mirrored`)
cannot run it inside a loop: they train one step per run, and
`distribution.steps_per_loop` refuses more in one line.
"""
from __future__ import annotations

import contextlib
import logging
import os
import warnings
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Optional

import tensorflow as tf
from tensorflow.python.data.util import structure  # pylint: disable=g-direct-tensorflow-import
from tensorflow.python.ops import gen_dataset_ops  # pylint: disable=g-direct-tensorflow-import

from estimator_trainers import run_steps
from estimator_trainers import summaries

if TYPE_CHECKING:
    from estimator_trainers.declaration import InputFn

# graph -> the iterator `wrap_input_fn` made.
_ITERATORS: weakref.WeakKeyDictionary[tf.Graph, tf.compat.v1.data.Iterator] = (
    weakref.WeakKeyDictionary())
# An Estimator model_fn: (features, labels, mode, config) -> EstimatorSpec.
ModelFn = Callable[..., tf.estimator.EstimatorSpec]
# `tensor.ref()` -> the copy of that tensor read after the loop.
Lifted = dict[object, tf.Tensor]


def settings(steps_per_loop: int, *, train_steps: int,
             every_steps: Iterable[Optional[int]] = ()) -> run_steps.Settings:
    """`run_steps.Settings` of a run to `train_steps` that must stop at multiples of
    `every_steps`."""
    return run_steps.Settings(steps_per_loop=steps_per_loop, target=train_steps,
                              intervals=tuple(sorted({int(e) for e in every_steps if e})))


def wrap_input_fn(input_fn: InputFn) -> Callable[[], object]:
    """`input_fn` (returning a `tf.data.Dataset`) with its iterator kept for the loop.

    A dataset without threads of its own gets a private pool of one thread
    per core (the size of tf.data's shared pool), so that the loop can read
    batches synchronously (`_next_batch`).
    """
    def looped_input_fn() -> object:
        dataset = input_fn()
        if not isinstance(dataset, tf.data.Dataset):
            raise ValueError('--steps-per-loop needs a training input_fn that returns a '
                             'tf.data.Dataset, got %r' % (dataset,))
        # In graph mode options() warns that it shows only what this graph set:
        # all that a dataset the input_fn just built can have.
        with warnings.catch_warnings():
            warnings.simplefilter('ignore', UserWarning)
            private_pool = dataset.options().threading.private_threadpool_size
        if not private_pool:
            options = tf.data.Options()
            options.threading.private_threadpool_size = os.cpu_count() or 1
            dataset = dataset.with_options(options)
        iterator = tf.compat.v1.data.make_initializable_iterator(dataset)
        _ITERATORS[tf.compat.v1.get_default_graph()] = iterator
        # Estimator hands these to the model_fn, which reads its own batches.
        return iterator.get_next()
    return looped_input_fn


def wrap(estimator: tf.estimator.Estimator,
         loop_settings: run_steps.Settings) -> tf.estimator.Estimator:
    """An Estimator training `estimator`'s model_fn in the loop of `loop_settings`.

    Evaluation and prediction call the model_fn as before. With more than one
    step per loop, train it with an input_fn from `wrap_input_fn`. With one,
    the graph is the model_fn's own, plus the global step read after its train
    op, so that hooks learn the exact step each run made (`run_steps`;
    without it a read runs concurrently with the update, and a hook sees the
    step before or after it). Not under a `tf.distribute` strategy, which
    calls the model_fn per replica.
    """
    public_model_fn = estimator.model_fn

    def model_fn(*args: object) -> tf.estimator.EstimatorSpec:
        with _without_repeated_lines():  # the wrapping Estimator logs the call
            return public_model_fn(*args)

    # Only this task moves the global step: one step per iteration.
    alone: bool = estimator.config.num_worker_replicas <= 1

    def looped_model_fn(features: object, labels: object, mode: str,
                        config: tf.estimator.RunConfig) -> tf.estimator.EstimatorSpec:
        if mode != tf.estimator.ModeKeys.TRAIN:
            return model_fn(features, labels, mode, config)
        if loop_settings.steps_per_loop == 1:
            return _one_step(model_fn(features, labels, mode, config), loop_settings)
        return _build(model_fn, config, loop_settings, alone)

    with _without_repeated_lines():  # the wrapped Estimator said 'Using config: ...'
        return tf.estimator.Estimator(model_fn=looped_model_fn, config=estimator.config)


class _DropRepeatedLines(logging.Filter):
    """Drops the lines Estimator logs that the wrapping Estimator logs as well."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not (message in ('Calling model_fn.', 'Done calling model_fn.')
                    or message.startswith('Using config:'))


@contextlib.contextmanager
def _without_repeated_lines() -> Iterator[None]:
    logger, dropping = tf.get_logger(), _DropRepeatedLines()
    logger.addFilter(dropping)
    try:
        yield
    finally:
        logger.removeFilter(dropping)


def _one_step(spec: tf.estimator.EstimatorSpec,
              loop_settings: run_steps.Settings) -> tf.estimator.EstimatorSpec:
    """`spec` of one step per run, with the global step read after it for the hooks."""
    with tf.name_scope('steps_loop/'), tf.control_dependencies([spec.train_op]):
        step_after = tf.compat.v1.train.get_global_step().read_value()
    run_steps.register(run_steps.Loop(
        loop_settings, tf.constant(1, name='steps_loop/one'), step_after, {}))
    return spec


def _build(model_fn: ModelFn, config: tf.estimator.RunConfig, loop_settings: run_steps.Settings,
           alone: bool) -> tf.estimator.EstimatorSpec:
    graph = tf.compat.v1.get_default_graph()
    iterator = _ITERATORS.get(graph)
    if iterator is None:
        raise ValueError('--steps-per-loop: the training input_fn was not wrapped '
                         'with steps_loop.wrap_input_fn')
    global_step = tf.compat.v1.train.get_global_step()
    built: dict[str, Any] = {}  # what `body` built: spec, progress, copied

    def cond(i: tf.Tensor, step: tf.Tensor) -> tf.Tensor:
        more = tf.logical_and(i < loop_settings.steps_per_loop, step < loop_settings.target)
        if not loop_settings.intervals:
            return more
        # The first step of a run always runs: the run starts at a boundary.
        unaligned = [tf.not_equal(step % every, 0) for every in loop_settings.intervals]
        return tf.logical_and(more, tf.logical_or(tf.equal(i, 0), tf.reduce_all(unaligned)))

    def body(i: tf.Tensor, step: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        # Where this task alone moves the global step, a step ends the loop iff
        # `cond` fails on (i + 1, step + 1): only that step's batch metrics are
        # read after the loop, so only it computes them. (Returned: the global
        # step read again after this step's update.)
        last = tf.logical_not(cond(i + 1, step + 1)) if alone else None
        batch = _next_batch(iterator)
        features, labels = batch if isinstance(batch, (tuple, list)) else (batch, None)
        with summaries.batch_metrics_when(last):
            spec = model_fn(features, labels, tf.estimator.ModeKeys.TRAIN, config)
        progress = summaries.progress_values()
        to_copy = _tensors_to_copy(spec, progress, tf.compat.v1.get_default_graph())
        mirrors = [_mirror(t) for t in to_copy]
        assigns = [m.assign(t, read_value=False) for m, t in zip(mirrors, to_copy)]
        built.update(spec=spec, progress=progress, copied=list(zip(to_copy, mirrors)))
        with tf.control_dependencies([spec.train_op] + assigns):
            return i + 1, global_step.read_value()

    with tf.name_scope('steps_loop/'):
        start = global_step.read_value()
    # The body is a function graph (control flow v2). name='': its ops are
    # named as in a plain build (summary tags, Keras variable names).
    iterations, step_after = tf.compat.v1.while_loop(
        cond, body, [tf.constant(0), start], parallel_iterations=1,
        back_prop=False, name='')
    spec = built['spec']
    with tf.name_scope('steps_loop/'), tf.control_dependencies([iterations, step_after]):
        iterations, step_after = tf.identity(iterations), tf.identity(step_after)
        lifted = {_ref(t): tf.identity(mirror.read_value()) for t, mirror in built['copied']}
        train_op = tf.group(iterations, step_after, name='train_op')
    loss = lifted[_ref(tf.convert_to_tensor(spec.loss))]
    for name, tensor in sorted(built['progress'].items()):
        summaries.log_progress(name, lifted[_ref(tensor)])
    _merge_summaries(lifted, loss)
    loop = run_steps.Loop(loop_settings, iterations, step_after, lifted)
    run_steps.register(loop)
    hooks = [_IteratorInitializerHook(_ITERATORS[graph]), _StopAtTargetHook(loop)]
    return tf.estimator.EstimatorSpec(
        tf.estimator.ModeKeys.TRAIN, loss=loss, train_op=train_op,
        training_hooks=hooks + [_outside_fetches(h, loop) for h in spec.training_hooks],
        training_chief_hooks=[_outside_fetches(h, loop)
                              for h in spec.training_chief_hooks],
        scaffold=spec.scaffold)


def _next_batch(iterator: tf.compat.v1.data.Iterator) -> object:
    """The iterator's next element, read on the step's own thread.

    `Iterator.get_next` (IteratorGetNext) is an asynchronous kernel: each
    call hands the read to a background thread, and the rest of the step back
    to the session's, two thread wake-ups a step. On a core left idle, each
    wake-up costs more than the taxi model's ops (the taxi trainer read
    ~1.25x the examples/sec synchronously, ~1.16x per CPU-second:
    benchmarks/RESULTS.md, #33). The synchronous kernel blocks its thread
    until the element is ready, which TensorFlow allows where the dataset's
    work does not need the session's threads: `wrap_input_fn` gives it a
    private pool. (The iterator's resource and flat types are not public;
    TensorFlow is pinned.)
    """
    # pylint: disable=protected-access
    with tf.compat.v1.colocate_with(iterator._iterator_resource):
        flat = gen_dataset_ops.iterator_get_next_sync(
            iterator._iterator_resource, output_types=iterator._flat_tensor_types,
            output_shapes=iterator._flat_tensor_shapes)
    return structure.from_tensor_list(iterator.element_spec, flat)


def _ref(tensor: tf.Tensor) -> object:
    return tensor.ref()


def _tensors_to_copy(spec: tf.estimator.EstimatorSpec, progress: Mapping[str, tf.Tensor],
                     body_graph: tf.Graph) -> list[tf.Tensor]:
    """The loss, the progress values, the training summaries and those of the hooks.

    Only what the body computes: anything else there is computed only when a
    copy needs it.
    """
    tensors = [tf.convert_to_tensor(spec.loss)]
    tensors += [t for _, t in sorted(progress.items())]
    tensors += [t for t in tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.SUMMARIES)
                + summaries.hook_summaries(body_graph) if t.graph is body_graph]
    unique: dict[object, tf.Tensor] = {}
    for t in tensors:
        unique.setdefault(_ref(t), t)
    return list(unique.values())


def _mirror(tensor: tf.Tensor) -> tf.Variable:
    """A local variable (not checkpointed) beside `tensor` that holds its last value."""
    if not tensor.shape.is_fully_defined():
        raise ValueError('--steps-per-loop: %s has no fixed shape (%s); it cannot be read '
                         'after the loop' % (tensor.name, tensor.shape))
    shape, dtype = tensor.shape, tensor.dtype
    with tf.init_scope(), tf.compat.v1.colocate_with(tensor.op), \
            tf.name_scope('steps_loop/last/'):
        return tf.compat.v1.Variable(
            lambda: tf.zeros(shape, dtype), trainable=False, use_resource=True,
            collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES],
            name=tensor.op.name.replace('/', '_'))


def _merge_summaries(lifted: Lifted, loss: tf.Tensor) -> None:
    """The training summaries read after the loop, merged, as Estimator's machinery expects.

    The merged op goes into `SUMMARY_OP`, which Scaffold and the progress
    hook use. The SUMMARIES collection keeps the loop's own tensors:
    Estimator adds a `loss` summary unless it finds an op named `loss` there,
    and the model_fn's `loss` summary holds that name (and tag).
    """
    collection = tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.SUMMARIES)
    merged = [lifted.get(_ref(t), t) for t in collection]
    graph = tf.compat.v1.get_default_graph()
    outside_graph = [t for t in merged if t.graph is graph]
    if len(outside_graph) < len(merged):
        tf.compat.v1.logging.warning(
            '--steps-per-loop: summaries made in a nested function of the model are '
            'not written: %s', ', '.join(t.name for t in merged if t.graph is not graph))
    if not any(t.op.name == 'loss' for t in collection):
        # The name is free (the body's ops are named in its own graph): tag `loss`.
        outside_graph.append(tf.compat.v1.summary.scalar('loss', loss))
    tf.compat.v1.add_to_collection(tf.compat.v1.GraphKeys.SUMMARY_OP,
                                   tf.compat.v1.summary.merge(outside_graph))


# (`SessionRunHook` is TensorFlow's, `Any` to mypy: hence the ignore.)
class _IteratorInitializerHook(tf.compat.v1.train.SessionRunHook):  # type: ignore[misc]
    """Initialises the loop's input iterator (Estimator's dataset hook, for `wrap_input_fn`)."""

    def __init__(self, iterator: tf.compat.v1.data.Iterator) -> None:
        self._initializer = iterator.initializer

    def after_create_session(self, session: tf.compat.v1.Session,
                             coord: tf.train.Coordinator) -> None:
        del coord  # unused
        session.run(self._initializer)


# (`SessionRunHook` is TensorFlow's, `Any` to mypy: hence the ignore.)
class _StopAtTargetHook(tf.compat.v1.train.SessionRunHook):  # type: ignore[misc]
    """Stops after the run that reached the target (Estimator's hook counts one step per run)."""

    def __init__(self, loop: run_steps.Loop) -> None:
        self._loop = loop

    def before_run(
            self, run_context: tf.estimator.SessionRunContext) -> tf.estimator.SessionRunArgs:
        return tf.compat.v1.train.SessionRunArgs(self._loop.step_after)

    def after_run(self, run_context: tf.estimator.SessionRunContext,
                  run_values: tf.estimator.SessionRunValues) -> None:
        if run_values.results >= self._loop.settings.target:
            run_context.request_stop()


def _outside_fetches(hook: tf.estimator.SessionRunHook,
                     loop: run_steps.Loop) -> tf.estimator.SessionRunHook:
    """`hook` (from the model_fn) fetching the after-loop copies of loop tensors."""
    if isinstance(hook, tf.compat.v1.train.CheckpointSaverHook):
        hook._set_steps_per_run(loop.settings.steps_per_loop)  # pylint: disable=protected-access
        return hook
    return _OutsideFetchesHook(hook, loop)


# (`SessionRunHook` is TensorFlow's, `Any` to mypy: hence the ignore.)
class _OutsideFetchesHook(tf.compat.v1.train.SessionRunHook):  # type: ignore[misc]
    """Forwards to a hook, mapping what it fetches from the loop to the copies."""

    def __init__(self, hook: tf.estimator.SessionRunHook, loop: run_steps.Loop) -> None:
        self._hook = hook
        self._loop = loop

    def begin(self) -> None:
        try:
            self._hook.begin()
        except ValueError as e:  # e.g. LoggingTensorHook: its tensors are not in this graph
            raise ValueError(self._refusal('%s' % e)) from e

    def _refusal(self, what: str) -> str:
        return ('%s of the model uses %s, which is computed inside the --steps-per-loop '
                'loop; only the loss, summaries and progress values are read after it. '
                'Use --steps-per-loop 1 with this model.' % (type(self._hook).__name__, what))

    def after_create_session(self, session: tf.compat.v1.Session,
                             coord: tf.train.Coordinator) -> None:
        self._hook.after_create_session(session, coord)

    def before_run(self, run_context: tf.estimator.SessionRunContext
                   ) -> Optional[tf.estimator.SessionRunArgs]:
        args = self._hook.before_run(run_context)
        if args is None:
            return None
        fetches = tf.nest.map_structure(self._map, args.fetches)
        return tf.compat.v1.train.SessionRunArgs(fetches, args.feed_dict, args.options)

    def _map(self, fetch: object) -> object:
        if not isinstance(fetch, (tf.Tensor, tf.Operation)):
            return fetch
        if isinstance(fetch, tf.Tensor):
            lifted = self._loop.outside(fetch)
            if lifted is not None:
                return lifted
        if fetch.graph is not self._loop.graph:
            raise ValueError(self._refusal(fetch.name))
        return fetch

    def after_run(self, run_context: tf.estimator.SessionRunContext,
                  run_values: tf.estimator.SessionRunValues) -> None:
        self._hook.after_run(run_context, run_values)

    def end(self, session: tf.compat.v1.Session) -> None:
        self._hook.end(session)
