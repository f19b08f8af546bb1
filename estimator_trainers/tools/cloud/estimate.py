"""What a cloud job will cost and take, before it runs, and what it did, after.

`make` prices each worker pool (replicas x (machine + GPUs), `pricing`) and
predicts the job's time from the best evidence at hand:

1. a run record (`run_record`: a rehearsal's, or any job-dir's given with
   `--throughput-from`): its examples/sec per training task and the CPU it
   used for them, its start-up, evaluation and checkpoint time per step;
2. else the measured CPU cost per example of this project's trainers
   (`perf_model.CPU_PER_EXAMPLE`);
3. else the time is unknown and only the hourly price is given.

Either way a task's CPU cost per example is spread over its machine's vCPUs
(those its threads can use), each worth 0.5 to 1 CPU of the machine that
measured it (`VCPU_SPEED`: N1 vCPUs are hyperthreads of older cores), and a
cluster adds `perf_model`'s per-step costs: a parameter-server cluster the
fitted fixed and per-byte costs (+-`perf_model.SPREAD`) and its ps's bounds,
an all-reduce cluster its gradient exchange. GPU pools and models whose step
traffic is unknown get no predicted cluster time. The range is low-high with
every assumption named; a cluster predicted to be slower, or dearer per
example, than one machine of its chief's pool is called out.

The budget (`--max-cost`): `check_budget` refuses a job whose high estimate
exceeds it, `budget_timeout` is the `scheduling.timeout` that stops the job
before it spends it at the table's rates. `labels` carry the run id billing
exports group by, and the estimate, which `after_job` reads back beside the
metered time (`startTime` to `endTime`) of a finished job.
"""
import argparse
import dataclasses
import datetime
import hashlib
import json
import math
import os
import re
from typing import Any, Dict, List, Mapping, Optional, Sequence, TextIO, Tuple

from estimator_trainers import cluster as cluster_lib
from estimator_trainers import perf_model
from estimator_trainers import run_record
from estimator_trainers import safe_io
from estimator_trainers import user_files
from estimator_trainers.errors import UserInputError
from estimator_trainers.tools.cloud import configs
from estimator_trainers.tools.cloud import machines
from estimator_trainers.tools.cloud import pricing
from estimator_trainers.tools.cloud import roles
from estimator_trainers.tools.cloud.plan import JobPlan

# A vCPU of the cloud machine against a CPU of the machine that measured: N1
# vCPUs are hyperthreads of cores older than this machine's (an assumption).
VCPU_SPEED = (0.5, 1.0)
# Machine provisioning and the image's start before the first step (assumed).
PROVISION_SECS = (60.0, 600.0)
# The trainers' own start-up when no record measured it (RESULTS.md §5:
# taxi 5.3, ResNet-44 13.7 CPU-s to the first step).
TRAINER_STARTUP_SECS = (5.0, 15.0)
LABEL_RUN_ID = 'et-run-id'
LABEL_COST = 'et-estimate-cents'
LABEL_SECS = 'et-estimate-secs'
LABEL_TABLE = 'et-price-table'
# The roles that train (a global step is their batches).
CLUSTER_ROLES = (roles.CHIEF, roles.WORKER)


@dataclasses.dataclass(frozen=True)
class PoolSpec:
    """A worker pool as priced: role, replicas, machine, GPUs."""
    role: str
    replicas: int
    machine_type: str
    accelerator_type: Optional[str] = None
    accelerator_count: int = 0

    @property
    def shape(self) -> str:
        gpus = (' + %d x %s' % (self.accelerator_count, self.accelerator_type)
                if self.accelerator_type else '')
        return '%d x %s%s' % (self.replicas, self.machine_type, gpus)


@dataclasses.dataclass(frozen=True)
class Workload:
    """What the job trains, from the trainer's parsed flags."""
    trainer: Optional[str] = None
    train_steps: Optional[int] = None
    batch_size: Optional[int] = None
    num_layers: Optional[int] = None
    intra_threads: Optional[int] = None

    @property
    def model_key(self) -> Optional[str]:
        if self.trainer == 'taxi':
            return 'taxi'
        if self.trainer == 'cifar10':
            return 'resnet'
        return None

    @property
    def traffic_bytes(self) -> Optional[int]:
        """Bytes a PS step moves for this model (`perf_model`), None when unknown."""
        if self.model_key == 'taxi':
            return perf_model.TAXI_TRAFFIC[1]
        if self.model_key == 'resnet' and self.num_layers:
            return perf_model.resnet_traffic(self.num_layers)[1]
        return None

    @property
    def modelled_cpu_per_example(self) -> Optional[float]:
        """CPU-seconds per example measured for this trainer (float32 ResNets scaled by
        depth from ResNet-44's), None without a measurement."""
        if self.model_key == 'taxi':
            return perf_model.CPU_PER_EXAMPLE['taxi']
        if self.model_key == 'resnet' and self.num_layers:
            return perf_model.CPU_PER_EXAMPLE['resnet-44'] * (self.num_layers - 2) / 42
        return None


