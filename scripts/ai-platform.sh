#!/usr/bin/env bash
# Your `gcloud ai-platform` (or `gcloud ml-engine`) command lines, unchanged.
#
# Replace the two words `gcloud ai-platform` with `bash scripts/ai-platform.sh`:
#   bash scripts/ai-platform.sh jobs submit training JOB --package-path trainer \
#     --module-name trainer.task --job-dir gs://b/out --runtime-version 1.15 -- --train-steps 1000
#   bash scripts/ai-platform.sh jobs describe|stream-logs|cancel JOB
#   bash scripts/ai-platform.sh local train --package-path trainer --module-name trainer.task
#   bash scripts/ai-platform.sh local predict --model-dir EXPORT --json-instances FILE
#   bash scripts/ai-platform.sh models create|list|describe|delete; versions create V --model M
#     --origin gs://.../export/TS; predict --model M --json-instances FILE
# Jobs and models run on Vertex AI (AI Platform Training and Prediction were shut
# down on 2025-01-31); docs/migrating-from-ai-platform.md says what each flag becomes.
# Sets up .venv, then forwards to `python -m estimator_trainers.tools.cloud.ai_platform`.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

main() {
  if [[ $# -eq 0 ]]; then
    set -- --help
  fi
  # shellcheck source=scripts/setup-venv.sh
  source "${repo_root}/scripts/setup-venv.sh"
  setup_venv >&2
  export PYTHONPATH="${repo_root}${PYTHONPATH:+:${PYTHONPATH}}"
  # google-api-core's notice that Python 3.11 support ends in 2027 is not about the job.
  PYTHONWARNINGS="${PYTHONWARNINGS:-ignore::FutureWarning}" \
    exec "${repo_root}/.venv/bin/python" -m estimator_trainers.tools.cloud.ai_platform "$@"
}

main "$@"
