"""What a trainer declares, without TensorFlow: the layer every tool imports.

A trainer package has two halves:

- `<package>/trainer.py` declares `TRAINER = SomeTrainer()`, a `Trainer`
  subclass: its name, flags, data step, the flags that shape its variables,
  the metrics it evaluates. `--help`, flag errors, the registry, the local
  launcher and the cloud tools use only this half, so none of them imports
  TensorFlow.
- `<package>/runtime.py` (the `Trainer.runtime` module) defines
  `RUNTIME = SomeRuntime()`, a `Runtime` subclass: what one training task
  does with TensorFlow (check the inputs, build the estimator, the input
  functions and the serving signature). The runner (`runner.run`) loads it
  by name once the flags are parsed.

`Plan`, `Task` and `MemoryEstimate` are the plain values the runner hands
between the two halves. Every capability a trainer may offer is a method or
attribute here, with a default: tools call it, never probe for it.

A `Runtime` is generic in its plan's `facts`: `class MyRuntime(Runtime[MyFacts])`
reads `plan.facts` back as `MyFacts` in every later method.
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, Optional, TypeVar

from estimator_trainers import flags
from estimator_trainers.errors import UserInputError

if TYPE_CHECKING:  # the declaration half never imports TensorFlow
    import tensorflow as tf

    from estimator_trainers.cluster import ClusterInfo
    from estimator_trainers.distribution import Distribution

RUNTIME_ATTRIBUTE = 'RUNTIME'
# What a runtime's `check` found (`Plan.facts`), as that runtime types it.
FactsT = TypeVar('FactsT')
# An Estimator input function: builds the dataset of (features, labels).
InputFn = Callable[[], 'tf.data.Dataset']
ServingInputFn = Callable[[], 'tf.estimator.export.ServingInputReceiver']
# Set by the tool that runs a data step for the user (`train-local.sh`): how to
# hand that command a file downloaded elsewhere, which the data step's
# offline message then names instead of its own --source.
DATA_SOURCE_ADVICE_ENV = 'ESTIMATOR_TRAINERS_DATA_SOURCE_ADVICE'


def data_source_advice(environ: Optional[Mapping[str, str]] = None) -> str:
    """How the user gives the data step they ran a downloaded file: `pass it
    with --source PATH`, or what the command that ran the step says."""
    environ = os.environ if environ is None else environ
    return environ.get(DATA_SOURCE_ADVICE_ENV) or 'pass it with --source PATH'


@dataclasses.dataclass(frozen=True)
class Plan(Generic[FactsT]):
    """What a runtime's input check found, for the rest of the run.

    Attributes:
      train_steps: the global step to train to.
      examples_per_step: examples this task consumes per step (examples/sec).
      facts: anything else the runtime's later methods need (counts, stats;
        None for a runtime that needs nothing).
      train_examples: examples in the training set, when known: a step may not
        consume more (`batch_flag` names the flag that sets the batch).
      memory: `MemoryEstimate`, when the runtime can make one: checked against
        the host's available memory before the first step.
      examples_per_global_step: examples the whole job consumes per global
        step, when the trainer's own options decide it (default: see
        `runner.examples_per_global_step`).
    """
    train_steps: int
    examples_per_step: int
    facts: FactsT
    train_examples: Optional[int] = None
    batch_flag: str = '--batch-size'
    memory: Optional[MemoryEstimate] = None
    examples_per_global_step: Optional[int] = None


@dataclasses.dataclass(frozen=True)
class MemoryEstimate:
    """A trainer's rough host-memory need: `fixed_bytes + batch * bytes_per_example`.

    Attributes:
      fixed_bytes: variables, their gradients and optimizer slots.
      bytes_per_example: activations one example keeps for the backward pass.
    """
    fixed_bytes: int
    bytes_per_example: int


@dataclasses.dataclass(frozen=True)
class Task:
    """This process's place in the job, handed to every runtime method.

    Attributes:
      cluster: `cluster.ClusterInfo` from TF_CONFIG.
      distribution: `distribution.Distribution` of this task.
      devices: the local devices this task trains on.
      num_gpus: GPUs among them.
      train_distribute: the `tf.distribute` strategy RunConfig gets, or None.
    """
    cluster: ClusterInfo
    distribution: Distribution
    devices: tuple[str, ...]
    num_gpus: int
    train_distribute: Optional[tf.distribute.Strategy] = None

    def replica_batch(self, batch_size: int, flag: str) -> int:
        """`batch_size` split over the local replicas of the strategy."""
        return self.distribution.replica_batch(batch_size, flag)


class Trainer:
    """A trainer declaration: subclass it, set the class attributes, override
    the methods whose defaults do not fit.

    Class attributes:
      name: the model name users type (`train-local.sh NAME`); every trainer sets it.
      module: the module `python -m` runs (empty: the declaring module).
      runtime: the module that defines `RUNTIME` (empty: `<package>.runtime`).
      description: one sentence for `--help`.
      train_steps: `--train-steps` default (None: the runtime's check decides).
      checkpoint_steps: `--checkpoint-num-steps` default, also the longest
        default evaluation interval (`checkpoints.plan`).
      steps_per_loop: `--steps-per-loop` default: training steps per
        Session.run (`steps_loop`), measured per trainer (benchmarks/).
      num_intra_threads, num_inter_threads: `--num-intra-threads` and
        `--num-inter-threads` defaults (0: one per core, TensorFlow's choice),
        measured per trainer (benchmarks/).
      mixed_precision: offer `--mixed-precision`.
      precise_batch_norm: the model has batch norm and registers its
        re-estimation (`precise_bn`): offer `--[no-]precise-batch-norm`, on by
        default; the runtime's `calibration_input_fn` gives the batches.
      local_args: trainer flags `train-local.sh` adds before the user's.
      data_source_env: the environment variable `train-local.sh` passes on to
        the data step as its `--source` (a file downloaded elsewhere), if any.
      eval_metrics: names of the metrics each evaluation reports: the
        `eval_metric_ops` of the model_fn's evaluation spec (a canned
        Estimator's head: its documented names) and `loss`, which Estimator
        adds. What a tuning study may optimise (`--hypertune-metric` refuses
        any other as it is parsed), known without building the graph; the evaluation
        graph, once built, is checked against the metric a run needs
        (`evaluation.Evaluator`), and tests hold each trainer's list to what
        its evaluation reports.
      exports: the chief exports a SavedModel at the end of a run.
    """
    name: str
    module: str = ''
    runtime: str = ''
    description: str = ''
    train_steps: Optional[int] = None
    checkpoint_steps: int = 1000
    steps_per_loop: int = 1
    num_intra_threads: int = 0
    num_inter_threads: int = 0
    mixed_precision: bool = False
    precise_batch_norm: bool = False
    local_args: tuple[str, ...] = ()
    data_source_env: Optional[str] = None
    eval_metrics: tuple[str, ...] = ('loss',)
    exports: bool = True

    def __init__(self) -> None:
        module = type(self).__module__
        spec = getattr(sys.modules.get(module), '__spec__', None)
        if module == '__main__' and spec is not None:  # declared in the module `python -m` runs
            module = spec.name
        if not self.module:
            self.module = module
        if not self.runtime:
            self.runtime = module.rsplit('.', 1)[0] + '.runtime'

    def add_flags(self, parser: argparse.ArgumentParser) -> None:
        """Adds the trainer's own flags (data, model) to `parser`."""

    def model_params(self, args: argparse.Namespace) -> Mapping[str, object]:
        """The flags that shape the variables, from parsed `args` ({}: none).

        The chief records them in `<job-dir>/model_params.json`; a later run
        (or a cloud submission) with other values is refused before anything
        is written.
        """
        return {}

    def data_trainer(self, trainer_flags: Sequence[str] = ()) -> Trainer:
        """The trainer whose data a run with `trainer_flags` (the user's trainer
        flags) reads: its `data_*` methods and `name` (`data/<name>` is the default
        local data directory) apply. Default: this one."""
        return self

    def data_args(self, data_dir: str) -> list[str]:
        """Trainer flags that point it at the data in local `data_dir`."""
        return []

    def data_ready(self, data_dir: str) -> bool:
        """True when `data_dir` holds what `data_args` points at."""
        return True

    def data_step(self, data_dir: str, environ: Mapping[str, str]) -> Optional[list[str]]:
        """argv of the command that fills `data_dir` (after `python -m`), or None."""
        return None

    def cloud_data_args(self, bucket_uri: str) -> list[tuple[str, str]]:
        """(flag, value) pairs of the data a cloud job reads by default."""
        return []

    def make_parser(self) -> argparse.ArgumentParser:
        """The complete flag parser: the trainer's flags plus the shared groups."""
        parser = flags.make_parser('python -m %s' % self.module, self.description)
        self.add_flags(parser)
        flags.add_job_flags(parser)
        flags.add_training_loop_flags(parser, train_steps=self.train_steps,
                                      checkpoint_steps=self.checkpoint_steps,
                                      steps_per_loop=self.steps_per_loop)
        if self.precise_batch_norm:
            flags.add_precise_batch_norm_flag(parser)
        flags.add_performance_flags(parser, mixed_precision=self.mixed_precision,
                                    num_intra_threads=self.num_intra_threads,
                                    num_inter_threads=self.num_inter_threads)
        flags.add_runtime_flags(parser, eval_metrics=self.eval_metrics, trainer=self.name)
        flags.add_distribution_flags(parser)
        return parser

    def check_flags(self, args: argparse.Namespace, distribution: Distribution) -> None:
        """Refuses flag values the task's decided `distribution.Distribution` cannot
        run (default: none); checks of a flag alone belong to `parse_args`.

        `startup.decide` calls it for every task before TensorFlow runs, and
        the cloud pre-submit checks for every replica of a job before upload.

        Raises:
          UserInputError: naming the flag.
        """

    def unknown_metric(self, tag: Optional[str]) -> Optional[str]:
        """Why `tag` (`auc`, or `eval/auc` as TensorBoard names it) is not a metric
        this trainer's evaluations report, or None (also for no tag)."""
        problem: Optional[str] = flags.unknown_metric(tag, self.eval_metrics, self.name)
        return problem

    def parse_args(self, argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
        """Parsed flags; raises `errors.FlagError` for a command line it refuses."""
        return self.make_parser().parse_args(argv)

    def load_runtime(self) -> Runtime[Any]:
        """The `Runtime` this trainer's tasks run (imports TensorFlow); its facts'
        type is the runtime's own (`Any` here: the runner only hands them back).

        Raises:
          UserInputError: the runtime module is missing or defines no `RUNTIME`.
        """
        try:
            runtime = getattr(importlib.import_module(self.runtime), RUNTIME_ATTRIBUTE, None)
        except ModuleNotFoundError as e:
            if e.name is None or (e.name != self.runtime
                                  and not self.runtime.startswith(e.name + '.')):
                raise
            runtime = None
        if not isinstance(runtime, Runtime):
            raise UserInputError('trainer %r: its runtime module %s defines no %s = '
                                 '<a declaration.Runtime>' % (self.name, self.runtime,
                                                              RUNTIME_ATTRIBUTE))
        return runtime


class Runtime(Generic[FactsT]):
    """What one training task of a trainer does with TensorFlow.

    The runner calls these in order, each with the parsed `args` and the
    `Task`; a parameter server calls none of them. `FactsT` is the type of the
    `Plan.facts` that `check` returns and the later methods read.
    """

    def check(self, args: argparse.Namespace, task: Task) -> Plan[FactsT]:
        """Validates the inputs; returns a `Plan`. Writes nothing.

        Raises:
          UserInputError: naming the flag or file at fault.
        """
        raise NotImplementedError

    def prepare_job_dir(self, args: argparse.Namespace, task: Task,
                        plan: Plan[FactsT]) -> None:
        """What the chief writes to the job-dir before training (default: nothing)."""

    def estimator(self, args: argparse.Namespace, task: Task, plan: Plan[FactsT],
                  run_config: tf.estimator.RunConfig) -> tf.estimator.Estimator:
        """The `tf.estimator.Estimator` to train, with `run_config`."""
        raise NotImplementedError

    def input_fns(self, args: argparse.Namespace, task: Task,
                  plan: Plan[FactsT]) -> tuple[InputFn, InputFn]:
        """(train_input_fn, eval_input_fn)."""
        raise NotImplementedError

    def serving_input_receiver_fn(self, args: argparse.Namespace,
                                  plan: Plan[FactsT]) -> Optional[ServingInputFn]:
        """The export's serving input function (the trainer declares `exports`)."""
        return None

    def calibration_input_fn(self, args: argparse.Namespace, task: Task,
                             plan: Plan[FactsT]) -> Optional[InputFn]:
        """Training batches, as evaluation sees its inputs (no augmentation), that
        re-estimate batch norm's statistics before each evaluation (the trainer
        declares `precise_batch_norm`)."""
        return None
