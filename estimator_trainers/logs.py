"""Log setup shared by the trainers' command-line entry points."""
import argparse
import importlib.util
import logging
import os
import re
import sys
import tempfile
import types
import warnings
from typing import Callable, Optional, Sequence, cast

from estimator_trainers import deferred_imports

# What importing the CUDA-capable TensorFlow wheel prints on every machine,
# GPU or not: duplicate plugin registrations and a missing TensorRT.
_IMPORT_NOISE = re.compile(
    r'Unable to register cu(DNN|FFT|BLAS) factory|TF-TRT Warning: Could not find TensorRT')

_LEVELS = {'DEBUG': logging.DEBUG, 'INFO': logging.INFO, 'WARN': logging.WARNING,
           'ERROR': logging.ERROR, 'FATAL': logging.FATAL}


# The console's level for this process and the processes it starts (the
# local cluster's tasks, a rehearsal's replicas, a data step): set by the
# entry point from its --verbosity flag (`quiet_console`), read as the default
# of a trainer's --verbosity.
VERBOSITY_ENV = 'ESTIMATOR_TRAINERS_VERBOSITY'
DEFAULT_VERBOSITY = 'INFO'
DEBUG = 'DEBUG'
# Python warnings raised inside these libraries are about the libraries (their
# deprecations, tf.data's options notice, google-api-core's notice that it
# will drop Python 3.11), not about the job.
_LIBRARY_WARNINGS = r'(tensorflow|tensorflow_estimator|keras|tf_keras|absl|google\.api_core)(\.|$)'


def verbosity(given: Optional[str] = None) -> str:
    """The console's level: `given` (a --verbosity value, any case; gcloud's
    `warning`, `critical` and `none` included), else `VERBOSITY_ENV`, else INFO."""
    value = (given or os.environ.get(VERBOSITY_ENV) or DEFAULT_VERBOSITY).upper()
    value = {'WARNING': 'WARN', 'CRITICAL': 'FATAL', 'NONE': 'FATAL'}.get(value, value)
    return value if value in _LEVELS else DEFAULT_VERBOSITY


def quiet_console(given: Optional[str] = None, *, for_children: bool = False) -> str:
    """The start of every entry point, before TensorFlow or a Google client is
    imported: the console shows what the job does, not its libraries' start-up.

    Below DEBUG: TensorFlow's C++ INFO and WARNING lines (`oneDNN custom
    operations are on`, `Could not find cuda drivers`, `TF-TRT Warning`; its
    C++ logging writes to file descriptor 2 before Python could filter it,
    so `TF_CPP_MIN_LOG_LEVEL=2` is set, for this process and those it starts,
    unless the environment set it), and Python warnings the libraries raise
    about themselves (`_LIBRARY_WARNINGS`; also Keras' advice to replace
    `tf.compat.v1.layers`, which this package uses on purpose) are hidden.
    `configure` does the rest for TensorFlow's Python logger. At DEBUG every
    line comes back (`TF_CPP_MIN_LOG_LEVEL=0`).

    Returns the level (`verbosity(given)`). A tool that starts trainers
    (`for_children`) exports it in `VERBOSITY_ENV`, their --verbosity default;
    a process that starts none leaves it (its own default, taxi predict's
    WARN, is no one else's).
    """
    level = verbosity(given)
    if for_children:
        os.environ[VERBOSITY_ENV] = level
    # Called again with another level (a flag read after an early call): ours go.
    # (`warnings.filters` is a list, which typeshed declares a Sequence.)
    cast(list[object], warnings.filters)[:] = [
        f for f in warnings.filters if f not in _QUIET_FILTERS]
    if level == DEBUG:
        os.environ['TF_CPP_MIN_LOG_LEVEL'] = '0'
        return level
    os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
    for message, category, module in _QUIET_WARNINGS:
        warnings.filterwarnings('ignore', message=message, category=category, module=module)
    _QUIET_FILTERS[:] = warnings.filters[:len(_QUIET_WARNINGS)]
    return level


# (message, category, module) of the warnings `quiet_console` hides, and the
# `warnings.filters` entries it made of them.
_QUIET_WARNINGS = ((r'`tf\.layers\.', UserWarning, ''), ('', Warning, _LIBRARY_WARNINGS))
_QUIET_FILTERS: list[object] = []


def import_tensorflow() -> types.ModuleType:
    """Imports TensorFlow, passing on what it prints to stderr except known noise.

    The one way a module without TensorFlow at import loads it on demand (a
    gs:// path in `safe_io` and `run_record`, the experiment tool's readers,
    the data steps once their flags are parsed), so `--help` and local work
    never pay for it. The native library writes
    straight to file descriptor 2, so the import runs with it pointed at a
    temporary file, which is then replayed without the lines matching
    `_IMPORT_NOISE`. A failing import is replayed in full.
    At DEBUG (`quiet_console`) nothing is left out.
    """
    if 'tensorflow' in sys.modules:
        return sys.modules['tensorflow']
    everything = verbosity() == DEBUG
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
                if failed or everything or not _IMPORT_NOISE.search(line):
                    sys.stderr.write(line)
            sys.stderr.flush()
    return cast(types.ModuleType, tf)  # the module (untyped to mypy: ignore_missing_imports)


