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
submissions) compare (`compare_model_params`).

No TensorFlow at import: the local launcher and the cloud tools use the names
and the rules; the functions that read checkpoints import it when called.
"""
import json
import os
import re
import uuid

from estimator_trainers import safe_io
from estimator_trainers.errors import first_line
from estimator_trainers.errors import UserInputError

MODEL_PARAMS_FILE = 'model_params.json'
CHECKPOINT_STATE_FILE = 'checkpoint'  # TensorFlow's list of a job-dir's checkpoints
CHECKPOINT_PREFIX = 'model.ckpt'
# model_params.json and the checkpoint state file are a few hundred bytes.
SMALL_FILE_MAX_BYTES = 1 << 20
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
_LEFTOVERS = (re.compile(r'^model\.ckpt-\d+_temp$'), re.compile(r'^.+\.tmp[0-9a-f]{32}$'),
              re.compile(r'^%s\.[0-9a-f]{32}\.tmp$' % re.escape(LEASE_FILE)))
_EXPORT_LEFTOVERS = (re.compile(r'^temp-\d+$'),)


def model_params_path(job_dir):
    return os.path.join(job_dir, MODEL_PARAMS_FILE)


def lease_path(job_dir):
    return os.path.join(job_dir, LEASE_FILE)


def lease_temp_name(lease_file_path):
    """A unique name to write a new lease under before renaming it into place."""
    return '%s.%s.tmp' % (lease_file_path, uuid.uuid4().hex)


def run_record_path(job_dir):
    """The chief's run record (`run_record`)."""
    return os.path.join(job_dir, RUN_RECORD_FILE)


def worker_run_record_path(job_dir, task_label):
    """The run record a training task other than the chief writes of itself."""
    return os.path.join(worker_dir(job_dir, task_label), RUN_RECORD_FILE)


def eval_dir(job_dir):
    return os.path.join(job_dir, EVAL_DIR)


def worker_dir(job_dir, task_label):
    """Where a training task of a distributed job writes its own throughput."""
    return os.path.join(job_dir, WORKERS_DIR, task_label)


def worker_save_dir(job_dir, task_index):
    """Where a multi_worker_mirrored worker saves the checkpoints nothing reads."""
    return os.path.join(job_dir, WORKER_SAVE_DIR % task_index)


def export_dir(job_dir):
    return os.path.join(job_dir, EXPORT_DIR)


def logs_dir(job_dir):
    return os.path.join(job_dir, LOGS_DIR)


def leftover_places(job_dir):
    """(directory, name patterns) where interrupted saves leave files behind."""
    return ((job_dir, _LEFTOVERS), (export_dir(job_dir), _EXPORT_LEFTOVERS))


def check_owner(job_dir):
    """Refuses a local job-dir that another user owns (e.g. a /tmp/taxi made first).

    Call before anything is written to the job-dir.

    Raises:
      UserInputError: naming --job-dir and its owner.
    """
    safe_io.check_owner(job_dir, '--job-dir')


def listed_checkpoint(job_dir):
    """The newest checkpoint TensorFlow's state file of a local `job_dir` names, or None.

    Reads the text file without TensorFlow (for the launcher); None for a
    remote job-dir or one without a readable state file.
    """
    state = os.path.join(job_dir, CHECKPOINT_STATE_FILE)
    if safe_io.is_remote(job_dir) or safe_io.not_a_regular_file(state):
        return None  # a named pipe there would block the read for good
    try:
        with open(state, encoding='utf-8') as f:
            for line in f.read(SMALL_FILE_MAX_BYTES).splitlines():
                key, _, value = line.partition(':')
                if key.strip() == 'model_checkpoint_path':
                    path = value.strip().strip('"')
                    return path if os.path.isabs(path) else os.path.join(job_dir, path)
    except (OSError, UnicodeDecodeError):
        pass
    return None


