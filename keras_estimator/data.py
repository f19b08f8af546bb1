"""MNIST for the Keras trainer: the data step and the input functions.

The data step puts the `mnist.npz` that Keras' own loader
(`keras.datasets.mnist.load_data`) downloads into a data directory, from the
same URL and checked against the same SHA-256:

    python -m keras_estimator.data --data-dir DIR
    python -m keras_estimator.data --data-dir DIR --source ~/Downloads/mnist.npz

A file is copied in only after its checksum and its arrays (`x_train`,
`y_train`, `x_test`, `y_test`: uint8 images [N, 28, 28], labels 0-9) are
verified. `--sha256` replaces the official checksum for a file made
elsewhere in the same format (test data); the official file is always
checked against the official value.

The trainer reads the arrays once (`read`) and feeds them in batches from
memory (`runtime.mnist_input_fn`): a tf.data generator, so the 47 MB of pixels never
become a constant in the graph that Estimator writes to the job-dir.
CIFAR-10 (cifar10_mlp) is read by `cifar10_estimator.data`.
"""
import argparse
import dataclasses
import os
import shlex
import sys
import tempfile
import urllib.error
import urllib.request
import uuid
import zipfile
import zlib
from typing import IO, Any, Optional, Sequence, Tuple, cast

import numpy as np
import numpy.typing as npt

from estimator_trainers import declaration
from estimator_trainers import errors
from estimator_trainers import flags
from estimator_trainers import logs
from estimator_trainers import safe_io
from estimator_trainers.errors import UserInputError

MNIST_FILE = 'mnist.npz'
# keras.datasets.mnist.load_data's origin and file_hash (Keras 2.15).
MNIST_URL = 'https://storage.googleapis.com/tensorflow/tf-keras-datasets/mnist.npz'
MNIST_SHA256 = '731c5ac602752760c8e48fbffcf8c3b850d9dc2a2aedcf2cc48468fc17b673d1'
HEIGHT = WIDTH = 28
NUM_CLASSES = 10
DATA_STEP = 'python -m keras_estimator.data --data-dir %s'
# What an array's .npy header declares: (dtype, shape, Fortran order, offset of its data).
Header = Tuple[np.dtype[Any], Tuple[int, ...], bool, int]


@dataclasses.dataclass(frozen=True)
class Mnist:
    """The four arrays of an mnist.npz."""
    x_train: npt.NDArray[np.uint8]
    y_train: npt.NDArray[np.integer[Any]]
    x_test: npt.NDArray[np.uint8]
    y_test: npt.NDArray[np.integer[Any]]


def mnist_path(data_dir: str) -> str:
    return os.path.join(data_dir, MNIST_FILE)


def read(data_dir: str) -> Mnist:
    """Reads and checks `<data_dir>/mnist.npz` (local or gs://).

    Raises:
      UserInputError: the file is missing or not in Keras' mnist.npz format.
    """
    tf = logs.import_tensorflow()  # gs:// goes through its gfile
    path = mnist_path(data_dir)
    if not tf.io.gfile.exists(path):
        raise UserInputError('--data-dir %s has no %s; fetch it with %s'
                             % (data_dir, MNIST_FILE, DATA_STEP % shlex.quote(data_dir)))
    kind = safe_io.not_a_regular_file(path)
    if kind:  # a named pipe would block the read for good
        raise UserInputError('%s is %s, not an .npz file' % (path, kind), path=path)
    with tf.io.gfile.GFile(path, 'rb') as f:
        return _arrays(f, path)


# The official arrays are 47 MB at most. A larger array, or a member that
# inflates more than `_MAX_RATIO` times (image data compresses about 5:1; a
# "zip bomb" of zeros about 1000:1), is refused from its zip entry, unread.
MAX_ARRAY_BYTES = 1 << 30
_MAX_RATIO = 100
_NPY_MAGIC = b'\x93NUMPY'


