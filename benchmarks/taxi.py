"""Benchmark 3: the taxi trainer vs an equivalent Keras wide-and-deep model.

On the same CSVs (the data step's real trips), alternating order, repeated:
- examples/sec: steady state of `python -m taxi_estimator.task` (defaults,
  progress log every `--interval` steps) and of `keras_wide_deep` under
  `fit`, after the same number of warm-up steps; also the trainer with its
  input replaced by batches replayed from memory (`estimator_free_input`),
  which shows how much the real input pipeline slows training;
- time to a fixed eval AUC: wall seconds from process start until an
  evaluation reaches `--target-auc`, both evaluating the whole eval file every
  `--eval-every` steps (the Estimator after a checkpoint, in a fresh graph
  that restores it, as `train_and_evaluate` does; Keras in memory).
"""
import argparse
import json
import re
import tempfile

from benchmarks import common

_EVAL = re.compile(r'Evaluation of step (\d+) .*\bauc = ([\d.]+)')


def _taxi_cli(train_files, eval_files, job_dir, *flags, levers=()):
    entry = ['taxi_estimator.task']
    if levers:
        entry = ['benchmarks.estimator_variant', '--trainer', 'taxi'] + [
            '--lever=' + lever for lever in levers] + ['--']
    return common.python_module(
        *entry, '--train-files', *train_files, '--eval-files', *eval_files,
        '--job-dir', job_dir, *flags)


def estimator_throughput(train_files, eval_files, interval, intervals, levers=()):
    with tempfile.TemporaryDirectory() as job_dir:
        # No checkpoint (nor the evaluation it triggers) inside the window.
        cmd = _taxi_cli(train_files, eval_files, job_dir,
                        '--train-steps', interval * (intervals + 3),
                        '--checkpoint-num-steps', interval * (intervals + 3),
                        '--log-step-count-steps', interval, levers=levers)
        return common.progress_throughput(cmd, batch_size=128, intervals=intervals)


def free_input_throughput(train_files, eval_files, interval, intervals):
    """The trainer with its input replaced by batches replayed from memory."""
    return estimator_throughput(train_files, eval_files, interval, intervals,
                                levers=['free_input'])


def keras_throughput(train_files, eval_files, interval, intervals):
    return common.json_result(common.python_module(
        'benchmarks.keras_wide_deep', '--mode', 'throughput',
        '--train-files', *train_files, '--eval-files', *eval_files,
        '--warmup-steps', interval, '--steps', interval * intervals))


def _time_to_auc(cmd, parse, target):
    """Runs `cmd` until `parse(line)` gives (step, auc >= target)."""
    reached = {}

    def on_line(elapsed, line, _):
        found = parse(line)
        if found and found[1] >= target:
            reached.update(seconds=elapsed, step=found[0], auc=found[1])
            return True
        return False
    common.stream_lines(cmd, on_line)
    return reached or {'seconds': None, 'step': None, 'auc': None}


def estimator_time_to_auc(train_files, eval_files, target, every, max_steps):
    def parse(line):
        match = _EVAL.search(line)
        return (int(match.group(1)), float(match.group(2))) if match else None
    with tempfile.TemporaryDirectory() as job_dir:
        cmd = _taxi_cli(train_files, eval_files, job_dir, '--train-steps', max_steps,
                        '--checkpoint-num-steps', every, '--eval-frequency-secs', 0)
        return _time_to_auc(cmd, parse, target)


