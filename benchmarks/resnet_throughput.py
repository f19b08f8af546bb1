"""Benchmark 1: ResNet training throughput, cifar10_main vs Keras `model.fit`.

For each depth, in one run, alternating the order every repeat:
- `estimator`: `python -m cifar10_estimator.cifar10_main` with its defaults
  (`--mixed-precision auto`: bfloat16 on a CPU with native bfloat16);
- `estimator_fp32` / `estimator_bf16`: the same with `--mixed-precision none`
  or `bfloat16` (whichever is the default is `estimator` itself);
- `keras_memory` / `keras_tfrecord`: the identical ResNet (`keras_resnet`)
  under `model.fit`, float32 (Keras' default), fed from numpy arrays in memory
  or from the same TFRecords through the same input pipeline;
- `keras_tfrecord_bf16`: the Keras run with the `mixed_bfloat16` policy,
  the like-for-like reference for the trainer's bfloat16.
Steady state leaves out graph building and the first interval of steps; the
trainer saves (and evaluates) no checkpoint inside it, as `fit` does not.
Each run's figure is its fastest interval of steps in that window, for both
sides (`common.fastest_interval`: on these machines stretches of seconds run
~15% slower in wall and CPU time alike, and a short window's mean took
whichever it landed on); the window's mean is kept beside it.
Examples per CPU-second count the process's own CPU time over the same
interval: the figure the targets are judged on when the machine was loaded.
The variants the targets compare run 5 times at ResNet-44, the others 3: with
5 repeats the range of the per-repeat ratios is a 94% interval for the median
ratio (`common.median_interval`), which says whether a gap of a few percent has
a sign on this machine at all.

Also measured: the model's FLOPs per training example (TF profiler,
forward + backward convolutions and dense layer) and the CPU's peak FLOP/s
(best of repeated 4096x4096 matmuls, float32 and bfloat16, per wall second
and per CPU-second), giving the fraction of peak each variant reaches.
"""
import argparse
import time
from typing import Any, Dict, List, Literal, Optional, Sequence, Set, Tuple, TypedDict

from benchmarks import common


class Options(TypedDict, total=False):
    """What a variant runs with: the trainer's flags, or the Keras reference's
    input and dtype policy."""
    flags: List[str]
    source: Literal['memory', 'tfrecord']
    dtype_policy: str


# name: (which side runs it, its options)
VARIANTS: Dict[str, Tuple[Literal['estimator', 'keras'], Options]] = {
    'estimator': ('estimator', {}),
    'estimator_fp32': ('estimator', {'flags': ['--mixed-precision', 'none']}),
    'estimator_bf16': ('estimator', {'flags': ['--mixed-precision', 'bfloat16']}),
    'keras_memory': ('keras', {'source': 'memory'}),
    'keras_tfrecord': ('keras', {'source': 'tfrecord'}),
    'keras_tfrecord_bf16': ('keras', {'source': 'tfrecord',
                                      'dtype_policy': 'mixed_bfloat16'}),
}
# The variant each ratio compares, and what the comparison means.
RATIOS = (
    ('estimator', 'keras_tfrecord', 'defaults vs Keras defaults (float32)'),
    ('estimator', 'keras_memory', 'defaults vs Keras from memory (float32)'),
    ('estimator_fp32', 'keras_tfrecord', 'both float32'),
    ('estimator_bf16', 'keras_tfrecord_bf16', 'both bfloat16'),
)
# Issue #33's targets: (ratio, at least, what) for ResNet-44, per CPU-second and
# in wall time.
TARGETS = (
    ('estimator_bf16/keras_tfrecord_bf16', 1.0, 'both bfloat16 vs Keras mixed_bfloat16'),
    ('estimator_fp32/keras_tfrecord', 1.0, 'both float32 vs Keras'),
    ('estimator/keras_tfrecord', 1.2, 'trainer defaults vs Keras defaults'),
)


def aliases(default_type: str) -> Dict[str, str]:
    """Variants that are the same command as another with these defaults:
    `estimator_bf16` is `estimator` where the default computes in bfloat16,
    `estimator_fp32` where it computes in float32 (measured once, under the
    default's name)."""
    return {'estimator_bf16' if default_type == 'bfloat16' else 'estimator_fp32':
            'estimator'}


def bf16_variant(result: Dict[str, Any]) -> str:
    """The estimator variant that trained in bfloat16 in `result`."""
    if result.get('estimator_default_type') == 'bfloat16':
        return 'estimator'
    return 'estimator_bf16'


