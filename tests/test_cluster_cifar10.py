"""Real CIFAR-10 clusters on loopback, started through the launcher.

Each test runs ResNet-8 on the small generated data set and checks the final
global step, the checkpoints and that no process is left behind. Asynchronous
parameter servers with an evaluator, through train-local.sh, are the taxi
trainer's (tests/test_cluster_taxi.py) and HW3's cluster is rehearsed
(tests/test_cloud_rehearsal.py, test_course_lines.py): here, what only the
ResNet does (sync replicas, multi_worker_mirrored, a peer that never comes up).
"""
import ast
import json
import os
import re
import sys

import pytest

from cluster_helpers import (assert_all_exited, assert_checkpoints_intact, final_step,
                             latest_checkpoint_step, launch, task_log)
from conftest import run_module
from estimator_trainers import errors
from estimator_trainers.tools import local_cluster

pytestmark = pytest.mark.slow

MAIN = 'cifar10_estimator.cifar10_main'
VARIABLES = ['global_step', 'resnet/initial_conv/kernel']


def _model_flags(train_steps, checkpoint_steps):
    """ResNet-8, small batches, a fixed seed.

    Workers start at most 5 s late (Estimator's delay lets the chief initialise
    the variables first; a worker that finds them uninitialised re-checks only
    30 s later). At DEBUG: TensorFlow's own lines (TF_CONFIG, the final loss,
    the strategy) are checked.
    """
    return ['--num-layers', '8', '--train-batch-size', '32', '--eval-batch-size', '50',
            '--log-step-count-steps', '20', '--random-seed', '7',
            '--train-steps', str(train_steps), '--checkpoint-num-steps', str(checkpoint_steps),
            '--max-worker-delay-secs', '5', '--peer-timeout-secs', '120',
            '--verbosity', 'debug']


def _trainer(data_dir, job_dir, train_steps, checkpoint_steps, *extra):
    return [sys.executable, '-m', MAIN, '--data-dir', str(data_dir), '--job-dir', str(job_dir),
            *_model_flags(train_steps, checkpoint_steps), *extra]


def _tf_config(job_dir, label):
    match = re.search(r'TF_CONFIG environment variable: (\{.*\})', task_log(job_dir, label))
    return ast.literal_eval(match.group(1))  # a logged Python dict


def test_sync_replicas_with_parameter_servers(cifar10_data_dir, tmp_path):
    """--sync: SyncReplicasOptimizer over chief + 1 worker, ending without a stall."""
    job_dir = tmp_path / 'job'
    cluster = launch(job_dir, ['--parameter-server-count', '1', '--worker-count', '1'],
                     _trainer(cifar10_data_dir, job_dir, 60, 20, '--sync'))
    assert cluster.finish() == 0, cluster.output[-6000:]
    final = final_step(cluster.output)
    assert final in (60, 61)  # a last round may be applied as the chief stops
    for label in ('chief-0', 'worker-0'):
        log = task_log(job_dir, label)
        assert 'SyncReplicasV2: replicas_to_aggregate=2; total_num_replicas=2' in log
        assert re.search(r'Loss for final step: \d', log), label
        assert 'CancelledError' not in log
    assert_checkpoints_intact(job_dir, final, VARIABLES, exact_steps=False)
    assert_all_exited(cluster.pids())


def test_multi_worker_mirrored(cifar10_data_dir, tmp_path):
    """All-reduce across chief + 1 worker, no parameter servers."""
    job_dir = tmp_path / 'job'
    cluster = launch(job_dir, ['--parameter-server-count', '0', '--worker-count', '1'],
                     _trainer(cifar10_data_dir, job_dir, 60, 20,
                              '--distribution-strategy', 'multi_worker_mirrored'))
    assert cluster.finish() == 0, cluster.output[-6000:]
    output = cluster.output
    assert final_step(output) == 60  # synchronous: no overshoot
    for label in ('chief-0', 'worker-0'):
        log = task_log(job_dir, label)
        assert "MultiWorkerMirroredStrategy with cluster_spec" in log
        assert re.search(r'INFO step 60/60, .*loss = ', log), label
    assert latest_checkpoint_step(job_dir) == 60
    assert_checkpoints_intact(job_dir, 60, VARIABLES)
    # The worker ran the same save ops into TF's throw-away directory.
    assert latest_checkpoint_step(job_dir / 'tmp_worker_0') == 60
    assert len(os.listdir(job_dir / 'export')) == 1
    assert_all_exited(cluster.pids())


def test_unreachable_parameter_server_fails_after_the_bound(cifar10_data_dir, tmp_path,
                                                           refused_port):
    """A chief whose ps never comes up exits 203 (retryable) naming the address, instead
    of hanging."""
    ps = '127.0.0.1:%d' % refused_port
    chief = '127.0.0.1:%d' % local_cluster.free_ports(1)[0]
    tf_config = {'cluster': {'chief': [chief], 'ps': [ps]},
                 'task': {'type': 'chief', 'index': 0}}
    proc = run_module(MAIN, '--data-dir', cifar10_data_dir, '--job-dir', tmp_path / 'job',
                      *_model_flags(20, 10), '--peer-timeout-secs', '3',
                      env={'TF_CONFIG': json.dumps(tf_config)}, timeout=120)
    assert proc.returncode == errors.EXIT_RETRYABLE, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines()[-1] == (
        'error: cannot reach ps-0 at %s (from TF_CONFIG) after 3s; is that task running,'
        ' and is the address right? (--peer-timeout-secs)' % ps)


@pytest.mark.parametrize('tf_config, message', [
    ('{"cluster": {"chief": ["127.0.0.1:1"]', 'error: TF_CONFIG: not valid JSON'),
    (json.dumps({'cluster': {'chief': ['127.0.0.1:1'], 'master': ['127.0.0.1:2']},
                 'task': {'type': 'chief', 'index': 0}}),
     'error: TF_CONFIG: cluster has both "chief" and "master"; use one'),
], ids=['bad-json', 'chief-and-master'])
def test_malformed_tf_config_is_one_error_line(cifar10_data_dir, tmp_path, tf_config,
                                               message):
    proc = run_module(MAIN, '--data-dir', cifar10_data_dir, '--job-dir', tmp_path / 'job',
                      env={'TF_CONFIG': tf_config})
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith(message)
    assert not (tmp_path / 'job').exists()
