"""Experiments: a grid of training runs from one sweep file, with a table and plots.

    bash scripts/experiment.sh SWEEP.yaml [--out DIR] [--dry-run] [--full]

`sweep` reads and checks the sweep file, `execute` runs its points (locally,
rehearsed or on Vertex AI, resumable), `results` collects what every point's
run record and event files say, `plots` draws them; `cli` is the command
line. See docs/experiments.md.
"""
