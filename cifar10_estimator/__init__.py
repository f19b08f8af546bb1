"""ResNet on CIFAR-10 as a TensorFlow Estimator.

Modules: `trainer` (the declaration: flags, data step), `cifar10_main` (its
command line under the tutorial's name), `runtime` (one training task: input
checks, estimator, input functions, serving signature), `layout` (the data
directory's files), `generate_cifar10_tfrecords` (data step), `data`
(TFRecord input pipeline and metadata), `resnet` (the network), `model`
(model_fn: towers, loss, optimizer, metrics).
"""
