"""Reports the tuning metric to Vertex AI / AI Platform hyperparameter tuning.

The tuning service tells the trial which metric it optimises through the
trainer's own `--hypertune-metric` flag (set by the job submission from the
config's `hyperparameterMetricTag`); outside a tuning trial nothing is written.
"""
import os
from typing import Mapping, Optional, SupportsFloat

import hypertune
import tensorflow as tf

from estimator_trainers.flags import metric_key
from estimator_trainers.errors import TaskFailure


def in_tuning_trial(environ: Optional[Mapping[str, str]] = None) -> bool:
    """True when this process runs as a hyperparameter tuning trial."""
    environ = os.environ if environ is None else environ
    return bool(environ.get('CLOUD_ML_TRIAL_ID'))


def report_metric(metric_tag: Optional[str], metrics: Mapping[str, SupportsFloat],
                  global_step: int) -> Optional[float]:
    """Reports `metrics[metric_tag]` at `global_step` through cloudml-hypertune.

    Args:
      metric_tag: name of the evaluation metric the study optimises
        (e.g. `accuracy`, `auc`); also accepts the `eval/accuracy` spelling.
      metrics: dict returned by `Estimator.evaluate`.
      global_step: training step of the evaluated checkpoint.

    Returns:
      The reported value, or None when `metric_tag` is unset.
    """
    if not metric_tag:
        return None
    key = metric_key(metric_tag)
    if key not in metrics:  # the flag's parser and `evaluation.Evaluator` check first
        raise TaskFailure('--hypertune-metric %r is not an evaluation metric (have %s)'
                          % (metric_tag, ', '.join(sorted(metrics))),
                          flag='--hypertune-metric')
    value = float(metrics[key])
    hypertune.HyperTune().report_hyperparameter_tuning_metric(
        hyperparameter_metric_tag=metric_tag, metric_value=value,
        global_step=int(global_step))
    tf.compat.v1.logging.info('Reported tuning metric %s = %.6g at step %d',
                              metric_tag, value, global_step)
    return value
