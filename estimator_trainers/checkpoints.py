"""The checkpoint and evaluation cadences, decided once: who saves, where, how
often; who evaluates, what, and how often.

`plan` is the only place that decides them; the runner, the training
driver, the evaluation hook and the flag help texts read the resulting
`CheckpointPlan` or the constants here. RunConfig never saves on its own:
the step-aligned saver hook of the plan is the one saver.

Checkpoints are for resuming. They land at exact multiples of
`--checkpoint-num-steps` (default: the trainer's `checkpoint_steps`, 1000,
the number HW3 states) and at the last step of every run; a new job-dir
also saves step 0 as training starts (TensorFlow's start-up save: the graph
and the initial variables), while a resumed run does not save again the
checkpoint it resumed from. So 1000 steps at the default save steps 0 and
1000, and `--checkpoint-num-steps=500` saves 0, 500 and 1000.

Evaluations have their own cadence, `--eval-every-steps` (default: about
`EVALUATIONS_PER_RUN` spread over the step target, at most the trainer's
`checkpoint_steps` apart). A chief that evaluates while it trains evaluates
the weights it holds, from an in-memory snapshot (`evaluation`), not a
checkpoint: the checkpoint cost is that of saving alone, and a run draws
evaluation curves whatever its checkpoint interval. Evaluating pauses
training, so there it is budgeted (`CheckpointPlan.evaluation_due`). Where
evaluator tasks evaluate (they read checkpoints from the job-dir), the
default checkpoint interval is the evaluation interval, so they have
something to evaluate.

No TensorFlow here: the flag help texts are built from these constants.
"""
from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Optional

from estimator_trainers import cluster as cluster_lib
from estimator_trainers import job_dir as job_dir_lib

if TYPE_CHECKING:
    from estimator_trainers.distribution import Distribution

# Evaluation points a run gets by default (the final evaluation included).
EVALUATIONS_PER_RUN = 10
# Share of the training process's time that evaluations during training may take.
EVALUATION_SHARE = 0.15
# Points an evaluation curve gets in a run at the least, the final evaluation included.
MIN_EVAL_POINTS = 5


@dataclasses.dataclass(frozen=True)
class CheckpointPlan:
    """Where and how often this task saves, and when it evaluates.

    Attributes:
      directory: where this task's saver writes; None: it saves nothing.
      every_steps: save at global steps that are multiples of this.
      keep_max: how many recent checkpoints the saver keeps.
      write_summaries: the saver writes the graph and checkpoint events (the
        chief); a worker saving only for multi_worker_mirrored's sake does not.
      eval_every_steps: evaluate at global steps that are multiples of this
        (while training: the weights the chief holds; `evaluation_due` decides
        which of them within the budget); keyword only.
      eval_every_secs: evaluate at most this often; None: within the
        `eval_share` budget.
      eval_share: share of the run evaluations in the training process may take.
      evaluates_while_training: this process evaluates while it trains.
      stop_save_dir: where a stop on a signal saves a final checkpoint; None:
        this task saves none then.
    """
    directory: Optional[str]
    every_steps: int
    keep_max: int = 5
    write_summaries: bool = True
    eval_every_steps: int = dataclasses.field(kw_only=True)
    eval_every_secs: Optional[float] = None
    eval_share: float = EVALUATION_SHARE
    evaluates_while_training: bool = False
    stop_save_dir: Optional[str] = None

    def evaluation_due(self, *, evaluations: int, spent_secs: float, estimate_secs: float,
                       elapsed_secs: float, since_last_secs: Optional[float],
                       progress: float, preparing: bool = False) -> bool:
        """Whether to evaluate now, at a multiple of `eval_every_steps`, in the
        training process.

        Args:
          evaluations: evaluations so far in this run.
          spent_secs: seconds those evaluations took.
          estimate_secs: what the next one will take (the last one's time).
          elapsed_secs: seconds since training started.
          since_last_secs: seconds since the last evaluation ended (None: none yet).
          progress: share of this run's steps done, in [0, 1].
          preparing: the evaluation graph is still being built in the background
            (`evaluation.PrepareInBackground`): evaluating now would wait for it.

        With `eval_every_secs`, at most that often. Otherwise when evaluations,
        counting this one, take at most `eval_share` of the time; and where
        evaluation is costlier than that allows, a curve of `MIN_EVAL_POINTS`
        points still wins: by a fifth of the run one evaluation, by two
        fifths two, and so on (the final evaluation is the last point). While
        the graph is being prepared only that curve waits for it: a short run
        reached its first multiple before its graph was ready, and training
        stood still for the build (taxi: 0.5 s of a 6 s run).
        """
        if self.eval_every_secs is not None:
            return since_last_secs is None or since_last_secs >= self.eval_every_secs
        if not preparing and (spent_secs + estimate_secs
                              <= self.eval_share * (elapsed_secs + estimate_secs)):
            return True
        return evaluations + 1 <= MIN_EVAL_POINTS * progress + 1e-9


