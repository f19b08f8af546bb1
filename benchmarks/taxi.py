"""Benchmark 3: the taxi trainer vs an equivalent Keras wide-and-deep model.

On the same CSVs (the data step's real trips), alternating order, repeated:
- examples/sec: steady state of `python -m taxi_estimator.task` with its
  defaults (`--steps-per-loop` included), of the same with
  `--steps-per-loop 1`, of the trainer as it was before issue #22 (the
  checkout `--baseline-dir`, "today's default": one step per Session.run,
  fourteen wide columns, CSV parsed every epoch), and of `keras_wide_deep`
  under `fit` with each `steps_per_execution` of `--keras-steps-per-execution`,
  and of `--keras-one-thread-steps-per-execution` with both of Keras' thread
  pools at one thread as the trainer's defaults have them (the fastest of
  all is the fair peer: per CPU-second when the machine was loaded); all
  after the same warm-up, each run counted by its fastest interval of
  `--interval` steps on both sides, as benchmark 1 counts ResNet
  (`common.fastest_interval`: on these shared machines stretches of seconds
  run slower, and a run's mean takes whatever it lands on). The trainer with
  its input replaced by batches replayed from memory (`estimator_free_input`)
  shows what the input pipeline costs;
- time to a fixed eval AUC: wall seconds from process start until an
  evaluation of the whole eval file reaches `--target-auc`, every
  `--eval-every` steps (the trainer after each checkpoint, restoring it into
  its evaluation graph; Keras in memory), for the trainer's defaults, the
  baseline and Keras with its best `steps_per_execution`.
"""
import argparse
import functools
import json
import os
import re
import tempfile
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from benchmarks import common

_EVAL = re.compile(r'Evaluation of step (\d+) .*\bauc = ([\d.]+)')
# A line of a run's output -> (step, AUC) when it reports an evaluation, else None.
ParseAuc = Callable[[str], Optional[Tuple[int, float]]]


def taxi_cli(train_files: Sequence[str], eval_files: Sequence[str], job_dir: str,
             *flags: Union[str, int], levers: Sequence[str] = ()) -> List[str]:
    """The trainer's command line, through `benchmarks.estimator_variant` when
    code-level `levers` are switched."""
    entry = ['taxi_estimator.task']
    if levers:
        entry = ['benchmarks.estimator_variant', '--trainer', 'taxi'] + [
            '--lever=' + lever for lever in levers] + ['--']
    return common.python_module(
        *entry, '--train-files', *train_files, '--eval-files', *eval_files,
        '--job-dir', job_dir, *flags)


def estimator_throughput(train_files: Sequence[str], eval_files: Sequence[str],
                         interval: int, intervals: int, *,
                         flags: Sequence[Union[str, int]] = (), levers: Sequence[str] = (),
                         root: str = common.REPO_ROOT) -> Dict[str, Any]:
    """Steady-state examples/sec of the trainer (in checkout `root`) with
    `flags`: its fastest interval (`common.fastest`)."""
    with tempfile.TemporaryDirectory() as job_dir:
        cmd = taxi_cli(train_files, eval_files, job_dir,
                       *common.window_flags(interval, intervals, root), *flags,
                       levers=levers)
        return common.fastest(common.progress_throughput(
            cmd, batch_size=128, intervals=intervals, root=root))


def keras_throughput(train_files: Sequence[str], eval_files: Sequence[str], interval: int,
                     intervals: int, steps_per_execution: int,
                     threads: int = 0) -> Dict[str, Any]:
    """Steady-state Keras `fit`, counted as the trainer is (its fastest
    interval); `threads` > 0 sizes both its thread pools."""
    return common.fastest(common.json_result(common.python_module(
        'benchmarks.keras_wide_deep', '--mode', 'throughput',
        '--train-files', *train_files, '--eval-files', *eval_files,
        '--warmup-steps', interval, '--steps', interval * intervals,
        '--interval', interval, '--steps-per-execution', steps_per_execution,
        '--intra-op-threads', threads, '--inter-op-threads', threads)))


def _time_to_auc(cmd: Sequence[str], parse: ParseAuc, target: float,
                 root: str = common.REPO_ROOT) -> Dict[str, Any]:
    """Runs `cmd` until `parse(line)` gives (step, auc >= target)."""
    reached: Dict[str, Any] = {}

    def on_line(elapsed: float, line: str, _: int) -> bool:
        found = parse(line)
        if found and found[1] >= target:
            reached.update(seconds=elapsed, step=found[0], auc=found[1])
            return True
        return False
    common.stream_lines(cmd, on_line, root=root)
    return reached or {'seconds': None, 'step': None, 'auc': None}