def training_flops(num_layers: int, batch_size: int = 128) -> Tuple[float, float]:
    """(forward, training) FLOPs per example, from the TF profiler's float ops."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    from cifar10_estimator import model  # pylint: disable=g-import-not-at-top
    result: List[float] = []
    for mode in (tf.estimator.ModeKeys.EVAL, tf.estimator.ModeKeys.TRAIN):
        graph = tf.Graph()
        with graph.as_default():
            images = tf.compat.v1.placeholder(tf.float32, [batch_size, 32, 32, 3])
            labels = tf.compat.v1.placeholder(tf.int32, [batch_size])
            hparams = model.HParams(num_layers=num_layers, train_batch_size=batch_size)
            model.model_fn({'images': images}, labels, mode, {'hparams': hparams}, None)
            options = tf.compat.v1.profiler.ProfileOptionBuilder.float_operation()
            options['output'] = 'none'
            profile = tf.compat.v1.profiler.profile(graph, options=options)
        result.append(profile.total_float_ops / batch_size)
    return result[0], result[1]


def peak_flops(size: int = 4096, repeats: int = 5,
               chain: int = 3) -> Tuple[Dict[str, float], Dict[str, float]]:
    """Best FLOP/s of `size`^2 matmuls in float32 and bfloat16 (oneDNN, all cores).

    Returns ({dtype: FLOP/s of wall time}, {dtype: FLOP per CPU-second of this
    process}): the second is what one core-second of CPU delivers at best,
    steady under load, and compares with the per-CPU-second training figures.
    """
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    matmul = tf.function(tf.linalg.matmul)
    peaks: Dict[str, float] = {}
    per_cpu: Dict[str, float] = {}
    for dtype in (tf.float32, tf.bfloat16):
        a = tf.cast(tf.random.normal([size, size]), dtype)
        b = tf.cast(tf.random.normal([size, size]), dtype)
        matmul(a, b).numpy()
        best = best_cpu = 0.0
        for _ in range(repeats):
            start, start_cpu = time.perf_counter(), time.process_time()
            for _ in range(chain):
                c = matmul(a, b)
            c.numpy()
            flops = chain * 2 * size ** 3
            best = max(best, flops / (time.perf_counter() - start))
            best_cpu = max(best_cpu, flops / (time.process_time() - start_cpu))
        peaks[dtype.name], per_cpu[dtype.name] = best, best_cpu
    return peaks, per_cpu


def target_variants(same_as: Dict[str, str]) -> Set[str]:
    """The variants the targets compare, by the names they run under."""
    return {same_as.get(name, name) for key, _, _ in TARGETS for name in key.split('/')}


def run_variant(name: str, data_dir: str, num_layers: int, interval: int,
                intervals: int) -> Dict[str, Any]:
    """One fresh run of variant `name`: its fastest interval's examples/sec and
    examples per CPU-second, and the window's means as `window_*`."""
    kind, options = VARIANTS[name]
    if kind == 'estimator':
        value = common.estimator_throughput(
            data_dir, num_layers=num_layers, interval=interval, intervals=intervals,
            flags=options.get('flags', ()))
    else:
        value = common.keras_throughput(
            data_dir, num_layers=num_layers, interval=interval, intervals=intervals,
            source=options['source'], dtype_policy=options.get('dtype_policy'))
    return common.fastest(value)


