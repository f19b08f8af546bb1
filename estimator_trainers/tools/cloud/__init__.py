"""Cloud training: submit the trainers to Vertex AI from AI Platform configs.

- `configs`: load and validate `trainingInput` YAML; legacy machine names and
  scale tiers -> Vertex AI machine types and GPUs.
- `machines`: the machine types Vertex AI training offers.
- `submission`: trainer modules, their flags and job naming.
- `preflight`: checks before anything is uploaded (trainer flags, pools,
  data in the bucket, bucket access, the job-dir's model).
- `staging`: build the package sdist and upload it to Cloud Storage.
- `build`: the Dockerfile's image, built by Cloud Build into Artifact
  Registry and reused by content hash; its build context honours
  `.dockerignore` and `.gcloudignore`.
- `credential_files`: what looks like a credential, kept out of uploads.
- `gcs_paths`: the gs:// path rule of every flag and field.
- `jobs`: Vertex AI CustomJob / HyperparameterTuningJob bodies and calls, the
  legacy `ml v1` body.
- `logs`: the replicas' log lines from Cloud Logging while a job runs.
- `tfjob`: Kubeflow TFJob manifest.
- `api`: Google API services and the storage client, bounded waits and
  one-line errors.
- `schema`: request bodies checked against the bundled discovery documents.
- `cli`: `python -m estimator_trainers.tools.cloud submit|status|cancel|logs|list`.
"""
