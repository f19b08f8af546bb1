"""`--mixed-precision`: low-precision compute, float32 variables, float32 exports.

Each case trains a few steps of ResNet-8 through the real CLI in a subprocess,
then reads the checkpoint and the graphs it saved.
"""
import glob
import os

import pytest
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2

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


def test_auto_picks_bfloat16_only_on_cpus_with_amx(tmp_path):
    amx = tmp_path / 'amx'
    amx.write_text('processor\t: 0\nflags\t\t: fpu avx512f avx512_bf16 amx_bf16 '
                   'amx_tile\n')
    plain = tmp_path / 'plain'
    plain.write_text('processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16\n')
    assert devices.cpu_has_amx_bf16(str(amx))
    assert not devices.cpu_has_amx_bf16(str(plain))
    assert not devices.cpu_has_amx_bf16(str(tmp_path / 'missing'))

    has_amx = devices.cpu_has_amx_bf16()
    assert devices.resolve_mixed_precision('auto', 0) == (
        'bfloat16' if has_amx else 'none')
    assert devices.resolve_mixed_precision('auto', 1) == 'none'
    for explicit in ('none', 'bfloat16', 'float16'):
        assert devices.resolve_mixed_precision(explicit, 0) == explicit


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
