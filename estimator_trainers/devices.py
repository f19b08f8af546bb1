"""The local devices a trainer replicates over, and what their hardware offers."""
import tensorflow as tf



def gpu_count():
    """GPUs this machine has (the default of `--num-gpus`)."""
    return len(tf.config.list_physical_devices('GPU'))


def cpu_devices():
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


def cpu_has_amx_bf16(cpuinfo_path='/proc/cpuinfo'):
    """True when the CPU has AMX bfloat16 tiles (Intel Sapphire Rapids and later).

    There oneDNN runs bfloat16 convolutions and matmuls several times faster
    than float32. False where /proc/cpuinfo is unreadable (not Linux).
    """
    try:
        with open(cpuinfo_path) as f:
            for line in f:
                if line.startswith('flags'):
                    return 'amx_bf16' in line.split(':', 1)[1].split()
    except OSError:
        pass
    return False


def resolve_mixed_precision(setting, num_gpus):
    """The compute type for a `--mixed-precision` value; `auto` picks by hardware."""
    if setting != 'auto':
        return setting
    return 'bfloat16' if not num_gpus and cpu_has_amx_bf16() else 'none'


def float16_without_gpu_warning(setting, num_gpus):
    """The one warning line for `--mixed-precision float16` training on CPUs, else None.

    CPUs have no fast float16 arithmetic: a CIFAR-10 ResNet trained at about
    5 examples/sec against 900 in float32 on the development machine. bfloat16
    is the CPU's low precision.
    """
    if setting != 'float16' or num_gpus:
        return None
    return ('--mixed-precision float16 on CPUs only (no GPU): CPUs compute float16 '
            'slowly (measured about 180x slower than float32 for the CIFAR-10 ResNet); '
            'use --mixed-precision bfloat16 (fast on CPUs with AMX-BF16) or none')
