"""--steps-per-loop: many training steps per Session.run, with the semantics of one.

The in-process tests train a deterministic toy model (no random op, input in
order) both ways and compare the results exactly: the loop runs the same
steps on the same batches in the same order. The CLI tests train the taxi
model both ways and compare what users see: checkpoints, evaluations,
progress lines and TensorBoard summaries at the same steps, resuming from a
step off the multiples, and the one-line refusals.
"""
import os
import re

import numpy as np
import pytest
import tensorflow as tf
from tensorboard.backend.event_processing import event_accumulator
from tensorflow.core.framework import dataset_options_pb2  # pylint: disable=g-direct-tensorflow-import

import taxi_trips
from conftest import one_error_line, run_module
from estimator_trainers import run_steps
from estimator_trainers import steps_loop
from estimator_trainers import summaries
from taxi_trips import final_metrics

TAXI = 'taxi_estimator.task'
BATCH = 4


class _FetchHook(tf.compat.v1.train.SessionRunHook):
    """Fetches a tensor of the model at every run."""

    def __init__(self, tensor):
        self._tensor = tensor

    def before_run(self, run_context):
        return tf.compat.v1.train.SessionRunArgs(self._tensor)


def _toy_estimator(model_dir, hook=None):
    """y = w * x + b by plain SGD on x = 0, 1, 2, ...; counts the examples it sees."""
    def model_fn(features, labels, mode):
        w = tf.compat.v1.get_variable('w', [], initializer=tf.zeros_initializer())
        b = tf.compat.v1.get_variable('b', [], initializer=tf.zeros_initializer())
        seen = tf.compat.v1.get_variable('seen', [], tf.float32, tf.zeros_initializer(),
                                         trainable=False)
        count = tf.compat.v1.get_variable('count', [], tf.float32,
                                          tf.zeros_initializer(), trainable=False)
        x = tf.cast(features['x'], tf.float32)
        logits = w * x + b
        loss = tf.reduce_mean((logits - tf.cast(labels, tf.float32)) ** 2)
        tf.compat.v1.summary.scalar('w', w)
        step = tf.compat.v1.train.get_global_step()
        with tf.control_dependencies([seen.assign_add(tf.reduce_sum(x)),
                                      count.assign_add(tf.cast(tf.size(x), tf.float32))]):
            train_op = tf.compat.v1.train.GradientDescentOptimizer(1e-4).minimize(
                loss, global_step=step)
        hooks = {None: [], 'fetch': [_FetchHook(logits)],
                 'logging': [tf.compat.v1.train.LoggingTensorHook(
                     {'logits': logits}, every_n_iter=1)]}[hook]
        return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op,
                                          training_hooks=hooks)

    # Estimator's own saver: at the start and at the end of each run.
    config = tf.estimator.RunConfig(model_dir=model_dir, save_summary_steps=0,
                                    save_checkpoints_steps=10 ** 6,
                                    log_step_count_steps=None)
    return tf.estimator.Estimator(model_fn=model_fn, config=config)


def _input_fn():
    x = tf.data.Dataset.range(10 ** 6)
    return x.map(lambda i: ({'x': i}, 2 * i + 1)).batch(BATCH)


class _RunRecorder(tf.compat.v1.train.SessionRunHook):
    """Records (global step after the run, steps it ran) of every Session.run."""

    def begin(self):
        self.fetches = run_steps.step_fetches()
        self.runs = []

    def before_run(self, run_context):
        return tf.compat.v1.train.SessionRunArgs(self.fetches)

    def after_run(self, run_context, run_values):
        self.runs.append(run_steps.steps_done(run_values.results))


def _train(model_dir, steps_per_loop, target, intervals=(), resume_target=None):
    settings = steps_loop.settings(steps_per_loop, train_steps=target,
                                   every_steps=intervals)
    estimator = steps_loop.wrap(_toy_estimator(model_dir), settings)
    input_fn = steps_loop.wrap_input_fn(_input_fn) if steps_per_loop > 1 else _input_fn
    recorder = _RunRecorder()
    estimator.train(input_fn, max_steps=resume_target or target, hooks=[recorder])
    values = {name: tf.train.load_variable(model_dir, name)
              for name in ('w', 'b', 'seen', 'count', 'global_step')}
    return values, recorder.runs


