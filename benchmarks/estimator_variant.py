"""Runs a trainer's CLI with a code-level lever switched, for the benchmarks.

Levers the command line cannot switch (because the measurements showed them
not worth a flag) are patched in here, so the trainer code stays free of them:

    python -m benchmarks.estimator_variant --lever unfused_batch_norm -- \
        --data-dir D --job-dir J ...
    python -m benchmarks.estimator_variant --trainer taxi \
        --lever free_input -- --train-files T ...
"""
from __future__ import annotations

import argparse
import sys
from typing import Any, Callable, Dict, List, Optional

import tensorflow as tf

from estimator_trainers import cli
from estimator_trainers import registry

from cifar10_estimator import model
from cifar10_estimator import resnet
from taxi_estimator import input as taxi_input


def _unfused_batch_norm() -> None:
    """Batch norm as separate moments/normalise ops instead of one fused kernel."""
    def batch_norm(self: resnet.ResNetCifar10, x: tf.Tensor, name: str) -> tf.Tensor:
        return tf.compat.v1.layers.batch_normalization(
            x, axis=self._channel_axis, momentum=self._decay, epsilon=self._epsilon,
            training=self._is_training, fused=False, name=name)
    # A lever patches the trainer's code (hence the ignore).
    # pylint: disable-next=protected-access
    resnet.ResNetCifar10._batch_norm = batch_norm  # type: ignore[method-assign]


def _gated_gradients() -> None:
    """compute_gradients with TF1's per-op gating (GATE_OP), the trainer's
    default before #33: each op's input gradient waits for its weight gradient."""
    def gradients(optimizer: tf.compat.v1.train.Optimizer, loss: tf.Tensor,
                  variables: Optional[List[tf.Variable]] = None) -> model.GradsAndVars:
        pairs: model.GradsAndVars = optimizer.compute_gradients(
            loss, variables, gate_gradients=tf.compat.v1.train.Optimizer.GATE_OP)
        return pairs
    model._gradients = gradients  # pylint: disable=protected-access


def _free_input() -> None:
    """Taxi training input as 64 prepared batches replayed from memory, so the
    input pipeline costs (almost) nothing: the speed training would have if
    the pipeline were free."""
    make_input_fn = taxi_input.make_input_fn

    def free_input_fn(*args: Any, **kwargs: Any) -> taxi_input.InputFn:
        input_fn = make_input_fn(*args, **kwargs)
        if not kwargs.get('training'):
            return input_fn
        return lambda: input_fn().take(64).cache().repeat()
    taxi_input.make_input_fn = free_input_fn


def _shared_input_pool() -> None:
    """Taxi training input on tf.data's shared thread pool (one thread per core),
    as streamed CSV was before it got threads of its own."""
    taxi_input._private_threads = lambda count: tf.data.Options()  # pylint: disable=protected-access


LEVERS: Dict[str, Callable[[], None]] = {
    'unfused_batch_norm': _unfused_batch_norm,
    'gated_gradients': _gated_gradients,
    'free_input': _free_input,
    'shared_input_pool': _shared_input_pool,
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--trainer', default='cifar10', help='A declared trainer.')
    parser.add_argument('--lever', choices=sorted(LEVERS), action='append', default=[])
    argv = sys.argv[1:]
    split = argv.index('--') if '--' in argv else len(argv)
    args = parser.parse_args(argv[:split])
    for lever in args.lever:
        LEVERS[lever]()
    code: int = cli.main(registry.get(args.trainer), argv[split + 1:])
    return code


if __name__ == '__main__':
    sys.exit(main())
