"""Keras MNIST with MultiWorkerMirroredStrategy (absl flags), as custom-container samples ran it.

    python -m trainer.task --job-dir DIR [--steps N] [--batch-size B]

Generated 28x28 images stand for MNIST. Every replica trains; the chief
evaluates, writes metrics.json and exports the SavedModel to
DIR/keras_export (the others save to a scratch directory, which
MultiWorkerMirroredStrategy requires of them).
"""
import json
import os
import tempfile

from absl import app
from absl import flags
import numpy as np
import tensorflow as tf

flags.DEFINE_string('job-dir', None, 'Where the chief exports the model.')
flags.DEFINE_integer('steps', 10, 'Training steps.')
flags.DEFINE_integer('batch-size', 16, 'Global batch size.')
FLAGS = flags.FLAGS


def dataset(rows, seed, batch_size):
    rng = np.random.RandomState(seed)
    images = rng.uniform(0, 1, size=(rows, 28, 28)).astype(np.float32)
    labels = (images.mean(axis=(1, 2)) * 20).astype(np.int64) % 10
    return tf.data.Dataset.from_tensor_slices((images, labels)).repeat().batch(batch_size)


def main(_):
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        model = tf.keras.Sequential([
            tf.keras.layers.Flatten(input_shape=(28, 28)),
            tf.keras.layers.Dense(16, activation='relu'),
            tf.keras.layers.Dense(10)])
        model.compile(optimizer='sgd', metrics=['accuracy'],
                      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    batch_size = FLAGS['batch-size'].value
    model.fit(dataset(256, 1, batch_size), epochs=1, steps_per_epoch=FLAGS.steps, verbose=2)
    loss, accuracy = model.evaluate(dataset(64, 2, batch_size), steps=2, verbose=2)
    task = json.loads(os.environ.get('TF_CONFIG') or '{}').get('task', {})
    chief = task.get('type', 'chief') == 'chief'
    job_dir = FLAGS['job-dir'].value
    target = os.path.join(job_dir, 'keras_export') if chief else tempfile.mkdtemp()
    model.save(target)
    if chief:
        with tf.io.gfile.GFile(os.path.join(job_dir, 'metrics.json'), 'w') as f:
            f.write(json.dumps({'loss': float(loss), 'accuracy': float(accuracy)}))


if __name__ == '__main__':
    flags.mark_flag_as_required('job-dir')
    app.run(main)
