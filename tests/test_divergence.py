"""A run that diverges (a NaN or infinite loss) stops with one line and leaves a
job-dir a rerun resumes from, for every trainer, through the real CLIs.

Each CLI test trains a few sane steps, then diverges with `--learning-rate 1e30`
and a checkpoint every step (so a save falls right on the divergence), then
resumes with sane flags. Before: a `NanLossDuringTrainingError` traceback after
saving the diverged variables, and every rerun failed the same way.
"""
import os
import re
import signal
import sys

import numpy as np
import pytest
import tensorflow as tf

import taxi_trips
from cluster_helpers import launch
from conftest import run_module
from estimator_trainers import hooks

TAXI = 'taxi_estimator.task'
CIFAR = 'cifar10_estimator.cifar10_main'
KERAS = 'keras_estimator.trainer'
DIVERGE = ['--learning-rate', '1e30', '--checkpoint-num-steps', '1']
# Evaluations only at the end: in-training ones are not what is tested here.
QUIET = ['--eval-frequency-secs', '3600']


@pytest.fixture(scope='module')
def taxi_files(tmp_path_factory):
    train, evals = taxi_trips.write_layout_files(tmp_path_factory.mktemp('taxi_data'))
    return ['--train-files', str(train), '--eval-files', str(evals), '--batch-size', '64',
            '--random-seed', '3', '--eval-frequency-secs', '3600']


def listed_steps(job_dir):
    """Steps of the checkpoints the `checkpoint` state file lists, the latest last."""
    state = tf.train.get_checkpoint_state(str(job_dir))
    return [int(p.rsplit('-', 1)[1]) for p in state.all_model_checkpoint_paths]


def checkpoint_files(job_dir):
    return sorted(n for n in os.listdir(job_dir) if n.startswith('model.ckpt-'))


def assert_finite(job_dir):
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(job_dir)))
    for name, dtype in reader.get_variable_to_dtype_map().items():
        if dtype.is_floating:
            assert np.all(np.isfinite(reader.get_tensor(name))), name


def diverge_then_resume(module, common, job_dir, flags, hint):
    """Trains to 4, diverges, resumes to 8: the checks every trainer must pass."""
    run_module(module, *common, '--job-dir', job_dir, '--train-steps', '4',
               '--checkpoint-num-steps', '4', check=0)
    kept = checkpoint_files(job_dir)
    proc = run_module(module, *common, '--job-dir', job_dir, '--train-steps', '40',
                      *flags, check=1)
    assert 'Traceback' not in proc.stderr, proc.stderr[-5000:]
    lines = proc.stderr.strip().splitlines()
    assert [l for l in lines if l.startswith('error:')] == lines[-1:], proc.stderr[-3000:]
    assert re.fullmatch(
        r'error: training diverged at step (\d+): loss = (nan|-?inf); the latest checkpoint '
        r'stays %s, the last whose variables gave a finite loss, and a rerun resumes '
        r'from it; %s' % (re.escape(str(job_dir / 'model.ckpt-4')), re.escape(hint)),
        lines[-1]), lines[-1]
    # No diverged checkpoint (step 5 held the variables that then gave a NaN loss).
    assert listed_steps(job_dir) == [0, 4]
    assert checkpoint_files(job_dir) == kept
    assert_finite(job_dir)

    rerun = run_module(module, *common, '--job-dir', job_dir, '--train-steps', '8',
                       '--checkpoint-num-steps', '4', check=0)
    assert 'Resuming from global step 4 ' in rerun.stderr
    assert 'Final evaluation at global step 8' in rerun.stderr
    assert listed_steps(job_dir) == [0, 4, 8]


def test_taxi_diverges_in_one_line_and_resumes(taxi_files, tmp_path):
    diverge_then_resume(TAXI, taxi_files, tmp_path / 'job', DIVERGE,
                        'lower --learning-rate or --linear-learning-rate')


@pytest.mark.slow
def test_keras_diverges_in_one_line_and_resumes(cifar10_data_dir, tmp_path):
    """Seed 001's CIFAR-10 MLP (the Keras models share the trainer's loss check)."""
    common = ['--data-dir', cifar10_data_dir, '--model', 'cifar10_mlp', '--batch-size', '20',
              '--random-seed', '3', *QUIET]
    diverge_then_resume(KERAS, common, tmp_path / 'job', DIVERGE, 'lower --learning-rate')


@pytest.mark.slow
def test_parameter_server_cluster_diverges_in_one_line_and_resumes(taxi_files, tmp_path):
    """Chief, worker and ps: the chief names the step and the kept checkpoint."""
    job_dir = tmp_path / 'job'
    flags = ['--parameter-server-count', '1', '--worker-count', '1']

    def trainer(*extra):
        return [sys.executable, '-m', TAXI, *taxi_files, '--job-dir', str(job_dir),
                '--max-worker-delay-secs', '0', *extra]

    cluster = launch(job_dir, flags, trainer('--train-steps', '4',
                                             '--checkpoint-num-steps', '4'))
    assert cluster.finish() == 0, cluster.output[-6000:]
    cluster = launch(job_dir, flags, trainer('--train-steps', '400', *DIVERGE))
    assert cluster.finish() == 1, cluster.output[-6000:]
    assert re.search(r'^\[chief-0\] error: chief-0: training diverged at step \d+: loss = '
                     r'(nan|-?inf); the latest checkpoint stays \S+/model.ckpt-\d+, the last '
                     r'whose variables gave a finite loss', cluster.output, re.M), (
                         cluster.output[-6000:])
    assert 'Traceback' not in cluster.output
    assert_finite(job_dir)
    kept = listed_steps(job_dir)[-1]
    cluster = launch(job_dir, flags, trainer('--train-steps', str(kept + 4),
                                             '--checkpoint-num-steps', '4'))
    assert cluster.finish() == 0, cluster.output[-6000:]
    assert re.search(r'^\[chief-0\] .*Resuming from global step %d ' % kept,
                     cluster.output, re.M)


