"""The CIFAR-10 Estimator `model_fn`: towers, loss, optimizer, metrics, export.

With one device the graph is built plainly (and Estimator's device function
places variables on parameter servers in a cluster). With several local
devices (`--num-gpus N`, or logical CPU devices) the batch is split into one
tower per device, variables live on the CPU or on the first device
(`--variable-strategy`), gradients are averaged there and applied once, and
batch-norm statistics are updated from the first tower, as in the reference
tutorial.

Loss is softmax cross-entropy plus `weight_decay * sum(l2_loss(v))` over all
trainable variables. The optimizer is Momentum with a piecewise-constant
learning rate dropping to x0.1, x0.01, x0.002 at epochs 82, 123 and 300,
where an epoch is `train_examples // global_batch` global steps.

`--mixed-precision bfloat16|float16` computes training and evaluation in that
type with float32 variables and a float32 loss; float16 adds dynamic loss
scaling (its small gradients would underflow). Exports always compute in
float32, so they serve on any hardware.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Dict, List, Literal, Optional, Sequence, Tuple, Union

import tensorflow as tf

from cifar10_estimator import resnet
from estimator_trainers import precise_bn
from estimator_trainers import summaries
from estimator_trainers import sync_replicas

LR_EPOCH_BOUNDARIES = (82, 123, 300)
LR_MULTIPLIERS = (1.0, 0.1, 0.01, 0.002)
_VARIABLE_OPS = frozenset(['Variable', 'VariableV2', 'VarHandleOp', 'AutoReloadVariable'])

# The resolved `--mixed-precision` (`devices.resolve_mixed_precision`): the
# type training and evaluation compute in, `none` for float32.
Precision = Literal['none', 'bfloat16', 'float16']
# `--variable-strategy`: where the towers of one worker share their variables.
VariableStrategy = Literal['CPU', 'GPU']
# An optimizer's (gradient, variable) pairs (a gradient may be None).
GradsAndVars = List[Tuple[Optional[tf.Tensor], tf.Variable]]


@dataclasses.dataclass(frozen=True)
class HParams:
    """Model and optimisation settings (the CLI's model flags, as plain data)."""
    num_layers: int = 44
    weight_decay: float = 2e-4
    momentum: float = 0.9
    learning_rate: float = 0.1
    batch_norm_decay: float = 0.997
    batch_norm_epsilon: float = 1e-5
    data_format: resnet.DataFormat = 'channels_last'
    train_examples: int = 40000
    train_batch_size: int = 128
    devices: Tuple[str, ...] = ('/cpu:0',)
    variable_strategy: VariableStrategy = 'CPU'
    sync: bool = False
    num_workers: int = 1
    is_chief: bool = True
    cluster_has_ps: bool = False
    mixed_precision: Precision = 'none'
    replicas_in_sync: int = 1
    image_summary_steps: int = 0


def steps_per_epoch(hparams: HParams) -> int:
    """Global steps per epoch: synchronous updates consume every worker's batch.

    `train_batch_size` is per model replica; under a tf.distribute strategy
    `replicas_in_sync` replicas (all workers' devices) make one global step.
    """
    global_batch = (hparams.train_batch_size * hparams.replicas_in_sync
                    * (hparams.num_workers if hparams.sync else 1))
    return max(1, hparams.train_examples // global_batch)


def learning_rate_schedule(hparams: HParams, global_step: tf.Tensor) -> tf.Tensor:
    boundaries = [steps_per_epoch(hparams) * epoch for epoch in LR_EPOCH_BOUNDARIES]
    values = [hparams.learning_rate * m for m in LR_MULTIPLIERS]
    with tf.name_scope('lr_schedule'):  # piecewise_constant casts outside its own scope
        return tf.compat.v1.train.piecewise_constant(global_step, boundaries, values)


# Input images are written every this many `--save-summary-steps` intervals.
IMAGE_SUMMARY_INTERVALS = 10


def model_fn(features: Union[Dict[str, tf.Tensor], tf.Tensor], labels: Optional[tf.Tensor],
             mode: str, params: Dict[str, HParams],
             config: tf.estimator.RunConfig) -> tf.estimator.EstimatorSpec:
    """Estimator model_fn; `params` is `{'hparams': HParams}`.

    Training writes the documented tag set (`summaries`): `accuracy` of the
    training batches, `learning_rate/momentum`, and a few augmented input
    `images` every `hparams.image_summary_steps` (0: none).
    """
    hparams = params['hparams']
    images = features['images'] if isinstance(features, dict) else features
    is_training = mode == tf.estimator.ModeKeys.TRAIN
    low_precision = (hparams.mixed_precision != 'none'
                     and mode != tf.estimator.ModeKeys.PREDICT)
    network = resnet.ResNetCifar10(
        hparams.num_layers, is_training=is_training,
        batch_norm_decay=hparams.batch_norm_decay,
        batch_norm_epsilon=hparams.batch_norm_epsilon,
        data_format=hparams.data_format,
        dtype=hparams.mixed_precision if low_precision else tf.float32)

    if mode == tf.estimator.ModeKeys.PREDICT:
        with tf.compat.v1.variable_scope('resnet'):
            logits = network(images)
        predictions = _predictions(logits)
        return tf.estimator.EstimatorSpec(
            mode, predictions=predictions,
            export_outputs={'serving_default': tf.estimator.export.PredictOutput(predictions)})

    optimizer: Optional[tf.compat.v1.train.Optimizer] = None
    if is_training:
        global_step = tf.compat.v1.train.get_or_create_global_step()
        learning_rate = learning_rate_schedule(hparams, global_step)
        optimizer = _optimizer(hparams, learning_rate)

    devices = hparams.devices
    if len(devices) == 1:
        with tf.compat.v1.variable_scope('resnet'):
            logits = network(images)
        loss = _loss(logits, labels, hparams.weight_decay)
        grads_and_vars = _gradients(optimizer, loss) if is_training else None
    else:
        logits, loss, grads_and_vars = _towers(network, images, labels, hparams, optimizer)

    predictions = _predictions(logits)
    with tf.name_scope('metrics'):
        accuracy = tf.compat.v1.metrics.accuracy(labels, predictions['classes'])
    if mode == tf.estimator.ModeKeys.EVAL:
        _register_batch_norm_calibration(hparams, network.dtype)
        return tf.estimator.EstimatorSpec(
            mode, loss=loss, predictions=predictions,
            eval_metric_ops={'accuracy': accuracy})

    training_hooks = []
    if isinstance(optimizer, tf.compat.v1.train.SyncReplicasOptimizer):
        training_hooks.append(sync_replicas.SyncReplicasHook(optimizer, hparams.is_chief))

    # Batch-norm moving averages: from the first (or only) tower.
    update_ops = tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.UPDATE_OPS,
                                             scope=_first_tower_scope(devices))
    assert optimizer is not None  # training: made above
    with tf.control_dependencies(update_ops):
        train_op = optimizer.apply_gradients(grads_and_vars, global_step=global_step)

    summaries.learning_rate(learning_rate, 'momentum')
    summaries.training_metrics(
        loss, accuracy=summaries.batch_accuracy(labels, predictions['classes']))
    chief_hooks = []
    if hparams.image_summary_steps:
        chief_hooks.append(summaries.input_images(
            images, config.model_dir, every_steps=hparams.image_summary_steps))
    return tf.estimator.EstimatorSpec(
        mode, loss=loss, train_op=train_op, training_hooks=training_hooks,
        training_chief_hooks=chief_hooks, predictions=predictions,
        eval_metric_ops={'accuracy': accuracy})


def _register_batch_norm_calibration(hparams: HParams, dtype: tf.dtypes.DType) -> None:
    """Offers the evaluation precise batch norm (`precise_bn`): the network once
    more, in training mode with batch-norm momentum 0, on the evaluation's variables."""
    def build(features: Union[Dict[str, tf.Tensor], tf.Tensor]
              ) -> Tuple[List[tf.Operation], List[tf.Variable]]:
        images = features['images'] if isinstance(features, dict) else features
        scope = tf.compat.v1.get_default_graph().get_name_scope()
        network = resnet.ResNetCifar10(
            hparams.num_layers, is_training=True, batch_norm_decay=0.0,
            batch_norm_epsilon=hparams.batch_norm_epsilon,
            data_format=hparams.data_format, dtype=dtype)
        with tf.compat.v1.variable_scope('resnet', reuse=True):
            network(images)
        updates = tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.UPDATE_OPS, scope=scope)
        return updates, resnet.moving_statistics()
    precise_bn.register(build)