def _arrays(file: IO[bytes], path: str) -> Mnist:
    """The checked arrays of an open mnist.npz file.

    Only the four arrays are read, and each only after its zip entry (size,
    compression ratio) and its .npy header (dtype, shape, and the bytes that
    shape declares against the bytes the entry holds) are checked: nothing
    is allocated that the file does not hold and the format does not need.
    """
    names = [field.name for field in dataclasses.fields(Mnist)]
    head = file.read(len(_NPY_MAGIC))
    if head == _NPY_MAGIC:
        raise UserInputError('%s is a .npy file (one array); expected an .npz archive of '
                             'the arrays %s (numpy.savez)' % (path, ', '.join(names)),
                             path=path)
    if not head.startswith(b'PK'):
        raise UserInputError('%s: not a readable .npz file (not a zip archive)' % path,
                             path=path)
    file.seek(0)
    try:
        with zipfile.ZipFile(file) as archive:
            entries = {info.filename: info for info in archive.infolist()}
            missing = [name for name in names if name + '.npy' not in entries]
            if missing:
                raise UserInputError('%s: no array %r; expected %s'
                                     % (path, missing[0], ', '.join(names)), path=path)
            headers = {name: _header(archive, entries[name + '.npy'], path)
                       for name in names}
            for split in ('train', 'test'):
                _check_shapes(path, split, headers['x_' + split], headers['y_' + split])
            mnist = Mnist(**{name: _array(archive, entries[name + '.npy'], headers[name])
                             for name in names})
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error,
            NotImplementedError) as e:
        raise UserInputError('%s: not a readable .npz file (%s)'
                             % (path, errors.first_line(e)), path=path) from None
    for split in ('train', 'test'):
        images, labels = getattr(mnist, 'x_' + split), getattr(mnist, 'y_' + split)
        if labels.min() < 0 or labels.max() >= NUM_CLASSES:
            raise UserInputError('%s: y_%s must hold %d integer labels in 0-%d, got %s %s'
                                 % (path, split, len(images), NUM_CLASSES - 1,
                                    labels.dtype, list(labels.shape)), path=path)
    return mnist


