"""The CIFAR-10 ResNet trainer, declared for the runner.

    python -m cifar10_estimator.cifar10_main --data-dir DIR --job-dir DIR \
        [--num-layers 44] [--train-steps 1000] ...

Flags, input checks and the pieces the runner assembles: the `model_fn`
(`cifar10_estimator.model`), the TFRecord input functions
(`cifar10_estimator.data`) and a serving signature that takes raw uint8
images. TensorFlow is imported inside the methods, so `--help` is instant.
"""
import argparse
import dataclasses
import os

from estimator_trainers import flags
from estimator_trainers import runner
from estimator_trainers.errors import UserInputError

DATA_MODULE = 'cifar10_estimator.generate_cifar10_tfrecords'


def num_layers_type(text):
    """argparse type: ResNet depth 6n+2 (8, 14, 20, 32, 44, 56, 110, ...)."""
    value = flags.positive_int(text)
    if value < 8 or (value - 2) % 6:
        raise argparse.ArgumentTypeError(
            'expected 6n+2 (e.g. 20, 32, 44, 56, 110), got %d' % value)
    return value


def check_inputs(data_dir, hparams, eval_batch_size, validate_files=True):
    """Validates data and batch sizes against the devices; returns split counts.

    Raises:
      UserInputError: a missing/corrupt data file or an impossible batch split.
    """
    from cifar10_estimator import data  # pylint: disable=g-import-not-at-top
    num_devices = len(hparams.devices)
    if hparams.train_batch_size % num_devices:
        raise UserInputError('--train-batch-size=%d must be divisible by the %d devices'
                             ' (%s)' % (hparams.train_batch_size, num_devices,
                                        ', '.join(hparams.devices)))
    if eval_batch_size % num_devices:
        raise UserInputError('--eval-batch-size=%d must be divisible by the %d devices'
                             % (eval_batch_size, num_devices))
    counts = data.read_metadata(data_dir)
    if counts['eval'] % eval_batch_size:
        raise UserInputError('--eval-batch-size=%d must divide the %d eval examples, so '
                             'every example is evaluated exactly once'
                             % (eval_batch_size, counts['eval']))
    if validate_files:
        for subset in ('train', 'eval'):
            data.validate_subset(data_dir, subset, counts[subset])
    return counts


def memory_estimate(num_layers):
    """Rough float32 training memory of a ResNet of `num_layers` (`runner.MemoryEstimate`).

    Per example: each of the 6n convolutions keeps its output, the batch-norm
    output, the ReLU output and, during the backward pass, a gradient of the
    same size (16x32x32, 32x16x16 or 64x8x8 floats per stage), plus the
    image. Fixed: each 3x3 kernel's weights, gradient and momentum.
    """
    blocks = (num_layers - 2) // 6
    stage_floats = (16 * 32 * 32, 32 * 16 * 16, 64 * 8 * 8)
    per_example = 4 * (4 * 2 * blocks * sum(stage_floats) + 4 * 16 * 32 * 32 + 3 * 3072)
    weights = 2 * blocks * sum(9 * c * c for c in (16, 32, 64))
    return runner.MemoryEstimate(fixed_bytes=3 * 4 * weights, bytes_per_example=per_example)


