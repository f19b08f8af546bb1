"""Benchmark 4: overhead of a local 1-ps/2-worker cluster vs one process.

The cluster is started by the package's own launcher
(`python -m estimator_trainers.tools.launcher --parameter-server-count 1
--worker-count 1`: a chief and a worker that both train, one parameter
server), asynchronous (between-graph replication), each worker with half the
single process's batch, so the global batch per round of updates is the same.
Timing starts once both workers have passed their first progress interval and
covers `--window` global steps; each update consumes one worker batch.
The single process runs the same trainer with the full batch. All processes
share this machine's cores, so the cluster cannot be faster than one process;
what it costs on top is the overhead of variable transfers over gRPC and of
running several TensorFlow runtimes side by side.
"""
import argparse
import re
import tempfile

from benchmarks import common

_LINE = re.compile(r'^\[(chief|worker)-(\d+)\] .*INFO step (\d+)/\d+, .*examples/sec')


def cluster_throughput(trainer_cmd, job_dir, worker_batch, window):
    """Cluster examples/sec over `window` global steps once both workers run."""
    started = set()
    marks = []

    def on_line(elapsed, line, _):
        match = _LINE.match(line)
        if not match:
            return False
        task, step = '%s-%s' % match.group(1, 2), int(match.group(3))
        if len(started) == 2:
            marks.append((step, elapsed))
        started.add(task)
        return len(marks) > 1 and marks[-1][0] - marks[0][0] >= window

    cmd = common.python_module(
        'estimator_trainers.tools.launcher', '--job-dir', job_dir,
        '--parameter-server-count', 1, '--worker-count', 1, '--', *trainer_cmd)
    output = common.stream_lines(cmd, on_line)
    if len(marks) < 2:
        raise RuntimeError('cluster gave no steady progress:\n' + output[-4000:])
    (first_step, first_time), (step, now) = marks[0], marks[-1]
    return (step - first_step) * worker_batch / (now - first_time)


def _trainers(cifar_data_dir, taxi_train_files, taxi_eval_files):
    """name: (argv without job-dir/batch/steps/logging, batch flag, batch, interval)."""
    return {
        'cifar10 ResNet-20': (
            ['cifar10_estimator.cifar10_main', '--data-dir', cifar_data_dir,
             '--num-layers', 20, '--eval-steps', 1], '--train-batch-size', 128, 20),
        'taxi': (
            ['taxi_estimator.task', '--train-files', *taxi_train_files,
             '--eval-files', *taxi_eval_files], '--batch-size', 128, 200),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--cifar-data-dir', required=True)
    parser.add_argument('--taxi-train-files', nargs='+', required=True)
    parser.add_argument('--taxi-eval-files', nargs='+', required=True)
    parser.add_argument('--repeats', type=int, default=2)
    parser.add_argument('--intervals', type=int, default=4,
                        help='Progress intervals (global steps) in each window.')
    args = parser.parse_args(argv)
    common.quiet_tensorflow()
    trainers = _trainers(args.cifar_data_dir, args.taxi_train_files,
                         args.taxi_eval_files)
    runs = {(name, kind): [] for name in trainers for kind in ('single', 'cluster')}
    for repeat in range(args.repeats):
        for name, (argv_, batch_flag, batch, interval) in trainers.items():
            kinds = ('single', 'cluster') if repeat % 2 == 0 else ('cluster', 'single')
            for kind in kinds:
                with tempfile.TemporaryDirectory() as job_dir:
                    if kind == 'single':
                        value = common.progress_throughput(
                            common.python_module(
                                *argv_, '--job-dir', job_dir, batch_flag, batch,
                                '--train-steps', interval * (args.intervals + 3),
                                '--log-step-count-steps', interval),
                            batch_size=batch, intervals=args.intervals)
                        value = value['examples_per_sec']
                    else:
                        trainer_cmd = common.python_module(
                            *argv_, '--job-dir', job_dir, batch_flag, batch // 2,
                            '--train-steps', interval * 1000,
                            '--log-step-count-steps', interval)
                        value = cluster_throughput(trainer_cmd, job_dir, batch // 2,
                                                   interval * args.intervals)
                runs[name, kind].append(value)
                print('%-18s %-7s %9.1f examples/sec' % (name, kind, value), flush=True)
    results = {'machine': common.machine_info(), 'cluster': '1 ps, chief + 1 worker, '
               'async, each worker half the single batch', 'trainers': {}}
    rows = []
    for name, (_, _, batch, _) in trainers.items():
        single = common.summarize(runs[name, 'single'])
        cluster = common.summarize(runs[name, 'cluster'])
        per_worker = cluster['median'] / 2
        results['trainers'][name] = {
            'single_process': single, 'cluster_total': cluster,
            'cluster_per_worker': per_worker, 'global_batch': batch,
            'cluster_over_single': cluster['median'] / single['median']}
        rows.append([name, '%.0f' % single['median'], '%.0f' % cluster['median'],
                     '%.0f' % per_worker, '%.2f' % (cluster['median'] / single['median'])])
    common.print_table(
        'Cluster overhead: examples/sec, one process (batch B) vs 1 ps + 2 workers '
        '(batch B/2 each)',
        ['trainer', 'one process', 'cluster total', 'per worker', 'cluster/single'],
        rows)
    common.update_results('cluster', results)


if __name__ == '__main__':
    main()
