"""`python -m cifar10_estimator.cifar10_main`: the CIFAR-10 trainer's command line,
under the module name the reference tutorial and AI Platform jobs use
(`cifar10_estimator.trainer` declares it)."""
from cifar10_estimator.trainer import TRAINER
from estimator_trainers import cli

if __name__ == '__main__':
    cli.run(TRAINER)
