"""`python -m estimator_trainers.tools.cloud`: see `cli`."""
import warnings

# google-api-core warns on import that Python 3.11 support ends in 2027; the
# pinned TensorFlow needs 3.11, so the warning is only noise here.
warnings.filterwarnings('ignore', message='You are using a Python version',
                        category=FutureWarning)

from estimator_trainers.tools.cloud import cli  # pylint: disable=g-import-not-at-top,wrong-import-position
from estimator_trainers.errors import run_cli  # pylint: disable=g-import-not-at-top,wrong-import-position

if __name__ == '__main__':
    run_cli(cli.main)
