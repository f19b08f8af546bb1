"""Command-line flags shared by the trainers, defined in groups.

The groups (`add_job_flags`, `add_training_loop_flags`,
`add_performance_flags`, `add_runtime_flags`, `add_distribution_flags`) are
composed by `declaration.Trainer.make_parser` after the trainer's own flags.
Validators run at parse time and never touch the file system; flag values
are never mutated after parsing. A refused command line raises
`errors.FlagError` naming the flag, which the command prints as one line.
"""
import argparse
import os
from typing import Any, Callable, List, NoReturn, Optional, Sequence, Tuple, TypeVar

from estimator_trainers import checkpoints
from estimator_trainers import distribution
from estimator_trainers import logs
from estimator_trainers.errors import FlagError

VERBOSITY_LEVELS = ('DEBUG', 'INFO', 'WARN', 'ERROR', 'FATAL')


class ArgumentParser(argparse.ArgumentParser):
    """argparse that raises `FlagError` (naming the flag) instead of exiting.

    The command that parses turns it into its one `error:` line; a program
    that parses another's flags (the cloud pre-submit checks) gets the error
    as a value. `--help` still prints and exits 0.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault('exit_on_error', False)
        super().__init__(*args, **kwargs)

    def parse_known_args(  # type: ignore[override]  # typeshed overloads it on `namespace`
            self, args: Optional[Sequence[str]] = None,
            namespace: Optional[argparse.Namespace] = None,
    ) -> Tuple[argparse.Namespace, List[str]]:
        try:
            return super().parse_known_args(args, namespace)
        except argparse.ArgumentError as e:
            raise FlagError(str(e), flag=e.argument_name) from None

    def error(self, message: str) -> NoReturn:
        raise FlagError(message)


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows each default once: not where the help text already states it,
    and not for flags without one."""

    def _get_help_string(self, action: argparse.Action) -> Optional[str]:
        text = action.help or ''
        if 'default' in text.lower() or action.default in (None, argparse.SUPPRESS):
            return text
        return super()._get_help_string(action)


def split_at_dashes(argv: Sequence[str]) -> Tuple[List[str], Optional[List[str]]]:
    """`(options, what follows --)` of a command line; the second is None without
    `--` (the flags a command passes on to a trainer, a module or a task)."""
    argv = list(argv)
    if '--' not in argv:
        return argv, None
    split = argv.index('--')
    return argv[:split], argv[split + 1:]


def make_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """An `ArgumentParser` that shows defaults in `--help`."""
    return ArgumentParser(
        prog=prog, description=description, formatter_class=HelpFormatter,
        # A cloud job must not run with a flag the user mistyped as a prefix.
        allow_abbrev=False)


def positive_int(text: str) -> int:
    """argparse type: an integer > 0."""
    value = _parse(int, text, 'an integer')
    if value <= 0:
        raise argparse.ArgumentTypeError('expected an integer > 0, got %r' % text)
    return value


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0."""
    value = _parse(int, text, 'an integer')
    if value < 0:
        raise argparse.ArgumentTypeError('expected an integer >= 0, got %r' % text)
    return value


def positive_float(text: str) -> float:
    """argparse type: a float > 0."""
    value = _parse(float, text, 'a number')
    if not value > 0:
        raise argparse.ArgumentTypeError('expected a number > 0, got %r' % text)
    return value


def non_negative_float(text: str) -> float:
    """argparse type: a float >= 0."""
    value = _parse(float, text, 'a number')
    if not value >= 0:
        raise argparse.ArgumentTypeError('expected a number >= 0, got %r' % text)
    return value


def unit_interval(text: str) -> float:
    """argparse type: a float in [0, 1)."""
    value = _parse(float, text, 'a number')
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError('expected a number in [0, 1), got %r' % text)
    return value


def int_list(text: str) -> List[int]:
    """argparse type: comma-separated positive integers, e.g. `128,64,32`.

    Every item must be a number: `32,,16` or `32,16,` is a typo, not `32,16`.
    """
    return _int_list(text, 1, 'positive integers like 128,64')


def size_list(text: str) -> List[int]:
    """argparse type: comma-separated integers >= 0, e.g. `128,0,0`: sizes where a 0
    stands for one another flag computes (the trainer says which are allowed)."""
    return _int_list(text, 0, 'integers >= 0 like 128,64')


def _int_list(text: str, minimum: int, what: str) -> List[int]:
    items = text.split(',')
    try:
        values = [int(v) for v in items]
    except ValueError:
        values = []
    if not values or any(not minimum <= v <= INT64_MAX for v in values):
        raise argparse.ArgumentTypeError(
            'expected comma-separated %s, got %r%s'
            % (what, text, ' (an empty item)' if len(items) > 1 and not all(
                v.strip() for v in items) else ''))
    return values


def path(text: str) -> str:
    """argparse type: a local or gs:// path; an empty one (an unset variable) is refused."""
    if not text.strip():
        raise argparse.ArgumentTypeError('expected a path, got %r (an unset variable?)'
                                         % text)
    return text


