"""Benchmark 5: cold start, seconds from process start to training.

Runs each trainer's real command line with its defaults and
`--checkpoint-num-steps 1`, timing (from the moment the process is spawned)
the arrival of the log lines that mark the `MILESTONES`, and the CPU seconds
the process had used by its first step (all its threads: robust to other load).
"""
import argparse
import tempfile
from typing import Any, Dict, List, Optional, Sequence, Union

from benchmarks import common

# (name, log line that marks it, what it means)
MILESTONES = (
    ('configured', 'Using config:',
     'flags parsed, TensorFlow imported, RunConfig built'),
    ('graph_built', 'Done calling model_fn.', 'the training graph built'),
    ('first_checkpoint', 'Saving checkpoints for 0 into',
     'model.ckpt-0 being written (the initial variables, saved before training)'),
    ('first_step', 'Saving checkpoints for 1 into',
     'the first training step done'),
)


def measure(cmd: Sequence[str]) -> Dict[str, float]:
    """Seconds to each milestone for one run of `cmd`."""
    seen: Dict[str, float] = {}

    def on_line(elapsed: float, line: str, pid: int) -> bool:
        for name, text, _ in MILESTONES:
            if name not in seen and text in line:
                seen[name] = elapsed
                seen[name + '_cpu'] = common.cpu_seconds(pid)
        return 'first_step' in seen
    common.stream_lines(cmd, on_line)
    return seen


def commands(cifar_data_dir: str, taxi_train_files: Sequence[str],
             taxi_eval_files: Sequence[str], job_dir: str) -> Dict[str, List[str]]:
    flags: List[Union[str, int]] = ['--job-dir', job_dir, '--checkpoint-num-steps', 1,
                                    '--train-steps', 5]
    return {
        'cifar10 ResNet-44': common.python_module(
            'cifar10_estimator.cifar10_main', '--data-dir', cifar_data_dir, *flags),
        'taxi': common.python_module(
            'taxi_estimator.task', '--train-files', *taxi_train_files,
            '--eval-files', *taxi_eval_files, *flags),
    }


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--cifar-data-dir', required=True)
    parser.add_argument('--taxi-train-files', nargs='+', required=True)
    parser.add_argument('--taxi-eval-files', nargs='+', required=True)
    parser.add_argument('--repeats', type=int, default=3)
    args = parser.parse_args(argv)
    common.quiet_tensorflow()
    names = list(commands(args.cifar_data_dir, args.taxi_train_files,
                          args.taxi_eval_files, ''))
    runs: Dict[str, List[Dict[str, float]]] = {name: [] for name in names}
    loads = common.load_mark()
    for repeat in range(args.repeats):
        for name in (names if repeat % 2 == 0 else names[::-1]):
            with tempfile.TemporaryDirectory() as job_dir:
                cmd = commands(args.cifar_data_dir, args.taxi_train_files,
                               args.taxi_eval_files, job_dir)[name]
                runs[name].append(measure(cmd))
    results: Dict[str, Any] = {'machine': common.machine_info(), 'trainers': {},
                               'load_average_range': common.load_since(loads)}
    rows = []
    for name, measured in runs.items():
        summary = {milestone: common.summarize([m[milestone] for m in measured])
                   for milestone in [m for m, _, _ in MILESTONES] + ['first_step_cpu']}
        results['trainers'][name] = summary
        rows.append([name] + ['%.1f (%.1f-%.1f)' % (s['median'], s['min'], s['max'])
                              for s in summary.values()])
    common.finish('cold_start', results,
                  'Cold start: seconds from process start (median, range)',
                  ['trainer'] + [m for m, _, _ in MILESTONES] + ['first_step CPU-s'], rows)


if __name__ == '__main__':
    main()
