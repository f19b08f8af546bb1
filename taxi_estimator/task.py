"""Command line: train the Chicago Taxi tip classifier with tf.estimator.

    python -m taxi_estimator.task --train-files TRAIN.csv --eval-files EVAL.csv \
        --job-dir DIR [--train-steps 5000] [--hidden-units 128,64,32] ...

Predicts whether a trip's tip is at least 20% of the fare with a wide-and-deep
model, evaluates it (accuracy, AUC, precision, recall, loss under
`<job-dir>/eval/`) and exports a SavedModel to `<job-dir>/export/<timestamp>`
for JSON, CSV or tf.Example requests. Every input file is checked before the
job-dir is touched; a rerun on the same job-dir resumes training. Runs as one
process or as one task of a cluster described by TF_CONFIG.
"""
import argparse

from estimator_trainers import errors
from estimator_trainers import flags
from estimator_trainers import logs

DEFAULT_NUM_EPOCHS = 10


def decay_factor(text):
    """argparse type: a float in (0, 1]."""
    value = flags.positive_float(text)
    if value > 1:
        raise argparse.ArgumentTypeError('expected a number in (0, 1], got %r' % text)
    return value


def parse_args(argv=None):
    parser = flags.make_parser(
        'python -m taxi_estimator.task',
        'Train and evaluate a wide-and-deep classifier of Chicago taxi tips '
        '(tip >= 20%% of the fare); export a SavedModel for serving.')
    parser.epilog = (
        'Without --train-steps the step target is --num-epochs passes over the '
        'training rows: ceil(num_epochs * train_size / batch_size).')
    parser.add_argument('--train-files', nargs='+', required=True,
                        help='Training CSV files or globs, local or gs://, each with '
                             'the header line of the sample layout.')
    parser.add_argument('--eval-files', nargs='+', required=True,
                        help='Evaluation CSV files or globs, local or gs://.')
    flags.add_job_flags(parser)

    group = parser.add_argument_group('model')
    group.add_argument('--batch-size', type=flags.positive_int, default=128,
                       help='Examples per training and evaluation step.')
    group.add_argument('--num-epochs', type=flags.positive_int,
                       default=DEFAULT_NUM_EPOCHS,
                       help='Passes over the training data; sets the step target '
                            'unless --train-steps is given.')
    group.add_argument('--train-size', type=flags.positive_int, default=None,
                       help='Training rows per epoch (default: the rows counted in '
                            '--train-files).')
    group.add_argument('--learning-rate', type=flags.positive_float, default=0.003,
                       help='Initial learning rate of the deep side (Adam).')
    group.add_argument('--linear-learning-rate', type=flags.positive_float,
                       default=0.1,
                       help='Initial learning rate of the wide side (FTRL).')
    group.add_argument('--learning-rate-decay-factor', type=decay_factor, default=1.0,
                       help='Multiplier both learning rates reach at the step '
                            'target (exponential decay; 1 keeps them constant).')
    group.add_argument('--hidden-units', type=flags.int_list, default=[32, 16],
                       help='DNN layer sizes, comma-separated.')
    group.add_argument('--layer-sizes-scale-factor', type=flags.non_negative_float,
                       default=0.0,
                       help='If > 0, layer i gets first(--hidden-units) * factor**i '
                            'units, for --num-layers layers.')
    group.add_argument('--num-layers', type=flags.positive_int, default=None,
                       help='DNN depth with --layer-sizes-scale-factor (default 4).')
    group.add_argument('--dropout-prob', type=flags.unit_interval, default=0.5,
                       help='Probability of dropping a DNN unit while training (0: no '
                            'dropout).')
    group.add_argument('--feature-stats', default=None,
                       help='JSON file {feature: {"mean": m, "std": s}} with the '
                            'normalisation statistics of trip_miles, trip_seconds, '
                            'fare and the coordinates (default: computed from '
                            '--train-files; a job-dir keeps the ones it started with).')
    group.add_argument('--serving-export-format', type=str.upper,
                       choices=('JSON', 'CSV', 'EXAMPLE'), default='JSON',
                       help='Input of the exported serving signature.')

    flags.add_training_loop_flags(parser, train_steps=None, checkpoint_steps=1000,
                                  eval_frequency_secs=60)
    flags.add_performance_flags(parser)
    flags.add_runtime_flags(parser)
    flags.add_distribution_flags(parser)
    return parser.parse_args(argv)


