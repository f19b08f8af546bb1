"""The per-step cost model of parameter-server training, fitted to benchmark 4,
and what it predicts for Vertex AI machine shapes (docs/performance-model.md).

One global step of a worker with batch `b` costs, in CPU-seconds of all the
cluster's tasks together,

    b * c  +  f  +  beta * B

`c`: one process's CPU-seconds per example (benchmark 4's single process);
`B`: the bytes the step moves between the worker and the parameter server
(the variables read, the gradients and batch-norm statistics sent); `f`: a
fixed cost per step (the RunGraph calls and their set-up on both sides, a
tensor transfer per variable). `f` and `beta` are fitted to every measured
trainer together, on relative error: the taxi model's steps, with 1% of the
ResNets' bytes, pin `f`; the ResNets' pin `beta` (their tensor counts grow
with their bytes, so they alone cannot separate the two). Each trainer is
also predicted from a fit to the others (leave one out): the check.
For a cloud shape the same CPU costs are split by task (the measured
share of the parameter server) and spread over that machine's cores; the
network adds its bandwidth and round trips. Cluster examples/sec is the
least of what the workers compute, what the parameter server's cores and
what its network carries.

    python -m benchmarks.cost_model [--results R.json]
"""
import argparse
import json
from typing import Any, Dict, Optional, Sequence, Tuple

from benchmarks import common
from estimator_trainers import perf_model

# The model itself lives in the package (`estimator_trainers.perf_model`): the
# cloud tools' estimates use it, and this directory is not shipped.
ROUND_TRIPS = perf_model.ROUND_TRIPS
ROUND_TRIP_SECS = perf_model.ROUND_TRIP_SECS
resnet_facts = perf_model.resnet_facts


def taxi_facts() -> Tuple[int, int, int, int]:
    """The same for the taxi model with its default layers: the linear weights and
    bias, the company embedding, the DNN's kernels and biases; no batch norm."""
    from taxi_estimator import features  # pylint: disable=g-import-not-at-top
    widths = [len(features.NUMBER_COLUMNS) + features.PAYMENT_IDS + features.EMBEDDING_DIM,
              32, 16, 1]
    dnn = sum(a * b + b for a, b in zip(widths, widths[1:]))
    params = (features.WIDE_BUCKETS + 1) + features.COMPANY_BUCKETS * features.EMBEDDING_DIM + dnn
    return 3 + 2 * (len(widths) - 1), params, 0, 0


def step_traffic(name: str) -> Tuple[int, int]:
    """(tensors, bytes) a global step moves between a worker and the ps for a
    benchmark 4 trainer."""
    if name.startswith('taxi'):
        return perf_model.step_traffic(*taxi_facts())
    return perf_model.resnet_traffic(int(name.split('-')[-1]))


