"""A sweep's plots, PNG files drawn with matplotlib's Agg backend (no display needed).

- `by-<axis>.png`: each measured quantity (`results.QUANTITIES` and the
  evaluation metric) against the axis, one panel per quantity: the mean over
  the repeats with the standard deviation as error bars, a line per
  combination of the other axes' values.
- `metric-vs-wall-time.png`: the evaluation metric of every run against the
  time since its job started, all runs on one chart.
- `throughput-vs-training-tasks.png` (when the number of training tasks
  varies): the job's examples/sec against the training tasks, a line per
  strategy, with the ideal linear scaling of the one-task throughput.

Each `*_figure` function returns the figure (tests read its series);
`write_all` saves them.
"""
import io
import os

import matplotlib
matplotlib.use('Agg')
import matplotlib.pyplot as plt  # pylint: disable=wrong-import-position

from estimator_trainers import run_record  # pylint: disable=wrong-import-position
from estimator_trainers import safe_io  # pylint: disable=wrong-import-position
from estimator_trainers.tools.experiment import results  # pylint: disable=wrong-import-position

PLOTS_DIR = 'plots'
METRIC_VS_TIME = 'metric-vs-wall-time.png'
THROUGHPUT = 'throughput-vs-training-tasks.png'
IDEAL_LABEL = 'ideal (linear)'


def by_axis_name(axis):
    return 'by-%s.png' % axis


def _number(text):
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def quantities(sweep, rows):
    """(column, label) of every quantity some succeeded row measured, the metric last."""
    ran = [r for r in rows if r.get('status') == run_record.SUCCEEDED]
    clusters = any((r.get('training_tasks') or 1) > 1 for r in ran)
    found = [(c, label) for c, label in results.QUANTITIES
             if any(isinstance(r.get(c), (int, float)) for r in ran)
             and (clusters or c != 'tasks_examples_per_sec')]
    metric = results.eval_column(sweep.metric)
    if any(isinstance(r.get(metric), (int, float)) for r in ran):
        found.append((metric, 'eval %s' % sweep.metric))
    return found


