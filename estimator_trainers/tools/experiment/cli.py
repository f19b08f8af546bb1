"""Command line of the experiment runner (behind `scripts/experiment.sh`).

    python -m estimator_trainers.tools.experiment SWEEP.yaml [--out DIR] [--dry-run] [--full]

Checks the whole sweep file first (one `error:` line naming the key), then
runs every point that is not done yet into `<out>/runs/<point>` with a
progress line per point and an ETA for the sweep, and writes `results.csv`,
`results.md`, `plots/*.png` and the HParams experiment of the sweep.

A `rehearse` sweep without credentials (or with `--local-storage` or
`--local-input` among `rehearse.options`) runs on local storage that this
command starts for the whole invocation (`local_storage`): every point's
rehearsal and the results read it, and the points' job-dirs are kept in
`<out>/local-storage`, from where a later invocation loads them again.
"""
import argparse
import contextlib
import os
import shlex
import sys
from typing import IO, Iterator, Optional, Sequence

from estimator_trainers import flags
from estimator_trainers import gcs
from estimator_trainers import logs
from estimator_trainers import safe_io
from estimator_trainers.tools import local_storage
from estimator_trainers.tools.experiment import execute
from estimator_trainers.tools.experiment import outputs
from estimator_trainers.tools.experiment import plots
from estimator_trainers.tools.experiment import results
from estimator_trainers.tools.experiment import sweep as sweep_lib

EXIT_FAILED = 1
# Where sweeps write by default, under the directory they run from.
EXPERIMENTS_DIR = 'experiments'


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """The command's flags (usage errors exit 2)."""
    parser = flags.make_parser(
        'bash scripts/experiment.sh',
        'Run every point of a sweep file (a grid or list of trainer flag values, '
        'repeated with distinct seeds) into its own job-dir, resumably, then '
        'write results.csv, results.md, plots/*.png and an HParams experiment '
        'for TensorBoard. See docs/experiments.md.')
    parser.add_argument('sweep', metavar='SWEEP.yaml',
                        help='The sweep file (e.g. configs/experiments/checkpoint-interval.yaml).')
    parser.add_argument('--out', default=None,
                        help='Directory of the sweep\'s job-dirs (runs/), logs and results '
                             '(default: experiments/<sweep name>, or '
                             'experiments/<sweep name>-full with --full, under the current '
                             'directory: outside the packages, and ignored by git and by '
                             'image builds). '
                             'Rerun with the same --out to resume.')
    parser.add_argument('--dry-run', action='store_true',
                        help='Print every point\'s command (local) or request body '
                             '(rehearse, vertex) and run nothing.')
    parser.add_argument('--full', action='store_true',
                        help='Apply the sweep file\'s `full` section: the course\'s sizes '
                             '(hours on a laptop) instead of the quick ones.')
    return parser.parse_args(argv)


def default_out(sweep_name: str, full: bool = False) -> str:
    """`--out` when none is given: `experiments/<name>[-full]` of the current
    directory, kept out of the package tree (a build context, an sdist) and
    of git (`.gitignore`)."""
    return os.path.join(EXPERIMENTS_DIR, sweep_name + ('-full' if full else ''))


def main(argv: Optional[Sequence[str]] = None, stream: Optional[IO[str]] = None) -> int:
    """Runs the command; returns the exit code."""
    logs.quiet_console()
    # This process reads gs:// run records that the points' jobs rewrite. TF's
    # gs:// client keeps a 5-second stat cache, read when TF loads, and a stale
    # size fails the next read with "File contents are inconsistent".
    os.environ.setdefault('GCS_STAT_CACHE_MAX_AGE', '0')
    given = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(given)
    output = stream or sys.stdout
    sweep = sweep_lib.load(args.sweep, full=args.full)
    out = os.path.abspath(args.out or default_out(sweep.name, args.full))
    safe_io.check_owner(out, '--out')
    layout = execute.Layout.of(sweep, out)
    if args.dry_run:
        execute.dry_run(sweep, layout, output)
        return 0
    safe_io.check_writable_directory(out, '--out')
    with _storage(sweep, layout, output):
        if '://' in layout.job_base:
            logs.import_tensorflow()  # gs:// records are read through it: without its noise
        _check_records(sweep, layout)  # a changed sweep is refused before anything is written
        with outputs.faults_as_lines(out):
            os.makedirs(out, exist_ok=True)
            with outputs.Lock(out, given):
                # Read again under the lock: another sweep may have run points meanwhile.
                return _run(sweep, layout, _check_records(sweep, layout), output)


