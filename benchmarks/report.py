"""Renders RESULTS.md from results.json: targets, one table per benchmark.

    python -m benchmarks.report [--results R.json] [--out RESULTS.md]

The hand-written analysis between the `notes` markers of an existing output
file is kept, so regenerating the tables never loses it.
"""
import argparse
import json
import os
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from benchmarks import cold_start as cold_start_lib
from benchmarks import backtest as backtest_lib
from benchmarks import common
from benchmarks import cost_model
from benchmarks import levers as levers_lib
from benchmarks import resnet_throughput as resnet_lib

NOTES_BEGIN = '<!-- notes: kept when the tables are regenerated -->'
NOTES_END = '<!-- end of notes -->'
# A target's verdict: (met: True, False or None for not judged, what it was judged on).
Verdict = Tuple[Optional[bool], str]


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ['| ' + ' | '.join(header) + ' |', '|' + '---|' * len(header)]
    lines += ['| ' + ' | '.join(str(c) for c in row) + ' |' for row in rows]
    return '\n'.join(lines)


def _spread(summary: Dict[str, Any], fmt: str = '%.0f') -> str:
    return (fmt + ' (' + fmt + '–' + fmt + ')') % (summary['median'], summary['min'],
                                                   summary['max'])


def _section(title: str, result: Optional[Dict[str, Any]], body: str,
             machine: Optional[Dict[str, Any]] = None) -> str:
    """A benchmark's section; one measured on another machine than the header's says so."""
    if not result:
        return '## %s\n\nNot measured in this run.\n' % title
    own = result.get('machine', {})
    elsewhere = ''
    if machine and own and (own.get('cpu'), own.get('cores')) != (machine.get('cpu'),
                                                                  machine.get('cores')):
        elsewhere = '; on another machine: %s, %s cores (%s)' % (
            own.get('cpu'), own.get('cores'), ', '.join(own.get('cpu_features', [])))
    return '## %s\n\n%s\n\nCommand: `%s` (finished %s; load average %s%s)\n' % (
        title, body, result['command'], result['finished'], _load(result), elsewhere)


def _load_stats(result: Dict[str, Any]) -> Tuple[float, float, float]:
    """(lowest, mean, highest) 1-minute load average while the benchmark measured.

    Results from before the mean was kept hold [lowest, highest]: the highest
    stands for the mean there, so an old figure is never judged quieter than
    it was.
    """
    values = result.get('load_average_range') or [result['machine']['load_average'][0]]
    if len(values) == 3:
        return tuple(values)
    return values[0], values[-1], values[-1]


def _load(result: Dict[str, Any]) -> str:
    low, mean, high = _load_stats(result)
    if low == high:
        return '%.1f' % low
    return '%.1f–%.1f (mean %.1f)' % (low, high, mean)


def judge(target: float, *, wall: Optional[float] = None, cpu: Optional[float] = None,
          load: Optional[float] = None, cores: Optional[int] = None,
          at_most: bool = False) -> Verdict:
    """The verdict on a target: (met: True, False or None for not judged, basis).

    A comparison measured while the load average exceeded the core count is
    judged on its per-CPU-second figure alone (others' processes took cores
    from the measured ones, so wall-clock rates say little); with no such
    figure it is not judged. Otherwise every figure given must meet the
    target, wall-clock and per CPU-second alike. `at_most`: the figures must
    not exceed `target` (times, memory) instead of reaching it.
    """
    def meets(value: float) -> bool:
        return value <= target if at_most else value >= target
    if load is not None and cores and load > cores:
        under_load = 'load %.1f > %d cores' % (load, cores)
        if cpu is None:
            return None, 'not judged: %s, wall-clock figures only' % under_load
        return meets(cpu), 'per CPU-second (%s: wall-clock not judged)' % under_load
    figures = {'wall-clock': wall, 'per CPU-second': cpu}
    given = {name: value for name, value in figures.items() if value is not None}
    return (all(meets(value) for value in given.values()), ' and '.join(given))


def _row(target: str, measured: str, verdict: Verdict) -> List[str]:
    met, basis = verdict
    return [target, measured, basis, {True: 'yes', False: '**no**',
                                      None: '**not judged**'}[met]]


def _ratio_text(wall: float, cpu: Optional[float], suffix: str = '') -> str:
    return '%.2f×%s (per CPU-second %s)' % (
        wall, suffix, '%.2f×' % cpu if cpu is not None else '–')


def _has_interval(ratio: Dict[str, Any]) -> bool:
    """Whether a ratio was repeated often enough for an interval worth the name."""
    return len(ratio['runs']) >= 3


