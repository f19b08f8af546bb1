"""The wide-and-deep tip classifier (`tf.estimator.DNNLinearCombinedClassifier`'s model).

The linear (wide) side trains with L2-regularised FTRL, the DNN (deep) side
with Adam. Both learning rates decay exponentially by
`learning_rate_decay_factor` over the run to the step target. The optimizers
are built inside the Estimator's graph (the reference sample built its
schedule outside it, on a global step the model never used).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Callable, Dict, List, Optional, Tuple

import tensorflow as tf
from tensorflow_estimator.python.estimator.head import head_utils

from estimator_trainers import run_config
from estimator_trainers import summaries
from taxi_estimator import features as features_lib

# FTRL's L2 strength: keeps the many sparse wide weights (tracts, crosses)
# from fitting noise in small data sets.
LINEAR_L2 = 0.3
# The canned classifier's default: the mean loss over the batch.
LOSS_REDUCTION = tf.losses.Reduction.SUM_OVER_BATCH_SIZE

Features = features_lib.Features
# An optimizer's (gradient, variable) pairs (a gradient may be None).
GradsAndVars = List[Tuple[Optional[tf.Tensor], tf.Variable]]
# A Keras optimizer's `gradient_aggregator` (`run_config.dense_gradient_aggregator`).
GradientAggregator = Callable[[GradsAndVars], GradsAndVars]
# A `tf.compat.v1.metrics` metric: (value, update op).
MetricOp = Tuple[tf.Tensor, tf.Operation]


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
    hidden_units: Tuple[int, ...]
    learning_rate: float
    linear_learning_rate: float
    learning_rate_decay_factor: float = 1.0
    decay_steps: int = 1
    dropout: Optional[float] = None


def steps_for_epochs(num_epochs: int, train_size: int, batch_size: int) -> int:
    """Global steps that `num_epochs` passes over `train_size` rows take."""
    return max(1, math.ceil(num_epochs * train_size / batch_size))


def build_estimator(config: tf.estimator.RunConfig, stats: features_lib.Stats,
                    hparams: HParams) -> tf.estimator.Estimator:
    """The wide-and-deep classifier over `features_lib` inputs.

    `DNNLinearCombinedClassifier`'s model (same variables, head, optimizers
    and math: checkpoints of one restore into the other), written in plain
    ops instead of feature columns, whose generic sparse plumbing made up
    most of a training step's ops (benchmarks/RESULTS.md). Its `model_fn`
    adds what the canned one lacks: training `accuracy` and `auc` of each
    batch and both learning rates under the documented tags (`summaries`),
    and a `serving_default` signature in every export.

    Args:
      config: `tf.estimator.RunConfig`.
      stats: normalisation statistics ({feature: {'mean', 'std'}}).
      hparams: `HParams`.
    """
    aggregator: Optional[GradientAggregator] = run_config.dense_gradient_aggregator(config)
    head = head_utils.binary_or_multi_class_head(
        2, weight_column=None, label_vocabulary=None, loss_reduction=LOSS_REDUCTION)

    def model_fn(features: Features, labels: Optional[tf.Tensor], mode: str,
                 config: tf.estimator.RunConfig) -> tf.estimator.EstimatorSpec:
        del config
        if features_lib.WIDE_IDS not in features:  # serving (the input_fns add them)
            with tf.name_scope('model_inputs'):
                features = features_lib.model_inputs(features)
        training = mode == tf.estimator.ModeKeys.TRAIN
        evaluating = mode == tf.estimator.ModeKeys.EVAL
        linear_logits, linear_variables = _linear(features[features_lib.WIDE_IDS])
        dnn_logits, dnn_variables = _dnn(features, stats, hparams, training)
        logits = dnn_logits + linear_logits
        if training:
            return _training_spec(logits, labels, hparams, aggregator,
                                  dnn_variables, linear_variables)
        predictions = head.create_estimator_spec(
            features=features, mode=tf.estimator.ModeKeys.PREDICT, logits=logits)
        if evaluating:
            return _evaluation_spec(predictions.predictions, labels)
        return _with_default_signature(predictions)

    return tf.estimator.Estimator(model_fn=model_fn, config=config)


def _linear(wide_ids: tf.Tensor) -> Tuple[tf.Tensor, List[tf.Variable]]:
    """(logits, variables) of the linear side: a bias plus one weight per wide id."""
    with tf.compat.v1.variable_scope('linear/linear_model'):
        weights = tf.compat.v1.get_variable(
            features_lib.WIDE_IDS + '/weights', [features_lib.WIDE_BUCKETS, 1],
            initializer=tf.compat.v1.zeros_initializer())
        bias = tf.compat.v1.get_variable('bias_weights', [1],
                                         initializer=tf.compat.v1.zeros_initializer())
        logits = linear_logits(wide_ids, weights, bias)
    return logits, [weights, bias]


def linear_logits(wide_ids: tf.Tensor, weights: tf.Variable, bias: tf.Variable) -> tf.Tensor:
    """The linear side's logits [batch, 1]: `bias` plus the `weights` of the ids present.

    As the canned linear model sums them, but as one gather (a -1 gathers
    weight 0 and is masked out: its gradient is zero, and an FTRL update
    with a zero gradient leaves a weight as it is).
    """
    present = tf.cast(wide_ids >= 0, tf.float32)
    per_id = tf.reshape(tf.gather(weights, tf.maximum(wide_ids, 0)), tf.shape(wide_ids))
    return tf.reduce_sum(per_id * present, axis=1, keepdims=True) + bias


def dnn_input(inputs: Features, stats: features_lib.Stats, table: tf.Variable) -> tf.Tensor:
    """The DNN's input [batch, width] from `features_lib.model_inputs` and the
    company embedding `table`.

    `features_lib.deep_inputs` and the embedding concatenated in the order of
    their names, as `DenseFeatures` lays out its feature columns, so the
    first layer's kernel rows mean what they meant in the canned model. The
    embedding is a one-hot product rather than a gather: the same rows (a
    missing company, -1, is all zeros), and a dense gradient, which Adam
    applies in one op where a sparse one takes a dozen.
    """
    deep = features_lib.deep_inputs(inputs, stats)
    company = features_lib.own_ids(inputs[features_lib.WIDE_IDS], 'company')
    deep[features_lib.COMPANY_EMBEDDING] = tf.matmul(
        tf.one_hot(company, features_lib.COMPANY_BUCKETS), table)
    return tf.concat([deep[name] for name in sorted(deep)], axis=1)


def _dnn(features: Features, stats: features_lib.Stats, hparams: HParams,
         training: bool) -> Tuple[tf.Tensor, List[tf.Variable]]:
    """(logits, variables) of the ReLU DNN, laid out as the canned `dnn` model."""
    with tf.compat.v1.variable_scope('dnn'):
        with tf.compat.v1.variable_scope(
                'input_from_feature_columns/input_layer/' + features_lib.COMPANY_EMBEDDING):
            table = tf.compat.v1.get_variable(
                'embedding_weights', [features_lib.COMPANY_BUCKETS, features_lib.EMBEDDING_DIM],
                initializer=tf.compat.v1.truncated_normal_initializer(
                    stddev=1 / math.sqrt(features_lib.EMBEDDING_DIM)))
        net = dnn_input(features, stats, table)
        variables = [table]
        layers = [('hiddenlayer_%d' % i, units, tf.nn.relu)
                  for i, units in enumerate(hparams.hidden_units)]
        for name, units, activation in layers + [('logits', 1, None)]:
            with tf.compat.v1.variable_scope(name):
                kernel = tf.compat.v1.get_variable(
                    'kernel', [net.shape[1], units],
                    initializer=tf.compat.v1.glorot_uniform_initializer())
                bias = tf.compat.v1.get_variable(
                    'bias', [units], initializer=tf.compat.v1.zeros_initializer())
            net = tf.nn.bias_add(tf.matmul(net, kernel), bias)
            variables += [kernel, bias]
            if activation:
                net = activation(net)
                if hparams.dropout and training:
                    net = tf.nn.dropout(net, rate=hparams.dropout)
    return net, variables


def _training_spec(logits: tf.Tensor, labels: tf.Tensor, hparams: HParams,
                   aggregator: Optional[GradientAggregator], dnn_variables: List[tf.Variable],
                   linear_variables: List[tf.Variable]) -> tf.estimator.EstimatorSpec:
    """The TRAIN spec: the canned binary head's loss and the canned model's updates.

    The head's mean sigmoid cross-entropy, computed directly: the head would
    also check the labels' range and build every prediction at every step,
    where the input_fns make the labels 0 or 1.
    """
    labels = tf.reshape(tf.cast(labels, tf.float32), [-1, 1])
    loss = tf.reduce_mean(  # LOSS_REDUCTION: the mean over the batch
        tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits))
    linear_optimizer = tf.keras.optimizers.legacy.Ftrl(
        _learning_rate(hparams.linear_learning_rate, hparams, 'linear_ftrl'),
        l2_regularization_strength=LINEAR_L2, gradient_aggregator=aggregator)
    dnn_optimizer = tf.keras.optimizers.legacy.Adam(
        _learning_rate(hparams.learning_rate, hparams, 'dnn_adam'),
        gradient_aggregator=aggregator)
    # One optimizer advances the global step (the canned model's rule).
    dnn_optimizer.iterations = tf.compat.v1.train.get_or_create_global_step()
    # Synchronous replicas each minimise their share of the mean (as canned).
    replicas = tf.distribute.get_strategy().num_replicas_in_sync
    variables = dnn_variables + linear_variables
    # The canned head's scope, which names the optimizers' slots in checkpoints.
    with tf.name_scope('training'):
        # One backward pass for both sides (each optimizer's get_updates would
        # differentiate the loss on its own).
        gradients = tf.compat.v1.gradients(loss / replicas if replicas > 1 else loss,
                                           variables)
        # The linear weights' gradient (IndexedSlices of a gather) made dense:
        # FTRL then updates them in one op, where a sparse update first
        # deduplicated the batch's ids (Unique, UnsortedSegmentSum) and cost
        # ~10% of a step. The same update: FTRL leaves a weight whose
        # gradient is zero exactly as it is (`linear_logits`).
        gradients = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g
                     for g in gradients]
        pairs = list(zip(gradients, variables))
        train_op = tf.group(dnn_optimizer.apply_gradients(pairs[:len(dnn_variables)]),
                            linear_optimizer.apply_gradients(pairs[len(dnn_variables):]))
    # The head's class: 1 where the logit is positive.
    accuracy = summaries.batch_accuracy(labels, tf.cast(logits > 0, tf.int64))
    with tf.name_scope('batch_metrics'):
        auc = summaries.batch_auc(labels, tf.sigmoid(logits))
    summaries.training_metrics(loss, accuracy=accuracy, auc=auc)
    return tf.estimator.EstimatorSpec(tf.estimator.ModeKeys.TRAIN, loss=loss,
                                      train_op=train_op)


def _evaluation_spec(predictions: Dict[str, tf.Tensor],
                     labels: tf.Tensor) -> tf.estimator.EstimatorSpec:
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


def _auc(labels: tf.Tensor, probabilities: tf.Tensor, **kwargs: str) -> MetricOp:
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


def _with_default_signature(spec: tf.estimator.EstimatorSpec) -> tf.estimator.EstimatorSpec:
    """`serving_default` = the `predict` signature where the head offers none.

    The canned head's default is a classification signature, which needs one
    string input: the JSON export's typed inputs drop it, leaving no
    `serving_default` for TensorFlow Serving's REST API or Vertex AI. The
    predict signature works with every input format.
    """
    outputs = dict(spec.export_outputs)
    outputs['serving_default'] = outputs['predict']
    return spec._replace(export_outputs=outputs)


def _learning_rate(initial: float, hparams: HParams,
                   optimizer: str) -> tf.keras.optimizers.schedules.LearningRateSchedule:
    """Decaying learning rate, made in the model's graph, shown as `learning_rate/<optimizer>`."""
    if hparams.learning_rate_decay_factor == 1.0:  # the default: no decay
        schedule = _ConstantRate(initial)
    else:
        schedule = tf.keras.optimizers.schedules.ExponentialDecay(
            initial, decay_steps=hparams.decay_steps,
            decay_rate=hparams.learning_rate_decay_factor)
    summaries.learning_rate(schedule(tf.compat.v1.train.get_or_create_global_step()),
                            optimizer)
    return schedule


# Keras is untyped: its base classes are `Any` to mypy (hence the ignore).
class _ConstantRate(tf.keras.optimizers.schedules.LearningRateSchedule):  # type: ignore[misc]
    """A learning rate that does not decay: `initial`, the value exponential
    decay by a factor of 1 computes, without its ops at every step. A schedule
    rather than a number, so the optimizers keep no learning-rate variable
    either way and checkpoints do not depend on the factor."""

    def __init__(self, rate: float) -> None:
        super().__init__()
        self._rate = rate

    def __call__(self, step: tf.Tensor) -> tf.Tensor:
        del step  # constant
        return tf.constant(self._rate, tf.float32)

    def get_config(self) -> Dict[str, float]:
        return {'rate': self._rate}
