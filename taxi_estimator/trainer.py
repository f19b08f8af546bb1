"""The Chicago Taxi tip classifier, declared for the runner.

    python -m taxi_estimator.task --train-files TRAIN.csv --eval-files EVAL.csv \
        --job-dir DIR [--train-steps 5000] [--hidden-units 128,64,32] ...

Predicts whether a trip's tip is at least 20% of the fare with a wide-and-deep
model, evaluates it (accuracy, AUC, precision, recall, loss under
`<job-dir>/eval/`) and exports a SavedModel for JSON, CSV or tf.Example
requests. Every CSV is scanned before the job-dir is touched; the chief
records the normalisation statistics there, so reruns use the same ones.
"""
import argparse
import dataclasses
import os

from estimator_trainers import flags
from estimator_trainers import runner

DEFAULT_NUM_EPOCHS = 10
SAMPLE_DATA = 'gs://cloud-samples-data/ml-engine/chicago_taxi/training/small'
TRAIN_CSV = 'taxi_trips_train.csv'
EVAL_CSV = 'taxi_trips_eval.csv'


def decay_factor(text):
    """argparse type: a float in (0, 1]."""
    value = flags.positive_float(text)
    if value > 1:
        raise argparse.ArgumentTypeError('expected a number in (0, 1], got %r' % text)
    return value


# Deep-side inputs: z-scored numbers, one-hot payment type, company embedding
# (an upper bound); a parsed CSV row with its strings.
_DEEP_INPUT_WIDTH = 64
_ROW_BYTES = 2048


def memory_estimate(hidden_units):
    """Rough training memory of the DNN side (`runner.MemoryEstimate`).

    Per example: each layer's pre-activation, activation, dropout mask and
    gradient in float32, plus the parsed row. Fixed: weights with their
    gradient and Adam's two slots. The wide side's sparse weights are small.
    """
    widths = [_DEEP_INPUT_WIDTH] + list(hidden_units) + [1]
    weights = sum(a * b + b for a, b in zip(widths, widths[1:]))
    return runner.MemoryEstimate(fixed_bytes=4 * 4 * weights,
                                 bytes_per_example=4 * 4 * sum(hidden_units) + _ROW_BYTES)


@dataclasses.dataclass(frozen=True)
class _Facts:
    """What the input scan found, for the later steps of a run."""
    train_data: object
    eval_data: object
    stats: dict
    recorded: bool
    hidden_units: tuple
    replica_batch: int


class TaxiTrainer(runner.Trainer):
    """Wide-and-deep classifier of Chicago taxi tips (tip >= 20% of the fare)."""
    name = 'taxi'
    module = 'taxi_estimator.task'
    description = ('Train and evaluate a wide-and-deep classifier of Chicago taxi tips '
                   '(tip >= 20% of the fare); export a SavedModel for serving.')

    def add_flags(self, parser):
        parser.epilog = (
            'Without --train-steps the step target is --num-epochs passes over the '
            'training rows: ceil(num_epochs * train_size / batch_size).')
        parser.add_argument('--train-files', type=flags.path, nargs='+', required=True,
                            help='Training CSV files or globs, local or gs://, each with '
                                 'the header line of the sample layout.')
        parser.add_argument('--eval-files', type=flags.path, nargs='+', required=True,
                            help='Evaluation CSV files or globs, local or gs://.')
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
                           help='Probability of dropping a DNN unit while training (0: '
                                'no dropout).')
        group.add_argument('--feature-stats', type=flags.path, default=None,
                           help='JSON file {feature: {"mean": m, "std": s}} with the '
                                'normalisation statistics of trip_miles, trip_seconds, '
                                'fare and the coordinates (default: computed from '
                                '--train-files; a job-dir keeps the ones it started with).')
        group.add_argument('--serving-export-format', type=str.upper,
                           choices=('JSON', 'CSV', 'EXAMPLE'), default='JSON',
                           help='Input of the exported serving signature.')

    def data_args(self, data_dir):
        return ['--train-files', os.path.join(data_dir, TRAIN_CSV),
                '--eval-files', os.path.join(data_dir, EVAL_CSV)]

    def data_ready(self, data_dir):
        return all(os.path.isfile(os.path.join(data_dir, name))
                   for name in (TRAIN_CSV, EVAL_CSV))

    def data_step(self, data_dir, environ):
        return ['taxi_estimator.data', '--out-dir', data_dir]

    def cloud_data_args(self, bucket_uri):
        return [('--train-files', SAMPLE_DATA + '/' + TRAIN_CSV),
                ('--eval-files', SAMPLE_DATA + '/' + EVAL_CSV)]

    def check(self, args, task):
        import tensorflow as tf  # pylint: disable=g-import-not-at-top
        from taxi_estimator import features  # pylint: disable=g-import-not-at-top
        from taxi_estimator import input as input_lib  # pylint: disable=g-import-not-at-top
        from taxi_estimator import model  # pylint: disable=g-import-not-at-top
        log = tf.compat.v1.logging
        replica_batch = task.replica_batch(args.batch_size, '--batch-size')
        # Examples one global step consumes: synchronous replicas each take a batch.
        global_batch = replica_batch * task.distribution.replicas_in_sync
        hidden_units = model.layer_sizes(args.hidden_units, args.layer_sizes_scale_factor,
                                         args.num_layers)
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
        for column in sorted(stats):
            log.info('Normalisation of %s: mean %.6g, std %.6g', column,
                     stats[column]['mean'], stats[column]['std'])
        return runner.Plan(train_steps=train_steps, examples_per_step=args.batch_size,
                           facts=_Facts(train_data, eval_data, stats, recorded,
                                        hidden_units, replica_batch),
                           train_examples=train_data.rows, batch_flag='--batch-size',
                           memory=memory_estimate(hidden_units))

    def model_params(self, args, plan):
        return {'hidden-units': list(plan.facts.hidden_units)}

    def prepare_job_dir(self, args, task, plan):
        from taxi_estimator import features  # pylint: disable=g-import-not-at-top
        if not plan.facts.recorded:
            features.record_stats(args.job_dir, plan.facts.stats)

    def estimator(self, args, task, plan, run_config):
        from taxi_estimator import model  # pylint: disable=g-import-not-at-top
        hparams = model.HParams(
            hidden_units=plan.facts.hidden_units, learning_rate=args.learning_rate,
            linear_learning_rate=args.linear_learning_rate,
            learning_rate_decay_factor=args.learning_rate_decay_factor,
            decay_steps=plan.train_steps, dropout=args.dropout_prob)
        return model.build_estimator(run_config, plan.facts.stats, hparams)

    def input_fns(self, args, task, plan):
        from taxi_estimator import input as input_lib  # pylint: disable=g-import-not-at-top
        facts = plan.facts
        train = input_lib.make_input_fn(facts.train_data.files, facts.replica_batch,
                                        training=True,
                                        seed=task.cluster.input_seed(args.random_seed))
        evaluate = input_lib.make_input_fn(facts.eval_data.files, args.batch_size,
                                           training=False)
        return train, evaluate

    def serving_input_receiver_fn(self, args, plan):
        from taxi_estimator import input as input_lib  # pylint: disable=g-import-not-at-top
        return input_lib.SERVING_INPUT_FNS[args.serving_export_format]


TRAINER = TaxiTrainer()

if __name__ == '__main__':
    runner.run_cli(TRAINER)
