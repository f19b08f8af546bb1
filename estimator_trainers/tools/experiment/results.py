"""A sweep's results: one row per run and session, a table, TensorBoard's HParams.

Every figure of a row comes from the point's job-dir: the run record
(`run_record`: times, steps, rates, checkpoints, status, seed, machine) and
the `eval` event files, read with TensorBoard's own reader (the final
evaluation metrics, the evaluation curve). Rows are written to `results.csv`
(full precision); `results.md` groups the repeats of each point: mean ±
standard deviation, and the evaluation metric's range over the seeds. A point
stopped and resumed (SIGTERM, Ctrl-C, a failure, then a rerun) trained in
several sessions: its row adds them up (`combined`).

The job-dirs' parent is a TensorBoard log directory; `write_hparams_experiment`
adds the sweep's HParams experiment there, so the dashboard lists the axes
(and seed) as hyperparameters and the evaluation metrics as its metrics.
"""
import collections
import csv
import io
import logging
import math
import os
import socket
import statistics
import time
from typing import Any, Callable, Dict, Iterable, Optional, Sequence

from tensorboard.backend.event_processing import event_accumulator
from tensorboard.compat import tf as tensorboard_tf
from tensorboard.compat.proto import event_pb2
from tensorboard.plugins.hparams import summary_v2 as hp
from tensorboard.summary.writer import record_writer

from estimator_trainers import run_record
from estimator_trainers import safe_io
from estimator_trainers.cluster import PS
from estimator_trainers.tools.experiment import execute
from estimator_trainers.tools.experiment import sweep as sweep_lib

# A row of `results.csv`: column -> its value (text, number or None).
Row = Dict[str, Any]
# {tag: [(step, wall time, value)]} of a job-dir's `eval` run.
Events = dict[str, list[tuple[int, float, float]]]
# {point id: (its eval events, its run record's sessions)}.
Curves = dict[str, tuple[Events, list[execute.Session]]]
# `summary`: (mean, standard deviation, min, max, n).
Stats = tuple[float, float, float, float, int]

RESULTS_CSV = 'results.csv'
RESULTS_MD = 'results.md'
EVAL_DIR = 'eval'
# TensorBoard reads a directory's event files by this start of their names.
EVENT_FILES = 'events.out.tfevents'
# Measured quantities of a row, as (column, what it is); the plots draw each.
# All are times or rates: their plots' axes start at zero.
QUANTITIES = (
    ('wall_secs', 'wall time (s)'),
    ('cpu_secs', 'CPU time (s)'),
    ('training_secs', 'training (s)'),
    ('examples_per_sec', 'examples/sec (job)'),
    ('checkpointing_secs', 'checkpointing (s)'),
    ('checkpoint_mean_secs', 'one checkpoint (s)'),
    ('evaluating_secs', 'evaluating (s)'),
)
PHASES = ('startup_secs', 'training_secs', 'evaluating_secs', 'checkpointing_secs',
          'export_secs', 'closing_hooks_secs', 'closing_session_secs',
          'waiting_for_evaluation_thread_secs', 'writing_summaries_secs',
          'waiting_for_workers_secs', 'other_secs')


def eval_column(metric: str) -> str:
    """The column of evaluation metric `metric`."""
    return 'eval_' + metric


def axis_columns(sweep: sweep_lib.Sweep) -> list[str]:
    """The axis columns of a row: the axes, then `session` when points have several."""
    columns = list(sweep.axes)
    if any(len(p.sessions) > 1 for p in sweep.points):
        columns.append('session')
    return columns


def read_eval_events(job_dir: str) -> Events:
    """{tag: [(step, wall_time, value)]} of the job-dir's `eval` run, via TensorBoard's reader."""
    # A resumed job's `eval` run has a graph per session: TensorBoard warns, rightly.
    logging.getLogger('tensorboard').setLevel(logging.ERROR)
    path = '%s/%s' % (job_dir, EVAL_DIR) if '://' in job_dir else os.path.join(job_dir, EVAL_DIR)
    if not tensorboard_tf.io.gfile.isdir(path):
        return {}
    accumulator = event_accumulator.EventAccumulator(
        path, size_guidance={event_accumulator.SCALARS: 0})
    accumulator.Reload()
    return {tag: [(e.step, e.wall_time, e.value) for e in accumulator.Scalars(tag)]
            for tag in accumulator.Tags()['scalars']}


