"""Downloads CIFAR-10 and writes the TFRecords the trainer reads.

Writes `train.tfrecords` (data_batch_1..4), `validation.tfrecords`
(data_batch_5), `eval.tfrecords` (test_batch) and `metadata.json` with the
example counts actually written, which the trainer uses for its learning-rate
schedule and evaluation length. Each record is a `tf.train.Example` with
`image` (3072 raw uint8 bytes, CHW order as in the pickles) and `label`
(int64).

    python -m cifar10_estimator.generate_cifar10_tfrecords --data-dir DIR
    python -m cifar10_estimator.generate_cifar10_tfrecords --data-dir DIR \
        --source ~/Downloads/cifar-10-python.tar.gz
"""
import hashlib
import json
import os
import pickle
import shutil
import sys
import tarfile
import tempfile
import urllib.error
import urllib.request

from estimator_trainers import errors
from estimator_trainers import flags
from estimator_trainers import logs
from estimator_trainers.errors import UserInputError

CIFAR_URL = 'https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz'
CIFAR_MD5 = 'c58f30108f718f92721af3b95e74349a'
CIFAR_DIR_NAME = 'cifar-10-batches-py'
SPLITS = {
    'train': ['data_batch_%d' % i for i in range(1, 5)],
    'validation': ['data_batch_5'],
    'eval': ['test_batch'],
}
METADATA_FILE = 'metadata.json'
IMAGE_BYTES = 32 * 32 * 3
NUM_CLASSES = 10


def download(url, dest_dir, md5=CIFAR_MD5, timeout=60):
    """Downloads `url` into `dest_dir`, verifies its MD5 and returns the path."""
    os.makedirs(dest_dir, exist_ok=True)
    path = os.path.join(dest_dir, os.path.basename(url))
    if not (os.path.exists(path) and file_md5(path) == md5):
        print('Downloading %s' % url, file=sys.stderr)
        tmp = path + '.part'
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response, \
                    open(tmp, 'wb') as out:
                shutil.copyfileobj(response, out, length=1 << 20)
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, 'reason', e)
            raise UserInputError(
                'cannot download %s (%s); download cifar-10-python.tar.gz on a '
                'machine with internet access and pass it with --source PATH'
                % (url, reason)) from None
        os.replace(tmp, path)
    if md5 and file_md5(path) != md5:
        raise UserInputError('%s: MD5 checksum mismatch (expected %s); delete it '
                             'and download again' % (path, md5))
    return path


def file_md5(path):
    digest = hashlib.md5()
    with open(path, 'rb') as f:
        for chunk in iter(lambda: f.read(1 << 20), b''):
            digest.update(chunk)
    return digest.hexdigest()


def locate_batches(source, work_dir):
    """Returns the `cifar-10-batches-py` directory for `source`.

    `source` is the downloaded tarball (extracted into `work_dir`), the
    extracted `cifar-10-batches-py` directory, or a directory containing it.
    """
    if os.path.isfile(source):
        try:
            with tarfile.open(source, 'r:gz') as tar:
                tar.extractall(work_dir, filter='data')
        except (tarfile.TarError, OSError, EOFError) as e:
            raise UserInputError('--source %s: not a readable cifar-10-python.tar.gz '
                                 '(%s)' % (source, e)) from None
        source = work_dir
    if not os.path.isdir(source):
        raise UserInputError('--source %s: no such file or directory' % source)
    for candidate in (source, os.path.join(source, CIFAR_DIR_NAME)):
        if all(os.path.isfile(os.path.join(candidate, name))
               for names in SPLITS.values() for name in names):
            return candidate
    raise UserInputError('--source %s: expected the CIFAR-10 python batches '
                         '(data_batch_1..5, test_batch) in it or in %s/'
                         % (source, CIFAR_DIR_NAME))


def read_batch(path):
    """Reads one CIFAR-10 python pickle: (list of 3072-byte images, labels)."""
    try:
        with open(path, 'rb') as f:
            batch = pickle.load(f, encoding='bytes')
        data, labels = batch[b'data'], batch[b'labels']
    except (pickle.UnpicklingError, EOFError, KeyError, TypeError, OSError) as e:
        raise UserInputError('%s: not a CIFAR-10 python batch (%s: %s)'
                             % (path, type(e).__name__, e)) from None
    if getattr(data, 'shape', None) is None or data.shape[1:] != (IMAGE_BYTES,) \
            or len(labels) != data.shape[0]:
        raise UserInputError('%s: expected data of shape [N, %d] and N labels'
                             % (path, IMAGE_BYTES))
    if any(not 0 <= int(label) < NUM_CLASSES for label in labels):
        raise UserInputError('%s: labels must be in [0, %d)' % (path, NUM_CLASSES))
    return data, labels


def write_tfrecords(batch_paths, output_path):
    """Converts pickles to one TFRecord file (atomically); returns the count."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    tmp = output_path + '.tmp'
    count = 0
    with tf.io.TFRecordWriter(tmp) as writer:
        for path in batch_paths:
            data, labels = read_batch(path)
            for image, label in zip(data, labels):
                example = tf.train.Example(features=tf.train.Features(feature={
                    'image': tf.train.Feature(bytes_list=tf.train.BytesList(
                        value=[image.astype('uint8').tobytes()])),
                    'label': tf.train.Feature(int64_list=tf.train.Int64List(
                        value=[int(label)])),
                }))
                writer.write(example.SerializeToString())
                count += 1
    tf.io.gfile.rename(tmp, output_path, overwrite=True)
    return count


def generate(data_dir, source=None, url=CIFAR_URL):
    """Writes the three TFRecord files and metadata.json into `data_dir`.

    Returns:
      The metadata dict ({'train': 40000, 'validation': 10000, ...}).
    """
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    tf.io.gfile.makedirs(data_dir)
    with tempfile.TemporaryDirectory() as work_dir:
        if source is None:
            cache = data_dir if '://' not in data_dir else work_dir
            source = download(url, cache)
        batches_dir = locate_batches(source, work_dir)
        counts = {}
        for split, names in SPLITS.items():
            output = os.path.join(data_dir, split + '.tfrecords')
            counts[split] = write_tfrecords(
                [os.path.join(batches_dir, n) for n in names], output)
            print('Wrote %d examples to %s' % (counts[split], output), file=sys.stderr)
    metadata = {'num_examples': counts, 'image_shape': [32, 32, 3],
                'num_classes': NUM_CLASSES, 'source': os.path.basename(source)}
    with tf.io.gfile.GFile(os.path.join(data_dir, METADATA_FILE), 'w') as f:
        json.dump(metadata, f, indent=2, sort_keys=True)
    return metadata


def parse_args(argv):
    parser = flags.make_parser(
        'python -m cifar10_estimator.generate_cifar10_tfrecords',
        'Download CIFAR-10 and convert it to TFRecords for cifar10_main.')
    parser.add_argument('--data-dir', required=True,
                        help='Output directory (local or gs://).')
    parser.add_argument('--source', default=None,
                        help='Already downloaded cifar-10-python.tar.gz or extracted '
                             'cifar-10-batches-py directory (no network needed).')
    parser.add_argument('--url', default=CIFAR_URL,
                        help='Download URL (a mirror of the official archive; its '
                             'MD5 must match the official one).')
    return parser.parse_args(argv)


def main(argv=None):
    logs.quiet_tensorflow_native_logs()
    args = parse_args(argv)
    logs.configure('INFO')
    generate(args.data_dir, source=args.source, url=args.url)
    return 0


if __name__ == '__main__':
    errors.run_cli(main)
