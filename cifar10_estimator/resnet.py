"""ResNet v1 for CIFAR-10 (He et al. 2015, section 4.2), in tf.compat.v1 layers.

Three stages of `n = (num_layers - 2) / 6` basic blocks with 16, 32 and 64
filters (strides 1, 2, 2); convolutions without bias, each followed by batch
normalisation; projection-free shortcuts ("option A": average-pool to the new
stride and zero-pad the new channels); global average pooling; a dense layer
with 10 logits. Input pixels in [0, 255] are scaled to [-1, 1) as `x/128 - 1`,
the reference tutorial's choice, so a SavedModel can take raw pixels.

With a low-precision `dtype` (bfloat16, float16) the layers compute in that
type while every variable is created and stored in float32 (a custom getter
hands the layers a cast copy), and the logits come back as float32: the
mixed-precision recipe of Keras' `mixed_*` policies, in TF1 layers.
"""
from __future__ import annotations

from typing import Any, Callable, List, Literal, Optional, Union

import tensorflow as tf

STAGE_FILTERS = (16, 32, 64)
STAGE_STRIDES = (1, 2, 2)
# Where the channels are: NCHW (faster on GPUs) or NHWC.
DataFormat = Literal['channels_first', 'channels_last']


def valid_num_layers(num_layers: int) -> bool:
    """True when `num_layers` is 6n+2 for some n >= 1 (8, 14, 20, 32, 44, 56, ...)."""
    return num_layers >= 8 and (num_layers - 2) % 6 == 0


class ResNetCifar10:
    """Builds the network graph; variables are created on first call."""

    def __init__(self, num_layers: int, *, is_training: bool, batch_norm_decay: float = 0.997,
                 batch_norm_epsilon: float = 1e-5, data_format: DataFormat = 'channels_last',
                 num_classes: int = 10,
                 dtype: Union[str, tf.dtypes.DType] = tf.float32) -> None:
        if not valid_num_layers(num_layers):
            raise ValueError('num_layers must be 6n+2, got %d' % num_layers)
        self._blocks_per_stage = (num_layers - 2) // 6
        self._is_training = is_training
        self._decay = batch_norm_decay
        self._epsilon = batch_norm_epsilon
        self._data_format = data_format
        self._num_classes = num_classes
        self._dtype = tf.as_dtype(dtype)

    def __call__(self, images: tf.Tensor) -> tf.Tensor:
        """Maps NHWC images in [0, 255] to float32 logits [batch, num_classes]."""
        # Re-enter the caller's variable scope (names unchanged) with the getter.
        with tf.compat.v1.variable_scope(tf.compat.v1.get_variable_scope(),
                                         custom_getter=_float32_variables,
                                         auxiliary_name_scope=False):
            logits = self._network(tf.cast(images / 128.0 - 1.0, self._dtype))
        return tf.cast(logits, tf.float32)

    def _network(self, x: tf.Tensor) -> tf.Tensor:
        if self._data_format == 'channels_first':
            x = tf.transpose(x, [0, 3, 1, 2])
        x = self._conv(x, STAGE_FILTERS[0], 3, 1, name='initial_conv')
        x = self._batch_norm_relu(x, name='initial_bn')
        for stage, (filters, stride) in enumerate(zip(STAGE_FILTERS, STAGE_STRIDES)):
            for block in range(self._blocks_per_stage):
                with tf.compat.v1.variable_scope('stage%d_block%d' % (stage + 1, block)):
                    x = self._residual_block(x, filters, stride if block == 0 else 1)
        axes = [2, 3] if self._data_format == 'channels_first' else [1, 2]
        x = tf.reduce_mean(x, axis=axes)
        return tf.compat.v1.layers.dense(x, self._num_classes, name='logits')

    def _residual_block(self, x: tf.Tensor, filters: int, stride: int) -> tf.Tensor:
        in_filters = x.shape[self._channel_axis]
        shortcut = x
        x = self._conv(x, filters, 3, stride, name='conv1')
        x = self._batch_norm_relu(x, name='bn1')
        x = self._conv(x, filters, 3, 1, name='conv2')
        x = self._batch_norm(x, name='bn2')
        if stride != 1 or in_filters != filters:
            shortcut = tf.compat.v1.layers.average_pooling2d(
                shortcut, stride, stride, padding='valid', data_format=self._data_format)
            pad = (filters - in_filters) // 2
            paddings = [[0, 0], [0, 0], [0, 0], [0, 0]]
            paddings[self._channel_axis] = [pad, filters - in_filters - pad]
            shortcut = tf.pad(shortcut, paddings)
        return tf.nn.relu(x + shortcut)

    @property
    def dtype(self) -> tf.dtypes.DType:
        """The type the layers compute in."""
        return self._dtype

    @property
    def _channel_axis(self) -> int:
        return 1 if self._data_format == 'channels_first' else 3

    def _conv(self, x: tf.Tensor, filters: int, kernel_size: int, stride: int,
              name: str) -> tf.Tensor:
        return tf.compat.v1.layers.conv2d(
            x, filters, kernel_size, strides=stride, padding='same', use_bias=False,
            kernel_initializer=tf.compat.v1.variance_scaling_initializer(),
            data_format=self._data_format, name=name)

    def _batch_norm(self, x: tf.Tensor, name: str) -> tf.Tensor:
        return tf.compat.v1.layers.batch_normalization(
            x, axis=self._channel_axis, momentum=self._decay, epsilon=self._epsilon,
            center=True, scale=True, training=self._is_training, fused=True, name=name)

    def _batch_norm_relu(self, x: tf.Tensor, name: str) -> tf.Tensor:
        return tf.nn.relu(self._batch_norm(x, name))


def moving_statistics(scope: str = 'resnet') -> List[tf.Variable]:
    """The batch-norm moving means and variances of the network built under `scope`."""
    return [v for v in tf.compat.v1.global_variables(scope + '/')
            if v.op.name.endswith(('/moving_mean', '/moving_variance'))]


def _float32_variables(getter: Callable[..., tf.Variable], name: str,
                       shape: Optional[tf.TensorShape] = None,
                       dtype: Optional[tf.dtypes.DType] = None, *args: Any,
                       **kwargs: Any) -> tf.Tensor:
    """Variable-scope custom getter: float32 storage for low-precision layers."""
    if dtype in (tf.float16, tf.bfloat16):
        variable = getter(name, shape, tf.float32, *args, **kwargs)
        # In the layer's own scope: a readable graph, not a row of top-level Casts.
        with tf.name_scope(name.rsplit('/', 1)[0] + '/'):
            return tf.cast(variable, dtype)
    return getter(name, shape, dtype, *args, **kwargs)