def _last_for(sessions: Sequence[execute.Session], target: Optional[int]) -> Optional[int]:
    """The index of the session a row reports for a step target: the last
    succeeded one that reached it, else the last one of that target, else the
    last one (failed, still the truth of what happened); None for none."""
    accepts: tuple[Callable[[execute.Session], bool], ...] = (
        lambda s: execute.session_done([s], target),
        lambda s: target is None or (s.get('steps') or {}).get('target') == target,
        lambda s: True)
    for accept in accepts:
        found = [i for i, s in enumerate(sessions) if accept(s)]
        if found:
            return found[-1]
    return None


def sessions_by_target(sessions: list[execute.Session], targets: Sequence[Optional[int]]
                       ) -> list[list[execute.Session]]:
    """Per step target of a point (its sweep sessions), the run-record sessions
    that trained toward it, in order: a point stopped (SIGTERM, Ctrl-C) and
    resumed by a rerun trained each target in several sessions."""
    groups: list[list[execute.Session]] = []
    begin = 0
    for target in targets:
        last = _last_for(sessions[begin:], target)
        if last is None:
            groups.append([])
            continue
        groups.append(sessions[begin:begin + last + 1])
        begin += last + 1
    return groups


def combined(group: Sequence[execute.Session], start: Optional[int]) -> execute.Session:
    """One session's figures for a step target trained in the sessions `group`.

    Times, phases, checkpoints and evaluations add up; rates are averaged
    over the training time of each session (so they are examples over training
    seconds); status, exit code, target, final metrics and the machine are the
    last session's. `steps.from` is where the first started.

    Args:
      start: the global step this target's training began at (0, or where the
        point's previous sweep session ended), or None if unknown. Steps
        between it and the first recorded session's start (or between two
        recorded sessions) were trained by a session that left no record (a
        process killed outright: SIGKILL, a lost machine): they are counted as
        `unrecorded_steps`, and their time is missing.
    """
    last = group[-1]
    total = dict(last, record_sessions=len(group), unrecorded_steps=0)
    reached = start
    for session in group:
        steps = session.get('steps') or {}
        if reached is not None and steps.get('from') is not None and steps['from'] > reached:
            total['unrecorded_steps'] += steps['from'] - reached
        if steps.get('to') is not None:
            reached = steps['to']
    if len(group) == 1 and not total['unrecorded_steps']:
        return total
    first_from = next(((s.get('steps') or {}).get('from') for s in group
                       if (s.get('steps') or {}).get('from') is not None), None)
    total['steps'] = dict(last.get('steps') or {}, **{
        'from': start if start is not None and total['unrecorded_steps'] else first_from})
    for key in ('wall_secs', 'cpu_secs'):
        total[key] = _sum(s.get(key) for s in group)
    phases = [s.get('phases') or {} for s in group]
    total['phases'] = {name: _sum(p.get(name) for p in phases)
                       for name in dict.fromkeys(n for p in phases for n in p)}
    training = [p.get('training_secs') or 0 for p in phases]
    total['examples_per_sec'] = _weighted([s.get('examples_per_sec') for s in group],
                                          training)
    workers = [s.get('workers') or {} for s in group]
    total['workers'] = {
        task: {'examples_per_sec': _weighted([(w.get(task) or {}).get('examples_per_sec')
                                              for w in workers], training),
               'steps': _sum((w.get(task) or {}).get('steps') for w in workers)}
        for task in dict.fromkeys(t for w in workers for t in w)}
    saves = [s.get('checkpoints') or {} for s in group]
    count, secs = _sum(c.get('count') for c in saves), _sum(c.get('secs') for c in saves)
    total['checkpoints'] = dict(saves[-1], count=count, secs=secs,
                                mean_secs=secs / count if count and secs is not None else None)
    evaluations = [s.get('evaluations') or {} for s in group]
    total['evaluations'] = {'count': _sum(e.get('count') for e in evaluations),
                            'secs': _sum(e.get('secs') for e in evaluations)}
    return total


