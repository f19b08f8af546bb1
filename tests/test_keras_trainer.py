"""The Keras trainer (keras_estimator) end to end, through its real CLIs.

MNIST-format data comes from `mnist_archive` (an mnist.npz in Keras' format
with learnable class patterns), put into a data directory by the real data
step with `--sha256` naming the generated file's checksum; CIFAR-10 TFRecords
from the shared fixture. Clusters run through `scripts/train-local.sh`.
"""
import functools
import glob
import hashlib
import http.server
import json
import os
import re
import subprocess
import sys
import tarfile
import threading
import zipfile

import numpy as np
import pytest
import tensorflow as tf

import mnist_archive
import processes
import resources
from cluster_helpers import assert_all_exited, Cluster, final_step, task_log
from conftest import cli_env, REPO_ROOT, reported_metrics, run_module
from estimator_trainers import registry
from estimator_trainers.errors import UserInputError
from estimator_trainers.tools import local
from estimator_trainers.tools.cloud import staging
from estimator_trainers.tools.cloud import train_cloud
from keras_estimator import data

MAIN = 'keras_estimator.trainer'
DATA_STEP = 'keras_estimator.data'
TRAIN_LOCAL = os.path.join(REPO_ROOT, 'scripts', 'train-local.sh')
# What the CIFAR-10 ResNet trainer writes to TensorBoard (tests/test_cifar10_train.py).
TRAINING_TAGS = {'loss', 'learning_rate/momentum', 'accuracy', 'examples_per_sec',
                 'examples_per_sec/average', 'global_step/sec'}
EVAL_TAGS = {'accuracy', 'loss'}
SMALL = ['--batch-size', '32', '--log-step-count-steps', '20', '--random-seed', '7']
CIFAR = ['--model', 'cifar10_mlp', '--batch-norm-momentum', '0.9']


@pytest.fixture(scope='module')
def mnist_source(tmp_path_factory):
    """(path, sha256) of a generated mnist.npz: 600 training, 200 test images."""
    path = str(tmp_path_factory.mktemp('mnist_src') / 'mnist.npz')
    return path, mnist_archive.write_npz(path)


@pytest.fixture(scope='module')
def mnist_data_dir(tmp_path_factory, mnist_source):
    """A data directory filled by the real data step from `mnist_source`."""
    data_dir = str(tmp_path_factory.mktemp('mnist_data'))
    path, sha256 = mnist_source
    run_module(DATA_STEP, '--data-dir', data_dir, '--source', path, '--sha256', sha256,
               check=0)
    return data_dir


def _train(data_dir, job_dir, *flags, check=0):
    return run_module(MAIN, '--data-dir', data_dir, '--job-dir', job_dir, *SMALL, *flags,
                      check=check)


def _final_metrics(stderr):
    match = re.search(r'Final evaluation at global step (\d+): accuracy = ([\d.]+), '
                      r'loss = ([\d.]+)', stderr)
    assert match, stderr[-3000:]
    return int(match.group(1)), float(match.group(2))


def _tags(directory):
    tags = set()
    for path in glob.glob(os.path.join(str(directory), 'events.out.tfevents.*')):
        for event in tf.compat.v1.train.summary_iterator(path):
            tags.update(value.tag for value in event.summary.value)
    return tags


def _export_dir(job_dir):
    exports = os.listdir(os.path.join(str(job_dir), 'export'))
    assert len(exports) == 1 and exports[0].isdigit(), exports
    return os.path.join(str(job_dir), 'export', exports[0])


def _served_accuracy(export_dir, images, labels):
    """Accuracy of the export's serving_default on uint8 `images`."""
    serve = tf.saved_model.load(export_dir).signatures['serving_default']
    out = serve(images=tf.constant(images, tf.uint8))
    assert out['probabilities'].shape == (len(labels), 10)
    np.testing.assert_allclose(out['probabilities'].numpy().sum(axis=1), 1, rtol=1e-4)
    return float(np.mean(out['classes'].numpy() == labels))