def workload(trainer: Optional[str], parsed: Any) -> Workload:
    """The `Workload` of a trainer's parsed flags (None: not a trainer of this project)."""
    if parsed is None:
        return Workload(trainer)
    batch = getattr(parsed, 'batch_size', None) or getattr(parsed, 'train_batch_size', None)
    return Workload(trainer, getattr(parsed, 'train_steps', None), batch,
                    getattr(parsed, 'num_layers', None),
                    getattr(parsed, 'num_intra_threads', None))


@dataclasses.dataclass(frozen=True)
class Evidence:
    """A measured run, reduced to what scales to other machines.

    Attributes:
      source: the record and its session's date, for the assumption line.
      cpu_per_example: CPU-seconds a training task spent per example there.
      cpus_used: the CPUs a task kept busy; None when it may use more (it
        had all it could get).
      startup_secs: process start to the first step.
      overhead_secs_per_step: evaluation and checkpoints per global step.
      steps: global steps of the session; examples_per_step: per global step.
    """
    source: str
    cpu_per_example: float
    cpus_used: Optional[float]
    startup_secs: float
    overhead_secs_per_step: float
    steps: int
    examples_per_step: int

    def as_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)


def evidence_of(session: Mapping[str, Any], source: str) -> Optional[Evidence]:
    """The `Evidence` of a run record session; None without a training rate."""
    steps = session.get('steps') or {}
    done = int((steps.get('to') or 0) - (steps.get('from') or 0))
    workers = session.get('workers') or {}
    rates = [float(w['examples_per_sec']) for w in workers.values()
             if isinstance(w, Mapping) and w.get('examples_per_sec')]
    rate = sum(rates) / len(rates) if rates else float(session.get('examples_per_sec') or 0)
    if rate <= 0 or done <= 0:
        return None
    phases = session.get('phases') or {}
    cluster = session.get('cluster') or {}
    tasks = sum(int(v) for k, v in cluster.items() if k in cluster_lib.TASK_TYPES) or 1
    cpus = int((session.get('hardware') or {}).get('cpu_cores') or 1)
    share = cpus / tasks  # the CPUs one local task could have
    wall = float(session.get('wall_secs') or 0)
    used = float(session.get('cpu_secs') or 0) / wall if wall > 0 and tasks == 1 else share
    used = min(max(used, 0.1), share)
    overhead = float(phases.get('evaluating_secs') or 0) + float(
        phases.get('checkpointing_secs') or 0)
    return Evidence(
        source='%s (session of %s)' % (source, session.get('started_at', '?')),
        cpu_per_example=used / rate,
        cpus_used=None if used >= 0.85 * share else used,
        startup_secs=float(phases.get('startup_secs') or 0),
        overhead_secs_per_step=overhead / done, steps=done,
        examples_per_step=int(session.get('examples_per_global_step') or 0))


def read_evidence(path: str) -> Evidence:
    """The newest succeeded session of the run record at `path` (a job-dir, or its
    `run_record.json`).

    Raises:
      UserInputError: no record, or no succeeded session with a training rate.
    """
    job_dir = os.path.dirname(path) if path.endswith('.json') else path
    sessions = [s for s in run_record.read(job_dir) if s.get('status') == run_record.SUCCEEDED]
    found = evidence_of(sessions[-1], run_record.path(job_dir)) if sessions else None
    if found is None:
        raise UserInputError('--throughput-from %s: no succeeded training session with a '
                             'rate in %s' % (path, run_record.path(job_dir)),
                             flag='--throughput-from')
    return found


# ---------------------------------------------------------------- rehearsals kept


def rehearsal_key(module: Optional[str], args: Sequence[str]) -> str:
    """What identifies a rehearsal's job for later estimates: its module and its
    flags without `--job-dir` (which names each job)."""
    kept = [a for a in args if not a.startswith('--job-dir')]
    return hashlib.sha256(json.dumps([module, kept]).encode()).hexdigest()[:16]


def _rehearsal_key(plan: JobPlan) -> str:
    """`rehearsal_key` of a plan: only a trainer of this project's rehearsals are kept."""
    return rehearsal_key(plan.declared.module if plan.declared else None, plan.task_args())


def rehearsals_dir(environ: Optional[Mapping[str, str]] = None) -> str:
    return os.path.join(os.path.dirname(pricing.cache_path(environ)), 'rehearsals')


def remember(key: str, evidence: Evidence, environ: Optional[Mapping[str, str]] = None
             ) -> str:
    """Keeps a rehearsal's evidence where later estimates of the same job find it."""
    path = os.path.join(rehearsals_dir(environ), key + '.json')
    os.makedirs(os.path.dirname(path), exist_ok=True)
    safe_io.write_atomic(path, evidence.as_json() + '\n')
    return path


