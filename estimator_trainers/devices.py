"""The local devices a trainer replicates over."""
import tensorflow as tf

from estimator_trainers.errors import UserInputError


def local_devices(num_gpus):
    """Device names for `num_gpus` GPUs, or the logical CPU devices when 0.

    One CPU device is the norm. A process that configured several logical CPU
    devices (`tf.config.set_logical_device_configuration`) gets one entry per
    device, which exercises the multi-device path on a CPU-only machine.

    Raises:
      UserInputError: more GPUs were asked for than this machine has.
    """
    if num_gpus:
        available = len(tf.config.list_physical_devices('GPU'))
        if num_gpus > available:
            raise UserInputError('--num-gpus=%d but this machine has %d GPU(s)'
                                 % (num_gpus, available))
        return tuple('/gpu:%d' % i for i in range(num_gpus))
    cpus = len(tf.config.list_logical_devices('CPU'))
    return tuple('/cpu:%d' % i for i in range(max(1, cpus)))