def _interval_text(ratio: Dict[str, Any], target: float, per_cpu_only: bool) -> str:
    """What the repeats can tell of a ratio: the interval for its median (of
    the per-CPU-second ratios when only those are judged) and whether it
    still holds the target, i.e. the repeats cannot put a sign on the gap."""
    if not _has_interval(ratio):
        return ''
    low, high = (ratio['per_cpu_second_per_repeat']['interval'] if per_cpu_only
                 else ratio['interval'])
    return '; %d repeats, %.0f%% interval %s%.2f–%.2f%s' % (
        len(ratio['runs']), 100 * ratio['interval_coverage'],
        'per CPU-second ' if per_cpu_only else '', low, high,
        ', which holds %.1f×: not resolved' % target if low < target <= high else '')


def targets(results: Dict[str, Dict[str, Any]]) -> str:
    machine: Dict[str, Any] = next((r['machine'] for r in results.values() if 'machine' in r),
                                   {})
    cores = machine.get('cores')

    def load_of(result: Dict[str, Any]) -> float:
        return _load_stats(result)[1]

    rows: List[List[str]] = []
    resnet_result = results.get('resnet_throughput', {})
    resnet44 = resnet_result.get('depths', {}).get('44')
    if resnet44:
        load = load_of(resnet44)
        for key, target, what in resnet_lib.TARGETS:
            ratio = resnet44['ratios'].get(key)
            if ratio:
                # Both figures: the median of the same repeats' ratios.
                cpu = ratio['per_cpu_second_per_repeat']['median']
                rows.append(_row(
                    'ResNet-44 %s ≥ %.1f× (same run)' % (what, target),
                    _ratio_text(ratio['median'], cpu)
                    + _interval_text(ratio, target, bool(cores and load > cores)),
                    judge(target, wall=ratio['median'], cpu=cpu, load=load, cores=cores)))
        bf16 = resnet44['variants'].get(resnet_lib.bf16_variant(resnet_result))
        if bf16 and 'fraction_of_peak' in bf16:
            cpu = bf16.get('fraction_of_peak_per_cpu_second')
            rows.append(_row(
                'Moonshot: bfloat16 ResNet-44 training ≥ 35% of the measured bfloat16 peak',
                '%.0f%% (per CPU-second %s)' % (
                    100 * bf16['fraction_of_peak'], '%.0f%%' % (100 * cpu) if cpu else '–'),
                judge(0.35, wall=bf16['fraction_of_peak'], cpu=cpu, load=load,
                      cores=cores)))
    pipeline_result = results.get('input_pipeline', {})
    for model in ('cifar10', 'taxi'):
        default = pipeline_result.get('pipelines', {}).get(model + '/default', {})
        if 'times_training' in default:
            cpu = default.get('times_training_per_cpu_second')
            rows.append(_row(
                '%s input pipeline ≥ 10× what training consumes' % model,
                _ratio_text(default['times_training'], cpu),
                judge(10, wall=default['times_training'], cpu=cpu,
                      load=load_of(pipeline_result), cores=cores)))
    taxi = results.get('taxi')
    if taxi and 'ratios' in taxi:
        ratios, keras, load = taxi['ratios'], taxi['keras_best'], load_of(taxi)
        if 'estimator/baseline' in ratios:
            rows.append(_row(
                'Taxi examples/sec ≥ 3× today\'s default (the trainer before #22, same run)',
                _ratio_text(ratios['estimator/baseline'],
                            ratios['estimator/baseline per CPU-s']),
                judge(3, wall=ratios['estimator/baseline'],
                      cpu=ratios['estimator/baseline per CPU-s'], load=load, cores=cores)))
        # As for ResNet: the median of the same repeats' ratios where recorded.
        same_repeat = taxi.get('same_repeat', {}).get('estimator/' + keras)
        wall, cpu = ratios['estimator/' + keras], ratios['estimator/%s per CPU-s' % keras]
        if same_repeat:
            wall, cpu = same_repeat['median'], same_repeat['per_cpu_second_per_repeat']['median']
        rows.append(_row(
            'Taxi examples/sec ≥ 1.0× Keras with its best steps_per_execution',
            _ratio_text(wall, cpu, ' ' + keras)
            + (_interval_text(same_repeat, 1.0, bool(cores and load > cores))
               if same_repeat else ''),
            judge(1.0, wall=wall, cpu=cpu, load=load, cores=cores)))
        mine = taxi['variants']['estimator'].get('time_to_auc', {}).get('seconds')
        theirs = taxi['variants'][keras].get('time_to_auc', {}).get('seconds')
        if mine and theirs:
            rows.append(_row(
                'Taxi time to eval AUC %.2f ≤ Keras\'' % taxi['target_auc'],
                '%.1f s vs %.1f s' % (mine['median'], theirs['median']),
                judge(1.0, wall=mine['median'] / theirs['median'], load=load,
                      cores=cores, at_most=True)))
    size_result = results.get('data_size', {})
    size = size_result.get('ratios', {})
    for name, value in sorted(size.items()):
        if ' / memory rows/sec' in name:
            cpu = size.get(name.replace('rows/sec', 'per CPU-s'))
            rows.append(_row('Streaming (%s) ≥ 0.9× the in-memory path' % name.split(' ')[0],
                             _ratio_text(value, cpu),
                             judge(0.9, wall=value, cpu=cpu, load=load_of(size_result),
                                   cores=cores)))
        elif 'peak RSS' in name:
            rows.append(_row('Peak RSS (%s) within 10%% as the rows grow' % name.split(' ')[0],
                             '%s: %.2f×' % (name.split('RSS ')[1], value),
                             (value <= 1.1, 'memory (load does not change it)')))
    loop_result = results.get('steps_per_loop', {})
    loop = loop_result.get('trainers', {}).get('cifar10 ResNet-20')
    if loop and 'baseline' in loop:
        wall = loop['1']['median'] / loop['baseline']['median']
        cpu = (loop['1']['per_cpu_second']['median']
               / loop['baseline']['per_cpu_second']['median'])
        rows.append(_row('CIFAR-10 ResNet speed unchanged or better (vs before #22, same run)',
                         _ratio_text(wall, cpu),
                         judge(0.95, wall=wall, cpu=cpu, load=load_of(loop_result),
                               cores=cores)))
    share_result = results.get('eval_share', {})
    for name, runs in share_result.get('runs', {}).items():
        share = common.summarize([r['eval_share'] for r in runs])['median']
        points = min(r['evaluations'] for r in runs)
        met, basis = judge(0.15, wall=share, load=load_of(share_result), cores=cores,
                           at_most=True)
        rows.append(_row(
            '%s default run: ≥ 5 evaluations, ≤ 15%% of wall time evaluating' % name,
            '%d evaluations, %.1f%%' % (points, 100 * share),
            (met and points >= 5 if met is not None else None, basis)))
    cold_result = results.get('cold_start', {})
    for name, summary in cold_result.get('trainers', {}).items():
        rows.append(_row('%s: cold start to first step ≤ 15 s' % name,
                         '%.1f s' % summary['first_step']['median'],
                         judge(15, wall=summary['first_step']['median'],
                               load=load_of(cold_result), cores=cores, at_most=True)))
    return _table(['target', 'measured (median)', 'judged on', 'met'], rows)


