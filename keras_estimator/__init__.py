"""The courses' Keras models (MNIST CNN, CIFAR-10 MLP) as a third trainer.

Written only against the runner, as the worked example of
docs/adding-a-trainer.md. Modules: `trainer` (the declaration and command
line), `runtime` (one training task: input checks, estimator, input and
serving functions), `networks` (the two Keras models), `model` (the
Estimator `model_fn` that calls them), `data` (the MNIST data step and input
functions; CIFAR-10 comes from `cifar10_estimator.data`).
"""
