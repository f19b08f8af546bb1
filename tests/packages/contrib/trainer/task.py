"""A TensorFlow 1.x trainer that still uses tf.contrib."""
import argparse

import tensorflow as tf

from trainer import model

if __name__ == '__main__':
    parser = argparse.ArgumentParser()
    parser.add_argument('--job-dir')
    model.train(parser.parse_args())
