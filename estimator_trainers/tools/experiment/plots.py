"""A sweep's plots, PNG files drawn with matplotlib's Agg backend (no display needed).

- `by-<axis>.png`: each measured quantity (`results.QUANTITIES` and the
  evaluation metric) against the axis, one panel per quantity: the mean over
  the repeats with the standard deviation as error bars and each run as a
  dot, a line per combination of the other axes' values; times and rates on
  axes that start at zero; a last panel with the 1-minute load average each
  run ran under beside the machine's cores, and a note under the figure
  naming the points measured under load (circled in red on every panel).
- `metric-vs-wall-time.png`: the evaluation metric of every run against the
  time since its job started, all runs on one chart.
- `throughput-vs-training-tasks.png` (when the number of training tasks
  varies): the job's examples/sec (the sum of its tasks') against the
  training tasks, a line per strategy, with the ideal linear scaling of the
  one-task throughput, and the same load marks and note.

Each `*_figure` function returns the figure (tests read its series);
`write_all` saves them.
"""
import io
import os
from typing import Any, Dict, List, Optional, Sequence

import matplotlib
matplotlib.use('Agg')
import matplotlib.pyplot as plt  # pylint: disable=wrong-import-position
from matplotlib.axes import Axes  # pylint: disable=wrong-import-position
from matplotlib.figure import Figure  # pylint: disable=wrong-import-position

from estimator_trainers import run_record  # pylint: disable=wrong-import-position
from estimator_trainers import safe_io  # pylint: disable=wrong-import-position
from estimator_trainers.tools.experiment import results  # pylint: disable=wrong-import-position
from estimator_trainers.tools.experiment import sweep as sweep_lib  # pylint: disable=wrong-import-position
from estimator_trainers.tools.experiment.results import Row  # pylint: disable=wrong-import-position

PLOTS_DIR = 'plots'
METRIC_VS_TIME = 'metric-vs-wall-time.png'
THROUGHPUT = 'throughput-vs-training-tasks.png'
IDEAL_LABEL = 'ideal (linear)'
LOAD_PANEL = 'load'
LOAD_LABEL = 'load average (1 min) of each run'
_LOADED_COLOUR = 'tab:red'


def by_axis_name(axis: str) -> str:
    """The file of the plots against `axis`."""
    return 'by-%s.png' % axis


def _number(text: object) -> Optional[float]:
    """An axis value as a number, or None when it is not one."""
    if not isinstance(text, (int, float, str)):
        return None
    try:
        return float(text)
    except ValueError:
        return None


def quantities(sweep: sweep_lib.Sweep, rows: Sequence[Row]) -> list[tuple[str, str]]:
    """(column, label) of every quantity some succeeded row measured, the metric last."""
    ran = [r for r in rows if r.get('status') == run_record.SUCCEEDED]
    found = [(c, label) for c, label in results.QUANTITIES
             if any(isinstance(r.get(c), (int, float)) for r in ran)]
    metric = results.eval_column(sweep.metric)
    if any(isinstance(r.get(metric), (int, float)) for r in ran):
        found.append((metric, 'eval %s' % sweep.metric))
    return found


