"""What a Keras-model training task does with TensorFlow (declared in `trainer`).

Reads and checks `mnist.npz` (or the CIFAR-10 metadata and TFRecords through
`cifar10_estimator.data`), then builds the Estimator around the Keras model
(`model`), the input functions and a serving signature for raw uint8 images.
"""
from __future__ import annotations

import argparse
import dataclasses
from typing import Any, Callable, Iterator, Optional, Sequence, Tuple

import numpy as np
import numpy.typing as npt
import tensorflow as tf

from cifar10_estimator import data as cifar10_data
from cifar10_estimator import layout
from estimator_trainers import declaration
from estimator_trainers.errors import UserInputError
from keras_estimator import data
from keras_estimator import model
from keras_estimator import trainer


@dataclasses.dataclass(frozen=True)
class _Facts:
    """What the input check found, for the later steps of a run."""
    hparams: model.HParams
    replica_batch: int
    train_count: int
    mnist: Optional[data.Mnist] = None


def serving_input_receiver_fn(
        shape: Sequence[int]) -> Callable[[], tf.estimator.export.ServingInputReceiver]:
    """Serving signature: `images`, uint8 [batch, *shape] raw pixels."""
    def receiver_fn() -> tf.estimator.export.ServingInputReceiver:
        images = tf.compat.v1.placeholder(tf.uint8, [None] + list(shape), name='images')
        return tf.estimator.export.ServingInputReceiver(
            {'images': tf.cast(images, tf.float32)}, {'images': images})
    return receiver_fn


class KerasRuntime(declaration.Runtime[_Facts]):
    """The MNIST CNN and CIFAR-10 MLP of the Keras courses, as an Estimator."""

    def check(self, args: argparse.Namespace, task: declaration.Task) -> declaration.Plan[_Facts]:
        replica_batch: int = task.replica_batch(args.batch_size, '--batch-size')
        hparams = model.HParams(model=args.model, learning_rate=args.learning_rate,
                                momentum=args.momentum, weight_decay=args.weight_decay,
                                batch_norm_momentum=args.batch_norm_momentum)
        mnist = None
        if args.model == trainer.MNIST_CNN:
            mnist = data.read(args.data_dir)
            counts = {'train': len(mnist.y_train), 'eval': len(mnist.y_test)}
        else:
            counts = cifar10_data.read_metadata(args.data_dir)
            if not task.cluster.is_evaluator:
                for subset in ('train', 'eval'):
                    cifar10_data.validate_subset(args.data_dir, subset, counts[subset])
        if replica_batch > counts['train']:
            raise UserInputError('--batch-size=%d is more than the %d training examples '
                                 'in --data-dir %s' % (args.batch_size, counts['train'],
                                                       args.data_dir), flag='--batch-size')
        tf.compat.v1.logging.info('%s: %d training and %d evaluation examples in %s',
                                  args.model, counts['train'], counts['eval'],
                                  args.data_dir)
        return declaration.Plan(train_steps=args.train_steps, examples_per_step=args.batch_size,
                                facts=_Facts(hparams, replica_batch, counts['train'], mnist))

    def estimator(self, args: argparse.Namespace, task: declaration.Task,
                  plan: declaration.Plan[_Facts],
                  run_config: tf.estimator.RunConfig) -> tf.estimator.Estimator:
        return tf.estimator.Estimator(model_fn=model.model_fn, config=run_config,
                                      params={'hparams': plan.facts.hparams})

    def input_fns(self, args: argparse.Namespace, task: declaration.Task,
                  plan: declaration.Plan[_Facts]
                  ) -> Tuple[cifar10_data.InputFn, cifar10_data.InputFn]:
        facts = plan.facts
        seed = task.cluster.input_seed(args.random_seed)
        if facts.mnist is not None:
            mnist = facts.mnist
            return (mnist_input_fn(mnist.x_train, mnist.y_train, facts.replica_batch,
                                   training=True, seed=seed),
                    mnist_input_fn(mnist.x_test, mnist.y_test, args.batch_size,
                                   training=False))
        return (cifar10_data.input_fn(args.data_dir, 'train', facts.replica_batch,
                                      training=True, count=facts.train_count, seed=seed,
                                      distort=False),
                cifar10_data.input_fn(args.data_dir, 'eval', args.batch_size,
                                      training=False))

    def calibration_input_fn(self, args: argparse.Namespace, task: declaration.Task,
                             plan: declaration.Plan[_Facts]) -> Optional[cifar10_data.InputFn]:
        if args.model == trainer.MNIST_CNN:
            return None  # no batch norm
        return cifar10_data.calibration_input_fn(args.data_dir,
                                                 plan.facts.replica_batch)

    def serving_input_receiver_fn(
            self, args: argparse.Namespace, plan: declaration.Plan[_Facts]
    ) -> Callable[[], tf.estimator.export.ServingInputReceiver]:
        if args.model == trainer.MNIST_CNN:
            return serving_input_receiver_fn([data.HEIGHT, data.WIDTH])
        return serving_input_receiver_fn([layout.HEIGHT, layout.WIDTH, layout.DEPTH])


def mnist_input_fn(images: npt.NDArray[np.uint8], labels: npt.NDArray[np.integer[Any]],
                   batch_size: int, *, training: bool,
                   seed: Optional[int] = None) -> cifar10_data.InputFn:
    """An Estimator input_fn of ({'images': float32 [B,28,28]}, int32 labels [B]).

    Training repeats forever in a fresh shuffled order each epoch and drops
    each epoch's last partial batch; evaluation is one pass in order.
    """
    def batches() -> Iterator[Tuple[npt.NDArray[np.uint8], npt.NDArray[np.int32]]]:
        rng = np.random.default_rng(seed)
        count = len(labels)
        while True:
            order = rng.permutation(count) if training else np.arange(count)
            last = count - batch_size + 1 if training else count
            for start in range(0, last, batch_size):
                chosen = order[start:start + batch_size]
                yield images[chosen], labels[chosen].astype(np.int32)
            if not training:
                return

    def _input_fn() -> tf.data.Dataset:
        batch = batch_size if training else None
        dataset = tf.data.Dataset.from_generator(batches, output_signature=(
            tf.TensorSpec([batch, data.HEIGHT, data.WIDTH], tf.uint8),
            tf.TensorSpec([batch], tf.int32)))
        dataset = dataset.map(lambda x, y: ({'images': tf.cast(x, tf.float32)}, y))
        return dataset.prefetch(tf.data.AUTOTUNE)
    return _input_fn


RUNTIME = KerasRuntime()
