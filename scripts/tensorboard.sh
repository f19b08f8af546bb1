#!/usr/bin/env bash
# Shows a job-dir in TensorBoard, served on this machine only.
#
# Runs the TensorBoard of .venv (set up first if missing) on JOB_DIR (local or
# gs://), bound to localhost; TensorBoard prints the URL.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

usage() {
  cat <<USAGE
Usage: bash scripts/tensorboard.sh [JOB_DIR] [--port PORT]

Serves TensorBoard for JOB_DIR (default: \$JOB_DIR, else /tmp, where
train-local.sh puts its job-dirs) at http://localhost:PORT/ (default 6006),
reachable from this machine only. JOB_DIR may be a parent of several
job-dirs to compare runs, and may be gs://... (read with --load_fast=false,
whose loader uses your gcloud credentials).
USAGE
}

main() {
  local job_dir="${JOB_DIR:-/tmp}" port=6006 given=""
  while [[ $# -gt 0 ]]; do
    case "$1" in
      -h|--help) usage; return 0 ;;
      --port) [[ $# -ge 2 ]] || { echo "error: --port needs a number (see --help)" >&2; return 2; }
              port="$2"; shift 2 ;;
      --port=*) port="${1#--port=}"; shift ;;
      -*) echo "error: unknown option '$1' (see --help)" >&2; return 2 ;;
      *) [[ -z "${given}" ]] || { echo "error: one JOB_DIR only, got '${given}' and '$1'" >&2; return 2; }
         given="$1"; job_dir="$1"; shift ;;
    esac
  done
  if ! [[ "${port}" =~ ^[0-9]+$ ]]; then
    echo "error: --port expects a port number, got '${port}'" >&2
    return 2
  fi
  local extra=()
  if [[ "${job_dir}" == gs://* ]]; then
    # The fast loader has its own GCS client, which needs other credentials.
    extra=(--load_fast=false)
  elif [[ ! -d "${job_dir}" ]]; then
    echo "error: JOB_DIR ${job_dir}: no such directory (train first, or give a gs:// path)" >&2
    return 2
  fi
  if [[ ! -x "${repo_root}/.venv/bin/tensorboard" ]]; then
    # shellcheck source=scripts/setup-venv.sh
    source "${repo_root}/scripts/setup-venv.sh"
    setup_venv
  fi
  # TensorFlow's start-up notices (CUDA plugins, CPU features) are not about the logs.
  TF_CPP_MIN_LOG_LEVEL=3 PYTHONWARNINGS=ignore::FutureWarning \
    exec "${repo_root}/.venv/bin/tensorboard" --logdir "${job_dir}" --host localhost \
    --port "${port}" "${extra[@]}"
}

main "$@"
