"""Chicago Taxi tip classifier: a wide-and-deep `tf.estimator` trainer.

Modules: `trainer` (the declaration: flags, data step), `task` (its command
line under the sample's name), `runtime` (one training task: input scan,
estimator, input and serving functions), `schema` (CSV layout), `data` (data
step), `input` (validation, input and serving functions), `features`
(feature columns), `model` (the estimator), `predict` (prediction CLI).
"""
