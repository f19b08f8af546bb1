"""Hostile or damaged files in a job-dir, through the real trainer CLIs.

A run refuses, in one line and before writing anything, a job-dir it could not
resume from; TensorFlow would otherwise end in a traceback, or start over at
step 0 and save over the checkpoints there. Each case starts from a copy of one
taxi job-dir trained to step 20 (checkpoints 0, 10, 20).
"""
import json
import os
import re
import shutil
import socket
import subprocess

import numpy as np
import pytest
import tensorflow as tf

import taxi_trips
from conftest import run_module, tree_bytes
from estimator_trainers import errors

TASK = 'taxi_estimator.task'
CIFAR = 'cifar10_estimator.cifar10_main'


@pytest.fixture(scope='module')
def files(tmp_path_factory):
    train, evals = taxi_trips.write_layout_files(tmp_path_factory.mktemp('taxi_data'))
    return ['--train-files', str(train), '--eval-files', str(evals), '--batch-size', '64',
            '--checkpoint-num-steps', '10', '--random-seed', '3',
            '--eval-frequency-secs', '3600']


@pytest.fixture(scope='module')
def trained(files, tmp_path_factory):
    job_dir = tmp_path_factory.mktemp('trained') / 'job'
    run_module(TASK, *files, '--job-dir', job_dir, '--train-steps', '20', check=0)
    return job_dir


@pytest.fixture
def job_dir(trained, tmp_path):
    copy = tmp_path / 'job'
    shutil.copytree(trained, copy)
    return copy


def refused(files, job_dir, *flags, module=TASK):
    """Runs a rerun that must be refused; returns its one error line. The job-dir must
    be byte for byte as it was (the lease taken meanwhile is released)."""
    before = tree_bytes(job_dir)
    common = files if module == TASK else []
    proc = run_module(module, *common, '--job-dir', job_dir, *flags, check=2)
    assert 'Traceback' not in proc.stderr, proc.stderr[-5000:]
    lines = proc.stderr.strip().splitlines()
    assert [l for l in lines if l.startswith('error:')] == lines[-1:], proc.stderr[-3000:]
    assert tree_bytes(job_dir) == before
    return lines[-1]


def poison(prefix, variable):
    """Rewrites checkpoint `prefix` with NaN in `variable` (as a diverged run saved it)."""
    reader = tf.train.load_checkpoint(str(prefix))
    with tf.Graph().as_default():
        variables = {}
        for name in reader.get_variable_to_dtype_map():
            value = reader.get_tensor(name)
            if name == variable:
                value = np.full_like(value, np.nan)
            variables[name] = tf.compat.v1.Variable(value, name=name.replace('/', '_'))
        saver = tf.compat.v1.train.Saver(variables)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            saver.save(session, str(prefix), write_meta_graph=False, write_state=False)


def test_garbage_checkpoint_state_is_refused_not_started_over(files, job_dir):
    """It made training start over at step 0 and save over model.ckpt-0/10/20."""
    (job_dir / 'checkpoint').write_text('garbage {{{\n')
    assert refused(files, job_dir, '--train-steps', '30') == (
        'error: --job-dir file %s is not a TensorFlow checkpoint state (1:1 : Message type '
        '"tensorflow.CheckpointState" has no field named "garbage".); the newest checkpoint '
        'there is model.ckpt-20: restore the file (a line model_checkpoint_path: "NAME") or '
        'use a new --job-dir; a run would start over at step 0 and save over the checkpoints'
        % (job_dir / 'checkpoint'))


def test_checkpoints_without_a_state_file_are_refused_not_overwritten(files, job_dir):
    os.remove(job_dir / 'checkpoint')
    assert refused(files, job_dir, '--train-steps', '30') == (
        'error: --job-dir %s holds checkpoints (the newest is model.ckpt-20) but no '
        'checkpoint file naming the latest: a run would start over at step 0 and save '
        'over them; write one (a line model_checkpoint_path: "model.ckpt-20") or use a new '
        '--job-dir' % job_dir)