def estimator_time_to_auc(train_files: Sequence[str], eval_files: Sequence[str],
                          target: float, every: int, max_steps: int,
                          root: str = common.REPO_ROOT) -> Dict[str, Any]:
    def parse(line: str) -> Optional[Tuple[int, float]]:
        match = _EVAL.search(line)
        return (int(match.group(1)), float(match.group(2))) if match else None
    with tempfile.TemporaryDirectory() as job_dir:
        cmd = taxi_cli(train_files, eval_files, job_dir, '--train-steps', max_steps,
                       '--checkpoint-num-steps', every, '--eval-frequency-secs', 0)
        return _time_to_auc(cmd, parse, target, root=root)


def keras_time_to_auc(train_files: Sequence[str], eval_files: Sequence[str], target: float,
                      every: int, max_steps: int, steps_per_execution: int,
                      threads: int = 0) -> Dict[str, Any]:
    def parse(line: str) -> Optional[Tuple[int, float]]:
        if not line.startswith('{'):
            return None
        value = json.loads(line)
        return value['step'], value['auc']
    cmd = common.python_module(
        'benchmarks.keras_wide_deep', '--mode', 'auc', '--train-files', *train_files,
        '--eval-files', *eval_files, '--target', target, '--eval-every', every,
        '--max-steps', max_steps, '--steps-per-execution', steps_per_execution,
        '--intra-op-threads', threads, '--inter-op-threads', threads)
    return _time_to_auc(cmd, parse, target)


def keras_variants(steps_per_execution: Sequence[int],
                   one_thread_steps_per_execution: Sequence[int]) -> Dict[str, Tuple[int, int]]:
    """{name: (steps_per_execution, threads)} of the Keras peers: Keras' default
    thread pools, and both pools at one thread (the trainer's default here)."""
    variants = {'keras_spe%d' % n: (n, 0) for n in steps_per_execution}
    variants.update({'keras_spe%d_1thread' % n: (n, 1)
                     for n in one_thread_steps_per_execution})
    return variants


def best_keras(variants: Dict[str, Dict[str, Any]], names: Sequence[str],
               cores: Optional[int]) -> str:
    """The fastest Keras variant: by examples per CPU-second when the benchmark's
    mean load exceeded the core count (the basis its targets are judged on
    then), else by examples/sec."""
    loaded = variants and max(v.get('load_mean', 0) for v in variants.values()) > cores

    def speed(name: str) -> float:
        summary = variants[name]
        value: float = summary['per_cpu_second']['median'] if loaded else summary['median']
        return value
    return max(names, key=speed)


