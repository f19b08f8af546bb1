"""Quality bar on the real Chicago Taxi trips shipped in the tfx wheel on PyPI.

The data step fetches the wheel with pip (so this needs the package index;
the test skips, saying so, only when pip's index cannot be reached),
the trainer runs with its default flags, and the model must beat the
one-rule baseline `payment_type == "Credit Card"` on the held-out eval file
in both AUC and accuracy, as logged by the trainer and as recomputed here
from `predict` on the export.
"""
import json
import os
import socket
import sys
import urllib.parse
import urllib.request

import pytest

import processes
from conftest import run_module
from taxi_estimator import data
from taxi_trips import accuracy, baselines, eval_labels, exact_auc, exports, final_metrics


def _package_index():
    """The index URL pip downloads from: $PIP_INDEX_URL, pip's config, else PyPI."""
    url = os.environ.get('PIP_INDEX_URL')
    if not url:
        listed = processes.run([sys.executable, '-m', 'pip', 'config', 'list'], 60)
        for line in listed.stdout.splitlines():
            key, _, value = line.partition('=')
            if key.endswith('.index-url'):
                url = value.strip().strip("'\"")
    return url or 'https://pypi.org/simple'


def _unreachable(url):
    """Why `url` cannot be reached (a TCP connect, through $https_proxy if set), or None."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == 'file':
        return None if os.path.exists(parts.path) else 'no such directory'
    proxy = urllib.request.getproxies().get(parts.scheme)
    if proxy and not urllib.request.proxy_bypass(parts.hostname):
        parts = urllib.parse.urlsplit(proxy)
    port = parts.port or (443 if parts.scheme == 'https' else 80)
    try:
        socket.create_connection((parts.hostname, port), timeout=10).close()
    except OSError as e:
        return '%s:%d: %s' % (parts.hostname, port, e)
    return None


@pytest.fixture
def package_index():
    """Skips (saying why) only when pip's package index cannot be reached."""
    url = _package_index()
    problem = _unreachable(url)
    if problem:
        pytest.skip('package index %s unreachable (%s): this test downloads %s with pip'
                    % (url, problem, data.TFX_REQUIREMENT))
    return url


@pytest.mark.slow
@pytest.mark.usefixtures('package_index')
def test_beats_the_credit_card_rule_on_real_trips(tmp_path):
    data_dir = tmp_path / 'data'
    proc = run_module('taxi_estimator.data', '--out-dir', data_dir, '--source', 'tfx',
                      check=0)
    assert 'Source: Chicago Taxi trips from the tfx wheel' in proc.stderr
    eval_file = str(data_dir / data.EVAL_FILE)
    labels, _ = eval_labels(eval_file)
    baseline = baselines(eval_file)
    assert len(labels) > 2000 and baseline['rule'] > 0.85  # a strong rule to beat

    job_dir = str(tmp_path / 'job')
    proc = run_module('taxi_estimator.task', '--train-files', data_dir / data.TRAIN_FILE,
                      '--eval-files', eval_file, '--job-dir', job_dir,
                      '--random-seed', '1', check=0)
    _, metrics = final_metrics(proc.stderr)
    assert metrics['auc'] > baseline['rule_auc'], (metrics, baseline)
    assert metrics['accuracy'] > baseline['rule'], (metrics, baseline)

    proc = run_module('taxi_estimator.predict', '--model-dir', exports(job_dir)[-1],
                      '--csv-instances', eval_file, check=0)
    results = [json.loads(line) for line in proc.stdout.splitlines()]
    scores = [r['probabilities'][1] for r in results]
    model = {'accuracy': accuracy(labels, [r['class'] for r in results]),
             'auc': exact_auc(labels, scores)}
    print('model %s, baseline %s' % (model, baseline))
    assert model['accuracy'] == pytest.approx(metrics['accuracy'], abs=1e-4)
    assert model['auc'] > baseline['rule_auc'] + 0.01
    assert model['accuracy'] > baseline['rule']