def test_state_file_naming_a_missing_checkpoint_is_one_line(files, job_dir):
    """It was a ValueError traceback ("not a valid checkpoint")."""
    for name in os.listdir(job_dir):
        if name.startswith('model.ckpt-20.'):
            os.remove(job_dir / name)
    assert refused(files, job_dir, '--train-steps', '30') == (
        'error: --job-dir file %s names model.ckpt-20 as the latest checkpoint, but '
        '%s.index is missing; the newest checkpoint there is model.ckpt-10: name an '
        'existing one there, or use a new --job-dir'
        % (job_dir / 'checkpoint', job_dir / 'model.ckpt-20'))


@pytest.mark.parametrize('damage', ['garbage data', 'truncated index'])
def test_damaged_latest_checkpoint_is_one_line(files, job_dir, damage):
    """Garbage in the data file was an IndexError traceback at the restore."""
    if damage == 'garbage data':
        (job_dir / 'model.ckpt-20.data-00000-of-00001').write_bytes(os.urandom(100))
        reason = r'at \S+ \(Read less bytes than requested\)'
    else:
        with open(job_dir / 'model.ckpt-20.index', 'r+b') as f:
            f.truncate(50)
        reason = r'\(.*sstable.*\)'
    line = refused(files, job_dir, '--train-steps', '30')
    assert re.fullmatch(
        r'error: --job-dir %s: its latest checkpoint, model.ckpt-20, does not read %s: a '
        r'file of it is damaged or truncated; restore it, or move its files and its lines '
        r'in the checkpoint file away to resume from an earlier one'
        % (re.escape(str(job_dir)), reason), line), line


def test_latest_checkpoint_with_nan_is_refused(files, job_dir):
    """A NaN checkpoint an earlier version saved when a run diverged."""
    poison(job_dir / 'model.ckpt-20', 'dnn/hiddenlayer_0/kernel')
    assert refused(files, job_dir, '--train-steps', '30') == (
        'error: --job-dir %s: its latest checkpoint, model.ckpt-20, holds NaN or infinite '
        'values (dnn/hiddenlayer_0/kernel): it was saved by a run that diverged; move its '
        'files and its lines in the checkpoint file away to resume from an earlier one, or '
        'use a new --job-dir' % job_dir)


@pytest.mark.parametrize('text', ['[' * 100000 + ']' * 100000, '[1, 2]'],
                         ids=['deep nesting', 'not an object'])
def test_model_params_that_are_not_an_object_are_one_line(files, job_dir, text):
    (job_dir / 'model_params.json').write_text(text)
    assert refused(files, job_dir, '--train-steps', '30') == (
        'error: %s is not a JSON object of flag values; restore it or use a new --job-dir'
        % (job_dir / 'model_params.json'))


def test_cifar10_on_a_taxi_job_dir_is_refused_before_writing(trained, tmp_path,
                                                             cifar10_data_dir):
    """It wrote an event file into the taxi job-dir, then failed on the restore."""
    job_dir = tmp_path / 'job'
    shutil.copytree(trained, job_dir)
    line = refused([], job_dir, '--data-dir', cifar10_data_dir, '--num-layers', '8',
                   '--train-batch-size', '20', '--eval-batch-size', '50',
                   '--train-steps', '5', module=CIFAR)
    assert line == ('error: --job-dir %s holds the checkpoints of another trainer: its '
                    'model_params.json records --hidden-units=32,16, this trainer '
                    '--num-layers=8; use a new --job-dir' % job_dir)


def test_rerun_of_a_sound_job_dir_resumes(files, job_dir):
    proc = run_module(TASK, *files, '--job-dir', job_dir, '--train-steps', '30', check=0)
    assert 'Resuming from global step 20 ' in proc.stderr
    assert json.loads((job_dir / 'model_params.json').read_text()) == {
        'hidden-units': [32, 16]}


