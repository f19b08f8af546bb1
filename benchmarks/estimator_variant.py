"""Runs a trainer's CLI with a code-level lever switched, for the benchmarks.

Levers the command line cannot switch (because the measurements showed them
not worth a flag) are patched in here, so the trainer code stays free of them:

    python -m benchmarks.estimator_variant --lever unfused_batch_norm -- \
        --data-dir D --job-dir J ...
    python -m benchmarks.estimator_variant --trainer taxi \
        --lever free_input -- --train-files T ...
    python -m benchmarks.estimator_variant --trainer taxi \
        --lever per_column_wide -- --steps-per-loop 1 --train-files T ...
"""
import argparse
import functools
import sys

import tensorflow as tf

from estimator_trainers import cli
from estimator_trainers import registry

from cifar10_estimator import resnet
from taxi_estimator import features as taxi_features
from taxi_estimator import input as taxi_input


def _unfused_batch_norm():
    """Batch norm as separate moments/normalise ops instead of one fused kernel."""
    def batch_norm(self, x, name):
        return tf.compat.v1.layers.batch_normalization(
            x, axis=self._channel_axis, momentum=self._decay, epsilon=self._epsilon,
            training=self._is_training, fused=False, name=name)
    resnet.ResNetCifar10._batch_norm = batch_norm  # pylint: disable=protected-access


def _ungated_gradients():
    """compute_gradients(gate_gradients=GATE_NONE), as Keras' GradientTape does."""
    original = tf.compat.v1.train.MomentumOptimizer.compute_gradients
    tf.compat.v1.train.MomentumOptimizer.compute_gradients = functools.partialmethod(
        original, gate_gradients=tf.compat.v1.train.Optimizer.GATE_NONE)


def _free_input():
    """Taxi training input as 64 prepared batches replayed from memory, so the
    input pipeline costs (almost) nothing: the speed training would have if
    the pipeline were free."""
    make_input_fn = taxi_input.make_input_fn

    def free_input_fn(*args, **kwargs):
        input_fn = make_input_fn(*args, **kwargs)
        if not kwargs.get('training'):
            return input_fn
        return lambda: input_fn().take(64).cache().repeat()
    taxi_input.make_input_fn = free_input_fn


def _per_column_wide():
    """The taxi model's wide side before it became one id space: fourteen
    linear columns, five of them hashed `crossed_column`s (1000 buckets each)."""
    fc = tf.feature_column
    f = taxi_features
    deep_columns = f.wide_and_deep_columns

    def bucketized(column, boundaries):
        source = fc.numeric_column(column, normalizer_fn=f._fill_missing)
        return fc.bucketized_column(source, [f._MISSING_BOUNDARY] + list(boundaries))

    def columns(stats):
        lat = [bucketized(c, f._LATITUDE_GRID) for c in ('pickup_latitude',
                                                          'dropoff_latitude')]
        lon = [bucketized(c, f._LONGITUDE_GRID) for c in ('pickup_longitude',
                                                           'dropoff_longitude')]
        payment = fc.categorical_column_with_vocabulary_list(
            'payment_type', f.schema.PAYMENT_TYPES, num_oov_buckets=1)
        times = {c: fc.categorical_column_with_identity(c, f.schema.INT_FEATURES[c][1] + 1)
                 for c in ('trip_start_month', 'trip_start_hour', 'trip_start_day')}
        areas = [fc.categorical_column_with_identity(c, f.schema.INT_FEATURES[c][1] + 1)
                 for c in ('pickup_community_area', 'dropoff_community_area')]
        tracts = [fc.categorical_column_with_hash_bucket(c, f._TRACT_BUCKETS)
                  for c in ('pickup_census_tract', 'dropoff_census_tract')]
        company = fc.categorical_column_with_hash_bucket('company', f._COMPANY_BUCKETS)
        wide = [payment, company, *times.values(), *areas, *tracts,
                fc.crossed_column([lat[0], lon[0]], 1000),
                fc.crossed_column([lat[1], lon[1]], 1000),
                fc.crossed_column([bucketized('trip_miles', f._MILES_BOUNDARIES),
                                   bucketized('trip_seconds', f._SECONDS_BOUNDARIES)], 1000),
                fc.crossed_column([times['trip_start_hour'], times['trip_start_day']], 1000),
                fc.crossed_column(['payment_type', bucketized('fare', f._FARE_BOUNDARIES)],
                                  1000)]
        return wide, deep_columns(stats)[1]

    taxi_features.wide_and_deep_columns = columns
    taxi_features.with_wide_ids = lambda features: features


LEVERS = {
    'unfused_batch_norm': _unfused_batch_norm,
    'ungated_gradients': _ungated_gradients,
    'free_input': _free_input,
    'per_column_wide': _per_column_wide,
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--trainer', default='cifar10', help='A declared trainer.')
    parser.add_argument('--lever', choices=sorted(LEVERS), action='append', default=[])
    argv = sys.argv[1:]
    split = argv.index('--') if '--' in argv else len(argv)
    args = parser.parse_args(argv[:split])
    for lever in args.lever:
        LEVERS[lever]()
    return cli.main(registry.get(args.trainer), argv[split + 1:])


if __name__ == '__main__':
    sys.exit(main())
