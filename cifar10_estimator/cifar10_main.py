"""Command line: train ResNet on CIFAR-10 with tf.estimator.

    python -m cifar10_estimator.cifar10_main --data-dir DIR --job-dir DIR \
        [--num-layers 44] [--train-steps 1000] ...

Runs as a single process, or as one task of a cluster described by TF_CONFIG
(the worker count comes from there). `--help` lists every flag.
"""
import argparse

from estimator_trainers import errors
from estimator_trainers import flags
from estimator_trainers import logs


def num_layers_type(text):
    """argparse type: ResNet depth 6n+2 (8, 14, 20, 32, 44, 56, 110, ...)."""
    value = flags.positive_int(text)
    if value < 8 or (value - 2) % 6:
        raise argparse.ArgumentTypeError(
            'expected 6n+2 (e.g. 20, 32, 44, 56, 110), got %d' % value)
    return value


def parse_args(argv=None):
    parser = flags.make_parser(
        'python -m cifar10_estimator.cifar10_main',
        'Train and evaluate a CIFAR-10 ResNet with tf.estimator; export a '
        'SavedModel that takes raw uint8 images.')
    parser.add_argument('--data-dir', required=True,
                        help='Directory with train/eval TFRecords and metadata.json '
                             '(from generate_cifar10_tfrecords); local or gs://.')
    flags.add_job_flags(parser)

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

    group = parser.add_argument_group('devices and distribution')
    group.add_argument('--num-gpus', type=flags.non_negative_int, default=None,
                       help='GPUs to train on, one tower each (default: all GPUs '
                            'present; 0 trains on the CPU).')
    group.add_argument('--variable-strategy', choices=('CPU', 'GPU'), default='CPU',
                       help='Where towers share variables: on the CPU or on the first '
                            'GPU (ignored with parameter servers).')
    group.add_argument('--sync', action=argparse.BooleanOptionalAction, default=False,
                       help='Synchronous training across workers (SyncReplicasOptimizer'
                            ' with parameter servers).')

    flags.add_training_loop_flags(parser, train_steps=80000, checkpoint_steps=1000)
    flags.add_performance_flags(parser, mixed_precision=True)
    flags.add_runtime_flags(parser)
    flags.add_distribution_flags(parser)
    return parser.parse_args(argv)


def main(argv=None):
    logs.quiet_tensorflow_native_logs()
    args = parse_args(argv)
    logs.configure(args.verbosity)
    # TensorFlow-heavy imports after parsing, so --help and flag errors are fast.
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    from cifar10_estimator import model  # pylint: disable=g-import-not-at-top
    from cifar10_estimator import trainer  # pylint: disable=g-import-not-at-top
    from estimator_trainers import cluster as cluster_lib  # pylint: disable=g-import-not-at-top
    from estimator_trainers import devices as devices_lib  # pylint: disable=g-import-not-at-top
    from estimator_trainers import distribution  # pylint: disable=g-import-not-at-top
    from estimator_trainers import run_config  # pylint: disable=g-import-not-at-top
    from estimator_trainers import training  # pylint: disable=g-import-not-at-top

    cluster = cluster_lib.load_cluster()
    cluster_lib.export_tf_config(cluster)
    num_gpus = (len(tf.config.list_physical_devices('GPU'))
                if args.num_gpus is None else args.num_gpus)
    devices = devices_lib.local_devices(num_gpus)
    dist = distribution.from_flags(args, cluster, devices)
    if args.sync and dist.synchronous:
        raise errors.UserInputError(
            '--sync wraps the optimizer for parameter servers; '
            '--distribution-strategy=%s is synchronous already' % dist.strategy)
    replica_batch = dist.replica_batch(args.train_batch_size, '--train-batch-size')
    data_format = args.data_format or ('channels_first' if num_gpus else 'channels_last')
    mixed_precision = devices_lib.resolve_mixed_precision(args.mixed_precision, num_gpus)
    tf.compat.v1.logging.info('Mixed precision: %s%s', mixed_precision,
                              ' (auto)' if args.mixed_precision == 'auto' else '')
    hparams = model.HParams(
        num_layers=args.num_layers, weight_decay=args.weight_decay,
        momentum=args.momentum, learning_rate=args.learning_rate,
        batch_norm_decay=args.batch_norm_decay,
        batch_norm_epsilon=args.batch_norm_epsilon, data_format=data_format,
        # A tf.distribute strategy replicates the model itself: one tower each.
        train_batch_size=replica_batch,
        devices=devices[:1] if dist.builds_strategy else devices,
        replicas_in_sync=dist.replicas_in_sync,
        variable_strategy=args.variable_strategy, sync=args.sync,
        num_workers=cluster.num_workers, is_chief=cluster.is_chief,
        cluster_has_ps=cluster.num_ps > 0, mixed_precision=mixed_precision)
    loop = training.LoopSettings.from_flags(
        args, train_steps=args.train_steps, examples_per_step=args.train_batch_size)
    config = run_config.from_flags(
        args, dist, num_cpu_devices=len(devices) if not num_gpus else None)
    distribution.watch_peers(dist)
    trainer.train(args.data_dir, hparams, loop, config, cluster,
                  eval_batch_size=args.eval_batch_size,
                  use_distortion=args.use_distortion_for_training)
    return 0


if __name__ == '__main__':
    errors.run_cli(main)