def _sum(values: Iterable[object]) -> Optional[float]:
    """The sum of the numbers among `values`, None when there are none."""
    numbers = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return sum(numbers) if numbers else None


def _weighted(values: Sequence[object], weights: Sequence[float]) -> Optional[float]:
    """`values` averaged with `weights` (training seconds); the last value when no
    weight is positive, None when there is no value."""
    pairs = [(v, w) for v, w in zip(values, weights) if isinstance(v, (int, float))]
    weighted = [(v, w) for v, w in pairs if w > 0]
    if weighted:
        return sum(v * w for v, w in weighted) / sum(w for _, w in weighted)
    return pairs[-1][0] if pairs else None


def collect(sweep: sweep_lib.Sweep, layout: execute.Layout) -> tuple[list[Row], Curves]:
    """(rows, curves): a dict per point and session; {point id: eval events}."""
    rows: list[Row] = []
    curves: Curves = {}
    for point in sweep.points:
        job_dir = layout.job_dir(point)
        sessions = run_record.read(job_dir)
        events = read_eval_events(job_dir) if sessions else {}
        curves[point.id] = (events, sessions)
        start: Optional[int] = 0
        for index, group in enumerate(sessions_by_target(sessions, point.targets)):
            session = combined(group, start) if group else None
            rows.append(_row(sweep, point, index, session, events, job_dir))
            start = ((session or {}).get('steps') or {}).get('to')
    return rows, curves


def _row(sweep: sweep_lib.Sweep, point: sweep_lib.Point, index: int,
         session: Optional[execute.Session], events: Events, job_dir: str) -> Row:
    """The row of one sweep session of `point` (`session` None: it never ran)."""
    row: Row = collections.OrderedDict()
    row['point'] = point.id
    for key, value in point.values:
        row[key] = sweep_lib.value_label(value)
    if any(len(p.sessions) > 1 for p in sweep.points):
        row['session'] = index + 1
    row['repeat'] = point.repeat + 1
    row['seed'] = point.seed
    if session is None:
        row['status'] = 'not run'
        row['job_dir'] = job_dir
        return row
    steps = session.get('steps') or {}
    phases = session.get('phases') or {}
    checkpoints = session.get('checkpoints') or {}
    cluster = session.get('cluster') or {}
    row['status'] = session.get('status')
    row['exit_code'] = session.get('exit_code')
    row['record_sessions'] = session.get('record_sessions')
    row['unrecorded_steps'] = session.get('unrecorded_steps')
    row['steps_from'] = steps.get('from')
    row['steps_to'] = steps.get('to')
    row['steps_target'] = steps.get('target')
    row['wall_secs'] = session.get('wall_secs')
    row['cpu_secs'] = session.get('cpu_secs')
    for phase in PHASES:
        row[phase] = phases.get(phase)
    row['examples_per_sec'] = session.get('examples_per_sec')
    workers = session.get('workers') or {}
    row['training_tasks'] = cluster.get('training_tasks')
    row['parameter_servers'] = cluster.get(PS, 0)
    row['strategy'] = cluster.get('strategy')
    row['worker_examples_per_sec'] = ';'.join(
        '%s=%r' % (task, (rate or {}).get('examples_per_sec'))
        for task, rate in sorted(workers.items()))
    rates = [(rate or {}).get('examples_per_sec') for rate in workers.values()]
    row['tasks_examples_per_sec'] = (sum(r for r in rates if r) if any(rates) else None)
    row['checkpoints'] = checkpoints.get('count')
    row['checkpointing_secs'] = checkpoints.get('secs')
    row['checkpoint_mean_secs'] = checkpoints.get('mean_secs')
    row['checkpoint_every_steps'] = checkpoints.get('every_steps')
    row['evaluations'] = (session.get('evaluations') or {}).get('count')
    final_step = steps.get('to')
    for tag in sorted(events):
        at_end = [value for step, _, value in events[tag] if step == final_step]
        row[eval_column(tag)] = at_end[-1] if at_end else None
    row['eval_points'] = len({step for step, _, _ in events.get(sweep.metric, ())
                              if final_step is not None and (steps.get('from') or 0)
                              < step <= final_step})
    row['precision'] = (session.get('precision') or {}).get('compute')
    load = ((session.get('hardware') or {}).get('load_average') or {})
    row['load_average_start'] = (load.get('start') or [None])[0]
    row['load_average_end'] = (load.get('end') or [None])[0]
    row['cpu_model'] = (session.get('hardware') or {}).get('cpu_model')
    row['cpu_cores'] = (session.get('hardware') or {}).get('cpu_cores')
    row['tensorflow'] = (session.get('software') or {}).get('tensorflow')
    row['job_dir'] = job_dir
    return row


