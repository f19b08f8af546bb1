"""The runtime every training task imports, and the tools around it.

Two layers, checked by tests/test_layering.py:

- Declarations, without TensorFlow (what `--help`, the registry and the tools
  import): `declaration` (Trainer, Runtime, Plan, Task), `cli` (a trainer's
  command line), `flags`, `errors`, `registry`, `cluster`, `checkpoints` (the
  cadence), `job_dir` (the job-dir's names and rules), `process`, `host`,
  `distribution` (strategy names and peers), `safe_io`, `gcs`, `run_record`,
  `logs` (`logs.import_tensorflow`: the one way these load TensorFlow on
  demand, for gs:// paths), `google_api` (the one Cloud Storage client).
- The runtime, with TensorFlow: `runner` (the order of a run), `training`,
  `evaluation`, `hooks`, `run_config` (with the strategy it gets), `devices`,
  `faults`, `lease`, `resume` (the checkpoints a run resumes from), `export`,
  `summaries`, `run_report`, `hypertune`, `sync_replicas`.

`tools` runs around training tasks and is never imported by one: the local
launcher (`train-local.sh`) and the Vertex AI client (`train-cloud.sh`).
Trainers live in their own packages (`cifar10_estimator`, `taxi_estimator`,
`keras_estimator`), found by `registry`; the runtime never imports them.
"""
