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
"""
import dataclasses
import importlib
import os
import sys

from estimator_trainers import flags
from estimator_trainers.errors import UserInputError

RUNTIME_ATTRIBUTE = 'RUNTIME'
# Set by the tool that runs a data step for the user (`train-local.sh`): how to
# hand that command a file downloaded elsewhere, which the data step's
# offline message then names instead of its own --source.
DATA_SOURCE_ADVICE_ENV = 'ESTIMATOR_TRAINERS_DATA_SOURCE_ADVICE'


def data_source_advice(environ=None):
    """How the user gives the data step they ran a downloaded file: `pass it
    with --source PATH`, or what the command that ran the step says."""
    environ = os.environ if environ is None else environ
    return environ.get(DATA_SOURCE_ADVICE_ENV) or 'pass it with --source PATH'


@dataclasses.dataclass(frozen=True)
class Plan:
    """What a runtime's input check found, for the rest of the run.

    Attributes:
      train_steps: the global step to train to.
      examples_per_step: examples this task consumes per step (examples/sec).
      facts: anything else the runtime's later methods need (counts, stats).
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
    facts: object = None
    train_examples: int = None
    batch_flag: str = '--batch-size'
    memory: object = None
    examples_per_global_step: int = None


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
    cluster: object
    distribution: object
    devices: tuple
    num_gpus: int
    train_distribute: object = None

    def replica_batch(self, batch_size, flag):
        """`batch_size` split over the local replicas of the strategy."""
        return self.distribution.replica_batch(batch_size, flag)


class Trainer:
    """A trainer declaration: subclass it, set the class attributes, override
    the methods whose defaults do not fit.

    Class attributes:
      name: the model name users type (`train-local.sh NAME`).
      module: the module `python -m` runs (default: the declaring module).
      runtime: the module that defines `RUNTIME` (default `<package>.runtime`).
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
    name = None
    module = None
    runtime = None
    description = ''
    train_steps = None
    checkpoint_steps = 1000
    steps_per_loop = 1
    num_intra_threads = 0
    num_inter_threads = 0
    mixed_precision = False
    precise_batch_norm = False
    local_args = ()
    data_source_env = None
    eval_metrics = ('loss',)
    exports = True

    def __init__(self):
        module = type(self).__module__
        spec = getattr(sys.modules.get(module), '__spec__', None)
        if module == '__main__' and spec is not None:  # declared in the module `python -m` runs
            module = spec.name
        if self.module is None:
            self.module = module
        if self.runtime is None:
            self.runtime = module.rsplit('.', 1)[0] + '.runtime'

    def add_flags(self, parser):
        """Adds the trainer's own flags (data, model) to `parser`."""

    def model_params(self, args):
        """The flags that shape the variables, from parsed `args` ({}: none).

        The chief records them in `<job-dir>/model_params.json`; a later run
        (or a cloud submission) with other values is refused before anything
        is written.
        """
        return {}

    def data_trainer(self, trainer_flags=()):
        """The trainer whose data a run with `trainer_flags` (the user's trainer
        flags) reads: its `data_*` methods and `name` (`data/<name>` is the default
        local data directory) apply. Default: this one."""
        return self

    def data_args(self, data_dir):
        """Trainer flags that point it at the data in local `data_dir`."""
        return []

    def data_ready(self, data_dir):
        """True when `data_dir` holds what `data_args` points at."""
        return True

    def data_step(self, data_dir, environ):
        """argv of the command that fills `data_dir` (after `python -m`), or None."""
        return None

    def cloud_data_args(self, bucket_uri):
        """(flag, value) pairs of the data a cloud job reads by default."""
        return []

    def make_parser(self):
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

    def check_flags(self, args, distribution):
        """Refuses flag values the task's decided `distribution.Distribution` cannot
        run (default: none); checks of a flag alone belong to `parse_args`.

        `startup.decide` calls it for every task before TensorFlow runs, and
        the cloud pre-submit checks for every replica of a job before upload.

        Raises:
          UserInputError: naming the flag.
        """

    def unknown_metric(self, tag):
        """Why `tag` (`auc`, or `eval/auc` as TensorBoard names it) is not a metric
        this trainer's evaluations report, or None (also for no tag)."""
        return flags.unknown_metric(tag, self.eval_metrics, self.name)

    def parse_args(self, argv=None):
        """Parsed flags; raises `errors.FlagError` for a command line it refuses."""
        return self.make_parser().parse_args(argv)

    def load_runtime(self):
        """The `Runtime` this trainer's tasks run (imports TensorFlow).

        Raises:
          UserInputError: the runtime module is missing or defines no `RUNTIME`.
        """
        try:
            runtime = getattr(importlib.import_module(self.runtime), RUNTIME_ATTRIBUTE, None)
        except ModuleNotFoundError as e:
            if e.name != self.runtime and not self.runtime.startswith(e.name + '.'):
                raise
            runtime = None
        if not isinstance(runtime, Runtime):
            raise UserInputError('trainer %r: its runtime module %s defines no %s = '
                                 '<a declaration.Runtime>' % (self.name, self.runtime,
                                                              RUNTIME_ATTRIBUTE))
        return runtime


class Runtime:
    """What one training task of a trainer does with TensorFlow.

    The runner calls these in order, each with the parsed `args` and the
    `Task`; a parameter server calls none of them.
    """

    def check(self, args, task):
        """Validates the inputs; returns a `Plan`. Writes nothing.

        Raises:
          UserInputError: naming the flag or file at fault.
        """
        raise NotImplementedError

    def prepare_job_dir(self, args, task, plan):
        """What the chief writes to the job-dir before training (default: nothing)."""

    def estimator(self, args, task, plan, run_config):
        """The `tf.estimator.Estimator` to train, with `run_config`."""
        raise NotImplementedError

    def input_fns(self, args, task, plan):
        """(train_input_fn, eval_input_fn)."""
        raise NotImplementedError

    def serving_input_receiver_fn(self, args, plan):
        """The export's serving input function (the trainer declares `exports`)."""
        return None

    def calibration_input_fn(self, args, task, plan):
        """Training batches, as evaluation sees its inputs (no augmentation), that
        re-estimate batch norm's statistics before each evaluation (the trainer
        declares `precise_batch_norm`)."""
        return None