def columns_of(rows: Sequence[Row]) -> list[str]:
    """Every column any row has, in first-seen order."""
    columns: list[str] = []
    for row in rows:
        for key in row:
            if key not in columns:
                columns.append(key)
    return columns


def write_csv(rows: Sequence[Row], path: str) -> None:
    """`results.csv`: a row per run and session, floats at full precision (repr)."""
    columns = columns_of(rows)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator='\n')
    writer.writerow(columns)
    for row in rows:
        writer.writerow(['' if row.get(c) is None else
                         repr(row[c]) if isinstance(row[c], float) else row[c]
                         for c in columns])
    _write(path, buffer.getvalue())


def _write(path: str, text: str) -> None:
    """Writes a results file whole."""
    safe_io.write_atomic(path, text)


def summary(values: Iterable[object]) -> Optional[Stats]:
    """(mean, standard deviation, min, max, n) of the numbers in `values` (None: none)."""
    numbers = [v for v in values if isinstance(v, (int, float)) and not math.isnan(v)]
    if not numbers:
        return None
    spread = statistics.stdev(numbers) if len(numbers) > 1 else 0.0
    return statistics.fmean(numbers), spread, min(numbers), max(numbers), len(numbers)


def groups(sweep: sweep_lib.Sweep, rows: Sequence[Row]
           ) -> list[tuple[tuple[object, ...], list[Row]]]:
    """[(axis values as shown, [rows of its repeats])], in the sweep's order."""
    keys = axis_columns(sweep)
    grouped: dict[tuple[object, ...], list[Row]] = collections.OrderedDict()
    for row in rows:
        grouped.setdefault(tuple(row.get(k) for k in keys), []).append(row)
    return list(grouped.items())


def _fmt(value: object, digits: int = 3) -> str:
    """A figure of the table: 3 significant digits, `n/a` for none."""
    if value is None:
        return 'n/a'
    if isinstance(value, float):
        if value != 0 and (abs(value) >= 10 ** 5 or abs(value) < 10 ** -3):
            return '%.3g' % value
        return ('%.' + str(digits) + 'g') % value if abs(value) < 100 else '%.1f' % value
    return str(value)


def _mean_sd(stats: Optional[Stats], digits: int = 3) -> str:
    """`mean ± sd` of a `summary` (the mean alone for one run)."""
    if stats is None:
        return 'n/a'
    mean, spread, _, _, count = stats
    return _fmt(mean, digits) if count == 1 else '%s ± %s' % (_fmt(mean, digits),
                                                             _fmt(spread, 2))


# The figures the table compares between points, (column, its heading).
_COMPARED = (('wall_secs', 'wall time (s)'), ('training_secs', 'training (s)'),
             ('examples_per_sec', 'examples/sec'), ('checkpoint_mean_secs',
                                                    'one checkpoint (s)'),
             ('evaluating_secs', 'evaluating (s)'))
NOT_RESOLVED = 'not resolved'


