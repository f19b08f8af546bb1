"""The one runner every trainer runs on.

A trainer package declares what is its own in `<package>/trainer.py` as
`TRAINER = SomeTrainer()`, a subclass of `Trainer`: its flags, its input
checks, its estimator, input functions and serving signature, and optionally
its data step. `run` owns the order of everything else, and each step is
where it is for a reason:

1. Native log noise is silenced and flags are parsed before TensorFlow is
   imported, so `--help` and flag errors are instant.
2. The cluster is read from `TF_CONFIG` / `CLUSTER_SPEC` and written back in
   normalised form, because `tf.estimator.RunConfig` reads `TF_CONFIG` itself.
3. Devices and the distribution strategy are resolved, and the strategy is
   built, before any TensorFlow op runs (reading data included):
   `multi_worker_mirrored` must configure collectives first.
4. A parameter server stops here and serves variables; it needs no data.
5. A job-dir another user owns is refused, then `Trainer.check` validates
   every input; nothing has been written yet.
6. The job-dir: a model that cannot restore its checkpoints is refused, then
   the chief records what the job-dir must remember (`prepare_job_dir`).
7. The checkpoint and evaluation cadence and the `RunConfig` are made once,
   from the flags and the run's length.
8. `training.train_and_evaluate` trains, evaluates, exports and summarises;
   the chief records the run's flags for TensorBoard's HParams dashboard.
"""
import dataclasses
import sys
import time

from estimator_trainers import errors
from estimator_trainers import flags
from estimator_trainers import logs


@dataclasses.dataclass(frozen=True)
class Plan:
    """What a trainer's input check found, for the rest of the run.

    Attributes:
      train_steps: the global step to train to.
      examples_per_step: examples this task consumes per step (examples/sec).
      facts: anything else the trainer's later methods need (counts, stats).
      train_examples: examples in the training set, when known: a step may not
        consume more (`batch_flag` names the flag that sets the batch).
      memory: `MemoryEstimate`, when the trainer can make one: checked against
        the host's available memory before the first step.
      examples_per_global_step: examples the whole job consumes per global
        step, when the trainer's own options decide it (default: see
        `examples_per_global_step`).
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
    """This process's place in the job, handed to every trainer method.

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
    """A trainer declaration: subclass it and set the class attributes.

    Class attributes:
      name: the model name users type (`train-local.sh NAME`).
      module: the module `python -m` runs (default `<package>.trainer`).
      description: one sentence for `--help`.
      train_steps: `--train-steps` default.
      checkpoint_steps: the longest checkpoint interval of the default cadence
        (`checkpoints.plan`).
      mixed_precision: offer `--mixed-precision`.
      local_args: trainer flags `train-local.sh` adds before the user's.
    """
    name = None
    module = None
    description = ''
    train_steps = None
    checkpoint_steps = 1000
    mixed_precision = False
    local_args = ()

    def __init__(self):
        if self.module is None:
            module = type(self).__module__
            if module == '__main__':  # declared in the module `python -m` runs
                module = sys.modules['__main__'].__spec__.name
            self.module = module

    # Flags and data: no TensorFlow here (help, cloud checks, launchers).

    def add_flags(self, parser):
        """Adds the trainer's own flags (data, model) to `parser`."""

    def data_args(self, data_dir):
        """Trainer flags that point it at the data in local `data_dir`."""
        return []

    def data_ready(self, data_dir):
        """True when `data_dir` holds what `data_args` points at."""
        return True

    def data_step(self, data_dir, environ):
        """argv of the command that fills `data_dir` (`python -m ...`), or None."""
        return None

    def cloud_data_args(self, bucket_uri):
        """(flag, value) pairs of the data a cloud job reads by default."""
        return []

    # One run, in the order `run` calls them.

    def check(self, args, task):
        """Validates the inputs; returns a `Plan`. Writes nothing.

        Raises:
          UserInputError: naming the flag or file at fault.
        """
        raise NotImplementedError

    def model_params(self, args, plan):
        """Flags that shape the variables, recorded in the job-dir ({} : none)."""
        return {}

    def prepare_job_dir(self, args, task, plan):
        """What the chief writes to the job-dir before training (default: nothing)."""

    def estimator(self, args, task, plan, run_config):
        """The `tf.estimator.Estimator` to train, with `run_config`."""
        raise NotImplementedError

    def input_fns(self, args, task, plan):
        """(train_input_fn, eval_input_fn)."""
        raise NotImplementedError

    def serving_input_receiver_fn(self, args, plan):
        """The export's serving input function, or None for no export."""
        return None

    # Derived, never overridden.

    def make_parser(self):
        """The complete flag parser: the trainer's flags plus the shared groups."""
        parser = flags.make_parser('python -m %s' % self.module, self.description)
        self.add_flags(parser)
        flags.add_job_flags(parser)
        flags.add_training_loop_flags(parser, train_steps=self.train_steps,
                                      checkpoint_steps=self.checkpoint_steps)
        flags.add_performance_flags(parser, mixed_precision=self.mixed_precision)
        flags.add_runtime_flags(parser)
        flags.add_distribution_flags(parser)
        return parser

    def parse_args(self, argv=None):
        return self.make_parser().parse_args(argv)


