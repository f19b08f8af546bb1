"""CIFAR-10 TFRecord input pipeline and dataset metadata.

Example counts always come from the `metadata.json` that
`generate_cifar10_tfrecords` wrote, never from constants. Records are parsed a
batch at a time and augmentation (pad to 40x40, random 32x32 crop, random
left-right flip) is vectorised over the batch, so the pipeline keeps up with
training on a few CPU cores; it is stateless, keyed by the seed and the
batch's index, so batches parsed in parallel are the same in every run of
one seed. Images are float32 in [0, 255], NHWC; the model
does its own scaling, so serving can feed raw pixels.
"""
from __future__ import annotations

import os
import random
import shlex
import struct
from typing import Callable, Dict, Optional, Tuple

import numpy as np
import tensorflow as tf

from cifar10_estimator.layout import DEPTH, HEIGHT, IMAGE_BYTES, METADATA_FILE, NUM_CLASSES
from cifar10_estimator.layout import SUBSETS, WIDTH, subset_path
from estimator_trainers import safe_io
from estimator_trainers import user_files
from estimator_trainers.errors import first_line
from estimator_trainers.errors import UserInputError
_PAD = 4
_TFRECORD_FRAMING_BYTES = 16  # length (8) + length CRC (4) + data CRC (4)
# metadata.json is about 200 bytes.
_METADATA_LIMITS = user_files.Limits(bytes=1 << 20,
                                     expected='expected a small file (is this the right one?)')
_MAX_EXAMPLES = 1 << 40
# An Estimator input_fn: the dataset of (features, labels) batches it builds.
InputFn = Callable[[], tf.data.Dataset]


def read_metadata(data_dir: str) -> Dict[str, int]:
    """Reads `metadata.json` from `data_dir`; returns {subset: example count}."""
    if not tf.io.gfile.isdir(data_dir):
        raise UserInputError('--data-dir %s does not exist; create it with python -m '
                             'cifar10_estimator.generate_cifar10_tfrecords --data-dir %s'
                             % (data_dir, shlex.quote(data_dir)))
    path = os.path.join(data_dir, METADATA_FILE)
    if not tf.io.gfile.exists(path):
        raise UserInputError('--data-dir %s has no %s; create the TFRecords with python '
                             '-m cifar10_estimator.generate_cifar10_tfrecords --data-dir %s'
                             % (data_dir, METADATA_FILE, shlex.quote(data_dir)))
    text = user_files.read_text(path, '--data-dir file %s' % path, _METADATA_LIMITS,
                                '--data-dir')
    try:
        counts = user_files.loads(text)['num_examples']
        counts = {subset: int(counts[subset]) for subset in SUBSETS}
        if not all(0 <= n <= _MAX_EXAMPLES for n in counts.values()):
            raise ValueError('counts out of range')
    except (ValueError, KeyError, TypeError, OverflowError) as e:
        raise UserInputError('%s: expected {"num_examples": {"train": N, "validation": '
                             'N, "eval": N}} with N up to %d (%s)'
                             % (path, _MAX_EXAMPLES, e), path=path) from None
    return counts


def validate_subset(data_dir: str, subset: str, expected_count: int) -> None:
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
    kind = safe_io.not_a_regular_file(path)
    if kind:  # a named pipe would block the read for good
        raise UserInputError('%s is %s, not a TFRecord file' % (path, kind), path=path)
    size = tf.io.gfile.stat(path).length
    _check_first_length(path, size)
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
    if size != expected_size:
        raise UserInputError('%s is %d bytes, expected %d for %d records: the file is '
                             'truncated or corrupt; regenerate --data-dir'
                             % (path, size, expected_size, expected_count))
    if not safe_io.is_remote(path):
        _check_lengths(path, len(record))


def _declared_too_long(path: str, offset: int, length: int, limit: str) -> UserInputError:
    return UserInputError(
        '%s: the record at byte %d declares %d bytes, more than %s; the file is corrupt or '
        'was made to crash its reader (TensorFlow allocates what a record declares); '
        'regenerate --data-dir' % (path, offset, length, limit), path=path)


def _check_first_length(path: str, size: int) -> None:
    """Refuses a file whose first record declares more bytes than the file holds.

    TensorFlow's reader allocates the length a record's header declares (a
    checksum guards the header, not its sense): 1 TiB crashed the process.
    """
    with tf.io.gfile.GFile(path, 'rb') as f:
        header = f.read(8)
    if len(header) == 8:
        (length,) = struct.unpack('<Q', header)
        if length > size - _TFRECORD_FRAMING_BYTES:
            raise _declared_too_long(path, 0, length, 'the file holds')