def _summary(runs: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
    summary = common.summarize([r['examples_per_sec'] for r in runs])
    summary['per_cpu_second'] = common.summarize([r['examples_per_cpu_sec'] for r in runs])
    summary['load_mean'] = common.summarize([r['load'][1] for r in runs])['median']
    return summary


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--train-files', nargs='+', required=True)
    parser.add_argument('--eval-files', nargs='+', required=True)
    parser.add_argument('--baseline-dir', default=None,
                        help='A checkout of the trainer before issue #22 (run.sh makes '
                             'one with git archive); none: no baseline rows.')
    parser.add_argument('--baseline-commit', default=None,
                        help='The commit --baseline-dir holds (for the record).')
    parser.add_argument('--keras-steps-per-execution', default='1,8,32,128')
    parser.add_argument('--keras-one-thread-steps-per-execution', default='32,128',
                        help='Keras variants also measured with both thread pools at '
                             'one thread, as the trainer runs by default (none: "").')
    parser.add_argument('--repeats', type=int, default=5,
                        help='Repeats of every variant (5: a 94%% interval for the '
                             'median of the trainer\'s same-repeat ratios to Keras).')
    parser.add_argument('--interval', type=int, default=2048,
                        help='Steps per progress interval: a multiple of every '
                             'steps_per_execution and of the trainer\'s --steps-per-loop '
                             '(128), so both sides time the same steps; long enough '
                             '(~1 CPU-s) that the trainer\'s CPU time, read from /proc '
                             'in 10 ms clock ticks, is within ~1%%.')
    parser.add_argument('--intervals', type=int, default=6,
                        help='Steady-state intervals; each run counts its fastest.')
    parser.add_argument('--target-auc', type=float, default=0.94)
    parser.add_argument('--eval-every', type=int, default=50)
    parser.add_argument('--max-steps', type=int, default=2000)
    args = parser.parse_args(argv)
    common.quiet_tensorflow()
    files = (args.train_files, args.eval_files)
    keras_runs = keras_variants(
        [int(n) for n in args.keras_steps_per_execution.split(',') if n],
        [int(n) for n in args.keras_one_thread_steps_per_execution.split(',') if n])
    throughputs: Dict[str, Callable[[], Dict[str, Any]]] = {
        'estimator': lambda: estimator_throughput(*files, args.interval, args.intervals),
        'estimator_loop1': lambda: estimator_throughput(
            *files, args.interval, args.intervals, flags=['--steps-per-loop', '1']),
        'estimator_free_input': lambda: estimator_throughput(
            *files, args.interval, args.intervals, levers=['free_input']),
        'estimator_inter2': lambda: estimator_throughput(
            *files, args.interval, args.intervals, flags=['--num-inter-threads', '2']),
    }
    if args.baseline_dir:
        throughputs['baseline'] = lambda: estimator_throughput(
            *files, args.interval, args.intervals, root=args.baseline_dir)
    for name, (n, threads) in keras_runs.items():
        throughputs[name] = functools.partial(keras_throughput, *files, args.interval,
                                              args.intervals, n, threads)
    runs: Dict[str, List[Dict[str, Any]]] = {name: [] for name in throughputs}
    loads = common.load_mark()
    for repeat in range(args.repeats):
        order = list(throughputs) if repeat % 2 == 0 else list(throughputs)[::-1]
        for name in order:
            runs[name].append(throughputs[name]())
            print('taxi %-22s %8.0f examples/sec, %8.0f per CPU-second (load %.1f)' % (
                name, runs[name][-1]['examples_per_sec'],
                runs[name][-1]['examples_per_cpu_sec'], runs[name][-1]['load'][1]),
                  flush=True)
    variants = {name: _summary(values) for name, values in runs.items()}
    keras = best_keras(variants, list(keras_runs), os.cpu_count())

    to_auc: Dict[str, Callable[[], Dict[str, Any]]] = {
              'estimator': lambda: estimator_time_to_auc(
                  *files, args.target_auc, args.eval_every, args.max_steps),
              keras: lambda: keras_time_to_auc(
                  *files, args.target_auc, args.eval_every, args.max_steps,
                  *keras_runs[keras])}
    if args.baseline_dir:
        to_auc['baseline'] = lambda: estimator_time_to_auc(
            *files, args.target_auc, args.eval_every, args.max_steps,
            root=args.baseline_dir)
    auc_runs: Dict[str, List[Dict[str, Any]]] = {name: [] for name in to_auc}
    for repeat in range(args.repeats):
        order = list(to_auc) if repeat % 2 == 0 else list(to_auc)[::-1]
        for name in order:
            auc_runs[name].append(to_auc[name]())
            print('taxi %-12s AUC %s after %s steps, %s s' % (
                name, auc_runs[name][-1]['auc'], auc_runs[name][-1]['step'],
                auc_runs[name][-1]['seconds']), flush=True)
    for name, values in auc_runs.items():
        reached = [r for r in values if r['seconds'] is not None]
        summary: Dict[str, Any] = {'reached': '%d of %d runs' % (len(reached), len(values)),
                                   'runs': values}
        if reached:
            summary.update(seconds=common.summarize([r['seconds'] for r in reached]),
                           steps=common.summarize([r['step'] for r in reached]))
        variants[name]['time_to_auc'] = summary

    def ratio(a: str, b: str, key: Optional[int] = None) -> float:
        pick: Callable[[Dict[str, Any]], float] = (
            (lambda v: v['per_cpu_second']['median']) if key else (lambda v: v['median']))
        return pick(variants[a]) / pick(variants[b])

    results: Dict[str, Any] = {
        'machine': common.machine_info(), 'batch_size': 128,
        'interval_steps': args.interval, 'intervals': args.intervals,
        'target_auc': args.target_auc, 'eval_every_steps': args.eval_every,
        'load_average_range': common.load_since(loads), 'variants': variants,
        'keras_best': keras, 'baseline_commit': args.baseline_commit,
        'same_repeat': {'estimator/' + keras: common.same_repeat_ratio(
            runs['estimator'], runs[keras])},
        'ratios': {'estimator/' + keras: ratio('estimator', keras),
                   'estimator/' + keras + ' per CPU-s': ratio('estimator', keras, 1),
                   'estimator/estimator_loop1': ratio('estimator', 'estimator_loop1'),
                   'estimator_inter2/estimator': ratio('estimator_inter2', 'estimator'),
                   'estimator_inter2/estimator per CPU-s':
                       ratio('estimator_inter2', 'estimator', 1)}}
    if args.baseline_dir:
        results['ratios'].update({
            'estimator/baseline': ratio('estimator', 'baseline'),
            'estimator/baseline per CPU-s': ratio('estimator', 'baseline', 1)})
    rows = []
    for name, s in variants.items():
        seconds = s.get('time_to_auc', {}).get('seconds')
        rows.append([name, '%.0f' % s['median'], '%.0f' % s['per_cpu_second']['median'],
                     '%.1f' % seconds['median'] if seconds else '-'])
    common.print_table('Taxi wide-and-deep, batch 128: examples/sec and seconds to eval '
                       'AUC %.3f' % args.target_auc,
                       ['variant', 'median ex/s', 'per CPU-s', 's to AUC'], rows)
    for name, value in results['ratios'].items():
        print('  %s: %.2f' % (name, value))
    common.update_results('taxi', results)


if __name__ == '__main__':
    main()