# --- gs:// job-dirs that cannot be reached -------------------------------------------

@pytest.mark.parametrize('case', ['no bucket', 'proxy refuses', 'no answer'])
def test_unreachable_gs_job_dir_is_one_line_in_bounded_time(files, gcs, case):
    """A bucket that does not exist made TensorFlow's makedirs loop for good; a
    Cloud Storage that cannot be reached was a traceback after minutes of retries.
    Each bucket a run names is asked once, within --storage-timeout-secs."""
    env = gcs.env()
    job_dir = 'gs://no-such-bucket/job' if case == 'no bucket' else (
        gcs.create_bucket('reachable') + '/job')
    with socket.socket() as dead:
        dead.bind(('127.0.0.1', 0))
        if case == 'no answer':
            dead.listen(5)  # accepts connections, never answers
        if case != 'no bucket':
            env['https_proxy'] = 'http://127.0.0.1:%d' % dead.getsockname()[1]
        proc = run_module(TASK, *files, '--job-dir', job_dir, '--train-steps', '2',
                          '--storage-timeout-secs', '5', env=env, timeout=240)
    assert 'Traceback' not in proc.stderr, proc.stderr[-5000:]
    line = proc.stderr.strip().splitlines()[-1]
    if case == 'no bucket':
        assert proc.returncode == 2
        assert line == ('error: --job-dir gs://no-such-bucket/job: there is no bucket '
                        'gs://no-such-bucket; create it or correct the name')
    elif case == 'proxy refuses':
        assert proc.returncode == errors.EXIT_RETRYABLE
        assert re.fullmatch(r'error: --job-dir %s: cannot reach Cloud Storage \(All 1 retry '
                            r'attempts failed\. .*Couldn\'t connect to server\)'
                            % re.escape(job_dir), line), line
    else:
        assert proc.returncode == errors.EXIT_RETRYABLE
        assert line == ('error: --job-dir %s: Cloud Storage did not answer within 5s '
                        '(offline, or a proxy or firewall in the way?); '
                        '--storage-timeout-secs sets how long to wait' % job_dir)


@pytest.mark.parametrize('job_dir', ['gs://', 'gs:///jobs/x', 'gs://My_Bucket/x'])
def test_a_gs_path_without_a_bucket_is_the_cloud_tools_line(files, job_dir):
    """`--job-dir gs://` was `cannot reach Cloud Storage (...no bucket name)`, exit 1,
    after asking Cloud Storage; train-cloud.sh said `no bucket name after gs://`, exit
    2. Both now say the same line, exit 2, before any request."""
    from test_cloud_configs import _submit_dry_run  # pylint: disable=import-outside-toplevel
    trainer = run_module(TASK, *files, '--job-dir', job_dir, '--train-steps', '2',
                         '--storage-timeout-secs', '5', env={'https_proxy': 'http://127.0.0.1:9'},
                         timeout=240)
    cloud = _submit_dry_run('--job-dir', job_dir)
    for proc in (trainer, cloud):
        assert proc.returncode == 2 and 'Traceback' not in proc.stderr, proc.stderr[-3000:]
    assert trainer.stderr.strip().splitlines()[-1] == cloud.stderr.strip().splitlines()[-1]
    assert cloud.stderr.strip().startswith('error: --job-dir %s: ' % job_dir)


# --- symlinks another user planted ----------------------------------------------------

needs_root = pytest.mark.skipif(os.geteuid() != 0,
                                reason='needs root to give a symlink to another user')


def _planted(tmp_path, trained, name):
    """Someone else's symlink `name` to a job-dir of ours (trained): what a run on it
    would resume from and overwrite."""
    victim = tmp_path / 'victim'
    shutil.copytree(trained, victim)
    link = tmp_path / name
    os.symlink(victim, link)
    os.lchown(link, 65534, 65534)
    return link, victim


