"""The wide-and-deep tip classifier (`tf.estimator.DNNLinearCombinedClassifier`).

The linear (wide) side trains with L2-regularised FTRL, the DNN (deep) side
with Adam. Both learning rates decay exponentially by
`learning_rate_decay_factor` over the run to the step target. The optimizers
are built inside the Estimator's graph (the reference sample built its
schedule outside it, on a global step the model never used).
"""
import dataclasses
import math

import tensorflow as tf

from estimator_trainers import distribution
from estimator_trainers import training
from estimator_trainers.errors import UserInputError
from taxi_estimator import features

DEFAULT_NUM_LAYERS = 4
# FTRL's L2 strength: keeps the many sparse wide weights (tracts, crosses)
# from fitting noise in small data sets.
LINEAR_L2 = 0.3


@dataclasses.dataclass(frozen=True)
class HParams:
    """Model flag values, as plain data.

    Attributes:
      hidden_units: DNN layer sizes, input side first.
      learning_rate: initial learning rate of the DNN (Adam).
      linear_learning_rate: initial learning rate of the linear side (FTRL).
      learning_rate_decay_factor: learning-rate multiplier reached at
        `decay_steps` (1.0: constant).
      decay_steps: the global-step target of the run.
      dropout: DNN dropout probability, or None.
    """
    hidden_units: tuple
    learning_rate: float
    linear_learning_rate: float
    learning_rate_decay_factor: float = 1.0
    decay_steps: int = 1
    dropout: float = None


def layer_sizes(hidden_units, scale_factor=0.0, num_layers=None):
    """DNN layer sizes from --hidden-units, --layer-sizes-scale-factor, --num-layers.

    With a scale factor > 0, layer i has `hidden_units[0] * scale_factor**i`
    units (at least 2) for `num_layers` layers (default 4); otherwise
    `hidden_units` is used as given (in the reference sample a default scale
    factor silently replaced it).

    Raises:
      UserInputError: --num-layers without a scale factor.
    """
    if not scale_factor:
        if num_layers is not None:
            raise UserInputError('--num-layers=%d needs --layer-sizes-scale-factor > 0; '
                                 'without it --hidden-units gives every layer size'
                                 % num_layers)
        return tuple(hidden_units)
    return tuple(max(2, int(hidden_units[0] * scale_factor ** i))
                 for i in range(num_layers or DEFAULT_NUM_LAYERS))


def steps_for_epochs(num_epochs, train_size, batch_size):
    """Global steps that `num_epochs` passes over `train_size` rows take."""
    return max(1, math.ceil(num_epochs * train_size / batch_size))


def build_estimator(config, stats, hparams):
    """The classifier over `features.wide_and_deep_columns(stats)`.

    Args:
      config: `tf.estimator.RunConfig`.
      stats: normalisation statistics ({feature: {'mean', 'std'}}).
      hparams: `HParams`.
    """
    wide, deep = features.wide_and_deep_columns(stats)
    aggregator = distribution.dense_gradient_aggregator(config)
    return tf.estimator.DNNLinearCombinedClassifier(
        config=config,
        n_classes=2,
        linear_feature_columns=wide,
        linear_optimizer=lambda: tf.keras.optimizers.legacy.Ftrl(
            _learning_rate(hparams.linear_learning_rate, hparams),
            l2_regularization_strength=LINEAR_L2, gradient_aggregator=aggregator),
        dnn_feature_columns=deep,
        dnn_optimizer=lambda: tf.keras.optimizers.legacy.Adam(
            _learning_rate(hparams.learning_rate, hparams, report=True),
            gradient_aggregator=aggregator),
        dnn_hidden_units=list(hparams.hidden_units),
        dnn_dropout=hparams.dropout or None)


def _learning_rate(initial, hparams, report=False):
    """Decaying learning rate, made in the model's graph; `report` logs it."""
    schedule = tf.keras.optimizers.schedules.ExponentialDecay(
        initial, decay_steps=hparams.decay_steps,
        decay_rate=hparams.learning_rate_decay_factor)
    if report:
        rate = schedule(tf.compat.v1.train.get_or_create_global_step())
        training.log_progress('learning_rate', rate)
        tf.compat.v1.summary.scalar('learning_rate', rate)
    return schedule
