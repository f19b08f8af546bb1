"""Log setup shared by the trainers' command-line entry points."""
import logging
import os
import sys
import warnings

_LEVELS = {'DEBUG': logging.DEBUG, 'INFO': logging.INFO, 'WARN': logging.WARNING,
           'ERROR': logging.ERROR, 'FATAL': logging.FATAL}


def quiet_tensorflow_native_logs():
    """Hides start-up noise that is not about the job (call before importing TF).

    TensorFlow's C++ INFO/WARNING lines, google-api-core's notice about future
    Python versions (this package pins Python 3.11 on purpose) and Keras'
    advice to replace `tf.compat.v1.layers` (this package is TF1-style on purpose).
    """
    os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
    warnings.filterwarnings('ignore', category=FutureWarning, module='google.api_core')
    warnings.filterwarnings('ignore', message=r'`tf\.layers\.', category=UserWarning)


def configure(verbosity='INFO'):
    """Routes TensorFlow's Python logger to stderr with timestamps at `verbosity`."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    logger = tf.get_logger()
    logger.setLevel(_LEVELS[verbosity])
    logger.propagate = False
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter('%(asctime)s %(levelname)s %(message)s',
                                           '%H:%M:%S'))
    handler.addFilter(_drop_deprecation_notices)
    logger.handlers[:] = [handler]


def _drop_deprecation_notices(record):
    """Filters TF's "X is deprecated" warnings: this package uses the TF1 API on purpose."""
    return not (record.levelno == logging.WARNING
                and 'deprecated and will be removed' in record.getMessage())
