"""Columns, input and serving functions of the taxi sample (a few numeric columns)."""
import tensorflow.compat.v1 as tf

LABEL = 'tip'
NUMERIC = ('trip_miles', 'trip_seconds', 'fare')


def feature_columns():
    return [tf.feature_column.numeric_column(name) for name in NUMERIC]


def input_fn(pattern, batch_size, training):
    def make():
        dataset = tf.data.experimental.make_csv_dataset(
            pattern, batch_size, column_defaults=[0.0] * (len(NUMERIC) + 1),
            select_columns=[LABEL] + list(NUMERIC), label_name=LABEL,
            num_epochs=None if training else 1, shuffle=training, shuffle_seed=1)
        return dataset.map(lambda features, label: (features, tf.cast(label, tf.int32)))
    return make


def serving_input_fn():
    spec = {name: tf.io.FixedLenFeature([], tf.float32) for name in NUMERIC}
    return tf.estimator.export.build_parsing_serving_input_receiver_fn(spec)()