@needs_root
def test_job_dir_that_is_another_users_symlink_is_refused(files, trained, tmp_path):
    """It was followed: the run resumed from, and wrote into, the directory it led to."""
    link, victim = _planted(tmp_path, trained, 'taxi')
    before = tree_bytes(victim)
    proc = run_module(TASK, *files, '--job-dir', link, '--train-steps', '30', check=2)
    assert proc.stderr.strip().splitlines()[-1] == (
        'error: --job-dir %s is a symlink owned by user nobody (uid 65534), not by you '
        '(uid 0); refusing to follow it: another user chose where it leads. Use a '
        'directory of your own' % link)
    assert tree_bytes(victim) == before


@needs_root
def test_launcher_refuses_a_logs_dir_that_is_another_users_symlink(tmp_path):
    """<job-dir>/logs planted as a symlink (in a job-dir others can write to)."""
    job_dir = tmp_path / 'job'
    job_dir.mkdir()
    victim = tmp_path / 'victim'
    victim.mkdir()
    os.symlink(victim, job_dir / 'logs')
    os.lchown(job_dir / 'logs', 65534, 65534)
    proc = run_module('estimator_trainers.tools.launcher', '--job-dir', job_dir,
                      '--parameter-server-count', '0', '--worker-count', '0', '--', 'true',
                      check=2)
    assert proc.stderr.strip().splitlines()[-1] == (
        'error: --log-dir %s is a symlink owned by user nobody (uid 65534), not by you '
        '(uid 0); refusing to follow it: another user chose where it leads. Use a '
        'directory of your own' % (job_dir / 'logs'))
    assert os.listdir(victim) == []


# --- a disk that fills at the end of a run ------------------------------------------

def _fill(mount, leave):
    """Fills the file system at `mount` but for `leave` bytes; returns the ballast file."""
    ballast = os.path.join(mount, 'ballast')
    with open(ballast, 'wb', buffering=0) as f:
        try:
            while True:
                f.write(b'\0' * 4096)
        except OSError:
            pass
    os.truncate(ballast, os.path.getsize(ballast) - leave)
    return ballast


def test_full_disk_at_the_final_evaluation_is_only_the_line(files, trained, tmp_path):
    """The evaluation's event writer thread met the full disk first and printed its
    traceback (and an ERROR line) before the one line; a rerun with space finishes."""
    mount = tmp_path / 'fs'
    mount.mkdir()
    if subprocess.run(['mount', '-t', 'tmpfs', '-o', 'size=40m', 'tmpfs', str(mount)],
                      capture_output=True, check=False).returncode:
        pytest.skip('cannot mount a tmpfs here (needs root)')
    try:
        job_dir = mount / 'job'
        shutil.copytree(trained, job_dir)
        shutil.rmtree(job_dir / 'eval')
        shutil.rmtree(job_dir / 'export')
        ballast = _fill(str(mount), 8 * 1024)
        # Trained to 20 already: this run evaluates and exports only.
        proc = run_module(TASK, *files, '--job-dir', job_dir, '--train-steps', '20')
        assert proc.returncode == 1, proc.stderr[-5000:]
        assert 'Traceback' not in proc.stderr and 'Exception in thread' not in proc.stderr
        assert 'writer thread error' not in proc.stderr, proc.stderr[-3000:]
        lines = proc.stderr.strip().splitlines()
        assert [l for l in lines if l.startswith('error:')] == [
            'error: the file system of --job-dir %s is full (No space left on device); the '
            'last good checkpoint is %s/model.ckpt-20; free space and rerun the same command '
            'to resume' % (job_dir, job_dir)] == lines[-1:], proc.stderr[-3000:]

        os.remove(ballast)
        rerun = run_module(TASK, *files, '--job-dir', job_dir, '--train-steps', '20',
                           check=0)
        assert 'Final evaluation at global step 20' in rerun.stderr
        assert len(os.listdir(job_dir / 'export')) == 1
    finally:
        subprocess.run(['umount', '-l', str(mount)], check=False)