def remembered(key: str, environ: Optional[Mapping[str, str]] = None) -> Optional[Evidence]:
    """The evidence `remember` kept for `key`, or None (none, or unreadable)."""
    path = os.path.join(rehearsals_dir(environ), key + '.json')
    try:
        data = user_files.read_json(path, 'rehearsal measurements %s' % path, optional=True)
        return Evidence(**data) if isinstance(data, dict) else None
    except (UserInputError, TypeError):
        return None


# ------------------------------------------------------------------- the estimate


@dataclasses.dataclass(frozen=True)
class PoolPrice:
    """A pool's price per hour (all its replicas), or what has no price."""
    pool: PoolSpec
    usd_per_hour: Optional[float]
    missing: Tuple[str, ...] = ()
    read_on: Optional[datetime.date] = None
    derived: bool = False


@dataclasses.dataclass(frozen=True)
class Estimate:
    """Prices per pool, the predicted time range, and what they rest on."""
    pools: Tuple[PoolPrice, ...]
    region: str
    spot: bool
    low_secs: Optional[float]
    high_secs: Optional[float]
    time_source: str
    assumptions: Tuple[str, ...]
    notes: Tuple[str, ...]
    warnings: Tuple[str, ...]
    table: str

    @property
    def usd_per_hour(self) -> Optional[float]:
        prices = [p.usd_per_hour for p in self.pools]
        return None if any(p is None for p in prices) else sum(p or 0 for p in prices)

    def cost(self, secs: Optional[float]) -> Optional[float]:
        per_hour = self.usd_per_hour
        return None if per_hour is None or secs is None else per_hour * secs / 3600

    @property
    def cost_range(self) -> Tuple[Optional[float], Optional[float]]:
        return self.cost(self.low_secs), self.cost(self.high_secs)


def price_pool(table: pricing.PriceTable, region: str, pool: PoolSpec, spot: bool) -> PoolPrice:
    machine = table.machine(region, pool.machine_type, spot)
    quotes = [machine]
    missing = [] if machine else [pool.machine_type]
    per_replica = machine.usd_per_hour if machine else 0.0
    if pool.accelerator_type and pool.accelerator_count:
        gpu = table.accelerator(region, pool.accelerator_type, spot)
        quotes.append(gpu)
        if gpu:
            per_replica += pool.accelerator_count * gpu.usd_per_hour
        else:
            missing.append(pool.accelerator_type)
    found = [q for q in quotes if q]
    return PoolPrice(pool, None if missing else pool.replicas * per_replica, tuple(missing),
                     min((q.read_on for q in found), default=None),
                     any(q.derived for q in found))


def _rate_range(cpu_per_example: float, vcpus: float, threads: Optional[float]
                ) -> Tuple[float, float]:
    usable = min(vcpus, threads) if threads else vcpus
    return (usable * VCPU_SPEED[0] / cpu_per_example, usable * VCPU_SPEED[1] / cpu_per_example)


def _cluster_rates(pools: Mapping[str, PoolSpec], work: Workload, cpu_per_example: float,
                   threads: Optional[float], batch: int) -> Tuple[Optional[Tuple[float, float]],
                                                                 str]:
    """(low, high) examples/sec of the training tasks together, and the model used."""
    chief = pools[roles.CHIEF]
    trainers = sum(pools[r].replicas for r in CLUSTER_ROLES if r in pools)
    vcpus = machines.shape(chief.machine_type)[0]
    single = _rate_range(cpu_per_example, vcpus, threads)
    if trainers == 1 and roles.PS not in pools:
        return single, 'one machine'
    moved = work.traffic_bytes
    if moved is None:
        return None, 'the per-step traffic of this model is unknown to the model'
    rates = []
    for speed, spread in ((VCPU_SPEED[0], 1 + perf_model.SPREAD),
                          (VCPU_SPEED[1], 1 - perf_model.SPREAD)):
        params = perf_model.Params(perf_model.FITTED.f_secs * spread,
                                   perf_model.FITTED.beta_secs_per_byte * spread)
        cores = (min(vcpus, threads) if threads else vcpus) * speed
        if roles.PS in pools:
            ps_vcpus = machines.shape(pools[roles.PS].machine_type)[0]
            share = perf_model.PS_SHARE.get(work.model_key or '', 0.2)
            found = perf_model.predict_ps(batch, cpu_per_example, moved, share, params,
                                          trainers, cores, ps_vcpus * speed * pools[roles.PS].replicas,
                                          perf_model.network_gbits(ps_vcpus))
            rates.append(found.examples_per_sec)
        else:
            rates.append(perf_model.predict_allreduce(batch, cpu_per_example, moved, params,
                                                      trainers, cores,
                                                      perf_model.network_gbits(vcpus)))
    kind = ('parameter servers: %s' % perf_model.FITTED_SOURCE if roles.PS in pools else
            'all-reduce: each worker\'s batch, the gradients over the VM network plus f (not '
            'fitted on all-reduce)')
    return (min(rates), max(rates)), kind


