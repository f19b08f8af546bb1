"""The per-step cost model of parameter-server training (docs/performance-model.md).

One global step of a worker with batch `b` costs, in CPU-seconds of all the
cluster's tasks together, `b * c + f + beta * B`: `c` one process's
CPU-seconds per example, `B` the bytes the step moves between the worker and
the parameter server, `f` a fixed cost per step and `beta` a cost per byte.
`benchmarks/cost_model.py` fits `f` and `beta` to benchmark 4 (`fit`); the
cloud tools' estimates (`tools/cloud/estimate.py`) use the fit recorded here
(`FITTED`). Pure and without TensorFlow: the tools import it before anything
is built.
"""
import dataclasses
from typing import Dict, Optional, Sequence, Tuple

import numpy as np

FLOAT_BYTES = 4
# Round trips a worker step waits for in sequence: variables in, gradients out.
ROUND_TRIPS = 2
# Same-zone round trip between Compute Engine VMs, seconds (typical, not measured).
ROUND_TRIP_SECS = 200e-6
# CIFAR ResNet stages: (stage, feature map size, channels).
STAGES = ((1, 32, 16), (2, 16, 32), (3, 8, 64))


@dataclasses.dataclass(frozen=True)
class Params:
    """`f` (CPU-seconds a step) and `beta` (CPU-seconds a byte moved)."""
    f_secs: float
    beta_secs_per_byte: float


# The fit of docs/performance-model.md (1 ps, chief + 1 worker on this 2-core
# machine, the rerun of 2026-11-28 11:38): f ~ 6.5 CPU-ms, beta ~ 12.8 CPU-ms a MB.
FITTED = Params(6.5e-3, 12.8e-9)
FITTED_SOURCE = 'docs/performance-model.md fit of 2026-11-28 (f 6.5 CPU-ms, beta 12.8 CPU-ms/MB)'
# The fitted parameters varied about this much run to run (the same page).
SPREAD = 0.25
# The parameter server's measured share of a PS cluster's CPU (benchmark 4).
PS_SHARE = {'resnet': 0.08, 'taxi': 0.33}
# One process's CPU-seconds per training example measured here (docs/performance-model.md):
# taxi at batch 128 with one thread ~209k examples per CPU-second; ResNet-44's ops
# in float32 (N1 has no native bfloat16) 960 CPU-ms a 128-example step.
CPU_PER_EXAMPLE = {'taxi': 1 / 209e3, 'resnet-44': 0.960 / 128}
# Taxi's step traffic with its default layers (`benchmarks.cost_model.taxi_facts`):
# 20 tensors, 40,872 bytes.
TAXI_TRAFFIC = (20, 40872)


def resnet_parameters(num_layers: int) -> int:
    """Trainable parameters of the CIFAR ResNet (kernels, batch-norm scales and
    offsets, dense)."""
    blocks = (num_layers - 2) // 6
    total = 27 * 16 + 2 * 16
    previous = 16
    for _, _, channels in STAGES:
        for block in range(blocks):
            cin = previous if block == 0 else channels
            total += 9 * cin * channels + 9 * channels * channels + 4 * channels
        previous = channels
    return total + 64 * 10 + 10


def resnet_facts(num_layers: int) -> Tuple[int, int, int, int]:
    """(variables, parameters, batch-norm layers, batch-norm statistic elements
    updated per step) of the CIFAR ResNet: a kernel per convolution (6n + 1), a
    scale and an offset per batch norm, the dense kernel and bias."""
    convolutions = num_layers - 1
    variables = 3 * convolutions + 2
    blocks = (num_layers - 2) // 6
    channels = 16 + sum(2 * blocks * c for _, _, c in STAGES)
    return variables, resnet_parameters(num_layers), convolutions, 2 * channels


def step_traffic(variables: int, params: int, statistics: int,
                 elements: int) -> Tuple[int, int]:
    """(tensors, bytes) a global step moves between a worker and the ps: every
    variable read and its gradient sent, the batch-norm statistics, the global step."""
    tensors = 2 * variables + 2 * statistics + 2
    return tensors, FLOAT_BYTES * (2 * params + elements)


def resnet_traffic(num_layers: int) -> Tuple[int, int]:
    return step_traffic(*resnet_facts(num_layers))