# --- the hooks themselves, on a tiny graph ---------------------------------------------

def _train(job_dir, updates, steps_per_run=1):
    """Runs training steps through the hooks until they raise; returns the `Diverged`.

    The model: one variable v, starting at 1, whose update at global step s sets
    it to `updates[s]`; the loss of a step is v**2 before its update, as in
    training. With several steps per session run (an in-graph loop, unrolled
    here) the run's loss is its last step's.
    """
    with tf.Graph().as_default():
        step = tf.compat.v1.train.get_or_create_global_step()
        value = tf.compat.v1.get_variable('v', initializer=1.0)
        table = tf.constant(updates, tf.float32)
        done = []
        for _ in range(steps_per_run):
            with tf.control_dependencies(done):
                loss = tf.square(value.read_value())
            with tf.control_dependencies([loss]):
                update = value.assign(table[tf.cast(step.read_value(), tf.int32)])
            with tf.control_dependencies([update]):
                done = [step.assign_add(1)]
        with tf.control_dependencies(done):
            loss = tf.identity(loss)
        tf.compat.v1.add_to_collection(tf.compat.v1.GraphKeys.LOSSES, loss)
        tf.compat.v1.add_to_collection(tf.compat.v1.GraphKeys.SAVERS,
                                       tf.compat.v1.train.Saver(max_to_keep=100))
        divergence = hooks.StopOnDivergenceHook()
        saver = hooks.AlignedCheckpointSaverHook(str(job_dir), save_steps=1,
                                                 listeners=[divergence.listener])
        with pytest.raises(hooks.Diverged) as caught:
            with tf.compat.v1.train.MonitoredSession(hooks=[divergence, saver]) as session:
                for _ in range(len(updates)):
                    session.run(loss)
        return divergence.annotated(caught.value)


def test_saver_refuses_variables_that_diverged_after_a_finite_loss(tmp_path):
    """Step 2's update makes v infinite while its loss (v before it) was finite: the
    save at step 2 is refused, so the latest checkpoint stays step 1's."""
    diverged = _train(tmp_path, [2.0, np.inf, 3.0])
    assert (diverged.step, diverged.loss) == (2, None)
    assert str(diverged) == ('training diverged at step 2: its variables are no longer '
                             'all finite')
    assert listed_steps(tmp_path) == [0, 1]
    assert diverged.unverified_steps == ()


def test_loss_check_names_the_checkpoint_that_never_gave_a_finite_loss(tmp_path):
    """v becomes 1e30 (finite: saved at step 1), then its loss overflows: training stops
    at step 2 and reports step 1's checkpoint, which the driver removes."""
    diverged = _train(tmp_path, [1e30, 1.0, 1.0])
    assert (diverged.step, diverged.loss) == (2, float('inf'))
    assert str(diverged) == 'training diverged at step 2: loss = inf'
    assert diverged.unverified_steps == (1,)
    assert listed_steps(tmp_path) == [0, 1]


def test_loss_check_works_with_several_steps_per_run(tmp_path):
    """An in-graph loop of 3 steps whose middle step diverges: the run's loss (its last
    step's) is not finite, and the check stops training at the run's end."""
    diverged = _train(tmp_path, [2.0, np.nan, 4.0, 5.0, 6.0, 7.0], steps_per_run=3)
    assert diverged.step == 3 and np.isnan(diverged.loss)
    assert listed_steps(tmp_path) == [0]


def test_stop_signal_save_refuses_variables_that_diverged(tmp_path):
    """SIGTERM (or Ctrl-C) right after an update that diverged, before its loss was
    checked: the stop's final save is skipped, not made of NaN, and the line says so."""
    from estimator_trainers import faults  # pylint: disable=import-outside-toplevel
    termination = faults.Termination('local', lambda line: None)
    handlers = {signum: signal.getsignal(signum) for signum in faults.STOP_SIGNALS}
    try:
        _stop_after_a_diverged_update(termination, tmp_path)
    finally:  # the hook took the stop signals over, as in a trainer
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
    assert not [n for n in os.listdir(tmp_path) if n.startswith('model.ckpt')]
    assert str(termination.failure()) == (
        'local: stopped on SIGTERM; no final checkpoint (its variables are no longer all '
        'finite: training diverged); no checkpoint was saved')


def _stop_after_a_diverged_update(termination, job_dir):
    from estimator_trainers import faults  # pylint: disable=import-outside-toplevel
    with tf.Graph().as_default():
        step = tf.compat.v1.train.get_or_create_global_step()
        value = tf.compat.v1.get_variable('v', initializer=1.0)
        with tf.control_dependencies([value.assign(np.nan)]):
            train = step.assign_add(1)
        tf.compat.v1.add_to_collection(tf.compat.v1.GraphKeys.SAVERS,
                                       tf.compat.v1.train.Saver())
        hook = termination.hook(str(job_dir))
        with pytest.raises(faults.Terminated):
            with tf.compat.v1.train.MonitoredSession(hooks=[hook]) as session:
                session.run(train)
                termination.requested.set()
