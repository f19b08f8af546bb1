"""What a toy training task does with TensorFlow."""
import os

import numpy as np
import tensorflow as tf

from estimator_trainers import declaration
from estimator_trainers import summaries
from estimator_trainers.errors import UserInputError
from toy_estimator.trainer import DATA_FILE


def _model_fn(features, labels, mode):
    x = features['x'] if isinstance(features, dict) else features
    weight = tf.compat.v1.get_variable('weight', [1, 1])
    bias = tf.compat.v1.get_variable('bias', [1], initializer=tf.compat.v1.zeros_initializer())
    prediction = tf.matmul(x, weight) + bias
    if mode == tf.estimator.ModeKeys.PREDICT:
        outputs = {'y': prediction}
        return tf.estimator.EstimatorSpec(mode, predictions=outputs, export_outputs={
            'serving_default': tf.estimator.export.PredictOutput(outputs)})
    loss = tf.compat.v1.losses.mean_squared_error(labels, prediction)
    metrics = {'mse': tf.compat.v1.metrics.mean_squared_error(labels, prediction)}
    if mode == tf.estimator.ModeKeys.EVAL:
        return tf.estimator.EstimatorSpec(mode, loss=loss, eval_metric_ops=metrics)
    summaries.training_metrics(loss)
    summaries.log_progress('weight', weight[0, 0])
    train_op = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(
        loss, global_step=tf.compat.v1.train.get_global_step())
    return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)


class ToyRuntime(declaration.Runtime):
    """Linear regression on generated points."""

    def check(self, args, task):
        path = os.path.join(args.data_dir, DATA_FILE)
        if not os.path.isfile(path):
            raise UserInputError('--data-dir %s has no %s' % (args.data_dir, DATA_FILE),
                                 flag='--data-dir')
        return declaration.Plan(train_steps=args.train_steps,
                                examples_per_step=args.batch_size, facts=path)

    def estimator(self, args, task, plan, run_config):
        return tf.estimator.Estimator(_model_fn, config=run_config)

    def input_fns(self, args, task, plan):
        points = np.load(plan.facts)

        def train():
            return tf.data.Dataset.from_tensor_slices(
                ({'x': points['x']}, points['y'])).repeat().batch(args.batch_size)

        def evaluate():
            return tf.data.Dataset.from_tensor_slices(
                ({'x': points['x']}, points['y'])).batch(args.batch_size)
        return train, evaluate

    def serving_input_receiver_fn(self, args, plan):
        def serving():
            x = tf.compat.v1.placeholder(tf.float32, [None, 1], name='x')
            return tf.estimator.export.ServingInputReceiver({'x': x}, {'x': x})
        return serving


RUNTIME = ToyRuntime()
