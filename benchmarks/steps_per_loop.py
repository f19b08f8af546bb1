"""Benchmark 10: where `--steps-per-loop` pays, per trainer.

Each trainer's real command line with its defaults, at each `--steps-per-loop`
of the sweep, steady-state examples/sec (and per CPU-second), alternating
order, repeated: the taxi wide-and-deep model (~1 ms steps: the per-call
overhead of `Session.run` and the hooks is a large share), the Keras
trainer's MNIST CNN, and CIFAR-10 ResNet-20 (steps of a quarter second: the
loop should neither gain nor cost anything; with `--baseline-dir`, the
trainer before issue #22 runs beside it, so "unchanged or better" is measured
in the same run). A trainer's default (`declaration.Trainer.steps_per_loop`)
is the smallest value within a few percent of the best; 1 where the loop gains
nothing.
"""
import argparse
import tempfile
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from benchmarks import common

# `--steps-per-loop` values of a sweep; 'baseline': the trainer of `--baseline-dir`.
StepsPerLoop = Union[int, str]
# A trainer of the sweep: (its argv without job-dir, steps and logging flags,
# batch size, steps per progress interval, the values of the sweep).
TrainerSpec = Tuple[List[str], int, int, Tuple[StepsPerLoop, ...]]


def _trainers(args: argparse.Namespace) -> Dict[str, TrainerSpec]:
    """name: (argv without job-dir/steps/logging, batch size, interval, sweep)."""
    return {
        'taxi': (['taxi_estimator.task', '--train-files', *args.taxi_train_files,
                  '--eval-files', *args.taxi_eval_files], 128, 500, (1, 8, 32, 128)),
        'keras mnist_cnn': (['keras_estimator.trainer', '--data-dir', args.mnist_data_dir,
                             '--eval-steps', '1'], 64, 200, (1, 8, 32)),
        'cifar10 ResNet-20': (['cifar10_estimator.cifar10_main', '--data-dir',
                               args.cifar_data_dir, '--num-layers', '20', '--eval-steps', '1'],
                              128, 20, (1, 8) + (('baseline',) if args.baseline_dir else ())),
    }


def throughput(argv: Sequence[str], batch: int, interval: int, intervals: int,
               steps_per_loop: StepsPerLoop,
               baseline_dir: Optional[str] = None) -> Dict[str, Any]:
    """`steps_per_loop` 'baseline': the command as it is in checkout `baseline_dir`."""
    flags: List[StepsPerLoop] = ([] if steps_per_loop == 'baseline'
                                 else ['--steps-per-loop', steps_per_loop])
    root = common.REPO_ROOT
    if steps_per_loop == 'baseline':
        assert baseline_dir is not None  # a sweep has a baseline only with its checkout
        root = baseline_dir
    with tempfile.TemporaryDirectory() as job_dir:
        cmd = common.python_module(
            *argv, '--job-dir', job_dir, *flags,
            *common.window_flags(interval, intervals, root))
        return common.progress_throughput(cmd, batch_size=batch, intervals=intervals,
                                          root=root)


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--taxi-train-files', nargs='+', required=True)
    parser.add_argument('--taxi-eval-files', nargs='+', required=True)
    parser.add_argument('--mnist-data-dir', required=True)
    parser.add_argument('--cifar-data-dir', required=True)
    parser.add_argument('--baseline-dir', default=None,
                        help='A checkout of the trainers before issue #22 (CIFAR-10 row).')
    parser.add_argument('--trainers', default='taxi,keras mnist_cnn,cifar10 ResNet-20')
    parser.add_argument('--repeats', type=int, default=2)
    parser.add_argument('--intervals', type=int, default=3)
    args = parser.parse_args(argv)
    common.quiet_tensorflow()
    trainers = {name: spec for name, spec in _trainers(args).items()
                if name in args.trainers.split(',')}
    runs: Dict[str, Dict[str, List[Dict[str, Any]]]] = {}
    loads = common.load_mark()
    for repeat in range(args.repeats):
        for name, (trainer_argv, batch, interval, sweep) in trainers.items():
            for n in (sweep if repeat % 2 == 0 else sweep[::-1]):
                result = throughput(trainer_argv, batch, interval, args.intervals, n,
                                    args.baseline_dir)
                runs.setdefault(name, {}).setdefault(str(n), []).append(result)
                print('%-18s steps-per-loop %8s %9.0f examples/sec' % (
                    name, n, result['examples_per_sec']), flush=True)
    table: Dict[str, Dict[str, Dict[str, Any]]] = {}
    for name, by_n in runs.items():
        one = common.summarize([r['examples_per_sec'] for r in by_n['1']])['median']
        one_cpu = common.summarize([r['examples_per_cpu_sec'] for r in by_n['1']])['median']
        table[name] = {}
        for n, values in by_n.items():
            summary = common.summarize([r['examples_per_sec'] for r in values])
            summary['per_cpu_second'] = common.summarize(
                [r['examples_per_cpu_sec'] for r in values])
            summary['vs_1'] = summary['median'] / one
            summary['vs_1_per_cpu_second'] = summary['per_cpu_second']['median'] / one_cpu
            table[name][n] = summary
    results: Dict[str, Any] = {'machine': common.machine_info(),
                               'load_average_range': common.load_since(loads), 'trainers': table}
    common.finish('steps_per_loop', results, 'Examples/sec by --steps-per-loop',
                  ['trainer', 'N', 'examples/sec', 'x N=1', 'x N=1 per CPU-s'],
                  [[name, n, '%.0f' % s['median'], '%.2f' % s['vs_1'],
                    '%.2f' % s['vs_1_per_cpu_second']]
                   for name, by_n in table.items() for n, s in by_n.items()])


if __name__ == '__main__':
    main()