def start_tool(parse_args: Callable[[Optional[Sequence[str]]], argparse.Namespace],
               argv: Optional[Sequence[str]]) -> argparse.Namespace:
    """The start of a data tool's `main`: the console quieted (`quiet_console`),
    then `parse_args(argv)` (an instant --help, without TensorFlow), then the
    logs at the level the tool was started with. Returns the parsed flags."""
    level = quiet_console()
    args = parse_args(argv)
    configure(level)
    return args


def configure(level: str = DEFAULT_VERBOSITY) -> None:
    """Routes TensorFlow's Python logger to stderr with timestamps at `level`.

    Below DEBUG the console keeps the job's own lines and TensorFlow's
    warnings (less `_NOISE`), and of TensorFlow's INFO lines (its start-up,
    configs, graphs, sessions, per-step collective all-reduce notes) only
    those about events a user acts on (`_LIBRARY_EVENTS`): checkpoints, a lost
    peer.
    """
    tf = import_tensorflow()
    logger = tf.get_logger()
    logger.setLevel(_LEVELS[level])
    logger.propagate = False
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter('%(asctime)s %(levelname)s %(message)s',
                                           '%H:%M:%S'))
    handler.addFilter(_shorten_session_errors)
    if level != DEBUG:
        handler.addFilter(_drop_noise)
        handler.addFilter(_LibraryInfo(_library_dirs()))
    logger.handlers[:] = [handler]


def _library_dirs() -> tuple[str, ...]:
    """Where TensorFlow's, its Estimator's and Keras' Python code is installed."""
    dirs: list[str] = []
    for name in ('tensorflow', 'tensorflow_estimator', 'keras', 'tf_keras'):
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations:
            dirs.extend(os.path.join(path, '') for path in spec.submodule_search_locations)
    return tuple(dirs)


# TensorFlow's own INFO lines about an event of the job: a checkpoint saved,
# a connected task lost (`_shorten_session_errors`' line).
_LIBRARY_EVENTS = re.compile(r'^(Saving checkpoints for \d+ |A connected task failed)')


class _LibraryInfo(logging.Filter):
    """Logging filter: False for INFO records logged by the code under `dirs`
    (TensorFlow's), except `_LIBRARY_EVENTS`."""

    def __init__(self, dirs: tuple[str, ...]) -> None:
        super().__init__()
        self._dirs = dirs

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.INFO or not record.pathname.startswith(self._dirs):
            return True
        return bool(_LIBRARY_EVENTS.search(record.getMessage()))


# Messages about TensorFlow's internals, not about the job, at every level: the
# export's report of the signatures it includes and leaves out (the reasons run
# to kilobytes; `export` logs what was exported), the two lines around every
# checkpoint save that announce listeners ("Saving checkpoints for N" stays),
# "X is deprecated" warnings (this package uses the TF1 API on purpose) and
# Estimator's notice that evaluations run without the training strategy.
_NOISE = (
    (logging.INFO, re.compile(r'Signatures (INCLUDED in|EXCLUDED from) export')),
    (logging.INFO, re.compile(r"'\w+' : \w+ signatures can only accept")),
    (logging.INFO, re.compile(r'^Calling checkpoint listeners (before|after) saving')),
    (logging.WARNING, re.compile('deprecated and will be removed')),
    # Estimator under a tf.distribute strategy: evaluations run without one, as meant.
    (logging.WARNING, re.compile(r'`eval_strategy` is not passed in')),
)


def _drop_noise(record: logging.LogRecord) -> bool:
    """Logging filter: False for the records of `_NOISE` (below DEBUG)."""
    message = record.getMessage()
    return not any(record.levelno == level and pattern.search(message)
                   for level, pattern in _NOISE)


def _shorten_session_errors(record: logging.LogRecord) -> bool:
    """Logging filter: TensorFlow's session-recovery messages in one line.

    When a parameter server or an all-reduce peer goes away, TensorFlow's
    MonitoredSession logs "An error was raised ... a new session will be
    created" with the whole error, gRPC details and the failing op's Python
    definition trace (which reads like a traceback). The line keeps what
    happened and the error's first words; `--peer-timeout-secs` bounds the
    wait that follows.
    """
    if (record.levelno == logging.INFO and isinstance(record.msg, str)
            and record.msg.startswith('An error was raised')
            and isinstance(record.args, tuple) and record.args):
        record.msg = ('A connected task failed (%s); TensorFlow creates a new session and '
                      'waits for it (bounded by --peer-timeout-secs)')
        record.args = (_first_words(record.args[-1]),)
    return True


def _first_words(error: object) -> str:
    """What a TensorFlow error says happened: the line after the task that reported it
    ("From /job:ps/replica:0/task:0:"), which follows any op definition trace."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    for reporter, cause in zip(lines, lines[1:]):
        if reporter.startswith('From /job:'):
            return '%s %s' % (reporter, cause)
    return lines[0] if lines else type(error).__name__
