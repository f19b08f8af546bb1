"""Real Chicago Taxi clusters on loopback, started through the launcher.

The wide-and-deep model's linear side has sparse (FTRL) gradients, which
exercise what dense models do not: sparse updates on parameter servers, and
under multi_worker_mirrored the dense all-reduce that replaces TF 2.15's
failing sparse gather. Each test checks the final global step, the checkpoints
and that no process is left behind; the asynchronous and the all-reduce runs
also check that the model learned (a cluster that loses updates would not beat
the trivial baselines on the eval file). The model's two Keras
optimizers cannot be wrapped by SyncReplicasOptimizer (it takes one
tf.compat.v1 optimizer), so its synchronous mode is multi_worker_mirrored.
"""
import os
import re
import sys

import pytest

import taxi_trips
from cluster_helpers import (ASYNC_OVERSHOOT, assert_all_exited, assert_checkpoints_intact,
                             check_worker_and_chief_restart, listed_checkpoints,
                             Cluster, final_step, latest_checkpoint_step, launch, scalars,
                             task_log)
from conftest import REPO_ROOT
from taxi_trips import assert_beats_baselines, final_metrics

pytestmark = pytest.mark.slow

TASK = 'taxi_estimator.task'
VARIABLES = ['global_step', 'dnn/hiddenlayer_0/kernel',
             'linear/linear_model/wide_ids/weights']


@pytest.fixture(scope='module')
def data_dir(tmp_path_factory):
    """Train/eval CSVs named as train-local.sh expects them in --data-dir."""
    return taxi_trips.write_data_step_files(tmp_path_factory.mktemp('taxi_cluster_data'),
                                            800, 200)


def _model_flags(train_steps, checkpoint_steps):
    """Small batches, a fixed seed, workers at most 5 s late (see test_cluster_cifar10);
    at DEBUG, as TensorFlow's own lines are checked (TF_CONFIG, the final loss)."""
    return ['--batch-size', '64', '--random-seed', '3', '--log-step-count-steps', '50',
            '--verbosity', 'debug',
            '--train-steps', str(train_steps), '--checkpoint-num-steps', str(checkpoint_steps),
            '--max-worker-delay-secs', '5', '--peer-timeout-secs', '120']


def _trainer(data_dir, job_dir, train_steps, checkpoint_steps, *extra):
    return [sys.executable, '-m', TASK,
            '--train-files', str(data_dir / 'taxi_trips_train.csv'),
            '--eval-files', str(data_dir / 'taxi_trips_eval.csv'), '--job-dir', str(job_dir),
            *_model_flags(train_steps, checkpoint_steps), *extra]


def test_async_parameter_servers_and_evaluator_via_train_local(data_dir, tmp_path):
    """The issue's command: train-local.sh taxi --distributed, 1 ps + 2 workers (+ evaluator)."""
    job_dir = tmp_path / 'job'
    cluster = Cluster(
        ['bash', os.path.join(REPO_ROOT, 'scripts', 'train-local.sh'), 'taxi',
         '--job-dir', str(job_dir), '--data-dir', str(data_dir), '--distributed',
         '--parameter-server-count', '1', '--worker-count', '2', '--evaluator-count', '1',
         '--', *_model_flags(1500, 250), '--eval-frequency-secs', '1'])
    assert cluster.finish() == 0, cluster.output[-6000:]
    output = cluster.output
    final = final_step(output)
    assert 1500 <= final <= 1500 + ASYNC_OVERSHOOT
    for label in ('chief-0', 'worker-0', 'worker-1'):
        log = task_log(job_dir, label)
        assert "'task': {'type': '%s', 'index': %s}" % tuple(label.split('-')) in log
        assert re.search(r'Loss for final step: \d', log), label
    assert_checkpoints_intact(job_dir, final, VARIABLES, exact_steps=False)
    assert_beats_baselines(final_metrics(task_log(job_dir, 'chief-0'))[1],
                           data_dir / 'taxi_trips_eval.csv', margin=0.03)
    evaluator = task_log(job_dir, 'evaluator-0')
    last = re.findall(r'Exiting evaluation, global_step=(\d+) >= train max_steps=1500',
                      evaluator)
    assert last and 1500 <= int(last[0]) <= final
    assert '[launcher] stopping ps-0' in output
    # Only the chief exported, and wrote the recorded statistics and training events.
    assert len(os.listdir(job_dir / 'export')) == 1
    assert len([f for f in os.listdir(job_dir) if f.startswith('events.out.')]) == 1
    # Each training task wrote its own throughput into its own run; the evaluator,
    # not the chief, evaluated during training, never the untrained step 0.
    assert sorted(os.listdir(job_dir / 'workers')) == ['chief', 'worker-0', 'worker-1']
    # A worker that starts after the chief reached the target (asynchronous: it
    # does not wait for workers) trains nothing and logs no progress line.
    for label, log in (('chief', 'chief-0'), ('worker-0', 'worker-0'),
                       ('worker-1', 'worker-1')):
        rates = scalars(job_dir / 'workers' / label).get('examples_per_sec/worker')
        if label == 'chief' or re.search(r'step \d+/\d+, ', task_log(job_dir, log)):
            assert rates and all(rate > 0 for _, rate in rates), label
    evaluated = [step for step, _ in scalars(job_dir / 'eval')['auc']]
    assert len(evaluated) >= 2 and min(evaluated) > 0
    assert 'Evaluation of step' not in task_log(job_dir, 'chief-0').split(
        'Loss for final step')[0]
    assert len(cluster.pids()) == 5
    assert_all_exited(cluster.pids())


