"""End-to-end CIFAR-10 trainer runs through the real CLI, on generated data."""
import glob
import os
import re
import shutil
import sys

import numpy as np
import pytest
import tensorflow as tf

import processes
from cifar10_estimator import data
from cifar10_estimator import model
from cifar10_estimator import runtime
from cluster_helpers import listed_checkpoints
from conftest import cli_env, reported_metrics, run_module, REPO_ROOT
from estimator_trainers import registry
from estimator_trainers.errors import UserInputError

MAIN = 'cifar10_estimator.cifar10_main'
# A small, quickly learnable configuration: ResNet-8, fast-moving BN statistics.
SMALL = ['--num-layers', '8', '--train-batch-size', '32', '--eval-batch-size', '50',
         '--batch-norm-decay', '0.9', '--log-step-count-steps', '10',
         '--random-seed', '7']


def _train(data_dir, job_dir, *flags, check=0):
    return run_module(MAIN, '--data-dir', data_dir, '--job-dir', job_dir, *SMALL,
                      *flags, check=check)


def _final_metrics(stderr):
    match = re.search(r'Final evaluation at global step (\d+): accuracy = ([\d.]+), '
                      r'loss = ([\d.]+)', stderr)
    assert match, stderr[-3000:]
    return int(match.group(1)), float(match.group(2))


def _scalars(directory):
    tags = {}
    for path in glob.glob(os.path.join(str(directory), 'events.out.tfevents.*')):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                tags.setdefault(value.tag, []).append((event.step, value.simple_value))
    return tags


@pytest.fixture(scope='module')
def trained(cifar10_data_dir, tmp_path_factory):
    """One 150-step run, checkpointing every 50 steps; returns (job_dir, stderr)."""
    job_dir = tmp_path_factory.mktemp('cifar_job')
    proc = _train(cifar10_data_dir, job_dir, '--train-steps', '150',
                  '--checkpoint-num-steps', '50', '--keep-checkpoint-max', '10')
    return job_dir, proc.stderr


def test_training_learns_far_above_chance(trained):
    job_dir, stderr = trained
    step, accuracy = _final_metrics(stderr)
    assert step == 150
    assert reported_metrics(stderr) == sorted(registry.get('cifar10').eval_metrics)
    assert accuracy > 0.5, 'chance is 0.1'
    progress = re.findall(r'step (\d+)/150, [\d.]+ steps/s, ETA \w+: accuracy = [\d.]+, '
                          r'learning_rate/momentum = 0.1, loss = [\d.]+ '
                          r'\(([\d.]+) examples/sec, average ([\d.]+)\)', stderr)
    assert [int(s) for s, _, _ in progress] == list(range(10, 151, 10))
    assert all(float(rate) > 0 for _, rate, _ in progress)


def test_checkpoints_at_multiples_of_checkpoint_num_steps(trained):
    job_dir, _ = trained
    assert listed_checkpoints(job_dir) == [0, 50, 100, 150]


def test_tensorboard_scalars(trained):
    job_dir, _ = trained
    train = _scalars(job_dir)
    for tag in ('loss', 'learning_rate/momentum', 'accuracy', 'examples_per_sec',
                'global_step/sec'):
        assert tag in train, sorted(train)
    assert max(step for step, _ in train['loss']) >= 100
    evaluation = _scalars(job_dir / 'eval')
    assert {'accuracy', 'loss'} <= set(evaluation)
    assert max(step for step, _ in evaluation['accuracy']) == 150


