"""The courses' Keras models on the runner: `--model mnist_cnn|cifar10_mlp`.

    python -m keras_estimator.trainer --data-dir DIR --job-dir DIR \
        [--model mnist_cnn] [--train-steps 5000] ...

mnist_cnn trains on the `mnist.npz` of `keras.datasets.mnist` (put into
`--data-dir` by `python -m keras_estimator.data`); cifar10_mlp on the CIFAR-10
TFRecords of the ResNet trainer (`cifar10_estimator.generate_cifar10_tfrecords`).
The Keras model runs inside an Estimator `model_fn` (`keras_estimator.model`
says why), so local, parameter-server and multi_worker_mirrored training,
checkpoints, evaluation and the uint8-image SavedModel come from the runner
like the other trainers'. TensorFlow is imported inside the methods, so
`--help` is instant.
"""
import dataclasses
import os

from estimator_trainers import flags
from estimator_trainers import runner
from estimator_trainers.errors import UserInputError
from keras_estimator import data

MNIST_CNN = 'mnist_cnn'
CIFAR10_MLP = 'cifar10_mlp'
MODELS = (MNIST_CNN, CIFAR10_MLP)
CIFAR10_METADATA = 'metadata.json'  # cifar10_estimator.data.METADATA_FILE, without TensorFlow


@dataclasses.dataclass(frozen=True)
class _Facts:
    """What the input check found, for the later steps of a run."""
    hparams: object
    replica_batch: int
    train_count: int
    mnist: object = None


def serving_input_receiver_fn(shape):
    """Serving signature: `images`, uint8 [batch, *shape] raw pixels."""
    def receiver_fn():
        import tensorflow as tf  # pylint: disable=g-import-not-at-top
        images = tf.compat.v1.placeholder(tf.uint8, [None] + list(shape), name='images')
        return tf.estimator.export.ServingInputReceiver(
            {'images': tf.cast(images, tf.float32)}, {'images': images})
    return receiver_fn


