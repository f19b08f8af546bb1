"""Precise batch norm: population statistics re-estimated before each evaluation.

Batch norm evaluates with moving averages of the batch statistics training
saw, updated with a decay (0.997 in the CIFAR-10 reference). Early in a run
the weights move faster than those averages follow, so an evaluation
normalises with statistics of weights long gone: a default ResNet-44 run
evaluated step 100 at a loss of 9.5e8 while its training batches were fine
(issue #29). "Precise BN" (Wu and Johnson, *Rethinking "Batch" in BatchNorm*, 2021)
re-estimates the statistics with the weights being evaluated: a forward pass
over a few training batches in which every batch-norm layer normalises with
its batch's statistics, averaged equally over the batches, then written into
the moving averages the evaluation (and the export) uses.

The model's part is one function: its `model_fn`, in EVAL mode, calls
`register(build)`, where `build(features)` runs the network once more on
`features`, reusing the evaluation's variables, with batch norm in training
mode and a momentum of 0 (so each update sets the moving averages to that
batch's statistics; layers such as dropout stay in inference mode), and
returns `(update_ops, moving_variables)`. `Calibration` does the rest in the
evaluation graph (`evaluation.Evaluator`): the batches, the averaging, the
assignment. Training itself and its checkpoints are untouched.
"""
from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Optional

import numpy as np
import numpy.typing as npt
import tensorflow as tf

from estimator_trainers import flags

if TYPE_CHECKING:
    from estimator_trainers.declaration import InputFn

# Training batches the statistics are averaged over before each evaluation.
BATCHES: int = flags.PRECISE_BN_BATCHES
# What a model_fn registers: `build(features) -> (update_ops, moving_variables)`.
Builder = Callable[[dict[str, tf.Tensor]], tuple[Sequence[tf.Operation], Sequence[tf.Variable]]]
# graph -> the `build` its model_fn registered (not a graph collection: a
# function there fails to serialize, with a warning, into every meta graph).
_BUILDERS: weakref.WeakKeyDictionary[tf.Graph, Builder] = weakref.WeakKeyDictionary()


def register(build: Builder) -> None:
    """Offers `build(features) -> (update_ops, moving_variables)` to the evaluation.

    Call from a model_fn in EVAL mode; the evaluation graph calls `build` at
    most once, after the model_fn, when precise batch norm is on.
    """
    _BUILDERS[tf.compat.v1.get_default_graph()] = build


@dataclasses.dataclass
class Calibration:
    """The ops of one evaluation graph that re-estimate its batch-norm statistics.

    Attributes:
      iterator: over the training batches (`input_fn`'s dataset).
      update_reads: each moving average's value after one batch's update.
      placeholders: a value for each moving average, and `assign`, which sets them.
      started: the iterator is initialized.
    """
    iterator: tf.compat.v1.data.Iterator
    update_reads: list[tf.Tensor]
    placeholders: list[tf.Tensor]
    assign: tf.Operation
    started: bool = False

    @classmethod
    def build(cls, input_fn: InputFn) -> Optional[Calibration]:
        """The calibration of the default graph's model on `input_fn`'s batches.

        Call after the model_fn built the evaluation, before the graph is
        finalized. Returns None when the model registered no `build` or has no
        batch norm.
        """
        build = _BUILDERS.get(tf.compat.v1.get_default_graph())
        if build is None:
            return None
        with tf.name_scope('precise_batch_norm'):
            dataset = input_fn()
            iterator = tf.compat.v1.data.make_initializable_iterator(dataset)
            features, _ = iterator.get_next()
            update_ops, variables = build(features)
            if not variables:
                return None
            with tf.control_dependencies(update_ops):
                reads = [tf.identity(v.read_value() if hasattr(v, 'read_value') else v)
                         for v in variables]
            placeholders = [tf.compat.v1.placeholder(v.dtype.base_dtype, v.shape)
                            for v in variables]
            assign = tf.group(*[tf.compat.v1.assign(v, p)
                                for v, p in zip(variables, placeholders)])
        return cls(iterator, reads, placeholders, assign)

    def run(self, session: tf.compat.v1.Session, batches: int = BATCHES) -> None:
        """Sets the moving averages to the mean batch statistics of `batches` batches.

        The training input repeats: each call continues where the last one
        stopped.
        """
        if not self.started:
            session.run(self.iterator.initializer)
            self.started = True
        sums: Optional[list[npt.NDArray[Any]]] = None
        for _ in range(batches):
            values = session.run(self.update_reads)
            sums = values if sums is None else [s + v for s, v in zip(sums, values)]
        session.run(self.assign, feed_dict={
            p: np.asarray(s / batches, dtype=p.dtype.as_numpy_dtype)
            for p, s in zip(self.placeholders, sums or [])})
