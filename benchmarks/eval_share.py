"""Benchmark 6: what evaluation costs in the trainers' default runs.

Runs each trainer's default local job (`train-local.sh` flags: taxi 10
epochs of the data step's trips, CIFAR-10 ResNet-44 for `--cifar-train-steps`,
1000 as `train-local.sh` does) in a fresh job-dir, and reads the closing
summary block: wall time, the seconds training waited for evaluation (every
evaluation during training, the final one, and building the evaluation graph
where training waited for it: a chief that evaluates while it trains builds
it in a thread as training starts) and the number of evaluations, i.e. of
points on the evaluation curves. Target: at least 5 points and at most 15%
of the wall time.
"""
import argparse
import re
import tempfile
from typing import Any, Callable, Dict, List, Optional, Sequence, TypedDict

from benchmarks import common

# "wall time  12.3s, of which evaluating 1.2s (9.8%, 10 evaluations)"
_WALL = re.compile(r'wall time\s+([\dhms.]+), of which evaluating ([\dhms.]+) '
                   r'\(([\d.]+)%, (\d+) evaluations?\)')


class DefaultRun(TypedDict):
    """What a default run's closing summary block says."""
    wall_secs: float
    eval_secs: float
    eval_share: float
    evaluations: int


def _seconds(text: str) -> float:
    """Seconds of `1h02m`, `3m05s` or `12.3s`."""
    total = 0.0
    for value, unit in re.findall(r'([\d.]+)([hms])', text):
        total += float(value) * {'h': 3600, 'm': 60, 's': 1}[unit]
    return total


def default_run(cmd: Sequence[str]) -> DefaultRun:
    """Runs `cmd` to the end; the share of wall time it spent evaluating."""
    output = common.stream_lines(cmd, lambda *_: False, timeout=3600)
    match = _WALL.search(output)
    if not match:
        raise RuntimeError('no summary block:\n' + output[-4000:])
    return {'wall_secs': _seconds(match.group(1)), 'eval_secs': _seconds(match.group(2)),
            'eval_share': float(match.group(3)) / 100, 'evaluations': int(match.group(4))}


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--taxi-train-files', nargs='+', required=True)
    parser.add_argument('--taxi-eval-files', nargs='+', required=True)
    parser.add_argument('--cifar-data-dir')
    parser.add_argument('--cifar-train-steps', type=int, default=1000)
    parser.add_argument('--repeats', type=int, default=1)
    parser.add_argument('--trainers', default='taxi,cifar10',
                        help='Comma-separated trainers to run (taxi, cifar10).')
    args = parser.parse_args(argv)
    commands: Dict[str, Callable[[str], List[str]]] = {
        'taxi': lambda job_dir: common.python_module(
            'taxi_estimator.task', '--train-files', *args.taxi_train_files,
            '--eval-files', *args.taxi_eval_files, '--job-dir', job_dir),
        'cifar10': lambda job_dir: common.python_module(
            'cifar10_estimator.cifar10_main', '--data-dir', args.cifar_data_dir,
            '--job-dir', job_dir, '--train-steps', args.cifar_train_steps),
    }
    runs: Dict[str, List[DefaultRun]] = {name: [] for name in args.trainers.split(',')}
    loads: List[float] = []
    for _ in range(args.repeats):
        for name in runs:
            with tempfile.TemporaryDirectory() as job_dir:
                loads.append(common.load_average())
                runs[name].append(default_run(commands[name](job_dir)))
            print('%-8s %s' % (name, runs[name][-1]), flush=True)
    results: Dict[str, Any] = {
        'machine': common.machine_info(), 'cifar_train_steps': args.cifar_train_steps,
               'load_average_range': [min(loads), max(loads)], 'runs': runs}
    rows = [[name, '%.1f' % common.summarize([r['wall_secs'] for r in values])['median'],
             '%.1f' % common.summarize([r['eval_secs'] for r in values])['median'],
             '%.1f%%' % (100 * common.summarize([r['eval_share'] for r in values])['median']),
             '%d' % min(r['evaluations'] for r in values)] for name, values in runs.items()]
    common.finish('eval_share', results, 'Evaluation cost of the default runs',
                  ['trainer', 'wall s', 'evaluating s', 'share', 'evaluations'], rows)


if __name__ == '__main__':
    main()
