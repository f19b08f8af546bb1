"""The wide-and-deep tip classifier (`tf.estimator.DNNLinearCombinedClassifier`'s model).

The linear (wide) side trains with L2-regularised FTRL, the DNN (deep) side
with Adam. Both learning rates decay exponentially by
`learning_rate_decay_factor` over the run to the step target. The optimizers
are built inside the Estimator's graph (the reference sample built its
schedule outside it, on a global step the model never used).
"""
import dataclasses
import math

import tensorflow as tf
from tensorflow_estimator.python.estimator.canned import dnn_linear_combined
from tensorflow_estimator.python.estimator.head import head_utils

from estimator_trainers import run_config
from estimator_trainers import summaries
from taxi_estimator import features as features_lib

# FTRL's L2 strength: keeps the many sparse wide weights (tracts, crosses)
# from fitting noise in small data sets.
LINEAR_L2 = 0.3
# The canned classifier's default: the mean loss over the batch.
LOSS_REDUCTION = tf.losses.Reduction.SUM_OVER_BATCH_SIZE


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


def steps_for_epochs(num_epochs, train_size, batch_size):
    """Global steps that `num_epochs` passes over `train_size` rows take."""
    return max(1, math.ceil(num_epochs * train_size / batch_size))


def build_estimator(config, stats, hparams):
    """The wide-and-deep classifier over `features_lib.wide_and_deep_columns(stats)`.

    The canned `DNNLinearCombinedClassifier` model (same variables, head and
    optimizers), in one plain Estimator whose `model_fn` adds what the canned
    one lacks: training `accuracy` and `auc` of each batch and both learning
    rates under the documented tags (`summaries`), and a `serving_default`
    signature in every export.

    Args:
      config: `tf.estimator.RunConfig`.
      stats: normalisation statistics ({feature: {'mean', 'std'}}).
      hparams: `HParams`.
    """
    wide, deep = features_lib.wide_and_deep_columns(stats)
    aggregator = run_config.dense_gradient_aggregator(config)
    head = head_utils.binary_or_multi_class_head(
        2, weight_column=None, label_vocabulary=None, loss_reduction=LOSS_REDUCTION)

    def model_fn(features, labels, mode, config):
        if features_lib.WIDE_IDS not in features:  # serving (the input_fns add them)
            with tf.name_scope('wide_ids'):
                features = features_lib.with_wide_ids(features)
        evaluating = mode == tf.estimator.ModeKeys.EVAL
        spec = dnn_linear_combined._dnn_linear_combined_model_fn_v2(  # pylint: disable=protected-access
            features=features, labels=None if evaluating else labels,
            mode=tf.estimator.ModeKeys.PREDICT if evaluating else mode, head=head,
            linear_feature_columns=wide,
            linear_optimizer=lambda: tf.keras.optimizers.legacy.Ftrl(
                _learning_rate(hparams.linear_learning_rate, hparams, 'linear_ftrl'),
                l2_regularization_strength=LINEAR_L2, gradient_aggregator=aggregator),
            dnn_feature_columns=deep,
            dnn_optimizer=lambda: tf.keras.optimizers.legacy.Adam(
                _learning_rate(hparams.learning_rate, hparams, 'dnn_adam'),
                gradient_aggregator=aggregator),
            dnn_hidden_units=list(hparams.hidden_units),
            dnn_dropout=hparams.dropout or None,
            config=config, loss_reduction=LOSS_REDUCTION)
        if mode == tf.estimator.ModeKeys.TRAIN:
            summaries.keep_tag_set()
            _training_metrics(spec, labels)
        elif evaluating:
            spec = _evaluation_spec(spec.predictions, labels)
        else:
            spec = _with_default_signature(spec)
        return spec

    return tf.estimator.Estimator(model_fn=model_fn, config=config)