def given_value(argv: Sequence[str], flag: str,
                default: Optional[str] = None) -> Optional[str]:
    """The value `argv` gives `flag` (`--flag V` or `--flag=V`, the last wins), else
    `default`: what a launcher needs to know of a trainer's flags before it runs."""
    value = default
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith(flag + '='):
            value = arg[len(flag) + 1:]
    return value


# Integers become int64 tensors (steps, batch sizes, seeds); larger ones overflow.
INT64_MAX = 2 ** 63 - 1
_Number = TypeVar('_Number', int, float)


def _parse(kind: Callable[[str], _Number], text: str, what: str) -> _Number:
    """`kind(text)`; floats must be finite and integers fit in int64."""
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError('expected %s, got %r' % (what, text)) from None
    if kind is float and value in (float('inf'), float('-inf')):
        raise argparse.ArgumentTypeError('expected a finite number, got %r' % text)
    if kind is int and abs(value) > INT64_MAX:
        raise argparse.ArgumentTypeError('expected an integer of at most %d (int64), '
                                         'got %r' % (INT64_MAX, text))
    return value


def add_job_flags(parser: argparse.ArgumentParser) -> None:
    """--job-dir: where checkpoints, summaries, exports and logs go."""
    default = os.environ.get('AIP_MODEL_DIR', '').strip() or None
    parser.add_argument(
        '--job-dir', type=path, default=default, required=default is None,
        help='Local or gs:// directory for checkpoints, TensorBoard summaries '
             'and exports. A rerun on the same directory resumes training '
             '(defaults to $AIP_MODEL_DIR on Vertex AI).')
    parser.add_argument(
        '--lease-timeout-secs', type=positive_float, default=300,
        help='One job trains in a job-dir at a time (its chief holds '
             '<job-dir>/LEASE.json with a heartbeat); a lease whose heartbeat is '
             'older than this is stale and taken over.')
    parser.add_argument(
        '--storage-timeout-secs', type=positive_float, default=60,
        help='Before anything else, every gs:// bucket the flags name must answer '
             'within this time (TensorFlow\'s own client retries for minutes); '
             'else the run ends with one line.')


