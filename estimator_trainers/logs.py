"""Log setup shared by the trainers' command-line entry points."""
import logging
import os
import re
import sys
import tempfile
import warnings

from estimator_trainers import deferred_imports

# What importing the CUDA-capable TensorFlow wheel prints on every machine,
# GPU or not: duplicate plugin registrations and a missing TensorRT.
_IMPORT_NOISE = re.compile(
    r'Unable to register cu(DNN|FFT|BLAS) factory|TF-TRT Warning: Could not find TensorRT')

_LEVELS = {'DEBUG': logging.DEBUG, 'INFO': logging.INFO, 'WARN': logging.WARNING,
           'ERROR': logging.ERROR, 'FATAL': logging.FATAL}


def quiet_google_python_notice():
    """Hides google-api-core's notice that it will drop this Python version.

    The Google client libraries warn (FutureWarning) when first imported that
    their support for Python 3.11 ends; the pinned TensorFlow needs 3.11, so
    the notice is noise in every command. Call before any Google client runs.
    """
    warnings.filterwarnings('ignore', category=FutureWarning, module='google.api_core')


def quiet_tensorflow_native_logs():
    """Hides start-up noise that is not about the job (call before importing TF).

    TensorFlow's C++ INFO/WARNING lines, google-api-core's notice about future
    Python versions (`quiet_google_python_notice`) and Keras' advice to replace
    `tf.compat.v1.layers` (this package is TF1-style on purpose).
    """
    os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
    quiet_google_python_notice()
    warnings.filterwarnings('ignore', message=r'`tf\.layers\.', category=UserWarning)


def import_tensorflow():
    """Imports TensorFlow, passing on what it prints to stderr except known noise.

    The one way a module without TensorFlow at import loads it on demand (a
    gs:// path in `safe_io` and `run_record`, the experiment tool's readers,
    the data steps once their flags are parsed), so `--help` and local work
    never pay for it. The native library writes
    straight to file descriptor 2, so the import runs with it pointed at a
    temporary file, which is then replayed without the lines matching
    `_IMPORT_NOISE`. A failing import is replayed in full.
    """
    if 'tensorflow' in sys.modules:
        return sys.modules['tensorflow']
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode='w+b') as captured:
        os.dup2(captured.fileno(), 2)
        failed = True
        try:
            # Here, inside the redirection: the crossing point itself.
            with deferred_imports.deferring():
                import tensorflow as tf  # pylint: disable=g-import-not-at-top
            failed = False
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            for line in captured.read().decode(errors='replace').splitlines(True):
                if failed or not _IMPORT_NOISE.search(line):
                    sys.stderr.write(line)
            sys.stderr.flush()
    return tf


def start_tool(parse_args, argv):
    """The start of a data tool's `main`: TensorFlow's noise hidden, then
    `parse_args(argv)` (an instant --help, without TensorFlow), then INFO logs.
    Returns the parsed flags."""
    quiet_tensorflow_native_logs()
    args = parse_args(argv)
    configure('INFO')
    return args


def configure(verbosity='INFO'):
    """Routes TensorFlow's Python logger to stderr with timestamps at `verbosity`."""
    tf = import_tensorflow()
    logger = tf.get_logger()
    logger.setLevel(_LEVELS[verbosity])
    logger.propagate = False
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter('%(asctime)s %(levelname)s %(message)s',
                                           '%H:%M:%S'))
    handler.addFilter(_drop_noise)
    handler.addFilter(_shorten_session_errors)
    logger.handlers[:] = [handler]


# Messages about TensorFlow's internals, not about the job: the export's report
# of the signatures it includes and leaves out (the reasons run to kilobytes;
# `export` logs what was exported), the two lines around every checkpoint save
# that announce listeners ("Saving checkpoints for N" stays), and "X is
# deprecated" warnings (this package uses the TF1 API on purpose).
_NOISE = (
    (logging.INFO, re.compile(r'Signatures (INCLUDED in|EXCLUDED from) export')),
    (logging.INFO, re.compile(r"'\w+' : \w+ signatures can only accept")),
    (logging.INFO, re.compile(r'^Calling checkpoint listeners (before|after) saving')),
    (logging.WARNING, re.compile('deprecated and will be removed')),
)


def _drop_noise(record):
    """Logging filter: False for the records of `_NOISE`."""
    message = record.getMessage()
    return not any(record.levelno == level and pattern.search(message)
                   for level, pattern in _NOISE)


def _shorten_session_errors(record):
    """Logging filter: TensorFlow's session-recovery messages in one line.

    When a parameter server or an all-reduce peer goes away, TensorFlow's
    MonitoredSession logs "An error was raised ... a new session will be
    created" with the whole error, gRPC details and the failing op's Python
    definition trace (which reads like a traceback). The line keeps what
    happened and the error's first words; `--peer-timeout-secs` bounds the
    wait that follows.
    """
    if (record.levelno == logging.INFO and isinstance(record.msg, str)
            and record.msg.startswith('An error was raised') and record.args):
        record.msg = ('A connected task failed (%s); TensorFlow creates a new session and '
                      'waits for it (bounded by --peer-timeout-secs)')
        record.args = (_first_words(record.args[-1]),)
    return True


def _first_words(error):
    """What a TensorFlow error says happened: the line after the task that reported it
    ("From /job:ps/replica:0/task:0:"), which follows any op definition trace."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    for reporter, cause in zip(lines, lines[1:]):
        if reporter.startswith('From /job:'):
            return '%s %s' % (reporter, cause)
    return lines[0] if lines else type(error).__name__
