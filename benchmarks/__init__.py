"""Benchmarks of the estimator trainers (measurement code, not packaged).

Run them all with `bash benchmarks/run.sh` (or `--quick`); each module is also
runnable on its own with `python -m benchmarks.<name> --help`. Results are
merged into `benchmarks/results.json` and rendered into `benchmarks/RESULTS.md`.
"""