def compute_type(name: str, estimator_default: str) -> str:
    if name == 'estimator':
        return estimator_default
    return 'bfloat16' if name.endswith('bf16') else 'float32'


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--data-dir', required=True)
    parser.add_argument('--depths', default='20,44,56')
    parser.add_argument('--repeats', type=int, default=5,
                        help='Repeats of the variants the ResNet-44 targets compare: '
                             'with 5, the range of their per-repeat ratios is a 94%% '
                             'interval for the median ratio.')
    parser.add_argument('--context-repeats', type=int, default=3,
                        help='Repeats of the other ResNet-44 variants (Keras from '
                             'memory); the first repeats run every variant.')
    parser.add_argument('--other-depth-repeats', type=int, default=1,
                        help='Repeats at the depths besides 44 (context, no target).')
    parser.add_argument('--variants', default=','.join(VARIANTS),
                        help='Variants for ResNet-44; other depths skip *_bf16. The '
                             'estimator variant with the default compute type runs '
                             'once, as `estimator`.')
    parser.add_argument('--interval', type=int, default=8,
                        help='Steps per progress interval.')
    parser.add_argument('--intervals', type=int, default=5,
                        help='Steady-state intervals measured after the first; each '
                             'run counts its fastest.')
    args = parser.parse_args(argv)
    common.quiet_tensorflow()
    from estimator_trainers import devices  # pylint: disable=g-import-not-at-top
    resolved = devices.resolve_mixed_precision('auto', 0)
    default_type = 'float32' if resolved == 'none' else resolved
    info = common.machine_info()
    peaks, peaks_per_cpu = peak_flops()
    print('Peak (4096^2 matmul): float32 %.1f GFLOP/s, bfloat16 %.1f GFLOP/s; per '
          'CPU-second %.1f and %.1f GFLOP' % (
              peaks['float32'] / 1e9, peaks['bfloat16'] / 1e9,
              peaks_per_cpu['float32'] / 1e9, peaks_per_cpu['bfloat16'] / 1e9))
    results: Dict[str, Any] = {
        'machine': info, 'peak_flops': peaks, 'peak_flops_per_cpu_second': peaks_per_cpu,
        'batch_size': 128, 'estimator_default_type': default_type,
        'interval': args.interval, 'intervals': args.intervals, 'depths': {}}
    same_as = aliases(default_type)
    started = time.time()
    for num_layers in [int(d) for d in args.depths.split(',')]:
        variants = [v for v in args.variants.split(',') if v not in same_as]
        if num_layers == 44:
            compared = target_variants(same_as)
            counts = {v: args.repeats if v in compared else args.context_repeats
                      for v in variants}
        else:
            variants = [v for v in variants if not v.endswith('_bf16')]
            counts = dict.fromkeys(variants, args.other_depth_repeats)
        forward, train = training_flops(num_layers)
        runs: Dict[str, List[Dict[str, Any]]] = {name: [] for name in variants}
        loads = common.load_mark()
        for repeat in range(max(counts.values())):
            this_repeat = [v for v in variants if repeat < counts[v]]
            for name in (this_repeat if repeat % 2 == 0 else this_repeat[::-1]):
                value = run_variant(name, args.data_dir, num_layers, args.interval,
                                    args.intervals)
                runs[name].append(value)
                print('ResNet-%d %-20s %7.1f examples/sec, %7.1f per CPU-second '
                      '(load %.2f)' % (num_layers, name, value['examples_per_sec'],
                                       value['examples_per_cpu_sec'], value['load'][1]),
                      flush=True)
        depth: Dict[str, Any] = {'forward_flops': forward, 'training_flops': train,
                                 'load_average_range': common.load_since(loads),
                                 'variants': {}, 'ratios': {}}
        for name, values in runs.items():
            summary = common.summarize([v['examples_per_sec'] for v in values])
            kind = compute_type(name, default_type)
            summary['compute_type'] = kind
            summary['fraction_of_peak'] = summary['median'] * train / peaks[kind]
            summary['per_cpu_second'] = common.summarize(
                [v['examples_per_cpu_sec'] for v in values])
            summary['fraction_of_peak_per_cpu_second'] = (
                summary['per_cpu_second']['median'] * train / peaks_per_cpu[kind])
            depth['variants'][name] = summary
        for numerator, denominator, meaning in RATIOS:
            top, bottom = same_as.get(numerator, numerator), same_as.get(denominator,
                                                                          denominator)
            if top in runs and bottom in runs:
                depth['ratios']['%s/%s' % (numerator, denominator)] = {
                    'meaning': meaning, **common.same_repeat_ratio(runs[top], runs[bottom]),
                    'of_medians': (depth['variants'][top]['median']
                                   / depth['variants'][bottom]['median']),
                    'per_cpu_second': (
                        depth['variants'][top]['per_cpu_second']['median']
                        / depth['variants'][bottom]['per_cpu_second']['median'])}
        results['depths'][str(num_layers)] = depth
        common.print_table(
            'ResNet-%d, batch 128: steady-state examples/sec (%.0f training MFLOP/example)'
            % (num_layers, train / 1e6),
            ['variant', 'type', 'median', 'min', 'max', '% of peak', 'per CPU-s'],
            [[name, s['compute_type'], '%.1f' % s['median'], '%.1f' % s['min'],
              '%.1f' % s['max'], '%.0f%%' % (100 * s['fraction_of_peak']),
              '%.1f' % s['per_cpu_second']['median']]
             for name, s in depth['variants'].items()])
        common.print_table('ResNet-%d ratios (per repeat; per CPU-second of medians)'
                           % num_layers,
                           ['ratio', 'meaning', 'median', 'min', 'max', 'per CPU-s'],
                           [[k, r['meaning'], '%.2f' % r['median'], '%.2f' % r['min'],
                             '%.2f' % r['max'], '%.2f' % r['per_cpu_second']]
                            for k, r in depth['ratios'].items()])
    results['seconds'] = round(time.time() - started)
    common.update_results('resnet_throughput', results)


if __name__ == '__main__':
    main()
