"""End-to-end taxi trainer and predict runs through the real CLIs, on generated trips.

One module-scoped run trains a job-dir once; tests that resume or re-export
work on their own copy of it, so each test runs alone (`-k`) or in any order.
"""
import contextlib
import csv
import glob
import io
import json
import os
import re
import shutil

import pytest
import tensorflow as tf

import taxi_trips
from cluster_helpers import listed_checkpoints
from conftest import reported_metrics, run_module
from estimator_trainers import registry
from taxi_trips import assert_beats_baselines, exports, final_metrics
from taxi_estimator import predict
from taxi_estimator import schema

TASK = 'taxi_estimator.task'
PREDICT = 'taxi_estimator.predict'
FAST = ['--batch-size', '64', '--checkpoint-num-steps', '100', '--random-seed', '3',
        '--learning-rate', '0.01', '--eval-frequency-secs', '0']


def predictions(stdout):
    return [json.loads(line) for line in stdout.splitlines()]


@pytest.fixture(scope='module')
def files(tmp_path_factory):
    """Train/eval CSVs with the real data's empty fields, plus odd but valid rows."""
    folder = tmp_path_factory.mktemp('taxi_data')
    train, evals = taxi_trips.write_layout_files(folder)
    odd = dict(zip(schema.COLUMNS, taxi_trips.layout_rows(1, seed=99)[0]))
    extra = [dict(odd, trip_miles='', fare=''),  # missing numbers
             dict(odd, tip='1.0', pickup_community_area='8.0'),  # whole numbers as floats
             dict(odd, payment_type='Voucher', company='')]  # unseen category
    with open(train, 'a', newline='') as f:
        csv.writer(f, lineterminator='\n').writerows(
            [row[c] for c in schema.COLUMNS] for row in extra)
    return {'train': train, 'eval': evals, 'folder': folder}


@pytest.fixture(scope='module')
def trained(files, tmp_path_factory):
    """A job-dir trained to step 200 (JSON export), and that run's stderr.

    Read-only: a test that trains further or exports copies it (`_copy`).
    """
    job_dir = str(tmp_path_factory.mktemp('taxi_job') / 'job')
    proc = run_module(TASK, '--train-files', files['train'], '--eval-files', files['eval'],
                      '--job-dir', job_dir, '--train-steps', '200', *FAST, check=0)
    return job_dir, proc.stderr


def _copy(trained, tmp_path):
    job_dir = str(tmp_path / 'job')
    shutil.copytree(trained[0], job_dir)
    return job_dir


def test_trains_evaluates_and_exports(files, trained):
    job_dir, stderr = trained
    step, metrics = final_metrics(stderr)
    assert step == 200
    assert reported_metrics(stderr) == sorted(registry.get('taxi').eval_metrics)
    # Majority class ("no tip") scores 0.73 and the Credit-Card rule 0.715 here.
    assert_beats_baselines(metrics, files['eval'], margin=0.03)
    assert 'Training data: 803 rows in 1 file(s); eval data: 200 rows' in stderr
    assert re.search(r'step 100/\d+, .*learning_rate/dnn_adam = 0\.01, .*loss = [\d.]+',
                     stderr)

    # Metrics for TensorBoard under <job-dir>/eval.
    tags = set()
    for path in glob.glob(os.path.join(job_dir, 'eval', 'events.*')):
        for event in tf.compat.v1.train.summary_iterator(path):
            tags.update(v.tag for v in event.summary.value)
    assert {'accuracy', 'auc', 'precision', 'recall', 'loss'} <= tags

    # Normalisation statistics come from the training file and are recorded.
    with open(os.path.join(job_dir, 'feature_stats.json')) as f:
        stats = json.load(f)
    with open(files['train'], newline='') as f:
        fares = [float(r['fare']) for r in csv.DictReader(f) if r['fare']]
    mean = sum(fares) / len(fares)
    assert stats['fare']['mean'] == pytest.approx(mean)
    assert stats['fare']['std'] == pytest.approx(
        (sum((x - mean) ** 2 for x in fares) / len(fares)) ** 0.5)
    assert len(exports(job_dir)) == 1