def make(pools: Sequence[PoolSpec], region: str, spot: bool, work: Workload,
         table: pricing.PriceTable, evidence: Optional[Evidence] = None,
         today: Optional[datetime.date] = None) -> Estimate:
    """The estimate of a job (see the module's docstring)."""
    today = today or datetime.date.today()
    prices = tuple(price_pool(table, region, pool, spot) for pool in pools)
    assumptions, warnings = _price_lines(table, spot, prices, today)
    by_role = {p.role: p for p in pools}
    notes: List[str] = []
    low = high = None
    cpu, threads, source = _throughput(work, evidence)
    steps = work.train_steps or (evidence.steps if evidence else None)
    # The job's own per-worker batch; a record's examples per step only without one.
    batch = work.batch_size or (evidence.examples_per_step if evidence else None)
    uses_gpus = any(p.accelerator_count for p in pools if p.role in CLUSTER_ROLES)
    if uses_gpus:
        source = 'unknown: GPU throughput is not modelled'
    elif cpu and steps and batch and roles.CHIEF in by_role:
        rates, kind = _cluster_rates(by_role, work, cpu, threads, batch)
        if roles.PS not in by_role:  # all-reduce: a global step is every worker's batch
            batch *= sum(by_role[r].replicas for r in CLUSTER_ROLES if r in by_role)
        if rates is None:
            source = 'unknown: %s' % kind
        else:
            startup = evidence.startup_secs if evidence else None
            start = ((PROVISION_SECS[0] + (startup or TRAINER_STARTUP_SECS[0])),
                     (PROVISION_SECS[1] + (startup or TRAINER_STARTUP_SECS[1])))
            extra = evidence.overhead_secs_per_step * steps if evidence else 0.0
            low = start[0] + steps * batch / rates[1] + extra
            high = start[1] + steps * batch / rates[0] + extra
            assumptions += [
                'throughput: %s, %d steps of %d examples, %s' % (source, steps, batch, kind),
                'a vCPU there does %.1f-%.1f of a CPU here%s' % (
                    VCPU_SPEED[0], VCPU_SPEED[1],
                    '; the trainer keeps %.1f CPUs busy' % threads if threads else ''),
                'start-up: %.0f-%.0f s provisioning (assumed) + %s' % (
                    PROVISION_SECS[0], PROVISION_SECS[1],
                    '%.0f s measured' % startup if startup else '%.0f-%.0f s trainer start-up '
                    '(RESULTS.md §5)' % TRAINER_STARTUP_SECS),
                'evaluation and checkpoints: %s' % (
                    '%.0f s measured per 1000 steps' % (1000 * evidence.overhead_secs_per_step)
                    if evidence else 'not modelled')]
            notes += _cheaper_shape(by_role, prices, rates, cpu, threads, table, region, spot)
    elif not steps and cpu:
        source = 'unknown: no --train-steps'
    return Estimate(prices, region, spot, low, high, source, tuple(assumptions),
                    tuple(notes), tuple(warnings), table.describe())


def _price_lines(table: pricing.PriceTable, spot: bool, prices: Sequence[PoolPrice],
                 today: datetime.date) -> Tuple[List[str], List[str]]:
    """`(assumptions, warnings)` of the prices: the table, derived prices, stale ones."""
    assumptions = ['prices: %s%s' % (table.describe(), ', Spot' if spot else '')]
    warnings = []
    dates = [p.read_on for p in prices if p.read_on]
    if dates:
        stale = pricing.stale_warning(min(dates), today, 'the prices of this estimate')
        if stale:
            warnings.append(stale)
    if any(p.derived for p in prices):
        assumptions.append('some prices are derived, not listed (the table\'s source column '
                           'says how)')
    return assumptions, warnings


def _throughput(work: Workload, evidence: Optional[Evidence]
                ) -> Tuple[Optional[float], Optional[float], str]:
    """`(CPU seconds per example, CPUs the trainer keeps busy, where from)`: a
    rehearsal's or run's measurement, else the performance model."""
    cpu: Optional[float]
    threads: Optional[float]
    if evidence:
        cpu, threads = evidence.cpu_per_example, evidence.cpus_used
        return cpu, threads, 'measured: %s' % evidence.source
    cpu, threads = work.modelled_cpu_per_example, work.intra_threads or None
    return cpu, threads, ('the performance model alone (docs/performance-model.md: %s)'
                          % work.model_key if cpu else 'unknown')


