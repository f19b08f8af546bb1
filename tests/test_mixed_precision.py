"""`--mixed-precision`: low-precision compute, float32 variables, float32 exports.

Each case trains a few steps of ResNet-8 through the real CLI in a subprocess,
then reads the checkpoint and the graphs it saved.
"""
import glob
import os
import sys

import pytest
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2

import processes
from conftest import cli_env
from conftest import REPO_ROOT
from conftest import run_module
from estimator_trainers import devices

MAIN = 'cifar10_estimator.cifar10_main'
STEPS = 3


def _conv_types(graph_def):
    """The `T` attribute of every Conv2D node in a GraphDef."""
    return {tf.dtypes.as_dtype(node.attr['T'].type).name
            for node in graph_def.node if node.op == 'Conv2D'}


@pytest.mark.parametrize('compute_type', ['bfloat16', 'float16', 'none'])
def test_trains_with_float32_variables(compute_type, cifar10_data_dir, tmp_path):
    job_dir = str(tmp_path / 'job')
    proc = run_module(MAIN, '--data-dir', cifar10_data_dir, '--job-dir', job_dir,
                      '--num-layers', 8, '--train-batch-size', 16,
                      '--eval-batch-size', 100, '--train-steps', STEPS,
                      '--checkpoint-num-steps', STEPS, '--log-step-count-steps', 1,
                      '--mixed-precision', compute_type, '--random-seed', 1, check=0)
    assert 'Mixed precision: %s' % compute_type in proc.stderr
    assert 'Final evaluation at global step %d' % STEPS in proc.stderr

    checkpoint = tf.train.latest_checkpoint(job_dir)
    assert checkpoint.endswith('-%d' % STEPS)
    reader = tf.train.load_checkpoint(checkpoint)
    dtypes = reader.get_variable_to_dtype_map()
    floating = {name: dtype for name, dtype in dtypes.items() if dtype.is_floating}
    assert any('initial_conv/kernel' in name for name in floating)
    assert set(floating.values()) == {tf.float32}, floating
    if compute_type == 'float16':
        # Dynamic loss scaling keeps its scale in the checkpoint too.
        assert any('loss_scale' in name for name in dtypes), sorted(dtypes)

    # Training computed in the low-precision type...
    meta = tf.compat.v1.MetaGraphDef()
    with open(checkpoint + '.meta', 'rb') as f:
        meta.ParseFromString(f.read())
    expected = 'float32' if compute_type == 'none' else compute_type
    assert _conv_types(meta.graph_def) == {expected}
    # ...and the export computes in float32, so it serves on any hardware.
    export_dir, = glob.glob(os.path.join(job_dir, 'export', '[0-9]*'))
    saved_model = saved_model_pb2.SavedModel()
    with open(os.path.join(export_dir, 'saved_model.pb'), 'rb') as f:
        saved_model.ParseFromString(f.read())
    assert _conv_types(saved_model.meta_graphs[0].graph_def) == {'float32'}


def _cpuinfo(tmp_path, name, flags):
    path = tmp_path / name
    path.write_text('processor\t: 0\nflags\t\t: fpu %s\n' % flags)
    return str(path)


def test_auto_picks_bfloat16_where_the_cpu_computes_it_natively(tmp_path, monkeypatch):
    amx = _cpuinfo(tmp_path, 'amx', 'avx512f avx512_bf16 amx_bf16 amx_tile')
    zen4 = _cpuinfo(tmp_path, 'zen4', 'avx2 avx512f avx512_bf16')
    plain = _cpuinfo(tmp_path, 'plain', 'avx2 avx512f')
    assert devices.native_bfloat16_flags(amx) == ('amx_bf16', 'avx512_bf16')
    assert devices.native_bfloat16_flags(zen4) == ('avx512_bf16',)
    assert devices.native_bfloat16_flags(plain) == ()
    assert devices.native_bfloat16_flags(str(tmp_path / 'missing')) == ()

    for cpuinfo in (amx, zen4):
        compute, reason = devices.auto_mixed_precision(0, cpuinfo)
        assert compute == 'bfloat16' and 'natively' in reason
    compute, reason = devices.auto_mixed_precision(0, plain)
    assert compute == 'none' and 'no native bfloat16' in reason
    compute, reason = devices.auto_mixed_precision(1, amx)
    assert compute == 'none' and 'GPU' in reason
    # Without oneDNN, TensorFlow's Eigen kernels emulate bfloat16: float32 is faster.
    monkeypatch.setattr(devices, 'onednn_enabled', lambda: False)
    compute, reason = devices.auto_mixed_precision(0, amx)
    assert compute == 'none' and 'TF_ENABLE_ONEDNN_OPTS=0' in reason


def test_auto_on_this_machine_and_explicit_settings():
    native = devices.native_bfloat16_flags() and devices.onednn_enabled()
    assert devices.resolve_mixed_precision('auto', 0) == ('bfloat16' if native else 'none')
    assert devices.resolve_mixed_precision('auto', 1) == 'none'
    assert devices.describe_mixed_precision('auto', 0).startswith(
        devices.resolve_mixed_precision('auto', 0) + ' (auto: ')
    for explicit in ('none', 'bfloat16', 'float16'):
        assert devices.resolve_mixed_precision(explicit, 0) == explicit
        assert devices.describe_mixed_precision(explicit, 0) == explicit


def test_onednn_off_is_seen_by_a_fresh_process():
    code = ('from estimator_trainers import devices; '
            'print(devices.onednn_enabled(), devices.auto_mixed_precision(0)[0])')
    for value, expected in (('0', 'False none'), ('1', 'True ')):
        proc = processes.run([sys.executable, '-c', code], 120, cwd=REPO_ROOT,
                             env=cli_env({'TF_ENABLE_ONEDNN_OPTS': value}))
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert proc.stdout.strip().startswith(expected), proc.stdout


def test_flag_rejects_unknown_types(tmp_path):
    proc = run_module(MAIN, '--data-dir', str(tmp_path), '--job-dir', str(tmp_path),
                      '--mixed-precision', 'int8', check=2)
    assert "invalid choice: 'int8'" in proc.stderr


@pytest.mark.parametrize('setting, num_gpus, warned', [
    ('float16', 0, True),    # CPUs only: about 180x slower than float32
    ('float16', 1, False),   # what float16 is for
    ('bfloat16', 0, False),
    ('none', 0, False),
])
def test_float16_without_a_gpu_is_warned_in_one_line_naming_bfloat16(setting, num_gpus,
                                                                      warned):
    warning = devices.float16_without_gpu_warning(setting, num_gpus)
    assert bool(warning) == warned
    if warned:
        assert '\n' not in warning and '--mixed-precision bfloat16' in warning


def test_start_up_line_says_what_auto_chose_and_why(tmp_path):
    # The line comes before the data check, so an empty --data-dir is enough.
    proc = run_module(MAIN, '--data-dir', str(tmp_path), '--job-dir', str(tmp_path / 'job'),
                      check=2)
    compute, reason = devices.auto_mixed_precision(0)
    assert 'Mixed precision: %s (auto: %s)' % (compute, reason) in proc.stderr
