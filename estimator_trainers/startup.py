"""A task's start-up decisions, without TensorFlow.

What a task decides from its flags and its environment before it runs any
TensorFlow op: its place in the cluster (`cluster.load_cluster`), its
devices, its distribution strategy (`distribution.resolve`) and its steps per
`Session.run`; and that the trainer takes its flags under that strategy
(`Trainer.check_flags`). The runner makes these decisions here for the task
it runs, and the cloud tools make them here for every replica of a job before
anything is uploaded (`tools/cloud/preflight.check_replicas`), so a job that
any replica would refuse is refused on the user's machine, in the same words.

One translation happens here: a cluster whose first task is AI Platform's
`master` (runtime 1.15 and custom containers named it so) trains under
`multi_worker_mirrored` with that task as the `chief`, which is what
tf.distribute calls it; the decision says so in a note.
"""
import argparse
import dataclasses
from collections.abc import Mapping, Sequence
from typing import Optional

from estimator_trainers import cluster as cluster_lib
from estimator_trainers import distribution as distribution_lib
from estimator_trainers.cluster import ClusterInfo
from estimator_trainers.declaration import Trainer
from estimator_trainers.distribution import Distribution
from estimator_trainers.errors import UserInputError


@dataclasses.dataclass(frozen=True)
class Startup:
    """What a task decided before TensorFlow runs.

    Attributes:
      cluster: this task's cluster, as it exports it to TF_CONFIG.
      distribution: how it takes part in training.
      devices: the local devices it trains on.
      num_gpus: GPUs among them.
      steps_per_loop: training steps per `Session.run`.
      notes: one line each, what runs differently from what the environment said.
    """
    cluster: ClusterInfo
    distribution: Distribution
    devices: tuple[str, ...]
    num_gpus: int
    steps_per_loop: int
    notes: tuple[str, ...] = ()


def decide(trainer: Trainer, args: argparse.Namespace, environ: Mapping[str, str], *,
           visible_gpus: int, cpu_devices: Sequence[str] = ('/cpu:0',)) -> Startup:
    """The start-up decisions of one task of `trainer` with parsed `args`.

    Args:
      environ: the task's environment (TF_CONFIG, CLUSTER_SPEC).
      visible_gpus: GPUs its machine has.
      cpu_devices: its CPU devices (several when logical devices are set up).

    Raises:
      UserInputError: the task would refuse to start (naming the flag or
        TF_CONFIG and why), or the trainer refuses its flags under the
        decided strategy (`Trainer.check_flags`).
    """
    cluster = cluster_lib.load_cluster(environ)
    num_gpus: Optional[int] = getattr(args, 'num_gpus', None)
    if num_gpus is None or cluster.is_ps:
        # A parameter server computes nothing: it never claims GPUs.
        num_gpus = 0 if cluster.is_ps else visible_gpus
    if num_gpus > visible_gpus:
        raise UserInputError('--num-gpus=%d but this machine has %d GPU(s)'
                             % (num_gpus, visible_gpus), flag='--num-gpus')
    devices = tuple('/gpu:%d' % i for i in range(num_gpus)) if num_gpus else tuple(cpu_devices)
    notes: list[str] = []
    strategy = distribution_lib.strategy_name(args.distribution_strategy, cluster)
    if strategy == distribution_lib.MULTI_WORKER_MIRRORED and \
            cluster.chief_type == cluster_lib.MASTER:
        cluster = cluster.master_as_chief()
        notes.append("TF_CONFIG names the first task '%s' (AI Platform's name before "
                     "runtime 2.1): multi_worker_mirrored trains it as the '%s', "
                     "synchronously with the workers" % (cluster_lib.MASTER, cluster_lib.CHIEF))
    dist = distribution_lib.from_flags(args, cluster, devices, visible_gpus=visible_gpus)
    trainer.check_flags(args, dist)
    steps_per_loop = distribution_lib.steps_per_loop(
        args.steps_per_loop, trainer.steps_per_loop, dist)
    return Startup(cluster=cluster, distribution=dist, devices=devices, num_gpus=num_gpus,
                   steps_per_loop=steps_per_loop, notes=tuple(notes))
