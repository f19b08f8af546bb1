"""Toy trainer: fits y = 3x + 1 with one linear unit, declared for the runner."""
import os

from estimator_trainers import cli
from estimator_trainers import declaration
from estimator_trainers import flags

DATA_FILE = 'points.npz'


class ToyTrainer(declaration.Trainer):
    """Linear regression on generated points."""
    name = 'toy'
    description = 'Fit y = 3x + 1 (a toy trainer from outside the project).'
    train_steps = 60
    checkpoint_steps = 20
    eval_metrics = ('mse', 'loss')

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


TRAINER = ToyTrainer()

if __name__ == '__main__':
    cli.run(TRAINER)
