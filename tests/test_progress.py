"""Progress lines on slow paths (issue #48): at least one every `hooks.PROGRESS_SECS`,
whatever a step takes.

A toy Estimator whose step sleeps trains in this process with the progress
hook, its interval at a multiple never reached; `PROGRESS_SECS` is shortened
so the test takes seconds. Its lines come from TensorFlow's own logger.
"""
import logging
import time

import numpy as np
import pytest
import tensorflow as tf

from estimator_trainers import evaluation
from estimator_trainers import hooks

PROGRESS_SECS = 1.0
STEPS = 3


def _sleeping_estimator(model_dir, step_secs):
    def model_fn(features, labels, mode):
        w = tf.compat.v1.get_variable('w', [], initializer=tf.zeros_initializer())
        slept = tf.numpy_function(lambda x: (time.sleep(step_secs), x)[1],
                                  [tf.reduce_sum(features['x'])], tf.float32)
        loss = tf.square(w * slept - 1.0)
        train_op = tf.compat.v1.train.GradientDescentOptimizer(1e-3).minimize(
            loss, global_step=tf.compat.v1.train.get_global_step())
        return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)
    return tf.estimator.Estimator(model_fn, model_dir=str(model_dir))


def _input_fn():
    return tf.data.Dataset.from_tensors(({'x': np.ones([2], np.float32)}, [0.0])).repeat()


class _Lines(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines = []

    def emit(self, record):
        self.lines.append((record.created, record.getMessage()))


@pytest.fixture
def lines(monkeypatch):
    monkeypatch.setattr(hooks, 'PROGRESS_SECS', PROGRESS_SECS)
    handler = _Lines()
    logger = tf.get_logger()
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.INFO)
    yield handler.lines
    logger.removeHandler(handler)
    logger.setLevel(level)


def test_a_slow_step_still_gets_a_line_every_interval(lines, tmp_path):
    """Steps of 1.6 intervals, a line every 1000 steps asked: the thread's lines say
    which step runs, and once the session exists no two lines are further apart
    than the interval (plus the thread's tick and this loaded machine's slack)."""
    progress = hooks.TrainingProgressHook(examples_per_step=2, every_n_steps=1000,
                                          train_steps=STEPS, eval_clock=evaluation.Clock())
    start = time.time()
    _sleeping_estimator(tmp_path, 1.6 * PROGRESS_SECS).train(
        _input_fn, max_steps=STEPS, hooks=[progress])
    said = [(created, text) for created, text in lines
            if created >= start and text.startswith('step ')]
    running = [text for _, text in said if ' running for ' in text]
    assert running and all(
        text.startswith('step ') and text.endswith('s') for text in running), said
    assert said[-1][1].startswith('step %d/%d, ' % (STEPS, STEPS)), said
    times = [created for created, _ in said]
    assert len(times) >= STEPS and max(
        b - a for a, b in zip(times, times[1:])) < PROGRESS_SECS * 1.8, said
    time.sleep(3 * PROGRESS_SECS / 10)  # the thread has stopped: nothing more
    assert [t for t in lines if t[0] > said[-1][0] + 0.05 and t[1].startswith('step ')] == []