def _cheaper_shape(pools: Mapping[str, PoolSpec], prices: Sequence[PoolPrice],
                   rates: Tuple[float, float], cpu: float, threads: Optional[float],
                   table: pricing.PriceTable, region: str, spot: bool) -> List[str]:
    """One line when one machine of the chief's pool beats the cluster: the cluster is
    predicted slower, or dearer per example by more than the model's spread."""
    trainers = sum(pools[r].replicas for r in CLUSTER_ROLES if r in pools)
    if trainers == 1 and roles.PS not in pools:
        return []
    chief = pools[roles.CHIEF]
    alone = price_pool(table, region, dataclasses.replace(chief, replicas=1), spot)
    total = [p.usd_per_hour for p in prices]
    if alone.usd_per_hour is None or any(t is None for t in total):
        return []
    single = _rate_range(cpu, machines.shape(chief.machine_type)[0], threads)
    mid, single_mid = sum(rates) / 2, sum(single) / 2
    cluster_cost = sum(t or 0 for t in total) / mid
    single_cost = alone.usd_per_hour / single_mid
    if mid >= single_mid and cluster_cost <= single_cost * (1 + perf_model.SPREAD):
        return []  # within the model's spread of one machine's cost per example
    return ['this cluster is predicted to train %s (%.0f examples/s for $%.2f/h) and to cost '
            '%.1fx per example what one %s alone does (%.0f examples/s for $%.2f/h): train on '
            'one machine (scaleTier BASIC, or masterType %s without workers and parameter '
            'servers)' % ('slower than one machine' if mid < single_mid else 'faster',
                          mid, sum(t or 0 for t in total), cluster_cost / single_cost,
                          chief.machine_type, single_mid, alone.usd_per_hour,
                          chief.machine_type)]


def _duration(secs: float) -> str:
    if secs < 90:
        return '%.0f s' % secs
    if secs < 5400:
        return '%.0f min' % (secs / 60)
    return '%.1f h' % (secs / 3600)


def _usd(value: Optional[float]) -> str:
    return 'unknown' if value is None else '$%.2f' % value


def lines(estimate: Estimate) -> List[str]:
    """The estimate as the fronts print it (stderr), one pool a line, then the total."""
    out = []
    span = (None if estimate.low_secs is None or estimate.high_secs is None else
            (estimate.low_secs, estimate.high_secs))
    for price in estimate.pools:
        pool = price.pool
        cost = ('' if span is None or price.usd_per_hour is None else
                ', %s-%s' % (_usd(price.usd_per_hour * span[0] / 3600),
                             _usd(price.usd_per_hour * span[1] / 3600)))
        out.append('estimate: %-9s %s: %s/h%s%s' % (
            pool.role, pool.shape,
            _usd(price.usd_per_hour) if price.usd_per_hour is not None else 'price unknown',
            cost, ' (no price in the table for %s: `prices refresh` reads them)'
            % ', '.join(price.missing) if price.missing else ''))
    low, high = estimate.cost_range
    per_hour = estimate.usd_per_hour
    if span is None:
        out.append('estimate: total %s/h%s; time %s' % (
            _usd(per_hour) if per_hour is not None else 'unknown', ' (Spot)' if estimate.spot
            else '', estimate.time_source))
    else:
        out.append('estimate: total %s/h%s x %s-%s = %s-%s' % (
            _usd(per_hour), ' (Spot)' if estimate.spot else '', _duration(span[0]),
            _duration(span[1]), _usd(low), _usd(high)))
    out += ['estimate: assumes %s' % a for a in estimate.assumptions]
    out += ['note: %s' % n for n in estimate.notes]
    out += ['warning: %s' % w for w in estimate.warnings]
    return out


# ------------------------------------------------------------------- the budget


def check_budget(estimate: Estimate, max_cost: float, flag: str = '--max-cost') -> None:
    """Refuses a job whose high estimate (or hourly price, without a time) exceeds
    `max_cost`, or that cannot be priced.

    Raises:
      UserInputError: naming the flag, the estimate and the limit.
    """
    per_hour = estimate.usd_per_hour
    if per_hour is None:
        raise UserInputError('%s %.2f: the job cannot be priced (%s has no price in the '
                             'table); `prices refresh` reads current prices' % (
                                 flag, max_cost, ', '.join(
                                     m for p in estimate.pools for m in p.missing)), flag=flag)
    high = estimate.cost_range[1]
    if high is not None and high > max_cost:
        raise UserInputError('%s %.2f: the job is estimated to cost up to $%.2f (%s/h for up '
                             'to %s); raise the budget, shorten the job or pick a cheaper '
                             'shape' % (flag, max_cost, high, _usd(per_hour),
                                        _duration(estimate.high_secs or 0)), flag=flag)


def budget_timeout(estimate: Estimate, max_cost: float) -> Optional[str]:
    """The `scheduling.timeout` (a google-duration) after which the job has spent
    `max_cost` at the table's rates; None when it cannot be priced."""
    per_hour = estimate.usd_per_hour
    if not per_hour:
        return None
    return '%ds' % max(1, math.floor(max_cost / per_hour * 3600))


