#!/usr/bin/env bash
# Runs the benchmarks; writes benchmarks/results.json and benchmarks/RESULTS.md.
#
# Usage: bash benchmarks/run.sh [--quick] [BENCHMARK...]
#   BENCHMARK: resnet taxi input cluster cold_start eval_share levers
#   determinism steps_per_loop data_size roofline (default: all, in this order; input
#   reads what training consumes from resnet and taxi), install (only
#   when named: pip vs uv installing the pins, cold and warm cache; downloads
#   ~1.2 GB from PyPI) and backtest (only when named: the cost estimates'
#   prediction of local clusters from one process, against their runs; after
#   cluster, whose fit it uses; ~25 minutes).
#   --quick   tiny settings (a smoke test of a few minutes); its results go to
#             $BENCH_WORK_DIR/results-quick.json and RESULTS-quick.md, never
#             over the real figures.
# Environment: BENCH_WORK_DIR (default /tmp/estimator-trainers-bench) holds the
# generated data: 4,000 CIFAR-format training images (tests/cifar10_archive.py,
# through the real data step), the taxi data step's CSVs, a generated MNIST
# file (tests/mnist_archive.py), data_size's 1M/3M/10M-row sets (~1.5 GB of
# CSV plus their caches) and a checkout of BENCH_BASELINE (default c56dabb, the
# trainers before issue #22: "today's default" of the taxi benchmark).
# The full run takes about 90 minutes on 2 cores; run it on an idle machine.
# It prints the load average before each benchmark and, at the end, the load
# each benchmark saw and the targets table: a comparison measured while the
# mean load exceeded the core count is judged on its examples per CPU-second
# alone, and a target with only wall-clock figures is then "not judged".
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
quick=0
benchmarks=()
for arg in "$@"; do
  case "${arg}" in
    --quick) quick=1 ;;
    -h|--help) sed -n '2,25p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    resnet|taxi|input|cluster|cold_start|eval_share|levers|determinism|steps_per_loop|data_size|roofline|install|backtest)
      benchmarks+=("${arg}") ;;
    *) echo "error: unknown argument '${arg}' (see --help)" >&2; exit 2 ;;
  esac
