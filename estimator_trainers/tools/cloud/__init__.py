"""Cloud training: the same packages on Vertex AI (or Kubernetes), from AI Platform configs.

Two fronts turn words into one typed `plan.JobPlan`; one pipeline carries it
out; everything else is a step or a rendering:

- fronts (command lines only; neither imports the other):
  `train_cloud` (`scripts/train-cloud.sh`: a trainer of this project, a
  trainingInput config) and `ai_platform` (`scripts/ai-platform.sh`: users'
  own `gcloud ai-platform` lines, with the flag table in `gcloud_flags`);
- `plan`: what runs (a trainer, a user's package, a user's container), on
  which pools, where; `roles`: every name a role goes by;
- `pipeline`: the order of every cloud action: checks -> stage -> build ->
  create | rehearse | dry run | manifest -> follow; and of a deploy: check
  the export -> upload -> deploy (-> roll back);
- checks before anything is uploaded: `configs` (+ `checker`, `machines`:
  trainingInput validated and translated), `preflight` (every replica's
  start-up in `replicas`' environments, the bucket), `packages` (a user's
  package installed, its requirements against this project's pins),
  `source_checks` (its module read, never run), `credential_files`,
  `gcs_paths`;
- steps: `staging` (sdists, uploads), `build` (this project's image with
  Cloud Build), `rehearsal` (the job on this machine), `logs` (following a
  job), `bootstrap` (installs a user's package in the image at start-up);
- renderings: `jobs` (Vertex AI CustomJob / HyperparameterTuningJob and the
  calls), `tfjob` (Kubeflow TFJob);
- serving (`ai_platform`'s `models`, `versions`, `predict`, `local
  predict`): `plan.ServingPlan` for `pipeline.deploy` (check the export,
  upload, deploy, roll back) and `pipeline.remove`; `endpoints` (Vertex AI
  endpoints and Model Registry in AI Platform's words, the calls and
  operations), `instances` (instances files in, predictions out as gcloud
  printed them); the export itself is `estimator_trainers.serving`'s;
- `api`, `schema`, `location`: Google API clients, bodies checked against
  the bundled discovery documents, project/region/credentials.
"""