def test_export_serves_raw_images(trained, cifar10_data_dir):
    job_dir, _ = trained
    exports = os.listdir(job_dir / 'export')
    assert len(exports) == 1 and exports[0].isdigit()
    export_dir = str(job_dir / 'export' / exports[0])
    shown = processes.run(
        [os.path.join(os.path.dirname(sys.executable), 'saved_model_cli'), 'show',
         '--dir', export_dir, '--tag_set', 'serve', '--signature_def',
         'serving_default'], 120, env=cli_env())
    assert shown.returncode == 0, shown.stderr[-3000:]
    assert "inputs['images']" in shown.stdout and 'DT_UINT8' in shown.stdout
    assert "outputs['classes']" in shown.stdout
    assert "outputs['probabilities']" in shown.stdout

    features, labels = next(iter(data.make_dataset(cifar10_data_dir, 'eval', 100)))
    images = tf.cast(features['images'], tf.uint8)
    serve = tf.saved_model.load(export_dir).signatures['serving_default']
    out = serve(images=images)
    assert out['probabilities'].shape == (100, 10)
    np.testing.assert_allclose(out['probabilities'].numpy().sum(axis=1), 1, rtol=1e-4)
    accuracy = np.mean(out['classes'].numpy() == labels.numpy())
    assert accuracy > 0.5


def test_multi_device_towers_on_logical_cpus(cifar10_data_dir, tmp_path):
    """--num-gpus path exercised with two logical CPU devices, one tower each."""
    job_dir = tmp_path / 'job'
    script = (
        'import tensorflow as tf\n'
        'cpu = tf.config.list_physical_devices("CPU")[0]\n'
        'tf.config.set_logical_device_configuration(\n'
        '    cpu, [tf.config.LogicalDeviceConfiguration()] * 2)\n'
        'from cifar10_estimator.trainer import TRAINER\n'
        'from estimator_trainers import cli\n'
        'cli.run(TRAINER)\n')
    proc = processes.run(
        [sys.executable, '-c', script, '--data-dir', cifar10_data_dir, '--job-dir',
         str(job_dir), *SMALL, '--train-steps', '60', '--checkpoint-num-steps', '30'],
        600, cwd=REPO_ROOT, env=cli_env())
    assert proc.returncode == 0, proc.stderr[-4000:]
    graph = (job_dir / 'graph.pbtxt').read_text()
    assert 'tower_1/resnet/' in graph and 'device: "/cpu:1"' in graph
    names = [n for n, _ in tf.train.list_variables(tf.train.latest_checkpoint(str(job_dir)))]
    assert 'resnet/initial_conv/kernel' in names
    assert not [n for n in names if n.startswith('resnet_1')], 'towers share variables'
    assert _final_metrics(proc.stderr)[0] == 60


def test_batch_sizes_must_split_over_devices(cifar10_data_dir):
    hparams = model.HParams(num_layers=8, devices=('/cpu:0', '/cpu:1'),
                            train_batch_size=33)
    with pytest.raises(UserInputError, match=r'--train-batch-size=33 must be divisible '
                                             r'by the 2 devices'):
        runtime.check_inputs(cifar10_data_dir, hparams, eval_batch_size=50)
    hparams = model.HParams(num_layers=8, devices=('/cpu:0', '/cpu:1'),
                            train_batch_size=32)
    with pytest.raises(UserInputError, match='--eval-batch-size=25'):
        runtime.check_inputs(cifar10_data_dir, hparams, eval_batch_size=25)
    assert runtime.check_inputs(cifar10_data_dir, hparams, 50)['train'] == 400


def _error_line(proc):
    lines = proc.stderr.strip().splitlines()
    assert lines, 'no error output'
    assert lines[-1].startswith('error: '), proc.stderr[-3000:]
    return lines[-1]


def _copy_data(src, dst):
    shutil.copytree(src, dst)
    return str(dst)


