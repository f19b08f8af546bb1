"""Cloud training: the same packages on Vertex AI (or Kubernetes), from AI Platform configs.

Two fronts turn words into one typed `plan.JobPlan` and one action; a
pipeline carries it out; everything else is a step or a rendering:

- fronts (command lines only; neither imports the other, neither builds a
  request): `train_cloud` (`scripts/train-cloud.sh`: a trainer of this
  project, a trainingInput config) and `ai_platform` (`scripts/ai-platform.sh`:
  users' own `gcloud ai-platform` lines: its parser in `gcloud_parser`, the
  flag table in `gcloud_flags`, gcloud's printed forms in `gcloud_output`);
- `plan`: what runs (`plan.Program`, one protocol: a trainer, a user's
  package, a user's container), on which pools (`Pool.role` a `roles.Role`),
  with which `Scheduling` and `Hyperparameters`, all parsed once by
  `configs` and checked when the `JobPlan` is made; `roles`: every name a
  role goes by (the only cloud module that spells one, with `cluster`);
- `actions`: what a command asks, one small frozen class per kind holding
  only its fields and a typed callback: `Submit | DryRun | Rehearse |
  Manifest | Estimate` for the training pipeline (`training_action` makes
  it of either front's flags, refusing `--rehearse` with `--dry-run`),
  `Deploy | Remove | CreateModel | Predict | ListModels` for the serving
  pipeline, `Cancel`;
- `pipeline`: the order of a training action: checks -> stage -> build ->
  create | rehearse | dry run | manifest -> follow; `serving_pipeline`: the
  order of a serving action (check the export -> upload -> deploy (-> roll
  back); remove), every verb's dry run included;
- `backend`: the client factory (credentials, Vertex AI, Cloud Storage),
  below the fronts; `location.resolve`: the one rule for a project and
  region (a full resource name gives them, else flags, gcloud's settings,
  the credentials' project);
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
  predict`): `plan.ServingPlan` in an `actions.Deploy`, the other verbs'
  actions, for `serving_pipeline.run`; `endpoints` (Vertex AI
  endpoints and Model Registry in AI Platform's words, the calls and
  operations), `instances` (instances files in, predictions out as gcloud
  printed them); the export itself is `estimator_trainers.serving`'s;
- `api`, `schema`: Google API clients, bodies checked against the bundled
  discovery documents.
"""
