"""What a job-dir holds, and the rules on it: every file name, decided once.

A job-dir is never deleted or rewritten wholesale: reruns resume from it.
Everything that writes into it, reads it or cleans it asks this module for
the names:

    <job-dir>/
      checkpoint, model.ckpt-<step>.*   TensorFlow's checkpoints (`checkpoints.plan`)
      events.out.tfevents.*, graph.pbtxt  the chief's training summaries
      eval/                             evaluation summaries (`EVAL_DIR`)
      workers/<task>/                   each task's own throughput (`WORKERS_DIR`)
      tmp_worker_<i>/                   multi_worker_mirrored workers' saves
      export/<timestamp>/               SavedModels (`EXPORT_DIR`)
      logs/<role>-<i>.log               the local cluster's task logs (`LOGS_DIR`)
      model_params.json                 the flags that shape the variables
      LEASE.json                        the job holding the job-dir (`lease`)
      run_record.json                   every session's measurements (`run_record`);
                                        each other training task's own is in
                                        workers/<task>/run_record.json

To refuse a rerun whose model cannot restore the checkpoints (e.g. a different
`--num-layers`) before anything is written, the chief records the flags that
shape the model in `model_params.json` and later runs (and cloud
submissions) compare (`resume.check_model_params`, `compare_model_params`).

No TensorFlow: the local launcher and the cloud tools use the names and the
rules; the checks that read checkpoints with TensorFlow are `resume`'s.
"""
import os
import re
import uuid
from typing import Mapping, Optional, Pattern

from estimator_trainers import safe_io
from estimator_trainers import user_files
from estimator_trainers.errors import UserInputError

MODEL_PARAMS_FILE = 'model_params.json'
CHECKPOINT_STATE_FILE = 'checkpoint'  # TensorFlow's list of a job-dir's checkpoints
CHECKPOINT_PREFIX = 'model.ckpt'
# model_params.json and the checkpoint state file are a few hundred bytes.
SMALL_FILE = user_files.Limits(bytes=1 << 20,
                               expected='expected a small file (is this the right one?)')
LEASE_FILE = 'LEASE.json'
RUN_RECORD_FILE = 'run_record.json'
EVAL_DIR = 'eval'
WORKERS_DIR = 'workers'
EXPORT_DIR = 'export'
LOGS_DIR = 'logs'
WORKER_SAVE_DIR = 'tmp_worker_%d'

# What interrupted saves leave (removed by the chief, holding the lease, at
# start): a sharded save's `<prefix>_temp/`, an atomic write's
# `<name>.tmp<uuid hex>` (graph.pbtxt, the `checkpoint` state file), the
# lease's own replacement file (`lease_temp_name`), and under `export/` a
# SavedModel written to `temp-<timestamp>/` before its rename.
_LEFTOVERS: tuple[Pattern[str], ...] = (
    re.compile(r'^model\.ckpt-\d+_temp$'), re.compile(r'^.+\.tmp[0-9a-f]{32}$'),
    re.compile(r'^%s\.[0-9a-f]{32}\.tmp$' % re.escape(LEASE_FILE)))
_EXPORT_LEFTOVERS: tuple[Pattern[str], ...] = (re.compile(r'^temp-\d+$'),)


def model_params_path(job_dir: str) -> str:
    """The flags that shape the model's variables (`MODEL_PARAMS_FILE`)."""
    return os.path.join(job_dir, MODEL_PARAMS_FILE)


def lease_path(job_dir: str) -> str:
    """The job-dir's lease (`lease`)."""
    return os.path.join(job_dir, LEASE_FILE)


def lease_temp_name(lease_file_path: str) -> str:
    """A unique name to write a new lease under before renaming it into place."""
    return '%s.%s.tmp' % (lease_file_path, uuid.uuid4().hex)


def run_record_path(job_dir: str) -> str:
    """The chief's run record (`run_record`)."""
    return os.path.join(job_dir, RUN_RECORD_FILE)


def worker_run_record_path(job_dir: str, task_label: str) -> str:
    """The run record a training task other than the chief writes of itself."""
    return os.path.join(worker_dir(job_dir, task_label), RUN_RECORD_FILE)


def eval_dir(job_dir: str) -> str:
    """Where evaluations write their summaries."""
    return os.path.join(job_dir, EVAL_DIR)


