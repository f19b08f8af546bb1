"""Command line of the taxi trainer (`taxi_estimator.trainer`).

    python -m taxi_estimator.task --train-files TRAIN.csv --eval-files EVAL.csv \
        --job-dir DIR ...

The module name of the AI Platform sample (`trainer.task`'s successor);
`--help` lists every flag.
"""
from estimator_trainers import runner
from taxi_estimator.trainer import TRAINER


def parse_args(argv=None):
    return TRAINER.parse_args(argv)


def main(argv=None):
    return runner.main(TRAINER, argv)


if __name__ == '__main__':
    runner.run_cli(TRAINER)
