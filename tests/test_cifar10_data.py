"""CIFAR-10 data step and input pipeline, on archives in the real pickle format."""
import functools
import http.server
import json
import os
import pickle
import shutil
import struct
import tarfile
import threading

import numpy as np
import pytest
import tensorflow as tf

import cifar10_archive
import resources
from cifar10_estimator import data
from cifar10_estimator import generate_cifar10_tfrecords as gen
from cifar10_estimator import layout
from conftest import directory_of_another_user, one_error_line
from conftest import run_module
from conftest import tree_bytes
from estimator_trainers.errors import UserInputError

GEN = 'cifar10_estimator.generate_cifar10_tfrecords'

def _records(path):
    out = []
    for raw in tf.data.TFRecordDataset(path):
        example = tf.train.Example.FromString(raw.numpy())
        out.append((example.features.feature['image'].bytes_list.value[0],
                    example.features.feature['label'].int64_list.value[0]))
    return out


def _pickle(batches_dir, name):
    with open(os.path.join(batches_dir, name), 'rb') as f:
        return pickle.load(f, encoding='bytes')


def test_generate_cli_writes_splits_and_real_counts(cifar10_data_dir, cifar10_tarball,
                                                    tmp_path):
    with open(os.path.join(cifar10_data_dir, 'metadata.json')) as f:
        metadata = json.load(f)
    assert metadata['num_examples'] == {'train': 400, 'validation': 100, 'eval': 100}
    assert data.read_metadata(cifar10_data_dir) == metadata['num_examples']

    # Records hold the pickles' bytes unchanged (CHW order) and their labels, in
    # order: train = data_batch_1..4, validation = data_batch_5, eval = test_batch.
    shutil.unpack_archive(cifar10_tarball, str(tmp_path))
    batches = str(tmp_path / 'cifar-10-batches-py')
    for subset, names in layout.SPLITS.items():
        records = _records(os.path.join(cifar10_data_dir, subset + '.tfrecords'))
        expected = []
        for name in names:
            batch = _pickle(batches, name)
            expected += [(bytes(img), lab) for img, lab in
                         zip(batch[b'data'], batch[b'labels'])]
        assert records == expected
        data.validate_subset(cifar10_data_dir, subset, len(expected))


def test_generate_from_extracted_directory(cifar10_tarball, tmp_path):
    shutil.unpack_archive(cifar10_tarball, str(tmp_path / 'src'))
    out = tmp_path / 'out'
    run_module('cifar10_estimator.generate_cifar10_tfrecords', '--data-dir', out,
               '--source', tmp_path / 'src' / 'cifar-10-batches-py', check=0)
    assert data.read_metadata(str(out))['train'] == 400
    assert sorted(os.listdir(out)) == ['eval.tfrecords', 'metadata.json',
                                       'train.tfrecords', 'validation.tfrecords']


def test_download_failure_names_source_flag(tmp_path, refused_port):
    url = 'http://127.0.0.1:%d/cifar-10-python.tar.gz' % refused_port
    proc = run_module('cifar10_estimator.generate_cifar10_tfrecords',
                      '--data-dir', tmp_path / 'out', '--url', url, check=2)
    lines = proc.stderr.strip().splitlines()
    assert lines[-1].startswith('error: cannot download ' + url)
    assert '--source' in lines[-1]
    assert not (tmp_path / 'out' / 'metadata.json').exists()


def test_download_failure_through_train_local_names_its_environment_variable(
        tmp_path, refused_port):
    """train-local.sh has no --source: offline, the line names the way that works there."""
    proxy = 'http://127.0.0.1:%d' % refused_port
    proc = run_module('estimator_trainers.tools.local', 'cifar10', '--data-dir',
                      tmp_path / 'data', '--job-dir', tmp_path / 'job', '--', '--num-layers',
                      '8', check=2, env={'HTTPS_PROXY': proxy, 'https_proxy': proxy,
                                         'NO_PROXY': '', 'no_proxy': ''})
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith('error: cannot download https://www.cs.toronto.edu/'), line
    assert line.endswith(
        '; download cifar-10-python.tar.gz on a machine with internet access and rerun '
        'with CIFAR10_SOURCE=PATH: CIFAR10_SOURCE=PATH bash scripts/train-local.sh cifar10 '
        '--data-dir %s --job-dir %s -- --num-layers 8' % (tmp_path / 'data',
                                                          tmp_path / 'job')), line
    assert not (tmp_path / 'job').exists()


