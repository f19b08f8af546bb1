"""Backtest of the cost estimates: predict a local cluster from one process, then run it.

For each shipped cluster config (configs/config_ps.yaml and cmle_config.yaml:
parameter servers; config_mwms.yaml: all-reduce) and trainer (taxi, and the
CIFAR-10 ResNet), on this machine:

1. one process trains the job's steps (the rehearsal of one replica): its
   run record is the evidence (`estimate.read_evidence`: CPU per example,
   CPUs kept busy, start-up, evaluation and checkpoints per step);
2. the model predicts the local cluster of the config's shape, every task
   sharing this machine's CPUs (`perf_model.local_cluster_rate`, with `f`
   and `beta` fitted to benchmark 4's four trainers, the small-step taxi
   ones among them, else `perf_model.FITTED`);
3. the cluster runs (`python -m estimator_trainers.tools.launcher`, the
   launcher of `train-local.sh --distributed`) and its chief's run record
   gives the measured training time (first to last step) and wall time.

The table is prediction against measurement (`report.py` renders it into
RESULTS.md, "Cost estimates checked"). Run it on a quiet machine:
wall-clock figures taken while others work mean nothing.

    python -m benchmarks.backtest --cifar-data-dir D --taxi-train-files F... \
        --taxi-eval-files F... [--quick]
"""
import argparse
import json
import os
import subprocess
import tempfile
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from benchmarks import common
from benchmarks import cost_model
from estimator_trainers import perf_model
from estimator_trainers import run_record
from estimator_trainers.tools.cloud import configs
from estimator_trainers.tools.cloud import estimate

CONFIGS = {'ps': 'config_ps.yaml', 'cifar-ps': 'cmle_config.yaml', 'mwms': 'config_mwms.yaml'}
# (trainer, config, steps, quick steps): the shipped shapes for each trainer.
CASES = (('taxi', 'ps', 6000, 300), ('taxi', 'mwms', 3000, 150),
         ('cifar10', 'cifar-ps', 120, 6), ('cifar10', 'mwms', 60, 4))


def _shape(name: str) -> Tuple[int, int]:
    """(training tasks besides the chief, parameter servers) of a shipped config."""
    pools = {p.role.name: p.replica_count for p in configs.load_config(
        os.path.join(common.REPO_ROOT, 'configs', CONFIGS[name])).pools}
    return pools.get('worker', 0), pools.get('ps', 0)


def _trainer_argv(trainer: str, args: argparse.Namespace,
                  quick: bool) -> Tuple[List[Any], int, Optional[int]]:
    """(module and flags, batch, layers or None)."""
    if trainer == 'taxi':
        return (['taxi_estimator.task', '--train-files', *args.taxi_train_files,
                 '--eval-files', *args.taxi_eval_files, '--batch-size', 128], 128, None)
    layers = 8 if quick else 20
    batch = 32 if quick else 128
    return (['cifar10_estimator.cifar10_main', '--data-dir', args.cifar_data_dir,
             '--num-layers', layers, '--train-batch-size', batch, '--eval-steps', 1],
            batch, layers)


def _params(results_path: Optional[str]) -> Tuple[perf_model.Params, str]:
    """`f` and `beta` fitted to benchmark 4 (taxi's small steps pin `f`), else the
    recorded fit; and where they came from."""
    results: Dict[str, Any] = {}
    if results_path:
        with open(results_path) as stream:
            results = json.load(stream)
    found = cost_model.points(results['cluster']) if 'cluster' in results else {}
    if len(found) >= 3 and any(n.startswith('taxi') for n in found):
        f, beta = cost_model.fit(found, sorted(found))
        return perf_model.Params(f, beta), 'benchmark 4 (%s)' % ', '.join(sorted(found))
    return perf_model.FITTED, perf_model.FITTED_SOURCE


def _run(argv: Sequence[Any], job_dir: str, steps: int,
         launcher: Optional[Sequence[Any]] = None) -> Dict[str, Any]:
    """Runs one process, or the cluster `launcher` args; returns the chief's
    newest session of `job_dir`."""
    train = common.python_module(*argv, '--job-dir', job_dir, '--train-steps', steps,
                                 '--checkpoint-num-steps', steps)
    cmd = (common.python_module('estimator_trainers.tools.launcher', '--job-dir', job_dir,
                                *launcher, '--', *train) if launcher is not None else train)
    proc = subprocess.run(cmd, env=common.env(), cwd=common.REPO_ROOT, capture_output=True,
                          text=True, timeout=3600, check=False)
    if proc.returncode:
        raise RuntimeError('%s exited %d:\n%s' % (' '.join(cmd), proc.returncode,
                                                  proc.stderr[-3000:]))
    sessions = run_record.read(job_dir)
    if not sessions or sessions[-1].get('status') != run_record.SUCCEEDED:
        raise RuntimeError('%s did not succeed (run record of %s)' % (' '.join(map(str, cmd)),
                                                                      job_dir))
    return sessions[-1]