@pytest.mark.parametrize('case, expected', [
    ('missing data dir', r'--data-dir \S+ does not exist'),
    ('empty data dir', r'--data-dir \S+ has no metadata.json'),
    ('truncated', r'train.tfrecords is \d+ bytes, expected \d+ .* truncated'),
    ('wrong features', r'train.tfrecords: records must have features "image"'),
    ('num layers', r'argument --num-layers: expected 6n\+2'),
    ('eval batch', r'--eval-batch-size=30 must divide the 100 eval examples'),
    ('too many gpus', r'--num-gpus=2 but this machine has 0 GPU'),
])
def test_bad_input_is_one_clear_line(case, expected, cifar10_data_dir, tmp_path):
    data_dir, flags = cifar10_data_dir, []
    if case == 'missing data dir':
        data_dir = str(tmp_path / 'nowhere')
    elif case == 'empty data dir':
        data_dir = str(tmp_path / 'empty')
        os.makedirs(data_dir)
    elif case == 'truncated':
        data_dir = _copy_data(cifar10_data_dir, tmp_path / 'data')
        path = os.path.join(data_dir, 'train.tfrecords')
        os.truncate(path, os.path.getsize(path) - 1000)
    elif case == 'wrong features':
        data_dir = _copy_data(cifar10_data_dir, tmp_path / 'data')
        with tf.io.TFRecordWriter(os.path.join(data_dir, 'train.tfrecords')) as w:
            for _ in range(400):
                w.write(tf.train.Example(features=tf.train.Features(feature={
                    'pixels': tf.train.Feature(bytes_list=tf.train.BytesList(
                        value=[b'x' * 3072]))})).SerializeToString())
    elif case == 'num layers':
        flags = ['--num-layers', '45']
    elif case == 'eval batch':
        flags = ['--eval-batch-size', '30']
    elif case == 'too many gpus':
        flags = ['--num-gpus', '2']
    proc = run_module(MAIN, '--data-dir', data_dir, '--job-dir', tmp_path / 'job',
                      *SMALL, '--train-steps', '5', *flags, check=2)
    assert re.search(expected, _error_line(proc)), _error_line(proc)
    assert not (tmp_path / 'job' / 'checkpoint').exists()


def test_checkpoint_from_other_depth_is_refused_and_kept(cifar10_data_dir, tmp_path):
    job_dir = tmp_path / 'job'
    _train(cifar10_data_dir, job_dir, '--train-steps', '20', '--checkpoint-num-steps', '10')
    before = {p: os.path.getmtime(p) for p in glob.glob(str(job_dir / '*'))}
    proc = run_module(MAIN, '--data-dir', cifar10_data_dir, '--job-dir', job_dir,
                      '--num-layers', '14', '--train-steps', '40', check=2)
    line = _error_line(proc)
    assert '--num-layers=14 does not match the checkpoints in --job-dir' in line
    assert '--num-layers=8' in line
    assert {p: os.path.getmtime(p) for p in glob.glob(str(job_dir / '*'))} == before
    path = tf.train.latest_checkpoint(str(job_dir))
    assert int(tf.train.load_variable(path, 'global_step')) == 20


def test_help_lists_flag_groups():
    proc = run_module(MAIN, '--help', check=0)
    for flag in ('--data-dir', '--job-dir', '--num-gpus', '--variable-strategy',
                 '--no-use-distortion-for-training', '--checkpoint-num-steps',
                 '--num-intra-threads', '--eval-steps', '--sync', '--verbosity'):
        assert flag in proc.stdout
    assert '--num-workers' not in proc.stdout


@pytest.mark.parametrize('devices', [('/cpu:0',), ('/cpu:0', '/cpu:1')])
@pytest.mark.parametrize('precision', ['none', 'bfloat16'])
def test_backward_pass_is_not_gated_per_op(devices, precision):
    """No op's input gradient waits for its weight gradient (TF1's GATE_OP): the
    filter gradients run beside the next layer's (#33). That is safe because
    every trainable variable is a resource variable, whose reads are snapshots."""
    graph = tf.Graph()
    with graph.as_default():
        images = tf.compat.v1.placeholder(tf.float32, [8, 32, 32, 3])
        labels = tf.compat.v1.placeholder(tf.int32, [8])
        hparams = model.HParams(num_layers=8, train_batch_size=8, devices=devices,
                                mixed_precision=precision)
        config = tf.estimator.RunConfig(model_dir=None)
        spec = model.model_fn({'images': images}, labels, tf.estimator.ModeKeys.TRAIN,
                              {'hparams': hparams}, config)
        variables = tf.compat.v1.trainable_variables()
    assert spec.train_op is not None and variables
    gradient_ops = [op.name for op in graph.get_operations()
                    if op.name.startswith(('gradients', 'tower_'))]
    assert gradient_ops
    assert not [name for name in gradient_ops if '/tuple/' in name]
    assert all(v.op.type == 'VarHandleOp' for v in variables)