def test_bad_source_is_one_line(tmp_path):
    bogus = tmp_path / 'cifar-10-python.tar.gz'
    bogus.write_bytes(b'not a tarball')
    proc = run_module('cifar10_estimator.generate_cifar10_tfrecords',
                      '--data-dir', tmp_path / 'out', '--source', bogus, check=2)
    assert proc.stderr.strip().splitlines()[-1].startswith('error: --source %s' % bogus)


@pytest.fixture
def http_server(cifar10_tarball):
    handler = functools.partial(http.server.SimpleHTTPRequestHandler,
                                directory=os.path.dirname(cifar10_tarball))
    server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield 'http://127.0.0.1:%d/' % server.server_address[1]
    server.shutdown()
    server.server_close()


def test_download_verifies_checksum(http_server, cifar10_tarball, tmp_path):
    url = http_server + os.path.basename(cifar10_tarball)
    good = gen.file_md5(cifar10_tarball)
    path = gen.download(url, str(tmp_path / 'dl'), md5=good)
    assert gen.file_md5(path) == good
    # The official checksum does not match this generated archive.
    with pytest.raises(UserInputError, match='MD5 checksum mismatch'):
        gen.download(url, str(tmp_path / 'dl2'))


def test_distort_batch_is_a_crop_of_the_padded_image_or_its_mirror():
    images = tf.random.uniform([16, 32, 32, 3], 0, 255, seed=1)
    out = data.distort_batch(images, tf.constant([3, 0], tf.int64)).numpy()
    padded = np.pad(images.numpy(), [[0, 0], [4, 4], [4, 4], [0, 0]])
    assert out.shape == (16, 32, 32, 3)
    flips = 0
    for i in range(16):
        windows = [padded[i, y:y + 32, x:x + 32] for y in range(9) for x in range(9)]
        plain = any(np.array_equal(out[i], w) for w in windows)
        mirrored = any(np.array_equal(out[i], w[:, ::-1]) for w in windows)
        assert plain or mirrored
        flips += mirrored and not plain
    assert 0 < flips < 16


def test_input_fn_batches(cifar10_data_dir):
    features, labels = next(iter(data.make_dataset(cifar10_data_dir, 'eval', 30)))
    assert features['images'].shape == (30, 32, 32, 3)
    assert features['images'].dtype == tf.float32
    assert labels.dtype == tf.int32
    first = _records(os.path.join(cifar10_data_dir, 'eval.tfrecords'))[0]
    chw = np.frombuffer(first[0], np.uint8).reshape(3, 32, 32)
    np.testing.assert_array_equal(features['images'][0].numpy(), chw.transpose(1, 2, 0))
    assert labels[0] == first[1]
    sizes = [int(l.shape[0]) for _, l in data.make_dataset(cifar10_data_dir, 'eval', 30)]
    assert sizes == [30, 30, 30, 10]


class _RunsCommand:
    """Pickles to a call of os.system(command), as a malicious batch would."""

    def __init__(self, command):
        self.command = command

    def __reduce__(self):
        return os.system, (self.command,)


def _evil_archive(directory, name, raw):
    return cifar10_archive.write_archive(str(directory), replace={name: raw},
                                         per_batch=20, test_size=20)


def test_pickle_that_calls_os_system_is_refused_without_running_it(
        cifar10_data_dir, tmp_path):
    marker = tmp_path / 'ran'
    raw = pickle.dumps({b'data': _RunsCommand('touch %s' % marker), b'labels': []},
                       protocol=2)
    archive = _evil_archive(tmp_path / 'src', 'data_batch_3', raw)
    data_dir = tmp_path / 'data'
    shutil.copytree(cifar10_data_dir, data_dir)
    before = tree_bytes(data_dir)

    proc = run_module(GEN, '--data-dir', data_dir, '--source', archive)

    line = one_error_line(proc, '--source %s member cifar-10-batches-py/data_batch_3: '
                          'not a CIFAR-10 python batch' % archive)
    assert 'posix.system' in line
    assert not marker.exists()
    # train was half written when the bad batch came: the old set is intact.
    assert tree_bytes(data_dir) == before


