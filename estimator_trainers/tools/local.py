"""Train a discovered trainer, or any package, on this machine (behind `scripts/train-local.sh`).

    python -m estimator_trainers.tools.local [MODEL] [options] [-- TRAINER_FLAGS...]
    python -m estimator_trainers.tools.local --package-path DIR --module-name M [options] [-- ARGS...]

Finds MODEL among the declared trainers (`estimator_trainers.registry`),
prepares its data when the data directory lacks it (the trainer's data
step), then runs `python -m <trainer module>` with the data flags, the
job-dir, the trainer's local defaults and the user's flags, in that order
(later flags win). With `--distributed` the same command runs once per task
of a local cluster: this process execs `python -m estimator_trainers.tools.launcher`
(`local_cluster.launcher_command`), which must start without the threads that
importing the trainers started (its private network namespace needs a
single-threaded process).

A package this repository has never seen runs the way `gcloud ai-platform
local train --package-path DIR --module-name M` ran it (`local_cluster.run_package`).
"""
import argparse
import os
import shlex
import signal
import subprocess
import sys
import types
from typing import Callable, Mapping, Optional, Sequence, Union

from estimator_trainers import declaration
from estimator_trainers import errors
from estimator_trainers import flags
from estimator_trainers import logs
from estimator_trainers import registry
from estimator_trainers.errors import UserInputError
from estimator_trainers.tools import local_cluster

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_MODEL = 'cifar10'
LAUNCHER_OPTIONS = ('--parameter-server-count', '--worker-count', '--evaluator-count',
                    '--start-port', '--max-restarts', '--network', '--shutdown-grace-secs',
                    '--stop-timeout-secs')

USAGE = """\
Usage: bash scripts/train-local.sh [MODEL] [options] [-- TRAINER_FLAGS...]

Trains a model locally, resuming from --job-dir when it holds checkpoints.

Models (every package that declares a trainer; default %(default)s):
%(models)s

  or any package: --package-path DIR --module-name MODULE (as gcloud ai-platform
  local train ran it: python -m MODULE from DIR's parent, --job-dir passed on)

Options:
  --job-dir DIR    checkpoints, TensorBoard summaries, exports
                   (default: /tmp/<model>; env JOB_DIR)
  --data-dir DIR   data directory, prepared by the model's data step when
                   empty (default: ./data/<model>, ./data/cifar10 for keras
                   --model cifar10_mlp; env DATA_DIR)
  --verbosity LEVEL  INFO (default): one line per event of the job; DEBUG also
                   TensorFlow's own start-up and internals, in every task
  -h, --help       show this help

Distributed (a TensorFlow cluster on this machine, one process per task, like
gcloud ai-platform local train --distributed; see docs/distributed.md):
  --distributed                 run a chief plus the tasks below
  --parameter-server-count N    parameter servers (default 2)
  --worker-count N              workers besides the chief (default 2)
  --evaluator-count N           evaluators (default 0)
  --start-port PORT             first port to try (default: free ports)
  --max-restarts N              restarts of each failed task (default 0)
  --network auto|private|host   private network namespace for the tasks
                                (default auto: private where the kernel allows
                                and no gs:// path is named)
  --shutdown-grace-secs N       after the chief: time for workers to end (120)
  --stop-timeout-secs N         after SIGTERM: time before SIGKILL (30)
  Each task's output is prefixed with its role ([worker-1] ...) and saved to
  <job-dir>/logs/<role>-<i>.log. Ctrl-C stops the tasks in order (the chief
  saves a checkpoint first); a second Ctrl-C kills them at once.

Everything after '--' goes to the trainer, e.g.
  bash scripts/train-local.sh -- --train-steps=2000
  bash scripts/train-local.sh taxi -- --train-steps=5000 --hidden-units=128,64,32
  bash scripts/train-local.sh cifar10 --distributed --worker-count 2 -- --sync
Trainer flags: python -m <trainer module> --help
"""


def usage(trainers: Mapping[str, declaration.Trainer]) -> str:
    """The `--help` text, listing `trainers`."""
    models = '\n'.join('  %-9s %s\n            (python -m %s)' % (
        name, trainer.description, trainer.module)
        for name, trainer in sorted(trainers.items()))
    return USAGE % {'default': DEFAULT_MODEL, 'models': models}


