"""`python -m taxi_estimator.task`: the taxi trainer's command line, under the
module name of the AI Platform sample (`trainer.task`'s successor;
`taxi_estimator.trainer` declares it)."""
from estimator_trainers import cli
from taxi_estimator.trainer import TRAINER

if __name__ == '__main__':
    cli.run(TRAINER)
