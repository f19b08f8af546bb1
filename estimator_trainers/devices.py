"""The local devices a trainer replicates over, and what their hardware offers."""
import os
from typing import Final, Literal, Optional

import tensorflow as tf

# The compute type of a mixed-precision model (`none`: float32 throughout).
Precision = Literal['none', 'bfloat16', 'float16']
# `--mixed-precision`: a compute type, or `auto` (this machine's best, `auto_mixed_precision`).
PrecisionSetting = Literal['auto', 'none', 'bfloat16', 'float16']
AUTO: Final = 'auto'


def gpu_count() -> int:
    """GPUs this machine has (the default of `--num-gpus`)."""
    return len(tf.config.list_physical_devices('GPU'))


def cpu_devices() -> tuple[str, ...]:
    """This process's CPU device names: one, or one per logical CPU device.

    A process that configured several logical CPU devices
    (`tf.config.set_logical_device_configuration`) gets one entry per
    device, which exercises the multi-device path on a CPU-only machine.
    Reads the configuration without starting TensorFlow's runtime, which must
    not run before `multi_worker_mirrored` configures its collective ops.
    """
    cpu = tf.config.list_physical_devices('CPU')[0]
    cpus = len(tf.config.get_logical_device_configuration(cpu) or ())
    return tuple('/cpu:%d' % i for i in range(max(1, cpus)))


# CPU flags (/proc/cpuinfo) of native bfloat16 arithmetic that oneDNN uses:
# AMX tiles (Intel Sapphire Rapids and later) and AVX-512 bfloat16 dot products
# (AMD Zen 4 and later, Intel Cooper Lake).
NATIVE_BFLOAT16_FLAGS: Final = ('amx_bf16', 'avx512_bf16')


def native_bfloat16_flags(cpuinfo_path: str = '/proc/cpuinfo') -> tuple[str, ...]:
    """The `NATIVE_BFLOAT16_FLAGS` this CPU has, in that order; () where
    /proc/cpuinfo is unreadable (not Linux)."""
    try:
        with open(cpuinfo_path) as f:
            for line in f:
                if line.startswith('flags'):
                    present = set(line.split(':', 1)[1].split())
                    return tuple(flag for flag in NATIVE_BFLOAT16_FLAGS if flag in present)
    except OSError:
        pass
    return ()


def onednn_enabled() -> bool:
    """True when TensorFlow runs oneDNN's kernels (off with TF_ENABLE_ONEDNN_OPTS=0)."""
    try:
        from tensorflow.python.util import _pywrap_util_port  # pylint: disable=g-import-not-at-top
        return bool(_pywrap_util_port.IsMklEnabled())
    except (ImportError, AttributeError):
        return os.environ.get('TF_ENABLE_ONEDNN_OPTS', '1').lower() not in ('0', 'false')


def auto_mixed_precision(num_gpus: int,
                         cpuinfo_path: str = '/proc/cpuinfo') -> tuple[Precision, str]:
    """(compute type, reason) that `--mixed-precision auto` picks on this machine.

    bfloat16 where the CPU computes it natively and oneDNN runs it: there
    ResNet-44 trains 1.4-1.5x faster than in float32, with AMX (Sapphire
    Rapids) and with AVX512_BF16 alone (AMD Zen 4), per CPU-second
    (benchmarks/RESULTS.md). Elsewhere float32: bfloat16 without those
    instructions, or in Eigen's kernels, is emulated and slower. GPUs: float32,
    since float16 needs loss scaling and is the user's call.
    """
    if num_gpus:
        return 'none', 'training on GPUs; float16 is opt-in (--mixed-precision float16)'
    native = native_bfloat16_flags(cpuinfo_path)
    if not native:
        return 'none', ('this CPU has no native bfloat16 (%s), so bfloat16 would be '
                        'slower than float32' % ' or '.join(NATIVE_BFLOAT16_FLAGS))
    if not onednn_enabled():
        return 'none', ('oneDNN is off (TF_ENABLE_ONEDNN_OPTS=0), and without it bfloat16 '
                        'is slower than float32')
    return 'bfloat16', ('this CPU computes bfloat16 natively (%s) with oneDNN, where it '
                        'was measured 1.4-1.5x faster than float32' % ', '.join(native))


def resolve_mixed_precision(setting: PrecisionSetting, num_gpus: int) -> Precision:
    """The compute type for a `--mixed-precision` value; `auto` picks by hardware."""
    if setting != AUTO:
        return setting
    return auto_mixed_precision(num_gpus)[0]


def describe_mixed_precision(setting: PrecisionSetting, num_gpus: int) -> str:
    """The start-up line's text: the compute type, and for `auto` why."""
    if setting != AUTO:
        return setting
    compute, reason = auto_mixed_precision(num_gpus)
    return '%s (auto: %s)' % (compute, reason)


def float16_without_gpu_warning(setting: PrecisionSetting, num_gpus: int) -> Optional[str]:
    """The one warning line for `--mixed-precision float16` training on CPUs, else None.

    CPUs have no fast float16 arithmetic: a CIFAR-10 ResNet trained at about
    5 examples/sec against 900 in float32 on the development machine. bfloat16
    is the CPU's low precision.
    """
    if setting != 'float16' or num_gpus:
        return None
    return ('--mixed-precision float16 on CPUs only (no GPU): CPUs compute float16 '
            'slowly (measured about 180x slower than float32 for the CIFAR-10 ResNet); '
            'use --mixed-precision bfloat16 (fast on CPUs with AMX-BF16 or AVX512_BF16) or none')