def latest_checkpoint_step(job_dir):
    """Global step of the newest checkpoint in `job_dir`, or None."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    path = tf.train.latest_checkpoint(job_dir)
    if not path:
        return None
    try:
        return int(tf.train.load_variable(path, 'global_step'))
    except (tf.errors.OpError, ValueError) as e:
        raise UserInputError('--job-dir %s: cannot read checkpoint %s (%s)'
                             % (job_dir, path, first_line(e)), flag='--job-dir',
                             path=path) from None


def check_model_params(job_dir, params, write=True):
    """Refuses a job-dir whose checkpoints come from a different model.

    Args:
      job_dir: the --job-dir.
      params: dict flag name -> value for the flags that change variable
        shapes (e.g. {'num-layers': 44}).
      write: record `params` when the job-dir has none yet (chief only).

    Raises:
      UserInputError: the job-dir holds checkpoints of another model.
    """
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    path = model_params_path(job_dir)
    if tf.io.gfile.exists(path):
        text = safe_io.read_text(path, '--job-dir file', max_bytes=SMALL_FILE_MAX_BYTES,
                                 regular=True)
        compare_model_params(parse_model_params(text, path), params, job_dir)
        return
    if write:
        tf.io.gfile.makedirs(job_dir)
        safe_io.write_atomic(path, json.dumps(params, indent=2, sort_keys=True))


def parse_model_params(text, path):
    """The recorded model params in `text`, read from `path`.

    Raises:
      UserInputError: not a JSON object.
    """
    try:
        recorded = safe_io.parse_json(text)
    except ValueError:
        recorded = None
    if not isinstance(recorded, dict):
        raise UserInputError('%s is not a JSON object of flag values; restore it or use '
                             'a new --job-dir' % path, path=path)
    return recorded


def compare_model_params(recorded, params, job_dir):
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


def _flags_text(params):
    return ' '.join('--%s=%s' % (name, _flag_text(value))
                    for name, value in sorted(params.items()))


def _flag_text(value):
    if isinstance(value, (list, tuple)):
        return ','.join(str(v) for v in value)
    return str(value)


def checkpoint_step(path):
    """The global step in a checkpoint prefix's name (`.../model.ckpt-1200` -> 1200), or None."""
    try:
        return int(path.rsplit('-', 1)[1])
    except (IndexError, ValueError):
        return None


def drop_checkpoints(directory, steps):
    """Deletes the checkpoints of `steps` in `directory` (checkpoints this run saved)
    and names the newest remaining one in its `checkpoint` state file.

    For a run that diverged: a checkpoint its variables were saved to after the
    last finite loss would make every rerun diverge at once.
    """
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    state = tf.train.get_checkpoint_state(directory)
    if state is None:
        return
    paths = list(state.all_model_checkpoint_paths)
    times = list(state.all_model_checkpoint_timestamps)
    drop = [p for p in paths if checkpoint_step(p) in set(steps)]
    keep = [(p, t) for p, t in zip(paths, times or [None] * len(paths)) if p not in drop]
    if not drop or not keep:
        return
    tf.compat.v1.train.update_checkpoint_state(
        directory, _relative(directory, keep[-1][0]), [_relative(directory, p) for p, _ in keep],
        all_model_checkpoint_timestamps=[t for _, t in keep] if times else None)
    for path in drop:
        for name in tf.io.gfile.glob(path + '.*'):
            tf.io.gfile.remove(name)
    tf.compat.v1.logging.info('Removed checkpoint(s) %s, saved after the last finite loss',
                              ', '.join(os.path.basename(p) for p in drop))


def _relative(directory, path):
    """`path` relative to `directory` when inside it (as Estimator's saver records them)."""
    prefix = directory.rstrip('/') + '/'
    return path[len(prefix):] if path.startswith(prefix) else path


