"""Cloud training: submit the trainers to Vertex AI from AI Platform configs.

- `configs`: load and validate `trainingInput` YAML; legacy machine names and
  scale tiers -> Vertex AI machine types and GPUs.
- `submission`: trainer modules, their flags and job naming.
- `staging`: build the package sdist and upload it to Cloud Storage.
- `jobs`: Vertex AI CustomJob / HyperparameterTuningJob bodies and calls, the
  legacy `ml v1` body, state polling.
- `tfjob`: Kubeflow TFJob manifest.
- `schema`: request bodies checked against the bundled discovery documents.
- `cli`: `python -m estimator_trainers.tools.cloud submit|status|cancel|list`.
"""
