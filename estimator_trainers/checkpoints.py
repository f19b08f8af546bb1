"""The checkpoint policy, decided once: which task saves, where, how often.

`plan` is the only place that decides it; `run_config` and the training
driver only carry the resulting `CheckpointPlan` out. RunConfig never saves
on its own: the step-aligned saver hook of the plan is the one saver, so
checkpoints land at exact multiples of `--checkpoint-num-steps` whatever
step a run (re)starts at.
"""
import dataclasses
import os

from estimator_trainers import cluster as cluster_lib
from estimator_trainers import hooks


@dataclasses.dataclass(frozen=True)
class CheckpointPlan:
    """Where and how often this task saves.

    Attributes:
      directory: where this task's saver writes; None: it saves nothing.
      every_steps: save at global steps that are multiples of this.
      keep_max: how many recent checkpoints the saver keeps.
    """
    directory: str
    every_steps: int
    keep_max: int = 5

    def saver_hooks(self):
        """The training hooks that carry the plan out (empty: no saving)."""
        if not self.directory:
            return []
        return [hooks.AlignedCheckpointSaverHook(self.directory, save_steps=self.every_steps)]


def plan(job_dir, cluster, distribution, *, every_steps, keep_max=5):
    """The `CheckpointPlan` of this task.

    The chief saves the job's checkpoints into the job-dir. Under
    multi_worker_mirrored every worker must run the same save ops, which
    all-reduce the batch-norm statistics (a chief saving alone hangs the job),
    so the other workers save too, into `tmp_worker_<i>` as TensorFlow's own
    hook would. Everyone else saves nothing.
    """
    if cluster.is_chief:
        directory = job_dir
    elif (cluster.task_type == cluster_lib.WORKER and distribution is not None
          and distribution.every_worker_saves):
        directory = os.path.join(job_dir, 'tmp_worker_%d' % cluster.task_index)
    else:
        directory = None
    return CheckpointPlan(directory=directory, every_steps=every_steps, keep_max=keep_max)
