"""Google's own `gcloud ai-platform local train --distributed` and `local predict`, on this
project's trainers.

The reference the courses used (tests/gcloud_local.py runs it offline). For
each trainer, CIFAR-10's small ResNet, the taxi model and the Keras MLP on
CIFAR-10 (seed 001's), at the smallest sizes:

- `local train --distributed` (a parameter server, a worker and an evaluator
  beside the chief) ends with status 0, no `error` line and no traceback, the
  chief's run record says it succeeded and both training tasks trained.
  gcloud stops the other tasks with SIGTERM as soon as the chief exits: the
  taxi run keeps its evaluator between two evaluations then (a long
  `--eval-frequency-secs`), which must end as the job's normal end.
- `local predict` on that export, gcloud's and ours (`ai-platform.sh local
  predict`) on the same instances: the same predictions.

`local train` in one process trains the exports of tests/test_local_predict.py.
"""
import io
import json
import os
import re

import numpy as np
import pytest

import taxi_trips
from conftest import REPO_ROOT
from estimator_trainers import run_record
from estimator_trainers.tools.cloud import ai_platform
from gcloud_local import ended_well, GCLOUD, Gcloud, SKIP

pytestmark = [pytest.mark.slow, pytest.mark.skipif(GCLOUD is None, reason=SKIP)]
CLUSTER = (1, 1, 1)  # parameter servers, workers, evaluators
TRAINERS = {
    'cifar10': ('cifar10_estimator', 'cifar10_estimator.cifar10_main',
                ['--num-layers=8', '--train-batch-size=16', '--eval-batch-size=50']),
    'keras': ('keras_estimator', 'keras_estimator.trainer',
              ['--model=cifar10_mlp', '--batch-size=32']),
    'taxi': ('taxi_estimator', 'taxi_estimator.task', ['--batch-size=32']),
}
# The cluster's steps; the taxi evaluator waits 600 s after its first evaluation,
# so gcloud's SIGTERM finds it there.
CLUSTER_FLAGS = {'cifar10': ['--train-steps=8', '--checkpoint-num-steps=4'],
                 'keras': ['--train-steps=8', '--checkpoint-num-steps=4'],
                 'taxi': ['--train-steps=2000', '--checkpoint-num-steps=100',
                          '--eval-frequency-secs=600']}


@pytest.fixture(scope='module')
def gcloud(tmp_path_factory):
    return Gcloud(tmp_path_factory.mktemp('gcloud'))


@pytest.fixture(scope='module')
def data(tmp_path_factory, cifar10_data_dir):
    """Each trainer's data flags."""
    taxi = tmp_path_factory.mktemp('taxi_data')
    train, evals = taxi_trips.write_layout_files(taxi, train_rows=400, eval_rows=100)
    return {'cifar10': ['--data-dir=%s' % cifar10_data_dir],
            'keras': ['--data-dir=%s' % cifar10_data_dir],
            'taxi': ['--train-files=%s' % train, '--eval-files=%s' % evals]}


def _train(gcloud, data, trainer, job_dir):
    package, module, size = TRAINERS[trainer]
    proc = gcloud.local_train(os.path.join(REPO_ROOT, package), module, job_dir,
                              data[trainer] + size + CLUSTER_FLAGS[trainer],
                              distributed=CLUSTER)
    output = ended_well(proc)
    (session,) = run_record.read(str(job_dir))
    assert session['status'] == run_record.SUCCEEDED
    return output, session


@pytest.fixture(scope='module', params=sorted(TRAINERS))
def cluster_run(request, gcloud, data, tmp_path_factory):
    """(trainer, gcloud's output, the chief's session, its export) of a --distributed run."""
    job_dir = tmp_path_factory.mktemp('cluster_' + request.param) / 'job'
    output, session = _train(gcloud, data, request.param, job_dir)
    return request.param, output, session, session['export_dir']


def test_gcloud_local_train_distributed_ends_with_no_error(cluster_run):
    trainer, output, session, _ = cluster_run
    assert {role: session['cluster'].get(role) for role in ('chief', 'worker', 'ps')} == {
        'chief': 1, 'worker': 1, 'ps': 1}
    assert sorted(session['workers']) == ['chief', 'worker-0']
    # The parameter server and, once the chief finished, the evaluator: stopped by
    # gcloud with SIGTERM, each says so at INFO.
    assert re.search(r'INFO ps-0: stopped on SIGTERM, as a parameter server ends', output)
    ended = re.search(r'INFO evaluator-0: stopped on SIGTERM after the chief finished '
                      r'\(at step (\d+)\): the job has ended', output)
    if trainer == 'taxi':
        assert ended and int(ended.group(1)) == session['steps']['to'], output[-5000:]
    else:  # it may also have evaluated the last checkpoint and ended by itself first
        assert ended or 'Exiting evaluation, global_step=' in output, output[-5000:]


def _instances(trainer, cifar10_data_dir, data):
    if trainer == 'taxi':
        with open(data['taxi'][1].split('=', 1)[1]) as f:
            header, *rows = [line.rstrip('\n').split(',') for line in f][:6]
        from taxi_estimator import schema  # pylint: disable=import-outside-toplevel
        return [{c: schema.parse_value(c, v) for c, v in zip(header, row) if c != 'tip'}
                for row in rows]
    from cifar10_estimator import data as cifar10_data  # pylint: disable=import-outside-toplevel
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    features, _ = next(iter(cifar10_data.make_dataset(cifar10_data_dir, 'eval', 3)))
    return tf.cast(features['images'], tf.uint8).numpy().tolist()


def test_gcloud_local_predict_agrees_with_ours(cluster_run, gcloud, data, cifar10_data_dir,
                                               tmp_path):
    trainer, _, _, export = cluster_run
    instances = _instances(trainer, cifar10_data_dir, data)
    theirs = gcloud.local_predict(export, instances)
    path = tmp_path / 'instances.json'
    path.write_text(''.join(json.dumps(i) + '\n' for i in instances))
    out = io.StringIO()
    assert ai_platform.main(['local', 'predict', '--model-dir', export, '--json-instances',
                             str(path), '--format', 'json'], out=out, err=io.StringIO()) == 0
    ours = json.loads(out.getvalue())['predictions']
    assert len(ours) == len(theirs) == len(instances)
    for mine, reference in zip(ours, theirs):
        assert sorted(mine) == sorted(reference)
        for name, value in reference.items():
            if isinstance(value, (int, float)) or (
                    isinstance(value, list) and value and not isinstance(value[0], str)):
                np.testing.assert_allclose(mine[name], value, rtol=1e-5, atol=1e-6)
            else:
                assert mine[name] == value, name
