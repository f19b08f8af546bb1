"""The Keras reference for benchmark 1: the same ResNet trained with `model.fit`.

Layer for layer the network of `cifar10_estimator.resnet` (v1, option-A
shortcuts, bias-free 3x3 convolutions with the same initializer, fused batch
norm with the same decay/epsilon, global average pooling, dense logits), the
same loss (mean sparse softmax cross-entropy + weight_decay * sum of l2_loss
over all trainable variables), Momentum 0.9 at learning rate 0.1, and the same
batch and augmentation. It is what a user would write instead of the Estimator,
so the benchmark can put the two side by side.

    python -m benchmarks.keras_resnet --data-dir D --num-layers 44 \
        --source tfrecord --warmup-steps 10 --steps 20

prints one JSON line: {"examples_per_sec": ..., ...}.
"""
from __future__ import annotations

import argparse
import json
import time
from typing import Any, Dict, List, Literal, Optional, Sequence, Tuple

import numpy as np
import numpy.typing as npt
import tensorflow as tf

from benchmarks import common
from cifar10_estimator import data
from cifar10_estimator import layout
from cifar10_estimator import resnet

_BN = dict(momentum=0.997, epsilon=1e-5)


def build_model(num_layers: int, weight_decay: float = 2e-4,
                dtype_policy: Optional[str] = None) -> tf.keras.Model:
    """Keras functional ResNet v1 taking {'images': float32 [B,32,32,3] in [0,255]}."""
    if dtype_policy:
        tf.keras.mixed_precision.set_global_policy(dtype_policy)
    conv_init = tf.keras.initializers.VarianceScaling(
        scale=1.0, mode='fan_in', distribution='truncated_normal')

    def conv(x: tf.Tensor, filters: int, stride: int) -> tf.Tensor:
        return tf.keras.layers.Conv2D(filters, 3, stride, padding='same', use_bias=False,
                                      kernel_initializer=conv_init)(x)

    images = tf.keras.Input([32, 32, 3], name='images')
    x = tf.keras.layers.Rescaling(1 / 128.0, offset=-1.0)(images)
    x = conv(x, resnet.STAGE_FILTERS[0], 1)
    x = tf.keras.layers.ReLU()(tf.keras.layers.BatchNormalization(**_BN)(x))
    blocks = (num_layers - 2) // 6
    for filters, stage_stride in zip(resnet.STAGE_FILTERS, resnet.STAGE_STRIDES):
        for block in range(blocks):
            stride = stage_stride if block == 0 else 1
            shortcut = x
            in_filters = x.shape[-1]
            y = conv(x, filters, stride)
            y = tf.keras.layers.ReLU()(tf.keras.layers.BatchNormalization(**_BN)(y))
            y = conv(y, filters, 1)
            y = tf.keras.layers.BatchNormalization(**_BN)(y)
            if stride != 1 or in_filters != filters:
                shortcut = tf.keras.layers.AveragePooling2D(stride, stride)(shortcut)
                pad = (filters - in_filters) // 2
                shortcut = tf.pad(shortcut, [[0, 0], [0, 0], [0, 0],
                                             [pad, filters - in_filters - pad]])
            x = tf.keras.layers.ReLU()(tf.keras.layers.Add()([y, shortcut]))
    x = tf.keras.layers.GlobalAveragePooling2D()(x)
    logits = tf.keras.layers.Dense(layout.NUM_CLASSES, dtype='float32')(x)
    model = tf.keras.Model(images, logits)
    model.add_loss(lambda: weight_decay * tf.add_n(
        [tf.nn.l2_loss(v) for v in model.trainable_variables]))
    model.compile(
        optimizer=tf.keras.optimizers.SGD(0.1, momentum=0.9),
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=['accuracy'])
    return model