def test_the_loop_trains_exactly_as_one_step_per_run(tmp_path):
    one, one_runs = _train(str(tmp_path / 'one'), 1, 37)
    loop, loop_runs = _train(str(tmp_path / 'loop'), 8, 37, intervals=(10,))
    assert loop['global_step'] == one['global_step'] == 37
    # The same batches in the same order: 37 steps of 4 examples, x = 0..147.
    assert loop['count'] == one['count'] == 37 * BATCH
    assert loop['seen'] == one['seen'] == sum(range(37 * BATCH))
    np.testing.assert_allclose([loop['w'], loop['b']], [one['w'], one['b']], rtol=1e-6)
    assert one_runs == [(step, 1) for step in range(1, 38)]
    # Runs end at every multiple of the interval and at the target.
    assert loop_runs == [(8, 8), (10, 2), (18, 8), (20, 2), (28, 8), (30, 2), (37, 7)]


class _GraphOps(tf.compat.v1.train.SessionRunHook):
    """Records the op types of the training graph's functions (the loop body), and
    the private thread pool sizes its datasets' options set."""

    def begin(self):
        graph_def = tf.compat.v1.get_default_graph().as_graph_def()
        self.function_ops = {n.op for f in graph_def.library.function for n in f.node_def}
        self.private_pools = [
            dataset_options_pb2.Options.FromString(
                n.attr['serialized_options'].s).threading_options.private_threadpool_size
            for n in graph_def.node if n.op == 'OptionsDataset']


def test_the_loop_reads_its_batches_synchronously_off_a_private_pool(tmp_path):
    """The body reads with IteratorGetNextSync (the asynchronous kernel woke two threads
    a step). That is safe because the dataset, which had no threads of its own, gets
    a private pool: nothing it runs waits for the session's threads."""
    settings = steps_loop.settings(8, train_steps=16)
    estimator = steps_loop.wrap(_toy_estimator(str(tmp_path / 'job')), settings)
    ops = _GraphOps()
    estimator.train(steps_loop.wrap_input_fn(_input_fn), max_steps=16, hooks=[ops])
    assert 'IteratorGetNextSync' in ops.function_ops
    assert 'IteratorGetNext' not in ops.function_ops
    assert ops.private_pools == [os.cpu_count()]
    assert tf.train.load_variable(str(tmp_path / 'job'), 'count') == 16 * BATCH


def test_run_end_predicts_where_the_loop_stops():
    settings = steps_loop.settings(8, train_steps=100, every_steps=[20, 30, None])
    ends, step = [], 0
    while step < 100:
        step = settings.run_end(step)
        ends.append(step)
    assert ends == [8, 16, 20, 28, 30, 38, 40, 48, 56, 60, 68, 76, 80, 88, 90, 98, 100]
    assert settings.run_end(13) == 20  # a resumed run first reaches the next multiple
    assert settings.run_end(100) == 100


def test_variables_restore_across_loop_lengths(tmp_path):
    """Names are those of a plain build: a job trained with 1 resumes with 8 and back."""
    model_dir = str(tmp_path / 'job')
    _train(model_dir, 1, 13)
    values, runs = _train(model_dir, 8, 40, intervals=(20,))
    assert runs[0] == (20, 7) and values['global_step'] == 40
    values, _ = _train(model_dir, 1, 45)
    assert values['count'] == 45 * BATCH


@pytest.mark.parametrize('hook', ['fetch', 'logging'])
def test_a_hook_fetching_a_tensor_of_the_loop_is_refused_clearly(tmp_path, hook):
    estimator = steps_loop.wrap(_toy_estimator(str(tmp_path), hook=hook),
                                steps_loop.settings(4, train_steps=8))
    with pytest.raises(ValueError, match='inside the --steps-per-loop loop'):
        estimator.train(steps_loop.wrap_input_fn(_input_fn), max_steps=8)