done
[[ ${#benchmarks[@]} -eq 0 ]] && benchmarks=(resnet taxi input cluster cold_start eval_share levers
                                            determinism steps_per_loop data_size roofline)

# shellcheck source=scripts/setup-venv.sh
source "${repo_root}/scripts/setup-venv.sh"
setup_venv
python="${repo_root}/.venv/bin/python"
export PYTHONPATH="${repo_root}${PYTHONPATH:+:${PYTHONPATH}}"
export TF_CPP_MIN_LOG_LEVEL=2
cd "${repo_root}"

work="${BENCH_WORK_DIR:-/tmp/estimator-trainers-bench}"
cifar="${work}/cifar10"
taxi_dir="${work}/taxi"
mkdir -p "${work}"
if [[ ! -f "${cifar}/metadata.json" ]]; then
  "${python}" -c "import sys; sys.path.insert(0, 'tests'); import cifar10_archive; \
cifar10_archive.write_archive('${work}/cifar10-src', per_batch=1000, test_size=500)"
  "${python}" -m cifar10_estimator.generate_cifar10_tfrecords --data-dir "${cifar}" \
    --source "${work}/cifar10-src/cifar-10-python.tar.gz"
fi
if [[ ! -f "${taxi_dir}/taxi_trips_train.csv" ]]; then
  "${python}" -m taxi_estimator.data --out-dir "${taxi_dir}"
fi
taxi_train="${taxi_dir}/taxi_trips_train.csv"
taxi_eval="${taxi_dir}/taxi_trips_eval.csv"
mnist="${work}/mnist"
if [[ ! -f "${mnist}/mnist.npz" ]]; then
  mkdir -p "${mnist}"
  "${python}" -c "import sys; sys.path.insert(0, 'tests'); import mnist_archive; \
mnist_archive.write_npz('${mnist}/mnist.npz', train=20000, test=2000)"
fi
baseline_commit="${BENCH_BASELINE:-c56dabb}"
baseline="${work}/baseline-${baseline_commit}"
baseline_args=()
if [[ ! -d "${baseline}" ]] && git -C "${repo_root}" rev-parse -q --verify \
    "${baseline_commit}^{commit}" >/dev/null 2>&1; then
  mkdir -p "${baseline}.tmp"
  git -C "${repo_root}" archive "${baseline_commit}" | tar -x -C "${baseline}.tmp"
  mv "${baseline}.tmp" "${baseline}"
fi
if [[ -d "${baseline}" ]]; then
  baseline_args=(--baseline-dir "${baseline}" --baseline-commit "${baseline_commit}")
fi

results_md="${repo_root}/benchmarks/RESULTS.md"
if [[ ${quick} -eq 1 ]]; then
  export BENCHMARK_RESULTS="${work}/results-quick.json"
  rm -f "${BENCHMARK_RESULTS}"
  results_md="${work}/RESULTS-quick.md"
fi

run() {
  echo "+ python -m benchmarks.$*" >&2
  "${python}" -m "benchmarks.$@"
}

for benchmark in "${benchmarks[@]}"; do
  echo "== ${benchmark} ($(date +%H:%M:%S), load $(cut -d' ' -f1-3 /proc/loadavg) on" \
       "$(nproc) cores)" >&2
  case "${benchmark}:${quick}" in
    resnet:0) run resnet_throughput --data-dir "${cifar}" ;;
    resnet:1) run resnet_throughput --data-dir "${cifar}" --depths 20 --repeats 1 \
                --variants estimator,estimator_fp32,keras_memory,keras_tfrecord \
                --interval 4 --intervals 2 ;;
    taxi:0) run taxi --train-files "${taxi_train}" --eval-files "${taxi_eval}" \
              ${baseline_args[@]+"${baseline_args[@]}"} ;;
    taxi:1) run taxi --train-files "${taxi_train}" --eval-files "${taxi_eval}" \
              ${baseline_args[@]+"${baseline_args[@]}"} --repeats 1 --interval 128 --intervals 2 \
              --target-auc 0.93 --keras-steps-per-execution 1,32 \
              --keras-one-thread-steps-per-execution 32 ;;
    input:0) run input_pipeline --cifar-data-dir "${cifar}" \
               --taxi-train-files "${taxi_train}" ;;
    input:1) run input_pipeline --cifar-data-dir "${cifar}" \
               --taxi-train-files "${taxi_train}" --repeats 1 --seconds 0.5 ;;
    cluster:0) run cluster --cifar-data-dir "${cifar}" --taxi-train-files "${taxi_train}" \
                 --taxi-eval-files "${taxi_eval}" ;;
    backtest:0) run backtest --cifar-data-dir "${cifar}" --taxi-train-files "${taxi_train}" \
                  --taxi-eval-files "${taxi_eval}" ;;
    backtest:1) run backtest --cifar-data-dir "${cifar}" --taxi-train-files "${taxi_train}" \
                  --taxi-eval-files "${taxi_eval}" --quick ;;
    cluster:1) run cluster --cifar-data-dir "${cifar}" --taxi-train-files "${taxi_train}" \
                 --taxi-eval-files "${taxi_eval}" --repeats 1 --intervals 2 \
                 --trainers "cifar10 ResNet-20,taxi" ;;
    cold_start:0) run cold_start --cifar-data-dir "${cifar}" \
                    --taxi-train-files "${taxi_train}" --taxi-eval-files "${taxi_eval}" ;;
    cold_start:1) run cold_start --cifar-data-dir "${cifar}" \
                    --taxi-train-files "${taxi_train}" --taxi-eval-files "${taxi_eval}" \
                    --repeats 1 ;;
    eval_share:0) run eval_share --cifar-data-dir "${cifar}" \
                    --taxi-train-files "${taxi_train}" --taxi-eval-files "${taxi_eval}" ;;
    eval_share:1) run eval_share --cifar-data-dir "${cifar}" \
                    --taxi-train-files "${taxi_train}" --taxi-eval-files "${taxi_eval}" \
                    --cifar-train-steps 50 ;;
    levers:0) run levers --data-dir "${cifar}" ;;
    determinism:0) run determinism --cifar-data-dir "${cifar}" \
                     --taxi-train-files "${taxi_train}" --taxi-eval-files "${taxi_eval}" ;;
    determinism:1) run determinism --cifar-data-dir "${cifar}" \
                     --taxi-train-files "${taxi_train}" --taxi-eval-files "${taxi_eval}" \
                     --num-layers 8 --repeats 1 --intervals 2 ;;
    steps_per_loop:0) run steps_per_loop --taxi-train-files "${taxi_train}" \
                        --taxi-eval-files "${taxi_eval}" --mnist-data-dir "${mnist}" \
                        --cifar-data-dir "${cifar}" ${baseline_args[@]+"${baseline_args[0]}" "${baseline_args[1]}"} ;;
    steps_per_loop:1) run steps_per_loop --taxi-train-files "${taxi_train}" \
                        --taxi-eval-files "${taxi_eval}" --mnist-data-dir "${mnist}" \
                        --cifar-data-dir "${cifar}" ${baseline_args[@]+"${baseline_args[0]}" "${baseline_args[1]}"} \
                        --repeats 1 --intervals 2 ;;
    data_size:0) run data_size --source "${taxi_train}" --eval-files "${taxi_eval}" \
                   --work-dir "${work}/data_size" ;;
    data_size:1) run data_size --source "${taxi_train}" --eval-files "${taxi_eval}" \
                   --work-dir "${work}/data_size-quick" --sizes 100000,300000 --shards 4 \
                   --repeats 1 --intervals 2 --interval 200 ;;
    roofline:0) run roofline ;;
    roofline:1) run roofline --num-layers 8 --dtypes bfloat16 --calls 5 ;;
    install:*) run install --uv "$(find_uv || bootstrap_uv "${python}")" ;;
    levers:1) run levers --data-dir "${cifar}" --num-layers 8 --repeats 1 \
                --variants defaults,float32,unfused_batch_norm,inter_threads_1 \
                --interval 3 --intervals 2 ;;
  esac
done
run report --out "${results_md}"
