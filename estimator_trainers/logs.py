"""Log setup shared by the trainers' command-line entry points."""
import logging
import os
import sys

_LEVELS = {'DEBUG': logging.DEBUG, 'INFO': logging.INFO, 'WARN': logging.WARNING,
           'ERROR': logging.ERROR, 'FATAL': logging.FATAL}


def quiet_tensorflow_native_logs():
    """Hides TensorFlow's C++ INFO/WARNING start-up noise (call before import)."""
    os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')


def configure(verbosity='INFO'):
    """Routes TensorFlow's Python logger to stderr with timestamps at `verbosity`."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    logger = tf.get_logger()
    logger.setLevel(_LEVELS[verbosity])
    logger.propagate = False
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter('%(asctime)s %(levelname)s %(message)s',
                                           '%H:%M:%S'))
    logger.handlers[:] = [handler]
