"""The courses' Keras models, declared (no TensorFlow here; see `runtime`).

    python -m keras_estimator.trainer --data-dir DIR --job-dir DIR \
        [--model mnist_cnn] [--train-steps 5000] ...

mnist_cnn trains on the `mnist.npz` of `keras.datasets.mnist` (put into
`--data-dir` by `python -m keras_estimator.data`); cifar10_mlp on the CIFAR-10
TFRecords of the ResNet trainer (`cifar10_estimator.generate_cifar10_tfrecords`).
The Keras model runs inside an Estimator `model_fn` (`keras_estimator.model`
says why), so local, parameter-server and multi_worker_mirrored training,
checkpoints, evaluation and the uint8-image SavedModel come from the runner
like the other trainers'.
"""
import argparse
import os
from typing import Dict, List, Literal, Mapping, Sequence, Tuple

from cifar10_estimator import layout
from cifar10_estimator import trainer as cifar10_trainer
from estimator_trainers import cli
from estimator_trainers import declaration
from estimator_trainers import flags
from keras_estimator import data

# `--model`: the course's network to train.
ModelName = Literal['mnist_cnn', 'cifar10_mlp']
MNIST_CNN: ModelName = 'mnist_cnn'
CIFAR10_MLP: ModelName = 'cifar10_mlp'
MODELS: Tuple[ModelName, ...] = (MNIST_CNN, CIFAR10_MLP)


class KerasTrainer(declaration.Trainer):
    """The MNIST CNN and CIFAR-10 MLP of the Keras courses, as an Estimator."""
    name = 'keras'
    module = 'keras_estimator.trainer'
    description = ('Train and evaluate the courses\' Keras models (MNIST CNN, CIFAR-10 '
                   'MLP) as an Estimator; export a SavedModel that takes raw uint8 images.')
    train_steps = 5000
    data_source_env = 'MNIST_SOURCE'
    precise_batch_norm = True
    eval_metrics = ('accuracy', 'loss')

    def add_flags(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument('--data-dir', type=flags.path, required=True,
                            help='mnist_cnn: directory with %s (python -m '
                                 'keras_estimator.data); cifar10_mlp: the CIFAR-10 '
                                 'TFRecords with %s (python -m cifar10_estimator.'
                                 'generate_cifar10_tfrecords). Local or gs://.'
                                 % (data.MNIST_FILE, layout.METADATA_FILE))
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

    def data_trainer(self, trainer_flags: Sequence[str] = ()) -> declaration.Trainer:
        # cifar10_mlp reads the CIFAR-10 trainer's data (data/cifar10, its data step).
        if flags.given_value(list(trainer_flags), '--model', MNIST_CNN) == CIFAR10_MLP:
            return cifar10_trainer.TRAINER
        return self

    def data_args(self, data_dir: str) -> List[str]:
        return ['--data-dir', data_dir]

    def data_ready(self, data_dir: str) -> bool:
        return os.path.isfile(os.path.join(data_dir, data.MNIST_FILE))

    def data_step(self, data_dir: str, environ: Mapping[str, str]) -> List[str]:
        source = environ.get(self.data_source_env)
        return (['keras_estimator.data', '--data-dir', data_dir]
                + (['--source', source] if source else []))

    def cloud_data_args(self, bucket_uri: str) -> List[Tuple[str, str]]:
        return [('--data-dir', bucket_uri + '/data/mnist')]

    def model_params(self, args: argparse.Namespace) -> Dict[str, ModelName]:
        return {'model': args.model}


TRAINER = KerasTrainer()

if __name__ == '__main__':
    cli.run(TRAINER)
