"""Benchmark 8: what a seed costs: reproducible runs against free-running ones.

With `--random-seed` a trainer runs deterministically (`runner.make_deterministic`:
TensorFlow's op determinism, seeded input order; the CIFAR-10 augmentation is
stateless either way). Each trainer's steady-state throughput is measured
with and without a seed, in alternating order, on its progress lines
(`common.progress_throughput`), in fresh processes.
"""
import argparse
import tempfile
from typing import Any, Dict, List, Optional, Sequence, Tuple

from benchmarks import common

VARIANTS = ('unseeded', 'seeded')


def _command(trainer: str, args: argparse.Namespace, job_dir: str,
             seeded: bool) -> Tuple[List[str], int]:
    seed = ['--random-seed', '1'] if seeded else []
    if trainer == 'cifar10':
        return common.python_module(
            'cifar10_estimator.cifar10_main', '--data-dir', args.cifar_data_dir,
            '--job-dir', job_dir, '--num-layers', args.num_layers,
            *common.window_flags(args.interval, args.intervals), '--eval-steps', 1,
            *seed), 128
    return common.python_module(
        'taxi_estimator.task', '--train-files', *args.taxi_train_files, '--eval-files',
        *args.taxi_eval_files, '--job-dir', job_dir,
        *common.window_flags(10 * args.interval, args.intervals), *seed), 128


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--cifar-data-dir', required=True)
    parser.add_argument('--taxi-train-files', nargs='+', required=True)
    parser.add_argument('--taxi-eval-files', nargs='+', required=True)
    parser.add_argument('--num-layers', type=int, default=20)
    parser.add_argument('--repeats', type=int, default=3)
    parser.add_argument('--interval', type=int, default=10,
                        help='Steps between progress lines (taxi: ten times this).')
    parser.add_argument('--intervals', type=int, default=3)
    args = parser.parse_args(argv)
    common.quiet_tensorflow()
    results: Dict[str, Any] = {'machine': common.machine_info(),
                               'num_layers': args.num_layers, 'trainers': {}}
    loads = common.load_mark()
    for trainer in ('cifar10', 'taxi'):
        runs: Dict[str, List[float]] = {variant: [] for variant in VARIANTS}
        per_cpu: Dict[str, List[float]] = {variant: [] for variant in VARIANTS}
        for _ in range(args.repeats):
            for variant in VARIANTS:
                with tempfile.TemporaryDirectory() as job_dir:
                    cmd, batch = _command(trainer, args, job_dir, variant == 'seeded')
                    measured = common.progress_throughput(cmd, batch_size=batch,
                                                          intervals=args.intervals)
                runs[variant].append(measured['examples_per_sec'])
                per_cpu[variant].append(measured['examples_per_cpu_sec'])
                print('%-8s %-9s %.1f examples/sec' % (trainer, variant,
                                                       measured['examples_per_sec']),
                      flush=True)
        summary: Dict[str, Any] = {variant: dict(common.summarize(runs[variant]),
                                                 per_cpu_second=common.summarize(per_cpu[variant]))
                                   for variant in VARIANTS}
        summary['seeded_over_unseeded'] = (summary['seeded']['median']
                                           / summary['unseeded']['median'])
        summary['seeded_over_unseeded_per_cpu_second'] = (
            summary['seeded']['per_cpu_second']['median']
            / summary['unseeded']['per_cpu_second']['median'])
        results['trainers'][trainer] = summary
    results['load_average_range'] = common.load_since(loads)
    rows = [[name, '%.1f' % s['unseeded']['median'], '%.1f' % s['seeded']['median'],
             '%.2f' % s['seeded_over_unseeded'],
             '%.2f' % s['seeded_over_unseeded_per_cpu_second']]
            for name, s in results['trainers'].items()]
    common.finish('determinism', results, 'The cost of a seed (examples/sec, median)',
                  ['trainer', 'no seed', '--random-seed', 'seeded / not', 'per CPU-second'],
                  rows)


if __name__ == '__main__':
    main()