@contextlib.contextmanager
def _storage(sweep: sweep_lib.Sweep, layout: execute.Layout,
             stream: IO[str]) -> Iterator[None]:
    """Local storage for a rehearse sweep that runs without an account, its
    environment in this process (and so in every point's) meanwhile; the
    job-dirs loaded from `<out>/local-storage` and written back at the end."""
    options = sweep.cloud.get('options', []) if sweep.target == 'rehearse' else []
    asked = [o.split('=')[0] for o in options if o.split('=')[0] in (
        '--local-storage', '--local-input')]
    if sweep.target != 'rehearse' or os.environ.get(local_storage.EMULATOR_VAR) or not (
            asked or local_storage.credentials_missing()):
        yield
        return
    mirror = os.path.join(layout.out, 'local-storage')
    local_storage.say(stream, 'rehearse.options has %s' % asked[0] if asked else
                      'no Application Default Credentials found',
                      ['gs://' + gcs.split(layout.job_base)[0]], mirror)
    with local_storage.serving(os.path.join(layout.out, execute.LOGS_DIR), mirror,
                               [layout.job_base], [gcs.split(layout.job_base)[0]], stream):
        yield


def _check_records(sweep: sweep_lib.Sweep,
                   layout: execute.Layout) -> execute.Records:
    """The points' run records; refuses a sweep changed since they were trained."""
    records = execute.read_records(sweep, layout)
    for point in sweep.points:
        if records.get(point.id):
            execute.check_flags(sweep, point, records[point.id])
    return records


def _run(sweep: sweep_lib.Sweep, layout: execute.Layout,
         records: execute.Records, stream: IO[str]) -> int:
    """Runs the points not done yet and writes the results; returns the exit code."""
    out = layout.out
    assert sweep.source is not None  # `sweep_lib.load` keeps the file's bytes
    # As read: the file passed `user_files.decode`, so this is the same bytes.
    safe_io.write_atomic(os.path.join(out, 'sweep.yaml'), sweep.source.decode('utf-8'))
    stream.write('%s: %d point%s (%s), target %s, into %s\n' % (
        sweep.name, len(sweep.points), '' if len(sweep.points) == 1 else 's',
        _shape(sweep), sweep.target, layout.job_base))
    stream.flush()
    runner = execute.Runner(sweep, layout, stream, execute.Signals().install())
    try:
        runner.run(records)
    except execute.Stop as e:
        stream.write('stopped on %s; rerun the same command to resume (finished points '
                     'are skipped, interrupted ones resume from their checkpoints)\n' % e)
        stream.flush()
        return 128 + e.signum
    write_results(sweep, layout, stream)
    if runner.failed:
        stream.write('%d point(s) failed: %s (logs in %s)\n' % (
            len(runner.failed), ', '.join(p.label for p in runner.failed),
            os.path.join(out, execute.LOGS_DIR)))
        return EXIT_FAILED
    return 0


def _shape(sweep: sweep_lib.Sweep) -> str:
    """`num-layers x seed, 2 repeats`: the sweep's shape in its first line."""
    axes = ' x '.join('%s' % axis for axis in sweep.axes) or 'no axes'
    return '%s, %d repeat%s' % (axes, sweep.repeats, '' if sweep.repeats == 1 else 's')


def write_results(sweep: sweep_lib.Sweep, layout: execute.Layout, stream: IO[str]) -> None:
    """results.csv, results.md, plots and the HParams experiment of what ran."""
    # TensorBoard's event reader uses TensorFlow's file system (gs:// too): import
    # it without its start-up noise first.
    logs.import_tensorflow()
    rows, curves = results.collect(sweep, layout)
    csv_path = os.path.join(layout.out, results.RESULTS_CSV)
    md_path = os.path.join(layout.out, results.RESULTS_MD)
    results.write_csv(rows, csv_path)
    table = results.markdown(sweep, rows, results.machine_line(rows))
    safe_io.write_atomic(md_path, table)
    written = plots.write_all(sweep, rows, curves, layout.out)
    results.write_hparams_experiment(sweep, layout, rows)
    stream.write('\n%s\nresults: %s, %s\nplots:   %s\nTensorBoard (HParams compares the '
                 'points): bash scripts/tensorboard.sh %s\n' % (
                     table, csv_path, md_path,
                     ', '.join(written) or 'none (no point measured anything)',
                     shlex.quote(layout.job_base)))
    stream.flush()