def resnet(result: Dict[str, Any]) -> str:
    peaks = result['peak_flops']
    per_cpu = result.get('peak_flops_per_cpu_second')
    features = result['machine'].get('cpu_features', [])
    bf16_unit = ('AMX' if 'amx_bf16' in features else
                 'AVX512_BF16' if 'avx512_bf16' in features else 'no native bfloat16')
    parts = ['Batch %d, each run\'s fastest interval of %d steps in a steady-state window '
             'of %d steps after %d warm-up steps (noise only slows a run, and stretches of '
             'seconds here run ~15%% slower in wall and CPU time alike: '
             '`common.fastest_interval`; the trainer '
             'saves and evaluates no checkpoint in them); the trainer\'s default compute '
             'type here is **%s**. Peak: best 4096×4096 matmul, %.0f GFLOP/s float32 and '
             '%.0f GFLOP/s bfloat16 (%s)%s. "%% of peak" = median examples/sec × '
             'training FLOPs per example (TF profiler: convolutions and dense layer, '
             'forward + backward) / the peak of the variant\'s compute type; "per CPU-s" '
             'the same from examples and peak FLOPs per CPU-second. Per CPU-second: '
             'examples per second of CPU time the process used over the same interval '
             '(robust to other load).'
             % (result['batch_size'], result['interval'],
                result['interval'] * result['intervals'], result['interval'],
                result['estimator_default_type'],
                peaks['float32'] / 1e9, peaks['bfloat16'] / 1e9, bf16_unit,
                '; per CPU-second %.0f and %.0f GFLOP' % (
                    per_cpu['float32'] / 1e9, per_cpu['bfloat16'] / 1e9) if per_cpu else '')]
    for depth, values in sorted(result['depths'].items(), key=lambda kv: int(kv[0])):
        parts.append('### ResNet-%s (%.0f MFLOP forward, %.0f MFLOP training per '
                     'example; load %s)' % (
                         depth, values['forward_flops'] / 1e6,
                         values['training_flops'] / 1e6, _load(values)))
        parts.append(_table(
            ['variant', 'compute', 'examples/sec median (min–max)', 'runs',
             '% of peak', 'per CPU-second', '% of peak per CPU-s'],
            [[name, s['compute_type'], _spread(s, '%.1f'), len(s['runs']),
              '%.0f%%' % (100 * s['fraction_of_peak']),
              '%.1f' % s['per_cpu_second']['median'],
              '%.0f%%' % (100 * s['fraction_of_peak_per_cpu_second'])
              if 'fraction_of_peak_per_cpu_second' in s else '–']
             for name, s in values['variants'].items()]))
        parts.append(_table(
            ['ratio', 'meaning', 'examples/sec, same repeat: median (min–max)',
             'interval for the median', 'per CPU-second (medians)',
             'per CPU-second, same repeat'],
            [[name, r['meaning'], _spread(r, '%.2f'),
              '%.2f–%.2f (%.0f%%)' % (*r['interval'], 100 * r['interval_coverage'])
              if _has_interval(r) else '–',
              '%.2f' % r['per_cpu_second'], _spread(r['per_cpu_second_per_repeat'], '%.2f')]
             for name, r in values['ratios'].items()]))
    return '\n\n'.join(parts)