def add_training_loop_flags(parser: argparse.ArgumentParser, *, train_steps: Optional[int],
                            checkpoint_steps: int,
                            steps_per_loop: int = 1) -> argparse._ArgumentGroup:
    """Step targets, steps per Session.run, evaluation, checkpoint and summary cadence.

    `checkpoint_steps` is the trainer's default checkpoint interval, also the
    longest default evaluation interval (`checkpoints.plan`); `steps_per_loop`
    the trainer's measured default of `--steps-per-loop`.
    """
    group = parser.add_argument_group('training loop')
    group.add_argument(
        '--train-steps', type=positive_int, default=train_steps,
        help='Global step to train to. A rerun on the same --job-dir resumes '
             'from the latest checkpoint and stops at this step.')
    group.add_argument(
        '--steps-per-loop', type=positive_int, default=None,
        help='Training steps per Session.run: an in-graph loop over the input '
             'runs up to N steps per call, which saves the per-call overhead of '
             'small models (1: one step per call). A loop also ends at every '
             'multiple of --checkpoint-num-steps, --eval-every-steps, '
             '--log-step-count-steps and --save-summary-steps and at '
             '--train-steps, so checkpoints, evaluations, summaries and progress '
             'lines land on the same steps as with 1. Default: %d for this '
             'trainer, 1 under --distribution-strategy mirrored or '
             'multi_worker_mirrored (which refuse more) and in a '
             'parameter-server job.' % steps_per_loop)
    group.add_argument(
        '--eval-steps', type=positive_int, default=None,
        help='Batches per evaluation (default: the whole eval set once).')
    group.add_argument(
        '--checkpoint-num-steps', type=positive_int, default=None,
        help='Save a checkpoint every N global steps (at exact multiples of N) '
             'and at the last step of each run; a new job-dir also saves step 0 '
             'as training starts. Checkpoints are for resuming; evaluations have '
             'their own cadence (--eval-every-steps). Default: %d (with evaluator '
             'tasks: the evaluation interval, since they evaluate checkpoints).'
             % checkpoint_steps)
    group.add_argument(
        '--eval-every-steps', type=positive_int, default=None,
        help='Evaluate at global steps that are multiples of N while training (the '
             'chief evaluates the weights it holds; no checkpoint needed), and at '
             'the end. Default: about %d evaluations per run, spread over '
             '--train-steps, at most %d steps apart; evaluations in the training '
             'process itself take at most %d%%%% of its time, or are at least %d '
             'points over the run where one costs more.'
             % (checkpoints.EVALUATIONS_PER_RUN, checkpoint_steps,
                round(100 * checkpoints.EVALUATION_SHARE), checkpoints.MIN_EVAL_POINTS))
    group.add_argument(
        '--keep-checkpoint-max', type=positive_int, default=5,
        help='Number of recent checkpoints to keep.')
    group.add_argument(
        '--save-summary-steps', type=positive_int, default=100,
        help='Write TensorBoard training summaries every N steps.')
    group.add_argument(
        '--log-step-count-steps', type=positive_int, default=100,
        help='Log step, loss, learning rate and examples/sec every N steps.')
    group.add_argument(
        '--eval-frequency-secs', type=non_negative_int,
        default=None,
        help='Evaluate at most every N seconds during training instead of within '
             'the time share (a final evaluation always runs; 0: at every multiple '
             'of --eval-every-steps). Evaluator tasks evaluate a new checkpoint at '
             'most this often.')
    return group


def add_precise_batch_norm_flag(parser: argparse.ArgumentParser) -> None:
    """--[no-]precise-batch-norm, for trainers whose model has batch norm."""
    parser.add_argument_group('evaluation').add_argument(
        '--precise-batch-norm', action=argparse.BooleanOptionalAction, default=True,
        help='Before each evaluation, re-estimate batch norm\'s statistics from %d '
             'training batches with the weights being evaluated ("precise BN"), '
             'instead of evaluating with the moving averages, which lag the '
             'weights early in a run; the export serves the statistics the final '
             'evaluation used. --no-precise-batch-norm evaluates as the reference '
             'implementation does.' % PRECISE_BN_BATCHES)


# Training batches precise batch norm averages over (`precise_bn.BATCHES`; no TensorFlow here).
PRECISE_BN_BATCHES = 10
MIXED_PRECISION_TYPES = ('auto', 'none', 'bfloat16', 'float16')


