"""Writes small mnist.npz files in the format of keras.datasets.mnist for tests.

Images are learnable: each digit class lights a 10x10 square at its own
position of a 3x4 grid over noise, so a small CNN separates them in a few
dozen steps. Arrays and dtypes are those of the official file (uint8 images
[N, 28, 28], uint8 labels).
"""
import hashlib

import numpy as np


def make_images(n, seed):
    """(uint8 [n, 28, 28] images, uint8 [n] labels 0-9)."""
    rng = np.random.RandomState(seed)
    labels = rng.randint(0, 10, size=n).astype(np.uint8)
    images = rng.randint(0, 80, size=(n, 28, 28)).astype(np.int32)
    for i, label in enumerate(labels):
        row, col = divmod(int(label), 4)
        images[i, row * 9:row * 9 + 10, col * 6:col * 6 + 10] += 150
    return np.clip(images, 0, 255).astype(np.uint8), labels


def write_npz(path, train=600, test=200, seed=0):
    """Writes `path` like Keras' compressed mnist.npz; returns its SHA-256."""
    x_train, y_train = make_images(train, seed)
    x_test, y_test = make_images(test, seed + 1)
    np.savez_compressed(path, x_train=x_train, y_train=y_train, x_test=x_test,
                        y_test=y_test)
    with open(path, 'rb') as f:
        return hashlib.sha256(f.read()).hexdigest()
