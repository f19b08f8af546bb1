#!/usr/bin/env bash
# Trains one of the packaged models on this machine.
#
# Sets up .venv, then hands over to `python -m estimator_trainers.tools.local`,
# which finds the model among the declared trainers, prepares its data when
# missing and runs it (once per task of a local cluster with --distributed).
# `bash scripts/train-local.sh --help` lists the models and options.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

main() {
  # shellcheck source=scripts/setup-venv.sh
  source "${repo_root}/scripts/setup-venv.sh"
  setup_venv
  export PYTHONPATH="${repo_root}${PYTHONPATH:+:${PYTHONPATH}}"
  exec "${repo_root}/.venv/bin/python" -m estimator_trainers.tools.local "$@"
}

main "$@"