def _error_line(proc):
    lines = proc.stderr.strip().splitlines()
    assert lines and lines[-1].startswith('error: '), proc.stderr[-3000:]
    assert 'Traceback' not in proc.stderr
    return lines[-1]


# The data step.

def test_url_and_checksum_are_those_of_keras_own_loader():
    import keras  # pylint: disable=import-outside-toplevel
    source = open(os.path.join(os.path.dirname(keras.__file__), 'src', 'datasets',
                               'mnist.py')).read()
    folder = re.search(r'origin_folder = \(\s*"([^"]+)"', source).group(1)
    assert re.search(r'origin=origin_folder \+ "mnist.npz"', source)
    assert data.MNIST_URL == folder + 'mnist.npz'
    assert data.MNIST_SHA256 == re.search(r'file_hash=\(.*?"([0-9a-f]{64})"', source,
                                          re.S).group(1)


def test_data_step_refuses_a_file_without_the_official_checksum(mnist_source, tmp_path):
    path, sha256 = mnist_source
    proc = run_module(DATA_STEP, '--data-dir', tmp_path / 'data', '--source', path, check=2)
    assert _error_line(proc) == (
        'error: --source %s: SHA-256 is %s, expected %s (the mnist.npz of '
        'keras.datasets.mnist)' % (path, sha256, data.MNIST_SHA256))
    assert not (tmp_path / 'data').exists()


def test_data_step_offline_without_source_names_source(tmp_path):
    proc = run_module(DATA_STEP, '--data-dir', tmp_path / 'data', timeout=120, env={
        'HTTPS_PROXY': 'http://127.0.0.1:9', 'https_proxy': 'http://127.0.0.1:9',
        'NO_PROXY': '', 'no_proxy': ''}, check=2)
    line = _error_line(proc)
    assert line.startswith('error: cannot download %s (' % data.MNIST_URL), line
    assert line.endswith('pass it with --source PATH'), line
    assert not (tmp_path / 'data').exists()


@pytest.fixture
def served_file(mnist_source):
    """The generated mnist.npz over HTTP on loopback; yields its URL."""
    directory, name = os.path.split(mnist_source[0])
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=directory)
    server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield 'http://127.0.0.1:%d/%s' % (server.server_address[1], name)
    server.shutdown()
    server.server_close()


def test_data_step_downloads_and_checks_before_writing(served_file, mnist_source, tmp_path):
    path, sha256 = mnist_source
    env = {'NO_PROXY': '127.0.0.1', 'no_proxy': '127.0.0.1'}
    data_dir = tmp_path / 'data'
    proc = run_module(DATA_STEP, '--data-dir', data_dir, '--url', served_file, env=env,
                      check=2)
    assert re.fullmatch(r'error: %s: SHA-256 is %s, expected %s \(the mnist.npz of '
                        r'keras.datasets.mnist\)' % (re.escape(served_file), sha256,
                                                     data.MNIST_SHA256), _error_line(proc))
    assert not data_dir.exists()
    proc = run_module(DATA_STEP, '--data-dir', data_dir, '--url', served_file,
                      '--sha256', sha256.upper(), env=env, check=0)
    assert 'Downloading %s' % served_file in proc.stderr
    with open(path, 'rb') as f:
        assert (data_dir / 'mnist.npz').read_bytes() == f.read()
    assert sorted(os.listdir(data_dir)) == ['mnist.npz']


def _npz(path, **arrays):
    x, y = mnist_archive.make_images(20, 0)
    arrays = dict(dict(x_train=x, y_train=y, x_test=x, y_test=y), **arrays)
    np.savez_compressed(path, **{k: v for k, v in arrays.items() if v is not None})


MALFORMED = {
    'not npz': r'mnist.npz: not a readable .npz file',
    'missing array': r"mnist.npz: no array 'y_test'; expected x_train, y_train, x_test, "
                     r"y_test",
    'float images': r'mnist.npz: x_train must be uint8 images \[N, 28, 28\], got float32 '
                    r'\[20, 28, 28\]',
    'label 10': r'mnist.npz: y_test must hold 20 integer labels in 0-9',
}


