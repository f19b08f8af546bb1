"""Google's own `gcloud ai-platform local train --distributed` and `local predict`, on this
project's trainers.

The reference the courses used (tests/gcloud_local.py runs it offline), on the
taxi trainer at small sizes (the trainers share the runtime that decides how a
task ends; one gcloud cluster per trainer cost the suite 3 minutes for no more
evidence: tests/test_local_predict.py serves the image exports):

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
    'taxi': ('taxi_estimator', 'taxi_estimator.task', ['--batch-size=32']),
}
# The cluster's steps; the taxi evaluator waits 600 s after its first evaluation,
# so gcloud's SIGTERM finds it there.
CLUSTER_FLAGS = {'taxi': ['--train-steps=2000', '--checkpoint-num-steps=100',
                          '--eval-frequency-secs=600']}


@pytest.fixture(scope='module')
def gcloud(tmp_path_factory):
    return Gcloud(tmp_path_factory.mktemp('gcloud'))


@pytest.fixture(scope='module')
def data(tmp_path_factory):
    """Each trainer's data flags."""
    taxi = tmp_path_factory.mktemp('taxi_data')
    train, evals = taxi_trips.write_layout_files(taxi, train_rows=400, eval_rows=100)
    return {'taxi': ['--train-files=%s' % train, '--eval-files=%s' % evals]}


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
    _, output, session, _ = cluster_run
    assert {role: session['cluster'].get(role) for role in ('chief', 'worker', 'ps')} == {
        'chief': 1, 'worker': 1, 'ps': 1}
    assert sorted(session['workers']) == ['chief', 'worker-0']
    # The parameter server and, once the chief finished, the evaluator: stopped by
    # gcloud with SIGTERM, each says so at INFO.
    assert re.search(r'INFO ps-0: stopped on SIGTERM, as a parameter server ends', output)
    ended = re.search(r'INFO evaluator-0: stopped on SIGTERM after the chief finished '
                      r'\(at step (\d+)\): the job has ended', output)
    assert ended and int(ended.group(1)) == session['steps']['to'], output[-5000:]


def _instances(trainer, data):
    """The first eval rows of `trainer`'s data, as prediction instances."""
    assert trainer == 'taxi'
    with open(data['taxi'][1].split('=', 1)[1]) as f:
        header, *rows = [line.rstrip('\n').split(',') for line in f][:6]
    from taxi_estimator import schema  # pylint: disable=import-outside-toplevel
    return [{c: schema.parse_value(c, v) for c, v in zip(header, row) if c != 'tip'}
            for row in rows]


def test_gcloud_local_predict_agrees_with_ours(cluster_run, gcloud, data, tmp_path):
    trainer, _, _, export = cluster_run
    instances = _instances(trainer, data)
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