def run_id(job_name: str) -> str:
    """The job's run id, a label value billing exports group by: its name, lowercased,
    with what labels refuse made dashes, at most 63 characters."""
    return re.sub(r'[^a-z0-9_-]', '-', job_name.lower())[:63]


def labels(estimate: Estimate, run_id: str) -> Dict[str, str]:
    """The job's labels: its run id and the estimate (label values: digits and dashes)."""
    found = {LABEL_RUN_ID: run_id, LABEL_TABLE: _table_date(estimate)}
    low, high = estimate.cost_range
    if low is not None and high is not None:
        found[LABEL_COST] = '%d-%d' % (round(low * 100), round(high * 100))
        found[LABEL_SECS] = '%d-%d' % (round(estimate.low_secs or 0),
                                       round(estimate.high_secs or 0))
    return {k: v for k, v in found.items() if v}


def _table_date(estimate: Estimate) -> str:
    dates = [p.read_on for p in estimate.pools if p.read_on]
    return min(dates).isoformat() if dates else ''


# ---------------------------------------------------------------- after the job


def _time(text: str) -> datetime.datetime:
    """An RFC 3339 time of the API (`2026-11-28T10:00:00.123456Z`)."""
    text = re.sub(r'(\.\d{6})\d*', r'\1', text.replace('Z', '+00:00'))
    return datetime.datetime.fromisoformat(text)


def job_pools(job: Mapping[str, Any]) -> List[PoolSpec]:
    """The pools of a CustomJob (or a tuning job's trial spec) resource."""
    spec = job.get('jobSpec') or job.get('trialJobSpec') or {}
    found = []
    for index, pool in enumerate(spec.get('workerPoolSpecs') or []):
        machine = (pool or {}).get('machineSpec')
        if not machine:
            continue
        found.append(PoolSpec(roles.NAMES[min(index, len(roles.NAMES) - 1)],
                              int(pool.get('replicaCount') or 1), machine['machineType'],
                              machine.get('acceleratorType'),
                              int(machine.get('acceleratorCount') or 0)))
    return found


def after_job(job: Mapping[str, Any], table: pricing.PriceTable,
              today: Optional[datetime.date] = None) -> List[str]:
    """What a finished job cost at the table's rates, beside its estimate (from its
    labels); [] while it has not ended or ran no machines."""
    if not (job.get('startTime') and job.get('endTime')):
        return []
    secs = (_time(job['endTime']) - _time(job['startTime'])).total_seconds()
    region = str(job.get('name', '')).split('/locations/')[-1].split('/')[0]
    spot = ((job.get('jobSpec') or {}).get('scheduling') or {}).get('strategy') == 'SPOT'
    out = []
    total: Optional[float] = 0.0
    for pool in job_pools(job):
        price = price_pool(table, region, pool, spot)
        cost = None if price.usd_per_hour is None else price.usd_per_hour * secs / 3600
        total = None if total is None or cost is None else total + cost
        out.append('cost: %-9s %s: %s metered (startTime to endTime) x %s/h = %s' % (
            pool.role, pool.shape, _duration(secs), _usd(price.usd_per_hour), _usd(cost)))
    labels_ = job.get('labels') or {}
    estimated = labels_.get(LABEL_COST, '')
    match = re.fullmatch(r'(\d+)-(\d+)', estimated)
    secs_match = re.fullmatch(r'(\d+)-(\d+)', labels_.get(LABEL_SECS, ''))
    out.append('cost: total %s at the table\'s list rates%s; estimated %s' % (
        _usd(total), ' (Spot)' if spot else '',
        '$%.2f-%.2f over %s-%s' % (int(match.group(1)) / 100, int(match.group(2)) / 100,
                                   _duration(int(secs_match.group(1))),
                                   _duration(int(secs_match.group(2))))
        if match and secs_match else 'nothing (no estimate in the job\'s labels)'))
    if labels_.get(LABEL_RUN_ID):
        out.append('cost: the billed figure: your billing export, label %s=%s '
                   '(docs/cloud.md)' % (LABEL_RUN_ID, labels_[LABEL_RUN_ID]))
    stale = pricing.stale_warning(table.read_on, today or datetime.date.today(),
                                  'the prices of this cost')
    return out + (['warning: %s' % stale] if stale else [])


# ------------------------------------------------------- the pipeline's one call


def pool_specs(pools: Sequence[configs.Pool]) -> List[PoolSpec]:
    """`configs.Pool`s as priced."""
    return [PoolSpec(p.role.name, p.replica_count, p.machine_type, p.accelerator_type,
                     p.accelerator_count) for p in pools]