def main(trainer, argv=None):
    """The command line of `trainer`: parse, then `run`. Returns the exit code."""
    logs.quiet_tensorflow_native_logs()
    args = trainer.parse_args(argv)
    _warn_gcs_plugin(args)
    logs.configure(args.verbosity)
    run(trainer, args)
    return 0


def _warn_gcs_plugin(args):
    """One warning line when TensorFlow's GCS plugin would serve a gs:// flag value."""
    from estimator_trainers import gcs  # pylint: disable=g-import-not-at-top
    values = []
    for value in vars(args).values():
        values.extend(value if isinstance(value, (list, tuple)) else [value])
    warning = gcs.modular_filesystem_warning(v for v in values if isinstance(v, str))
    if warning:
        sys.stderr.write(warning + '\n')


def run_cli(trainer):
    """`python -m <trainer module>`: `main` with user errors as one line."""
    errors.run_cli(lambda argv: main(trainer, argv))


def run(trainer, args):
    """Runs one task of `trainer`'s job with parsed `args`, in the documented order.

    Returns:
      The final evaluation metrics on the chief, else None.
    """
    started = time.time()
    from estimator_trainers import cluster as cluster_lib  # pylint: disable=g-import-not-at-top
    from estimator_trainers import faults  # pylint: disable=g-import-not-at-top
    from estimator_trainers import job_dir as job_dir_lib  # pylint: disable=g-import-not-at-top
    from estimator_trainers import run_config  # pylint: disable=g-import-not-at-top
    from estimator_trainers import training  # pylint: disable=g-import-not-at-top

    cluster = cluster_lib.load_cluster()
    cluster_lib.export_tf_config(cluster)
    task = _task(args, cluster)
    # A parameter server waits inside TensorFlow: it ends at once on SIGTERM.
    termination = faults.Termination(cluster.task_label, _log,
                                     quick_exit_secs=0 if cluster.is_ps else None).install()
    with termination.ending_run():
        if cluster.is_ps:
            config = run_config.from_flags(args, task.distribution)
            return training.serve_parameters(config)

        job_dir_lib.check_owner(args.job_dir)
        plan = trainer.check(args, task)
        _check_batch(plan, task)
        with faults.guarded_run(args.job_dir, cluster, log=_log,
                                lease_timeout_secs=args.lease_timeout_secs):
            return _train(trainer, args, task, plan, termination, started)


