#!/usr/bin/env bash
# Runs a sweep of training runs and writes its results table and plots.
#
# Sets up .venv (with the plotting requirements), then hands over to
# `python -m estimator_trainers.tools.experiment`, which checks the sweep
# file, runs every point not yet done into its own job-dir, and writes
# results.csv, results.md and plots/*.png. `--help` lists the options;
# docs/experiments.md describes sweep files.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

main() {
  # shellcheck source=scripts/setup-venv.sh
  source "${repo_root}/scripts/setup-venv.sh"
  setup_venv --experiments
  export PYTHONPATH="${repo_root}${PYTHONPATH:+:${PYTHONPATH}}"
  exec "${repo_root}/.venv/bin/python" -m estimator_trainers.tools.experiment "$@"
}

main "$@"