def input_pipeline(result: Dict[str, Any]) -> str:
    consumed = result['consumed_by_training']
    pipelines = sorted(result['pipelines'].items(),
                       key=lambda kv: (kv[0].split('/')[0], '/default' not in kv[0]))
    rows = [[name, _spread(s), '%.0f' % s['per_cpu_second']['median'],
             '%.2f×' % s['times_training'] if 'times_training' in s else 'n/a',
             '%.2f×' % s['times_training_per_cpu_second']
             if 'times_training_per_cpu_second' in s else 'n/a']
            for name, s in pipelines]
    text = _table(['pipeline', 'examples/sec median (min–max)', 'per CPU-second',
                   '× training', '× training per CPU-s'], rows)
    for model, what in consumed.items():
        text += '\n\n%s training consumes %.0f examples/sec%s (%s).' % (
            model, what['examples_per_sec'],
            ', %.0f per CPU-second' % what['examples_per_cpu_sec']
            if 'examples_per_cpu_sec' in what else '', what['what'])
    return text


def taxi(result: Dict[str, Any]) -> str:
    if 'ratios' not in result:  # the format before issue #22
        return 'Measured in an older format; rerun `bash benchmarks/run.sh taxi`.'
    rows = []
    for name, s in result['variants'].items():
        row = [name, _spread(s), '%.0f' % s['per_cpu_second']['median']]
        auc = s.get('time_to_auc')
        if not auc:
            rows.append(row + ['–', '–', '–'])
            continue
        rows.append(row + [_spread(auc['seconds'], '%.1f')
                           if 'seconds' in auc else 'not reached',
                           _spread(auc['steps']) if 'steps' in auc else '–',
                           auc['reached']])
    baseline = (' `baseline` is the trainer at commit %s (before issue #22), run from its '
                'own checkout.' % result['baseline_commit']
                if result.get('baseline_commit') else '')
    counted = ('Each run counts its fastest interval of %d steps of %d after a warm-up '
               'interval, on every side (`common.fastest_interval`, as benchmark 1 '
               'counts ResNet). '
               % (result['interval_steps'], result['intervals'])
               if 'interval_steps' in result else '')
    return (_table(['variant', 'examples/sec median (min–max)', 'per CPU-second',
                    's to eval AUC %.3f' % result['target_auc'], 'steps to AUC',
                    'reached'], rows)
            + '\n\n' + counted
            + '`estimator`: the trainer\'s defaults (`--steps-per-loop` included; '
              '`_loop1`: one step per `Session.run`; `_inter2`: two inter-op threads); '
              '`keras_speN`: Keras `fit` with `steps_per_execution` N (`_1thread`: both '
              'of its thread pools at one thread, as the trainer\'s defaults have them); '
              'the fastest of them (%s; per CPU-second under load) is the peer.%s '
              'Evaluation of the whole eval file every %d steps on every side. Ratios '
              '(medians): %s.'
            % (result['keras_best'], baseline, result['eval_every_steps'],
               ', '.join('%s %.2f' % kv for kv in result['ratios'].items())))


def data_size(result: Dict[str, Any]) -> str:
    rows = []
    for size, by_variant in sorted(result['sizes'].items(), key=lambda kv: int(kv[0])):
        for variant, v in sorted(by_variant.items()):
            rows.append(['{:,}'.format(int(size)), variant, _spread(v['rows_per_sec']),
                         '%.0f' % v['rows_per_cpu_sec']['median'],
                         _spread(v['peak_rss_mb']), _spread(v['start_up_secs'], '%.1f')])
    data = ', '.join('%s rows: %.0f MB of CSV in %d files%s' % (
        '{:,}'.format(int(size)), d['csv_mb'], result['shards'],
        ', cache step %.0f s' % d['cache_step_secs'] if d.get('cache_step_secs') else '')
        for size, d in sorted(result['data'].items(), key=lambda kv: int(kv[0])))
    return ('Jittered rows drawn from the real trips (`benchmarks.taxi_bigdata`): %s. '
            '`csv`: the shards streamed; `cache`: their `taxi_estimator.cache` directory; '
            '`memory`: the shards held in memory (sizes under the in-memory limit); '
            '`csv_shared_pool`: the shards streamed with parsing on tf.data\'s shared '
            'thread pool, as before streamed CSV got threads of its own (side by side '
            'with `csv`). '
            'Start-up: seconds to the first progress line (checking every row, or reading '
            'the cache\'s record).\n\n' % data
            + _table(['rows', 'input', 'rows/sec median (min–max)', 'per CPU-second',
                      'peak RSS MB', 'start-up s'], rows)
            + '\n\nRatios: %s.' % ', '.join('%s %.2f' % kv
                                            for kv in sorted(result['ratios'].items())))