def _malformed(case, path):
    """Writes the malformed mnist.npz `case` to `path`; returns its SHA-256."""
    x, y = mnist_archive.make_images(20, 0)
    arrays = dict(x_train=x, y_train=y, x_test=x, y_test=y)
    if case == 'not npz':
        path.write_bytes(b'not a zip archive')
    else:
        if case == 'missing array':
            del arrays['y_test']
        elif case == 'float images':
            arrays['x_train'] = np.zeros((20, 28, 28), np.float32)
        else:
            arrays['y_test'] = np.full(20, 10, np.uint8)
        np.savez_compressed(path, **arrays)
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize('case', sorted(MALFORMED))
def test_malformed_mnist_is_refused_by_the_data_step(case, tmp_path):
    source = tmp_path / 'mnist.npz'
    sha256 = _malformed(case, source)
    with pytest.raises(UserInputError, match=MALFORMED[case]):
        data.read(str(tmp_path))
    proc = run_module(DATA_STEP, '--data-dir', tmp_path / 'data', '--source', source,
                      '--sha256', sha256, check=2)
    assert re.search(MALFORMED[case], _error_line(proc)), _error_line(proc)
    assert '--source %s' % source in _error_line(proc)
    assert not (tmp_path / 'data').exists()


def test_malformed_mnist_is_one_line_from_the_trainer(tmp_path):
    _malformed('float images', tmp_path / 'mnist.npz')
    proc = _train(tmp_path, tmp_path / 'job', '--train-steps', '5', check=2)
    assert re.search(MALFORMED['float images'], _error_line(proc)), _error_line(proc)
    assert not (tmp_path / 'job').exists()


@pytest.mark.parametrize('flags, expected', [
    ([], r'--data-dir \S+ has no mnist.npz; fetch it with python -m keras_estimator.data'),
    (CIFAR, r'--data-dir \S+ has no metadata.json; create the TFRecords with python -m '
            r'cifar10_estimator.generate_cifar10_tfrecords'),
    (['--model', 'mlp'], r"argument --model: invalid choice: 'mlp'"),
    (['--batch-size', '0'], r'argument --batch-size: expected an integer > 0'),
])
def test_bad_input_is_one_line(flags, expected, tmp_path):
    proc = _train(tmp_path, tmp_path / 'job', '--train-steps', '5', *flags, check=2)
    assert re.search(expected, _error_line(proc)), _error_line(proc)
    assert not (tmp_path / 'job').exists()


def test_batch_larger_than_the_data_is_refused(mnist_data_dir, tmp_path):
    proc = _train(mnist_data_dir, tmp_path / 'job', '--batch-size', '601', check=2)
    assert _error_line(proc) == ('error: --batch-size=601 is more than the 600 training '
                                 'examples in --data-dir %s' % mnist_data_dir)
    assert not (tmp_path / 'job').exists()


def test_train_local_runs_the_data_step_which_keeps_the_official_check(mnist_source,
                                                                       tmp_path):
    """train-local.sh on an empty data dir runs the data step with $MNIST_SOURCE."""
    proc = processes.run(
        ['bash', TRAIN_LOCAL, 'keras', '--job-dir', str(tmp_path / 'job'), '--data-dir',
         str(tmp_path / 'data')], 300, cwd=REPO_ROOT,
        env=cli_env({'MNIST_SOURCE': mnist_source[0]}), stdin=subprocess.DEVNULL)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert _error_line(proc).startswith('error: --source %s: SHA-256 is %s, expected %s'
                                        % (mnist_source[0], mnist_source[1],
                                           data.MNIST_SHA256))
    assert not (tmp_path / 'job').exists()


# Training, TensorBoard, export.

@pytest.fixture(scope='module')
def mnist_trained(mnist_data_dir, tmp_path_factory):
    job_dir = tmp_path_factory.mktemp('mnist_job')
    proc = _train(mnist_data_dir, job_dir, '--train-steps', '100',
                  '--checkpoint-num-steps', '50')
    return job_dir, proc.stderr