def keras_time_to_auc(train_files, eval_files, target, every, max_steps):
    def parse(line):
        if not line.startswith('{'):
            return None
        value = json.loads(line)
        return value['step'], value['auc']
    cmd = common.python_module(
        'benchmarks.keras_wide_deep', '--mode', 'auc', '--train-files', *train_files,
        '--eval-files', *eval_files, '--target', target, '--eval-every', every,
        '--max-steps', max_steps)
    return _time_to_auc(cmd, parse, target)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--train-files', nargs='+', required=True)
    parser.add_argument('--eval-files', nargs='+', required=True)
    parser.add_argument('--repeats', type=int, default=3)
    parser.add_argument('--interval', type=int, default=300)
    parser.add_argument('--intervals', type=int, default=3)
    parser.add_argument('--target-auc', type=float, default=0.943)
    parser.add_argument('--eval-every', type=int, default=50)
    parser.add_argument('--max-steps', type=int, default=2000)
    args = parser.parse_args(argv)
    common.quiet_tensorflow()
    files = (args.train_files, args.eval_files)
    throughputs = {'estimator': estimator_throughput, 'keras': keras_throughput,
                   'estimator_free_input': free_input_throughput}
    throughput = {name: [] for name in throughputs}
    to_auc = {'estimator': [], 'keras': []}
    loads = []
    for repeat in range(args.repeats):
        order = list(throughputs) if repeat % 2 == 0 else list(throughputs)[::-1]
        for name in order:
            loads.append(common.load_average())
            throughput[name].append(throughputs[name](*files, args.interval,
                                                      args.intervals))
            print('taxi %-20s %8.0f examples/sec' % (
                name, throughput[name][-1]['examples_per_sec']), flush=True)
        for name in [n for n in order if n in to_auc]:
            run = estimator_time_to_auc if name == 'estimator' else keras_time_to_auc
            to_auc[name].append(run(*files, args.target_auc, args.eval_every,
                                    args.max_steps))
            print('taxi %-9s AUC %s after %s steps, %s s' % (
                name, to_auc[name][-1]['auc'], to_auc[name][-1]['step'],
                to_auc[name][-1]['seconds']), flush=True)
    results = {'machine': common.machine_info(), 'batch_size': 128,
               'target_auc': args.target_auc, 'eval_every_steps': args.eval_every,
               'load_average_range': [min(loads), max(loads)], 'variants': {}}
    rows = []
    for name in throughputs:
        summary = common.summarize([r['examples_per_sec'] for r in throughput[name]])
        summary['per_cpu_second'] = common.summarize(
            [r['examples_per_cpu_sec'] for r in throughput[name]])
        if name not in to_auc:
            results['variants'][name] = summary
            rows.append([name, '%.0f' % summary['median'], '%.0f' % summary['min'],
                         '%.0f' % summary['max'],
                         '%.0f' % summary['per_cpu_second']['median'], '-', '-'])
            continue
        reached = [r for r in to_auc[name] if r['seconds'] is not None]
        summary['time_to_auc'] = {
            'reached': '%d of %d runs' % (len(reached), len(to_auc[name])),
            'runs': to_auc[name]}
        if reached:
            summary['time_to_auc'].update(
                seconds=common.summarize([r['seconds'] for r in reached]),
                steps=common.summarize([r['step'] for r in reached]))
        results['variants'][name] = summary
        seconds = summary['time_to_auc'].get('seconds')
        rows.append([name, '%.0f' % summary['median'], '%.0f' % summary['min'],
                     '%.0f' % summary['max'],
                     '%.0f' % summary['per_cpu_second']['median'],
                     '%.1f (%.1f-%.1f)' % (seconds['median'], seconds['min'],
                                           seconds['max']) if seconds else 'not reached',
                     '%.0f' % summary['time_to_auc']['steps']['median'] if seconds
                     else '-'])
    ratio = (results['variants']['estimator']['median']
             / results['variants']['keras']['median'])
    results['estimator_over_keras'] = ratio
    results['estimator_over_keras_per_cpu_second'] = (
        results['variants']['estimator']['per_cpu_second']['median']
        / results['variants']['keras']['per_cpu_second']['median'])
    common.print_table(
        'Taxi wide-and-deep, batch 128: examples/sec and seconds to eval AUC %.3f'
        % args.target_auc,
        ['variant', 'median ex/s', 'min', 'max', 'per CPU-s', 's to AUC',
         'steps to AUC'], rows)
    print('  estimator / keras examples/sec: %.2f' % ratio)
    common.update_results('taxi', results)


if __name__ == '__main__':
    main()
