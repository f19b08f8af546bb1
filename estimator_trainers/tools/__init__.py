"""Tools around the training runtime; no training task imports them.

- `launcher`: a local multi-process cluster, one OS process per task
  (`python -m estimator_trainers.tools.launcher`, behind
  `train-local.sh --distributed`), in a private network namespace
  (`private_network`) where the kernel allows one.
- `cloud`: job submission to Vertex AI from AI Platform-style configs
  (`python -m estimator_trainers.tools.cloud`, behind `train-cloud.sh`).
"""