def for_plan(plan: JobPlan, parsed: Optional[argparse.Namespace], max_cost: Optional[float],
             throughput_from: Optional[str], environ: Mapping[str, str], err: TextIO,
             today: Optional[datetime.date] = None) -> Tuple[JobPlan, Estimate]:
    """Prints the estimate of `plan` (a `plan.JobPlan`) and returns it with the plan to
    run: labelled with a run id and the estimate, and with a budget (`max_cost`, else
    `budget.maxCostUsd`) refused above it or bounded by `scheduling.timeout`.

    Raises:
      UserInputError: the job is estimated above its budget, cannot be priced under
        one, or `throughput_from` holds no usable run record.
    """
    table = pricing.load(environ, warn=lambda text: err.write('warning: %s\n' % text))
    trainer = plan.declared.name if plan.declared else None
    evidence = (read_evidence(throughput_from) if throughput_from else
                remembered(_rehearsal_key(plan), environ))
    config = plan.config
    hp = config.hyperparameters
    found = make(pool_specs(config.pools), plan.region,
                 config.scheduling.strategy == configs.SPOT, workload(trainer, parsed), table,
                 evidence, today)
    if hp is not None:
        found = trials(found, hp.max_trials, hp.max_parallel_trials)
    for line in lines(found):
        err.write(line + '\n')
    scheduling = config.scheduling
    budget = max_cost if max_cost is not None else config.max_cost_usd
    if budget is not None:
        flag = '--max-cost' if max_cost is not None else 'budget.maxCostUsd'
        check_budget(found, budget, flag)
        # A tuning job's timeout bounds each trial: all of them within the budget.
        share = budget * hp.max_parallel_trials / hp.max_trials if hp is not None else budget
        timeout = budget_timeout(found, share)
        if timeout and (scheduling.timeout_secs is None or
                        float(timeout[:-1]) < scheduling.timeout_secs):
            scheduling = dataclasses.replace(scheduling, timeout=timeout)
            err.write('note: %s %.2f: scheduling.timeout %s, the time %s at %s/h\n' % (
                flag, budget, timeout, 'each of the %d trials may take to spend its share'
                % hp.max_trials if hp is not None else 'the job takes to spend it',
                _usd(found.usd_per_hour)))
    added = labels(found, run_id(plan.name))
    if len(config.labels) + len(added) > 64:
        added = {LABEL_RUN_ID: added[LABEL_RUN_ID]} if len(config.labels) < 64 else {}
    err.write('estimate: run id %s (label %s: billing exports group the job\'s costs by it)\n'
              % (added.get(LABEL_RUN_ID, 'not set: the job has 64 labels'), LABEL_RUN_ID))
    return dataclasses.replace(plan, config=dataclasses.replace(
        config, scheduling=scheduling, labels=dict(config.labels, **added))), found


def trials(found: Estimate, max_trials: int, parallel: int) -> Estimate:
    """A tuning job's estimate from one trial's: `parallel` trials at once, in
    `ceil(max_trials / parallel)` waves."""
    waves = math.ceil(max_trials / parallel)
    pools = tuple(dataclasses.replace(p, pool=dataclasses.replace(
        p.pool, replicas=p.pool.replicas * parallel),
        usd_per_hour=None if p.usd_per_hour is None else p.usd_per_hour * parallel)
        for p in found.pools)
    return dataclasses.replace(
        found, pools=pools,
        low_secs=None if found.low_secs is None else found.low_secs * waves,
        high_secs=None if found.high_secs is None else found.high_secs * waves,
        assumptions=found.assumptions + ('%d trials, %d at a time (%d waves of one trial\'s '
                                         'time)' % (max_trials, parallel, waves),))


def keep_rehearsal(plan: JobPlan, err: TextIO, environ: Mapping[str, str],
                   job_dir: Optional[str] = None) -> None:
    """After a rehearsal passed: keeps its run record's measurements for the
    estimates of the same job (`remembered`), when its job-dir is on this machine
    (`job_dir`: where it is kept there, a rehearsal on local storage's mirror)."""
    job_dir = job_dir or plan.trainer_job_dir
    if not plan.declared or not job_dir:
        return
    if job_dir.startswith('gs://'):
        err.write('note: to estimate from this rehearsal\'s measurements, add '
                  '--throughput-from %s to the dry run or submission\n' % job_dir)
        return
    try:
        evidence = read_evidence(job_dir)
    except UserInputError as e:
        err.write('note: the rehearsal\'s measurements are not kept: %s\n' % e)
        return
    path = remember(_rehearsal_key(plan), evidence, environ)
    err.write('note: the rehearsal\'s measurements are kept for this job\'s estimates (%s)\n'
              % path)


def add_flags(parser: Any) -> None:
    """The `submit` flags of the estimate and the budget (both fronts)."""
    from estimator_trainers import flags  # pylint: disable=import-outside-toplevel
    parser.add_argument('--max-cost', type=flags.positive_float, metavar='USD',
                        help='Refuse the job when its high estimate exceeds USD, and set '
                             'Vertex AI\'s scheduling.timeout so that it stops before it '
                             'spends USD at the price table\'s rates (default: the config\'s '
                             'budget.maxCostUsd).')
    parser.add_argument('--throughput-from', metavar='JOB_DIR',
                        help='Predict the time from the run record of this job-dir (or '
                             'run_record.json), e.g. a rehearsal\'s (default: the last '
                             'rehearsal of the same job on this machine, else the '
                             'performance model).')


