"""The CIFAR-10 ResNet trainer, declared (no TensorFlow here; see `runtime`).

    python -m cifar10_estimator.cifar10_main --data-dir DIR --job-dir DIR \
        [--num-layers 44] [--train-steps 1000] ...

Its flags, data step and the flag that shapes its variables (`--num-layers`);
`cifar10_estimator.runtime` checks the inputs and builds the estimator, the
TFRecord input functions and a serving signature that takes raw uint8 images.
"""
import argparse
import os
from typing import Dict, List, Mapping, Tuple

from cifar10_estimator import layout
from estimator_trainers import cli
from estimator_trainers import declaration
from estimator_trainers import distribution as distribution_lib
from estimator_trainers import flags
from estimator_trainers.errors import UserInputError

DATA_MODULE = 'cifar10_estimator.generate_cifar10_tfrecords'


def num_layers_type(text: str) -> int:
    """argparse type: ResNet depth 6n+2 (8, 14, 20, 32, 44, 56, 110, ...)."""
    value: int = flags.positive_int(text)
    if value < 8 or (value - 2) % 6:
        raise argparse.ArgumentTypeError(
            'expected 6n+2 (e.g. 20, 32, 44, 56, 110), got %d' % value)
    return value


class Cifar10Trainer(declaration.Trainer):
    """ResNet v1 (6n+2 layers) on CIFAR-10 TFRecords, in towers over local devices."""
    name = 'cifar10'
    module = 'cifar10_estimator.cifar10_main'
    description = ('Train and evaluate a CIFAR-10 ResNet with tf.estimator; export a '
                   'SavedModel that takes raw uint8 images.')
    train_steps = 80000
    checkpoint_steps = 1000
    mixed_precision = True
    precise_batch_norm = True
    local_args = ('--train-steps=1000',)
    data_source_env = 'CIFAR10_SOURCE'
    eval_metrics = ('accuracy', 'loss')

    def add_flags(self, parser: argparse.ArgumentParser) -> None:
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

    def check_flags(self, args: argparse.Namespace,
                    distribution: distribution_lib.Distribution) -> None:
        if args.sync and distribution.synchronous:
            raise UserInputError(
                '--sync wraps the optimizer for parameter servers; '
                '--distribution-strategy=%s is synchronous already' % distribution.strategy,
                flag='--sync')
        if args.sync and (args.steps_per_loop or 1) > 1:
            raise UserInputError(
                '--steps-per-loop=%d cannot run with --sync (SyncReplicasOptimizer '
                'hands each worker one token per Session.run, not per step); use '
                '--steps-per-loop 1' % args.steps_per_loop, flag='--steps-per-loop')

    def data_args(self, data_dir: str) -> List[str]:
        return ['--data-dir', data_dir]

    def data_ready(self, data_dir: str) -> bool:
        return os.path.isfile(layout.metadata_path(data_dir))

    def data_step(self, data_dir: str, environ: Mapping[str, str]) -> List[str]:
        source = environ.get(self.data_source_env)
        return [DATA_MODULE, '--data-dir', data_dir] + (['--source', source] if source else [])

    def cloud_data_args(self, bucket_uri: str) -> List[Tuple[str, str]]:
        return [('--data-dir', bucket_uri + '/data/cifar10')]

    def model_params(self, args: argparse.Namespace) -> Dict[str, int]:
        return {'num-layers': args.num_layers}


TRAINER = Cifar10Trainer()

if __name__ == '__main__':
    cli.run(TRAINER)
