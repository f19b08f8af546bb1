#!/usr/bin/env bash
# Trains one of the packaged models on Vertex AI, from an AI Platform config.
#
# Sets up .venv, then forwards to `python -m estimator_trainers.tools.cloud`, which
# checks everything, builds the image with Cloud Build (or stages the package)
# and creates the job (no gcloud, no local Docker needed).
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

usage() {
  cat <<USAGE
Usage: bash scripts/train-cloud.sh MODEL [options] [-- TRAINER_FLAGS...]
       bash scripts/train-cloud.sh status|cancel|logs JOB [--project P] [--region R]
       bash scripts/train-cloud.sh list [--limit N]

Submits MODEL (a declared trainer: cifar10, taxi, ...) to Vertex AI as a custom training job, or a
hyperparameter tuning job when the config has 'hyperparameters'. Before
anything is uploaded it checks the config, the trainer flags (with the
trainer's own parser, per pool), the data paths and the job-dir.
'logs JOB' prints the replicas' log lines ([chief-0] ...) until JOB ends.

Environment (docs/cloud.md, "Project and region"):
  PROJECT_ID    Google Cloud project: --project, else CLOUDSDK_CORE_PROJECT,
                else PROJECT_ID, else core/project in gcloud's active
                configuration, else the credentials' project
  BUCKET_NAME   gs://bucket for the staged package and the job-dir
  REGION        Vertex AI region: --region, else CLOUDSDK_COMPUTE_REGION, else
                REGION, else compute/region in gcloud's active configuration,
                else trainingInput.region, else us-central1
Credentials: Application Default Credentials
  (gcloud auth application-default login, or GOOGLE_APPLICATION_CREDENTIALS).

Options:
  --config FILE          AI Platform trainingInput YAML (see configs/)
  --job-name NAME        default train_<model>_<YYYYmmdd_HHMMSS>
  --job-dir gs://...     default <bucket>/jobs/<job-name>
  --build-image          (default) build the Dockerfile with Cloud Build into
                         Artifact Registry, tagged by content hash, reused
                         when the sources are unchanged
  --repository NAME      Artifact Registry repository (default estimator-trainers)
  --image-uri URI        run this container instead (built by you)
  --executor-image-uri   stage the package for this prebuilt image instead
  --target vertex|jobset|tfjob
                         jobset and tfjob only print a Kubernetes manifest
                         (a JobSet, a Kubeflow TFJob; need --image-uri;
                         docs/distributed.md says which to choose)
  --dry-run              print the staging plan and the request; send nothing
  --rehearse             stage, then run the same job on this machine instead
                         of submitting it (package installed in a fresh
                         virtualenv, every pool's replicas with Vertex's
                         environment); see docs/cloud.md
  --max-replicas N       with --rehearse: replicas started per pool (default 2)
  --local-storage        with --rehearse: run on local storage standing in for
                         the buckets (the default without credentials)
  --local-input gs://BUCKET/PREFIX=DIR
                         with --rehearse: the job's input, from this machine
  --stream-logs          print the replicas' log lines until the job ends;
                         exit 0 only on success
  -h, --help             show this help

Everything after '--' goes to the trainer, e.g.
  bash scripts/train-cloud.sh cifar10 --config configs/cmle_config.yaml -- --train-steps=10000
All options: python -m estimator_trainers.tools.cloud submit --help
USAGE
}

main() {
  if [[ $# -eq 0 ]]; then
    usage >&2
    return 2
  fi
  local command=(submit)
  case "$1" in
    -h|--help) usage; return 0 ;;
    status|cancel|logs|list) command=("$1"); shift ;;
  esac

  # shellcheck source=scripts/setup-venv.sh
  source "${repo_root}/scripts/setup-venv.sh"
  setup_venv
  export PYTHONPATH="${repo_root}${PYTHONPATH:+:${PYTHONPATH}}"
  exec "${repo_root}/.venv/bin/python" -m estimator_trainers.tools.cloud "${command[@]}" "$@"
}

main "$@"
