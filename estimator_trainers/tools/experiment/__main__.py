"""`python -m estimator_trainers.tools.experiment`: see `cli`."""
from estimator_trainers import errors
from estimator_trainers.tools.experiment import cli

if __name__ == '__main__':
    errors.run_cli(cli.main)
