"""Data and job-dirs on gs://, through TensorFlow's built-in GCS client.

Every run goes to the local emulator of the `gcs` fixture (fake-gcs-server
behind a loopback TLS proxy, see tests/gcs_emulator.py): the trainers, the
data steps, a local cluster and TensorBoard read and write `gs://` exactly as
on Vertex AI, and what they wrote is checked in the bucket itself. The taxi
tests read one job-dir that a module fixture trains and then resumes, so each
runs alone or in any order.
"""
import json
import os
import re
import subprocess
import sys
import time
import urllib.request

import pytest
import tensorflow as tf

import processes

from cluster_helpers import ASYNC_OVERSHOOT, final_step, launch
from conftest import cli_env, run_module
from taxi_trips import final_metrics
from taxi_estimator import data as taxi_data
from taxi_estimator import schema

TAXI = 'taxi_estimator.task'
CIFAR = 'cifar10_estimator.cifar10_main'
TAXI_FAST = ['--batch-size', '64', '--checkpoint-num-steps', '100', '--random-seed', '3',
             '--learning-rate', '0.01', '--eval-frequency-secs', '0']
CIFAR_SMALL = ['--num-layers', '8', '--train-batch-size', '32', '--eval-batch-size', '50',
               '--batch-norm-decay', '0.9', '--random-seed', '7']
TAXI_JOB_DIR = 'gs://taxi-data/jobs/taxi'
_CHECKPOINT_RE = re.compile(r'model\.ckpt-(\d+)\.index')


def checkpoint_steps(gcs, job_dir):
    """Steps of the checkpoints under gs:// `job_dir`, from the bucket listing."""
    bucket, _, prefix = job_dir[len('gs://'):].partition('/')
    names = gcs.list_objects(bucket, prefix + '/model.ckpt-')
    return sorted(int(m.group(1)) for m in map(_CHECKPOINT_RE.search, names) if m)


def saved_models(gcs, job_dir):
    """`export/<dir>/saved_model.pb` objects under `job_dir`, as paths below it."""
    bucket, _, prefix = job_dir[len('gs://'):].partition('/')
    return sorted(name[len(prefix) + 1:] for name in
                  gcs.list_objects(bucket, prefix + '/export/')
                  if name.endswith('/saved_model.pb'))


def event_tags(gcs, directory, local_dir):
    """Summary tags in the event files under gs:// `directory` (copied to `local_dir`)."""
    bucket, _, prefix = directory[len('gs://'):].partition('/')
    tags = set()
    for name in gcs.list_objects(bucket, prefix + '/events.out.tfevents.'):
        path = os.path.join(str(local_dir), os.path.basename(name))
        with open(path, 'wb') as f:
            f.write(gcs.read_object('gs://%s/%s' % (bucket, name)))
        for event in tf.compat.v1.train.summary_iterator(path):
            tags.update(v.tag for v in event.summary.value)
    return tags


def test_taxi_data_step_writes_to_gs(gcs, gcs_taxi_data):
    data_dir, stderr = gcs_taxi_data
    for name in (taxi_data.TRAIN_FILE, taxi_data.EVAL_FILE):
        lines = gcs.read_object('%s/%s' % (data_dir, name)).decode().splitlines()
        assert lines[0] == ','.join(schema.COLUMNS)
        assert 'Wrote %d rows to %s/%s' % (len(lines) - 1, data_dir, name) in stderr
    assert sorted(gcs.list_objects('taxi-data', 'data/')) == [
        'data/', 'data/' + taxi_data.EVAL_FILE, 'data/' + taxi_data.TRAIN_FILE]


def taxi_data_flags(data_dir):
    """Trainer flags for the CSVs of the `gcs_taxi_data` fixture."""
    return ['--train-files=%s/%s' % (data_dir, taxi_data.TRAIN_FILE),
            '--eval-files=%s/%s' % (data_dir, taxi_data.EVAL_FILE)]


def _train_taxi(gcs, data_dir, steps, job_dir=TAXI_JOB_DIR):
    return run_module(TAXI, *taxi_data_flags(data_dir), '--job-dir', job_dir,
                      '--train-steps', steps, *TAXI_FAST, env=gcs.env(), check=0)


