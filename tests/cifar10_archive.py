"""Writes small CIFAR-10 archives in the real python-pickle format for tests.

Images are learnable: each class has its own colour and a bright square at a
class-specific position, plus noise, so a tiny ResNet separates them quickly.
"""
import os
import pickle
import tarfile

import numpy as np

BATCH_NAMES = ['data_batch_%d' % i for i in range(1, 6)] + ['test_batch']


def make_images(n, seed):
    """Returns (uint8 [n, 3072] CHW-flattened images, list of int labels)."""
    rng = np.random.RandomState(seed)
    labels = rng.randint(0, 10, size=n)
    images = rng.randint(0, 60, size=(n, 3, 32, 32)).astype(np.int32)
    for i, label in enumerate(labels):
        images[i, label % 3] += 80 + 15 * label
        row, col = divmod(int(label), 4)
        images[i, :, row * 8:row * 8 + 10, col * 8:col * 8 + 10] += 100
    return np.clip(images, 0, 255).astype(np.uint8).reshape(n, 3072), labels.tolist()


def write_batches(directory, per_batch=100, test_size=100, seed=0):
    """Writes cifar-10-batches-py/{data_batch_1..5,test_batch}; returns its path."""
    batches_dir = os.path.join(directory, 'cifar-10-batches-py')
    os.makedirs(batches_dir, exist_ok=True)
    for i, name in enumerate(BATCH_NAMES):
        n = test_size if name == 'test_batch' else per_batch
        data, labels = make_images(n, seed + i)
        with open(os.path.join(batches_dir, name), 'wb') as f:
            pickle.dump({b'batch_label': name.encode(), b'labels': labels,
                         b'data': data, b'filenames': [b'x.png'] * n}, f, protocol=2)
    return batches_dir


def write_archive(directory, replace=None, **kwargs):
    """Writes cifar-10-python.tar.gz like the official one; returns its path.

    Args:
      replace: {batch name: raw bytes} written instead of those batches.
    """
    batches_dir = write_batches(os.path.join(directory, 'src'), **kwargs)
    for name, raw in (replace or {}).items():
        with open(os.path.join(batches_dir, name), 'wb') as f:
            f.write(raw)
    path = os.path.join(directory, 'cifar-10-python.tar.gz')
    with tarfile.open(path, 'w:gz') as tar:
        tar.add(batches_dir, arcname='cifar-10-batches-py')
    return path