def test_pickle_naming_an_unknown_module_is_one_line(tmp_path):
    raw = b'\x80\x02cno_such_module\nthing\n)R.'
    archive = _evil_archive(tmp_path / 'src', 'test_batch', raw)
    proc = run_module(GEN, '--data-dir', tmp_path / 'data', '--source', archive)
    line = one_error_line(proc, '--source %s member cifar-10-batches-py/test_batch'
                          % archive)
    assert 'no_such_module.thing' in line
    assert tree_bytes(tmp_path / 'data') == {}


@pytest.mark.parametrize('batch, problem', [
    ({b'data': np.zeros((2, 3072), object), b'labels': [0, 1]}, 'Python objects'),
    ({b'data': np.zeros((2, 3072), np.float32), b'labels': [0, 1]}, 'uint8'),
    ({b'data': np.zeros((2, 3072), np.uint8), b'labels': [0, 10]}, 'labels must be'),
])
def test_batches_with_other_contents_are_one_line(tmp_path, batch, problem):
    archive = _evil_archive(tmp_path / 'src', 'data_batch_1',
                            pickle.dumps(batch, protocol=2))
    proc = run_module(GEN, '--data-dir', tmp_path / 'data', '--source', archive)
    assert problem in one_error_line(proc, '--source %s member' % archive)


def test_batch_unpickler_reads_official_and_newer_pickle_formats(tmp_path):
    data = np.arange(2 * 3072, dtype=np.uint8).reshape(2, 3072)
    for protocol in (2, 4, 5):
        path = tmp_path / ('batch%d' % protocol)
        path.write_bytes(pickle.dumps({b'data': data, b'labels': [3, 4],
                                       b'filenames': [b'a.png', b'b.png'],
                                       b'batch_label': 'training batch 1 of 5'},
                                      protocol=protocol))
        images, labels = gen.read_batch(str(path))
        np.testing.assert_array_equal(images, data)
        assert labels == [3, 4]


def test_file_of_the_official_size_must_have_the_official_md5(tmp_path):
    fake = tmp_path / 'cifar-10-python.tar.gz'
    with open(fake, 'wb') as f:
        f.truncate(gen.CIFAR_SIZE)
    proc = run_module(GEN, '--data-dir', tmp_path / 'data', '--source', fake)
    line = one_error_line(proc, '--source %s has the size of the official' % fake)
    assert gen.CIFAR_MD5 in line


def test_help_says_source_is_parsed_never_executed():
    proc = run_module(GEN, '--help', check=0)
    assert 'never executed' in ' '.join(proc.stdout.split())


def test_regeneration_replaces_the_whole_set(cifar10_data_dir, tmp_path):
    data_dir = tmp_path / 'data'
    shutil.copytree(cifar10_data_dir, data_dir)
    archive = cifar10_archive.write_archive(str(tmp_path / 'src'), per_batch=30,
                                            test_size=20, seed=7)
    run_module(GEN, '--data-dir', data_dir, '--source', archive, check=0)
    assert sorted(os.listdir(data_dir)) == ['eval.tfrecords', 'metadata.json',
                                            'train.tfrecords', 'validation.tfrecords']
    assert data.read_metadata(str(data_dir)) == {'train': 120, 'validation': 30,
                                                 'eval': 20}
    for subset, count in data.read_metadata(str(data_dir)).items():
        data.validate_subset(str(data_dir), subset, count)


def test_planted_temp_symlinks_are_not_followed(cifar10_tarball, http_server, tmp_path):
    data_dir = tmp_path / 'data'
    data_dir.mkdir()
    victim = tmp_path / 'victim'
    victim.write_text('precious')
    planted = ['train.tfrecords.tmp', 'eval.tfrecords.tmp', 'cifar-10-python.tar.gz.part']
    for name in planted:
        os.symlink(victim, data_dir / name)
    run_module(GEN, '--data-dir', data_dir, '--source', cifar10_tarball, check=0)
    url = http_server + os.path.basename(cifar10_tarball)
    gen.download(url, str(data_dir), md5=gen.file_md5(cifar10_tarball))
    assert victim.read_text() == 'precious'
    assert sorted(os.listdir(data_dir)) == sorted(planted + [
        'cifar-10-python.tar.gz', 'eval.tfrecords', 'metadata.json', 'train.tfrecords',
        'validation.tfrecords'])
    assert all(os.readlink(data_dir / name) == str(victim) for name in planted)