def by_axis_figure(sweep, rows, axis):
    """Each quantity against `axis`, error bars over the repeats; None when no
    point measured anything (every point failed)."""
    columns = results.axis_columns(sweep)
    others = [c for c in columns if c != axis]
    ran = [r for r in rows if r.get('status') == run_record.SUCCEEDED]
    panels = quantities(sweep, rows)
    if not panels:
        return None
    values = []
    for row in rows:
        if row.get(axis) not in values:
            values.append(row.get(axis))
    numeric = all(_number(v) is not None for v in values)
    positions = {v: (_number(v) if numeric else i) for i, v in enumerate(values)}
    cols = min(3, max(1, len(panels)))
    nrows = (len(panels) + cols - 1) // cols
    figure, axes = plt.subplots(nrows, cols, figsize=(4.6 * cols, 3.4 * nrows),
                                squeeze=False)
    lines = {}
    for row in ran:
        lines.setdefault(tuple(row.get(o) for o in others), []).append(row)
    for panel, (column, label) in zip(axes.flat, panels):
        for key, members in lines.items():
            xs, means, spreads = [], [], []
            for value in values:
                stats = results.summary([r.get(column) for r in members
                                         if r.get(axis) == value])
                if stats:
                    xs.append(positions[value])
                    means.append(stats[0])
                    spreads.append(stats[1])
            name = ', '.join('%s=%s' % (k, _shown(v)) for k, v in zip(others, key)) \
                or sweep.name
            panel.errorbar(xs, means, yerr=spreads, marker='o', capsize=4, label=name)
        panel.set_title(label)
        panel.set_xlabel(axis)
        panel.set_xticks(list(positions.values()))
        panel.set_xticklabels([_shown(v) for v in values], rotation=0 if numeric else 20)
        panel.grid(alpha=0.3)
    unused = list(axes.flat)[len(panels):]
    for panel in unused:
        panel.axis('off')
    figure.suptitle('%s: against %s (mean ± sd over %d repeat%s)' % (
        sweep.name, axis, sweep.repeats, '' if sweep.repeats == 1 else 's'))
    bottom = 0
    if len(lines) > 1:
        handles = axes.flat[0].get_legend_handles_labels()
        if unused:  # in a free panel
            unused[0].legend(*handles, loc='center', fontsize='small')
        else:  # below the panels
            figure.legend(*handles, loc='lower center', fontsize='small',
                          ncol=min(3, len(lines)))
            bottom = 0.03 * ((len(lines) + 2) // 3 + 1)
    figure.tight_layout(rect=(0, bottom, 1, 1))
    return figure


def _shown(value):
    """An axis value on a plot; a point of a list that does not set the axis: a dash."""
    return '–' if value is None else str(value)


def metric_vs_time_figure(sweep, curves, points):
    """The evaluation metric of every run against the time since its job started;
    None when no run evaluated."""
    if not any(sessions and sweep.metric in events
               for events, sessions in (curves.get(p.id, ({}, [])) for p in points)):
        return None
    figure, axis = plt.subplots(figsize=(8, 5))
    colours, styles = {}, ('-', '--', ':', '-.')
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
    axis.set_ylabel('eval %s' % sweep.metric)
    axis.set_title('%s: eval %s of every run' % (sweep.name, sweep.metric))
    axis.grid(alpha=0.3)
    if axis.lines:
        axis.legend(fontsize='x-small', loc='best')
    figure.tight_layout()
    return figure


def throughput_figure(sweep, rows):
    """Examples/sec against training tasks, a line per strategy, and the ideal.

    Two figures per strategy: the job's rate as the chief's progress hook
    accounts it (global steps it saw pass while it trained), and the sum of
    every task's own rate; where they differ, the tasks did not train at the
    same time (a chief busy evaluating, a worker that started late).
    """
    ran = [r for r in rows if r.get('status') == run_record.SUCCEEDED
           and r.get('examples_per_sec') and r.get('training_tasks')]
    tasks = sorted({r['training_tasks'] for r in ran})
    if len(tasks) < 2:
        return None
    figure, axis = plt.subplots(figsize=(7.5, 4.8))
    # One process starts every strategy's line (it has no strategy of its own).
    strategies = []
    for row in ran:
        if row['training_tasks'] > 1 and _strategy(row) not in strategies:
            strategies.append(_strategy(row))

    def members(name, count):
        return [r for r in ran if r['training_tasks'] == count
                and (count == 1 or _strategy(r) == name)]

    for index, name in enumerate(strategies or [_strategy(ran[0])]):
        for column, style, what in (('examples_per_sec', '-', 'job (chief\'s hook)'),
                                    ('tasks_examples_per_sec', ':', 'sum of the tasks\'')):
            xs, means, spreads = [], [], []
            for count in tasks:
                stats = results.summary([r.get(column) for r in members(name, count)])
                if stats:
                    xs.append(count)
                    means.append(stats[0])
                    spreads.append(stats[1])
            if xs:
                axis.errorbar(xs, means, yerr=spreads, marker='o', capsize=4,
                              linestyle=style, color='C%d' % index,
                              label='%s: %s' % (name, what))
    base = results.summary([r['examples_per_sec'] for r in ran
                            if r['training_tasks'] == tasks[0]])
    axis.plot(tasks, [base[0] * count / tasks[0] for count in tasks], linestyle='--',
              color='grey', label=IDEAL_LABEL)
    axis.set_xlabel('training tasks (chief + workers)')
    axis.set_ylabel('examples/sec')
    axis.set_xticks(tasks)
    axis.set_title('%s: throughput against training tasks' % sweep.name)
    axis.grid(alpha=0.3)
    axis.legend(fontsize='small')
    figure.tight_layout()
    return figure


def _strategy(row):
    return '%s, %s ps' % (row.get('strategy'), row.get('parameter_servers') or 0) \
        if row.get('parameter_servers') else str(row.get('strategy'))


def write_all(sweep, rows, curves, out):
    """Saves every plot under `<out>/plots/`; returns the paths written.

    Each PNG is drawn in memory and written whole (`safe_io.write_atomic`): a
    full disk leaves the previous plot and no temporary file.
    """
    directory = os.path.join(out, PLOTS_DIR)
    os.makedirs(directory, exist_ok=True)
    figures = [(by_axis_name(axis), by_axis_figure(sweep, rows, axis))
               for axis in results.axis_columns(sweep)]
    figures.append((METRIC_VS_TIME, metric_vs_time_figure(sweep, curves, sweep.points)))
    figures.append((THROUGHPUT, throughput_figure(sweep, rows)))
    written = []
    for name, figure in figures:
        if figure is None:
            continue
        path = os.path.join(directory, name)
        png = io.BytesIO()
        figure.savefig(png, format='png', dpi=100)
        plt.close(figure)
        safe_io.write_atomic(path, png.getvalue())
        written.append(path)
    return written
