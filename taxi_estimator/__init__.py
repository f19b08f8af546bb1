"""Chicago Taxi tip classifier: a wide-and-deep `tf.estimator` trainer.

Modules: `schema` (CSV layout), `data` (data step), `input` (validation,
input and serving functions), `features` (feature columns), `model`
(the estimator), `task` (training CLI), `predict` (prediction CLI).
"""