def parse_args(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    """(options, trainer flags). Unknown options are one error line."""
    options, trainer_flags = flags.split_at_dashes(argv)
    trainer_flags = trainer_flags or []
    model = DEFAULT_MODEL
    if options and not options[0].startswith('-'):
        model = options.pop(0)
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument('-h', '--help', action='store_true')
    parser.add_argument('--job-dir', default=os.environ.get('JOB_DIR') or None)
    parser.add_argument('--data-dir', default=os.environ.get('DATA_DIR') or None)
    parser.add_argument('--distributed', action='store_true')
    parser.add_argument('--verbosity', type=str.upper)
    parser.add_argument('--package-path', default=None)
    parser.add_argument('--module-name', default=None)
    for option in LAUNCHER_OPTIONS:
        parser.add_argument(option, default=None)
    args, unknown = parser.parse_known_args(options)
    if unknown:
        raise UserInputError("unknown option '%s' (see --help)" % unknown[0])
    for flag in ('--job-dir', '--data-dir'):
        value = getattr(args, flag[2:].replace('-', '_'))
        if value is not None and not value.strip():  # not the shared /tmp default
            raise UserInputError('%s: expected a path, got %r (an unset variable?)'
                                 % (flag, value), flag=flag)
    if args.verbosity is not None and args.verbosity not in flags.VERBOSITY_LEVELS:
        raise UserInputError('--verbosity %s: expected one of %s' % (
            args.verbosity, ', '.join(flags.VERBOSITY_LEVELS)), flag='--verbosity')
    args.model = model
    return args, trainer_flags


def launcher_args(args: argparse.Namespace) -> list[str]:
    """The launcher options given, as flags; they need --distributed."""
    given: list[str] = []
    for option in LAUNCHER_OPTIONS:
        value = getattr(args, option[2:].replace('-', '_'))
        if value is not None:
            given += [option, value]
    if given and not args.distributed:
        raise UserInputError('%s needs --distributed' % given[0])
    return given


def trainer_command(trainer: declaration.Trainer, data_dir: str, job_dir: str,
                    trainer_flags: Sequence[str]) -> list[str]:
    """argv of one training task: data flags, job-dir, local defaults, user flags."""
    return [sys.executable, '-m', trainer.module, *trainer.data_args(data_dir),
            '--job-dir', job_dir, *trainer.local_args, *trainer_flags]


def prepare_data(trainer: declaration.Trainer, data_dir: str,
                 environ: Optional[Mapping[str, str]] = None,
                 command: Optional[str] = None) -> int:
    """Runs the trainer's data step when `data_dir` lacks its data; returns its exit code.

    `environ`: the step's environment (default: this process's). `command`:
    the command line the user ran, which the step's offline message shows
    with the trainer's `data_source_env` set (the way to give this command a
    file downloaded elsewhere; the step's own --source is not this command's).
    """
    if trainer.data_ready(data_dir):
        return 0
    environ = dict(os.environ if environ is None else environ)
    step = trainer.data_step(data_dir, environ)
    if not step:
        return 0
    variable = trainer.data_source_env or ''
    if variable:
        environ[declaration.DATA_SOURCE_ADVICE_ENV] = 'rerun with %s=PATH%s' % (
            variable, ': %s=PATH %s' % (variable, command) if command else '')
    return run_passing_signals([sys.executable, '-m'] + list(step), env=environ)


def run_passing_signals(command: Sequence[str],
                        env: Optional[Mapping[str, str]] = None) -> int:
    """Runs `command` to its end, passing SIGTERM and SIGHUP on to it; returns its status.

    `env`: its environment (default: this process's).

    A signal sent to this process alone (`timeout`, `kill`) would otherwise
    end it and leave the data step running. Ctrl-C reaches the step from the
    terminal by itself (same process group), so this process only waits for
    it. Stopped by a signal, this process says so in one line and returns
    128 + its number.
    """
    process = subprocess.Popen(command, env=env)  # pylint: disable=consider-using-with
    received: list[int] = []

    def pass_on(signum: int, _: object) -> None:
        received.append(signum)
        process.send_signal(signum)

    handlers: dict[signal.Signals, Union[Callable[[int, Optional[types.FrameType]], None],
                                         signal.Handlers]] = {
        signal.SIGTERM: pass_on, signal.SIGHUP: pass_on, signal.SIGINT: signal.SIG_IGN}
    previous = {signum: signal.signal(signum, handler) for signum, handler in handlers.items()}
    try:
        code = process.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if received:
        errors.report(errors.TaskFailure(
            'stopped on %s during the data step (python %s); the same command starts it '
            'again' % (signal.Signals(received[0]).name, shlex.join(command[1:]))))
        return 128 + received[0]
    return code if code >= 0 else 128 - code


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Prepares the data, then becomes the trainer (or the launcher) by exec."""
    args, trainer_flags = parse_args(sys.argv[1:] if argv is None else argv)
    logs.quiet_console(args.verbosity, for_children=True)  # the data step, the tasks
    if args.help:
        sys.stdout.write(usage(registry.discover()))
        return 0
    if args.module_name or args.package_path:
        if not args.module_name:
            raise UserInputError('--package-path needs --module-name (the module to run)',
                                 flag='--module-name')
        local_cluster.run_package(args.package_path, args.module_name, args.job_dir,
                                  trainer_flags, args.distributed, launcher_args(args))
    trainer = registry.get(args.model)
    extra = launcher_args(args)
    job_dir = args.job_dir or '/tmp/%s' % trainer.name
    # The data this run reads (keras --model cifar10_mlp: CIFAR-10's).
    data = trainer.data_trainer(trainer_flags)
    data_dir = args.data_dir or os.path.join(REPO_ROOT, 'data', data.name)
    code = prepare_data(data, data_dir, command=shlex.join(
        ['bash', 'scripts/train-local.sh'] + list(sys.argv[1:] if argv is None else argv)))
    if code:
        return code
    command = trainer_command(trainer, data_dir, job_dir, trainer_flags)
    if args.distributed:
        command = local_cluster.launcher_command(job_dir, extra, command)
    os.execv(command[0], command)


if __name__ == '__main__':
    errors.run_cli(main)