def serving_input_receiver_fn():
    """Serving signature: `images`, uint8 [batch, 32, 32, 3] raw RGB pixels."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    from cifar10_estimator import data  # pylint: disable=g-import-not-at-top
    images = tf.compat.v1.placeholder(
        tf.uint8, [None, data.HEIGHT, data.WIDTH, data.DEPTH], name='images')
    return tf.estimator.export.ServingInputReceiver(
        {'images': tf.cast(images, tf.float32)}, {'images': images})


class Cifar10Trainer(runner.Trainer):
    """ResNet v1 (6n+2 layers) on CIFAR-10 TFRecords, in towers over local devices."""
    name = 'cifar10'
    module = 'cifar10_estimator.cifar10_main'
    description = ('Train and evaluate a CIFAR-10 ResNet with tf.estimator; export a '
                   'SavedModel that takes raw uint8 images.')
    train_steps = 80000
    checkpoint_steps = 1000
    mixed_precision = True
    local_args = ('--train-steps=1000',)

    def add_flags(self, parser):
        parser.add_argument('--data-dir', type=flags.path, required=True,
                            help='Directory with train/eval TFRecords and metadata.json '
                                 '(from generate_cifar10_tfrecords); local or gs://.')
        group = parser.add_argument_group('model')
        group.add_argument('--num-layers', type=num_layers_type, default=44,
                           help='ResNet depth, 6n+2.')
        group.add_argument('--train-batch-size', type=flags.positive_int, default=128,
                           help='Examples per step on this worker (split over its devices).')
        group.add_argument('--eval-batch-size', type=flags.positive_int, default=100,
                           help='Examples per eval batch; must divide the eval set.')
        group.add_argument('--momentum', type=flags.non_negative_float, default=0.9,
                           help='Momentum of the optimizer.')
        group.add_argument('--weight-decay', type=flags.non_negative_float, default=2e-4,
                           help='L2 weight decay.')
        group.add_argument('--learning-rate', type=flags.positive_float, default=0.1,
                           help='Initial learning rate (x0.1, x0.01, x0.002 at epochs '
                                '82, 123, 300).')
        group.add_argument('--batch-norm-decay', type=flags.unit_interval, default=0.997,
                           help='Decay of the batch-norm moving averages.')
        group.add_argument('--batch-norm-epsilon', type=flags.positive_float, default=1e-5,
                           help='Epsilon of batch normalisation.')
        group.add_argument('--use-distortion-for-training',
                           action=argparse.BooleanOptionalAction, default=True,
                           help='Random crop and flip of training images.')
        group.add_argument('--data-format', choices=('channels_first', 'channels_last'),
                           default=None,
                           help='Layout inside the network (default: channels_first with '
                                'GPUs, channels_last on CPU).')
        group = parser.add_argument_group('devices')
        group.add_argument('--num-gpus', type=flags.non_negative_int, default=None,
                           help='GPUs to train on, one tower each (default: all GPUs '
                                'present; 0 trains on the CPU; parameter servers use none).')
        group.add_argument('--variable-strategy', choices=('CPU', 'GPU'), default='CPU',
                           help='Where towers share variables: on the CPU or on the first '
                                'GPU (ignored with parameter servers).')
        group.add_argument('--sync', action=argparse.BooleanOptionalAction, default=False,
                           help='Synchronous training across workers (SyncReplicasOptimizer'
                                ' with parameter servers).')

    def data_args(self, data_dir):
        return ['--data-dir', data_dir]

    def data_ready(self, data_dir):
        return os.path.isfile(os.path.join(data_dir, 'metadata.json'))

    def data_step(self, data_dir, environ):
        source = environ.get('CIFAR10_SOURCE')
        return [DATA_MODULE, '--data-dir', data_dir] + (['--source', source] if source else [])

    def cloud_data_args(self, bucket_uri):
        return [('--data-dir', bucket_uri + '/data/cifar10')]

    def check(self, args, task):
        import tensorflow as tf  # pylint: disable=g-import-not-at-top
        from cifar10_estimator import model  # pylint: disable=g-import-not-at-top
        from estimator_trainers import devices as devices_lib  # pylint: disable=g-import-not-at-top
        dist = task.distribution
        if args.sync and dist.synchronous:
            raise UserInputError(
                '--sync wraps the optimizer for parameter servers; '
                '--distribution-strategy=%s is synchronous already' % dist.strategy)
        mixed_precision = devices_lib.resolve_mixed_precision(args.mixed_precision,
                                                              task.num_gpus)
        tf.compat.v1.logging.info('Mixed precision: %s%s', mixed_precision,
                                  ' (auto)' if args.mixed_precision == 'auto' else '')
        cluster = task.cluster
        hparams = model.HParams(
            num_layers=args.num_layers, weight_decay=args.weight_decay,
            momentum=args.momentum, learning_rate=args.learning_rate,
            batch_norm_decay=args.batch_norm_decay,
            batch_norm_epsilon=args.batch_norm_epsilon,
            data_format=args.data_format or (
                'channels_first' if task.num_gpus else 'channels_last'),
            # A tf.distribute strategy replicates the model itself: one tower each.
            train_batch_size=task.replica_batch(args.train_batch_size,
                                                '--train-batch-size'),
            devices=task.devices[:1] if dist.builds_strategy else task.devices,
            replicas_in_sync=dist.replicas_in_sync,
            variable_strategy=args.variable_strategy, sync=args.sync,
            num_workers=cluster.num_workers, is_chief=cluster.is_chief,
            cluster_has_ps=cluster.num_ps > 0, mixed_precision=mixed_precision)
        counts = check_inputs(args.data_dir, hparams, args.eval_batch_size,
                              validate_files=not cluster.is_evaluator)
        hparams = dataclasses.replace(hparams, train_examples=counts['train'])
        return runner.Plan(train_steps=args.train_steps,
                           examples_per_step=args.train_batch_size,
                           facts=(hparams, counts), train_examples=counts['train'],
                           batch_flag='--train-batch-size',
                           memory=memory_estimate(args.num_layers),
                           # SyncReplicasOptimizer: one global step takes every worker's batch.
                           examples_per_global_step=(
                               args.train_batch_size * cluster.num_workers
                               if hparams.sync and cluster.num_workers > 1 else None))

    def model_params(self, args, plan):
        return {'num-layers': args.num_layers}

    def estimator(self, args, task, plan, run_config):
        import tensorflow as tf  # pylint: disable=g-import-not-at-top
        from cifar10_estimator import model  # pylint: disable=g-import-not-at-top
        hparams, _ = plan.facts
        return tf.estimator.Estimator(model_fn=model.model_fn, config=run_config,
                                      params={'hparams': hparams})

    def input_fns(self, args, task, plan):
        from cifar10_estimator import data  # pylint: disable=g-import-not-at-top
        hparams, counts = plan.facts
        train = data.input_fn(args.data_dir, 'train', hparams.train_batch_size,
                              training=True, count=counts['train'],
                              seed=task.cluster.input_seed(args.random_seed),
                              distort=args.use_distortion_for_training)
        evaluate = data.input_fn(args.data_dir, 'eval', args.eval_batch_size,
                                 training=False)
        return train, evaluate

    def serving_input_receiver_fn(self, args, plan):
        return serving_input_receiver_fn


TRAINER = Cifar10Trainer()

if __name__ == '__main__':
    runner.run_cli(TRAINER)