def _train(trainer, args, task, plan, termination, started):
    """Steps 6 to 8 of `run`, on a job-dir this task may write."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    from estimator_trainers import checkpoints  # pylint: disable=g-import-not-at-top
    from estimator_trainers import distribution  # pylint: disable=g-import-not-at-top
    from estimator_trainers import hooks  # pylint: disable=g-import-not-at-top
    from estimator_trainers import job_dir as job_dir_lib  # pylint: disable=g-import-not-at-top
    from estimator_trainers import run_config  # pylint: disable=g-import-not-at-top
    from estimator_trainers import run_report  # pylint: disable=g-import-not-at-top
    from estimator_trainers import training  # pylint: disable=g-import-not-at-top
    cluster = task.cluster
    job_dir_lib.check_model_params(args.job_dir, trainer.model_params(args, plan),
                                   write=cluster.is_chief)
    if cluster.is_chief:
        trainer.prepare_job_dir(args, task, plan)

    checkpoint_plan = checkpoints.plan(
        args.job_dir, cluster, task.distribution,
        every_steps=args.checkpoint_num_steps, train_steps=plan.train_steps,
        max_default_steps=trainer.checkpoint_steps, keep_max=args.keep_checkpoint_max,
        eval_every_secs=args.eval_frequency_secs)
    config = run_config.from_flags(
        args, task.distribution, checkpoint_plan,
        num_cpu_devices=len(task.devices) if not task.num_gpus else None,
        train_distribute=task.train_distribute)
    watch = distribution.watch_peers(task.distribution)
    tf.compat.v1.logging.info('%d examples per step on this task (progress lines: '
                              'step/target)', plan.examples_per_step)
    train_input_fn, eval_input_fn = trainer.input_fns(args, task, plan)
    loop = training.LoopSettings.from_flags(
        args, train_steps=plan.train_steps, examples_per_step=plan.examples_per_step,
        examples_per_global_step=examples_per_global_step(plan, task))
    try:
        return training.train_and_evaluate(
            trainer.estimator(args, task, plan, config), loop, cluster, checkpoint_plan,
            train_input_fn=train_input_fn, eval_input_fn=eval_input_fn,
            serving_input_receiver_fn=trainer.serving_input_receiver_fn(args, plan),
            extra_hooks=[termination.hook(_final_save_dir(task, checkpoint_plan))] + (
                [watch.hook()] if watch else []),
            distribution=task.distribution, started=started,
            hparams=run_report.session_start(args) if cluster.is_chief else None)
    except hooks.Diverged as e:
        raise _divergence_failure(e, trainer, task, checkpoint_plan) from None


def _divergence_failure(diverged, trainer, task, checkpoint_plan):
    """The one line for a run that diverged: where, the checkpoint a rerun resumes
    from (no checkpoint that is not finite is saved), and which flag to lower."""
    from estimator_trainers import faults  # pylint: disable=g-import-not-at-top
    rates = sorted(action.option_strings[-1] for action in trainer.make_parser()._actions  # pylint: disable=protected-access
                   if action.dest.endswith('learning_rate'))
    hint = 'lower %s' % ' or '.join(rates) if rates else 'lower the learning rate'
    label = '' if task.cluster.task_label == 'local' else '%s: ' % task.cluster.task_label
    good = (faults.last_good_checkpoint(checkpoint_plan.directory)
            if task.cluster.is_chief and checkpoint_plan.directory else None)
    if diverged.at_start and diverged.start_step:
        return errors.TaskFailure(
            '%s%s, at the first step from the checkpoint it resumed from, %s: its '
            'variables do not train; it was saved by a run that diverged: move it '
            '(and its line in the checkpoint file) away to resume from an earlier '
            'one, or use a new --job-dir, and %s' % (label, diverged, good, hint))
    kept = ''
    if task.cluster.is_chief:
        kept = ('; the latest checkpoint stays %s, the last whose variables gave a '
                'finite loss, and a rerun resumes from it' % good if good else
                '; no checkpoint was saved')
    return errors.TaskFailure('%s%s%s; %s' % (label, diverged, kept, hint))


def _final_save_dir(task, checkpoint_plan):
    """Where SIGTERM saves: the chief's job-dir, unless a save needs every worker."""
    if task.cluster.is_chief and not task.distribution.every_worker_saves:
        return checkpoint_plan.directory
    return None


def _log(line):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    tf.compat.v1.logging.info(line)


def _check_batch(plan, task):
    """Refuses a step larger than the training set or than the memory available."""
    from estimator_trainers import faults  # pylint: disable=g-import-not-at-top
    if plan.train_examples is not None and plan.examples_per_step > plan.train_examples:
        raise errors.UserInputError(
            '%s=%d is larger than the %d training examples; a step may not use an '
            'example twice' % (plan.batch_flag, plan.examples_per_step,
                               plan.train_examples))
    if task.num_gpus:
        _log('Memory: not estimated for GPUs')
        return
    faults.check_memory(plan.memory, plan.examples_per_step, plan.batch_flag, _log)


def examples_per_global_step(plan, task):
    """Examples the whole job trains on per global step (job-wide examples/sec).

    Asynchronous tasks each add their own steps; under multi_worker_mirrored
    every training task contributes its batch to each step.
    """
    if plan.examples_per_global_step:
        return plan.examples_per_global_step
    if task.distribution.every_worker_saves:
        return plan.examples_per_step * task.cluster.num_workers
    return plan.examples_per_step


def _task(args, cluster):
    """Devices, distribution and strategy of this task, before any TensorFlow op runs."""
    from estimator_trainers import devices as devices_lib  # pylint: disable=g-import-not-at-top
    from estimator_trainers import distribution  # pylint: disable=g-import-not-at-top
    num_gpus = getattr(args, 'num_gpus', None)
    if num_gpus is None or cluster.is_ps:
        # A parameter server computes nothing: it never claims GPUs.
        num_gpus = 0 if cluster.is_ps else devices_lib.gpu_count()
    devices = devices_lib.local_devices(num_gpus)
    dist = distribution.from_flags(args, cluster, devices)
    return Task(cluster=cluster, distribution=dist, devices=devices, num_gpus=num_gpus,
                train_distribute=dist.make_train_distribute())