def add_performance_flags(parser: argparse.ArgumentParser, *, mixed_precision: bool = False,
                          num_intra_threads: int = 0,
                          num_inter_threads: int = 0) -> argparse._ArgumentGroup:
    """Threading and device-placement flags; `--mixed-precision` for trainers
    whose model_fn implements it (`mixed_precision=True`). `num_*_threads`:
    the trainer's thread pool defaults (0: one per core, TensorFlow's choice)."""
    group = parser.add_argument_group('performance')
    if mixed_precision:
        group.add_argument(
            '--mixed-precision', choices=MIXED_PRECISION_TYPES, default='auto',
            help='Compute in low precision with float32 variables and a float32 '
                 'loss: bfloat16 for CPUs with AVX512_BF16/AMX, float16 (with '
                 'dynamic loss scaling) for GPUs. auto: bfloat16 when training on '
                 'a CPU that computes it natively (AMX-BF16 or AVX512_BF16) with '
                 'oneDNN on (measured 1.4-1.5x faster), else none. '
                 'float16 without a GPU is slow (a warning says so). '
                 'Exports always compute in float32.')
    group.add_argument(
        '--num-intra-threads', type=non_negative_int, default=num_intra_threads,
        help='Threads inside one op (0: the number of CPU cores; default %d).'
             % num_intra_threads)
    group.add_argument(
        '--num-inter-threads', type=non_negative_int, default=num_inter_threads,
        help='Ops run in parallel (0: TensorFlow chooses; default %d).' % num_inter_threads)
    group.add_argument(
        '--log-device-placement', action=argparse.BooleanOptionalAction,
        default=False, help='Log the device each op is placed on.')
    return group


def metric_key(tag: str) -> str:
    """The evaluation's name of a tuning metric tag: `eval/auc` -> `auc`."""
    return tag[len('eval/'):] if tag.startswith('eval/') else tag


def unknown_metric(tag: Optional[str], eval_metrics: Sequence[str],
                   trainer: str) -> Optional[str]:
    """Why `tag` (`auc`, or `eval/auc` as TensorBoard names it) is not among the
    `eval_metrics` that `trainer`'s evaluations report, or None (also for no tag)."""
    if not tag or metric_key(tag) in eval_metrics:
        return None
    return ('%r is not a metric the %s trainer evaluates (expected one of: %s)'
            % (tag, trainer, ', '.join(eval_metrics)))


def metric_tag(eval_metrics: Sequence[str], trainer: str) -> Callable[[str], str]:
    """argparse type: a metric `trainer`'s evaluations report (`unknown_metric`).

    The tuning metric is met only after training and the export: a name the
    evaluation never reports ended a whole run in a traceback there.
    """
    def parse(text: str) -> str:
        problem = unknown_metric(text, eval_metrics, trainer)
        if problem:
            raise argparse.ArgumentTypeError(problem)
        return text
    return parse


def last_wins(argv: Sequence[str], parser: argparse.ArgumentParser) -> List[str]:
    """`argv` with each of `parser`'s flags given once: where several words set one
    flag (`--train-steps=1000 ... --train-steps 200`, `--sync ... --no-sync`), only
    the last stays, where it was: what argparse would take, readable in one pass.
    Words `parser` does not know stay as they are."""
    argv = list(argv)
    settings: List[Tuple[Optional[str], List[str]]] = []  # (dest or None, the words)
    index = 0
    while index < len(argv):
        word = argv[index]
        action = (parser._option_string_actions.get(word.split('=', 1)[0])  # pylint: disable=protected-access
                  if word.startswith('--') else None)
        end = index + 1
        if action is not None and '=' not in word and action.nargs != 0:
            if action.nargs in ('+', '*'):
                while end < len(argv) and not argv[end].startswith('--'):
                    end += 1
            else:
                end += action.nargs if isinstance(action.nargs, int) else 1
        settings.append((action.dest if action is not None else None, argv[index:end]))
        index = end
    last = {dest: i for i, (dest, _) in enumerate(settings) if dest is not None}
    return [word for i, (dest, words) in enumerate(settings)
            if dest is None or last[dest] == i for word in words]


