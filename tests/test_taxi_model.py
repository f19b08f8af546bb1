"""The taxi model in plain ops is `DNNLinearCombinedClassifier`'s model.

The canned model_fn over the feature columns the trainer used before
(`_canned_columns`) trains a few steps and saves a checkpoint; the trainer's
model_fn must declare the same variables (optimizer slots included), restore
that checkpoint and predict the same probabilities on the same rows,
including rows with missing numbers and categories.
"""
import csv

import numpy as np
import pytest
import tensorflow as tf
from tensorflow_estimator.python.estimator.canned import dnn_linear_combined
from tensorflow_estimator.python.estimator.head import head_utils

import taxi_trips
from taxi_estimator import features
from taxi_estimator import input as input_lib
from taxi_estimator import model
from taxi_estimator import schema

HPARAMS = model.HParams(hidden_units=(8, 4), learning_rate=0.05, linear_learning_rate=0.1,
                        decay_steps=10, dropout=0.5)
TRAIN = tf.estimator.ModeKeys.TRAIN
PREDICT = tf.estimator.ModeKeys.PREDICT


def _canned_columns(stats):
    """The feature columns of the trainer before its model was written in plain ops."""
    fc = tf.feature_column

    def z_score(column):
        mean, std = stats[column]['mean'], stats[column]['std']
        return lambda x: tf.where(tf.math.is_nan(x), tf.zeros_like(x), (x - mean) / std)
    wide = [fc.categorical_column_with_identity(features.WIDE_IDS, features.WIDE_BUCKETS)]
    deep = [fc.numeric_column(c, normalizer_fn=z_score(c)) for c in schema.FLOAT_FEATURES]
    deep += [fc.indicator_column(fc.categorical_column_with_vocabulary_list(
                 'payment_type', schema.PAYMENT_TYPES, num_oov_buckets=1)),
             fc.embedding_column(fc.categorical_column_with_hash_bucket(
                 'company', features.COMPANY_BUCKETS), features.EMBEDDING_DIM)]
    return wide, deep


def _schedule(initial):
    """The trainer's learning rates are schedules (no learning-rate variable)."""
    return tf.keras.optimizers.schedules.ExponentialDecay(
        initial, decay_steps=HPARAMS.decay_steps, decay_rate=HPARAMS.learning_rate_decay_factor)


def _canned_model_fn(stats):
    wide, deep = _canned_columns(stats)
    head = head_utils.binary_or_multi_class_head(
        2, weight_column=None, label_vocabulary=None, loss_reduction=model.LOSS_REDUCTION)

    def model_fn(features_, labels, mode):
        return dnn_linear_combined._dnn_linear_combined_model_fn_v2(  # pylint: disable=protected-access
            features=features_, labels=labels, mode=mode, head=head,
            linear_feature_columns=wide, dnn_feature_columns=deep,
            linear_optimizer=lambda: tf.keras.optimizers.legacy.Ftrl(
                _schedule(HPARAMS.linear_learning_rate),
                l2_regularization_strength=model.LINEAR_L2),
            dnn_optimizer=lambda: tf.keras.optimizers.legacy.Adam(
                _schedule(HPARAMS.learning_rate)),
            dnn_hidden_units=list(HPARAMS.hidden_units), dnn_dropout=HPARAMS.dropout,
            loss_reduction=model.LOSS_REDUCTION)
    return model_fn


@pytest.fixture(scope='module')
def rows(tmp_path_factory):
    """A CSV of generated trips plus rows with missing and unseen values."""
    path = tmp_path_factory.mktemp('taxi_model') / 'rows.csv'
    taxi_trips.write_csv(path, taxi_trips.layout_rows(300, seed=5))
    odd = dict(zip(schema.COLUMNS, taxi_trips.layout_rows(1, seed=99)[0]))
    with open(path, 'a', newline='') as f:
        csv.writer(f, lineterminator='\n').writerows(
            [row[c] for c in schema.COLUMNS] for row in [
                dict(odd, trip_miles='', fare='', pickup_latitude=''),
                dict(odd, payment_type='Voucher', company=''),
                dict(odd, payment_type='', company='Unseen Cab Co')])
    return str(path), input_lib.scan([str(path)], '--train-files').stats


def _batch(path):
    """(columns as parsed, label) of every row of `path`, as one batch."""
    chunk = input_lib.parsed_chunks([path], for_model=False).rebatch(10_000).repeat()
    return tf.compat.v1.data.make_one_shot_iterator(chunk).get_next()


def _variables():
    return {v.op.name: v.shape.as_list() for v in tf.compat.v1.global_variables()}


def _trainer_model_fn(stats):
    estimator = model.build_estimator(tf.estimator.RunConfig(), stats, HPARAMS)
    return lambda features_, labels, mode: estimator.model_fn(
        features_, labels, mode, estimator.config)


def _probabilities(model_fn, path, checkpoint, for_canned):
    with tf.Graph().as_default():
        columns, _ = _batch(path)
        inputs = dict(columns, **features.model_inputs(columns)) if for_canned else columns
        spec = model_fn(inputs, None, PREDICT)
        with tf.compat.v1.Session() as session:
            tf.compat.v1.train.Saver().restore(session, checkpoint)
            session.run(tf.compat.v1.tables_initializer())
            return session.run(spec.predictions['logistic'])


def test_trainer_model_restores_and_predicts_as_the_canned_model(rows, tmp_path):
    path, stats = rows
    checkpoint = str(tmp_path / 'canned.ckpt')
    with tf.Graph().as_default():
        tf.compat.v1.set_random_seed(1)
        columns, label = _batch(path)
        spec = _canned_model_fn(stats)(dict(columns, **features.model_inputs(columns)),
                                       label, TRAIN)
        canned_variables = _variables()
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            session.run(tf.compat.v1.tables_initializer())
            losses = [session.run([spec.train_op, spec.loss])[1] for _ in range(5)]
            tf.compat.v1.train.Saver().save(session, checkpoint)
    assert losses[-1] < losses[0]

    with tf.Graph().as_default():
        columns, label = _batch(path)
        _trainer_model_fn(stats)(features.model_inputs(columns), label, TRAIN)
        assert _variables() == canned_variables

    canned = _probabilities(_canned_model_fn(stats), path, checkpoint, for_canned=True)
    # The trainer's model from parsed columns, as serving requests give them.
    trainer = _probabilities(_trainer_model_fn(stats), path, checkpoint, for_canned=False)
    assert canned.shape == (303, 1)
    assert np.ptp(canned) > 0.01  # trained weights, not the zero-initialised model
    np.testing.assert_allclose(trainer, canned, rtol=1e-5, atol=1e-6)