def points(cluster_result: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
    """Per trainer: (worker batch, CPU-s per example alone, measured overhead CPU-s
    per global step, tensors, bytes, the ps's share of the cluster's CPU)."""
    found: Dict[str, Dict[str, Any]] = {}
    for name, t in cluster_result['trainers'].items():
        if 'efficiency_per_cpu_second' not in t:
            continue
        batch = t.get('global_batch') or (1024 if '1024' in name else 128)  # older results
        per_example = 1.0 / t['single_process']['per_cpu_second']['median']
        worker_batch = batch // 2
        overhead = t['cluster_cpu_seconds_per_global_step'] - worker_batch * per_example
        tensors, moved = step_traffic(name)
        found[name] = {'worker_batch': worker_batch, 'cpu_per_example': per_example,
                       'overhead': overhead, 'tensors': tensors, 'bytes': moved,
                       'ps_share': t['tasks'].get('ps-0', {}).get('cpu_share', 0.0),
                       'efficiency': t['efficiency_per_cpu_second']}
    return found


def fit(found: Dict[str, Dict[str, Any]], names: Sequence[str]) -> Tuple[float, float]:
    """(f, beta), neither negative, from the trainers `names` (`perf_model.fit`)."""
    params = perf_model.fit([found[n]['overhead'] for n in names],
                            [found[n]['bytes'] for n in names])
    return params.f_secs, params.beta_secs_per_byte


def left_out(found: Dict[str, Dict[str, Any]],
             names: Sequence[str]) -> Dict[str, Tuple[float, float]]:
    """{name: the (f, beta) fitted to the other trainers}: predicting each trainer
    from the others checks the model (needs at least three trainers)."""
    if len(names) < 3:
        return {}
    return {name: fit(found, [n for n in names if n != name]) for name in names}


def overhead(params: Tuple[float, float], moved: float) -> float:
    return perf_model.overhead(perf_model.Params(*params), moved)


def efficiency(point: Dict[str, Any], params: Tuple[float, float]) -> float:
    """Predicted cluster examples per CPU-second / one process's."""
    return perf_model.efficiency(point['worker_batch'], point['cpu_per_example'],
                                 point['bytes'], perf_model.Params(*params))


# Vertex AI shapes: (machine, vCPUs, network Gbit/s: 2 per vCPU, at most 16 on N1).
MACHINES = tuple((machine, vcpus, perf_model.network_gbits(vcpus))
                 for machine, vcpus in (('n1-standard-4', 4), ('n1-standard-8', 8),
                                        ('n1-standard-16', 16)))


def predict(point: Dict[str, Any], params: Tuple[float, float], workers: int,
            worker_vcpus: int, ps_vcpus: int, gbits: float,
            compute_scale: float = 1.0) -> Tuple[float, str, float]:
    """(examples/sec, what bounds it, one worker's examples/sec without overhead) of
    `workers` workers and one ps (N1: two vCPUs per core). `compute_scale`:
    CPU per example there / here (N1 has no native bfloat16: float32's cost)."""
    found = perf_model.predict_ps(
        point['worker_batch'], point['cpu_per_example'] * compute_scale, point['bytes'],
        point['ps_share'], perf_model.Params(*params), workers, worker_vcpus / 2,
        ps_vcpus / 2, gbits)
    return found.examples_per_sec, found.bound, found.worker_alone


def float32_cost(results: Dict[str, Any]) -> float:
    """CPU per example in float32 / in the trainer's default type, for ResNet-44
    (benchmark 1), or 1 where the default is float32 or it was not measured."""
    depth = results.get('resnet_throughput', {}).get('depths', {}).get('44', {})
    variants = depth.get('variants', {})
    if results.get('resnet_throughput', {}).get('estimator_default_type') != 'bfloat16' \
            or 'estimator_fp32' not in variants:
        return 1.0
    ratio: float = (variants['estimator']['per_cpu_second']['median']
                    / variants['estimator_fp32']['per_cpu_second']['median'])
    return ratio


def summary(results: Dict[str, Any],
            workers: Sequence[int] = (1, 4, 16)) -> Optional[Dict[str, Any]]:
    """The fit, its check on this machine and the cloud predictions, as table rows."""
    found = points(results['cluster'])
    names = sorted(found)
    if not any(n.startswith('taxi') for n in names) or len(names) < 3:
        return None
    params = fit(found, names)
    others = left_out(found, names)
    local = [[name, found[name]['tensors'], '%.0f' % (found[name]['bytes'] / 1e3),
              '%.1f' % (1e3 * found[name]['overhead']),
              '%.1f' % (1e3 * overhead(params, found[name]['bytes'])),
              '%.1f' % (1e3 * overhead(others[name], found[name]['bytes'])),
              '%.2f' % found[name]['efficiency'], '%.2f' % efficiency(found[name], params),
              '%.2f' % efficiency(found[name], others[name])]
             for name in names]
    scale = float32_cost(results)
    cloud = []
    for name in names:
        for machine, vcpus, gbits in MACHINES:
            for count in workers:
                speed, bound, alone = predict(
                    found[name], params, count, vcpus, vcpus, gbits,
                    compute_scale=1.0 if name.startswith('taxi') else scale)
                cloud.append([name, machine, count, '%.0f' % speed,
                              '%.2f' % (speed / (count * alone)), bound])
    return {'fitted_to': names, 'f_secs': params[0], 'beta_secs_per_byte': params[1],
            'float32_scale': scale, 'local': local, 'cloud': cloud}


LOCAL_HEADER = ['trainer', 'tensors/step', 'KB/step', 'overhead CPU-ms measured',
                'modelled', 'from the others', 'efficiency measured', 'modelled',
                'from the others']
CLOUD_HEADER = ['trainer', 'machine', 'workers', 'examples/sec', 'per-worker efficiency',
                'bound by']


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--results', default=common.RESULTS_JSON)
    parser.add_argument('--workers', default='1,4,16')
    args = parser.parse_args(argv)
    with open(args.results) as f:
        model = summary(json.load(f), [int(w) for w in args.workers.split(',')])
    if model is None:
        print('benchmark 4 has not measured three trainers, the taxi model among them, yet')
        return
    print('Fitted to %s (relative error): f = %.1f CPU-ms a step, beta = %.1f CPU-ms a MB moved'
          % (', '.join(model['fitted_to']), 1e3 * model['f_secs'],
             1e9 * model['beta_secs_per_byte']))
    common.print_table('Local 1-ps/2-worker cluster: overhead per global step and '
                       'efficiency per CPU-second, measured, modelled, and predicted '
                       'from a fit to the other trainers', LOCAL_HEADER,
                       model['local'])
    common.print_table('Predicted examples/sec of N workers and one ps, all of the machine '
                       'type (N1: float32, %.2fx the CPU per ResNet example of the default '
                       'here; per-core speed of this machine)' % model['float32_scale'],
                       CLOUD_HEADER, model['cloud'])


if __name__ == '__main__':
    main()
