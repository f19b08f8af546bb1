"""Quality bar on the real Chicago Taxi trips shipped in the tfx wheel on PyPI.

The data step fetches the wheel with pip (so this needs the package index),
the trainer runs with its default flags, and the model must beat the
one-rule baseline `payment_type == "Credit Card"` on the held-out eval file
in both AUC and accuracy, as logged by the trainer and as recomputed here
from `predict` on the export.
"""
import csv
import json

import pytest

from conftest import run_module
from taxi_estimator import data
from taxi_trips import exports, final_metrics


def exact_auc(labels, scores):
    """ROC AUC as the probability a positive outscores a negative (ties count 1/2)."""
    pairs = sorted(zip(scores, labels))
    positives = sum(labels)
    negatives = len(labels) - positives
    rank_sum, i = 0.0, 0
    while i < len(pairs):
        j = i
        while j < len(pairs) and pairs[j][0] == pairs[i][0]:
            j += 1
        rank_sum += (i + 1 + j) / 2 * sum(label for _, label in pairs[i:j])
        i = j
    return (rank_sum - positives * (positives + 1) / 2) / (positives * negatives)


def accuracy(labels, predicted):
    return sum(int(a == b) for a, b in zip(labels, predicted)) / len(labels)


@pytest.mark.slow
def test_beats_the_credit_card_rule_on_real_trips(tmp_path):
    data_dir = tmp_path / 'data'
    proc = run_module('taxi_estimator.data', '--out-dir', data_dir, '--source', 'tfx',
                      check=0)
    assert 'Source: Chicago Taxi trips from the tfx wheel' in proc.stderr
    eval_file = str(data_dir / data.EVAL_FILE)
    with open(eval_file, newline='') as f:
        rows = list(csv.DictReader(f))
    labels = [int(r['tip']) for r in rows]
    rule = [int(r['payment_type'] == 'Credit Card') for r in rows]
    baseline = {'accuracy': accuracy(labels, rule), 'auc': exact_auc(labels, rule)}
    assert len(rows) > 2000 and baseline['accuracy'] > 0.85  # a strong rule to beat

    job_dir = str(tmp_path / 'job')
    proc = run_module('taxi_estimator.task', '--train-files', data_dir / data.TRAIN_FILE,
                      '--eval-files', eval_file, '--job-dir', job_dir,
                      '--random-seed', '1', check=0)
    _, metrics = final_metrics(proc.stderr)
    assert metrics['auc'] > baseline['auc'], (metrics, baseline)
    assert metrics['accuracy'] > baseline['accuracy'], (metrics, baseline)

    proc = run_module('taxi_estimator.predict', '--model-dir', exports(job_dir)[-1],
                      '--csv-instances', eval_file, check=0)
    results = [json.loads(line) for line in proc.stdout.splitlines()]
    scores = [r['probabilities'][1] for r in results]
    model = {'accuracy': accuracy(labels, [r['class'] for r in results]),
             'auc': exact_auc(labels, scores)}
    print('model %s, baseline %s' % (model, baseline))
    assert model['accuracy'] == pytest.approx(metrics['accuracy'], abs=1e-4)
    assert model['auc'] > baseline['auc'] + 0.01
    assert model['accuracy'] > baseline['accuracy']
