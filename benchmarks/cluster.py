"""Benchmark 4: a local 1-ps/2-worker cluster against one process, per CPU-second.

The cluster is started by the package's own launcher
(`python -m estimator_trainers.tools.launcher --parameter-server-count 1
--worker-count 1`: a chief and a worker that both train, one parameter
server), asynchronous (between-graph replication), each worker with half the
single process's batch, so the global batch per round of updates is the same.
Timing starts once both workers have passed their first progress interval and
covers `--intervals` progress intervals of global steps; each update consumes
one worker batch. The single process runs the same trainer with the full
batch, measured on its own progress lines.

All tasks share this machine's cores, so the cluster cannot train faster
than one process in wall time; what can be judged here is its efficiency:
training examples per CPU-second of all its tasks (the launcher, the ps, the
chief and the worker, user and system time, over the same window) against
one process's examples per CPU-second. The CPU split per task and between
user and kernel time (loopback gRPC) says where the difference goes;
`docs/performance-model.md` turns it into per-step costs.
"""
import argparse
import re
import tempfile
import time
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

from benchmarks import common

_LINE = re.compile(r'^\[(chief|worker)-(\d+)\] .*INFO step (\d+)/\d+, .*examples/sec')
# A trainer of the benchmark: (its argv without job-dir, batch, steps and logging
# flags; its batch flag; the single process's batch; steps per progress interval).
TrainerSpec = Tuple[List[str], str, int, int]


def cluster_throughput(trainer_cmd: Sequence[str], job_dir: str, worker_batch: int,
                       intervals: int, interval: int) -> Dict[str, Any]:
    """Cluster examples/sec and examples per CPU-second of all its tasks over
    `intervals` * `interval` global steps once both workers run; also the
    CPU seconds per task (user, system) over that window."""
    started: Set[str] = set()
    marks: List[Tuple[int, float, Dict[str, List[float]]]] = []
    window: List[int] = []

    def on_line(elapsed: float, line: str, pid: int) -> bool:
        match = _LINE.match(line)
        if not match:
            return False
        task, step = '%s-%s' % match.group(1, 2), int(match.group(3))
        if len(started) == 2:
            if not marks:
                common.sample_load(force=True)
                window.append(common.load_mark() - 1)
            marks.append((step, elapsed, common.tree_cpu_seconds(pid)))
        started.add(task)
        return len(marks) > 1 and marks[-1][0] - marks[0][0] >= intervals * interval

    cmd = common.python_module(
        'estimator_trainers.tools.launcher', '--job-dir', job_dir,
        '--parameter-server-count', 1, '--worker-count', 1, '--', *trainer_cmd)
    output = common.stream_lines(cmd, on_line, timeout=1200)
    if len(marks) < 2:
        raise RuntimeError('cluster gave no steady progress:\n' + output[-4000:])
    (first_step, first_time, first_cpu), (step, now, cpu) = marks[0], marks[-1]
    examples = (step - first_step) * worker_batch
    tasks = {name: [cpu[name][0] - first_cpu.get(name, [0, 0])[0],
                    cpu[name][1] - first_cpu.get(name, [0, 0])[1]] for name in cpu}
    total = sum(user + system for user, system in tasks.values())
    return {'examples_per_sec': examples / (now - first_time),
            'examples_per_cpu_sec': examples / total, 'window_secs': now - first_time,
            'global_steps': step - first_step, 'task_cpu_seconds': tasks,
            'load': common.load_since(window[0])}


def _trainers(cifar_data_dir: str, taxi_train_files: Sequence[str],
              taxi_eval_files: Sequence[str]) -> Dict[str, TrainerSpec]:
    """name: (argv without job-dir/batch/steps/logging, batch flag, batch, interval)."""
    cifar = ['cifar10_estimator.cifar10_main', '--data-dir', cifar_data_dir,
             '--eval-steps', '1']
    taxi = ['taxi_estimator.task', '--train-files', *taxi_train_files,
            '--eval-files', *taxi_eval_files]
    return {
        'cifar10 ResNet-44': (cifar + ['--num-layers', '44'], '--train-batch-size', 128, 8),
        'cifar10 ResNet-20': (cifar + ['--num-layers', '20'], '--train-batch-size', 128, 16),
        'taxi': (taxi, '--batch-size', 128, 200),
        'taxi batch 1024': (taxi, '--batch-size', 1024, 50),
    }