def fit(overheads: Sequence[float], moved: Sequence[float]) -> Params:
    """(f, beta), neither negative, from measured overheads per step and bytes per
    step: least squares of the relative error, so a 5 ms taxi step weighs as much
    as a 120 ms ResNet one."""
    rows = np.array([[1.0, b] for b in moved])
    weights = np.array([1.0 / o for o in overheads])
    coefficients, *_ = np.linalg.lstsq(rows * weights[:, None], np.ones(len(moved)),
                                       rcond=None)
    return Params(max(0.0, float(coefficients[0])), max(0.0, float(coefficients[1])))


def overhead(params: Params, moved: float) -> float:
    """CPU-seconds a step costs beyond its examples' compute."""
    return params.f_secs + params.beta_secs_per_byte * moved


def efficiency(worker_batch: int, cpu_per_example: float, moved: float,
               params: Params) -> float:
    """Predicted cluster examples per CPU-second / one process's."""
    compute = worker_batch * cpu_per_example
    return compute / (compute + overhead(params, moved))


def network_gbits(vcpus: float) -> float:
    """A VM's egress bandwidth: 2 Gbit/s per vCPU, at most 16 (N1)."""
    return min(2.0 * vcpus, 16.0)


@dataclasses.dataclass(frozen=True)
class Prediction:
    """Examples/sec of a PS cluster, what bounds it, one worker's alone."""
    examples_per_sec: float
    bound: str
    worker_alone: float


def predict_ps(worker_batch: int, cpu_per_example: float, moved: float, ps_share: float,
               params: Params, workers: int, worker_cores: float, ps_cores: float,
               gbits: float) -> Prediction:
    """`workers` training tasks and one parameter server: the least of what the
    workers compute, what the ps's cores and what its network carry. Cores are
    CPU-seconds per second the tasks can spend (N1: two vCPUs per core)."""
    step_overhead = overhead(params, moved)
    ps_cpu = ps_share * (worker_batch * cpu_per_example + step_overhead)
    worker_cpu = worker_batch * cpu_per_example + step_overhead - ps_cpu
    bandwidth = gbits * 1e9 / 8
    step_secs = worker_cpu / worker_cores + ROUND_TRIPS * ROUND_TRIP_SECS + moved / bandwidth
    limits: Dict[str, float] = {
        'workers': workers * worker_batch / step_secs,
        'ps CPU': ps_cores * worker_batch / max(ps_cpu, 1e-12),
        'ps network': bandwidth * worker_batch / max(moved, 1.0)}
    bound = min(limits, key=lambda k: limits[k])
    return Prediction(limits[bound], bound, worker_batch / (worker_cpu / worker_cores))


def predict_allreduce(worker_batch: int, cpu_per_example: float, moved: Optional[float],
                      params: Params, replicas: int, cores: float, gbits: float) -> float:
    """Examples/sec of synchronous all-reduce training over `replicas` machines, each
    computing its own `worker_batch` a step (docs/distributed.md: batch sizes stay per
    worker), plus a ring all-reduce of the gradients (`moved / 2` bytes, sent
    2 (n-1)/n times) at the VM's bandwidth and the fixed per-step cost `f` (not
    fitted on all-reduce: an assumption)."""
    compute = worker_batch * cpu_per_example / cores
    network = 2 * (replicas - 1) / replicas * (moved or 0.0) / 2 / (gbits * 1e9 / 8)
    return replicas * worker_batch / (compute + network + params.f_secs)


def local_cluster_rate(worker_batch: int, cpu_per_example: float, moved: float,
                       params: Params, trainers: int, parameter_servers: int, cpus: float,
                       threads_per_task: Optional[float]) -> float:
    """Examples/sec of a cluster whose tasks all share this machine's `cpus` (the
    backtest, `benchmarks/backtest.py`): every global step costs CPU-seconds of all
    tasks together, spent on at most `cpus` CPUs (fewer when each task keeps only
    `threads_per_task` busy).

    With parameter servers a global step is one worker's batch: `b c + f + beta B`.
    Without (synchronous all-reduce) it is every worker's batch, each worker paying
    `f` and `beta` for the gradients it sends and receives (2 (n-1)/n of `B / 2`).
    """
    tasks = trainers + parameter_servers
    busy = min(cpus, tasks * threads_per_task) if threads_per_task else cpus
    if parameter_servers:
        return busy * worker_batch / (worker_batch * cpu_per_example + overhead(params, moved))
    exchanged = 2 * (trainers - 1) / trainers * moved / 2
    step_cpu = trainers * (worker_batch * cpu_per_example + overhead(params, exchanged))
    return busy * trainers * worker_batch / step_cpu