def _header(archive: zipfile.ZipFile, info: zipfile.ZipInfo, path: str) -> Header:
    """(dtype, shape, fortran order) of a .npy entry, checked against the entry."""
    where = '%s: %s' % (path, info.filename)
    if info.file_size > (1 << 20) and info.file_size > _MAX_RATIO * max(1, info.compress_size):
        raise UserInputError('%s inflates from %s to %s (%d times); image data compresses '
                             'far less, so it is refused unread'
                             % (where, safe_io.size_text(info.compress_size),
                                safe_io.size_text(info.file_size),
                                info.file_size // max(1, info.compress_size)), path=path)
    if info.file_size > MAX_ARRAY_BYTES:
        raise UserInputError('%s inflates to %s; an MNIST array is at most %s'
                             % (where, safe_io.size_text(info.file_size),
                                safe_io.size_text(MAX_ARRAY_BYTES)), path=path)
    # numpy.lib.format's functions are untyped in numpy's stubs (hence the ignores).
    with archive.open(info) as f:
        version = np.lib.format.read_magic(f)  # type: ignore[no-untyped-call]
        read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                       else np.lib.format.read_array_header_2_0)
        shape, fortran, dtype = read_header(f)  # type: ignore[no-untyped-call]
        offset = f.tell()
    if dtype.hasobject:
        raise UserInputError('%s holds Python objects, which are never loaded' % where,
                             path=path)
    declared = int(np.prod(shape, dtype=object)) * dtype.itemsize
    if declared != info.file_size - offset:
        raise UserInputError('%s declares a %s array %s of %s, but the archive holds %s of '
                             'data for it' % (where, dtype, list(shape),
                                              safe_io.size_text(declared),
                                              safe_io.size_text(info.file_size - offset)),
                             path=path)
    return dtype, tuple(shape), fortran, offset


def _check_shapes(path: str, split: str, images: Header, labels: Header) -> None:
    """The declared dtypes and shapes of a split's arrays, before they are read."""
    dtype, shape = images[:2]
    if dtype != np.uint8 or len(shape) != 3 or not shape[0] or shape[1:] != (HEIGHT, WIDTH):
        raise UserInputError('%s: x_%s must be uint8 images [N, %d, %d], got %s %s'
                             % (path, split, HEIGHT, WIDTH, dtype, list(shape)), path=path)
    if labels[0].kind not in 'iu' or labels[1] != shape[:1]:
        raise UserInputError('%s: y_%s must hold %d integer labels in 0-%d, got %s %s'
                             % (path, split, shape[0], NUM_CLASSES - 1, labels[0],
                                list(labels[1])), path=path)


def _array(archive: zipfile.ZipFile, info: zipfile.ZipInfo,
           header: Header) -> npt.NDArray[Any]:
    """The array of a .npy entry whose `header` (`_header`) was checked."""
    dtype, shape, fortran, offset = header
    data = bytearray(info.file_size - offset)
    # What `open` gives for reading (typeshed says IO[bytes], which has no readinto).
    with cast(zipfile.ZipExtFile, archive.open(info)) as f:
        f.read(offset)
        view = memoryview(data)
        while view:
            count = f.readinto(view)
            if not count:
                raise EOFError('%s ends early' % info.filename)
            view = view[count:]
    array = np.frombuffer(data, dtype)
    return array.reshape(shape[::-1]).T if fortran else array.reshape(shape)


def file_sha256(path: str) -> str:
    digest: str = safe_io.file_digest(path, 'sha256')
    return digest


# The official mnist.npz is about 11 MB; a download is stopped past this.
MAX_DOWNLOAD_BYTES = MAX_ARRAY_BYTES


def download(url: str, work_dir: str, timeout: float = 60) -> str:
    """Downloads `url` into `work_dir`; returns the path."""
    path = os.path.join(work_dir, MNIST_FILE)
    print('Downloading %s' % url, file=sys.stderr)
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response, \
                open(path, 'wb') as out:
            if not safe_io.copy_at_most(response, out, MAX_DOWNLOAD_BYTES):
                raise UserInputError(
                    'cannot download %s: it serves more than %s, and %s is about 11 MB; '
                    'stopped reading' % (url, safe_io.size_text(MAX_DOWNLOAD_BYTES),
                                         MNIST_FILE), flag='--url')
    except (urllib.error.URLError, OSError) as e:
        raise UserInputError(
            'cannot download %s (%s); download %s on a machine with internet access '
            'and %s' % (url, getattr(e, 'reason', e), MNIST_FILE,
                        declaration.data_source_advice())) from None
    return path


def fetch(data_dir: str, source: Optional[str] = None, url: str = MNIST_URL,
          sha256: str = MNIST_SHA256) -> str:
    """Puts a verified mnist.npz into `data_dir` (local or gs://); returns its path.

    Args:
      data_dir: destination directory.
      source: an mnist.npz already downloaded (no network needed), or None to
        download `url`.
      url: where to download from.
      sha256: the checksum the file must have (the official file's by default).

    Raises:
      UserInputError: offline without `source`, a checksum mismatch, a file
        not in the mnist.npz format.
    """
    sha256 = sha256.lower()
    dest = mnist_path(data_dir)
    with tempfile.TemporaryDirectory() as work_dir:
        if source is None:
            path, origin = download(url, work_dir), url
        elif os.path.isfile(source):
            path, origin = source, '--source %s' % source
        else:
            raise UserInputError('--source %s: no such file' % source)
        digest = file_sha256(path)
        if digest != sha256:
            raise UserInputError(
                '%s: SHA-256 is %s, expected %s (%s)' % (
                    origin, digest, sha256, 'the mnist.npz of keras.datasets.mnist'
                    if sha256 == MNIST_SHA256 else '--sha256'))
        with open(path, 'rb') as f:
            mnist = _arrays(f, origin)
        # Only a checked file is written, under a fresh name, then moved into place.
        tf = logs.import_tensorflow()  # gs:// goes through its gfile
        tmp = '%s.tmp-%s' % (dest, uuid.uuid4().hex)
        tf.io.gfile.makedirs(data_dir)
        tf.io.gfile.copy(path, tmp)
        tf.io.gfile.rename(tmp, dest, overwrite=True)
    print('Wrote %s: %d training and %d test images (SHA-256 %s)'
          % (dest, len(mnist.y_train), len(mnist.y_test), digest), file=sys.stderr)
    return dest


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    parser: argparse.ArgumentParser = flags.make_parser(
        'python -m keras_estimator.data',
        'Put the mnist.npz of keras.datasets.mnist into a data directory, checksum '
        'verified, for python -m keras_estimator.trainer --model mnist_cnn.')
    parser.add_argument('--data-dir', type=flags.path, required=True,
                        help='Output directory (local or gs://); gets %s.' % MNIST_FILE)
    parser.add_argument('--source', type=flags.path, default=None,
                        help='An mnist.npz already downloaded (no network needed).')
    parser.add_argument('--url', default=MNIST_URL,
                        help='Download URL (a mirror of the official file; its '
                             'SHA-256 must match the official one).')
    parser.add_argument('--sha256', default=MNIST_SHA256, type=_sha256,
                        help='Expected SHA-256 of the file. Only for a file in the '
                             'same format made elsewhere, such as test data; the '
                             'default is the official mnist.npz\'s.')
    return parser.parse_args(argv)


def _sha256(text: str) -> str:
    if len(text) != 64 or any(c not in '0123456789abcdefABCDEF' for c in text):
        raise argparse.ArgumentTypeError('expected 64 hex digits, got %r' % text)
    return text.lower()


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = logs.start_tool(parse_args, argv)
    fetch(args.data_dir, source=args.source, url=args.url, sha256=args.sha256)
    return 0


if __name__ == '__main__':
    errors.run_cli(main)
