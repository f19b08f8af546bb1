"""A job-dir's checkpoints as a rerun resumes from them, read with TensorFlow.

Before anything is written, the chief refuses checkpoints a run could not
resume from (`check_checkpoints`) and a model other than the one they hold
(`check_model_params`); training resumes from `latest_checkpoint_step`; a run
that diverged drops the checkpoints saved after its last finite loss
(`drop_checkpoints`). The job-dir's names and the TensorFlow-free rules are
`job_dir`'s.
"""
import json
import os
from collections.abc import Iterable, Mapping
from typing import Optional

from google.protobuf import text_format
import numpy as np
import tensorflow as tf
from tensorflow.python.training import checkpoint_state_pb2  # pylint: disable=g-direct-tensorflow-import

from estimator_trainers import job_dir as job_dir_lib
from estimator_trainers import safe_io
from estimator_trainers import user_files
from estimator_trainers.errors import first_line
from estimator_trainers.errors import UserInputError


def latest_checkpoint_step(job_dir: str) -> Optional[int]:
    """Global step of the newest checkpoint in `job_dir`, or None."""
    path = tf.train.latest_checkpoint(job_dir)
    if not path:
        return None
    try:
        return int(tf.train.load_variable(path, 'global_step'))
    except (tf.errors.OpError, ValueError) as e:
        raise UserInputError('--job-dir %s: cannot read checkpoint %s (%s)'
                             % (job_dir, path, first_line(e)), flag='--job-dir',
                             path=path) from None


def check_model_params(job_dir: str, params: Mapping[str, object], write: bool = True) -> None:
    """Refuses a job-dir whose checkpoints come from a different model.

    Args:
      job_dir: the --job-dir.
      params: dict flag name -> value for the flags that change variable
        shapes (e.g. {'num-layers': 44}).
      write: record `params` when the job-dir has none yet (chief only).

    Raises:
      UserInputError: the job-dir holds checkpoints of another model.
    """
    path = job_dir_lib.model_params_path(job_dir)
    if tf.io.gfile.exists(path):
        text = user_files.read_text(path, '--job-dir file %s' % path, job_dir_lib.SMALL_FILE,
                                    '--job-dir')
        job_dir_lib.compare_model_params(job_dir_lib.parse_model_params(text, path), params,
                                         job_dir)
        return
    if write:
        tf.io.gfile.makedirs(job_dir)
        safe_io.write_atomic(path, json.dumps(params, indent=2, sort_keys=True))


def drop_checkpoints(directory: str, steps: Iterable[int]) -> None:
    """Deletes the checkpoints of `steps` in `directory` (checkpoints this run saved)
    and names the newest remaining one in its `checkpoint` state file.

    For a run that diverged: a checkpoint its variables were saved to after the
    last finite loss would make every rerun diverge at once.
    """
    state = tf.train.get_checkpoint_state(directory)
    if state is None:
        return
    paths: list[str] = list(state.all_model_checkpoint_paths)
    times: list[Optional[float]] = list(state.all_model_checkpoint_timestamps)
    drop = [p for p in paths if job_dir_lib.checkpoint_step(p) in set(steps)]
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


def _relative(directory: str, path: str) -> str:
    """`path` relative to `directory` when inside it (as Estimator's saver records them)."""
    prefix = directory.rstrip('/') + '/'
    return path[len(prefix):] if path.startswith(prefix) else path


def check_checkpoints(job_dir: str) -> Optional[str]:
    """Refuses, before anything is written, checkpoints a run could not resume from.

    TensorFlow would fail with a traceback, or worse, ignore them and start
    over at step 0, saving over the same-numbered ones. Refused, each in one
    line that says how to recover: a `checkpoint` state file that does not
    parse or names a checkpoint whose files are missing; checkpoint files
    without a state file; a latest checkpoint that does not read whole (a
    garbage or truncated index or data file) or holds NaN or infinite values
    (saved by a run that diverged). Reads the latest checkpoint once.

    Returns:
      The latest checkpoint's prefix, or None when there is none.

    Raises:
      UserInputError: naming --job-dir and the file at fault.
    """
    state_path = os.path.join(job_dir, job_dir_lib.CHECKPOINT_STATE_FILE)
    saved = _saved_checkpoints(job_dir)
    newest = ('the newest checkpoint there is %s' % os.path.basename(saved[-1])
              if saved else 'there are no checkpoint files')
    if not tf.io.gfile.exists(state_path):
        if saved:
            raise UserInputError(
                '--job-dir %s holds checkpoints (the newest is %s) but no %s file naming '
                'the latest: a run would start over at step 0 and save over them; write '
                'one (a line model_checkpoint_path: "%s") or use a new --job-dir'
                % (job_dir, os.path.basename(saved[-1]), job_dir_lib.CHECKPOINT_STATE_FILE,
                   os.path.basename(saved[-1])), flag='--job-dir', path=state_path)
        return None
    text = user_files.read_text(state_path, '--job-dir file %s' % state_path,
                                job_dir_lib.SMALL_FILE, '--job-dir')
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
    latest: str = state.model_checkpoint_path
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


def _names_a_file_in(directory: str, path: str) -> bool:
    """Whether a path of a checkpoint state file names a file right in `directory`
    (TensorFlow writes names relative to it; older versions wrote absolute ones)."""
    if safe_io.is_remote(path) or safe_io.is_remote(directory):
        return os.path.dirname(path) in ('', directory.rstrip('/'))
    if not os.path.isabs(path):
        return os.path.dirname(os.path.normpath(path)) == ''
    return (os.path.dirname(os.path.normpath(path))
            == os.path.normpath(os.path.abspath(directory)))


def _saved_checkpoints(job_dir: str) -> list[str]:
    """Prefixes of the checkpoints in `job_dir` (an index file each), oldest step first."""
    try:
        names = tf.io.gfile.glob(os.path.join(job_dir, job_dir_lib.CHECKPOINT_PREFIX + '-*.index'))
    except tf.errors.OpError:
        return []
    prefixes: list[str] = [n[:-len('.index')] for n in names]
    return sorted((p for p in prefixes if job_dir_lib.checkpoint_step(p) is not None),
                  key=lambda p: job_dir_lib.checkpoint_step(p) or 0)


def _check_checkpoint_values(job_dir: str, path: str) -> None:
    """Reads every tensor of checkpoint `path`; refuses unreadable or non-finite ones."""
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
