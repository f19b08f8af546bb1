"""Command line of the CIFAR-10 trainer (`cifar10_estimator.trainer`).

    python -m cifar10_estimator.cifar10_main --data-dir DIR --job-dir DIR ...

The module name the reference tutorial and AI Platform jobs use; `--help`
lists every flag.
"""
from cifar10_estimator.trainer import TRAINER
from estimator_trainers import runner


def parse_args(argv=None):
    return TRAINER.parse_args(argv)


def main(argv=None):
    return runner.main(TRAINER, argv)


if __name__ == '__main__':
    runner.run_cli(TRAINER)
