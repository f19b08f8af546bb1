"""TF 1.x model code: tf.contrib at import time."""
import tensorflow as tf

layers = tf.contrib.layers


def train(args):
    raise SystemExit('never reached: the import fails on TensorFlow 2')