def test_parameter_servers_with_many_steps_per_loop(data_dir, tmp_path):
    """1 ps, chief + 1 worker, each running 16 steps per Session.run.

    Variables are read from and updated on the ps inside each task's loop;
    the job reaches its target, saves intact checkpoints and learns.
    """
    job_dir = tmp_path / 'job'
    # Long enough for both tasks to train (one task alone does ~300 steps a
    # second); the worker starts at once, as the chief's start-up takes seconds.
    steps = 3000
    cluster = launch(job_dir, ['--parameter-server-count', '1', '--worker-count', '1'],
                     _trainer(data_dir, job_dir, steps, 1000, '--steps-per-loop', '16',
                              '--max-worker-delay-secs', '0'))
    assert cluster.finish() == 0, cluster.output[-6000:]
    final = final_step(cluster.output)
    assert steps <= final <= steps + ASYNC_OVERSHOOT
    for label in ('chief-0', 'worker-0'):
        assert re.search(r'Loss for final step: \d', task_log(job_dir, label)), label
    assert re.search(r'INFO step \d+/%d, ' % steps, task_log(job_dir, 'chief-0'))
    assert_checkpoints_intact(job_dir, final, VARIABLES, exact_steps=False)
    assert_beats_baselines(final_metrics(task_log(job_dir, 'chief-0'))[1],
                           data_dir / 'taxi_trips_eval.csv', margin=0.03)
    assert_all_exited(cluster.pids())


def test_multi_worker_mirrored_resumes_on_multiples_and_learns(data_dir, tmp_path):
    """Synchronous all-reduce across chief + 1 worker, sparse gradients included.

    One step per Session.run (the strategy's default; more is refused). A
    first job stops at step 110; the second resumes there, and the chief
    saves at multiples of 20 again (120, 140, ...; not 130, 150, ... counted
    from 110) up to 200, where the model must beat the trivial baselines.
    """
    job_dir = tmp_path / 'job'
    flags = ['--parameter-server-count', '0', '--worker-count', '1']
    keep_all = ('--keep-checkpoint-max', '20')
    cluster = launch(job_dir, flags, _trainer(data_dir, job_dir, 110, 20, *keep_all))
    assert cluster.finish() == 0, cluster.output[-6000:]
    assert final_step(cluster.output) == 110
    assert listed_checkpoints(job_dir) == [0, 20, 40, 60, 80, 100, 110]
    assert_all_exited(cluster.pids())

    cluster = launch(job_dir, flags, _trainer(data_dir, job_dir, 200, 20, *keep_all))
    assert cluster.finish() == 0, cluster.output[-6000:]
    assert final_step(cluster.output) == 200
    assert re.search(r'^\[chief-0\] .*Resuming from global step 110 ', cluster.output, re.M)
    for label in ('chief-0', 'worker-0'):
        log = task_log(job_dir, label)
        assert 'MultiWorkerMirroredStrategy with cluster_spec' in log
        assert re.search(r'INFO step 200/200, .*loss = ', log), label
        assert 'Shape mismatch' not in log
    assert listed_checkpoints(job_dir) == [0, 20, 40, 60, 80, 100, 110, 120, 140, 160, 180, 200]
    assert_checkpoints_intact(job_dir, 200, VARIABLES)
    assert latest_checkpoint_step(job_dir / 'tmp_worker_0') == 200
    assert_beats_baselines(final_metrics(cluster.output)[1],
                           data_dir / 'taxi_trips_eval.csv', margin=0.03)
    # Nothing written where no one reads it: no events in the worker's save directory.
    assert not [f for f in os.listdir(job_dir / 'tmp_worker_0') if 'tfevents' in f]
    assert_all_exited(cluster.pids())


def test_killed_worker_and_chief_are_restarted_and_the_job_finishes(data_dir, tmp_path):
    """SIGKILL worker-0 while it trains, later the chief; each restarts with its TF_CONFIG."""
    job_dir = tmp_path / 'job'
    check_worker_and_chief_restart(job_dir, _trainer(data_dir, job_dir, 3000, 250),
                                   train_steps=3000, checkpoint_steps=250,
                                   required_variables=VARIABLES)