def test_mnist_cnn_learns_far_above_chance(mnist_trained):
    job_dir, stderr = mnist_trained
    step, accuracy = _final_metrics(stderr)
    assert step == 100
    assert accuracy > 0.6, 'chance is 0.1'
    assert reported_metrics(stderr) == sorted(registry.get('keras').eval_metrics)
    progress = re.findall(r'step (\d+)/100, .*: accuracy = [\d.]+, '
                          r'learning_rate/momentum = 0.01, loss = [\d.e-]+ \(', stderr)
    assert [int(s) for s in progress] == list(range(20, 101, 20))
    names = [n for n, _ in tf.train.list_variables(tf.train.latest_checkpoint(str(job_dir)))]
    for layer in ('conv1', 'conv2', 'conv3', 'dense1', 'logits'):
        assert 'mnist_cnn/%s/kernel' % layer in names
    assert (job_dir / 'model_params.json').read_text().count('mnist_cnn') == 1


def test_tensorboard_shows_the_tags_of_the_other_trainers(mnist_trained):
    job_dir, _ = mnist_trained
    assert {t for t in _tags(job_dir) if not t.startswith('_hparams_/')} == TRAINING_TAGS
    assert EVAL_TAGS <= _tags(job_dir / 'eval')


def test_mnist_export_serves_uint8_images(mnist_trained, mnist_source):
    job_dir, _ = mnist_trained
    export_dir = _export_dir(job_dir)
    shown = processes.run(
        [os.path.join(os.path.dirname(sys.executable), 'saved_model_cli'), 'show',
         '--dir', export_dir, '--tag_set', 'serve', '--signature_def', 'serving_default'],
        120, env=cli_env())
    assert shown.returncode == 0, shown.stderr[-3000:]
    assert re.search(r"inputs\['images'\] tensor_info:\s+dtype: DT_UINT8\s+shape: "
                     r"\(-1, 28, 28\)", shown.stdout), shown.stdout
    assert "outputs['classes']" in shown.stdout
    with np.load(mnist_source[0]) as npz:
        images, labels = npz['x_test'], npz['y_test']
    assert _served_accuracy(export_dir, images, labels) > 0.6


def test_other_model_on_the_same_job_dir_is_refused(mnist_trained, cifar10_data_dir):
    job_dir, _ = mnist_trained
    before = {p: os.path.getmtime(p) for p in glob.glob(str(job_dir / '*'))}
    proc = _train(cifar10_data_dir, job_dir, *CIFAR, '--train-steps', '200', check=2)
    assert _error_line(proc).startswith(
        'error: --model=cifar10_mlp does not match the checkpoints in --job-dir %s, which '
        'were trained with --model=mnist_cnn' % job_dir)
    assert {p: os.path.getmtime(p) for p in glob.glob(str(job_dir / '*'))} == before


def test_cifar10_mlp_learns_and_serves(cifar10_data_dir, tmp_path):
    job_dir = tmp_path / 'job'
    proc = _train(cifar10_data_dir, job_dir, *CIFAR, '--train-steps', '100',
                  '--checkpoint-num-steps', '50')
    step, accuracy = _final_metrics(proc.stderr)
    assert step == 100 and accuracy > 0.6, 'chance is 0.1'
    reader = tf.train.load_checkpoint(tf.train.latest_checkpoint(str(job_dir)))
    for i in range(1, 5):
        # Batch norm's moving averages were trained, not left at their start.
        assert np.any(reader.get_tensor('cifar10_mlp/batch_norm%d/moving_mean' % i) != 0)
    assert {t for t in _tags(job_dir) if not t.startswith('_hparams_/')} == TRAINING_TAGS

    from cifar10_estimator import data as cifar10_data  # pylint: disable=import-outside-toplevel
    features, labels = next(iter(cifar10_data.make_dataset(cifar10_data_dir, 'eval', 100)))
    images = tf.cast(features['images'], tf.uint8).numpy()
    assert images.shape == (100, 32, 32, 3)
    assert _served_accuracy(_export_dir(job_dir), images, labels.numpy()) > 0.6