def worker_dir(job_dir: str, task_label: str) -> str:
    """Where a training task of a distributed job writes its own throughput."""
    return os.path.join(job_dir, WORKERS_DIR, task_label)


def worker_save_dir(job_dir: str, task_index: int) -> str:
    """Where a multi_worker_mirrored worker saves the checkpoints nothing reads."""
    return os.path.join(job_dir, WORKER_SAVE_DIR % task_index)


def export_dir(job_dir: str) -> str:
    """Where the SavedModels go, one directory per export."""
    return os.path.join(job_dir, EXPORT_DIR)


def logs_dir(job_dir: str) -> str:
    """Where the local cluster writes its tasks' logs."""
    return os.path.join(job_dir, LOGS_DIR)


def leftover_places(job_dir: str) -> tuple[tuple[str, tuple[Pattern[str], ...]], ...]:
    """(directory, name patterns) where interrupted saves leave files behind."""
    return ((job_dir, _LEFTOVERS), (export_dir(job_dir), _EXPORT_LEFTOVERS))


def check_owner(job_dir: str) -> None:
    """Refuses a local job-dir that another user owns (e.g. a /tmp/taxi made first).

    Call before anything is written to the job-dir.

    Raises:
      UserInputError: naming --job-dir and its owner.
    """
    safe_io.check_owner(job_dir, '--job-dir')


def listed_checkpoint(job_dir: str) -> Optional[str]:
    """The newest checkpoint TensorFlow's state file of a local `job_dir` names, or None.

    Reads the text file without TensorFlow (for the launcher); None for a
    remote job-dir or one without a readable state file.
    """
    state = os.path.join(job_dir, CHECKPOINT_STATE_FILE)
    if safe_io.is_remote(job_dir):
        return None
    try:
        # user_files: a named pipe there is refused, never waited on.
        text = user_files.read_text(state, state, SMALL_FILE, optional=True) or ''
    except UserInputError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(':')
        if key.strip() == 'model_checkpoint_path':
            path = value.strip().strip('"')
            return path if os.path.isabs(path) else os.path.join(job_dir, path)
    return None


def parse_model_params(text: str, path: str) -> dict[str, object]:
    """The recorded model params in `text`, read from `path`.

    Raises:
      UserInputError: not a JSON object.
    """
    try:
        recorded: object = user_files.parse_json(text, path, SMALL_FILE)
    except UserInputError:
        recorded = None
    if not isinstance(recorded, dict):
        raise UserInputError('%s is not a JSON object of flag values; restore it or use '
                             'a new --job-dir' % path, path=path)
    return recorded


def compare_model_params(recorded: Mapping[str, object], params: Mapping[str, object],
                         job_dir: str) -> None:
    """Raises `UserInputError` naming the first flag in `params` that differs
    from the `recorded` model_params.json of `job_dir` (the cloud submission
    runs this before provisioning).

    Each trainer records flags of its own, so a record that shares none of
    `params`'s flags is another trainer's (a CIFAR-10 run on a taxi job-dir).
    """
    if params and recorded and not set(params) & set(recorded):
        raise UserInputError(
            '--job-dir %s holds the checkpoints of another trainer: its %s records %s, '
            'this trainer %s; use a new --job-dir'
            % (job_dir, MODEL_PARAMS_FILE, _flags_text(recorded), _flags_text(params)),
            flag='--job-dir', path=job_dir)
    for name, value in sorted(params.items()):
        if name in recorded and recorded[name] != value:
            raise UserInputError(
                '--%s=%s does not match the checkpoints in --job-dir %s, which '
                'were trained with --%s=%s; use a new --job-dir or the same value'
                % (name, _flag_text(value), job_dir, name,
                   _flag_text(recorded[name])), flag='--' + name)


def _flags_text(params: Mapping[str, object]) -> str:
    return ' '.join('--%s=%s' % (name, _flag_text(value))
                    for name, value in sorted(params.items()))


def _flag_text(value: object) -> str:
    if isinstance(value, (list, tuple)):
        return ','.join(str(v) for v in value)
    return str(value)


def checkpoint_step(path: str) -> Optional[int]:
    """The global step in a checkpoint prefix's name (`.../model.ckpt-1200` -> 1200), or None."""
    try:
        return int(path.rsplit('-', 1)[1])
    except (IndexError, ValueError):
        return None
