"""The runtime every training task imports.

Both trainers (`cifar10_estimator`, `taxi_estimator`) compose these pieces:

- `flags`: common command-line flag groups and value validators.
- `cluster`: `TF_CONFIG` (and Vertex `CLUSTER_SPEC`) parsed into cluster facts.
- `distribution`: `--distribution-strategy` resolved against the cluster and
  devices; bounded waits for the peers a task needs, at start-up and later.
- `sync_replicas`: SyncReplicasOptimizer's session hook, without its stalls.
- `run_config`: `tf.estimator.RunConfig` and session settings from flags.
- `hooks`: progress logging and step-aligned checkpointing.
- `training`: the `train_and_evaluate` driver (resume, final eval, export).
- `export`: chief-only SavedModel export.
- `job_dir`: job-dir bookkeeping (ownership, checkpoint step, model
  compatibility).
- `safe_io`: writing where other local users may have been first (unique
  O_EXCL temp files, staged data sets, owner checks).
- `lease`: one job per job-dir (a lease object with owner and heartbeat).
- `faults`: machine faults as one line: unusable job-dir, leftovers of
  interrupted saves, full disk, memory estimate, SIGTERM.
- `devices`: the local devices a trainer replicates over.
- `hypertune`: reports the tuning metric in hyperparameter tuning trials.
- `gcs`: checks on gs:// paths (the TensorFlow GCS plugin warning).
- `errors`, `logs`: user-facing errors printed as one line; log setup.
- `tools`: what runs around training tasks and is never imported by one:
  the local cluster launcher and the cloud client.
"""