def _loop_order(n: str) -> Tuple[int, int]:
    """Steps per loop in numeric order, the `baseline` row last."""
    return (1, 0) if n == 'baseline' else (0, int(n))


def steps_per_loop(result: Dict[str, Any]) -> str:
    rows = [[name, n, _spread(s), '%.0f' % s['per_cpu_second']['median'],
             '%.2f' % s['vs_1'], '%.2f' % s['vs_1_per_cpu_second']]
            for name, by_n in result['trainers'].items()
            for n, s in sorted(by_n.items(), key=lambda kv: _loop_order(kv[0]))]
    return ('Each trainer\'s defaults at each `--steps-per-loop` (`baseline`: the trainer '
            'before issue #22, from its own checkout).\n\n'
            + _table(['trainer', 'steps per loop', 'examples/sec median (min–max)',
                      'per CPU-second', '× N=1', '× N=1 per CPU-s'], rows))


def eval_share(result: Dict[str, Any]) -> str:
    rows = [[name, _spread(common.summarize([r['wall_secs'] for r in runs]), '%.1f'),
             _spread(common.summarize([r['eval_secs'] for r in runs]), '%.1f'),
             '%.1f%%' % (100 * common.summarize([r['eval_share'] for r in runs])['median']),
             '%d' % min(r['evaluations'] for r in runs)]
            for name, runs in result['runs'].items()]
    return ('Each trainer\'s default local run (taxi: 10 epochs of the data step\'s trips; '
            'CIFAR-10: ResNet-44, %d steps), read from its closing summary block. '
            '"Evaluating" counts the time training waited for evaluation: every '
            'evaluation during training, the final one, and building the evaluation '
            'graph where training waited for it (a chief that evaluates while it trains '
            'builds it in a thread as training starts); each evaluation is a point of '
            'the evaluation curves.\n\n' % result['cifar_train_steps']
            + _table(['trainer', 'wall s median (min–max)', 'evaluating s',
                      'share of wall time', 'evaluations'], rows))


def cluster(result: Dict[str, Any], resnet_result: Optional[Dict[str, Any]] = None) -> str:
    if 'efficiency_per_cpu_second' not in next(iter(result['trainers'].values()), {}):
        return 'Measured in an older format; rerun `bash benchmarks/run.sh cluster`.'
    rows, shares = [], []
    for name, t in result['trainers'].items():
        rows.append([name, _spread(t['single_process']), _spread(t['cluster_total']),
                     '%.0f' % t['single_process']['per_cpu_second']['median'],
                     '%.0f' % t['cluster_total']['per_cpu_second']['median'],
                     '%.2f' % t['efficiency_per_cpu_second'],
                     '%.1f' % (1000 * t['single_cpu_seconds_per_step']),
                     '%.1f' % (1000 * t['cluster_cpu_seconds_per_global_step'])])
        shares.append('%s: %s' % (name, ', '.join(
            '%s %.0f%% (%.0f%% of it in the kernel)' % (
                task, 100 * v['cpu_share'], 100 * v['system_share'])
            for task, v in sorted(t['tasks'].items()))))
    setup: str = result['cluster']
    return (setup + '. Efficiency = the cluster\'s training examples per '
            'CPU-second of all its tasks / one process\'s; CPU-ms per step: one '
            'process per step of the full batch, the cluster per global step (one '
            'worker batch, half of it).\n\n'
            + _table(['trainer', 'one process examples/sec', 'cluster examples/sec',
                      'one process per CPU-second', 'cluster per CPU-second',
                      'efficiency', 'CPU-ms per step, one process',
                      'CPU-ms per global step, cluster'], rows)
            + '\n\nShare of the cluster\'s CPU time by task: ' + '; '.join(shares) + '.'
            + _cost_model(result, resnet_result or {}))