def test_rerun_resumes_and_keeps_the_recorded_statistics(files, trained, tmp_path):
    job_dir = _copy(trained, tmp_path)
    with open(os.path.join(job_dir, 'feature_stats.json')) as f:
        recorded = f.read()
    # Other training files would give other statistics: the job-dir's win.
    proc = run_module(TASK, '--train-files', files['eval'], '--eval-files', files['eval'],
                      '--job-dir', job_dir, '--train-steps', '300', *FAST, check=0)
    assert 'Resuming from global step 200' in proc.stderr
    assert 'Using the normalisation statistics recorded in' in proc.stderr
    assert final_metrics(proc.stderr)[0] == 300
    with open(os.path.join(job_dir, 'feature_stats.json')) as f:
        assert f.read() == recorded
    assert tf.train.latest_checkpoint(job_dir).endswith('model.ckpt-300')

    proc = run_module(TASK, '--train-files', files['train'], '--eval-files', files['eval'],
                      '--job-dir', job_dir, '--train-steps', '300', '--hidden-units', '8',
                      *FAST, check=2)
    assert proc.stderr.strip().splitlines()[-1] == (
        'error: --hidden-units=8 does not match the checkpoints in --job-dir %s, which '
        'were trained with --hidden-units=32,16; use a new --job-dir or the same value'
        % job_dir)


def test_exports_in_every_format_predict_alike(files, trained, tmp_path):
    job_dir = _copy(trained, tmp_path)
    # The step target is reached: each rerun only evaluates and exports.
    evaluations = []
    for fmt in ('CSV', 'EXAMPLE'):
        proc = run_module(TASK, '--train-files', files['train'], '--eval-files',
                          files['eval'], '--job-dir', job_dir, '--train-steps', '200',
                          '--serving-export-format', fmt, *FAST, check=0)
        assert ('job-dir %s is already at step 200 (target 200): nothing to train; use a '
                'new --job-dir or a higher --train-steps' % job_dir) in proc.stderr
        evaluations.append(final_metrics(proc.stderr))
    export_dirs = exports(job_dir)
    assert len(export_dirs) == 3  # JSON from the training run, then CSV and EXAMPLE

    with open(files['eval'], newline='') as f:
        rows = list(csv.DictReader(f))
    ndjson = files['folder'] / 'instances.ndjson'
    with open(ndjson, 'w') as f:
        for row in rows:
            instance = {c: schema.parse_value(c, row[c]) for c in schema.FEATURES}
            for column, value in instance.items():  # JSON null for missing values
                if value == schema.missing_value(column) or value != value:
                    instance[column] = None
            f.write(json.dumps(instance) + '\n')

    results = []
    for export_dir in export_dirs:  # in this process: a TensorFlow start-up each cost 6 s
        for flag, path in (('--json-instances', ndjson), ('--csv-instances', files['eval'])):
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                assert predict.main(['--model-dir', export_dir, flag, str(path)]) == 0
            results.append(predictions(out.getvalue()))
    first = results[0]
    assert len(first) == len(rows)
    for result in results[1:]:
        assert [r['class'] for r in result] == [r['class'] for r in first]
        for a, b in zip(result, first):
            assert a['probabilities'] == pytest.approx(b['probabilities'], abs=1e-5)
    for result in first:
        assert sum(result['probabilities']) == pytest.approx(1, abs=1e-5)
        assert result['class'] == int(result['probabilities'][1] > 0.5)

    # Serving reads the CSV as training did: predict reproduces the eval accuracy.
    accuracy = sum(p['class'] == int(r['tip']) for p, r in zip(first, rows)) / len(rows)
    for step, metrics in evaluations:
        assert step == 200
        assert accuracy == pytest.approx(metrics['accuracy'], abs=1e-4)

    # --model-dir <job-dir>/export picks the newest export.
    proc = run_module(PREDICT, '--model-dir', os.path.join(job_dir, 'export'),
                      '--json-instances', ndjson, check=0)
    assert predictions(proc.stdout) == results[-2]


def test_resume_off_a_multiple_saves_at_multiples(files, tmp_path):
    """Resumed at 50, saves come at 60 and 80 (not 70, 90 counted from 50), then 90."""
    job_dir = str(tmp_path / 'job')
    flags = ['--train-files', files['train'], '--eval-files', files['eval'],
             '--job-dir', job_dir, '--batch-size', '64', '--random-seed', '3',
             '--checkpoint-num-steps', '20', '--keep-checkpoint-max', '10']
    run_module(TASK, *flags, '--train-steps', '50', check=0)
    assert listed_checkpoints(job_dir) == [0, 20, 40, 50]
    proc = run_module(TASK, *flags, '--train-steps', '90', check=0)
    assert 'Resuming from global step 50' in proc.stderr
    assert listed_checkpoints(job_dir) == [0, 20, 40, 50, 60, 80, 90]
    assert final_metrics(proc.stderr)[0] == 90
