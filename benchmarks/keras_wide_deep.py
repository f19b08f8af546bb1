"""The Keras reference for benchmark 3: the taxi wide-and-deep model under `fit`.

The trainer's model in Keras layers, on the trainer's own input_fn (the
same two input tensors, `taxi_estimator.features.model_inputs`, computed on
tf.data's threads): a linear wide side (one zero-initialised weight per
wide id, summed, plus a bias) trained with FTRL, a ReLU DNN of the same
hidden units and dropout on the same deep inputs (z-scores, one-hot payment
type, company embedding: `features.deep_inputs`) trained with Adam, logits
added, sigmoid cross-entropy; the trainer's default learning rates and L2.
Keras' `WideDeepModel` applies the two optimizers. `--steps-per-execution
N` is Keras' many steps per call (its counterpart of the trainer's
`--steps-per-loop`); `--intra-op-threads`/`--inter-op-threads` its thread
pools (the trainer's `--num-intra-threads`/`--num-inter-threads`).

    python -m benchmarks.keras_wide_deep --mode throughput --train-files T \
        --eval-files E --warmup-steps 200 --steps 600 [--steps-per-execution 32]
    python -m benchmarks.keras_wide_deep --mode auc --train-files T \
        --eval-files E --target 0.94 --eval-every 50 --max-steps 3000

print JSON lines (one per evaluation in `auc` mode).
"""
from __future__ import annotations

import argparse
import json
import math
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

import tensorflow as tf

from benchmarks import common
from taxi_estimator import features as features_lib
from taxi_estimator import input as input_lib
from taxi_estimator import model as model_lib
from taxi_estimator import trainer

_DEFAULTS: argparse.Namespace = trainer.TRAINER.parse_args(
    ['--train-files', 'x', '--eval-files', 'x', '--job-dir', 'x'])
# A `_Timer` record: (steps done, wall seconds, process CPU seconds).
Record = Tuple[int, float, float]


# Keras is untyped: its base classes are `Any` to mypy (hence the ignores).
class _Linear(tf.keras.layers.Layer):  # type: ignore[misc]
    """Sum of the weights of the wide ids present (-1: none), plus a bias."""

    def build(self, input_shape: tf.TensorShape) -> None:
        self._weights = self.add_weight('weights', [features_lib.WIDE_BUCKETS, 1],
                                        initializer='zeros')
        self._bias = self.add_weight('bias', [1], initializer='zeros')

    def call(self, inputs: features_lib.Features) -> tf.Tensor:
        return model_lib.linear_logits(inputs[features_lib.WIDE_IDS], self._weights,
                                       self._bias)


class _DeepInputs(tf.keras.layers.Layer):  # type: ignore[misc]
    """The DNN's input (`model.dnn_input`), owning the company embedding."""

    def __init__(self, stats: features_lib.Stats) -> None:
        super().__init__()
        self._stats = stats

    def build(self, input_shape: tf.TensorShape) -> None:
        self._table = self.add_weight(
            'company_embedding', [features_lib.COMPANY_BUCKETS, features_lib.EMBEDDING_DIM],
            initializer=tf.keras.initializers.TruncatedNormal(
                stddev=1 / math.sqrt(features_lib.EMBEDDING_DIM)))

    def call(self, inputs: features_lib.Features) -> tf.Tensor:
        return model_lib.dnn_input(inputs, self._stats, self._table)


def build_model(stats: features_lib.Stats,
                hidden_units: Sequence[int] = tuple(_DEFAULTS.hidden_units),
                steps_per_execution: int = 1) -> tf.keras.Model:
    layers: List[tf.keras.layers.Layer] = [_DeepInputs(stats)]
    for units in hidden_units:
        layers += [tf.keras.layers.Dense(units, activation='relu'),
                   tf.keras.layers.Dropout(_DEFAULTS.dropout_prob)]
    dnn = tf.keras.Sequential(layers + [tf.keras.layers.Dense(1)])
    model = tf.keras.experimental.WideDeepModel(_Linear(), dnn)
    model.compile(
        optimizer=[tf.keras.optimizers.Ftrl(_DEFAULTS.linear_learning_rate,
                                            l2_regularization_strength=model_lib.LINEAR_L2),
                   tf.keras.optimizers.Adam(_DEFAULTS.learning_rate)],
        loss=tf.keras.losses.BinaryCrossentropy(from_logits=True),
        metrics=[tf.keras.metrics.AUC(name='auc', from_logits=True)],
        steps_per_execution=steps_per_execution)
    return model