def in_memory_dataset(data_dir: str, batch_size: int,
                      seed: Optional[int] = None) -> tf.data.Dataset:
    """The train split decoded once into numpy, then the same shuffle/augment."""
    image_batches: List[npt.NDArray[np.uint8]] = []
    label_batches: List[npt.NDArray[np.int32]] = []
    for batch in data.make_dataset(data_dir, 'train', 1000):
        image_batches.append(batch[0]['images'].numpy().astype(np.uint8))
        label_batches.append(batch[1].numpy())
    images, labels = np.concatenate(image_batches), np.concatenate(label_batches)
    dataset = tf.data.Dataset.from_tensor_slices((images, labels))
    dataset = dataset.shuffle(len(labels), seed=seed).repeat()
    dataset = dataset.batch(batch_size, drop_remainder=True).enumerate()

    def augment(index: tf.Tensor, batch: Tuple[tf.Tensor, tf.Tensor]
                ) -> Tuple[Dict[str, tf.Tensor], tf.Tensor]:
        images, labels = batch
        images = data.distort_batch(tf.cast(images, tf.float32),
                                    tf.stack([tf.constant(seed or 0, tf.int64), index]))
        return {'images': images}, labels
    return dataset.map(augment, num_parallel_calls=tf.data.AUTOTUNE).prefetch(
        tf.data.AUTOTUNE)


def tfrecord_dataset(data_dir: str, batch_size: int, count: int,
                     seed: Optional[int] = None) -> tf.data.Dataset:
    """Exactly the Estimator's training input pipeline."""
    return data.make_dataset(data_dir, 'train', batch_size, distort=True, repeat=True,
                             shuffle=True, count=count, seed=seed)


# Keras is untyped: its base classes are `Any` to mypy (hence the ignore).
class _StepTimer(tf.keras.callbacks.Callback):  # type: ignore[misc]
    """Records wall and process CPU time at the end of every training batch."""

    def __init__(self) -> None:
        super().__init__()
        self.times: List[Tuple[float, float]] = []

    def on_train_batch_end(self, batch: int, logs: Optional[Dict[str, Any]] = None) -> None:
        self.times.append((time.perf_counter(), time.process_time()))


def measure(data_dir: str, num_layers: int, batch_size: int,
            source: Literal['memory', 'tfrecord'], warmup_steps: int, steps: int,
            dtype_policy: Optional[str] = None,
            interval: Optional[int] = None) -> Dict[str, Any]:
    """Trains warmup_steps + steps batches; returns steady-state throughput.

    Like the Estimator's progress log, timing starts after `warmup_steps`
    batches and covers the next `steps`, in wall time and process CPU time;
    also the fastest of its intervals of `interval` steps (default: `steps`),
    as the trainer's progress lines give them (`common.fastest_interval`).
    """
    counts = data.read_metadata(data_dir)
    if source == 'memory':
        dataset = in_memory_dataset(data_dir, batch_size)
    else:
        dataset = tfrecord_dataset(data_dir, batch_size, counts['train'])
    model = build_model(num_layers, dtype_policy=dtype_policy)
    timer = _StepTimer()
    model.fit(dataset, epochs=1, steps_per_epoch=warmup_steps + steps, verbose=0,
              callbacks=[timer])
    (start, start_cpu), (end, end_cpu) = timer.times[warmup_steps - 1], timer.times[-1]
    interval = interval or steps
    marks = [(step, *timer.times[step - 1])
             for step in range(warmup_steps, warmup_steps + steps + 1, interval)]
    return {'examples_per_sec': steps * batch_size / (end - start),
            'examples_per_cpu_sec': steps * batch_size / (end_cpu - start_cpu),
            **common.fastest_interval(marks, batch_size),
            'params': int(sum(np.prod(v.shape) for v in model.trainable_variables))}


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--data-dir', required=True)
    parser.add_argument('--num-layers', type=int, default=44)
    parser.add_argument('--batch-size', type=int, default=128)
    parser.add_argument('--source', choices=('memory', 'tfrecord'), default='tfrecord')
    parser.add_argument('--warmup-steps', type=int, default=10)
    parser.add_argument('--steps', type=int, default=20)
    parser.add_argument('--interval', type=int, default=None,
                        help='Steps per interval for the fastest-interval figures '
                             '(default: --steps, one interval).')
    parser.add_argument('--dtype-policy', default=None,
                        help='Keras mixed-precision policy, e.g. mixed_bfloat16.')
    args = parser.parse_args(argv)
    result = measure(args.data_dir, args.num_layers, args.batch_size, args.source,
                     args.warmup_steps, args.steps, args.dtype_policy, args.interval)
    print(json.dumps(result))


if __name__ == '__main__':
    main()