def _summaries(single: Sequence[Dict[str, Any]], cluster: Sequence[Dict[str, Any]],
               batch: int) -> Dict[str, Any]:
    """The table entry of one trainer from its single-process and cluster runs."""
    task_names = sorted({name for run in cluster for name in run['task_cpu_seconds']})
    per_task = {}
    for name in task_names:
        runs = [run['task_cpu_seconds'].get(name, [0.0, 0.0]) for run in cluster]
        per_task[name] = {
            'cpu_share': common.summarize(
                [(user + system) / sum(sum(v) for v in run['task_cpu_seconds'].values())
                 for (user, system), run in zip(runs, cluster)])['median'],
            'system_share': common.summarize(
                [system / max(user + system, 1e-9) for user, system in runs])['median']}
    single_cpu = common.summarize([r['examples_per_cpu_sec'] for r in single])
    cluster_cpu = common.summarize([r['examples_per_cpu_sec'] for r in cluster])
    single_wall = common.summarize([r['examples_per_sec'] for r in single])
    cluster_wall = common.summarize([r['examples_per_sec'] for r in cluster])
    return {'single_process': dict(single_wall, per_cpu_second=single_cpu),
            'cluster_total': dict(cluster_wall, per_cpu_second=cluster_cpu),
            'cluster_per_worker': cluster_wall['median'] / 2, 'global_batch': batch,
            'cluster_over_single': cluster_wall['median'] / single_wall['median'],
            'efficiency_per_cpu_second': cluster_cpu['median'] / single_cpu['median'],
            'cluster_cpu_seconds_per_global_step': common.summarize(
                [sum(sum(v) for v in r['task_cpu_seconds'].values()) / r['global_steps']
                 for r in cluster])['median'],
            'single_cpu_seconds_per_step': batch / single_cpu['median'],
            'tasks': per_task}


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--cifar-data-dir', required=True)
    parser.add_argument('--taxi-train-files', nargs='+', required=True)
    parser.add_argument('--taxi-eval-files', nargs='+', required=True)
    parser.add_argument('--repeats', type=int, default=2)
    parser.add_argument('--intervals', type=int, default=4,
                        help='Progress intervals (global steps) in each window.')
    parser.add_argument('--trainers',
                        default='cifar10 ResNet-44,cifar10 ResNet-20,taxi,taxi batch 1024',
                        help='Comma-separated trainers to run (four points of different '
                             'per-step compute, tensors and bytes, for '
                             '`benchmarks.cost_model`).')
    args = parser.parse_args(argv)
    common.quiet_tensorflow()
    trainers = _trainers(args.cifar_data_dir, args.taxi_train_files,
                         args.taxi_eval_files)
    trainers = {name: trainers[name] for name in args.trainers.split(',')}
    runs: Dict[Tuple[str, str], List[Dict[str, Any]]] = {
        (name, kind): [] for name in trainers for kind in ('single', 'cluster')}
    loads = common.load_mark()
    started = time.time()
    for repeat in range(args.repeats):
        for name, (argv_, batch_flag, batch, interval) in trainers.items():
            kinds = ('single', 'cluster') if repeat % 2 == 0 else ('cluster', 'single')
            for kind in kinds:
                with tempfile.TemporaryDirectory() as job_dir:
                    if kind == 'single':
                        value = common.progress_throughput(
                            common.python_module(
                                *argv_, '--job-dir', job_dir, batch_flag, batch,
                                *common.window_flags(interval, args.intervals)),
                            batch_size=batch, intervals=args.intervals)
                    else:
                        steps = interval * 1000
                        value = cluster_throughput(
                            common.python_module(
                                *argv_, '--job-dir', job_dir, batch_flag, batch // 2,
                                '--train-steps', steps, '--checkpoint-num-steps', steps,
                                '--log-step-count-steps', interval),
                            job_dir, batch // 2, args.intervals, interval)
                runs[name, kind].append(value)
                print('%-18s %-7s %9.1f examples/sec, %9.1f per CPU-second (load %.1f)'
                      % (name, kind, value['examples_per_sec'],
                         value['examples_per_cpu_sec'], value['load'][1]), flush=True)
    results: Dict[str, Any] = {
        'machine': common.machine_info(),
        'cluster': '1 ps, chief + 1 worker, async, each worker half the single batch',
        'load_average_range': common.load_since(loads),
        'seconds': round(time.time() - started), 'trainers': {}}
    rows = []
    for name in trainers:
        summary = _summaries(runs[name, 'single'], runs[name, 'cluster'],
                             trainers[name][2])
        results['trainers'][name] = summary
        rows.append([name, '%.0f' % summary['single_process']['median'],
                     '%.0f' % summary['cluster_total']['median'],
                     '%.0f' % summary['single_process']['per_cpu_second']['median'],
                     '%.0f' % summary['cluster_total']['per_cpu_second']['median'],
                     '%.2f' % summary['efficiency_per_cpu_second']])
    common.finish('cluster', results,
                  'Cluster vs one process: examples/sec and examples per CPU-second (all tasks)',
                  ['trainer', 'one process', 'cluster', 'one process per CPU-s',
                   'cluster per CPU-s', 'efficiency'], rows)


if __name__ == '__main__':
    main()
