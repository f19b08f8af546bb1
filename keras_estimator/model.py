"""The Estimator `model_fn` that runs a Keras model of `networks`.

Why a `model_fn` and not `tf.keras.estimator.model_to_estimator`: the Keras
model is called inside the `model_fn`, in the graph Estimator builds, and
everything around it is the same TF1 machinery as the CIFAR-10 trainer's: a
`tf.compat.v1` Momentum optimizer (Estimator's parameter-server device
placement and `multi_worker_mirrored` both drive it), `tf.compat.v1.metrics`
for evaluation, an `EstimatorSpec` whose export takes raw uint8 images, and
the same progress log and TensorBoard tags (`estimator_trainers.summaries`:
`loss`, `accuracy`, `learning_rate/momentum`). `model_to_estimator` would need
a compiled model with a legacy Keras optimizer, name the serving signature
after Keras' layers and leave no place for the progress values.

Loss: softmax cross-entropy on the logits plus the model's own
regularisation losses (cifar10_mlp's L2). Batch-norm moving averages are the
model's `updates`, run with every training step.
"""
from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional, Tuple

import tensorflow as tf

from estimator_trainers import precise_bn
from estimator_trainers import summaries
from keras_estimator import networks
from keras_estimator.trainer import MNIST_CNN, ModelName


@dataclasses.dataclass(frozen=True)
class HParams:
    """The model flags, as plain data."""
    model: ModelName = MNIST_CNN
    learning_rate: float = 0.01
    momentum: float = 0.9
    weight_decay: float = 1e-4
    batch_norm_momentum: float = 0.99


def model_fn(features: Dict[str, tf.Tensor], labels: Optional[tf.Tensor], mode: str,
             params: Dict[str, HParams]) -> tf.estimator.EstimatorSpec:
    """Estimator model_fn; `params` is `{'hparams': HParams}`."""
    hparams = params['hparams']
    network = networks.build(hparams.model, hparams.weight_decay, hparams.batch_norm_momentum)
    is_training = mode == tf.estimator.ModeKeys.TRAIN
    logits = network(features['images'], training=is_training)
    predictions = {'classes': tf.argmax(logits, axis=1),
                   'probabilities': tf.nn.softmax(logits, name='softmax_tensor')}
    if mode == tf.estimator.ModeKeys.PREDICT:
        return tf.estimator.EstimatorSpec(
            mode, predictions=predictions,
            export_outputs={'serving_default': tf.estimator.export.PredictOutput(predictions)})

    loss = tf.compat.v1.losses.sparse_softmax_cross_entropy(labels=labels, logits=logits)
    if network.losses:
        loss += tf.add_n(network.losses)
    with tf.name_scope('metrics'):  # a bare `accuracy` scope would rename the summary
        accuracy = tf.compat.v1.metrics.accuracy(labels, predictions['classes'])
    if mode == tf.estimator.ModeKeys.EVAL:
        _register_batch_norm_calibration(network)
        return tf.estimator.EstimatorSpec(mode, loss=loss, predictions=predictions,
                                          eval_metric_ops={'accuracy': accuracy})

    global_step = tf.compat.v1.train.get_or_create_global_step()
    learning_rate = tf.constant(hparams.learning_rate)
    optimizer = tf.compat.v1.train.MomentumOptimizer(learning_rate, hparams.momentum)
    with tf.control_dependencies(network.updates):
        train_op = optimizer.minimize(loss, global_step=global_step)
    summaries.learning_rate(learning_rate, 'momentum')
    summaries.training_metrics(
        loss, accuracy=summaries.batch_accuracy(labels, predictions['classes']))
    return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op,
                                      predictions=predictions,
                                      eval_metric_ops={'accuracy': accuracy})


def _register_batch_norm_calibration(network: tf.keras.Sequential) -> None:
    """Offers the evaluation precise batch norm (`precise_bn`) when `network` has
    batch norm: its layers once more on the evaluation's variables, batch norm
    in training mode with momentum 0, every other layer (dropout) as evaluated."""
    norms = [layer for layer in network.layers
             if isinstance(layer, tf.keras.layers.BatchNormalization)]
    if not norms:
        return

    def build(features: Dict[str, tf.Tensor]) -> Tuple[List[tf.Operation], List[tf.Variable]]:
        x = features['images']
        updates: List[tf.Operation] = []
        for layer in network.layers:
            if layer not in norms:
                x = layer(x, training=False)
                continue
            before = list(layer.updates)
            momentum, layer.momentum = layer.momentum, 0.0
            try:
                x = layer(x, training=True)
            finally:
                layer.momentum = momentum
            updates += [u for u in layer.updates if u not in before]
        return updates, [v for layer in norms
                         for v in (layer.moving_mean, layer.moving_variance)]
    precise_bn.register(build)