def _doubled(path):
    """`gs://b/x` as a shell's `$BUCKET/x` spells it with `BUCKET=gs://b/`."""
    bucket, _, rest = path[len('gs://'):].partition('/')
    return 'gs://%s//%s' % (bucket, rest)


@pytest.fixture(scope='module')
def taxi_on_gs(gcs, gcs_taxi_data):
    """The taxi job-dir on gs:// trained to 200, then rerun to 300 with its paths
    spelt `gs://taxi-data//...` (a bucket variable with a trailing slash).

    Returns one record per run: its stderr and the checkpoints, exports and
    export temp objects the bucket held after it.
    """
    runs = []
    for steps, spelt in ((200, str), (300, _doubled)):
        proc = _train_taxi(gcs, spelt(gcs_taxi_data[0]), steps, spelt(TAXI_JOB_DIR))
        runs.append({
            'stderr': proc.stderr,
            'checkpoints': checkpoint_steps(gcs, TAXI_JOB_DIR),
            'exports': saved_models(gcs, TAXI_JOB_DIR),
            'export_temps': [n for n in gcs.list_objects('taxi-data', 'jobs/taxi/export/')
                             if 'temp-' in n]})
    return runs


def test_taxi_trains_checkpoints_evaluates_and_exports_on_gs(gcs, taxi_on_gs, tmp_path):
    first = taxi_on_gs[0]
    step, metrics = final_metrics(first['stderr'])
    assert step == 200 and metrics['auc'] > 0.7, metrics
    assert first['checkpoints'] == [0, 100, 200]
    assert len(first['exports']) == 1
    assert re.fullmatch(r'export/\d+/saved_model.pb', first['exports'][0])
    assert not first['export_temps']
    assert {'accuracy', 'auc', 'loss'} <= event_tags(gcs, TAXI_JOB_DIR + '/eval', tmp_path)
    assert json.loads(gcs.read_object(TAXI_JOB_DIR + '/feature_stats.json'))['fare']['std'] > 0


def test_taxi_rerun_resumes_from_gs(taxi_on_gs, gcs_taxi_data):
    rerun = taxi_on_gs[1]
    # `gs://b//x` is `gs://b/x` for the trainer too (the cloud tools' rule), said once.
    for path in (TAXI_JOB_DIR, gcs_taxi_data[0] + '/' + taxi_data.TRAIN_FILE):
        assert rerun['stderr'].count('note: %s is read as %s (empty path segments dropped)'
                                     % (_doubled(path), path)) == 1
    assert 'Resuming from global step 200' in rerun['stderr']
    assert final_metrics(rerun['stderr'])[0] == 300
    assert rerun['checkpoints'] == [0, 100, 200, 300]
    assert len(rerun['exports']) == 2 and not rerun['export_temps']


def test_the_run_record_on_gs_has_a_session_per_run(gcs, taxi_on_gs):
    """Written whole (renamed into place: no temporary object left) after each run."""
    sessions = json.loads(gcs.read_object(TAXI_JOB_DIR + '/run_record.json'))['sessions']
    assert [s['steps'] for s in sessions] == [{'from': 0, 'to': 200, 'target': 200},
                                              {'from': 200, 'to': 300, 'target': 300}]
    for session, run in zip(sessions, taxi_on_gs):
        assert session['status'] == 'succeeded' and session['flags']['job_dir'] == TAXI_JOB_DIR
        step, metrics = final_metrics(run['stderr'])
        assert session['final_metrics']['global_step'] == step
        assert '%.4f' % session['final_metrics']['auc'] == '%.4f' % metrics['auc']
        assert session['export_dir'].startswith(TAXI_JOB_DIR + '/export/')
    assert [n for n in gcs.list_objects('taxi-data', 'jobs/taxi/run_record')] == [
        'jobs/taxi/run_record.json']


@pytest.mark.usefixtures('taxi_on_gs')
def test_tensorboard_serves_eval_scalars_from_gs(gcs, tmp_path):
    """TensorBoard's Python loader (--load_fast=false) reads gs:// through TF's client."""
    log = open(tmp_path / 'tensorboard.log', 'w+')  # pylint: disable=consider-using-with
    board = processes.popen(
        [sys.executable, '-m', 'tensorboard.main', '--logdir', TAXI_JOB_DIR,
         '--load_fast=false', '--host', '127.0.0.1', '--port', '0',
         '--reload_interval', '1'],
        env=cli_env(gcs.env()), stdout=log, stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL)
    try:
        url = _wait_for_url(log, board)
        scalars = _wait_for(
            lambda: _get_json(url + 'data/plugin/scalars/scalars?run=eval&tag=accuracy'),
            lambda points: points and points[-1][1] == 300)
        assert {200, 300} <= {point[1] for point in scalars}, scalars
        assert all(0 < point[2] <= 1 for point in scalars)
        tags = _get_json(url + 'data/plugin/scalars/tags')
        assert {'accuracy', 'auc', 'loss'} <= set(tags['eval'])
    finally:
        board.terminate()
        board.wait(30)
        log.close()


