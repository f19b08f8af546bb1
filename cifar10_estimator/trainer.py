"""Wires CIFAR-10 data and model into the shared training driver."""
import dataclasses

import tensorflow as tf

from cifar10_estimator import data
from cifar10_estimator import model
from estimator_trainers import job_dir as job_dir_lib
from estimator_trainers import training
from estimator_trainers.errors import UserInputError


def check_inputs(data_dir, hparams, eval_batch_size, validate_files=True):
    """Validates data and batch sizes against the devices; returns split counts.

    Raises:
      UserInputError: a missing/corrupt data file or an impossible batch split.
    """
    num_devices = len(hparams.devices)
    if hparams.train_batch_size % num_devices:
        raise UserInputError('--train-batch-size=%d must be divisible by the %d devices'
                             ' (%s)' % (hparams.train_batch_size, num_devices,
                                        ', '.join(hparams.devices)))
    if eval_batch_size % num_devices:
        raise UserInputError('--eval-batch-size=%d must be divisible by the %d devices'
                             % (eval_batch_size, num_devices))
    counts = data.read_metadata(data_dir)
    if counts['eval'] % eval_batch_size:
        raise UserInputError('--eval-batch-size=%d must divide the %d eval examples, so '
                             'every example is evaluated exactly once'
                             % (eval_batch_size, counts['eval']))
    if validate_files:
        for subset in ('train', 'eval'):
            data.validate_subset(data_dir, subset, counts[subset])
    return counts


def serving_input_receiver_fn():
    """Serving signature: `images`, uint8 [batch, 32, 32, 3] raw RGB pixels."""
    images = tf.compat.v1.placeholder(
        tf.uint8, [None, data.HEIGHT, data.WIDTH, data.DEPTH], name='images')
    return tf.estimator.export.ServingInputReceiver(
        {'images': tf.cast(images, tf.float32)}, {'images': images})


def train(data_dir, hparams, loop, run_config, cluster, *, eval_batch_size=100,
          use_distortion=True):
    """Trains, evaluates and (on the chief) exports ResNet on CIFAR-10.

    Args:
      data_dir: directory written by `generate_cifar10_tfrecords`.
      hparams: `model.HParams`; `train_examples` is taken from the metadata.
      loop: `training.LoopSettings`.
      run_config: `tf.estimator.RunConfig` for `loop.job_dir`.
      cluster: `cluster.ClusterInfo` of this process.
      eval_batch_size: evaluation batch size (must divide the eval set).
      use_distortion: augment training images.

    Returns:
      Final evaluation metrics on the chief, else None.
    """
    job_dir_lib.check_model_params(loop.job_dir, {'num-layers': hparams.num_layers},
                                   write=cluster.is_chief)
    if cluster.is_ps:
        counts = {'train': hparams.train_examples, 'eval': eval_batch_size}
    else:
        counts = check_inputs(data_dir, hparams, eval_batch_size,
                              validate_files=not cluster.is_evaluator)
    hparams = dataclasses.replace(hparams, train_examples=counts['train'])
    estimator = tf.estimator.Estimator(
        model_fn=model.model_fn, config=run_config, params={'hparams': hparams})
    seed = cluster.input_seed(run_config.tf_random_seed)
    return training.train_and_evaluate(
        estimator, loop, cluster,
        train_input_fn=data.input_fn(data_dir, 'train', hparams.train_batch_size,
                                     training=True, count=counts['train'], seed=seed,
                                     distort=use_distortion),
        eval_input_fn=data.input_fn(data_dir, 'eval', eval_batch_size, training=False),
        serving_input_receiver_fn=serving_input_receiver_fn)

