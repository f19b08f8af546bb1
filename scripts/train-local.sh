#!/usr/bin/env bash
# Trains one of the packaged models on this machine.
#
# Sets up .venv, prepares the data when it is missing, then runs the trainer
# module with --data-dir/--job-dir and any trainer flags given after `--`.
# With --distributed it forwards to the local cluster launcher
# (python -m estimator_trainers.tools.launcher), which runs the trainer once per task.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

usage() {
  cat <<USAGE
Usage: bash scripts/train-local.sh [cifar10|taxi] [options] [-- TRAINER_FLAGS...]

Trains a model locally, resuming from --job-dir when it holds checkpoints.

Models:
  cifar10   ResNet on CIFAR-10 TFRecords (default). Downloads CIFAR-10 unless
            --data-dir already holds the TFRecords; set CIFAR10_SOURCE to a
            downloaded cifar-10-python.tar.gz to work offline.
  taxi      Wide-and-deep tip classifier on Chicago Taxi trips.

Options:
  --job-dir DIR    checkpoints, TensorBoard summaries, exports
                   (default: /tmp/cifar10 or /tmp/taxi; env JOB_DIR)
  --data-dir DIR   data directory (default: ./data/<model>; env DATA_DIR)
  -h, --help       show this help

Distributed (a TensorFlow cluster on this machine, one process per task, like
gcloud ai-platform local train --distributed; see docs/distributed.md):
  --distributed                 run a chief plus the tasks below
  --parameter-server-count N    parameter servers (default 2)
  --worker-count N              workers besides the chief (default 2)
  --evaluator-count N           evaluators (default 0)
  --start-port PORT             first port to try (default: free ports)
  --max-restarts N              restarts of each failed task (default 0)
  Each task's output is prefixed with its role ([worker-1] ...) and saved to
  <job-dir>/logs/<role>-<i>.log.

Everything after '--' goes to the trainer, e.g.
  bash scripts/train-local.sh -- --train-steps=2000
  bash scripts/train-local.sh taxi -- --train-steps=5000 --hidden-units=128,64,32
  bash scripts/train-local.sh cifar10 --distributed --worker-count 2 -- --sync
Trainer flags: python -m cifar10_estimator.cifar10_main --help
               python -m taxi_estimator.task --help
USAGE
}

# Runs the trainer command "$@": as is, or once per task of a local cluster
# (uses main's distributed, launcher_args, python and job_dir).
run_trainer() {
  if [[ ${distributed} -eq 1 ]]; then
    exec "${python}" -m estimator_trainers.tools.launcher --job-dir "${job_dir}" \
      "${launcher_args[@]}" -- "$@"
  fi
  exec "$@"
}

main() {
  local model="cifar10"
  if [[ $# -gt 0 && "$1" != -* ]]; then
    model="$1"
    shift
  fi
  local job_dir="${JOB_DIR:-}" data_dir="${DATA_DIR:-}"
  local trainer_args=() distributed=0 launcher_args=()
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --job-dir) job_dir="$2"; shift 2 ;;
      --job-dir=*) job_dir="${1#*=}"; shift ;;
      --data-dir) data_dir="$2"; shift 2 ;;
      --data-dir=*) data_dir="${1#*=}"; shift ;;
      --distributed) distributed=1; shift ;;
      --parameter-server-count|--worker-count|--evaluator-count|--start-port|--max-restarts)
        [[ $# -ge 2 ]] || { echo "error: $1 needs a value" >&2; return 2; }
        launcher_args+=("$1" "$2"); shift 2 ;;
      --parameter-server-count=*|--worker-count=*|--evaluator-count=*|--start-port=*|--max-restarts=*)
        launcher_args+=("$1"); shift ;;
      -h|--help) usage; return 0 ;;
      --) shift; trainer_args=("$@"); break ;;
      *) echo "error: unknown option '$1' (see --help)" >&2; return 2 ;;
    esac
  done
  if [[ ${distributed} -eq 0 && ${#launcher_args[@]} -gt 0 ]]; then
    echo "error: ${launcher_args[0]%%=*} needs --distributed" >&2
    return 2
  fi

  # shellcheck source=scripts/setup-venv.sh
  source "${repo_root}/scripts/setup-venv.sh"
  setup_venv
  local python="${repo_root}/.venv/bin/python"
  export PYTHONPATH="${repo_root}${PYTHONPATH:+:${PYTHONPATH}}"

  case "${model}" in
    cifar10)
      job_dir="${job_dir:-/tmp/cifar10}"
      data_dir="${data_dir:-${repo_root}/data/cifar10}"
      if [[ ! -f "${data_dir}/metadata.json" ]]; then
        local source_args=()
        [[ -n "${CIFAR10_SOURCE:-}" ]] && source_args=(--source "${CIFAR10_SOURCE}")
        "${python}" -m cifar10_estimator.generate_cifar10_tfrecords \
          --data-dir "${data_dir}" "${source_args[@]}"
      fi
      run_trainer "${python}" -m cifar10_estimator.cifar10_main \
        --data-dir "${data_dir}" --job-dir "${job_dir}" --train-steps 1000 \
        "${trainer_args[@]}"
      ;;
    taxi)
      job_dir="${job_dir:-/tmp/taxi}"
      data_dir="${data_dir:-${repo_root}/data/taxi}"
      if [[ ! -f "${data_dir}/taxi_trips_train.csv" || ! -f "${data_dir}/taxi_trips_eval.csv" ]]; then
        "${python}" -m taxi_estimator.data --out-dir "${data_dir}"
      fi
      run_trainer "${python}" -m taxi_estimator.task \
        --train-files "${data_dir}/taxi_trips_train.csv" \
        --eval-files "${data_dir}/taxi_trips_eval.csv" \
        --job-dir "${job_dir}" "${trainer_args[@]}"
      ;;
    *)
      echo "error: unknown model '${model}' (expected cifar10 or taxi)" >&2
      return 2
      ;;
  esac
}

main "$@"
