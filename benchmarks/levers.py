"""The lever study: each performance setting of cifar10_main switched alone.

Every variant trains ResNet (default depth 20, batch 128) through the real
command line and is compared with its baseline measured in the same rounds:
the float32 settings with `--mixed-precision none`, and that in turn with the
defaults (bfloat16 where the CPU has AMX-BF16). A trainer default is right
when no variant beats its baseline; the table says so per lever.
Each run counts its fastest interval, as the ResNet benchmark does
(`common.fastest`): a baseline that ran in one of this machine's slow stretches
made every lever look faster than it.
"""
import argparse
from typing import Any, Dict, List, Optional, Sequence, Tuple, TypedDict

from benchmarks import common


class Options(TypedDict, total=False):
    """The keyword arguments of `common.estimator_throughput` a variant sets."""
    flags: List[str]
    levers: List[str]
    extra_env: Dict[str, str]


FP32 = ['--mixed-precision', 'none']
# name: (what it changes, baseline, options for common.estimator_throughput)
VARIANTS: Dict[str, Tuple[str, Optional[str], Options]] = {
    'defaults': ('trainer defaults (mixed precision auto)', None, {}),
    'float32': ('--mixed-precision none', 'defaults', {'flags': FP32}),
    'channels_first': ('NCHW inside the network (--data-format channels_first)',
                       'float32',
                       {'flags': FP32 + ['--data-format', 'channels_first']}),
    'unfused_batch_norm': ('batch norm as separate ops, not one fused kernel',
                           'float32', {'flags': FP32,
                                       'levers': ['unfused_batch_norm']}),
    'onednn_off': ('TF_ENABLE_ONEDNN_OPTS=0 (Eigen kernels)', 'float32',
                   {'flags': FP32, 'extra_env': {'TF_ENABLE_ONEDNN_OPTS': '0'}}),
    'xla_auto_jit': ('XLA auto-clustering on CPU (TF_XLA_FLAGS)', 'float32',
                     {'flags': FP32, 'extra_env': {
                         'TF_XLA_FLAGS': '--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit'}}),
    'intra_threads_1': ('--num-intra-threads 1 (default: one per core)', 'float32',
                        {'flags': FP32 + ['--num-intra-threads', '1']}),
    'inter_threads_1': ('--num-inter-threads 1 (default: TensorFlow picks)',
                        'float32', {'flags': FP32 + ['--num-inter-threads', '1']}),
    'inter_threads_2': ('--num-inter-threads 2', 'float32',
                        {'flags': FP32 + ['--num-inter-threads', '2']}),
    'summaries_every_step': ('--save-summary-steps 1 (default 100)', 'float32',
                             {'flags': FP32 + ['--save-summary-steps', '1']}),
    'gated_gradients': ('compute_gradients with per-op gating (TF1 default)',
                        'float32', {'flags': FP32, 'levers': ['gated_gradients']}),
}
# Clear-cut and slow: measured --repeats-slow times only.
SLOW = ('channels_first', 'onednn_off', 'xla_auto_jit')
# A variant must beat its baseline by more than the run-to-run noise (±10%).
KEEP_MARGIN = 0.10


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--data-dir', required=True)
    parser.add_argument('--num-layers', type=int, default=20)
    parser.add_argument('--variants', default=','.join(VARIANTS))
    parser.add_argument('--repeats', type=int, default=2)
    parser.add_argument('--repeats-slow', type=int, default=1)
    parser.add_argument('--interval', type=int, default=6)
    parser.add_argument('--intervals', type=int, default=4,
                        help='Steady-state intervals; each run counts its fastest.')
    args = parser.parse_args(argv)
    common.quiet_tensorflow()
    names = args.variants.split(',')
    runs: Dict[str, List[Dict[str, Any]]] = {name: [] for name in names}
    loads = common.load_mark()
    for repeat in range(args.repeats):
        order = [n for n in names if n not in SLOW or repeat < args.repeats_slow]
        for name in (order if repeat % 2 == 0 else order[::-1]):
            value = common.fastest(common.estimator_throughput(
                args.data_dir, num_layers=args.num_layers, interval=args.interval,
                intervals=args.intervals, **VARIANTS[name][2]))
            runs[name].append(value)
            print('lever %-22s %7.1f examples/sec, %7.1f per CPU-second (load %.2f)'
                  % (name, value['examples_per_sec'], value['examples_per_cpu_sec'],
                     value['load'][1]), flush=True)
    results: Dict[str, Any] = {'machine': common.machine_info(), 'num_layers': args.num_layers,
                               'batch_size': 128, 'load_average_range': common.load_since(loads),
                               'variants': {}}
    rows = []
    for name in names:
        what, baseline, _ = VARIANTS[name]
        summary = common.summarize([r['examples_per_sec'] for r in runs[name]])
        summary['per_cpu_second'] = common.summarize(
            [r['examples_per_cpu_sec'] for r in runs[name]])
        summary.update(what=what, baseline=baseline)
        if baseline in runs:
            base = results['variants'][baseline]
            summary['vs_baseline'] = summary['median'] / base['median']
            summary['vs_baseline_per_cpu_second'] = (
                summary['per_cpu_second']['median'] / base['per_cpu_second']['median'])
            # Each baseline holds the trainer's default for the lever switched.
            summary['default_is_fastest'] = summary['vs_baseline'] < 1 + KEEP_MARGIN
        results['variants'][name] = summary
        rows.append([name, '%.1f' % summary['median'],
                     '%.1f-%.1f' % (summary['min'], summary['max']),
                     '%.2f' % summary['vs_baseline'] if 'vs_baseline' in summary else '',
                     '%.2f' % summary['vs_baseline_per_cpu_second']
                     if 'vs_baseline' in summary else '',
                     baseline or '',
                     {True: 'yes', False: 'NO', None: ''}.get(
                         summary.get('default_is_fastest'), ''), what])
    common.finish('levers', results,
                  'Levers, ResNet-%d batch 128: examples/sec (x baseline, wall and per CPU-s)'
                  % args.num_layers,
                  ['variant', 'median', 'range', 'x base', 'x base/CPU-s', 'baseline',
                   'default fastest', 'change'], rows)


if __name__ == '__main__':
    main()
