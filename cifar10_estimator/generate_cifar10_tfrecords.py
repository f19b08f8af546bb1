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

The batches are pickles, which can run code when loaded with `pickle`;
they are read with `BatchUnpickler`, which builds only what a CIFAR-10 batch
holds (dict, list, bytes, str, numbers and uint8 numpy arrays) and refuses
anything else, so an archive from anywhere is parsed, never executed. A file
of the official archive's size must also have its MD5.

The data set is written as a whole: every file goes to a staging directory
first and replaces the old set only once all are complete, so a bad archive
leaves an existing data set as it was.
"""
import argparse
import codecs
import json
import os
import pickle
import posixpath
import shutil
import sys
import tarfile
import tempfile
import urllib.error
import urllib.request
import zlib
from typing import IO, Any, Callable, Dict, Iterable, List, NoReturn, Optional, Sequence, Tuple
from typing import cast

import numpy as np
import numpy.typing as npt

from cifar10_estimator import layout
from estimator_trainers import declaration
from estimator_trainers import errors
from estimator_trainers import flags
from estimator_trainers import logs
from estimator_trainers import safe_io
from estimator_trainers.errors import UserInputError

CIFAR_URL = 'https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz'
CIFAR_MD5 = 'c58f30108f718f92721af3b95e74349a'
CIFAR_SIZE = 170498071  # bytes of the official archive
CIFAR_DIR_NAME = 'cifar-10-batches-py'
# {batch name: (its file, how errors name it: --source and the member)}
Batches = Dict[str, Tuple[str, str]]


def download(url: str, dest_dir: str, md5: Optional[str] = CIFAR_MD5,
             timeout: float = 60) -> str:
    """Downloads `url` into `dest_dir`, verifies its MD5 and returns the path."""
    os.makedirs(dest_dir, exist_ok=True)
    path = os.path.join(dest_dir, os.path.basename(url))
    if not (os.path.isfile(path) and file_md5(path) == md5):
        print('Downloading %s' % url, file=sys.stderr)
        # A unique O_EXCL temp name: a shared dest_dir may hold planted symlinks.
        fd, tmp = tempfile.mkstemp(dir=dest_dir, prefix='.%s.' % os.path.basename(path),
                                   suffix='.part')
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response, \
                    os.fdopen(fd, 'wb') as out:
                if not safe_io.copy_at_most(response, out, CIFAR_SIZE):
                    raise UserInputError(
                        'cannot download %s: it serves more than the %d bytes of the '
                        'official cifar-10-python.tar.gz; stopped reading (use the official '
                        'archive or a true mirror of it)' % (url, CIFAR_SIZE), flag='--url')
            os.replace(tmp, path)
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, 'reason', e)
            raise UserInputError(
                'cannot download %s (%s); download cifar-10-python.tar.gz on a '
                'machine with internet access and %s'
                % (url, reason, declaration.data_source_advice())) from None
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    if md5 and file_md5(path) != md5:
        raise UserInputError('%s: MD5 checksum mismatch (expected %s); delete it '
                             'and download again' % (path, md5))
    return path


def file_md5(path: str) -> str:
    digest: str = safe_io.file_digest(path, 'md5')
    return digest


def check_official(source: str) -> None:
    """Refuses a file of the official archive's size whose MD5 differs.

    Such a file claims to be the official archive but is corrupt or altered.
    Other archives (test data, re-packed subsets) are not checked here: their
    batches go through `BatchUnpickler` like any others.
    """
    if os.path.getsize(source) == CIFAR_SIZE and file_md5(source) != CIFAR_MD5:
        raise UserInputError('--source %s has the size of the official '
                             'cifar-10-python.tar.gz but not its MD5 (%s): the file is '
                             'corrupt or altered; download it again from %s'
                             % (source, CIFAR_MD5, CIFAR_URL))


# The official batches are about 30 MiB each (10,000 images): nothing a CIFAR-10
# archive holds is larger than this, and a larger member or batch file is
# refused before a byte of it is read (a "zip bomb" member inflating to GiBs).
MAX_BATCH_BYTES = 256 << 20
# The official archive has 9 members; what is read through to find the
# batches (members skipped included) is bounded too.
MAX_MEMBERS = 1000
MAX_ARCHIVE_BYTES = 2 << 30


def _batch_names() -> List[str]:
    return [name for names in layout.SPLITS.values() for name in names]


def locate_batches(source: str, work_dir: str) -> Batches:
    """Finds the batch files of `source`.

    `source` is the downloaded tarball (only its batch members are extracted,
    into `work_dir`), the extracted `cifar-10-batches-py` directory, or a
    directory containing it.

    Returns:
      {batch name: (path, description naming --source and the member)}.
    """
    if os.path.isfile(source):
        check_official(source)
        return _extract_batches(source, work_dir)
    if not os.path.isdir(source):
        raise UserInputError('--source %s: no such file or directory' % source,
                             flag='--source', path=source)
    names = _batch_names()
    for candidate in (source, os.path.join(source, CIFAR_DIR_NAME)):
        if all(os.path.lexists(os.path.join(candidate, name)) for name in names):
            batches: Batches = {}
            for name in names:
                path = os.path.join(candidate, name)
                where = '--source %s' % path
                _check_batch_file(path, where)
                batches[name] = (path, where)
            return batches
    raise UserInputError('--source %s: expected the CIFAR-10 python batches '
                         '(data_batch_1..5, test_batch) in it or in %s/'
                         % (source, CIFAR_DIR_NAME), flag='--source', path=source)


def _check_batch_file(path: str, where: str) -> None:
    """Refuses a batch file that is no regular file (a pipe would block) or too large."""
    kind = safe_io.not_a_regular_file(path)
    if kind or not os.path.isfile(path):
        raise UserInputError('%s is %s; expected a CIFAR-10 python batch file'
                             % (where, kind or 'not a file'), flag='--source', path=path)
    if os.path.getsize(path) > MAX_BATCH_BYTES:
        raise _too_large(where, os.path.getsize(path), path)


def _too_large(where: str, size: int, path: str) -> UserInputError:
    return UserInputError(
        '%s is %s; a CIFAR-10 batch is about 30 MiB, and nothing in its archive is '
        'larger than %s' % (where, safe_io.size_text(size),
                            safe_io.size_text(MAX_BATCH_BYTES)),
        flag='--source', path=path)


def _extract_batches(source: str, work_dir: str) -> Batches:
    """Extracts the batch members of archive `source` into `work_dir`, and nothing else.

    Members are read in order; each is checked from its header before its data
    is read: a member larger than `MAX_BATCH_BYTES`, more than `MAX_MEMBERS`
    members or `MAX_ARCHIVE_BYTES` in all end the read with one line. A batch
    must be a regular file; other members are skipped unread, and no path of
    the archive's choosing is written to.
    """
    wanted = set(_batch_names())
    batches: Batches = {}
    total = 0
    try:
        with tarfile.open(source, 'r:gz') as tar:
            for count, member in enumerate(tar, 1):
                name = member.name[2:] if member.name.startswith('./') else member.name
                where = '--source %s member %s' % (source, name)
                if count > MAX_MEMBERS:
                    raise UserInputError('--source %s has more than %d members; a '
                                         'CIFAR-10 archive has 9' % (source, MAX_MEMBERS),
                                         flag='--source', path=source)
                if member.size > MAX_BATCH_BYTES:
                    raise _too_large(where, member.size, source)
                total += member.size
                if total > MAX_ARCHIVE_BYTES:
                    raise UserInputError(
                        '--source %s holds more than %s; a CIFAR-10 archive holds about '
                        '180 MiB' % (source, safe_io.size_text(MAX_ARCHIVE_BYTES)),
                        flag='--source', path=source)
                base = posixpath.basename(name)
                if base not in wanted or posixpath.dirname(name) not in ('', CIFAR_DIR_NAME):
                    continue
                if not member.isfile():
                    raise UserInputError('%s is not a regular file (a link or device); '
                                         'expected a CIFAR-10 python batch' % where,
                                         flag='--source', path=source)
                if base in batches:
                    raise UserInputError('%s: the archive holds %s twice'
                                         % (where, base), flag='--source', path=source)
                path = os.path.join(work_dir, base)
                # A regular file (checked above): `extractfile` gives None only for others.
                with cast(IO[bytes], tar.extractfile(member)) as data, \
                        open(path, 'wb') as out:
                    shutil.copyfileobj(data, out, 1 << 20)
                batches[base] = (path, where)
    except (tarfile.TarError, OSError, EOFError, zlib.error) as e:
        raise UserInputError('--source %s: not a readable cifar-10-python.tar.gz (%s)'
                             % (source, e), flag='--source', path=source) from None
    missing = [n for n in _batch_names() if n not in batches]
    if missing:
        raise UserInputError('--source %s: expected the CIFAR-10 python batches '
                             '(data_batch_1..5, test_batch) in it or in %s/; %s missing'
                             % (source, CIFAR_DIR_NAME, ', '.join(missing)),
                             flag='--source', path=source)
    return batches


def _latin1_encode(text: str, encoding: str) -> bytes:
    """`_codecs.encode` as Python 3 pickles of bytes use it (latin-1 only)."""
    if codecs.lookup(encoding).name != 'iso8859-1':
        raise pickle.UnpicklingError('bytes encoded as %r' % encoding)
    return codecs.encode(text, encoding)


def _dtype(*args: Any) -> np.dtype[Any]:
    """`numpy.dtype` for numeric types only (object arrays unpickle objects)."""
    dtype = np.dtype(*args)
    if dtype.hasobject:
        raise pickle.UnpicklingError('an array of Python objects')
    return dtype


class _ArrayType:
    """Stands for `numpy.ndarray` in a batch pickle, where numpy's own pickles name it
    only as the type `_reconstruct` makes: called, it would allocate whatever
    shape the pickle declares, before a byte of its data is read."""

    def __new__(cls, *args: object, **kwargs: object) -> NoReturn:
        raise pickle.UnpicklingError('it constructs an array of a declared shape '
                                     'directly, which a CIFAR-10 batch never does')


def _reconstruct(subtype: type, shape: object, dtype: np.dtype[Any]) -> npt.NDArray[Any]:
    """numpy's `_reconstruct`, limited to what numpy's own pickles pass: an empty
    array, whose shape and bytes the pickle's next step sets together (numpy checks
    that they agree). Another shape, e.g. (10**8, 3072), would allocate 279 GiB."""
    if subtype is not _ArrayType or not isinstance(shape, tuple) or shape != (0,):
        raise pickle.UnpicklingError('it declares an array of shape %.40r before its data'
                                     % (shape,))
    # numpy's pickle helpers are private, missing from its stubs (hence the ignores).
    array: npt.NDArray[Any] = np.core.multiarray._reconstruct(  # type: ignore[attr-defined]
        np.ndarray, shape, dtype)
    return array


class BatchUnpickler(pickle.Unpickler):
    """Loads what a CIFAR-10 batch holds and nothing else.

    Dicts, lists, tuples, bytes, str and numbers need no globals; the only
    callables a pickle may name are those that rebuild numpy arrays (the
    official batches name numpy.core.multiarray._reconstruct, numpy.ndarray
    and numpy.dtype; pickles written by newer Python or numpy versions also
    use _codecs.encode for bytes and numpy's _frombuffer). Anything else, e.g.
    os.system, is refused before it is called. Arrays are only made as numpy's
    own pickles make them (`_reconstruct`): no declared shape is allocated
    before the bytes that fill it are read.
    """

    _ALLOWED: Dict[Tuple[str, str], Callable[..., object]] = {
        ('numpy', 'ndarray'): _ArrayType,
        ('numpy', 'dtype'): _dtype,
        ('numpy.core.multiarray', '_reconstruct'): _reconstruct,
        ('numpy._core.multiarray', '_reconstruct'): _reconstruct,
        # Private to numpy, so missing from its stubs (hence the ignores).
        ('numpy.core.numeric', '_frombuffer'):
            np.core.numeric._frombuffer,  # type: ignore[attr-defined]
        ('numpy._core.numeric', '_frombuffer'):
            np.core.numeric._frombuffer,  # type: ignore[attr-defined]
        ('_codecs', 'encode'): _latin1_encode,
    }

    def find_class(self, module: str, name: str) -> Callable[..., object]:
        try:
            return self._ALLOWED[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError('it refers to %s.%s, which a CIFAR-10 batch '
                                         'never does' % (module, name)) from None

    def persistent_load(self, pid: object) -> NoReturn:
        raise pickle.UnpicklingError('it refers to a persistent object')


def read_batch(path: str,
               where: Optional[str] = None) -> Tuple[npt.NDArray[np.uint8], List[int]]:
    """Reads one CIFAR-10 python pickle: (uint8 [N, 3072] images, labels).

    Args:
      path: the pickle file.
      where: how to name it in errors (default: the path).
    """
    where = where or path
    _check_batch_file(path, where)
    try:
        with open(path, 'rb') as f:
            batch = BatchUnpickler(f, encoding='bytes').load()
        data, labels = batch[b'data'], batch[b'labels']
    except (pickle.UnpicklingError, EOFError, KeyError, TypeError, ValueError,
            AttributeError, IndexError, OSError) as e:
        raise UserInputError('%s: not a CIFAR-10 python batch (%s); nothing in it was '
                             'run' % (where, errors.first_line(e))) from None
    if (not isinstance(data, np.ndarray) or data.dtype != np.uint8
            or data.shape[1:] != (layout.IMAGE_BYTES,) or not isinstance(labels, list)
            or len(labels) != data.shape[0]):
        raise UserInputError('%s: expected data as a uint8 array of shape [N, %d] and '
                             'a list of N labels' % (where, layout.IMAGE_BYTES))
    if any(isinstance(label, bool) or not isinstance(label, int)
           or not 0 <= label < layout.NUM_CLASSES for label in labels):
        raise UserInputError('%s: labels must be integers in [0, %d)'
                             % (where, layout.NUM_CLASSES))
    return data, labels


def write_tfrecords(batches: Iterable[Tuple[str, str]], output_path: str) -> int:
    """Converts batches [(path, where)] to one TFRecord file; returns the count."""
    tf = logs.import_tensorflow()
    count = 0
    with tf.io.TFRecordWriter(output_path) as writer:
        for path, where in batches:
            data, labels = read_batch(path, where)
            for image, label in zip(data, labels):
                example = tf.train.Example(features=tf.train.Features(feature={
                    'image': tf.train.Feature(bytes_list=tf.train.BytesList(
                        value=[image.tobytes()])),
                    'label': tf.train.Feature(int64_list=tf.train.Int64List(
                        value=[label])),
                }))
                writer.write(example.SerializeToString())
                count += 1
    return count


def generate(data_dir: str, source: Optional[str] = None,
             url: str = CIFAR_URL) -> layout.Metadata:
    """Writes the three TFRecord files and metadata.json into `data_dir`.

    All four are written to a staging directory and replace the old ones only
    when complete (`safe_io.staged_files`).

    Returns:
      The metadata dict ({'train': 40000, 'validation': 10000, ...}).
    """
    tf = logs.import_tensorflow()
    safe_io.check_owner(data_dir, '--data-dir')
    with tempfile.TemporaryDirectory() as work_dir:
        if source is None:
            cache = data_dir if not safe_io.is_remote(data_dir) else work_dir
            source = download(url, cache)
        batches = locate_batches(source, work_dir)
        counts: Dict[str, int] = {}
        with safe_io.staged_files(data_dir, layout.DATA_SET_FILES, '--data-dir') as staging:
            for split, names in layout.SPLITS.items():
                counts[split] = write_tfrecords([batches[n] for n in names],
                                                os.path.join(staging, split + '.tfrecords'))
            metadata: layout.Metadata = {
                'num_examples': counts, 'image_shape': [32, 32, 3],
                'num_classes': layout.NUM_CLASSES, 'source': os.path.basename(source)}
            with tf.io.gfile.GFile(os.path.join(staging, layout.METADATA_FILE), 'w') as f:
                json.dump(metadata, f, indent=2, sort_keys=True)
    for split, count in counts.items():
        print('Wrote %d examples to %s' % (count, os.path.join(data_dir, split + '.tfrecords')),
              file=sys.stderr)
    return metadata


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    parser: argparse.ArgumentParser = flags.make_parser(
        'python -m cifar10_estimator.generate_cifar10_tfrecords',
        'Download CIFAR-10 and convert it to TFRecords for cifar10_main.')
    parser.add_argument('--data-dir', type=flags.path, required=True,
                        help='Output directory (local or gs://).')
    parser.add_argument('--source', type=flags.path, default=None,
                        help='Already downloaded cifar-10-python.tar.gz or extracted '
                             'cifar-10-batches-py directory (no network needed). Its '
                             'batches are parsed as data (arrays, lists, numbers, '
                             'strings), never executed.')
    parser.add_argument('--url', default=CIFAR_URL,
                        help='Download URL (a mirror of the official archive; its '
                             'MD5 must match the official one).')
    return parser.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = logs.start_tool(parse_args, argv)
    generate(args.data_dir, source=args.source, url=args.url)
    return 0


if __name__ == '__main__':
    errors.run_cli(main)