def predict(evidence: estimate.Evidence, params: perf_model.Params, workers: int,
            parameter_servers: int, batch: int, steps: int, moved: float, cpus: float,
            strategy: str) -> Tuple[float, float]:
    """(training secs, wall secs) of the local cluster predicted from one process."""
    trainers = 1 + workers
    rate = perf_model.local_cluster_rate(batch, evidence.cpu_per_example, moved, params,
                                         trainers, parameter_servers, cpus,
                                         evidence.cpus_used)
    examples = steps * batch * (trainers if strategy == 'mwms' else 1)
    training = examples / rate
    tasks = trainers + parameter_servers
    # Every task starts at once on the same CPUs: the one process's start-up, shared.
    startup = evidence.startup_secs * max(1.0, tasks / cpus)
    return training, startup + training + evidence.overhead_secs_per_step * steps


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--cifar-data-dir', required=True)
    parser.add_argument('--taxi-train-files', nargs='+', required=True)
    parser.add_argument('--taxi-eval-files', nargs='+', required=True)
    parser.add_argument('--results', default=common.RESULTS_JSON,
                        help='results.json whose benchmark 4 the model is fitted to.')
    parser.add_argument('--quick', action='store_true',
                        help='Tiny runs (a check that the backtest works, not a result).')
    parser.add_argument('--cases', default=','.join('%s:%s' % c[:2] for c in CASES),
                        help='trainer:config pairs to run (default: all).')
    args = parser.parse_args(argv)
    params, fitted = _params(args.results if os.path.exists(args.results) else None)
    cpus = os.cpu_count() or 1
    wanted = args.cases.split(',')
    rows, runs = [], {}
    loads = common.load_mark()
    started = time.time()
    for trainer, config, steps, quick_steps in CASES:
        if '%s:%s' % (trainer, config) not in wanted:
            continue
        steps = quick_steps if args.quick else steps
        workers, parameter_servers = _shape(config)
        argv_, batch, layers = _trainer_argv(trainer, args, args.quick)
        strategy = 'mwms' if config == 'mwms' else 'ps'
        if strategy == 'mwms':
            argv_ = argv_ + ['--distribution-strategy', 'multi_worker_mirrored']
        moved = (perf_model.TAXI_TRAFFIC[1] if layers is None
                 else perf_model.resnet_traffic(layers)[1])
        with tempfile.TemporaryDirectory() as one, tempfile.TemporaryDirectory() as many:
            single = _run(argv_, one, steps)
            evidence = estimate.evidence_of(single, 'one process')
            if evidence is None:
                raise RuntimeError('the one process of %s recorded no training rate' % trainer)
            training, wall = predict(evidence, params, workers, parameter_servers, batch,
                                     steps, moved, cpus, strategy)
            session = _run(argv_, many, steps, ['--worker-count', workers,
                                                '--parameter-server-count',
                                                parameter_servers])
        measured = float(session['phases']['training_secs'])
        name = '%s, %s (chief + %d workers%s)' % (
            trainer if layers is None else 'ResNet-%d' % layers, CONFIGS[config], workers,
            ', %d ps' % parameter_servers if parameter_servers else ', all-reduce')
        runs[name] = {'steps': steps, 'batch': batch, 'predicted_training_secs': training,
                      'measured_training_secs': measured, 'predicted_wall_secs': wall,
                      'measured_wall_secs': float(session['wall_secs']),
                      'one_process_examples_per_sec': single.get('examples_per_sec')}
        rows.append([name, steps, '%.1f' % training, '%.1f' % measured,
                     '%+.0f%%' % (100 * (training / measured - 1)), '%.1f' % wall,
                     '%.1f' % float(session['wall_secs'])])
        print('%s: training %.1f s predicted, %.1f s measured' % (name, training, measured),
              flush=True)
    results = {'machine': common.machine_info(), 'fitted_to': fitted,
               'f_secs': params.f_secs, 'beta_secs_per_byte': params.beta_secs_per_byte,
               'quick': args.quick, 'load_average_range': common.load_since(loads),
               'seconds': round(time.time() - started), 'runs': runs}
    title = ('Backtest: a local cluster predicted from one process (training time, first to '
             'last step; wall time) against its run')
    header = HEADER
    if args.quick:
        common.print_table(title + ' [quick: not a result]', header, rows)
    else:
        common.finish('backtest', results, title, header, rows)


HEADER = ['cluster', 'steps', 'training s predicted', 'measured', 'error',
          'wall s predicted', 'measured']


if __name__ == '__main__':
    main()