def markdown(sweep: sweep_lib.Sweep, rows: Sequence[Row], machine: Optional[str] = None) -> str:
    """`results.md`: one line per point (its repeats aggregated), machine and load noted.

    A figure that differs from the first point's by no more than their repeats'
    spread (`resolved`) says `not resolved`: the sweep cannot tell them apart.
    A point measured under load (`under_load`) is marked in the load column.
    """
    metric = eval_column(sweep.metric)
    keys = axis_columns(sweep)
    header = keys + ['runs', 'seeds'] + [heading for _, heading in _COMPARED[:3]] + [
        'checkpoints', _COMPARED[3][1], _COMPARED[4][1],
        'eval %s' % sweep.metric, '%s range over seeds' % sweep.metric, 'load (1 min)']
    lines = ['# %s' % sweep.name, '']
    if sweep.description:
        lines += [sweep.description, '']
    if machine:
        lines += [machine, '']
    lines += ['| %s |' % ' | '.join(header), '|' + '---|' * len(header)]
    reference: Optional[dict[str, Optional[Stats]]] = None
    for values, members in groups(sweep, rows):
        ran = [r for r in members if r.get('status') == run_record.SUCCEEDED]
        stats = {c: summary([r.get(c) for r in ran]) for c, _ in _COMPARED}
        metric_stats = summary([r.get(metric) for r in ran])
        checkpoints = summary([r.get('checkpoints') for r in ran])
        current = dict(stats, **{metric: metric_stats})
        first, reference = reference is None, reference or current

        def compare(column: str, cell: str) -> str:
            if first or current[column] is None or resolved(current[column],
                                                            reference[column]):
                return cell
            return '%s (%s)' % (cell, NOT_RESOLVED)

        loads = [load for load in map(load_of, ran) if load is not None]
        load = ('n/a' if not loads else '%s%s' % (
            '%.1f' % min(loads) if min(loads) == max(loads) else '%.1f – %.1f' % (
                min(loads), max(loads)),
            ' (under load)' if any(under_load(r) for r in ran) else ''))
        cells = ['–' if v is None else str(v) for v in values] + [
            '%d of %d' % (len(ran), len(members)),
            ','.join(str(r['seed']) for r in members)] + [
            compare(c, _mean_sd(stats[c])) for c, _ in _COMPARED[:3]] + [
            _fmt(checkpoints[0]) if checkpoints else 'n/a',
            compare(_COMPARED[3][0], _mean_sd(stats[_COMPARED[3][0]], 2)),
            compare(_COMPARED[4][0], _mean_sd(stats[_COMPARED[4][0]])),
            compare(metric, _mean_sd(metric_stats, 4)),
            ('%s – %s' % (_fmt(metric_stats[2], 4), _fmt(metric_stats[3], 4))
             if metric_stats else 'n/a'), load]
        lines.append('| %s |' % ' | '.join(cells))
    failed = [r for r in rows if r.get('status') not in (run_record.SUCCEEDED,)]
    if failed:
        lines += ['', 'Not succeeded: %s.' % ', '.join(
            '%s (%s)' % (r['point'], r.get('status')) for r in failed)]
    unrecorded = [r for r in rows if r.get('unrecorded_steps')]
    if unrecorded:
        lines += ['', 'Partly unrecorded: %s: steps trained by a session that left no run '
                  'record (a process killed outright: SIGKILL, a lost machine); their time '
                  'is missing from these figures.' % ', '.join(
                      '%s (%d steps)' % (r['point'], r['unrecorded_steps'])
                      for r in unrecorded)]
    lines += ['', 'Mean ± standard deviation over the repeats (seeds); every run and '
              'session is a row of %s. A point stopped and resumed adds up the times of '
              'its sessions (`record_sessions`). "%s": the figure differs from the first '
              'row\'s by no more than the two standard deviations together (or either has '
              'one run): these repeats cannot tell the two apart. The load column is the '
              '1-minute load average at the runs\' starts and ends; "under load": above '
              'the machine\'s cores, so times and rates include waiting for a CPU.'
              % (RESULTS_CSV, NOT_RESOLVED), '']
    return '\n'.join(lines)


