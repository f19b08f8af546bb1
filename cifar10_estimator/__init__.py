"""ResNet on CIFAR-10 as a TensorFlow Estimator.

Modules: `generate_cifar10_tfrecords` (data step), `data` (TFRecord input
pipeline and dataset metadata), `resnet` (the network), `model` (model_fn:
towers, loss, optimizer, metrics, export signature), `trainer` (wires data,
model and the shared training driver), `cifar10_main` (command line).
"""
