"""The Evaluator prepared in a background thread: same metrics, a warm first evaluation."""
import threading

import numpy as np
import pytest
import tensorflow as tf

from estimator_trainers import errors
from estimator_trainers import evaluation


def _model_fn(features, labels, mode):
    weight = tf.compat.v1.get_variable('w', [], initializer=tf.compat.v1.zeros_initializer())
    predictions = features['x'] * weight
    loss = tf.reduce_mean(tf.square(predictions - labels))
    train_op = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(
        loss, global_step=tf.compat.v1.train.get_global_step())
    return tf.estimator.EstimatorSpec(
        mode, loss=loss, train_op=train_op,
        eval_metric_ops={'error': tf.compat.v1.metrics.mean_absolute_error(labels, predictions)})


def _input_fn(rows=64):
    x = np.arange(rows, dtype=np.float32) / rows
    return lambda: tf.data.Dataset.from_tensor_slices(({'x': x}, 3 * x)).batch(8)


def _held_input_fn(release):
    """`_input_fn()` that waits for `release` first: the preparing thread builds the
    graph, so it is held there, inside its preparation, until the test lets go."""
    def input_fn():
        assert release.wait(timeout=60)
        return _input_fn()()
    return input_fn


@pytest.fixture(scope='module')
def trained(tmp_path_factory):
    """An estimator with checkpoints at steps 5 and 10."""
    job_dir = str(tmp_path_factory.mktemp('job'))
    estimator = tf.estimator.Estimator(_model_fn, job_dir, tf.estimator.RunConfig(
        save_checkpoints_steps=5, keep_checkpoint_max=None))
    estimator.train(lambda: _input_fn()().repeat(), max_steps=10)
    return estimator


def test_prepared_in_background_evaluates_as_built_on_demand(trained):
    on_demand = evaluation.Evaluator(trained, _input_fn())
    release = threading.Event()
    prepared = evaluation.Evaluator(trained, _held_input_fn(release),
                                    clock=evaluation.Clock())
    assert not prepared.preparing()
    prepared.prepare_in_background()
    assert prepared.preparing()
    release.set()
    for step in (5, 10):
        path = '%s/model.ckpt-%d' % (trained.model_dir, step)
        expected, got = on_demand(path), prepared(path)
        assert got == pytest.approx(expected) and got['global_step'] == step
    # Both of its evaluations ran warm and count towards the budget; on demand
    # the first one built the graph and optimised it, so only the second does.
    assert prepared.run_secs > prepared.last_run_secs > 0 and not prepared.preparing()
    assert on_demand.run_secs == on_demand.last_run_secs > 0


def test_settle_waits_for_a_preparation_under_way_and_no_longer_than_asked(trained):
    """A run leaving training early must not exit while the preparing thread is
    inside TensorFlow (the interpreter's exit then aborts the process)."""
    release = threading.Event()
    evaluator = evaluation.Evaluator(trained, _held_input_fn(release))
    evaluator.settle()  # nothing under way: returns at once
    evaluator.prepare_in_background()
    evaluator.settle(timeout_secs=0.2)  # a preparation that hangs is not waited out
    assert evaluator.preparing()
    threading.Timer(0.5, release.set).start()
    evaluator.settle()
    assert not evaluator.preparing()
    assert evaluator('%s/model.ckpt-10' % trained.model_dir)['global_step'] == 10


def test_a_failed_preparation_is_raised_by_the_evaluation(trained):
    def broken():
        raise ValueError('no eval data here')
    evaluator = evaluation.Evaluator(trained, broken)
    evaluator.prepare_in_background()
    with pytest.raises(ValueError, match='no eval data here'):
        evaluator(None)


def test_a_declared_metric_the_graph_lacks_ends_the_first_evaluation(trained):
    """A trainer whose `eval_metrics` names what its model_fn does not report is
    found once the evaluation graph is built (in the background, as training
    starts), not after training and the export at the tuning report."""
    evaluator = evaluation.Evaluator(trained, _input_fn(),
                                     required_metrics=[('--hypertune-metric', 'auc')])
    evaluator.prepare_in_background()
    with pytest.raises(errors.TaskFailure) as raised:
        evaluator(None)
    assert str(raised.value) == (
        '--hypertune-metric auc: the trainer declares it among its eval_metrics, but its '
        'evaluation graph reports error, loss; the declaration is wrong')
    reported = evaluation.Evaluator(trained, _input_fn(),
                                    required_metrics=[('--hypertune-metric', 'error')])
    assert reported(None)['global_step'] == 10


def test_evaluation_input_runs_without_autotuning_or_rewrites():
    with tf.Graph().as_default():
        options = _input_fn()().options()
        assert options.autotune.enabled is not False
        assert options.experimental_optimization.apply_default_optimizations is not False
        options = evaluation.without_tuning(_input_fn())().options()
        assert options.autotune.enabled is False
        assert options.experimental_optimization.apply_default_optimizations is False
        features = {'x': tf.constant([1.0])}
        assert evaluation.without_tuning(lambda: features)() is features


def test_the_evaluator_reports_the_step_the_weights_were_saved_at(tmp_path, caplog):
    """Asynchronous workers can step between the chief naming a checkpoint and
    saving it: `model.ckpt-301` may hold step 302. The evaluator's exit line
    names the step it evaluated, as its evaluation line does."""
    (tmp_path / 'model.ckpt-301.index').write_bytes(b'')
    (tmp_path / 'checkpoint').write_text('model_checkpoint_path: "model.ckpt-301"\n')
    paths = []

    def evaluate(path):
        paths.append(path)
        return {'accuracy': 0.8, 'global_step': 302}

    # TensorFlow's logger stops propagating to the root logger caplog listens
    # on once a test in this process has run logs.configure(): listen on it.
    logger = tf.get_logger()
    logger.addHandler(caplog.handler)
    try:
        with caplog.at_level('INFO', logger='tensorflow'):
            metrics = evaluation.follow(str(tmp_path), evaluate, train_steps=300,
                                        poll_secs=0)
    finally:
        logger.removeHandler(caplog.handler)
    assert paths == [str(tmp_path / 'model.ckpt-301')]
    assert metrics['global_step'] == 302
    assert 'Exiting evaluation, global_step=302 >= train max_steps=300' in caplog.text
