"""Toy trainer: fits y = 3x + 1 with one linear unit, declared for the runner."""
import os

from estimator_trainers import flags
from estimator_trainers import runner
from estimator_trainers.errors import UserInputError

DATA_FILE = 'points.npz'


def _model_fn(features, labels, mode):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    from estimator_trainers import summaries  # pylint: disable=g-import-not-at-top
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


class ToyTrainer(runner.Trainer):
    """Linear regression on generated points."""
    name = 'toy'
    description = 'Fit y = 3x + 1 (a toy trainer from outside the project).'
    train_steps = 60
    checkpoint_steps = 20

    def add_flags(self, parser):
        parser.add_argument('--data-dir', required=True, help='Directory with points.npz.')
        parser.add_argument('--batch-size', type=flags.positive_int, default=16,
                            help='Examples per step.')

    def data_args(self, data_dir):
        return ['--data-dir', data_dir]

    def data_ready(self, data_dir):
        return os.path.isfile(os.path.join(data_dir, DATA_FILE))

    def data_step(self, data_dir, environ):
        return ['toy_estimator.data', data_dir]

    def cloud_data_args(self, bucket_uri):
        return [('--data-dir', bucket_uri + '/data/toy')]

    def check(self, args, task):
        path = os.path.join(args.data_dir, DATA_FILE)
        if not os.path.isfile(path):
            raise UserInputError('--data-dir %s has no %s' % (args.data_dir, DATA_FILE))
        return runner.Plan(train_steps=args.train_steps, examples_per_step=args.batch_size,
                           facts=path)

    def estimator(self, args, task, plan, run_config):
        import tensorflow as tf  # pylint: disable=g-import-not-at-top
        return tf.estimator.Estimator(_model_fn, config=run_config)

    def input_fns(self, args, task, plan):
        import numpy as np  # pylint: disable=g-import-not-at-top
        import tensorflow as tf  # pylint: disable=g-import-not-at-top
        points = np.load(plan.facts)

        def train():
            return tf.data.Dataset.from_tensor_slices(
                ({'x': points['x']}, points['y'])).repeat().batch(args.batch_size)

        def evaluate():
            return tf.data.Dataset.from_tensor_slices(
                ({'x': points['x']}, points['y'])).batch(args.batch_size)
        return train, evaluate

    def serving_input_receiver_fn(self, args, plan):
        import tensorflow as tf  # pylint: disable=g-import-not-at-top

        def serving():
            x = tf.compat.v1.placeholder(tf.float32, [None, 1], name='x')
            return tf.estimator.export.ServingInputReceiver({'x': x}, {'x': x})
        return serving


TRAINER = ToyTrainer()

if __name__ == '__main__':
    runner.run_cli(TRAINER)