# --- the taxi trainer's command line ----------------------------------------

CADENCE = ['--train-steps', '100', '--checkpoint-num-steps', '20',
           '--log-step-count-steps', '40', '--save-summary-steps', '25',
           '--eval-every-steps', '30', '--eval-frequency-secs', '0',
           '--keep-checkpoint-max', '10',
           '--random-seed', '3', '--batch-size', '32']


@pytest.fixture(scope='module')
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp('taxi_loop_data')
    train, evals = taxi_trips.write_layout_files(folder, train_rows=800, eval_rows=200)
    return {'train': train, 'eval': evals}


def _taxi(files, job_dir, *flags, check=0):
    return run_module(TAXI, '--train-files', files['train'], '--eval-files', files['eval'],
                      '--job-dir', job_dir, *flags, check=check)


def _checkpoints(job_dir):
    return sorted(int(m.group(1)) for m in (
        re.fullmatch(r'model\.ckpt-(\d+)\.index', name) for name in os.listdir(job_dir)) if m)


def _steps(pattern, stderr):
    return [int(step) for step in re.findall(pattern, stderr)]


def _summary_steps(job_dir, tag):
    acc = event_accumulator.EventAccumulator(str(job_dir))
    acc.Reload()
    return [event.step for event in acc.Scalars(tag)]


@pytest.fixture(scope='module')
def both(files, tmp_path_factory):
    """The same taxi run with one step per Session.run and with loops of 8."""
    runs = {}
    for n in (1, 8):
        job_dir = tmp_path_factory.mktemp('loop%d' % n) / 'job'
        proc = _taxi(files, job_dir, *CADENCE, '--steps-per-loop', n)
        runs[n] = (job_dir, proc.stderr)
    return runs


def test_the_same_checkpoints_evaluations_lines_and_summaries(both):
    seen = {}
    for n, (job_dir, stderr) in both.items():
        seen[n] = {
            'checkpoints': _checkpoints(job_dir),
            'evaluations': _steps(r'Evaluation of step (\d+) ', stderr),
            'progress': _steps(r'INFO step (\d+)/100, ', stderr),
            'loss summaries': _summary_steps(job_dir, 'loss'),
            'auc summaries': _summary_steps(job_dir, 'auc'),
            'eval summaries': _summary_steps(job_dir / 'eval', 'auc'),
        }
    assert seen[8] == seen[1]
    assert seen[1] == {
        'checkpoints': [0, 20, 40, 60, 80, 100],
        'evaluations': [30, 60, 90, 100],
        'progress': [40, 80, 100],
        'loss summaries': [25, 50, 75, 100],
        'auc summaries': [25, 50, 75, 100],
        'eval summaries': [30, 60, 90, 100],
    }


def test_losses_match_one_step_per_run_within_noise(both):
    (_, one), (_, loop) = final_metrics(both[1][1]), final_metrics(both[8][1])
    assert abs(loop['auc'] - one['auc']) < 0.03, (one, loop)
    assert abs(loop['loss'] - one['loss']) < 0.05, (one, loop)
    # Progress lines report the whole job's rate from global-step deltas.
    assert re.search(r'step 100/100, [\d.]+ steps/s, ETA 0s: .*examples/sec', both[8][1])


def test_resume_from_an_unaligned_step_still_lands_on_multiples(files, tmp_path):
    job_dir = tmp_path / 'job'
    _taxi(files, job_dir, *CADENCE[2:], '--train-steps', '13', '--steps-per-loop', '1')
    assert _checkpoints(job_dir) == [0, 13]
    proc = _taxi(files, job_dir, *CADENCE[2:], '--train-steps', '60', '--steps-per-loop', '8',
                 '--save-summary-steps', '20')
    assert 'Resuming from global step 13' in proc.stderr
    assert _checkpoints(job_dir) == [0, 13, 20, 40, 60]
    assert _steps(r'Evaluation of step (\d+) ', proc.stderr) == [30, 60]
    assert _steps(r'INFO step (\d+)/60, ', proc.stderr) == [40, 60]
    # The first run after the resume ends at 20, a summary step too.
    assert _summary_steps(job_dir, 'loss') == [13, 20, 40, 60]