def _check_lengths(path: str, record_bytes: int) -> None:
    """Checks that every record header of a local file declares `record_bytes`.

    All CIFAR-10 records serialise to the same length and the file size was
    checked against it, so the headers sit at fixed offsets: a read of the file
    (about 125 MB for the training set, a fraction of a second) finds one that
    declares another length before TensorFlow allocates it.
    """
    stride = record_bytes + _TFRECORD_FRAMING_BYTES
    per_read = max(1, (8 << 20) // stride)
    offset = 0
    with open(path, 'rb') as f:
        while True:
            chunk = f.read(per_read * stride)
            if not chunk:
                return
            lengths = np.frombuffer(chunk, np.uint8).reshape(-1, stride)[:, :8].copy()
            lengths = lengths.view('<u8').ravel()
            bad = np.flatnonzero(lengths != record_bytes)
            if bad.size:
                raise _declared_too_long(path, offset + int(bad[0]) * stride,
                                         int(lengths[bad[0]]), 'a CIFAR-10 record')
            offset += len(chunk)


def _parse_batch(serialized: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
    """Parses a batch of serialized Examples into NHWC float32 images, labels."""
    features = tf.io.parse_example(serialized, {
        'image': tf.io.FixedLenFeature([], tf.string),
        'label': tf.io.FixedLenFeature([], tf.int64),
    })
    images = tf.io.decode_raw(features['image'], tf.uint8)
    images = tf.reshape(images, [-1, DEPTH, HEIGHT, WIDTH])
    images = tf.cast(tf.transpose(images, [0, 2, 3, 1]), tf.float32)
    return images, tf.cast(features['label'], tf.int32)


def distort_batch(images: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
    """Random 32x32 crops of the 40x40 zero-padded images and random flips.

    Vectorised over the batch: each image gets its own crop offset and flip.
    Stateless: `seed` (a pair of int64, e.g. (run seed, batch index)) decides
    them, so parallel batches draw the same crops in any order.
    """
    batch = tf.shape(images)[0]
    padded = tf.pad(images, [[0, 0], [_PAD, _PAD], [_PAD, _PAD], [0, 0]])
    crop_seed, flip_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
    offsets = tf.random.stateless_uniform([batch, 2], crop_seed, 0, 2 * _PAD + 1,
                                          dtype=tf.int32)
    rows = offsets[:, :1] + tf.range(HEIGHT)[None, :]
    cols = offsets[:, 1:] + tf.range(WIDTH)[None, :]
    crops = tf.gather(padded, rows, axis=1, batch_dims=1)
    crops = tf.gather(crops, cols, axis=2, batch_dims=1)
    flip = tf.random.stateless_uniform([batch], flip_seed) < 0.5
    return tf.where(flip[:, None, None, None], tf.reverse(crops, axis=[2]), crops)


def make_dataset(data_dir: str, subset: str, batch_size: int, *, distort: bool = False,
                 repeat: bool = False, shuffle: bool = False, count: Optional[int] = None,
                 seed: Optional[int] = None, cache: Optional[bool] = None) -> tf.data.Dataset:
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
      seed: shuffle and augmentation seed (None: a random one); the same seed
        gives the same batches in the same order.
      cache: keep the decoded records in memory after the first pass
        (default: when repeating or shuffling).
    """
    if seed is None:
        seed = random.SystemRandom().randrange(2 ** 31)
    dataset = tf.data.TFRecordDataset(subset_path(data_dir, subset),
                                      buffer_size=8 << 20)
    if cache if cache is not None else (repeat or shuffle):
        dataset = dataset.cache()
    if shuffle:
        dataset = dataset.shuffle(min(count or 10000, 20000), seed=seed,
                                  reshuffle_each_iteration=True)
    if repeat:
        dataset = dataset.repeat()
    dataset = dataset.batch(batch_size, drop_remainder=repeat).enumerate()

    def parse(index: tf.Tensor, serialized: tf.Tensor) -> Tuple[Dict[str, tf.Tensor], tf.Tensor]:
        images, labels = _parse_batch(serialized)
        if distort:
            images = distort_batch(images, tf.stack([tf.constant(seed, tf.int64), index]))
        return {'images': images}, labels

    dataset = dataset.map(parse, num_parallel_calls=tf.data.AUTOTUNE)
    return dataset.prefetch(tf.data.AUTOTUNE)


def calibration_input_fn(data_dir: str, batch_size: int) -> InputFn:
    """Training batches as evaluation sees images (no augmentation), for precise
    batch norm: the training file in order, endlessly, without a second
    in-memory copy of it."""
    def _input_fn() -> tf.data.Dataset:
        return make_dataset(data_dir, 'train', batch_size, repeat=True, cache=False)
    return _input_fn


def input_fn(data_dir: str, subset: str, batch_size: int, *, training: bool,
             count: Optional[int] = None, seed: Optional[int] = None,
             distort: bool = True) -> InputFn:
    """Returns an Estimator `input_fn` for `subset`."""
    def _input_fn() -> tf.data.Dataset:
        return make_dataset(data_dir, subset, batch_size,
                            distort=training and distort, repeat=training,
                            shuffle=training, count=count, seed=seed)
    return _input_fn