def _cost_model(result: Dict[str, Any], resnet_result: Dict[str, Any]) -> str:
    """The per-step cost model fitted to this table (`benchmarks.cost_model`)."""
    model = cost_model.summary({'cluster': result, 'resnet_throughput': resnet_result})
    if model is None:
        return ''
    return ('\n\nPer-step cost model (`python -m benchmarks.cost_model`, '
            'docs/performance-model.md): a global step costs b × (one process\'s CPU per '
            'example) + f + beta × bytes moved, all tasks together; fitted on relative '
            'error to %s: f = %.1f CPU-ms, beta = %.1f CPU-ms per MB. "From the others": '
            'each trainer predicted by a fit to the other rows (the check).\n\n%s\n\n'
            'Predicted for Vertex AI N1 shapes, N workers and one parameter server of the '
            'same type (float32 there, %.2f× the CPU per ResNet example of the default '
            'here; this machine\'s per-core speed; 200 µs round trips):\n\n%s' % (
                ', '.join(model['fitted_to']), 1e3 * model['f_secs'],
                1e9 * model['beta_secs_per_byte'],
                _table(cost_model.LOCAL_HEADER, model['local']), model['float32_scale'],
                _table(cost_model.CLOUD_HEADER, model['cloud'])))


def backtest(result: Dict[str, Any]) -> str:
    """Prediction against measurement (`benchmarks.backtest`)."""
    rows = []
    for name, run in result['runs'].items():
        rows.append([name, run['steps'], '%.1f' % run['predicted_training_secs'],
                     '%.1f' % run['measured_training_secs'],
                     '%+.0f%%' % (100 * (run['predicted_training_secs']
                                         / run['measured_training_secs'] - 1)),
                     '%.1f' % run['predicted_wall_secs'], '%.1f' % run['measured_wall_secs']])
    return ('One process trains each job first; its run record (CPU per example, CPUs '
            'kept busy, start-up, evaluation and checkpoints per step) predicts the local '
            'cluster of the shipped config\'s shape, every task sharing this machine\'s '
            'cores (`perf_model.local_cluster_rate`, f = %.1f CPU-ms and beta = %.1f CPU-ms '
            'per MB from %s); then the cluster runs through the launcher. Training time: '
            'first to last step of the chief\'s run record; wall: the chief\'s whole run. '
            'Target: within 30%% for the ResNet rows.\n\n%s\n\n%s' % (
                1e3 * result['f_secs'], 1e9 * result['beta_secs_per_byte'],
                result['fitted_to'], _table(backtest_lib.HEADER, rows),
                _backtest_verdict(result['runs'])))


def _backtest_verdict(runs: Dict[str, Any]) -> str:
    """The target judged on the training times, and the errors of the other rows and
    of the wall times stated (they are the estimate's, not hidden by the target)."""
    def error(run: Dict[str, Any], kind: str) -> float:
        return 100 * (float(run['predicted_%s_secs' % kind])
                      / float(run['measured_%s_secs' % kind]) - 1)
    resnet = [error(run, 'training') for name, run in runs.items() if name.startswith('ResNet')]
    worst = max((abs(e) for e in resnet), default=float('nan'))
    others = ', '.join('%s %+.0f%%' % (name.split(' (')[0], error(run, 'training'))
                       for name, run in runs.items() if not name.startswith('ResNet'))
    walls = ', '.join('%+.0f%%' % error(run, 'wall') for run in runs.values())
    return ('Training time, ResNet rows: at most %.0f%% off (target 30%%: %s). Other rows: '
            '%s. Wall time (start-up, the last evaluation and the export included), row by '
            'row: %s.' % (worst, 'met' if worst <= 30 else '**not met**', others or 'none',
                          walls))


def cold_start(result: Dict[str, Any]) -> str:
    milestones = [name for name, _, _ in cold_start_lib.MILESTONES]
    rows = [[name] + [_spread(summary[m], '%.1f') for m in milestones]
            + [_spread(summary['first_step_cpu'], '%.1f') if 'first_step_cpu' in summary
               else '–']
            for name, summary in result['trainers'].items()]
    return ('Seconds from spawning the process to each milestone, median (min–max): '
            + '; '.join('`%s`: %s' % (name, what)
                        for name, _, what in cold_start_lib.MILESTONES)
            + '; and the CPU seconds the process had used by its first step.\n\n'
            + _table(['trainer'] + milestones + ['CPU-s to first_step'], rows))


def install(result: Dict[str, Any]) -> str:
    rows = [[name] + [_spread(s[kind], '%.1f') if kind in s else '–'
                      for kind in ('cold', 'warm', 'wheelhouse')] + [s['cache_mb']]
            for name, s in result['installers'].items()]
    return ('`-r requirements.txt -c constraints.txt` into a fresh venv (Python %s; pip %s, '
            'uv %s, no configuration files), seconds median (min–max): cold = an empty cache of '
            'its own, everything from PyPI; warm = another fresh venv reusing that cache; '
            'local wheelhouse = pip from `pip download`ed files only (what a warm pip cache '
            'gives where, unlike here, the index sends caching headers). '
            '`scripts/setup-venv.sh` installs with `uv pip` where uv is present, else pip.'
            '\n\n' % (result['python'], result['pip'], result['uv'])
            + _table(['installer', 'cold cache', 'warm cache', 'local wheelhouse',
                      'cache MB after warm'], rows))