def test_refused_in_one_line_where_the_strategy_cannot_loop(files, tmp_path):
    proc = _taxi(files, tmp_path / 'job', '--distribution-strategy', 'mirrored',
                 '--steps-per-loop', '8', check=None)
    line = one_error_line(proc, '--steps-per-loop=8 cannot run under '
                                '--distribution-strategy=mirrored')
    assert '--steps-per-loop 1' in line
    assert not os.path.exists(tmp_path / 'job')


def test_refused_with_cifar10_sync_replicas(tmp_path):
    proc = run_module('cifar10_estimator.cifar10_main', '--data-dir', tmp_path / 'none',
                      '--job-dir', tmp_path / 'job', '--sync', '--steps-per-loop', '4')
    one_error_line(proc, '--steps-per-loop=4 cannot run with --sync')


class _ProgressRecorder(tf.compat.v1.train.SessionRunHook):
    """Records (global step after the run, progress values) of every Session.run."""

    def begin(self):
        self.fetches = {'progress': summaries.progress_values(),
                        'steps': run_steps.step_fetches()}
        self.runs = []

    def before_run(self, run_context):
        return tf.compat.v1.train.SessionRunArgs(self.fetches)

    def after_run(self, run_context, run_values):
        step, _ = run_steps.steps_done(run_values.results['steps'])
        self.runs.append((step, dict(run_values.results['progress'])))


def _counting_estimator(model_dir):
    """The toy model with a batch metric (the mean of x) that counts its computations."""
    def model_fn(features, labels, mode):
        w = tf.compat.v1.get_variable('w', [], initializer=tf.zeros_initializer())
        computed = tf.compat.v1.get_variable('computed', [], tf.float32,
                                             tf.zeros_initializer(), trainable=False)
        x = tf.cast(features['x'], tf.float32)
        loss = tf.reduce_mean((w * x - tf.cast(labels, tf.float32)) ** 2)

        def mean_of_x():
            with tf.control_dependencies([computed.assign_add(1.0)]):
                return tf.reduce_mean(x)
        summaries.log_progress('mean_x', summaries.when_due(mean_of_x))
        train_op = tf.compat.v1.train.GradientDescentOptimizer(1e-4).minimize(
            loss, global_step=tf.compat.v1.train.get_global_step())
        return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)

    config = tf.estimator.RunConfig(model_dir=model_dir, save_summary_steps=0,
                                    save_checkpoints_steps=10 ** 6, log_step_count_steps=None)
    return tf.estimator.Estimator(model_fn=model_fn, config=config)


def test_batch_metrics_are_computed_only_at_the_step_that_ends_a_loop(tmp_path):
    """Only the last step's batch metrics are read after a loop; the others'
    are not computed, and what is read is what one step per run reads."""
    seen = {}
    for n in (1, 8):
        model_dir = str(tmp_path / ('loop%d' % n))
        settings = steps_loop.settings(n, train_steps=20, every_steps=[5])
        estimator = steps_loop.wrap(_counting_estimator(model_dir), settings)
        recorder = _ProgressRecorder()
        estimator.train(steps_loop.wrap_input_fn(_input_fn) if n > 1 else _input_fn,
                        max_steps=20, hooks=[recorder])
        seen[n] = (recorder.runs, tf.train.load_variable(model_dir, 'computed'))
    runs_of_8, computed_of_8 = seen[8]
    assert [step for step, _ in runs_of_8] == [5, 10, 15, 20]
    assert computed_of_8 == 4  # one per run, at its last step
    one_per_run = dict(seen[1][0])
    assert seen[1][1] == 20
    for step, progress in runs_of_8:
        # Batch k (from 0) holds x = 4k .. 4k + 3; step k + 1 trains on it.
        assert progress['mean_x'] == one_per_run[step]['mean_x'] == 4 * (step - 1) + 1.5
