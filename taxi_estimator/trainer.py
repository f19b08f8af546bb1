"""The Chicago Taxi tip classifier, declared (no TensorFlow here; see `runtime`).

    python -m taxi_estimator.task --train-files TRAIN.csv --eval-files EVAL.csv \
        --job-dir DIR [--train-steps 5000] [--hidden-units 128,64,32] ...

Predicts whether a trip's tip is at least 20% of the fare with a wide-and-deep
model, evaluates it (accuracy, AUC, precision, recall, loss under
`<job-dir>/eval/`) and exports a SavedModel for JSON, CSV or tf.Example
requests. Every CSV is scanned before the job-dir is touched
(`taxi_estimator.runtime`); the chief records the normalisation statistics
there, so reruns use the same ones.
"""
import argparse
import os
import typing
from typing import Dict, List, Literal, Mapping, Optional, Sequence, Tuple

from estimator_trainers import cli
from estimator_trainers import declaration
from estimator_trainers import flags
from estimator_trainers.errors import UserInputError

DEFAULT_NUM_EPOCHS = 10
# Training CSVs up to this size in all are held in memory, parsed (--max-in-memory-mb).
DEFAULT_MAX_IN_MEMORY_MB = 256
DEFAULT_NUM_LAYERS = 4
SAMPLE_DATA = 'gs://cloud-samples-data/ml-engine/chicago_taxi/training/small'
TRAIN_CSV = 'taxi_trips_train.csv'
EVAL_CSV = 'taxi_trips_eval.csv'
# `--serving-export-format`: what the exported serving signature takes.
ExportFormat = Literal['JSON', 'CSV', 'EXAMPLE']
EXPORT_FORMATS: Tuple[ExportFormat, ...] = typing.get_args(ExportFormat)


def decay_factor(text: str) -> float:
    """argparse type: a float in (0, 1]."""
    value: float = flags.positive_float(text)
    if value > 1:
        raise argparse.ArgumentTypeError('expected a number in (0, 1], got %r' % text)
    return value


def layer_sizes(hidden_units: Sequence[int], scale_factor: float = 0.0,
                num_layers: Optional[int] = None) -> Tuple[int, ...]:
    """DNN layer sizes from --hidden-units, --layer-sizes-scale-factor, --num-layers.

    With a scale factor > 0, layer i has `hidden_units[0] * scale_factor**i`
    units (at least 2) for `num_layers` layers (default 4), and the sizes after
    the first are not read: the AI Platform sample's `--hidden-units=128,0,0
    --layer-sizes-scale-factor=0.5 --num-layers=3` is 128,64,32, as the sample
    read it. Otherwise `hidden_units` is used as given (in the reference
    sample a default scale factor silently replaced it).

    Raises:
      UserInputError: --num-layers without a scale factor, or a size of 0
        that no scale factor computes.
    """
    text = ','.join(map(str, hidden_units))
    if not scale_factor:
        if num_layers is not None:
            raise UserInputError('--num-layers=%d needs --layer-sizes-scale-factor > 0; '
                                 'without it --hidden-units gives every layer size'
                                 % num_layers, flag='--num-layers')
        if 0 in hidden_units:
            raise UserInputError('--hidden-units %s: a layer of 0 units; give every size, or '
                                 '--layer-sizes-scale-factor > 0 to compute the sizes after '
                                 'the first (as the AI Platform sample did)' % text,
                                 flag='--hidden-units')
        return tuple(hidden_units)
    if not hidden_units[0]:
        raise UserInputError('--hidden-units %s: the first layer needs a size above 0 (the '
                             'scale factor computes the others from it)' % text,
                             flag='--hidden-units')
    return tuple(max(2, int(hidden_units[0] * scale_factor ** i))
                 for i in range(num_layers or DEFAULT_NUM_LAYERS))


