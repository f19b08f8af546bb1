"""`python -m estimator_trainers.tools.cloud`: train-cloud.sh's front (`train_cloud`)."""
import sys

from estimator_trainers import flags
from estimator_trainers import logs
from estimator_trainers.errors import run_cli
from estimator_trainers.tools.cloud import train_cloud

if __name__ == '__main__':
    logs.quiet_console(flags.verbosity_in(sys.argv[1:]), for_children=True)
    run_cli(train_cloud.main)
