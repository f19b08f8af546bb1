"""Job-dir bookkeeping: ownership, latest checkpoint step, model compatibility.

A job-dir is never deleted or rewritten wholesale: reruns resume from it. To
refuse a rerun whose model cannot restore the checkpoints (e.g. a different
`--num-layers`) before anything is written, the chief records the flags that
shape the model in `<job-dir>/model_params.json` and later runs compare.

TensorFlow is imported where it is used: the local launcher calls
`check_owner` and must not pay for (or start the threads of) TensorFlow.
"""
import json
import os

from estimator_trainers import safe_io
from estimator_trainers.errors import first_line
from estimator_trainers.errors import UserInputError

MODEL_PARAMS_FILE = 'model_params.json'


def check_owner(job_dir):
    """Refuses a local job-dir that another user owns (e.g. a /tmp/taxi made first).

    Call before anything is written to the job-dir.

    Raises:
      UserInputError: naming --job-dir and its owner.
    """
    safe_io.check_owner(job_dir, '--job-dir')


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
                             % (job_dir, path, first_line(e))) from None


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
    path = os.path.join(job_dir, MODEL_PARAMS_FILE)
    if tf.io.gfile.exists(path):
        with tf.io.gfile.GFile(path) as f:
            try:
                recorded = json.load(f)
            except ValueError:
                raise UserInputError('%s is not valid JSON; restore it or use a new '
                                     '--job-dir' % path) from None
        compare_model_params(recorded, params, job_dir)
        return
    if write:
        tf.io.gfile.makedirs(job_dir)
        safe_io.write_atomic(path, json.dumps(params, indent=2, sort_keys=True))


def compare_model_params(recorded, params, job_dir):
    """Raises `UserInputError` naming the first flag in `params` that differs
    from the `recorded` model_params.json of `job_dir` (the cloud submission
    runs this before provisioning)."""
    for name, value in sorted(params.items()):
        if name in recorded and recorded[name] != value:
            raise UserInputError(
                '--%s=%s does not match the checkpoints in --job-dir %s, which '
                'were trained with --%s=%s; use a new --job-dir or the same value'
                % (name, _flag_text(value), job_dir, name,
                   _flag_text(recorded[name])))


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