def test_data_dir_of_another_user_is_refused(cifar10_tarball, tmp_path):
    data_dir = directory_of_another_user(tmp_path / 'data')
    proc = run_module(GEN, '--data-dir', data_dir, '--source', cifar10_tarball)
    one_error_line(proc, '--data-dir %s is owned by user nobody' % data_dir)
    assert os.listdir(data_dir) == []


# --- declared sizes and archive bombs ---------------------------------------------------

class _Reduces:
    """Pickles to `function(*args)`, as a crafted batch would."""

    def __init__(self, function, *args):
        self.call = (function, args)

    def __reduce__(self):
        return self.call


@pytest.mark.parametrize('data, declared', [
    (_Reduces(np.core.multiarray._reconstruct, np.ndarray, (10 ** 8, 3072), b'B'),
     'it declares an array of shape (100000000, 3072) before its data'),
    (_Reduces(np.ndarray, (10 ** 8, 3072), 'B'),
     'it constructs an array of a declared shape directly, which a CIFAR-10 batch never '
     'does'),
], ids=['reconstruct', 'ndarray'])
def test_batch_declaring_hundreds_of_gib_is_refused_before_allocating(tmp_path, data,
                                                                      declared):
    """An array header declaring 279 GiB was a MemoryError traceback (or, for a size
    the kernel lets it reserve, memory filled later): no declared shape is
    allocated before the bytes that fill it are read."""
    raw = pickle.dumps({b'data': data, b'labels': [0]}, protocol=2)
    archive = _evil_archive(tmp_path / 'src', 'data_batch_2', raw)
    proc = run_module(GEN, '--data-dir', tmp_path / 'data', '--source', archive)
    assert one_error_line(proc, '--source %s member cifar-10-batches-py/data_batch_2: '
                          'not a CIFAR-10 python batch' % archive) == (
        'error: --source %s member cifar-10-batches-py/data_batch_2: not a CIFAR-10 python '
        'batch (%s); nothing in it was run' % (archive, declared))
    assert tree_bytes(tmp_path / 'data') == {}


def _zeros(size):
    """A file object of `size` zero bytes, read in 1 MiB pieces."""
    class Zeros:
        left = size

        def read(self, n=-1):
            n = min(self.left, 1 << 20 if n is None or n < 0 else n)
            self.left -= n
            return b'\0' * n
    return Zeros()


def test_archive_with_a_gib_member_is_refused_unread(tmp_path):
    """A 1 MiB archive whose first member inflates to 1 GiB was extracted to disk whole
    before the batches were read; only batch members are extracted now, each checked
    from its header first, so this one is refused before a byte of it is read."""
    batches = cifar10_archive.write_batches(str(tmp_path / 'src'), per_batch=20,
                                            test_size=20)
    archive = tmp_path / 'cifar-10-python.tar.gz'
    with tarfile.open(archive, 'w:gz', compresslevel=1) as tar:
        bomb = tarfile.TarInfo('cifar-10-batches-py/readme.html')
        bomb.size = 1 << 30
        tar.addfile(bomb, _zeros(bomb.size))
        tar.add(batches, arcname='cifar-10-batches-py')
    assert archive.stat().st_size < 8 << 20
    proc = run_module(GEN, '--data-dir', tmp_path / 'data', '--source', archive)
    assert one_error_line(proc, '--source') == (
        'error: --source %s member cifar-10-batches-py/readme.html is 1 GiB; a CIFAR-10 '
        'batch is about 30 MiB, and nothing in its archive is larger than 256 MiB'
        % archive)
    assert tree_bytes(tmp_path / 'data') == {}


