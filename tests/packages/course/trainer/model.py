"""A small DNN classifier on generated data: y = x0 + x1 > 1."""
import numpy as np
import tensorflow.compat.v1 as tf

FEATURES = ('x0', 'x1')


def generate(rows, seed):
    rng = np.random.RandomState(seed)
    x = rng.uniform(0, 1, size=(rows, len(FEATURES))).astype(np.float32)
    return {name: x[:, i] for i, name in enumerate(FEATURES)}, (x.sum(axis=1) > 1).astype(np.int32)


def input_fn(rows, seed, batch_size, repeat):
    def make():
        features, labels = generate(rows, seed)
        dataset = tf.data.Dataset.from_tensor_slices((features, labels))
        if repeat:
            dataset = dataset.shuffle(rows, seed=seed).repeat()
        return dataset.batch(batch_size)
    return make


def estimator(job_dir, hidden_units, learning_rate, checkpoint_steps):
    columns = [tf.feature_column.numeric_column(name) for name in FEATURES]
    config = tf.estimator.RunConfig(model_dir=job_dir, save_checkpoints_steps=checkpoint_steps)
    return tf.estimator.DNNClassifier(
        hidden_units=hidden_units, feature_columns=columns, config=config,
        optimizer=lambda: tf.train.AdamOptimizer(learning_rate))


def serving_input_fn():
    spec = {name: tf.io.FixedLenFeature([], tf.float32) for name in FEATURES}
    return tf.estimator.export.build_parsing_serving_input_receiver_fn(spec)()