def add_prices_command(commands: Any) -> None:
    """`prices show|refresh`: the price table in use, and its refresh."""
    prices = commands.add_parser(
        'prices', help='show or refresh the Vertex AI training price table',
        description='Show the Vertex AI custom-training price table the estimates use, or '
                    'refresh it from the Cloud Billing Catalog API into %s.'
                    % pricing.cache_path())
    prices.add_argument('action', choices=('show', 'refresh'),
                        help='show: the table in use and its dates; refresh: read the '
                             'current list prices (API key or Application Default '
                             'Credentials).')
    prices.add_argument('--api-key', help='A Google Cloud API key for the Billing Catalog '
                        '(env GOOGLE_API_KEY; else Application Default Credentials).')
    prices.add_argument('--region', help='show: only this region.')


def prices_command(args: Any, backend: Any, out: Any, err: Any,
                   environ: Mapping[str, str], today: Optional[datetime.date] = None) -> int:
    """Runs `prices show|refresh`; returns the exit code."""
    from estimator_trainers.tools.cloud import api  # pylint: disable=import-outside-toplevel
    today = today or datetime.date.today()
    if args.action == 'show':
        table = pricing.load(environ, warn=lambda text: err.write('warning: %s\n' % text))
        out.write('%s\n' % table.describe())
        for rate in table.rates:
            if args.region in (None, rate.region):
                out.write('%-13s %-7s %-22s %-9s %12.8f  %s %s: %s\n' % (
                    rate.region, rate.kind, rate.name, rate.pricing, rate.usd_per_hour,
                    rate.read_on.isoformat(), rate.status, rate.source))
        stale = pricing.stale_warning(table.read_on, today, 'some of these prices')
        if stale:
            err.write('warning: %s\n' % stale)
        return 0
    key = args.api_key or environ.get('GOOGLE_API_KEY')
    if key:
        import httplib2  # pylint: disable=import-outside-toplevel
        from estimator_trainers import google_api  # pylint: disable=import-outside-toplevel
        http = httplib2.Http(timeout=google_api.TIMEOUT_SECS)
    else:
        credentials, _ = backend.credentials()
        http = api.authorized_http(credentials)
    billing = api.build('cloudbilling', 'v1', http)
    found = pricing.refresh(billing, today, key,
                            progress=lambda text: err.write('%s\n' % text))
    if not found.rates:
        raise UserInputError('the Cloud Billing Catalog gave no Vertex AI training price this '
                             'tool can read (%d training SKUs skipped); the table in use is '
                             'unchanged' % len(found.skipped))
    path = pricing.cache_path(environ)
    pricing.write_table(path, found.rates)
    regions = sorted({rate.region for rate in found.rates})
    out.write('wrote %d training rates of services/%s in %d regions to %s\n'
              % (len(found.rates), found.service, len(regions), path))
    for reason in found.skipped:
        err.write('skipped: %s\n' % reason)
    return 0


def print_cost(job: Mapping[str, Any], stream: Any, environ: Mapping[str, str]) -> None:
    """`after_job`'s lines of a job resource (`status`, `logs`, `jobs describe`)."""
    table = pricing.load(environ, warn=lambda text: stream.write('warning: %s\n' % text))
    for line in after_job(job, table):
        stream.write(line + '\n')


def as_json(found: Estimate) -> str:
    """The figures of an estimate, one JSON line (`--estimate-only`, for sweeps)."""
    low, high = found.cost_range
    return json.dumps({'usd_per_hour': found.usd_per_hour, 'low_usd': low, 'high_usd': high,
                       'low_secs': found.low_secs, 'high_secs': found.high_secs,
                       'time': found.time_source}, sort_keys=True)


def sweep_lines(figures: Sequence[Mapping[str, Any]]) -> List[str]:
    """The sum of a sweep's jobs (`as_json` figures): the cost range of those with a
    predicted time, the hourly price of the others."""
    timed = [f for f in figures if f.get('low_usd') is not None]
    hourly = [f for f in figures if f.get('low_usd') is None]
    lines_ = ['estimate: the sweep\'s %d job%s: %s-%s for the %d with a predicted time' % (
        len(figures), '' if len(figures) == 1 else 's', _usd(sum(f['low_usd'] for f in timed)),
        _usd(sum(f['high_usd'] for f in timed)), len(timed))]
    if hourly:
        priced = [f['usd_per_hour'] for f in hourly if f.get('usd_per_hour') is not None]
        lines_.append('estimate: %d more have no predicted time: %s/h together%s' % (
            len(hourly), _usd(sum(priced)), '' if len(priced) == len(hourly) else
            ' (%d of them not priced)' % (len(hourly) - len(priced))))
    return lines_