def verbosity_in(argv: Sequence[str]) -> Optional[str]:
    """The value of the last `--verbosity` in `argv` before `--` (None: none), for an
    entry point that sets up its console before it parses its flags."""
    argv, _ = split_at_dashes(list(argv))
    found = None
    for index, arg in enumerate(argv):
        if arg == '--verbosity' and index + 1 < len(argv):
            found = argv[index + 1]
        elif arg.startswith('--verbosity='):
            found = arg.split('=', 1)[1]
    return found


def add_console_flag(parser: argparse.ArgumentParser) -> None:
    """`--verbosity` of a tool that starts trainers (train-local.sh, the cloud CLI)."""
    parser.add_argument(
        '--verbosity', type=str.upper, choices=VERBOSITY_LEVELS, default=None,
        help='DEBUG also prints TensorFlow\'s and the Google libraries\' own start-up '
             'lines and warnings, here and in the tasks this command starts (default: '
             'INFO, one line per event of the job).')


def add_runtime_flags(parser: argparse.ArgumentParser, *, eval_metrics: Sequence[str] = ('loss',),
                      trainer: str = 'this') -> argparse._ArgumentGroup:
    """Seed, log verbosity and the tuning metric (one of `eval_metrics`, the
    metrics the evaluations of `trainer` report)."""
    group = parser.add_argument_group('runtime')
    group.add_argument(
        '--random-seed', type=int, default=None,
        help='Makes the run reproducible: the same seed gives the same losses and '
             'metrics on the same machine (seeded input order and augmentation, '
             'TensorFlow op determinism; docs/experiments.md). Default: none, each '
             'run differs.')
    group.add_argument(
        '--verbosity', choices=VERBOSITY_LEVELS, default=logs.verbosity(),
        type=str.upper,
        help='Log level (default: INFO, or $%s, which the local cluster, '
             'train-local.sh --verbosity and the cloud tools\' --verbosity set). INFO '
             'prints one line per event of the job (progress, evaluations, '
             'checkpoints, the summary, warnings); DEBUG also TensorFlow\'s own '
             'start-up and internals.' % logs.VERBOSITY_ENV)
    group.add_argument(
        '--hypertune-metric', default=None, type=metric_tag(eval_metrics, trainer),
        help='Evaluation metric to report to a Vertex AI hyperparameter tuning '
             'study after the final evaluation (set by the job submission): one of '
             '%s, or eval/<metric>.' % ', '.join(eval_metrics))
    return group


def add_distribution_flags(parser: argparse.ArgumentParser) -> argparse._ArgumentGroup:
    """How this task replicates training (see `estimator_trainers.distribution`)."""
    group = parser.add_argument_group('distribution')
    group.add_argument(
        '--distribution-strategy', choices=distribution.STRATEGIES, default=None,
        help='parameter_server: between-graph replication over the ps tasks of '
             'TF_CONFIG, asynchronous (default when the cluster has ps tasks). '
             'multi_worker_mirrored: synchronous all-reduce across the chief and '
             'workers (default for several workers without ps). mirrored: '
             'all-reduce over this machine\'s devices, in one process. none: a '
             'single training task (default otherwise).')
    group.add_argument(
        '--peer-timeout-secs', type=positive_float, default=600,
        help='Fail, naming the address, when a cluster task this one needs (the '
             'ps tasks and chief, or the other workers) does not accept '
             'connections for this many seconds, at start-up or later in training. '
             'Under multi_worker_mirrored also the heartbeat timeout of TensorFlow\'s '
             'coordination service (at least 60 s).')
    group.add_argument(
        '--max-worker-delay-secs', type=non_negative_int, default=None,
        help='Cap on the start-up delay Estimator gives worker i, (i + 1) * 5 s, '
             'which helps long asynchronous runs converge (0 starts every worker '
             'at once). Default: 1 s per %d steps of --train-steps, at most '
             'TensorFlow\'s %d s (0 below %d steps), so short runs do not leave '
             'workers idle.' % (distribution.STEPS_PER_WORKER_DELAY_SEC,
                                distribution.TENSORFLOW_MAX_WORKER_DELAY_SECS,
                                distribution.STEPS_PER_WORKER_DELAY_SEC))
    return group
