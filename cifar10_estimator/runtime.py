"""What a CIFAR-10 training task does with TensorFlow (declared in `trainer`).

Checks the TFRecords and batch sizes against the devices, then builds the
`model_fn` (`cifar10_estimator.model`), the TFRecord input functions
(`cifar10_estimator.data`) and a serving signature that takes raw uint8
images.
"""
from __future__ import annotations

import argparse
import dataclasses
from typing import Callable, Dict, Tuple

import tensorflow as tf

from cifar10_estimator import data
from cifar10_estimator import layout
from cifar10_estimator import model
from estimator_trainers import declaration
from estimator_trainers import devices as devices_lib
from estimator_trainers.errors import UserInputError

# What the input check found, for the later steps of a run: the model's
# settings and the example counts of the data set.
_Facts = Tuple[model.HParams, Dict[str, int]]


def check_inputs(data_dir: str, hparams: model.HParams, eval_batch_size: int,
                 validate_files: bool = True) -> Dict[str, int]:
    """Validates data and batch sizes against the devices; returns split counts.

    Raises:
      UserInputError: a missing/corrupt data file or an impossible batch split.
    """
    num_devices = len(hparams.devices)
    if hparams.train_batch_size % num_devices:
        raise UserInputError('--train-batch-size=%d must be divisible by the %d devices'
                             ' (%s)' % (hparams.train_batch_size, num_devices,
                                        ', '.join(hparams.devices)))
    if eval_batch_size % num_devices:
        raise UserInputError('--eval-batch-size=%d must be divisible by the %d devices'
                             % (eval_batch_size, num_devices))
    counts = data.read_metadata(data_dir)
    if counts['eval'] % eval_batch_size:
        raise UserInputError('--eval-batch-size=%d must divide the %d eval examples, so '
                             'every example is evaluated exactly once'
                             % (eval_batch_size, counts['eval']))
    if validate_files:
        for subset in ('train', 'eval'):
            data.validate_subset(data_dir, subset, counts[subset])
    return counts


def memory_estimate(num_layers: int) -> declaration.MemoryEstimate:
    """Rough float32 training memory of a ResNet of `num_layers`.

    Per example: each of the 6n convolutions keeps its output, the batch-norm
    output, the ReLU output and, during the backward pass, a gradient of the
    same size (16x32x32, 32x16x16 or 64x8x8 floats per stage), plus the
    image. Fixed: each 3x3 kernel's weights, gradient and momentum.
    """
    blocks = (num_layers - 2) // 6
    stage_floats = (16 * 32 * 32, 32 * 16 * 16, 64 * 8 * 8)
    per_example = 4 * (4 * 2 * blocks * sum(stage_floats) + 4 * 16 * 32 * 32 + 3 * 3072)
    weights = 2 * blocks * sum(9 * c * c for c in (16, 32, 64))
    return declaration.MemoryEstimate(fixed_bytes=3 * 4 * weights,
                                      bytes_per_example=per_example)


def serving_input_receiver_fn() -> tf.estimator.export.ServingInputReceiver:
    """Serving signature: `images`, uint8 [batch, 32, 32, 3] raw RGB pixels."""
    images = tf.compat.v1.placeholder(
        tf.uint8, [None, layout.HEIGHT, layout.WIDTH, layout.DEPTH], name='images')
    return tf.estimator.export.ServingInputReceiver(
        {'images': tf.cast(images, tf.float32)}, {'images': images})


class Cifar10Runtime(declaration.Runtime[_Facts]):
    """ResNet v1 (6n+2 layers) on CIFAR-10 TFRecords, in towers over local devices."""

    def check(self, args: argparse.Namespace, task: declaration.Task) -> declaration.Plan[_Facts]:
        dist = task.distribution
        mixed_precision: model.Precision = devices_lib.resolve_mixed_precision(
            args.mixed_precision, task.num_gpus)
        tf.compat.v1.logging.info('Mixed precision: %s', devices_lib.describe_mixed_precision(
            args.mixed_precision, task.num_gpus))
        warning = devices_lib.float16_without_gpu_warning(mixed_precision, task.num_gpus)
        if warning:
            tf.compat.v1.logging.warning('%s', warning)
        cluster = task.cluster
        hparams = model.HParams(
            num_layers=args.num_layers, weight_decay=args.weight_decay,
            momentum=args.momentum, learning_rate=args.learning_rate,
            batch_norm_decay=args.batch_norm_decay,
            batch_norm_epsilon=args.batch_norm_epsilon,
            data_format=args.data_format or (
                'channels_first' if task.num_gpus else 'channels_last'),
            # A tf.distribute strategy replicates the model itself: one tower each.
            train_batch_size=task.replica_batch(args.train_batch_size,
                                                '--train-batch-size'),
            devices=task.devices[:1] if dist.builds_strategy else task.devices,
            replicas_in_sync=dist.replicas_in_sync,
            variable_strategy=args.variable_strategy, sync=args.sync,
            num_workers=cluster.num_workers, is_chief=cluster.is_chief,
            cluster_has_ps=cluster.num_ps > 0, mixed_precision=mixed_precision,
            image_summary_steps=args.save_summary_steps * model.IMAGE_SUMMARY_INTERVALS)
        counts = check_inputs(args.data_dir, hparams, args.eval_batch_size,
                              validate_files=not cluster.is_evaluator)
        hparams = dataclasses.replace(hparams, train_examples=counts['train'])
        facts: _Facts = (hparams, counts)
        # SyncReplicasOptimizer: one global step takes every worker's batch (None:
        # the runner's rule).
        per_global_step = (args.train_batch_size * cluster.num_workers
                           if hparams.sync and cluster.num_workers > 1 else None)
        return declaration.Plan(
            train_steps=args.train_steps, examples_per_step=args.train_batch_size,
            facts=facts, train_examples=counts['train'],
            batch_flag='--train-batch-size', memory=memory_estimate(args.num_layers),
            examples_per_global_step=per_global_step)

    def estimator(self, args: argparse.Namespace, task: declaration.Task,
                  plan: declaration.Plan[_Facts],
                  run_config: tf.estimator.RunConfig) -> tf.estimator.Estimator:
        hparams, _ = plan.facts
        return tf.estimator.Estimator(model_fn=model.model_fn, config=run_config,
                                      params={'hparams': hparams})

    def input_fns(self, args: argparse.Namespace, task: declaration.Task,
                  plan: declaration.Plan[_Facts]) -> Tuple[data.InputFn, data.InputFn]:
        hparams, counts = plan.facts
        cluster = task.cluster
        train = data.input_fn(args.data_dir, 'train', hparams.train_batch_size,
                              training=True, count=counts['train'],
                              seed=cluster.input_seed(args.random_seed),
                              distort=args.use_distortion_for_training)
        evaluate = data.input_fn(args.data_dir, 'eval', args.eval_batch_size,
                                 training=False)
        return train, evaluate

    def serving_input_receiver_fn(
            self, args: argparse.Namespace, plan: declaration.Plan[_Facts]
    ) -> Callable[[], tf.estimator.export.ServingInputReceiver]:
        return serving_input_receiver_fn

    def calibration_input_fn(self, args: argparse.Namespace, task: declaration.Task,
                             plan: declaration.Plan[_Facts]) -> data.InputFn:
        hparams, _ = plan.facts
        # Batch norm normalises each tower's share of a training batch.
        return data.calibration_input_fn(
            args.data_dir, max(1, hparams.train_batch_size // len(hparams.devices)))


RUNTIME = Cifar10Runtime()