def check_checkpoints(job_dir):
    """Refuses, before anything is written, checkpoints a run could not resume from.

    TensorFlow would fail with a traceback, or worse, ignore them and start
    over at step 0, saving over the same-numbered ones. Refused, each in one
    line that says how to recover: a `checkpoint` state file that does not
    parse or names a checkpoint whose files are missing; checkpoint files
    without a state file; a latest checkpoint that does not read whole (a
    garbage or truncated index or data file) or holds NaN or infinite values
    (saved by a run that diverged). Reads the latest checkpoint once.

    Raises:
      UserInputError: naming --job-dir and the file at fault.
    """
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    from google.protobuf import text_format  # pylint: disable=g-import-not-at-top
    from tensorflow.python.training import checkpoint_state_pb2  # pylint: disable=g-direct-tensorflow-import,g-import-not-at-top
    state_path = os.path.join(job_dir, CHECKPOINT_STATE_FILE)
    saved = _saved_checkpoints(job_dir)
    newest = ('the newest checkpoint there is %s' % os.path.basename(saved[-1])
              if saved else 'there are no checkpoint files')
    if not tf.io.gfile.exists(state_path):
        if saved:
            raise UserInputError(
                '--job-dir %s holds checkpoints (the newest is %s) but no %s file naming '
                'the latest: a run would start over at step 0 and save over them; write '
                'one (a line model_checkpoint_path: "%s") or use a new --job-dir'
                % (job_dir, os.path.basename(saved[-1]), CHECKPOINT_STATE_FILE,
                   os.path.basename(saved[-1])), flag='--job-dir', path=state_path)
        return None
    text = safe_io.read_text(state_path, '--job-dir file', max_bytes=SMALL_FILE_MAX_BYTES,
                             regular=True)
    state = checkpoint_state_pb2.CheckpointState()
    try:
        text_format.Parse(text, state)
    except text_format.ParseError as e:
        raise UserInputError(
            '--job-dir file %s is not a TensorFlow checkpoint state (%s); %s: restore the '
            'file (a line model_checkpoint_path: "NAME") or use a new --job-dir; a run '
            'would start over at step 0 and save over the checkpoints'
            % (state_path, first_line(e), newest), flag='--job-dir', path=state_path) from None
    if not state.model_checkpoint_path:
        if saved:
            raise UserInputError(
                '--job-dir file %s names no latest checkpoint; %s: name it there (a line '
                'model_checkpoint_path: "NAME") or use a new --job-dir' % (state_path, newest),
                flag='--job-dir', path=state_path)
        return None
    outside = [p for p in [state.model_checkpoint_path] + list(
        state.all_model_checkpoint_paths) if not _names_a_file_in(job_dir, p)]
    if outside:
        raise UserInputError(
            '--job-dir file %s names checkpoints outside the job-dir (%s; a job-dir copied '
            'from elsewhere?): a run would resume from them and delete them when it keeps '
            'only the newest; name them relative to the job-dir (a line '
            'model_checkpoint_path: "%s") or use a new --job-dir'
            % (state_path, outside[0], os.path.basename(outside[0])),
            flag='--job-dir', path=state_path)
    latest = state.model_checkpoint_path
    if not os.path.isabs(latest) and not safe_io.is_remote(latest):
        latest = os.path.join(job_dir, latest)
    if not tf.io.gfile.exists(latest + '.index'):
        raise UserInputError(
            '--job-dir file %s names %s as the latest checkpoint, but %s.index is missing; '
            '%s: name an existing one there, or use a new --job-dir'
            % (state_path, state.model_checkpoint_path, latest, newest),
            flag='--job-dir', path=state_path)
    _check_checkpoint_values(job_dir, latest)
    return latest


def _names_a_file_in(directory, path):
    """Whether a path of a checkpoint state file names a file right in `directory`
    (TensorFlow writes names relative to it; older versions wrote absolute ones)."""
    if safe_io.is_remote(path) or safe_io.is_remote(directory):
        return os.path.dirname(path) in ('', directory.rstrip('/'))
    if not os.path.isabs(path):
        return os.path.dirname(os.path.normpath(path)) == ''
    return (os.path.dirname(os.path.normpath(path))
            == os.path.normpath(os.path.abspath(directory)))


def _saved_checkpoints(job_dir):
    """Prefixes of the checkpoints in `job_dir` (an index file each), oldest step first."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    try:
        names = tf.io.gfile.glob(os.path.join(job_dir, CHECKPOINT_PREFIX + '-*.index'))
    except tf.errors.OpError:
        return []
    prefixes = [n[:-len('.index')] for n in names]
    return sorted((p for p in prefixes if checkpoint_step(p) is not None), key=checkpoint_step)


def _check_checkpoint_values(job_dir, path):
    """Reads every tensor of checkpoint `path`; refuses unreadable or non-finite ones."""
    import numpy as np  # pylint: disable=g-import-not-at-top
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    name = None
    try:
        reader = tf.train.load_checkpoint(path)
        for name, dtype in sorted(reader.get_variable_to_dtype_map().items()):
            value = reader.get_tensor(name)
            if dtype.is_floating and not np.all(np.isfinite(value)):
                raise UserInputError(
                    '--job-dir %s: its latest checkpoint, %s, holds NaN or infinite values '
                    '(%s): it was saved by a run that diverged; move its files and its '
                    'lines in the checkpoint file away to resume from an earlier one, or '
                    'use a new --job-dir' % (job_dir, os.path.basename(path), name),
                    flag='--job-dir', path=path)
    except (tf.errors.OpError, ValueError, IndexError, RuntimeError) as e:
        raise UserInputError(
            '--job-dir %s: its latest checkpoint, %s, does not read%s (%s): a file of it is '
            'damaged or truncated; restore it, or move its files and its lines in the '
            'checkpoint file away to resume from an earlier one'
            % (job_dir, os.path.basename(path), ' at %s' % name if name else '',
               first_line(e)), flag='--job-dir', path=path) from None
