"""What a run shows TensorBoard and the console: its HParams, and the block it ends with.

The chief writes the run's flags, with its cluster shape, strategy and
precision, as an HParams session into the job-dir's `eval` run, which holds
only evaluation metrics: TensorBoard's hparams plugin takes a session's
metrics from the scalars of its own run and the runs below it, so each
job-dir is listed with its flags next to its final evaluation (`accuracy`,
`loss`, `auc`, ...), never the last training batch's. It also prints one
summary block when it is done: wall time, steps, the job's average
examples/sec (the progress lines' average), each training task's steps and
examples/sec in a cluster, final metrics, where the checkpoints, export and TensorBoard
logs are, and the command that shows them. (The machine-readable record of
the same run is `run_record`.)
"""
import argparse
import shlex
import time
from typing import Mapping, Optional, Union

import tensorflow as tf
from tensorboard.compat.proto import summary_pb2
from tensorboard.plugins.hparams import api_pb2
from tensorboard.plugins.hparams import summary as hparams_summary
from tensorboard.plugins.hparams import summary_v2 as hparams_v2

from estimator_trainers import cluster as cluster_lib
from estimator_trainers import evaluation
from estimator_trainers import hooks
from estimator_trainers import job_dir as job_dir_lib
from estimator_trainers import run_record
from estimator_trainers import summaries

TENSORBOARD_COMMAND = 'bash scripts/tensorboard.sh %s'
# Flags that name places or logging rather than choices: not hyperparameters.
_NOT_HPARAMS = frozenset(['verbosity', 'hypertune_metric', 'feature_stats'])
_PATH_SUFFIXES = ('_dir', '_file', '_files')
# A value the hparams plugin shows.
HParamValue = Union[bool, int, float, str]


def hparams(args: argparse.Namespace) -> dict[str, HParamValue]:
    """The flag values of `args` that the hparams plugin can show (no paths)."""
    values: dict[str, HParamValue] = {}
    for name, value in sorted(vars(args).items()):
        if (name in _NOT_HPARAMS or name.endswith(_PATH_SUFFIXES) or value is None):
            continue
        if isinstance(value, (list, tuple)):
            value = ','.join(map(str, value))
        if not isinstance(value, (bool, int, float, str)):
            value = str(value)
        values[name] = value
    return values


def start_session(job_dir: str, args: argparse.Namespace,
                  facts: Optional[Mapping[str, HParamValue]] = None) -> tf.summary.SummaryWriter:
    """Writes the HParams session start of a run into `<job_dir>/eval`; returns its writer.

    Args:
      args: the parsed flags (`hparams` picks the hyperparameters).
      facts: more values to compare runs by (cluster shape, strategy, precision).
    """
    values = dict(hparams(args), **(facts or {}))
    writer = tf.summary.create_file_writer(job_dir_lib.eval_dir(job_dir))
    _write(writer, hparams_v2.hparams_pb(values, trial_id=job_dir,
                                         start_time_secs=time.time()))
    return writer


def end_session(writer: tf.summary.SummaryWriter) -> None:
    """Marks the HParams session `start_session` wrote successful (after its training)."""
    _write(writer, hparams_summary.session_end_pb(api_pb2.STATUS_SUCCESS, time.time()))
    writer.close()


def _write(writer: tf.summary.SummaryWriter, summary: summary_pb2.Summary) -> None:
    with writer.as_default():
        tf.summary.experimental.write_raw_pb(summary.SerializeToString(), step=0)
    writer.flush()


def write_average(job_dir: str, step: int, examples_per_sec: float) -> None:
    """Writes the job's examples/sec (the summary block's) into the job-dir's
    training run at `step`, as `summaries.EXAMPLES_PER_SEC_AVERAGE`."""
    writer = tf.compat.v1.summary.FileWriterCache.get(job_dir)
    writer.add_summary(tf.compat.v1.Summary(value=[tf.compat.v1.Summary.Value(
        tag=summaries.EXAMPLES_PER_SEC_AVERAGE, simple_value=examples_per_sec)]), step)
    writer.flush()


def summary_block(*, wall_secs: float, first_step: Optional[int], last_step: Optional[int],
                  train_steps: int, examples_per_sec: Optional[float],
                  eval_clock: evaluation.Clock, metrics: Mapping[str, float], job_dir: str,
                  export_dir: Optional[str],
                  tasks: Optional[Mapping[str, run_record.Throughput]] = None) -> str:
    """The lines a run ends with (a string of several lines).

    `examples_per_sec` is the job's figure of the run record: one process's
    is its progress lines' average (the last one's is this figure); a
    cluster's is the sum of its training tasks' over one interval, `tasks`
    ({task: {"steps", "examples_per_sec", "own_examples_per_sec"}}, as the
    run record has them), a row each.
    """
    global_step = int(metrics.get('global_step', last_step or 0))
    if first_step is None:
        steps = 'step %d (target %d already reached: nothing trained)' % (
            global_step, train_steps)
    else:
        steps = '%d -> %d (%d this run)' % (first_step, global_step,
                                             global_step - first_step)
    share = eval_clock.seconds / wall_secs if wall_secs > 0 else 0.0
    rows = [
        ('wall time', '%s, of which evaluating %s (%.1f%%, %d evaluation%s)' % (
            _duration(wall_secs), _duration(eval_clock.seconds),
            100 * share, eval_clock.count, '' if eval_clock.count == 1 else 's')),
        ('steps', steps),
        ('examples/sec', ('average %.1f (%s)' % (examples_per_sec, (
            'the job\'s: the sum of the tasks\' below' if tasks else
            'while training: the progress lines\' average')) if examples_per_sec else 'n/a')),
        ('final metrics', ', '.join('%s = %.4f' % (k, float(v)) for k, v in
                                    sorted(metrics.items()) if k != 'global_step')),
        ('checkpoints', job_dir),
        ('export', export_dir or 'none'),
        ('TensorBoard', TENSORBOARD_COMMAND % shlex.quote(job_dir)),  # copied as it is
    ]
    if tasks:
        rows[3:3] = [('tasks', _task_row(label, tasks[label]))
                     for label in sorted(tasks, key=_task_order)]
    width = max(len(name) for name, _ in rows)
    return '\n'.join(['Run summary:'] + ['  %-*s  %s' % (width, name, value)
                                         for name, value in rows])


def _task_order(label: str) -> tuple[bool, str, int]:
    """chief first, then worker-0, worker-1, ... in numeric order."""
    role, _, index = label.partition('-')
    return (role != cluster_lib.CHIEF, role, int(index) if index.isdigit() else 0)


def _task_row(label: str, figures: run_record.Throughput) -> str:
    """`worker-1:    168 steps, 4210.5 examples/sec (5012.3 while it trained)`: its
    share of the job's figure, and its own rate."""
    rate, own = figures.get('examples_per_sec'), figures.get('own_examples_per_sec')
    return '%-9s %6d steps, %s%s' % (
        label + ':', figures.get('steps') or 0,
        '%.1f examples/sec' % rate if rate is not None else 'n/a examples/sec',
        ' (%.1f while it trained)' % own if own else '')


def _duration(secs: float) -> str:
    """`hooks.format_duration`, with tenths under a minute (short runs)."""
    return '%.1fs' % secs if secs < 60 else hooks.format_duration(secs)
