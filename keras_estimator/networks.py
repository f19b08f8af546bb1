"""The two Keras models of the courses, as `tf.keras.Sequential` builders.

Both take images as float32 pixels in [0, 255] (the model scales them, so a
SavedModel can serve raw uint8 pixels) and return 10 logits; the `model_fn`
applies the softmax. Layers have fixed names, so every graph Estimator
builds (training, evaluation, export) names the variables alike.
"""
from __future__ import annotations

from typing import List, Optional

import tensorflow as tf

from keras_estimator.trainer import CIFAR10_MLP, MNIST_CNN, ModelName

NUM_CLASSES = 10
# cifar10_mlp: (units, dropout rate) of each hidden layer.
MLP_LAYERS = ((300, 0.3), (500, 0.1), (700, 0.1), (30, 0.1))

_layers = tf.keras.layers


def mnist_cnn() -> tf.keras.Sequential:
    """Conv 32 - MaxPool - Conv 64 - MaxPool - Conv 64 - Dense 64 - Dense 10.

    Input: [batch, 28, 28] grey pixels. 3x3 convolutions and ReLU, as in
    TensorFlow's CNN tutorial the course follows.
    """
    return tf.keras.Sequential([
        _layers.Rescaling(1 / 255, name='scale'),
        _layers.Reshape((28, 28, 1), name='channel'),
        _layers.Conv2D(32, 3, activation='relu', name='conv1'),
        _layers.MaxPooling2D(name='pool1'),
        _layers.Conv2D(64, 3, activation='relu', name='conv2'),
        _layers.MaxPooling2D(name='pool2'),
        _layers.Conv2D(64, 3, activation='relu', name='conv3'),
        _layers.Flatten(name='flatten'),
        _layers.Dense(64, activation='relu', name='dense1'),
        _layers.Dense(NUM_CLASSES, name='logits'),
    ], name=MNIST_CNN)


def cifar10_mlp(weight_decay: float, batch_norm_momentum: float = 0.99) -> tf.keras.Sequential:
    """Dense 300/500/700/30, each ReLU - batch norm - dropout 0.3/0.1/0.1/0.1; Dense 10.

    Input: [batch, 32, 32, 3] RGB pixels. Every Dense layer's kernel and bias
    carry an L2 penalty `weight_decay * sum(w ** 2)` (Keras' `l2`), which
    the model collects in `losses`. Batch norm keeps moving averages with
    `batch_norm_momentum` (Keras' default 0.99) for evaluation and serving.
    """
    def dense(units: int, name: str, activation: Optional[str] = None) -> tf.keras.layers.Dense:
        return _layers.Dense(units, activation=activation, name=name,
                             kernel_regularizer=tf.keras.regularizers.l2(weight_decay),
                             bias_regularizer=tf.keras.regularizers.l2(weight_decay))

    layers: List[tf.keras.layers.Layer] = [_layers.Rescaling(1 / 255, name='scale'),
                                           _layers.Flatten(name='flatten')]
    for i, (units, rate) in enumerate(MLP_LAYERS, 1):
        layers += [dense(units, 'dense%d' % i, activation='relu'),
                   _layers.BatchNormalization(momentum=batch_norm_momentum,
                                             name='batch_norm%d' % i),
                   _layers.Dropout(rate, name='dropout%d' % i)]
    layers.append(dense(NUM_CLASSES, 'logits'))
    return tf.keras.Sequential(layers, name=CIFAR10_MLP)


def build(name: ModelName, weight_decay: float,
          batch_norm_momentum: float) -> tf.keras.Sequential:
    """The model `name` (`trainer.MODELS`), with fresh variables; `cifar10_mlp`
    with `weight_decay` and `batch_norm_momentum`."""
    if name == MNIST_CNN:
        return mnist_cnn()
    return cifar10_mlp(weight_decay, batch_norm_momentum)