def load_of(row: Dict[str, Any]) -> Optional[float]:
    """The higher of a run's 1-minute load averages at its start and its end (None:
    not recorded)."""
    loads = [v for v in (row.get('load_average_start'), row.get('load_average_end'))
             if v is not None]
    return max(loads) if loads else None


def under_load(row: Dict[str, Any]) -> bool:
    """Whether a run ran with more runnable work than the machine has cores (its
    1-minute load average above them at its start or end): its times and rates
    include waiting for a CPU. A cluster of more tasks than cores loads the
    machine itself."""
    load, cores = load_of(row), row.get('cpu_cores')
    return load is not None and cores is not None and load > cores


def resolved(stats: Optional[Stats], reference: Optional[Stats]) -> bool:
    """Whether two points' figures (`summary` tuples) differ by more than their
    repeats' spread (the sum of their standard deviations); False when either
    has a single run, whose spread is unknown."""
    if stats is None or reference is None or stats[4] < 2 or reference[4] < 2:
        return False
    return abs(stats[0] - reference[0]) > stats[1] + reference[1]


def machine_line(rows: Sequence[Row]) -> Optional[str]:
    """`Intel Xeon, 2 cores; load average 1.9-4.2 (1 min) during the runs`."""
    ran = [r for r in rows if r.get('cpu_model')]
    if not ran:
        return None
    loads = [v for r in ran for v in (r.get('load_average_start'), r.get('load_average_end'))
             if v is not None]
    text = 'Machine: %s, %s cores, TensorFlow %s' % (
        ran[0]['cpu_model'], ran[0].get('cpu_cores'), ran[0].get('tensorflow'))
    if loads:
        text += '; 1-minute load average %.1f–%.1f at the runs\' starts and ends' % (
            min(loads), max(loads))
    return text + '.'


def write_hparams_experiment(sweep: sweep_lib.Sweep, layout: execute.Layout,
                             rows: Sequence[Row]) -> None:
    """The sweep's HParams experiment in the job-dirs' parent: axes and seed as
    hyperparameters, the evaluation metrics as metrics.

    Each job-dir's HParams session lives in its `eval` run (`run_report`), so
    a metric is the `eval` run's own scalar (group ''). Replaces the
    experiment an earlier invocation wrote.
    """
    root = layout.job_base
    names = [sweep_lib.flag_dest(axis) for axis in sweep.axes
             if axis not in (sweep_lib.CLUSTER, sweep_lib.CONFIG)]
    if sweep_lib.CLUSTER in sweep.axes:
        names += ['training_tasks', 'parameter_servers']
    names.append('random_seed')
    metrics = sorted({c[len('eval_'):] for r in rows for c in r
                      if c.startswith('eval_') and c != 'eval_points'})
    if sweep.metric in metrics:
        metrics.remove(sweep.metric)
        metrics.insert(0, sweep.metric)
    experiment = hp.hparams_config_pb(
        hparams=[hp.HParam(name) for name in names],
        metrics=[hp.Metric(tag, group='', display_name='eval %s' % tag) for tag in metrics])
    gfile = tensorboard_tf.io.gfile  # TensorFlow's where installed: gs:// too
    gfile.makedirs(root)
    # The event file is made in memory and written whole, then the earlier
    # ones are removed: a full disk leaves the previous experiment.
    now = time.time()
    events = io.BytesIO()
    writer = record_writer.RecordWriter(events)
    for event in (event_pb2.Event(wall_time=now, file_version='brain.Event:2'),
                  event_pb2.Event(wall_time=now, step=0, summary=experiment)):
        writer.write(event.SerializeToString())
    name = '%s.%010d.%s.sweep' % (EVENT_FILES, now, socket.gethostname())
    path = '%s/%s' % (root, name) if '://' in root else os.path.join(root, name)
    # write_atomic writes bytes as given; its annotation says str until safe_io's pass.
    safe_io.write_atomic(path, events.getvalue())
    for old in gfile.glob(os.path.join(root, EVENT_FILES + '.*')):
        if os.path.basename(old) != name:
            gfile.remove(old)