@pytest.mark.slow
def test_local_cluster_with_a_gs_job_dir(gcs, gcs_taxi_data, tmp_path):
    """1 ps, 2 workers and an evaluator sharing a gs:// job-dir; task logs stay local."""
    job_dir = 'gs://taxi-data/jobs/cluster'
    cluster = launch(job_dir, ['--log-dir', tmp_path / 'logs', '--parameter-server-count',
                               '1', '--worker-count', '2', '--evaluator-count', '1'],
                     [sys.executable, '-m', TAXI, *taxi_data_flags(gcs_taxi_data[0]),
                      '--job-dir', job_dir, '--train-steps', '300', '--batch-size', '64',
                      '--checkpoint-num-steps', '100', '--random-seed', '3',
                      '--max-worker-delay-secs', '5', '--eval-frequency-secs', '1'],
                     env=gcs.env())
    assert cluster.finish() == 0, cluster.output[-6000:]
    final = final_step(cluster.output)
    assert 300 <= final <= 300 + ASYNC_OVERSHOOT
    assert re.search(r'^\[evaluator-0\] .*Exiting evaluation, global_step=\d+ >= train '
                     r'max_steps=300', cluster.output, re.M)
    assert checkpoint_steps(gcs, job_dir)[-1] == final
    assert len(saved_models(gcs, job_dir)) == 1
    assert {'accuracy', 'auc'} <= event_tags(gcs, job_dir + '/eval', tmp_path)
    assert sorted(os.listdir(tmp_path / 'logs')) == [
        'chief-0.log', 'evaluator-0.log', 'ps-0.log', 'worker-0.log', 'worker-1.log']


@pytest.mark.slow
def test_cifar10_data_step_and_trainer_on_gs(gcs, gcs_cifar10_data, tmp_path):
    data_dir, _ = gcs_cifar10_data
    names = gcs.list_objects('cifar-data', 'data/cifar10/')
    assert {'data/cifar10/train.tfrecords', 'data/cifar10/validation.tfrecords',
            'data/cifar10/eval.tfrecords'} <= set(names)
    train_records = tmp_path / 'train.tfrecords'
    train_records.write_bytes(gcs.read_object(data_dir + '/train.tfrecords'))
    assert sum(1 for _ in tf.data.TFRecordDataset(str(train_records))) == 400

    job_dir = 'gs://cifar-data/jobs/resnet8'
    common = ['--data-dir', data_dir, '--job-dir', job_dir, *CIFAR_SMALL,
              '--checkpoint-num-steps', '20', '--keep-checkpoint-max', '10']
    proc = run_module(CIFAR, *common, '--train-steps', '40', env=gcs.env(), check=0)
    assert re.search(r'Final evaluation at global step 40: accuracy = ', proc.stderr)
    assert checkpoint_steps(gcs, job_dir) == [0, 20, 40]
    assert len(saved_models(gcs, job_dir)) == 1
    # Resuming from gs:// is the runtime's, shown on the taxi job above.


def _wait_for_url(log, process, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        log.seek(0)
        match = re.search(r'(http://127\.0\.0\.1:\d+/)', log.read())
        if match:
            return match.group(1)
        assert process.poll() is None, 'tensorboard exited:\n' + log.read()
        time.sleep(0.5)
    raise AssertionError('tensorboard printed no URL')


def _get_json(url):
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return json.load(response)
    except urllib.error.HTTPError:
        return None


def _wait_for(fetch, ready, timeout=120):
    """Polls `fetch` until `ready(value)` (TensorBoard loads in the background)."""
    deadline = time.monotonic() + timeout
    while True:
        value = fetch()
        if ready(value) or time.monotonic() > deadline:
            return value
        time.sleep(1)