def _optimizer(hparams: HParams, learning_rate: tf.Tensor) -> tf.compat.v1.train.Optimizer:
    """Momentum, with dynamic loss scaling for float16 and sync replicas if asked."""
    optimizer = tf.compat.v1.train.MomentumOptimizer(learning_rate, hparams.momentum)
    if hparams.mixed_precision == 'float16':
        optimizer = tf.compat.v1.mixed_precision.MixedPrecisionLossScaleOptimizer(
            optimizer, loss_scale='dynamic')
    if hparams.sync and hparams.num_workers > 1:
        optimizer = tf.compat.v1.train.SyncReplicasOptimizer(
            optimizer, replicas_to_aggregate=hparams.num_workers,
            total_num_replicas=hparams.num_workers)
    return optimizer


def _gradients(optimizer: tf.compat.v1.train.Optimizer, loss: tf.Tensor,
               variables: Optional[List[tf.Variable]] = None) -> GradsAndVars:
    """`optimizer`'s gradients of `loss` without per-op gating, as Keras'
    GradientTape computes them.

    TF1's default (GATE_OP) holds each op's input gradient until its weight
    gradient is done too, so every convolution's filter gradient ran alone on
    the backward pass's critical path instead of beside the next layer's
    gradients: ResNet-44 trained ~1.1x faster in bfloat16 and ~1.04x in
    float32 without it (benchmarks/RESULTS.md, #33). The race GATE_OP guards
    against needs reference variables; resource variables' reads are snapshots.
    """
    pairs: GradsAndVars = optimizer.compute_gradients(
        loss, variables, gate_gradients=tf.compat.v1.train.Optimizer.GATE_NONE)
    return pairs


