"""The benchmark tooling: entry point help, and RESULTS.md rendering.

Nothing here measures or asserts a time; the benchmarks themselves run with
`bash benchmarks/run.sh [--quick]`.
"""
import json

import processes
from benchmarks import report
from conftest import REPO_ROOT


def _summary(median, **extra):
    return dict(median=median, min=median * 0.9, max=median * 1.1, runs=[median],
                **extra)


def _results():
    machine = {'cpu': 'Test CPU', 'cores': 2, 'cpu_features': ['amx_bf16'],
               'load_average': [0.5, 0.5, 0.5], 'python': '3.11', 'tensorflow': '2.15.1',
               'onednn': 'default (on)', 'threads': 'intra-op = 2'}
    stamp = {'machine': machine, 'command': 'python -m benchmarks.x', 'finished': 'now'}
    per_cpu = {'per_cpu_second': _summary(100.0)}
    ratio = dict(_summary(1.5), meaning='m', of_medians=1.5, per_cpu_second=1.4)
    return {
        'resnet_throughput': dict(stamp, peak_flops={'float32': 2e11, 'bfloat16': 6e11},
                                  batch_size=128, estimator_default_type='bfloat16',
                                  interval=8, intervals=2, depths={'44': {
                                      'forward_flops': 1.9e8, 'training_flops': 5.8e8,
                                      'load_average_range': [0.5, 1.0],
                                      'variants': {'estimator': _summary(
                                          360.0, compute_type='bfloat16',
                                          fraction_of_peak=0.35, **per_cpu)},
                                      'ratios': {'estimator/keras_tfrecord': ratio}}}),
        'input_pipeline': dict(stamp, consumed_by_training={}, pipelines={
            'taxi/default': _summary(5e5, times_training=9.0, **per_cpu)}),
        'taxi': dict(stamp, target_auc=0.943, eval_every_steps=50,
                     estimator_over_keras=1.1, estimator_over_keras_per_cpu_second=1.2,
                     variants={'estimator': _summary(5e4, time_to_auc={
                         'reached': '1 of 1 runs', 'seconds': _summary(9.0),
                         'steps': _summary(150)}, **per_cpu)}),
        'cold_start': dict(stamp, trainers={'taxi': {
            'configured': _summary(2.0), 'graph_built': _summary(3.0),
            'first_checkpoint': _summary(5.0), 'first_step': _summary(6.0)}}),
        'install': dict(stamp, python='3.11.7', pip='23.2.1', uv='0.13.8', installers={
            'pip': {'cold': _summary(100.0), 'warm': _summary(90.0),
                    'wheelhouse': _summary(50.0), 'cache_mb': 0},
            'uv': {'cold': _summary(20.0), 'warm': _summary(2.0), 'cache_mb': 1200}}),
        'eval_share': dict(stamp, cifar_train_steps=1000, runs={
            'taxi': [{'wall_secs': 20.0, 'eval_secs': 2.0, 'eval_share': 0.1,
                      'evaluations': 10}],
            'cifar10': [{'wall_secs': 300.0, 'eval_secs': 60.0, 'eval_share': 0.2,
                         'evaluations': 6}]}),
        'determinism': dict(stamp, num_layers=20, trainers={'cifar10': {
            'unseeded': _summary(400.0, per_cpu_second=_summary(200.0)),
            'seeded': _summary(380.0, per_cpu_second=_summary(190.0)),
            'seeded_over_unseeded': 0.95, 'seeded_over_unseeded_per_cpu_second': 0.95}}),
    }


def test_report_shows_targets_and_keeps_notes(tmp_path):
    results, out = tmp_path / 'results.json', tmp_path / 'RESULTS.md'
    results.write_text(json.dumps(_results()))
    out.write_text('STALE TABLE\n%s\nMeasured by hand.\n%s\nSTALE TABLE\n'
                   % (report.NOTES_BEGIN, report.NOTES_END))
    report.main(['--results', str(results), '--out', str(out)])
    text = out.read_text()
    assert 'Measured by hand.' in text and 'STALE TABLE' not in text
    assert '| ResNet-44 cifar10_main ≥ 1.2× Keras fit (same run) | defaults vs Keras ' \
           'defaults 1.50× (per CPU-second 1.40×) | yes |' in text
    assert '| taxi input pipeline ≥ 10× what training consumes | 9.00× | **no** |' in text
    assert '| taxi: cold start to first step ≤ 15 s | 6.0 s | yes |' in text
    assert '## 4. Cluster overhead\n\nNot measured in this run.' in text
    assert '(Python 3.11.7; pip 23.2.1, uv 0.13.8, no configuration files)' in text
    assert '| pip | 100.0 (90.0–110.0) | 90.0 (81.0–99.0) | 50.0 (45.0–55.0) | 0 |' in text
    assert '| uv | 20.0 (18.0–22.0) | 2.0 (1.8–2.2) | – | 1200 |' in text
    assert ('| taxi default run: ≥ 5 evaluations, ≤ 15% of wall time evaluating | '
            '10 evaluations, 10.0% | yes |') in text
    assert ('| cifar10 default run: ≥ 5 evaluations, ≤ 15% of wall time evaluating | '
            '6 evaluations, 20.0% | **no** |') in text
    assert '| cifar10 | 300.0 (300.0–300.0) | 60.0 (60.0–60.0) | 20.0% | 6 |' in text
    assert '## 8. The cost of a seed' in text
    assert '| cifar10 | 400.0 (360.0–440.0) | 380.0 (342.0–418.0) | 0.95 | 0.95 |' in text


def test_run_sh_help_and_bad_argument():
    shown = processes.run(['bash', 'benchmarks/run.sh', '--help'], 60, cwd=REPO_ROOT)
    assert shown.returncode == 0 and '--quick' in shown.stdout
    bad = processes.run(['bash', 'benchmarks/run.sh', 'nonsense'], 60, cwd=REPO_ROOT)
    assert bad.returncode == 2 and "unknown argument 'nonsense'" in bad.stderr