def by_axis_figure(sweep: sweep_lib.Sweep, rows: Sequence[Row], axis: str) -> Optional[Figure]:
    """Each quantity against `axis`: the mean over the repeats with their standard
    deviation as error bars and each repeat as a dot, times and rates on axes from
    zero; a last panel shows the load each point ran under, and a note names the
    points measured under load (`results.under_load`, circled in red). None when no
    point measured anything (every point failed)."""
    columns = results.axis_columns(sweep)
    others = [c for c in columns if c != axis]
    ran = [r for r in rows if r.get('status') == run_record.SUCCEEDED]
    panels = quantities(sweep, rows)
    if not panels:
        return None
    panels += [(LOAD_PANEL, LOAD_LABEL)]
    values: list[object] = []
    for row in rows:
        if row.get(axis) not in values:
            values.append(row.get(axis))
    numeric = all(_number(v) is not None for v in values)
    positions: dict[object, float] = {v: ((_number(v) or 0.0) if numeric else i)
                                      for i, v in enumerate(values)}
    cols = min(3, max(1, len(panels)))
    nrows = (len(panels) + cols - 1) // cols
    figure, axes = plt.subplots(nrows, cols, figsize=(4.6 * cols, 3.4 * nrows + 0.6),
                                squeeze=False)
    lines: dict[tuple[object, ...], list[Row]] = {}
    for row in ran:
        lines.setdefault(tuple(row.get(o) for o in others), []).append(row)
    for panel, (column, label) in zip(axes.flat, panels):
        for index, (key, members) in enumerate(lines.items()):
            name = ', '.join('%s=%s' % (k, _shown(v)) for k, v in zip(others, key)) \
                or sweep.name
            at = {value: [r for r in members if r.get(axis) == value] for value in values}
            if column == LOAD_PANEL:
                _load_series(panel, at, positions, 'C%d' % (index % 10), name)
            else:
                _quantity_series(panel, at, positions, column, 'C%d' % (index % 10), name)
        panel.set_title(label)
        panel.set_xlabel(axis)
        panel.set_xticks(list(positions.values()))
        panel.set_xticklabels([_shown(v) for v in values], rotation=0 if numeric else 20)
        panel.grid(alpha=0.3)
        if column != results.eval_column(sweep.metric):
            panel.set_ylim(bottom=0)  # times, rates and loads start at zero
    unused = list(axes.flat)[len(panels):]
    for panel in unused:
        panel.axis('off')
    figure.suptitle('%s: against %s (mean ± sd over %d repeat%s, dots: each run)' % (
        sweep.name, axis, sweep.repeats, '' if sweep.repeats == 1 else 's'))
    bottom = 0.06
    if len(lines) > 1:
        handles = axes.flat[0].get_legend_handles_labels()
        if unused:  # in a free panel
            unused[0].legend(*handles, loc='center', fontsize='small')
        else:  # below the panels
            figure.legend(*handles, loc='lower center', fontsize='small',
                          ncol=min(3, len(lines)), bbox_to_anchor=(0.5, 0.04))
            bottom += 0.03 * ((len(lines) + 2) // 3 + 1)
    _note(figure, ran, load_note(ran, axis))
    figure.tight_layout(rect=(0, bottom, 1, 0.97))
    return figure


def _quantity_series(panel: Axes, at: Dict[Any, List[Row]], positions: Dict[Any, float],
                     column: str, colour: str, name: str) -> None:
    """One line of a panel: means with sd error bars, the runs as dots, the points
    measured under load circled."""
    xs: list[float] = []
    means: list[float] = []
    spreads: list[float] = []
    for value, members in at.items():
        stats = results.summary([r.get(column) for r in members])
        if not stats:
            continue
        xs.append(positions[value])
        means.append(stats[0])
        spreads.append(stats[1])
        runs = [v for v in (r.get(column) for r in members) if isinstance(v, (int, float))]
        panel.plot([positions[value]] * len(runs), runs, '.', color=colour, alpha=0.45)
        if any(results.under_load(r) for r in members):
            panel.plot([positions[value]], [stats[0]], 'o', markersize=13,
                       markerfacecolor='none', markeredgecolor=_LOADED_COLOUR)
    panel.errorbar(xs, means, yerr=spreads, marker='o', capsize=4, color=colour, label=name)


def _load_series(panel: Axes, at: Dict[Any, List[Row]], positions: Dict[Any, float],
                 colour: str, name: str) -> None:
    """The load panel's line: each run's 1-minute load average (the higher of its
    start and end), and the machine's cores as a dashed line."""
    xs: list[float] = []
    loads: list[float] = []
    cores: set[int] = set()
    for value, members in at.items():
        for row in members:
            load = results.load_of(row)
            if load is not None:
                xs.append(positions[value])
                loads.append(load)
            if row.get('cpu_cores'):
                cores.add(row['cpu_cores'])
    panel.plot(xs, loads, 'o', color=colour, alpha=0.7, label=name)
    for count in cores:
        panel.axhline(count, linestyle='--', color='grey', linewidth=1)
        panel.text(min(positions.values()), count, ' %d cores' % count, va='bottom',
                   fontsize='x-small', color='grey')


def load_note(rows: Sequence[Row], axis: Optional[str] = None) -> str:
    """The figure's note on the load: which points ran with more runnable work than
    cores (their times and rates include waiting for a CPU), or that none did."""
    loaded = [r for r in rows if results.under_load(r)]
    cores = sorted({r['cpu_cores'] for r in rows if r.get('cpu_cores')})
    if not loaded:
        loads = [load for load in map(results.load_of, rows) if load is not None]
        return ('1-minute load average %s–%s, at most the %s cores: no point measured '
                'under load.' % (_compact(min(loads)), _compact(max(loads)),
                                 '/'.join(map(str, cores))) if loads else
                'The load the runs ran under was not recorded.')
    points: list[str] = []
    for row in loaded:
        label = ('%s=%s' % (axis, _shown(row.get(axis))) if axis and axis != 'point'
                 else str(row.get('point')))
        if label not in points:
            points.append(label)
    return ('Measured under load (circled): %s ran with a 1-minute load average up to %s '
            'on %s cores, so their times and rates include waiting for a CPU.' % (
                'every run' if len(loaded) == len(rows) else ', '.join(points),
                _compact(max(load for load in map(results.load_of, loaded) if load is not None)),
                '/'.join(map(str, cores))))


def _compact(value: float) -> str:
    """A load average as shown."""
    return '%.1f' % value


def _shown(value: object) -> str:
    """An axis value on a plot; a point of a list that does not set the axis: a dash."""
    return '–' if value is None else str(value)


def metric_vs_time_figure(sweep: sweep_lib.Sweep, curves: results.Curves,
                          points: Sequence[sweep_lib.Point],
                          rows: Sequence[Row] = ()) -> Optional[Figure]:
    """The evaluation metric of every run against the time since its job started
    (from zero), with the note on the load of `rows` (the runs' rows); None when no
    run evaluated."""
    if not any(sessions and sweep.metric in events
               for events, sessions in (curves.get(p.id, ({}, [])) for p in points)):
        return None
    figure, axis = plt.subplots(figsize=(8, 5.3))
    colours: dict[tuple[tuple[str, object], ...], str] = {}
    styles = ('-', '--', ':', '-.')
    for point in points:
        events, sessions = curves.get(point.id, ({}, []))
        if not sessions or sweep.metric not in events:
            continue
        start = sessions[0]['started_at_unix']
        series = sorted(events[sweep.metric])
        # A colour per point, a line style per repeat (its seed).
        colour = colours.setdefault(point.values, 'C%d' % (len(colours) % 10))
        axis.plot([wall - start for _, wall, _ in series], [v for _, _, v in series],
                  marker='.', color=colour, linestyle=styles[point.repeat % len(styles)],
                  label=point.label)
    axis.set_xlabel('wall time since the job started (s)')
    axis.set_xlim(left=0)
    axis.set_ylabel('eval %s' % sweep.metric)
    axis.set_title('%s: eval %s of every run' % (sweep.name, sweep.metric))
    axis.grid(alpha=0.3)
    if axis.lines:
        axis.legend(fontsize='x-small', loc='best')
    ran = [r for r in rows if r.get('status') == run_record.SUCCEEDED]
    _note(figure, ran, load_note(ran, 'point') if ran else '')
    figure.tight_layout(rect=(0, 0.05 if ran else 0, 1, 1))
    return figure


def _note(figure: Figure, rows: Sequence[Row], text: str) -> None:
    """`text` under the figure, red when a run was measured under load."""
    figure.text(0.01, 0.01, text, fontsize='small', wrap=True,
                color=_LOADED_COLOUR if any(results.under_load(r) for r in rows) else 'black')


def throughput_figure(sweep: sweep_lib.Sweep, rows: Sequence[Row]) -> Optional[Figure]:
    """Examples/sec against training tasks, a line per strategy, and the ideal.

    The job's figure is the sum of its training tasks' over one interval
    (`run_record.job_throughput`); error bars and dots as `by_axis_figure`'s,
    the axis from zero, points measured under load circled and named below.
    """
    ran = [r for r in rows if r.get('status') == run_record.SUCCEEDED
           and r.get('examples_per_sec') and r.get('training_tasks')]
    tasks = sorted({r['training_tasks'] for r in ran})
    if len(tasks) < 2:
        return None
    figure, axis = plt.subplots(figsize=(7.5, 5.2))
    # One process starts every strategy's line (it has no strategy of its own).
    strategies: list[str] = []
    for row in ran:
        if row['training_tasks'] > 1 and _strategy(row) not in strategies:
            strategies.append(_strategy(row))

    def members(name: str, count: int) -> list[Row]:
        return [r for r in ran if r['training_tasks'] == count
                and (count == 1 or _strategy(r) == name)]

    for index, name in enumerate(strategies or [_strategy(ran[0])]):
        _quantity_series(axis, {count: members(name, count) for count in tasks},
                         {count: count for count in tasks}, 'examples_per_sec',
                         'C%d' % index, name)
    base = results.summary([r['examples_per_sec'] for r in ran
                            if r['training_tasks'] == tasks[0]])
    assert base is not None  # `ran` holds rows of tasks[0], each with examples/sec
    axis.plot(tasks, [base[0] * count / tasks[0] for count in tasks], linestyle='--',
              color='grey', label=IDEAL_LABEL)
    axis.set_xlabel('training tasks (chief + workers)')
    axis.set_ylabel('examples/sec (the job: the sum of its tasks\')')
    axis.set_xticks(tasks)
    axis.set_ylim(bottom=0)
    axis.set_title('%s: throughput against training tasks' % sweep.name)
    axis.grid(alpha=0.3)
    axis.legend(fontsize='small')
    _note(figure, ran, load_note(ran, 'training_tasks'))
    figure.tight_layout(rect=(0, 0.08, 1, 1))
    return figure


def _strategy(row: Row) -> str:
    """`parameter_server, 2 ps` or `mirrored`: a row's strategy as a line's name."""
    return '%s, %s ps' % (row.get('strategy'), row.get('parameter_servers') or 0) \
        if row.get('parameter_servers') else str(row.get('strategy'))


def write_all(sweep: sweep_lib.Sweep, rows: Sequence[Row], curves: results.Curves,
              out: str) -> list[str]:
    """Saves every plot under `<out>/plots/`; returns the paths written.

    Each PNG is drawn in memory and written whole (`safe_io.write_atomic`): a
    full disk leaves the previous plot and no temporary file.
    """
    directory = os.path.join(out, PLOTS_DIR)
    os.makedirs(directory, exist_ok=True)
    figures = [(by_axis_name(axis), by_axis_figure(sweep, rows, axis))
               for axis in results.axis_columns(sweep)]
    figures.append((METRIC_VS_TIME, metric_vs_time_figure(sweep, curves, sweep.points, rows)))
    figures.append((THROUGHPUT, throughput_figure(sweep, rows)))
    written: list[str] = []
    for name, figure in figures:
        if figure is None:
            continue
        path = os.path.join(directory, name)
        png = io.BytesIO()
        figure.savefig(png, format='png', dpi=100)
        plt.close(figure)
        # write_atomic writes bytes as given; its annotation says str until safe_io's pass.
        safe_io.write_atomic(path, png.getvalue())
        written.append(path)
    return written