def _training_metrics(spec, labels):
    """`accuracy` and `auc` of the training batch, on the eval metrics' charts."""
    with tf.name_scope('batch_metrics'):
        labels = tf.reshape(tf.cast(labels, tf.int64), [-1])
        classes = tf.reshape(spec.predictions['class_ids'], [-1])
        accuracy = tf.reduce_mean(tf.cast(tf.equal(classes, labels), tf.float32))
        auc = summaries.batch_auc(labels, spec.predictions['logistic'])
    summaries.training_metrics(spec.loss, accuracy=accuracy, auc=auc)


def _evaluation_spec(predictions, labels):
    """The canned binary head's evaluation metrics, as `tf.compat.v1.metrics`.

    Same names and meaning (`accuracy`, `accuracy_baseline`, `auc`,
    `auc_precision_recall` with 200 thresholds (trapezoids under the ROC curve,
    interpolated precision under the PR curve), `average_loss`, `label/mean`,
    `precision`, `prediction/mean`, `recall`; Estimator adds the mean `loss`),
    but the head builds them from Keras metric objects, whose graph took
    seconds to build (autograph, conditionals): most of the cost of the first
    evaluation of a run, which weighed on short runs (benchmarks/RESULTS.md).
    """
    labels = tf.reshape(tf.cast(labels, tf.float32), [-1, 1])
    logits = predictions['logits']
    probabilities = predictions['logistic']
    classes = tf.cast(predictions['class_ids'], tf.float32)
    per_example = tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits)
    loss = tf.reduce_mean(per_example)  # LOSS_REDUCTION: the mean over the batch
    metrics = tf.compat.v1.metrics
    with tf.name_scope('metrics'):
        label_mean = metrics.mean(labels)
        ops = {
            'accuracy': metrics.accuracy(labels, classes),
            'precision': metrics.precision(labels, classes),
            'recall': metrics.recall(labels, classes),
            'auc': _auc(labels, probabilities, curve='ROC'),
            'auc_precision_recall': _auc(labels, probabilities, curve='PR',
                                         summation_method='careful_interpolation'),
            'average_loss': metrics.mean(per_example),
            'label/mean': label_mean,
            'prediction/mean': metrics.mean(probabilities),
            'accuracy_baseline': (tf.maximum(label_mean[0], 1 - label_mean[0]),
                                  tf.no_op()),
        }
    return tf.estimator.EstimatorSpec(tf.estimator.ModeKeys.EVAL, loss=loss,
                                      predictions=predictions, eval_metric_ops=ops)


def _auc(labels, probabilities, **kwargs):
    """`tf.compat.v1.metrics.auc` with 200 thresholds, NaN once any probability is not finite.

    Its own range check fails the whole evaluation on a NaN probability: a
    checkpoint saved just before a run diverged (finite variables whose next
    loss is not) would end the run in a traceback instead of the divergence
    line (`hooks.StopOnDivergenceHook`).
    """
    finite = tf.math.is_finite(probabilities)
    auc, auc_update = tf.compat.v1.metrics.auc(
        labels, tf.where(finite, probabilities, tf.zeros_like(probabilities)),
        num_thresholds=200, **kwargs)
    bad, bad_update = tf.compat.v1.metrics.mean(1.0 - tf.cast(finite, tf.float32))
    return (tf.where(bad > 0, tf.constant(float('nan')), auc),
            tf.group(auc_update, bad_update))


def _with_default_signature(spec):
    """`serving_default` = the `predict` signature where the head offers none.

    The canned head's default is a classification signature, which needs one
    string input: the JSON export's typed inputs drop it, leaving no
    `serving_default` for TensorFlow Serving's REST API or Vertex AI. The
    predict signature works with every input format.
    """
    outputs = dict(spec.export_outputs)
    outputs['serving_default'] = outputs['predict']
    return spec._replace(export_outputs=outputs)


def _learning_rate(initial, hparams, optimizer):
    """Decaying learning rate, made in the model's graph, shown as `learning_rate/<optimizer>`."""
    schedule = tf.keras.optimizers.schedules.ExponentialDecay(
        initial, decay_steps=hparams.decay_steps,
        decay_rate=hparams.learning_rate_decay_factor)
    summaries.learning_rate(schedule(tf.compat.v1.train.get_or_create_global_step()),
                            optimizer)
    return schedule