def main(argv=None):
    logs.quiet_tensorflow_native_logs()
    args = parse_args(argv)
    logs.configure(args.verbosity)
    # TensorFlow-heavy imports after parsing, so --help and flag errors are fast.
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    from estimator_trainers import cluster as cluster_lib  # pylint: disable=g-import-not-at-top
    from estimator_trainers import devices as devices_lib  # pylint: disable=g-import-not-at-top
    from estimator_trainers import distribution  # pylint: disable=g-import-not-at-top
    from estimator_trainers import job_dir as job_dir_lib  # pylint: disable=g-import-not-at-top
    from estimator_trainers import run_config  # pylint: disable=g-import-not-at-top
    from estimator_trainers import training  # pylint: disable=g-import-not-at-top
    from taxi_estimator import features  # pylint: disable=g-import-not-at-top
    from taxi_estimator import input as input_lib  # pylint: disable=g-import-not-at-top
    from taxi_estimator import model  # pylint: disable=g-import-not-at-top

    log = tf.compat.v1.logging
    cluster = cluster_lib.load_cluster()
    cluster_lib.export_tf_config(cluster)
    dist = distribution.from_flags(args, cluster, devices_lib.local_devices(
        len(tf.config.list_physical_devices('GPU'))))
    replica_batch = dist.replica_batch(args.batch_size, '--batch-size')
    # Examples one global step consumes: synchronous replicas each take a batch.
    global_batch = replica_batch * dist.replicas_in_sync
    hidden_units = model.layer_sizes(args.hidden_units, args.layer_sizes_scale_factor,
                                     args.num_layers)

    # Validate every input before the job-dir is written to.
    train_data = input_lib.scan(args.train_files, '--train-files')
    eval_data = input_lib.scan(args.eval_files, '--eval-files')
    log.info('Training data: %d rows in %d file(s); eval data: %d rows in %d file(s)',
             train_data.rows, len(train_data.files), eval_data.rows,
             len(eval_data.files))
    stats, recorded = features.resolve_stats(args.job_dir, train_data.stats,
                                             args.feature_stats)
    train_steps = args.train_steps or model.steps_for_epochs(
        args.num_epochs, args.train_size or train_data.rows, global_batch)
    log.info('Step target %d (%s); DNN layers %s', train_steps,
             'from --train-steps' if args.train_steps else
             '%d epochs of %d rows, %d examples per global step' % (
                 args.num_epochs, args.train_size or train_data.rows, global_batch),
             ','.join(map(str, hidden_units)))
    job_dir_lib.check_model_params(args.job_dir, {'hidden-units': list(hidden_units)},
                                   write=cluster.is_chief)
    if cluster.is_chief and not recorded:
        features.record_stats(args.job_dir, stats)
    for column in sorted(stats):
        log.info('Normalisation of %s: mean %.6g, std %.6g', column,
                 stats[column]['mean'], stats[column]['std'])

    hparams = model.HParams(
        hidden_units=hidden_units, learning_rate=args.learning_rate,
        linear_learning_rate=args.linear_learning_rate,
        learning_rate_decay_factor=args.learning_rate_decay_factor,
        decay_steps=train_steps, dropout=args.dropout_prob)
    config = run_config.from_flags(args, dist)
    loop = training.LoopSettings.from_flags(
        args, train_steps=train_steps, examples_per_step=args.batch_size)
    distribution.watch_peers(dist)
    training.train_and_evaluate(
        model.build_estimator(config, stats, hparams), loop, cluster,
        train_input_fn=input_lib.make_input_fn(
            train_data.files, replica_batch, training=True,
            seed=cluster.input_seed(args.random_seed)),
        eval_input_fn=input_lib.make_input_fn(
            eval_data.files, args.batch_size, training=False),
        serving_input_receiver_fn=input_lib.SERVING_INPUT_FNS[args.serving_export_format])
    return 0


if __name__ == '__main__':
    errors.run_cli(main)