def levers(result: Dict[str, Any]) -> str:
    rows = []
    for name in [n for n in levers_lib.VARIANTS if n in result['variants']]:
        s = result['variants'][name]
        rows.append([name, s['what'], _spread(s, '%.1f'), s['baseline'] or '',
                     '%.2f' % s['vs_baseline'] if 'vs_baseline' in s else '',
                     '%.2f' % s['vs_baseline_per_cpu_second'] if 'vs_baseline' in s
                     else '',
                     {True: 'yes', False: '**no**'}.get(s.get('default_is_fastest'), '')])
    return ('ResNet-%d, batch %d; each variant changes one setting against its '
            'baseline (the trainer\'s default for that setting); each run counts its '
            'fastest interval.\n\n'
            % (result['num_layers'], result['batch_size'])
            + _table(['variant', 'change', 'examples/sec median (min–max)', 'baseline',
                      '× baseline', '× baseline per CPU-s', 'default is fastest'],
                     rows))


def determinism(result: Dict[str, Any]) -> str:
    rows = [[name, _spread(s['unseeded'], '%.1f'), _spread(s['seeded'], '%.1f'),
             '%.2f' % s['seeded_over_unseeded'],
             '%.2f' % s['seeded_over_unseeded_per_cpu_second']]
            for name, s in result['trainers'].items()]
    return ('Steady-state training throughput with `--random-seed 1` (op determinism, '
            'seeded input order: the same losses and metrics run after run) and without '
            '(CIFAR-10: ResNet-%d, batch 128; taxi: batch 128), alternating fresh '
            'processes.\n\n' % result['num_layers']
            + _table(['trainer', 'no seed: examples/sec median (min–max)',
                      '--random-seed', 'seeded / not', 'per CPU-second'], rows))


def roofline(result: Dict[str, Any]) -> str:
    peaks = result['peak_flops_per_cpu_second']
    parts = ['Each op kind of a ResNet-%d training step (batch %d) timed alone in a '
             '`tf.function` loop through the same oneDNN kernels, as CPU-seconds of the '
             'process: FLOPs and the bytes the op must read and write at the least give '
             'its arithmetic intensity; peaks per CPU-second: %.0f GFLOP float32, %.0f '
             'GFLOP bfloat16 (best 4096×4096 matmul), %.1f GB moved (a float32 add of '
             '64 MB tensors). "bound": below the ridge point (peak / bandwidth FLOP per '
             'byte) memory bounds an op, above it compute.' % (
                 result['num_layers'], result['batch_size'], peaks['float32'] / 1e9,
                 peaks['bfloat16'] / 1e9, result['bytes_per_cpu_second'] / 1e9)]
    for dtype, table in result['dtypes'].items():
        trained = table.get('training_cpu_seconds_per_step')
        rows = [[kind, row['instances'], '%.2f' % (row['flops'] / 1e9),
                 '%.0f' % (row['bytes'] / 1e6), '%.1f' % (1000 * row['cpu_seconds']),
                 '%.0f%%' % (100 * row['cpu_seconds'] / table['ops_cpu_seconds']),
                 '%.1f' % row['gflop_per_cpu_second'],
                 '%.0f%%' % (100 * row['fraction_of_peak']),
                 '%.0f%%' % (100 * row['fraction_of_bandwidth']),
                 '%.1f' % row['flops_per_byte'], row['bound']]
                for kind, row in sorted(table['kinds'].items(),
                                        key=lambda kv: -kv[1]['cpu_seconds'])]
        parts.append('### %s (ridge %.1f FLOP/byte)\n\n%s\n\nThe ops alone: %.0f CPU-ms '
                     'a step, %.0f%% of the %s peak over the step%s.' % (
                         dtype, table['ridge_flops_per_byte'], _table(
                             ['op', 'instances', 'GFLOP', 'MB moved', 'CPU-ms', 'share',
                              'GFLOP per CPU-s', '% of peak', '% of bandwidth',
                              'FLOP/byte', 'bound'], rows),
                         1000 * table['ops_cpu_seconds'],
                         100 * table['fraction_of_peak_if_only_ops'], dtype,
                         '; the trainer\'s step (benchmark 1) took %.0f CPU-ms, so %.0f%% of '
                         'it went between the ops (executor, threads, variable reads and '
                         'casts)' % (1000 * trained,
                                     100 * max(0.0, 1 - table['ops_cpu_seconds'] / trained))
                         if trained else ''))
    return '\n\n'.join(parts)