class _Timer(tf.keras.callbacks.Callback):  # type: ignore[misc]
    """Records (steps done, wall time, process CPU time) after every execution."""

    def __init__(self) -> None:
        super().__init__()
        self.times: List[Record] = []

    def on_train_batch_end(self, batch: int, logs: Optional[Dict[str, Any]] = None) -> None:
        # With steps_per_execution N, called every N steps with the last one's index.
        self.times.append((batch + 1, time.perf_counter(), time.process_time()))


class _EvaluateEvery(tf.keras.callbacks.Callback):  # type: ignore[misc]
    """Evaluates AUC once per N steps, prints it, stops at the target AUC."""

    def __init__(self, eval_data: tf.data.Dataset, eval_batches: int, every: int,
                 target: float) -> None:
        super().__init__()
        self._eval_data = eval_data
        self._eval_batches = eval_batches
        self._every = every
        self._target = target
        self._evaluated = 0

    def on_train_batch_end(self, batch: int, logs: Optional[Dict[str, Any]] = None) -> None:
        step = batch + 1
        if step // self._every <= self._evaluated // self._every:
            return
        self._evaluated = step
        auc = self.model.evaluate(self._eval_data, steps=self._eval_batches, verbose=0,
                                  return_dict=True)['auc']
        print(json.dumps({'step': step, 'auc': auc}), flush=True)
        if auc >= self._target:
            self.model.stop_training = True


def throughput(times: Sequence[Record], batch_size: int, warmup_steps: int,
               interval: int) -> Dict[str, Any]:
    """Steady-state figures from `_Timer` records of (steps, wall, CPU): the
    window from the first record at `warmup_steps` on to the last, and its
    fastest interval of `interval` steps (`common.fastest_interval`, as the
    trainer's progress lines give them). With steps_per_execution N a record
    comes every N steps: an interval ends at the first record at or past its
    end, so intervals that are multiples of N are exact."""
    steady = [t for t in times if t[0] >= warmup_steps]
    marks = [steady[0]]
    for record in steady[1:]:
        if record[0] >= marks[-1][0] + interval:
            marks.append(record)
    start, end = steady[0], steady[-1]
    examples = (end[0] - start[0]) * batch_size
    return {'examples_per_sec': examples / (end[1] - start[1]),
            'examples_per_cpu_sec': examples / (end[2] - start[2]),
            **common.fastest_interval(marks, batch_size)}


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--train-files', nargs='+', required=True)
    parser.add_argument('--eval-files', nargs='+', required=True)
    parser.add_argument('--batch-size', type=int, default=128)
    parser.add_argument('--mode', choices=('throughput', 'auc'), required=True)
    parser.add_argument('--warmup-steps', type=int, default=200, help='throughput')
    parser.add_argument('--steps', type=int, default=600, help='throughput')
    parser.add_argument('--interval', type=int, default=None,
                        help='throughput: steps per interval for the fastest-interval '
                             'figures (default: --steps, one interval)')
    parser.add_argument('--target', type=float, default=0.94, help='auc')
    parser.add_argument('--eval-every', type=int, default=50, help='auc')
    parser.add_argument('--max-steps', type=int, default=3000, help='auc')
    parser.add_argument('--steps-per-execution', type=int, default=1)
    parser.add_argument('--intra-op-threads', type=int, default=0,
                        help='Threads inside one op (0: TensorFlow\'s default, one per core).')
    parser.add_argument('--inter-op-threads', type=int, default=0,
                        help='Ops run in parallel (0: TensorFlow\'s default).')
    args = parser.parse_args(argv)
    tf.config.threading.set_intra_op_parallelism_threads(args.intra_op_threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.inter_op_threads)

    train = input_lib.scan(args.train_files, '--train-files')
    model = build_model(train.stats, steps_per_execution=args.steps_per_execution)
    train_data = input_lib.make_input_fn(train.files, args.batch_size, training=True)()
    if args.mode == 'throughput':
        timer = _Timer()
        model.fit(train_data, epochs=1, steps_per_epoch=args.warmup_steps + args.steps,
                  verbose=0, callbacks=[timer])
        print(json.dumps(throughput(timer.times, args.batch_size, args.warmup_steps,
                                    args.interval or args.steps)))
    else:
        evaluation = input_lib.scan(args.eval_files, '--eval-files')
        eval_data = input_lib.make_input_fn(evaluation.files, args.batch_size,
                                            training=False)()
        eval_batches = -(-evaluation.rows // args.batch_size)
        model.fit(train_data, epochs=1, steps_per_epoch=args.max_steps, verbose=0,
                  callbacks=[_EvaluateEvery(eval_data, eval_batches, args.eval_every,
                                             args.target)])


if __name__ == '__main__':
    main()