def test_state_file_naming_checkpoints_outside_the_job_dir_is_refused(files, trained,
                                                                      tmp_path):
    """A job-dir copied with a state file of absolute names (older TensorFlow wrote
    them) resumed from the original's checkpoints, then deleted them as it rotated
    its own (--keep-checkpoint-max)."""
    original = tmp_path / 'original'
    shutil.copytree(trained, original)
    (original / 'checkpoint').write_text(''.join(
        '%s: "%s"\n' % (key, original / ('model.ckpt-%d' % step)) for key, step in (
            ('model_checkpoint_path', 20), ('all_model_checkpoint_paths', 0),
            ('all_model_checkpoint_paths', 10), ('all_model_checkpoint_paths', 20))))
    copy = tmp_path / 'copy'
    shutil.copytree(original, copy)
    before = tree_bytes(original)
    assert refused(files, copy, '--train-steps', '70', '--keep-checkpoint-max', '2') == (
        'error: --job-dir file %s names checkpoints outside the job-dir (%s; a job-dir '
        'copied from elsewhere?): a run would resume from them and delete them when it '
        'keeps only the newest; name them relative to the job-dir (a line '
        'model_checkpoint_path: "model.ckpt-20") or use a new --job-dir'
        % (copy / 'checkpoint', original / 'model.ckpt-20'))
    assert tree_bytes(original) == before
    # Absolute names of the job-dir's own files (in place) are fine.
    proc = run_module(TASK, *files, '--job-dir', original, '--train-steps', '30', check=0)
    assert 'Resuming from global step 20 ' in proc.stderr


# --- named pipes planted where files are read ---------------------------------------

@pytest.mark.parametrize('name', ['model_params.json', 'feature_stats.json', 'checkpoint'])
def test_named_pipe_in_the_job_dir_is_refused_not_waited_on(files, job_dir, name):
    """Opening a named pipe waits for a writer: a run blocked for good on one planted
    where a job-dir file belongs."""
    os.remove(job_dir / name)
    os.mkfifo(job_dir / name)
    proc = run_module(TASK, *files, '--job-dir', job_dir, '--train-steps', '30', check=2,
                      timeout=120)
    assert proc.stderr.strip().splitlines()[-1].startswith(
        'error: --job-dir file %s is a pipe, not a regular file' % (job_dir / name))


@pytest.mark.parametrize('name', ['train.tfrecords', 'metadata.json'])
def test_named_pipe_in_a_cifar_data_dir_is_refused_not_waited_on(cifar10_data_dir, tmp_path,
                                                                name):
    data_dir = tmp_path / 'data'
    shutil.copytree(cifar10_data_dir, data_dir)
    os.remove(data_dir / name)
    os.mkfifo(data_dir / name)
    proc = run_module(CIFAR, '--data-dir', data_dir, '--job-dir', tmp_path / 'job',
                      '--num-layers', '8', '--train-batch-size', '20', '--eval-batch-size',
                      '50', '--train-steps', '2', check=2, timeout=120)
    assert proc.stderr.strip().splitlines()[-1] == (
        'error: %s%s is a pipe, not %s' % (
            '--data-dir file ' if name == 'metadata.json' else '', data_dir / name,
            'a regular file' if name == 'metadata.json' else 'a TFRecord file'))
    assert not (tmp_path / 'job').exists()


def test_named_pipe_as_mnist_npz_is_refused_not_waited_on(tmp_path):
    os.mkfifo(tmp_path / 'mnist.npz')
    proc = run_module('keras_estimator.trainer', '--data-dir', tmp_path, '--job-dir',
                      tmp_path / 'job', '--train-steps', '2', check=2, timeout=120)
    assert proc.stderr.strip().splitlines()[-1] == (
        'error: %s is a pipe, not an .npz file' % (tmp_path / 'mnist.npz'))
