"""`python -m estimator_trainers.tools.cloud`: see `cli`."""
from estimator_trainers import logs
from estimator_trainers.errors import run_cli
from estimator_trainers.tools.cloud import cli

if __name__ == '__main__':
    logs.quiet_google_python_notice()
    run_cli(cli.main)