def default_eval_every_steps(train_steps: Optional[int], max_default_steps: int) -> int:
    """About `EVALUATIONS_PER_RUN` evaluations over a run to `train_steps` (None:
    `max_default_steps`)."""
    if not train_steps:
        return max_default_steps
    return max(1, min(max_default_steps, math.ceil(train_steps / EVALUATIONS_PER_RUN)))


def plan(job_dir: str, cluster: cluster_lib.ClusterInfo, distribution: Optional[Distribution],
         *, every_steps: Optional[int] = None, train_steps: Optional[int] = None,
         default_steps: int = 1000, keep_max: int = 5, eval_every_steps: Optional[int] = None,
         eval_every_secs: Optional[float] = None) -> CheckpointPlan:
    """The `CheckpointPlan` of this task.

    Args:
      every_steps: `--checkpoint-num-steps`, or None for the default.
      train_steps: the run's global step target (for the default evaluation cadence).
      default_steps: the trainer's default checkpoint interval, also the
        longest default evaluation interval.
      eval_every_steps: `--eval-every-steps`, or None for the default.
      eval_every_secs: `--eval-frequency-secs`, or None for the share budget.

    The chief saves the job's checkpoints into the job-dir. Under
    multi_worker_mirrored every worker must run the same save ops, which
    all-reduce the batch-norm statistics (a chief saving alone hangs the job),
    so the other workers save too, into `tmp_worker_<i>` as TensorFlow's own
    hook would, writing no events there. Everyone else saves nothing.
    """
    every_worker_saves = distribution is not None and distribution.every_worker_saves
    directory: Optional[str]
    if cluster.is_chief:
        directory = job_dir
    elif cluster.task_type == cluster_lib.WORKER and every_worker_saves:
        directory = job_dir_lib.worker_save_dir(job_dir, cluster.task_index)
    else:
        directory = None
    eval_every_steps = eval_every_steps or default_eval_every_steps(train_steps,
                                                                    default_steps)
    in_training = _evaluates_while_training(cluster, every_worker_saves)
    if not every_steps:
        every_steps = default_steps
        if cluster.num_evaluators or cluster.task_type == cluster_lib.MASTER:
            # Evaluated from the job-dir: checkpoints are the evaluation points.
            every_steps = min(every_steps, eval_every_steps)
    return CheckpointPlan(
        directory=directory, every_steps=every_steps, keep_max=keep_max,
        write_summaries=cluster.is_chief, eval_every_steps=eval_every_steps,
        eval_every_secs=eval_every_secs, evaluates_while_training=in_training,
        # A save every worker must join cannot be made by one task alone.
        stop_save_dir=directory if cluster.is_chief and not every_worker_saves else None)


def _evaluates_while_training(cluster: cluster_lib.ClusterInfo, every_worker_saves: bool) -> bool:
    """The chief evaluates while it trains, unless the job has an evaluator
    task for it, or is a `master` (TensorFlow's legacy path evaluates each
    checkpoint itself), or trains under multi_worker_mirrored (an evaluation
    would stall the other workers' all-reduce: give that job an evaluator task)."""
    if not cluster.is_chief or cluster.num_evaluators:
        return False
    if cluster.task_type == cluster_lib.MASTER:
        return False
    return not every_worker_saves
