"""The shared driver's cluster behaviour that needs no cluster to show."""
import glob
import json
import os

import tensorflow as tf
from tensorboard.backend.event_processing import event_accumulator

from estimator_trainers import checkpoints
from estimator_trainers import cluster as cluster_lib
from estimator_trainers import training


def _model_fn(features, labels, mode):
    weight = tf.compat.v1.get_variable('w', [1], initializer=tf.compat.v1.zeros_initializer())
    loss = tf.reduce_mean(tf.square(features * weight - labels))
    train_op = tf.compat.v1.train.GradientDescentOptimizer(0.1).minimize(
        loss, global_step=tf.compat.v1.train.get_global_step())
    return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op)


def _input_fn():
    return tf.data.Dataset.from_tensors(([1.0], [2.0])).repeat()


def test_evaluator_moves_on_when_its_checkpoint_is_rotated_away(tmp_path, monkeypatch):
    """The chief's --keep-checkpoint-max rotation deletes the evaluator's checkpoint
    between choosing and restoring it: the evaluator takes the newer one."""
    job_dir = str(tmp_path / 'job')
    tf.estimator.Estimator(_model_fn, model_dir=job_dir).train(_input_fn, max_steps=10)
    rotated = []

    def eval_input_fn():
        # Called after the evaluator chose model.ckpt-10, before it restores it.
        if not rotated:
            for path in glob.glob(os.path.join(job_dir, 'model.ckpt-10.*')):
                os.rename(path, path.replace('model.ckpt-10', 'model.ckpt-12'))
            tf.compat.v1.train.update_checkpoint_state(
                job_dir, os.path.join(job_dir, 'model.ckpt-12'))
        rotated.append(True)
        return _input_fn().take(1)

    cluster = cluster_lib.parse_tf_config(json.dumps({
        'cluster': {'chief': ['127.0.0.1:1'], 'ps': ['127.0.0.1:2']},
        'task': {'type': 'evaluator', 'index': 0}}))
    monkeypatch.setenv('TF_CONFIG', json.dumps(cluster.to_tf_config()))
    estimator = tf.estimator.Estimator(
        _model_fn, config=tf.estimator.RunConfig(model_dir=job_dir))
    loop = training.LoopSettings(train_steps=10, eval_steps=1)
    plan = checkpoints.plan(job_dir, cluster, None, every_steps=10, eval_every_secs=0)
    assert training.train_and_evaluate(estimator, loop, cluster, plan,
                                       train_input_fn=_input_fn,
                                       eval_input_fn=eval_input_fn) is None
    # The evaluation graph is built once; its restore of model.ckpt-10 failed, so
    # the evaluator evaluated model.ckpt-12 (the renamed step-10 variables) instead.
    assert len(rotated) == 1
    evaluated = event_accumulator.EventAccumulator(os.path.join(job_dir, 'eval'))
    evaluated.Reload()
    assert [e.step for e in evaluated.Scalars('loss')] == [10]