def test_batch_that_is_a_pipe_is_refused_without_blocking(tmp_path):
    batches = cifar10_archive.write_batches(str(tmp_path / 'src'), per_batch=20,
                                            test_size=20)
    os.remove(os.path.join(batches, 'test_batch'))
    os.mkfifo(os.path.join(batches, 'test_batch'))  # opening it would wait for a writer
    proc = run_module(GEN, '--data-dir', tmp_path / 'data', '--source', batches,
                      timeout=120)
    assert one_error_line(proc, '--source') == (
        'error: --source %s is a pipe; expected a CIFAR-10 python batch file'
        % os.path.join(batches, 'test_batch'))


def _masked_crc(data):
    """TFRecord's masked CRC-32C of `data`."""
    crc = 0xffffffff
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    crc ^= 0xffffffff
    return (((crc >> 15) | (crc << 17)) + 0xa282ead8) & 0xffffffff


def _declare_length(path, record, length):
    """Makes record number `record` of a TFRecord file declare `length` bytes, with a
    header checksum that holds (so TensorFlow's reader believes it)."""
    with open(path, 'r+b') as f:
        header = f.read(8)
        stride = struct.unpack('<Q', header)[0] + 16
        f.seek(record * stride)
        declared = struct.pack('<Q', length)
        f.write(declared + struct.pack('<I', _masked_crc(declared)))


@pytest.mark.parametrize('record', [0, 7], ids=['first record', 'later record'])
def test_record_declaring_a_tib_is_refused_before_tensorflow_reads_it(
        cifar10_data_dir, tmp_path, record):
    """TensorFlow allocates what a record header declares: 1 TiB crashed the trainer
    (SIGSEGV) when it read that record, at the start or in the middle of training."""
    data_dir = tmp_path / 'data'
    shutil.copytree(cifar10_data_dir, data_dir)
    _declare_length(data_dir / 'train.tfrecords', record, 1 << 40)
    proc = run_module('cifar10_estimator.cifar10_main', '--data-dir', data_dir, '--job-dir',
                      tmp_path / 'job', '--num-layers', '8', '--train-batch-size', '20',
                      '--eval-batch-size', '50', '--train-steps', '2')
    line = one_error_line(proc, '%s: the record at byte ' % (data_dir / 'train.tfrecords'))
    assert line.endswith(' declares 1099511627776 bytes, more than %s; the file is corrupt '
                         'or was made to crash its reader (TensorFlow allocates what a '
                         'record declares); regenerate --data-dir'
                         % ('the file holds' if record == 0 else 'a CIFAR-10 record')), line
    assert not (tmp_path / 'job').exists()


@pytest.mark.parametrize('metadata', [
    '{"num_examples": {"train": Infinity, "validation": 1, "eval": 1}}',
    '{"num_examples": ' + '[' * 50000 + ']' * 50000 + '}',
], ids=['infinite count', 'deep nesting'])
def test_metadata_with_absurd_contents_is_one_line(cifar10_data_dir, tmp_path, metadata):
    """An infinite count was an OverflowError traceback, deep nesting a RecursionError."""
    data_dir = tmp_path / 'data'
    shutil.copytree(cifar10_data_dir, data_dir)
    (data_dir / 'metadata.json').write_text(metadata)
    with pytest.raises(UserInputError, match=r'metadata.json: expected \{"num_examples"'):
        data.read_metadata(str(data_dir))


@pytest.mark.parametrize('declared', [None, 1 << 40], ids=['endless', 'declares 1 TiB'])
def test_download_that_never_ends_is_stopped_at_the_official_size(tmp_path, declared):
    """A --url serving an endless stream filled the disk: the official archive's size
    bounds what is read (its MD5 must match the official one anyway)."""
    with resources.endless_download(declared) as url:
        proc = run_module(GEN, '--data-dir', tmp_path / 'data', '--url', url,
                          env={'NO_PROXY': '127.0.0.1', 'no_proxy': '127.0.0.1'},
                          timeout=300)
    assert one_error_line(proc, 'cannot download') == (
        'error: cannot download %s: it serves more than the 170498071 bytes of the '
        'official cifar-10-python.tar.gz; stopped reading (use the official archive or a '
        'true mirror of it)' % url)
    assert os.listdir(tmp_path / 'data') == []  # the partial download is removed
