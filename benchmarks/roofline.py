"""Benchmark 11: a roofline of one ResNet training step: where its CPU time goes.

Every op kind of a ResNet-`--num-layers` training step at batch 128 (the
convolutions' forward, input-gradient and filter-gradient passes at each
stage's shape, fused batch norm forward and backward, ReLU and its
gradient, the residual adds, the optimizer's update of every variable) is
timed alone, in the compute type given, in a `tf.function` loop through the
same oneDNN kernels training uses, as CPU-seconds of this process per call
(steady under load, like the training figures). With its FLOPs and the bytes
it must read and write at the least, each kind gets its arithmetic
intensity, the FLOP/s it reaches per CPU-second against the measured peaks
(best 4096x4096 matmul for compute, a large elementwise add for memory
bandwidth) and what bounds it. The sum is checked against the training
step's own CPU time (benchmark 1): what it leaves over is the executor's
and the threads' cost between the ops.

    python -m benchmarks.roofline [--num-layers 44] [--dtypes bfloat16,float32]
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import time
from typing import TYPE_CHECKING, Any, Callable, Counter, Dict, List, Optional, Sequence, Tuple

from benchmarks import common
from estimator_trainers import perf_model

if TYPE_CHECKING:  # imported where used, once `common.quiet_tensorflow` ran
    import tensorflow as tf

BATCH = 128
# (stage, spatial size, channels) of the CIFAR ResNet.
STAGES = perf_model.STAGES


# An op's shape key: a convolution's (n, h, w, cin, cout, stride), another op's
# (n, h, w, c).
ShapeKey = Tuple[int, ...]
# A `tf.function` running an op n times: n (a scalar tensor) -> the running sum.
Timed = Callable[['tf.Tensor'], 'tf.Tensor']


def _graph_function(function: Callable[[tf.Tensor], tf.Tensor]) -> Timed:
    """`tf.function(function)`, typed (TensorFlow's decorator is untyped)."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top,redefined-outer-name
    timed: Timed = tf.function(function)
    return timed


def step_ops(num_layers: int, batch: int = BATCH) -> List[Tuple[str, ShapeKey, int]]:
    """The op instances of one training step: [(kind, shape key, count)].

    Shape keys are tuples the timers below take: convolutions
    (n, h, w, cin, cout, stride), per-channel and elementwise ops (n, h, w, c).
    """
    blocks = (num_layers - 2) // 6
    ops: Counter[Tuple[str, ShapeKey]] = collections.Counter()
    ops['conv_forward', (batch, 32, 32, 3, 16, 1)] += 1  # the initial convolution
    ops['conv_filter_gradient', (batch, 32, 32, 3, 16, 1)] += 1
    ops['batch_norm_forward', (batch, 32, 32, 16)] += 1
    ops['batch_norm_backward', (batch, 32, 32, 16)] += 1
    ops['relu_forward', (batch, 32, 32, 16)] += 1
    ops['relu_backward', (batch, 32, 32, 16)] += 1
    previous = 16
    for stage, size, channels in STAGES:
        for block in range(blocks):
            stride = 2 if stage > 1 and block == 0 else 1
            in_size = size * stride
            for cin, n_in, st in ((previous if block == 0 else channels, in_size, stride),
                                  (channels, size, 1)):
                key = (batch, n_in, n_in, cin, channels, st)
                ops['conv_forward', key] += 1
                ops['conv_input_gradient', key] += 1
                ops['conv_filter_gradient', key] += 1
            shape = (batch, size, size, channels)
            ops['batch_norm_forward', shape] += 2
            ops['batch_norm_backward', shape] += 2
            ops['relu_forward', shape] += 2
            ops['relu_backward', shape] += 2
            ops['residual_add', shape] += 2  # the add, and its gradient's copy into both paths
        previous = channels
    return sorted((kind, key, count) for (kind, key), count in ops.items())


# Trainable parameters of the network (kernels, batch-norm scales and offsets, dense).
parameters = perf_model.resnet_parameters


def flops_and_bytes(kind: str, key: ShapeKey, itemsize: int) -> Tuple[int, int]:
    """(FLOPs, the bytes it must read and write at the least) of one op instance."""
    if kind.startswith('conv'):
        n, h, w, cin, cout, stride = key
        oh, ow = h // stride, w // stride
        flops = 2 * n * oh * ow * cin * cout * 9
        moved = itemsize * (n * h * w * cin + n * oh * ow * cout + 9 * cin * cout)
        if kind != 'conv_forward':
            moved += itemsize * (n * oh * ow * cout if kind == 'conv_filter_gradient'
                                 else n * h * w * cin)
        return flops, moved
    elements = 1
    for size in key:
        elements *= size
    reads_writes = {'batch_norm_forward': (2, 2, 8), 'batch_norm_backward': (3, 1, 10),
                    'relu_forward': (1, 1, 1), 'relu_backward': (2, 1, 1),
                    'residual_add': (2, 1, 1)}[kind]
    reads, writes, flops_per = reads_writes
    return flops_per * elements, itemsize * elements * (reads + writes)


def _timer(kind: str, key: ShapeKey, dtype: str) -> Timed:
    """A `tf.function(n)` running the op `n` times on fixed inputs; a control
    dependency on the loop's running sum keeps every call in the loop."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    low = tf.as_dtype(dtype)

    def random(shape: List[int]) -> tf.Tensor:
        return tf.cast(tf.random.normal(shape), low)

    # Inputs made once, outside the timed function (captured as constants).
    if kind.startswith('conv'):
        n, h, w, cin, cout, stride = key
        x, kernel = random([n, h, w, cin]), random([3, 3, cin, cout])
        dy = random([n, h // stride, w // stride, cout])
        strides = [1, stride, stride, 1]
    else:
        x, dy = random(list(key)), random(list(key))
        scale, offset, empty = tf.ones([key[-1]]), tf.zeros([key[-1]]), tf.zeros([0])
        _, _, _, r1, r2, r3 = tf.raw_ops.FusedBatchNormV3(
            x=x, scale=scale, offset=offset, mean=empty, variance=empty, epsilon=1e-5,
            is_training=True)

    @_graph_function
    def run(times: tf.Tensor) -> tf.Tensor:
        op: Callable[[], tf.Tensor]
        if kind.startswith('conv'):
            op = {
                'conv_forward': lambda: tf.nn.conv2d(x, kernel, strides, 'SAME'),
                'conv_input_gradient': lambda: tf.raw_ops.Conv2DBackpropInput(
                    input_sizes=[n, h, w, cin], filter=kernel, out_backprop=dy,
                    strides=strides, padding='SAME'),
                'conv_filter_gradient': lambda: tf.raw_ops.Conv2DBackpropFilter(
                    input=x, filter_sizes=[3, 3, cin, cout], out_backprop=dy,
                    strides=strides, padding='SAME'),
            }[kind]
        else:
            op = {
                'batch_norm_forward': lambda: tf.raw_ops.FusedBatchNormV3(
                    x=x, scale=scale, offset=offset, mean=empty, variance=empty,
                    epsilon=1e-5, is_training=True)[0],
                'batch_norm_backward': lambda: tf.raw_ops.FusedBatchNormGradV3(
                    y_backprop=dy, x=x, scale=scale, reserve_space_1=r1,
                    reserve_space_2=r2, reserve_space_3=r3, epsilon=1e-5,
                    is_training=True)[0],
                'relu_forward': lambda: tf.nn.relu(x),
                'relu_backward': lambda: tf.raw_ops.ReluGrad(gradients=dy, features=x),
                'residual_add': lambda: x + dy,
            }[kind]
        total = tf.zeros([], low)
        for _ in tf.range(times):
            with tf.control_dependencies([total]):
                total += tf.reshape(op(), [-1])[0]
        return total
    return run


def _baseline(dtype: str) -> Timed:
    """The loop's own cost (reading one element into the running sum)."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    low = tf.as_dtype(dtype)

    @_graph_function
    def run(times: tf.Tensor) -> tf.Tensor:
        x = tf.ones([1, 1], low)
        total = tf.zeros([], low)
        for _ in tf.range(times):
            with tf.control_dependencies([total]):
                total += tf.reshape(tf.identity(x), [-1])[0]
        return total
    return run


def cpu_seconds_per_call(run: Timed, calls: int, repeats: int = 3) -> float:
    """Best CPU-seconds of this process per call of `run`, after a warm-up call."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    run(tf.constant(2)).numpy()
    best = float('inf')
    for _ in range(repeats):
        start = time.process_time()
        run(tf.constant(calls)).numpy()
        best = min(best, (time.process_time() - start) / calls)
    return best


def memory_bandwidth(megabytes: int = 64, calls: int = 10) -> float:
    """Best bytes per CPU-second of a float32 add of two `megabytes` tensors (two
    reads, one write: larger than the caches), repeated in a loop so the
    output's memory is reused as training reuses it."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    n = megabytes * (1 << 20) // 4
    a, b = tf.random.normal([n]), tf.random.normal([n])

    @_graph_function
    def run(times: tf.Tensor) -> tf.Tensor:
        total = tf.zeros([])
        for _ in tf.range(times):
            with tf.control_dependencies([total]):
                total += (a + b)[0]
        return total
    return 3 * 4 * n / cpu_seconds_per_call(run, calls)


def roofline(num_layers: int, dtype: str, peaks_per_cpu: Dict[str, float], bandwidth: float,
             calls: int = 20) -> Dict[str, Any]:
    """The table of one compute type: a row per op kind, and the totals."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    itemsize = tf.as_dtype(dtype).size
    loop = cpu_seconds_per_call(_baseline(dtype), 200)
    kinds: Dict[str, Dict[str, Any]] = collections.defaultdict(
        lambda: {'instances': 0, 'flops': 0, 'bytes': 0, 'cpu_seconds': 0.0})
    for kind, key, count in step_ops(num_layers):
        per_call = max(0.0, cpu_seconds_per_call(_timer(kind, key, dtype), calls) - loop)
        flops, moved = flops_and_bytes(kind, key, itemsize)
        row = kinds[kind]
        row['instances'] += count
        row['flops'] += count * flops
        row['bytes'] += count * moved
        row['cpu_seconds'] += count * per_call
        print('%-9s %-22s %-26s x%-3d %8.3f CPU-ms each' % (
            dtype, kind, key, count, 1000 * per_call), flush=True)
    params = parameters(num_layers)
    # Momentum reads a variable, its slot and a gradient and writes two (float32).
    optimizer = kinds['optimizer_update']
    optimizer.update(instances=1, flops=4 * params, bytes=5 * 4 * params,
                     cpu_seconds=cpu_seconds_per_call(_momentum(params), 50))
    peak = peaks_per_cpu[dtype]
    for row in kinds.values():
        seconds = max(row['cpu_seconds'], 1e-12)
        row['gflop_per_cpu_second'] = row['flops'] / seconds / 1e9
        row['fraction_of_peak'] = row['flops'] / seconds / peak
        row['gbytes_per_cpu_second'] = row['bytes'] / seconds / 1e9
        row['fraction_of_bandwidth'] = row['bytes'] / seconds / bandwidth
        row['flops_per_byte'] = row['flops'] / max(row['bytes'], 1)
        # Below the ridge point (peak / bandwidth) memory bounds an op, above it compute.
        row['bound'] = ('compute' if row['flops_per_byte'] >= peak / bandwidth
                        else 'memory')
    total = sum(row['cpu_seconds'] for row in kinds.values())
    flops = sum(row['flops'] for row in kinds.values())
    return {'kinds': dict(kinds), 'ops_cpu_seconds': total, 'flops': flops,
            'ridge_flops_per_byte': peak / bandwidth,
            'fraction_of_peak_if_only_ops': flops / total / peak}


def _momentum(params: int) -> Timed:
    """One ResourceApplyMomentum over all parameters as one float32 variable (the
    trainer's 131 updates, without their per-op overhead)."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    var, accum = tf.Variable(tf.zeros([params])), tf.Variable(tf.zeros([params]))
    grad = tf.random.normal([params])

    @_graph_function
    def run(times: tf.Tensor) -> tf.Tensor:
        for _ in tf.range(times):
            tf.raw_ops.ResourceApplyMomentum(var=var.handle, accum=accum.handle, lr=0.1,
                                             grad=grad, momentum=0.9)
        return tf.constant(0)
    return run


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--num-layers', type=int, default=44)
    parser.add_argument('--dtypes', default='bfloat16,float32')
    parser.add_argument('--calls', type=int, default=20,
                        help='Calls per timing of each op (best of 3).')
    args = parser.parse_args(argv)
    common.quiet_tensorflow()
    from benchmarks import resnet_throughput  # pylint: disable=g-import-not-at-top
    mark = common.load_mark()
    common.sample_load(force=True)
    _, peaks_per_cpu = resnet_throughput.peak_flops()
    bandwidth = memory_bandwidth()
    results: Dict[str, Any] = {'machine': common.machine_info(), 'num_layers': args.num_layers,
                               'batch_size': BATCH, 'peak_flops_per_cpu_second': peaks_per_cpu,
                               'bytes_per_cpu_second': bandwidth, 'dtypes': {}}
    for dtype in args.dtypes.split(','):
        results['dtypes'][dtype] = roofline(args.num_layers, dtype, peaks_per_cpu,
                                            bandwidth, calls=args.calls)
        common.sample_load(force=True)
    results['load_average_range'] = common.load_since(mark)
    trained = _training_cpu_seconds_per_step(args.num_layers)
    for dtype, table in results['dtypes'].items():
        if dtype in trained:
            table['training_cpu_seconds_per_step'] = trained[dtype]
        rows = [[kind, row['instances'], '%.2f' % (row['flops'] / 1e9),
                 '%.0f' % (row['bytes'] / 1e6), '%.1f' % (1000 * row['cpu_seconds']),
                 '%.1f' % row['gflop_per_cpu_second'], '%.0f%%' % (100 * row['fraction_of_peak']),
                 '%.1f' % row['flops_per_byte'], row['bound']]
                for kind, row in sorted(table['kinds'].items(),
                                        key=lambda kv: -kv[1]['cpu_seconds'])]
        common.print_table('ResNet-%d %s training step, batch %d: ops timed alone '
                           '(sum %.0f CPU-ms; the step in training: %s)' % (
                               args.num_layers, dtype, BATCH,
                               1000 * table['ops_cpu_seconds'],
                               '%.0f CPU-ms' % (1000 * trained[dtype]) if dtype in trained
                               else 'not measured'),
                           ['op', 'instances', 'GFLOP', 'MB moved', 'CPU-ms',
                            'GFLOP per CPU-s', '% of peak', 'FLOP/byte', 'bound'], rows)
    print(json.dumps({'peaks_per_cpu_second_gflop': {k: v / 1e9 for k, v in
                                                      peaks_per_cpu.items()},
                      'bandwidth_gb_per_cpu_second': bandwidth / 1e9}))
    common.update_results('roofline', results)


def _training_cpu_seconds_per_step(num_layers: int) -> Dict[str, float]:
    """CPU-seconds per training step of the trainer, from benchmark 1 if measured."""
    if not os.path.exists(common.RESULTS_JSON):
        return {}
    with open(common.RESULTS_JSON) as f:
        resnet = json.load(f).get('resnet_throughput', {})
    depth = resnet.get('depths', {}).get(str(num_layers), {})
    found: Dict[str, float] = {}
    for name, summary in depth.get('variants', {}).items():
        if name.startswith('estimator') and 'per_cpu_second' in summary:
            kind = summary['compute_type']
            found.setdefault(kind, BATCH / summary['per_cpu_second']['median'])
    return found


if __name__ == '__main__':
    main()