def _predictions(logits: tf.Tensor) -> Dict[str, tf.Tensor]:
    with tf.name_scope('predictions'):
        return {'classes': tf.argmax(logits, axis=1),
                'probabilities': tf.nn.softmax(logits, name='softmax_tensor')}


def _loss(logits: tf.Tensor, labels: tf.Tensor, weight_decay: float) -> tf.Tensor:
    cross_entropy = tf.compat.v1.losses.sparse_softmax_cross_entropy(
        labels=labels, logits=logits, reduction=tf.compat.v1.losses.Reduction.MEAN)
    return cross_entropy + _weight_decay(tf.compat.v1.trainable_variables(), weight_decay)


def _weight_decay(variables: Sequence[tf.Variable], weight_decay: float) -> tf.Tensor:
    """`weight_decay * sum(l2_loss(v))`, in its own scope (one graph node, not 23)."""
    with tf.name_scope('weight_decay'):
        return weight_decay * tf.add_n([tf.nn.l2_loss(v) for v in variables])


def _first_tower_scope(devices: Sequence[str]) -> Optional[str]:
    return 'tower_0' if len(devices) > 1 else None


def _tower_device_fn(device: str,
                     variable_device: Optional[str]) -> Callable[[tf.Operation], str]:
    """Places ops on `device` and variables on `variable_device` (None: outer fn)."""
    def device_fn(op: Union[tf.Operation, tf.compat.v1.NodeDef]) -> str:
        node_def = op if isinstance(op, tf.compat.v1.NodeDef) else op.node_def
        if node_def.op in _VARIABLE_OPS:
            return variable_device or ''
        return device
    return device_fn


def _towers(network: resnet.ResNetCifar10, images: tf.Tensor, labels: tf.Tensor,
            hparams: HParams, optimizer: Optional[tf.compat.v1.train.Optimizer]
            ) -> Tuple[tf.Tensor, tf.Tensor, Optional[GradsAndVars]]:
    """Builds one tower per device; returns (logits, mean loss, averaged grads).

    `optimizer` computes each tower's gradients (None outside training).
    """
    devices = hparams.devices
    image_shards = tf.split(images, len(devices))
    label_shards = tf.split(labels, len(devices))
    if hparams.cluster_has_ps:
        variable_device = None
    elif hparams.variable_strategy == 'CPU':
        variable_device = '/cpu:0'
    else:
        variable_device = devices[0]
    tower_logits: List[tf.Tensor] = []
    tower_losses: List[tf.Tensor] = []
    tower_grads: List[GradsAndVars] = []
    for i, device in enumerate(devices):
        with tf.name_scope('tower_%d' % i), \
                tf.compat.v1.variable_scope('resnet', reuse=bool(i)), \
                tf.compat.v1.device(_tower_device_fn(device, variable_device)):
            logits = network(image_shards[i])
            cross_entropy = tf.compat.v1.losses.sparse_softmax_cross_entropy(
                labels=label_shards[i], logits=logits)
            tower_logits.append(logits)
            tower_losses.append(cross_entropy)
            if optimizer is not None:
                variables = tf.compat.v1.trainable_variables()
                tower_loss = cross_entropy + _weight_decay(variables, hparams.weight_decay)
                tower_grads.append(_gradients(optimizer, tower_loss, variables))
    with tf.device(variable_device or devices[0]):
        logits = tf.concat(tower_logits, axis=0)
        loss = tf.reduce_mean(tower_losses) + _weight_decay(
            tf.compat.v1.trainable_variables(), hparams.weight_decay)
        grads_and_vars: Optional[GradsAndVars] = None
        if optimizer is not None:
            grads_and_vars = []
            for per_var in zip(*tower_grads):
                variable = per_var[0][1]
                grads = [g for g, _ in per_var]
                grads_and_vars.append((tf.add_n(grads) / len(grads), variable))
    return logits, loss, grads_and_vars
