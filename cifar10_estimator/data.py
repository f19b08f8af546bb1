"""CIFAR-10 TFRecord input pipeline and dataset metadata.

Example counts always come from the `metadata.json` that
`generate_cifar10_tfrecords` wrote, never from constants. Records are parsed a
batch at a time and augmentation (pad to 40x40, random 32x32 crop, random
left-right flip) is vectorised over the batch, so the pipeline keeps up with
training on a few CPU cores. Images are float32 in [0, 255], NHWC; the model
does its own scaling, so serving can feed raw pixels.
"""
import json
import os

import tensorflow as tf

from cifar10_estimator.layout import DEPTH, HEIGHT, IMAGE_BYTES, METADATA_FILE, NUM_CLASSES
from cifar10_estimator.layout import SUBSETS, WIDTH, subset_path
from estimator_trainers.errors import first_line
from estimator_trainers.errors import UserInputError
_PAD = 4
_TFRECORD_FRAMING_BYTES = 16  # length (8) + length CRC (4) + data CRC (4)


def read_metadata(data_dir):
    """Reads `metadata.json` from `data_dir`; returns {subset: example count}."""
    if not tf.io.gfile.isdir(data_dir):
        raise UserInputError('--data-dir %s does not exist; create it with python -m '
                             'cifar10_estimator.generate_cifar10_tfrecords --data-dir %s'
                             % (data_dir, data_dir))
    path = os.path.join(data_dir, METADATA_FILE)
    if not tf.io.gfile.exists(path):
        raise UserInputError('--data-dir %s has no %s; create the TFRecords with python '
                             '-m cifar10_estimator.generate_cifar10_tfrecords --data-dir %s'
                             % (data_dir, METADATA_FILE, data_dir))
    try:
        with tf.io.gfile.GFile(path) as f:
            counts = json.load(f)['num_examples']
        counts = {subset: int(counts[subset]) for subset in SUBSETS}
    except (ValueError, KeyError, TypeError) as e:
        raise UserInputError('%s: expected {"num_examples": {"train": N, "validation": '
                             'N, "eval": N}} (%s)' % (path, e)) from None
    return counts


def validate_subset(data_dir, subset, expected_count):
    """Checks that a TFRecord file is complete and holds CIFAR-10 examples.

    Cheap enough to run before every training: it parses the first record and
    checks the file size against `expected_count` records of that size (all
    CIFAR-10 records serialise to the same length), which catches truncated
    or foreign files without reading them through.
    """
    path = subset_path(data_dir, subset)
    if not tf.io.gfile.exists(path):
        raise UserInputError('%s is missing; regenerate --data-dir with python -m '
                             'cifar10_estimator.generate_cifar10_tfrecords' % path)
    if expected_count <= 0:
        raise UserInputError('%s: metadata says it holds no examples' % path)
    try:
        first = next(iter(tf.data.TFRecordDataset(path).take(1)), None)
    except tf.errors.OpError as e:
        raise UserInputError('%s: not a readable TFRecord file (%s)'
                             % (path, first_line(e))) from None
    if first is None:
        raise UserInputError('%s is empty; regenerate --data-dir' % path)
    record = first.numpy()
    try:
        example = tf.train.Example.FromString(record)
        feature = example.features.feature
        image = feature['image'].bytes_list.value
        label = feature['label'].int64_list.value
    except Exception:  # pylint: disable=broad-except
        image, label = [], []
    if len(image) != 1 or len(image[0]) != IMAGE_BYTES or len(label) != 1:
        raise UserInputError('%s: records must have features "image" (%d raw bytes) '
                             'and "label" (int64)' % (path, IMAGE_BYTES))
    expected_size = expected_count * (len(record) + _TFRECORD_FRAMING_BYTES)
    size = tf.io.gfile.stat(path).length
    if size != expected_size:
        raise UserInputError('%s is %d bytes, expected %d for %d records: the file is '
                             'truncated or corrupt; regenerate --data-dir'
                             % (path, size, expected_size, expected_count))


def _parse_batch(serialized):
    """Parses a batch of serialized Examples into NHWC float32 images, labels."""
    features = tf.io.parse_example(serialized, {
        'image': tf.io.FixedLenFeature([], tf.string),
        'label': tf.io.FixedLenFeature([], tf.int64),
    })
    images = tf.io.decode_raw(features['image'], tf.uint8)
    images = tf.reshape(images, [-1, DEPTH, HEIGHT, WIDTH])
    images = tf.cast(tf.transpose(images, [0, 2, 3, 1]), tf.float32)
    return images, tf.cast(features['label'], tf.int32)


def distort_batch(images, seed=None):
    """Random 32x32 crops of the 40x40 zero-padded images and random flips.

    Vectorised over the batch: each image gets its own crop offset and flip.
    """
    batch = tf.shape(images)[0]
    padded = tf.pad(images, [[0, 0], [_PAD, _PAD], [_PAD, _PAD], [0, 0]])
    offsets = tf.random.uniform([batch, 2], 0, 2 * _PAD + 1, dtype=tf.int32, seed=seed)
    rows = offsets[:, :1] + tf.range(HEIGHT)[None, :]
    cols = offsets[:, 1:] + tf.range(WIDTH)[None, :]
    crops = tf.gather(padded, rows, axis=1, batch_dims=1)
    crops = tf.gather(crops, cols, axis=2, batch_dims=1)
    flip = tf.random.uniform([batch], seed=seed) < 0.5
    return tf.where(flip[:, None, None, None], tf.reverse(crops, axis=[2]), crops)


def make_dataset(data_dir, subset, batch_size, *, distort=False, repeat=False,
                 shuffle=False, count=None, seed=None):
    """A dataset of ({'images': [B,32,32,3] float32}, labels [B] int32).

    Args:
      data_dir: directory with `<subset>.tfrecords`.
      subset: `train`, `validation` or `eval`.
      batch_size: examples per batch (the last partial batch is dropped when
        repeating, kept otherwise).
      distort: apply training augmentation.
      repeat: repeat forever (training).
      shuffle: shuffle examples (training).
      count: examples in the file, to size the shuffle buffer.
      seed: shuffle/augmentation seed.
    """
    dataset = tf.data.TFRecordDataset(subset_path(data_dir, subset),
                                      buffer_size=8 << 20)
    if repeat or shuffle:
        dataset = dataset.cache()
    if shuffle:
        dataset = dataset.shuffle(min(count or 10000, 20000), seed=seed,
                                  reshuffle_each_iteration=True)
    if repeat:
        dataset = dataset.repeat()
    dataset = dataset.batch(batch_size, drop_remainder=repeat)

    def parse(serialized):
        images, labels = _parse_batch(serialized)
        if distort:
            images = distort_batch(images, seed=seed)
        return {'images': images}, labels

    dataset = dataset.map(parse, num_parallel_calls=tf.data.AUTOTUNE)
    return dataset.prefetch(tf.data.AUTOTUNE)


def input_fn(data_dir, subset, batch_size, *, training, count=None, seed=None,
             distort=True):
    """Returns an Estimator `input_fn` for `subset`."""
    def _input_fn():
        return make_dataset(data_dir, subset, batch_size,
                            distort=training and distort, repeat=training,
                            shuffle=training, count=count, seed=seed)
    return _input_fn