def render(results: Dict[str, Dict[str, Any]], notes: str) -> str:
    # The header's machine: the latest benchmark's (sections measured elsewhere say so).
    machine = max((r for r in results.values() if 'machine' in r),
                  key=lambda r: r.get('finished', ''), default={}).get('machine', {})
    sections: List[Tuple[str, str, Callable[[Dict[str, Any]], str]]] = [
        ('1. ResNet training throughput: cifar10_main vs Keras fit',
         'resnet_throughput', resnet),
        ('2. Input pipelines alone', 'input_pipeline', input_pipeline),
        ('3. Taxi trainer vs Keras wide-and-deep', 'taxi', taxi),
        ('4. Cluster efficiency per CPU-second', 'cluster',
         lambda result: cluster(result, results.get('resnet_throughput'))),
        ('5. Cold start', 'cold_start', cold_start),
        ('6. Evaluation cost of the default runs', 'eval_share', eval_share),
        ('7. Installing the pinned requirements: pip vs uv', 'install', install),
        ('8. The cost of a seed (reproducible runs)', 'determinism', determinism),
        ('9. Taxi training as the data grows', 'data_size', data_size),
        ('10. Where --steps-per-loop pays', 'steps_per_loop', steps_per_loop),
        ('11. Roofline of a ResNet training step', 'roofline', roofline),
        ('12. Cost estimates checked: a local cluster predicted from one process',
         'backtest', backtest),
        ('Lever study', 'levers', levers),
    ]
    parts = [
        '# Benchmark results',
        'Generated by `bash benchmarks/run.sh` (`python -m benchmarks.report` renders '
        'this file from `benchmarks/results.json`). Machine: %s, %s cores (%s), '
        'Python %s, TensorFlow %s, oneDNN %s, threads: %s. Training figures come '
        'from fresh processes of the real command lines, in alternating order, with '
        'median and range over the repeats; the load average during each benchmark is '
        'given with it (the 1-minute load average sampled every second while the '
        'measured processes ran: lowest–highest and mean). Examples per CPU-second '
        'count the CPU time of the measured process itself (all its threads) over '
        'the same steady-state window as the examples per second. A comparison '
        'measured at a mean load above the core count is judged on its '
        'per-CPU-second figures alone (wall-clock rates under load say little: '
        'the same comparison has read 0.70× and 2.12× an hour apart), and a target '
        'with only wall-clock figures is then not judged; on a quiet machine '
        'wall-clock and per-CPU-second figures must both meet it.'
        % (machine.get('cpu'), machine.get('cores'),
           ', '.join(machine.get('cpu_features', [])), machine.get('python'),
           machine.get('tensorflow'), machine.get('onednn'), machine.get('threads')),
        '## Targets', targets(results),
        NOTES_BEGIN + '\n' + notes.strip() + '\n' + NOTES_END,
    ]
    for title, key, body in sections:
        result = results.get(key)
        parts.append(_section(title, result, body(result) if result else '', machine))
    return '\n\n'.join(parts).rstrip() + '\n'


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--results', default=common.RESULTS_JSON)
    parser.add_argument('--out', default=os.path.join(common.REPO_ROOT, 'benchmarks',
                                                      'RESULTS.md'))
    args = parser.parse_args(argv)
    with open(args.results) as f:
        results = json.load(f)
    notes = ''
    if os.path.exists(args.out):
        with open(args.out) as f:
            text = f.read()
        if NOTES_BEGIN in text and NOTES_END in text:
            notes = text.split(NOTES_BEGIN, 1)[1].split(NOTES_END, 1)[0]
    with open(args.out, 'w') as f:
        f.write(render(results, notes))
    print(load_summary(results))
    print(targets(results))
    print('Wrote %s' % args.out)


def load_summary(results: Dict[str, Dict[str, Any]]) -> str:
    """One line per benchmark: the load it saw, and what its comparisons are judged on."""
    lines = []
    for key, result in sorted(results.items()):
        if 'machine' not in result:
            continue
        low, mean, high = _load_stats(result)
        depths = result.get('depths', {})
        if depths:  # ResNet: the target depth's own load
            low, mean, high = _load_stats(depths.get('44', next(iter(depths.values()))))
        cores = result['machine'].get('cores') or 0
        lines.append('%-18s load %.1f–%.1f (mean %.1f) on %d cores: %s (finished %s)' % (
            key, low, high, mean, cores,
            'loaded, comparisons judged per CPU-second only' if mean > cores
            else 'quiet enough, wall-clock and per-CPU-second figures judged',
            result.get('finished', '?')))
    return '\n'.join(lines)


if __name__ == '__main__':
    main()