class TaxiTrainer(declaration.Trainer):
    """Wide-and-deep classifier of Chicago taxi tips (tip >= 20% of the fare)."""
    name = 'taxi'
    module = 'taxi_estimator.task'
    description = ('Train and evaluate a wide-and-deep classifier of Chicago taxi tips '
                   '(tip >= 20% of the fare); export a SavedModel for serving.')
    eval_metrics = (
        'accuracy', 'accuracy_baseline', 'auc', 'auc_precision_recall', 'average_loss',
        'label/mean', 'loss', 'precision', 'prediction/mean', 'recall')
    # A step is ~1 ms of small ops: the per-Session.run overhead is worth saving
    # (benchmarks/RESULTS.md, steps_per_loop; on one thread 128 trained ~1.17x
    # the examples per CPU-second of 32); runs end at every boundary anyway.
    steps_per_loop = 128
    # Ops of microseconds gain nothing from being split over two threads, and
    # waking one cost more than the work (ResourceApplyAdam on 8k floats: 5 us
    # on one thread, 45-90 us split over two). Data held in memory is batched
    # on a tf.data thread of its own (`input.make_input_fn`), beside the step.
    # Two inter-op threads trained ~0.95x as fast at ~0.63x the examples per
    # CPU-second since the loop reads its batches synchronously
    # (benchmarks/RESULTS.md, #33).
    num_intra_threads = 1
    num_inter_threads = 1

    def add_flags(self, parser: argparse.ArgumentParser) -> None:
        parser.epilog = (
            'Without --train-steps the step target is --num-epochs passes over the '
            'training rows: ceil(num_epochs * train_size / batch_size).')
        parser.add_argument('--train-files', type=flags.path, nargs='+', required=True,
                            help='Training CSV files or globs, local or gs://, each with '
                                 'the header line of the sample layout; or one cache '
                                 'directory of python -m taxi_estimator.cache (data '
                                 'larger than memory).')
        parser.add_argument('--eval-files', type=flags.path, nargs='+', required=True,
                            help='Evaluation CSV files or globs, local or gs://; or one '
                                 'cache directory.')
        group = parser.add_argument_group('model')
        group.add_argument('--max-in-memory-mb', type=flags.non_negative_int,
                           default=DEFAULT_MAX_IN_MEMORY_MB,
                           help='Training CSVs up to this size in all are parsed once and '
                                'held in memory, each epoch a fresh permutation of all '
                                'rows; larger ones stream from the files, parsed every '
                                'epoch, permuted in windows, memory flat (0: always '
                                'stream). A cache directory (python -m '
                                'taxi_estimator.cache) always streams, unparsed.')
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
        group.add_argument('--hidden-units', type=flags.size_list, default=[32, 16],
                           help='DNN layer sizes, comma-separated (with '
                                '--layer-sizes-scale-factor only the first is read: '
                                'the sample\'s 128,0,0 is fine).')
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
                           choices=EXPORT_FORMATS, default='JSON',
                           help='Input of the exported serving signature.')

    def data_args(self, data_dir: str) -> List[str]:
        return ['--train-files', os.path.join(data_dir, TRAIN_CSV),
                '--eval-files', os.path.join(data_dir, EVAL_CSV)]

    def data_ready(self, data_dir: str) -> bool:
        return all(os.path.isfile(os.path.join(data_dir, name))
                   for name in (TRAIN_CSV, EVAL_CSV))

    def data_step(self, data_dir: str, environ: Mapping[str, str]) -> List[str]:
        return ['taxi_estimator.data', '--out-dir', data_dir]

    def cloud_data_args(self, bucket_uri: str) -> List[Tuple[str, str]]:
        return [('--train-files', SAMPLE_DATA + '/' + TRAIN_CSV),
                ('--eval-files', SAMPLE_DATA + '/' + EVAL_CSV)]

    def model_params(self, args: argparse.Namespace) -> Dict[str, List[int]]:
        return {'hidden-units': list(layer_sizes(args.hidden_units,
                                                 args.layer_sizes_scale_factor,
                                                 args.num_layers))}


TRAINER = TaxiTrainer()

if __name__ == '__main__':
    cli.run(TRAINER)