def test_l2_is_part_of_the_cifar10_mlp_loss(cifar10_data_dir, tmp_path):
    """A huge --weight-decay dominates the loss; mnist_cnn has no L2 to weigh."""
    proc = _train(cifar10_data_dir, tmp_path / 'job', *CIFAR, '--train-steps', '1',
                  '--weight-decay', '1000', '--log-step-count-steps', '1',
                  '--verbosity', 'debug')  # Estimator's final-loss line
    loss = float(re.search(r'Loss for final step: ([\d.e+]+?)\.?$', proc.stderr,
                           re.M).group(1))
    assert loss > 1000


def test_help_lists_the_flags():
    proc = run_module(MAIN, '--help', check=0)
    assert proc.stdout.startswith('usage: python -m keras_estimator.trainer ')
    for flag in ('--model', '{mnist_cnn,cifar10_mlp}', '--data-dir', '--batch-size',
                 '--learning-rate', '--momentum', '--weight-decay', '--batch-norm-momentum',
                 '--distribution-strategy', '--checkpoint-num-steps'):
        assert flag in proc.stdout


def test_dry_run_submission_of_the_package_holding_the_trainer(tmp_path):
    env = cli_env({'PROJECT_ID': 'my-project', 'BUCKET_NAME': 'gs://my-bucket',
                   'REGION': 'us-central1', 'GOOGLE_APPLICATION_CREDENTIALS': '/nonexistent',
                   'HTTPS_PROXY': 'http://127.0.0.1:9', 'HTTP_PROXY': 'http://127.0.0.1:9',
                   'NO_PROXY': ''})
    proc = processes.run(
        ['bash', os.path.join(REPO_ROOT, 'scripts', 'train-cloud.sh'), 'keras', '--config',
         os.path.join(REPO_ROOT, 'configs', 'config_mwms.yaml'), '--dry-run', '--job-name',
         'train_keras_1', '--executor-image-uri',
         'us-docker.pkg.dev/vertex-ai/training/tf-cpu.2-15.py310:latest', '--', '--model=cifar10_mlp',
         '--data-dir=gs://my-bucket/data/cifar10'],
        300, cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    printed = json.loads(proc.stdout)
    chief, workers = printed['request']['body']['jobSpec']['workerPoolSpecs']
    assert workers['replicaCount'] == '2'
    for pool in (chief, workers):
        spec = pool['pythonPackageSpec']
        assert spec['pythonModule'] == 'keras_estimator.trainer'
        assert spec['args'] == ['--distribution-strategy=multi_worker_mirrored',
                                '--model=cifar10_mlp', '--data-dir=gs://my-bucket/data/cifar10',
                                '--job-dir=gs://my-bucket/jobs/train_keras_1']

    # The package staged is the one that holds the trainer.
    sdist = staging.build_sdist(str(tmp_path))
    assert [sdist.filename] == [staged['package'] for staged in printed['staging']]
    with tarfile.open(sdist.path) as tar:
        members = {name.split('/', 1)[1] for name in tar.getnames() if '/' in name}
    assert {'keras_estimator/%s.py' % m for m in ('trainer', 'model', 'networks', 'data')} \
        <= members


@pytest.mark.parametrize('trainer_flags, data_name, data_trainer', [
    ([], 'keras', 'keras'),                              # mnist_cnn: mnist.npz
    (['--model', 'cifar10_mlp'], 'cifar10', 'cifar10'),  # seed 001's model: CIFAR-10
    (['--model=cifar10_mlp', '--model', 'mnist_cnn'], 'keras', 'keras'),
])
def test_each_model_reads_its_own_data_locally_and_in_the_cloud(
        trainer_flags, data_name, data_trainer, monkeypatch, tmp_path):
    """train-local.sh keras -- --model cifar10_mlp fills and reads data/cifar10 (the
    CIFAR-10 trainer's data step and directory); a cloud job reads gs://.../data/cifar10."""
    prepared = []

    def prepare_data(trainer, data_dir, environ=None, command=None):
        prepared.append((trainer.name, data_dir))
        return 0

    class Exec(Exception):
        pass

    def execv(path, argv):
        raise Exec(argv)

    monkeypatch.setattr(local, 'prepare_data', prepare_data)
    monkeypatch.setattr(local.os, 'execv', execv)
    with pytest.raises(Exec) as run:
        local.main(['keras', '--job-dir', str(tmp_path / 'job'), '--', *trainer_flags])
    data_dir = os.path.join(REPO_ROOT, 'data', data_name)
    assert prepared == [(data_trainer, data_dir)]
    argv = run.value.args[0]
    assert argv[1:3] == ['-m', 'keras_estimator.trainer']
    assert argv[3:5] == ['--data-dir', data_dir]
    assert argv[len(argv) - len(trainer_flags):] == trainer_flags
    cloud = train_cloud.data_defaults(registry.get('keras'), 'gs://my-bucket', trainer_flags)
    assert cloud == ['--data-dir=gs://my-bucket/data/%s' % (
        'cifar10' if data_name == 'cifar10' else 'mnist')]


def test_dry_run_defaults_to_the_mnist_data_in_the_bucket():
    proc = run_module('estimator_trainers.tools.cloud', 'submit', 'keras', '--dry-run',
                      '--job-name', 'train_keras_2', timeout=300, check=0, env={
                          'PROJECT_ID': 'my-project', 'BUCKET_NAME': 'gs://my-bucket',
                          'GOOGLE_APPLICATION_CREDENTIALS': '/nonexistent',
                          'HTTPS_PROXY': 'http://127.0.0.1:9', 'NO_PROXY': ''})
    (pool,) = json.loads(proc.stdout)['request']['body']['jobSpec']['workerPoolSpecs']
    assert pool['containerSpec']['command'] == ['python', '-m', 'keras_estimator.trainer']
    assert '--data-dir=gs://my-bucket/data/mnist' in pool['containerSpec']['args']


# Clusters, through train-local.sh.

def _train_local_cluster(data_dir, job_dir, cluster_flags, trainer_flags):
    cluster = Cluster(['bash', TRAIN_LOCAL, 'keras', '--job-dir', str(job_dir),
                       '--data-dir', str(data_dir), '--distributed', *cluster_flags, '--',
                       *SMALL, '--max-worker-delay-secs', '5', '--peer-timeout-secs', '120',
                       *trainer_flags])
    assert cluster.finish() == 0, cluster.output[-6000:]
    return cluster


@pytest.mark.slow
def test_parameter_servers(cifar10_data_dir, tmp_path):
    job_dir = tmp_path / 'job'
    cluster = _train_local_cluster(
        cifar10_data_dir, job_dir, ['--parameter-server-count', '1', '--worker-count', '1'],
        [*CIFAR, '--train-steps', '100', '--checkpoint-num-steps', '50',
         '--max-worker-delay-secs', '0', '--verbosity', 'debug'])
    assert '[launcher] stopping ps-0' in cluster.output
    assert 100 <= final_step(cluster.output) <= 110  # asynchronous: a few steps over
    graph = (job_dir / 'graph.pbtxt').read_text()
    assert re.search(r'name: "cifar10_mlp/dense1/kernel"\n\s+op: "\w+"\n\s+'
                     r'device: "/job:ps/task:0"', graph)
    # The worker trained, unless the chief reached the target before it started.
    assert re.search(r'Loss for final step: \d|Skipping training since max_steps has '
                     r'already saved', task_log(job_dir, 'worker-0'))
    assert _final_metrics(cluster.output)[1] > 0.6
    assert len(os.listdir(job_dir / 'export')) == 1
    assert_all_exited(cluster.pids())


# Resource bombs: declared sizes and inflation, checked before anything is allocated.

def _npz(path, arrays, raw=None, level=6):
    """Writes an .npz of `arrays`; `raw` maps a name to (header dict, data chunks)
    written as that member instead (a header that may lie about its data)."""
    with zipfile.ZipFile(path, 'w', zipfile.ZIP_DEFLATED, compresslevel=level) as npz:
        for name, array in arrays.items():
            with npz.open(name + '.npy', 'w', force_zip64=True) as f:
                np.lib.format.write_array(f, array)
        for name, (header, chunks) in (raw or {}).items():
            with npz.open(name + '.npy', 'w', force_zip64=True) as f:
                np.lib.format.write_array_header_1_0(f, header)
                for chunk in chunks:
                    f.write(chunk)
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _small_arrays(n=20):
    x, y = mnist_archive.make_images(n, 0)
    return dict(x_train=x, y_train=y, x_test=x, y_test=y)


BOMBS = {
    'declared TiB': (
        lambda path: _npz(path, {k: v for k, v in _small_arrays().items() if k != 'x_train'},
                          raw={'x_train': ({'descr': '|u1', 'fortran_order': False,
                                            'shape': (10 ** 9, 28, 28)}, [b'\0' * 784])}),
        r'x_train.npy declares a uint8 array \[1000000000, 28, 28\] of 730.2 GiB, '
        r'but the archive holds 784 bytes of data for it'),
    'inflates 1.5 GB': (
        lambda path: _npz(path, dict(_small_arrays(), y_train=np.zeros(1900000, np.uint8)),
                          raw={'x_train': ({'descr': '|u1', 'fortran_order': False,
                                            'shape': (1900000, 28, 28)},
                                           [b'\0' * (28 * 28 * 100000)] * 19)}, level=9),
        r'x_train.npy inflates from [\d.]+ MiB to 1.4 GiB \(\d+ times\); image '
        r'data compresses far less, so it is refused unread'),
}


@pytest.mark.parametrize('case', sorted(BOMBS))
def test_npz_bombs_are_refused_before_allocating(case, tmp_path):
    """A header declaring 730 GiB was a MemoryError traceback; an array inflating a
    1 MB file to 1.5 GB was read into memory whole. Both are refused from the zip
    entry and the .npy header, with the data step's memory bounded."""
    build, expected = BOMBS[case]
    source = tmp_path / 'mnist.npz'
    sha256 = build(source)
    assert source.stat().st_size < 2 << 20  # a 1.4 MB file
    proc, peak = resources.run_measured(DATA_STEP, '--data-dir', tmp_path / 'data',
                                        '--source', source, '--sha256', sha256)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert re.fullmatch('error: --source %s: %s' % (re.escape(str(source)), expected),
                        _error_line(proc)), _error_line(proc)
    # The same command refusing a file at once: what the process needs anyway.
    (tmp_path / 'empty.npz').write_bytes(b'')
    _, baseline = resources.run_measured(DATA_STEP, '--data-dir', tmp_path / 'data',
                                         '--source', tmp_path / 'empty.npz', '--sha256',
                                         hashlib.sha256(b'').hexdigest())
    assert peak < baseline + (256 << 20), (peak, baseline)
    assert not (tmp_path / 'data').exists()
    # The trainer reads the file the same way.
    proc = _train(tmp_path, tmp_path / 'job', '--train-steps', '5', check=2)
    assert re.fullmatch('error: %s: %s' % (re.escape(str(source)), expected),
                        _error_line(proc)), _error_line(proc)


def test_npy_where_an_npz_is_expected_is_one_line(tmp_path):
    """It was a TypeError traceback."""
    np.save(tmp_path / 'mnist.npz', np.zeros((20, 28, 28), np.uint8))
    os.rename(tmp_path / 'mnist.npz.npy', tmp_path / 'mnist.npz')
    proc = _train(tmp_path, tmp_path / 'job', '--train-steps', '5', check=2)
    assert _error_line(proc) == (
        'error: %s is a .npy file (one array); expected an .npz archive of the arrays '
        'x_train, y_train, x_test, y_test (numpy.savez)' % (tmp_path / 'mnist.npz'))


def test_download_declaring_a_tib_is_not_read(tmp_path):
    with resources.endless_download(1 << 40) as url:
        proc = run_module(DATA_STEP, '--data-dir', tmp_path / 'data', '--url', url,
                          env={'NO_PROXY': '127.0.0.1', 'no_proxy': '127.0.0.1'}, check=2)
    assert _error_line(proc) == ('error: cannot download %s: it serves more than 1 GiB, and '
                                 'mnist.npz is about 11 MB; stopped reading' % url)
    assert not (tmp_path / 'data').exists()
