"""The checkpoint and evaluation cadence, decided once: who saves, where, how often.

`plan` is the only place that decides it; `run_config` and the training
driver only carry the resulting `CheckpointPlan` out. RunConfig never saves
on its own: the step-aligned saver hook of the plan is the one saver, so
checkpoints land at exact multiples of the interval whatever step a run
(re)starts at.

Without `--checkpoint-num-steps` a run saves about `EVALUATIONS_PER_RUN`
checkpoints spread over its length (at most every `max_default_steps`, the
trainer's longest default interval), and each is evaluated, so every run
draws evaluation curves without tuning flags. Evaluating in the training
process pauses training, so there it is budgeted: a checkpoint is evaluated
while evaluations have taken at most `EVALUATION_SHARE` of the time so far,
or, with `--eval-frequency-secs N`, at most once every N seconds.
"""
import dataclasses
import math
import os

from estimator_trainers import cluster as cluster_lib
from estimator_trainers import hooks

EVALUATIONS_PER_RUN = 10
# Share of the training process's time that evaluations during training may take.
EVALUATION_SHARE = 0.15


@dataclasses.dataclass(frozen=True)
class CheckpointPlan:
    """Where and how often this task saves, and when checkpoints are evaluated.

    Attributes:
      directory: where this task's saver writes; None: it saves nothing.
      every_steps: save at global steps that are multiples of this.
      keep_max: how many recent checkpoints the saver keeps.
      write_summaries: the saver writes the graph and checkpoint events (the
        chief); a worker saving only for multi_worker_mirrored's sake does not.
      eval_every_secs: evaluate at most this often; None: every checkpoint
        within the `eval_share` budget.
      eval_share: share of the run evaluations in the training process may take.
    """
    directory: str
    every_steps: int
    keep_max: int = 5
    write_summaries: bool = True
    eval_every_secs: float = None
    eval_share: float = EVALUATION_SHARE

    def saver_hooks(self, listeners=(), steps_per_run=1):
        """The training hooks that carry the plan out (empty: no saving).

        `steps_per_run`: the most steps one `Session.run` trains (`--steps-per-loop`).
        """
        if not self.directory:
            return []
        return [hooks.AlignedCheckpointSaverHook(
            self.directory, save_steps=self.every_steps, listeners=list(listeners),
            write_summaries=self.write_summaries, steps_per_run=steps_per_run)]


def default_every_steps(train_steps, max_default_steps):
    """About `EVALUATIONS_PER_RUN` checkpoints over a run to `train_steps`."""
    return max(1, min(max_default_steps, math.ceil(train_steps / EVALUATIONS_PER_RUN)))


def plan(job_dir, cluster, distribution, *, every_steps=None, train_steps=None,
         max_default_steps=None, keep_max=5, eval_every_secs=None):
    """The `CheckpointPlan` of this task.

    Args:
      every_steps: `--checkpoint-num-steps`, or None for the default cadence.
      train_steps: the run's global step target (for the default cadence).
      max_default_steps: the longest interval the default cadence uses.
      eval_every_secs: `--eval-frequency-secs`, or None for the share budget.

    The chief saves the job's checkpoints into the job-dir. Under
    multi_worker_mirrored every worker must run the same save ops, which
    all-reduce the batch-norm statistics (a chief saving alone hangs the job),
    so the other workers save too, into `tmp_worker_<i>` as TensorFlow's own
    hook would, writing no events there. Everyone else saves nothing.
    """
    if cluster.is_chief:
        directory = job_dir
    elif (cluster.task_type == cluster_lib.WORKER and distribution is not None
          and distribution.every_worker_saves):
        directory = os.path.join(job_dir, 'tmp_worker_%d' % cluster.task_index)
    else:
        directory = None
    return CheckpointPlan(
        directory=directory,
        every_steps=every_steps or default_every_steps(train_steps, max_default_steps),
        keep_max=keep_max, write_summaries=cluster.is_chief,
        eval_every_secs=eval_every_secs)