class KerasTrainer(runner.Trainer):
    """The MNIST CNN and CIFAR-10 MLP of the Keras courses, as an Estimator."""
    name = 'keras'
    module = 'keras_estimator.trainer'
    description = ('Train and evaluate the courses\' Keras models (MNIST CNN, CIFAR-10 '
                   'MLP) as an Estimator; export a SavedModel that takes raw uint8 images.')
    train_steps = 5000
    checkpoint_steps = 500
    eval_frequency_secs = 60

    def add_flags(self, parser):
        parser.add_argument('--data-dir', type=flags.path, required=True,
                            help='mnist_cnn: directory with %s (python -m '
                                 'keras_estimator.data); cifar10_mlp: the CIFAR-10 '
                                 'TFRecords with %s (python -m cifar10_estimator.'
                                 'generate_cifar10_tfrecords). Local or gs://.'
                                 % (data.MNIST_FILE, CIFAR10_METADATA))
        group = parser.add_argument_group('model')
        group.add_argument('--model', choices=MODELS, default=MNIST_CNN,
                           help='mnist_cnn: Conv 32-MaxPool-Conv 64-MaxPool-Conv 64-Dense '
                                '64-Dense 10 on MNIST. cifar10_mlp: Dense 300/500/700/30 '
                                'with batch norm, dropout and L2, Dense 10, on CIFAR-10.')
        group.add_argument('--batch-size', type=flags.positive_int, default=64,
                           help='Examples per training step on this worker, and per '
                                'evaluation batch.')
        group.add_argument('--learning-rate', type=flags.positive_float, default=0.01,
                           help='Learning rate of the SGD optimizer (constant).')
        group.add_argument('--momentum', type=flags.non_negative_float, default=0.9,
                           help='Momentum of the SGD optimizer.')
        group.add_argument('--weight-decay', type=flags.non_negative_float, default=1e-4,
                           help='cifar10_mlp only: L2 factor on every kernel and bias '
                                '(adds weight_decay * sum(w**2) to the loss).')
        group.add_argument('--batch-norm-momentum', type=flags.unit_interval, default=0.99,
                           help='cifar10_mlp only: momentum of the batch-norm moving '
                                'averages that evaluation and serving use.')

    def data_args(self, data_dir):
        return ['--data-dir', data_dir]

    def data_ready(self, data_dir):
        # The data step fetches MNIST (the default model); a directory of
        # CIFAR-10 TFRecords (--model cifar10_mlp) is ready as it is.
        return any(os.path.isfile(os.path.join(data_dir, name))
                   for name in (data.MNIST_FILE, CIFAR10_METADATA))

    def data_step(self, data_dir, environ):
        source = environ.get('MNIST_SOURCE')
        return (['keras_estimator.data', '--data-dir', data_dir]
                + (['--source', source] if source else []))

    def cloud_data_args(self, bucket_uri):
        return [('--data-dir', bucket_uri + '/data/mnist')]

    def check(self, args, task):
        import tensorflow as tf  # pylint: disable=g-import-not-at-top
        from keras_estimator import model  # pylint: disable=g-import-not-at-top
        replica_batch = task.replica_batch(args.batch_size, '--batch-size')
        hparams = model.HParams(model=args.model, learning_rate=args.learning_rate,
                                momentum=args.momentum, weight_decay=args.weight_decay,
                                batch_norm_momentum=args.batch_norm_momentum)
        mnist = None
        if args.model == MNIST_CNN:
            mnist = data.read(args.data_dir)
            counts = {'train': len(mnist.y_train), 'eval': len(mnist.y_test)}
        else:
            from cifar10_estimator import data as cifar10_data  # pylint: disable=g-import-not-at-top
            counts = cifar10_data.read_metadata(args.data_dir)
            if not task.cluster.is_evaluator:
                for subset in ('train', 'eval'):
                    cifar10_data.validate_subset(args.data_dir, subset, counts[subset])
        if replica_batch > counts['train']:
            raise UserInputError('--batch-size=%d is more than the %d training examples '
                                 'in --data-dir %s' % (args.batch_size, counts['train'],
                                                       args.data_dir))
        tf.compat.v1.logging.info('%s: %d training and %d evaluation examples in %s',
                                  args.model, counts['train'], counts['eval'],
                                  args.data_dir)
        return runner.Plan(train_steps=args.train_steps, examples_per_step=args.batch_size,
                           facts=_Facts(hparams, replica_batch, counts['train'], mnist))

    def model_params(self, args, plan):
        return {'model': args.model}

    def estimator(self, args, task, plan, run_config):
        import tensorflow as tf  # pylint: disable=g-import-not-at-top
        from keras_estimator import model  # pylint: disable=g-import-not-at-top
        return tf.estimator.Estimator(model_fn=model.model_fn, config=run_config,
                                      params={'hparams': plan.facts.hparams})

    def input_fns(self, args, task, plan):
        facts = plan.facts
        seed = task.cluster.input_seed(args.random_seed)
        if facts.mnist is not None:
            mnist = facts.mnist
            return (data.input_fn(mnist.x_train, mnist.y_train, facts.replica_batch,
                                  training=True, seed=seed),
                    data.input_fn(mnist.x_test, mnist.y_test, args.batch_size,
                                  training=False))
        from cifar10_estimator import data as cifar10_data  # pylint: disable=g-import-not-at-top
        return (cifar10_data.input_fn(args.data_dir, 'train', facts.replica_batch,
                                      training=True, count=facts.train_count, seed=seed,
                                      distort=False),
                cifar10_data.input_fn(args.data_dir, 'eval', args.batch_size,
                                      training=False))

    def serving_input_receiver_fn(self, args, plan):
        if args.model == MNIST_CNN:
            return serving_input_receiver_fn([data.HEIGHT, data.WIDTH])
        from cifar10_estimator import data as cifar10_data  # pylint: disable=g-import-not-at-top
        return serving_input_receiver_fn(
            [cifar10_data.HEIGHT, cifar10_data.WIDTH, cifar10_data.DEPTH])


TRAINER = KerasTrainer()

if __name__ == '__main__':
    runner.run_cli(TRAINER)
