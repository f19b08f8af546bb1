"""`scripts/experiment.sh` / `python -m estimator_trainers.tools.experiment`, end to end.

A small sweep of the guide's toy trainer (a package outside the project,
docs/adding-a-trainer.md): 2 axes x 2 values x 2 repeats, through the real
CLI. Its results.csv is checked figure by figure against each job-dir's run
record and `eval` event files (TensorBoard's reader), its plots as images
and as figures, its HParams experiment through TensorBoard's HTTP API; a
second invocation skips everything, and a sweep stopped mid-point resumes.
Bad sweep files are one `error:` line. The cloud targets: `vertex` through
its dry-run bodies (checked against the bundled aiplatform v1 schema),
`rehearse` without an account (on the local storage it starts), and the vertex scheduling (bounded parallel
submission, following, resuming the following) with a stand-in for the cloud
CLI that writes each job's run record to the emulator.
"""
import csv
import io
import json
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import matplotlib.image
import pytest
import tensorflow as tf
import yaml

import cloud_fakes
import processes
import taxi_trips
from conftest import cli_env, one_error_line, REPO_ROOT, run_module
from estimator_trainers import checkpoints
from estimator_trainers import flags
from estimator_trainers import job_record
from estimator_trainers import registry
from estimator_trainers import run_record
from estimator_trainers.tools.cloud import schema
from estimator_trainers.tools.experiment import cli as experiment_cli
from estimator_trainers.tools.experiment import execute
from estimator_trainers.tools.experiment import plots
from estimator_trainers.tools.experiment import results
from estimator_trainers.tools.experiment import sweep as sweep_lib
from test_faults import mounted_tmpfs
from test_gcs import taxi_data_flags
from test_trainer_discovery import write_guide_package

EXPERIMENT = 'estimator_trainers.tools.experiment'
AXES = {'batch-size': [8, 16], 'checkpoint-num-steps': [10, 15]}


def _toy_sweep(folder, **overrides):
    """Writes a sweep file of the guide's toy trainer into `folder`; returns its path."""
    packages = folder / 'packages'
    if not packages.exists():
        write_guide_package(packages)
    spec = {'description': 'the toy trainer on two axes',
            'package': 'packages', 'module': 'toy_estimator.trainer', 'data_dir': 'data',
            'flags': {'train-steps': 30, 'eval-frequency-secs': 0}, 'axes': AXES,
            'repeats': 2, 'metric': 'mse'}
    spec.update(overrides)
    path = folder / ('%s.yaml' % overrides.get('name', 'toy-sweep'))
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return str(path)


def _experiment(*args, check=0, env=None, timeout=900):
    return run_module(EXPERIMENT, *args, check=check, env=env, timeout=timeout)


@pytest.fixture(scope='module')
def toy(tmp_path_factory):
    """(sweep path, out dir, output of the first and of a second invocation)."""
    folder = tmp_path_factory.mktemp('toy_sweep')
    path = _toy_sweep(folder)
    out = folder / 'out'
    first = _experiment(path, '--out', out)
    records = {d: open(run_record.path(str(out / 'runs' / d))).read()
               for d in os.listdir(out / 'runs') if (out / 'runs' / d).is_dir()}
    second = _experiment(path, '--out', out)
    return path, out, first.stdout, second.stdout, records


def _csv_rows(out):
    with open(out / results.RESULTS_CSV, newline='') as f:
        return list(csv.DictReader(f))


def _eval_events(job_dir):
    from tensorboard.backend.event_processing import event_accumulator  # pylint: disable=import-outside-toplevel
    acc = event_accumulator.EventAccumulator(os.path.join(job_dir, 'eval'),
                                             size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()['scalars']}


def test_a_sweep_runs_every_point_with_progress_and_an_eta(toy):
    path, out, first, _, _ = toy
    lines = [line for line in first.splitlines() if re.match(r'\[\d/8\] ', line)]
    done = [line for line in lines if ': done (' in line]
    assert len(done) == 8, first
    assert all('sweep ETA' in line for line in done[:-1]) and done[-1].endswith('sweep done')
    assert re.search(r'^\[1/8\] batch-size=8 checkpoint-num-steps=10 seed=1: training \(log ',
                     first, re.M)
    # Repeats come last: every point once (seed 1), then again (seed 2).
    assert [re.search(r'seed=(\d)', line).group(1) for line in done] == ['1'] * 4 + ['2'] * 4
    assert sorted(os.listdir(out / 'runs')) == sorted(
        ['batch-size-%d.checkpoint-num-steps-%d.seed-%d' % (b, c, s)
         for b in (8, 16) for c in (10, 15) for s in (1, 2)] + [
         n for n in os.listdir(out / 'runs') if n.startswith('events.out.tfevents.')])
    with open(out / 'sweep.yaml') as f, open(path) as g:
        assert f.read() == g.read()


def test_results_csv_is_what_the_records_and_event_files_say(toy):
    _, out, _, _, _ = toy
    rows = _csv_rows(out)
    assert len(rows) == 8
    for row in rows:
        job_dir = row['job_dir']
        assert job_dir == str(out / 'runs' / row['point'])
        sessions = run_record.read(job_dir)
        assert len(sessions) == 1, (row, sessions)
        session = sessions[0]
        assert row['status'] == 'succeeded' == session['status']
        assert int(row['seed']) == session['flags']['random_seed']
        assert int(row['batch-size']) == session['flags']['batch_size']
        assert int(row['checkpoint-num-steps']) == session['flags']['checkpoint_num_steps']
        assert int(row['steps_to']) == session['steps']['to'] == 30
        assert int(row['steps_from']) == session['steps']['from'] == 0
        for column, value in (('wall_secs', session['wall_secs']),
                              ('cpu_secs', session['cpu_secs']),
                              ('examples_per_sec', session['examples_per_sec']),
                              ('checkpointing_secs', session['checkpoints']['secs']),
                              ('checkpoint_mean_secs', session['checkpoints']['mean_secs'])):
            assert row[column] and float(row[column]) == value, (column, row, session)
        for phase, value in session['phases'].items():
            assert float(row[phase]) == value, (phase, row, session)
        assert int(row['checkpoints']) == session['checkpoints']['count']
        # Evaluations at their own cadence, whatever the checkpoint interval
        # (about ten a run: every 3 of 30 steps); the final metrics are the last
        # point of each eval curve, and the run record's.
        events = _eval_events(job_dir)
        every = checkpoints.default_eval_every_steps(30, 20)  # the toy's checkpoint_steps
        assert [step for step, _ in events['mse']] == list(range(every, 31, every)), (
            row, events)
        assert int(row['eval_points']) == len({step for step, _ in events['mse']})
        for tag in ('mse', 'loss'):
            assert float(row['eval_' + tag]) == events[tag][-1][1]
            assert tf.constant(session['final_metrics'][tag], tf.float32).numpy() == \
                events[tag][-1][1]


def test_results_table_and_plots(toy):
    path, out, _, _, _ = toy
    table = (out / results.RESULTS_MD).read_text()
    body = [line for line in table.splitlines() if re.match(r'\| (8|16) \|', line)]
    assert len(body) == 4 and all('| 2 of 2 | 1,2 |' in line for line in body)
    assert 'Machine: ' in table and 'load average' in table
    rows = _csv_rows(out)
    names = sorted(os.listdir(out / plots.PLOTS_DIR))
    assert names == ['by-batch-size.png', 'by-checkpoint-num-steps.png',
                     'metric-vs-wall-time.png']
    for name in names:
        image = matplotlib.image.imread(str(out / plots.PLOTS_DIR / name))
        assert image.ndim == 3 and image.shape[0] > 300 and image.shape[1] > 500
        assert image[..., :3].std() > 0.05  # not blank
    # The figures the PNGs are drawn from: the mse panel against batch-size has a
    # line per checkpoint interval, at the mean over the seeds.
    sweep = sweep_lib.load(path)
    layout = execute.Layout.of(sweep, str(out))
    collected, curves = results.collect(sweep, layout)
    figure = plots.by_axis_figure(sweep, collected, 'batch-size')
    (panel,) = [a for a in figure.axes if a.get_title() == 'eval mse']
    lines = {bars.get_label(): list(bars.lines[0].get_ydata()) for bars in panel.containers}
    for every in (10, 15):
        means = [sum(float(r['eval_mse']) for r in rows if r['batch-size'] == str(b)
                     and r['checkpoint-num-steps'] == str(every)) / 2 for b in (8, 16)]
        assert lines['checkpoint-num-steps=%d' % every] == pytest.approx(means)
    # Times and rates on axes from zero; the load each run ran under, and the note.
    ran = [r for r in collected if r['status'] == run_record.SUCCEEDED]
    titles = {label for _, label in results.QUANTITIES} | {plots.LOAD_LABEL}
    assert titles <= {a.get_title() for a in figure.axes}
    assert all(a.get_ylim()[0] == 0 for a in figure.axes if a.get_title() in titles)
    (load,) = [a for a in figure.axes if a.get_title() == plots.LOAD_LABEL]
    assert sorted(y for line in load.lines if line.get_marker() == 'o'
                  for y in line.get_ydata()) == sorted(results.load_of(r) for r in ran)
    assert figure.texts[-1].get_text() == plots.load_note(ran, 'batch-size')  # the note
    figure = plots.metric_vs_time_figure(sweep, curves, sweep.points, collected)
    assert sorted(line.get_label() for line in figure.axes[0].lines) == sorted(
        p.label for p in sweep.points)
    assert figure.axes[0].get_xlim()[0] == 0
    assert plots.throughput_figure(sweep, collected) is None  # one training task throughout


def test_results_of_a_sweep_whose_every_point_failed_have_no_plots(tmp_path):
    """Nothing measured, nothing drawn: the sweep then ends with its "N point(s) failed"
    line (a plot of no panels ended it in a matplotlib traceback)."""
    sweep = sweep_lib.load(_toy_sweep(tmp_path))
    layout = execute.Layout.of(sweep, str(tmp_path / 'out'))
    os.makedirs(layout.out)
    stream = io.StringIO()
    experiment_cli.write_results(sweep, layout, stream)
    assert 'plots:   none (no point measured anything)\n' in stream.getvalue()
    assert os.listdir(os.path.join(layout.out, plots.PLOTS_DIR)) == []
    assert 'Not succeeded: ' in (tmp_path / 'out' / results.RESULTS_MD).read_text()


def _loaded(rows, load, where=lambda row: True):
    """Copies of `rows`, those `where` says at 1-minute load `load`."""
    return [dict(r, load_average_start=load, load_average_end=load) if where(r) else dict(r)
            for r in rows]


def test_figures_and_table_say_when_the_load_and_the_spread_decide(toy):
    """Which points ran under load, in the note and circled; which differences the
    repeats cannot resolve, in the table (issue #48)."""
    path, out, _, _, _ = toy
    sweep = sweep_lib.load(path)
    collected, _ = results.collect(sweep, execute.Layout.of(sweep, str(out)))
    cores = collected[0]['cpu_cores']
    quiet = _loaded(collected, cores / 4)
    figure = plots.by_axis_figure(sweep, quiet, 'batch-size')
    assert figure.texts[-1].get_text().endswith('no point measured under load.')
    assert not [line for a in figure.axes for line in a.lines
                if line.get_markeredgecolor() == 'tab:red']
    busy = _loaded(quiet, cores + 3.5, lambda row: row['batch-size'] == '16')
    figure = plots.by_axis_figure(sweep, busy, 'batch-size')
    assert figure.texts[-1].get_text() == (
        'Measured under load (circled): batch-size=16 ran with a 1-minute load average up '
        'to %.1f on %d cores, so their times and rates include waiting for a CPU.'
        % (cores + 3.5, cores))
    circled = [line for line in figure.axes[0].lines if line.get_markeredgecolor() == 'tab:red']
    assert [list(line.get_xdata()) for line in circled] == [[16], [16]]  # a line per interval
    table = results.markdown(sweep, busy)
    first, *others = [line for line in table.splitlines() if re.match(r'\| (8|16) \|', line)]
    assert 'not resolved' not in first and '(under load)' not in first
    assert all(line.endswith(' (under load) |') for line in others if '| 16 |' in line)
    # Points apart by more than their spread are resolved; within it, not.
    apart = [dict(r, wall_secs=100.0 * (r['batch-size'] == '16') + r['seed']) for r in busy]
    lines = [line for line in results.markdown(sweep, apart).splitlines()
             if re.match(r'\| (8|16) \|', line)]
    wall = [line.split(' | ')[4] for line in lines]
    assert ['not resolved' in cell for cell in wall] == [False, True, False, False], wall


def test_a_second_invocation_skips_everything(toy):
    _, out, _, second, records = toy
    skipped = [line for line in second.splitlines() if 'done earlier' in line]
    assert len(skipped) == 8 and 'training (log' not in second
    for name, text in records.items():
        assert open(run_record.path(str(out / 'runs' / name))).read() == text


def test_a_changed_sweep_is_refused_before_anything_runs(toy):
    path, out, _, _, records = toy
    spec = yaml.safe_load(open(path))
    spec['flags']['eval-frequency-secs'] = 7
    changed = os.path.join(os.path.dirname(path), 'changed.yaml')
    with open(changed, 'w') as f:
        yaml.safe_dump(spec, f)
    proc = _experiment(changed, '--out', out, check=2)
    one_error_line(proc, '%s: point batch-size=8 checkpoint-num-steps=10 seed=1: its '
                   'job-dir was trained with --eval-frequency-secs=0, the sweep now says 7; '
                   'use another --out, or remove that job-dir to retrain it' % changed)
    for name, text in records.items():
        assert open(run_record.path(str(out / 'runs' / name))).read() == text


def _free_port():
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


def _post(url, body, server, log, timeout=120):
    deadline = time.monotonic() + timeout
    while True:
        try:
            request = urllib.request.Request(url, data=json.dumps(body).encode(),
                                             headers={'Content-Type': 'application/json'})
            with urllib.request.urlopen(request, timeout=30) as response:
                return json.load(response)
        except OSError:
            log.seek(0)
            assert server.poll() is None, log.read()[-3000:]
            assert time.monotonic() < deadline, log.read()[-3000:]
            time.sleep(1)


@pytest.mark.slow
def test_hparams_dashboard_compares_the_points_on_eval_metrics(toy):
    """TensorBoard's HTTP API: the sweep's axes and seed, and each point's evaluation."""
    _, out, _, _, _ = toy
    port = _free_port()
    log = open(out / 'tensorboard.log', 'w+')  # pylint: disable=consider-using-with
    server = processes.popen(
        ['bash', os.path.join(REPO_ROOT, 'scripts', 'tensorboard.sh'), str(out / 'runs'),
         '--port', str(port)], stdout=log, stderr=subprocess.STDOUT, env=cli_env())
    try:
        base = 'http://localhost:%d/data/plugin/hparams/' % port
        experiment = _post(base + 'experiment', {'experimentName': ''}, server, log)
        assert [h['name'] for h in experiment['hparamInfos']] == [
            'batch_size', 'checkpoint_num_steps', 'random_seed']
        assert [(m['name'].get('group', ''), m['name']['tag'], m['displayName'])
                for m in experiment['metricInfos']] == [
            ('', 'mse', 'eval mse'), ('', 'loss', 'eval loss')]
        groups = _post(base + 'session_groups', {
            'experimentName': '', 'allowedStatuses': ['STATUS_SUCCESS'],
            'colParams': [{'hparam': 'batch_size'}, {'hparam': 'random_seed'},
                          {'metric': {'tag': 'mse', 'group': ''}}],
            'startIndex': 0, 'sliceSize': 20}, server, log)['sessionGroups']
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
    rows = {r['point']: r for r in _csv_rows(out)}
    assert len(groups) == 8
    for group in groups:
        (session,) = group['sessions']
        point = session['name'].split('/')[-2]
        assert session['name'].endswith('/eval')
        (mse,) = [m['value'] for m in group['metricValues'] if m['name']['tag'] == 'mse']
        assert mse == pytest.approx(float(rows[point]['eval_mse']), rel=1e-6)
        assert group['hparams']['random_seed'] == int(rows[point]['seed'])


def _long_sweep(tmp_path, until):
    """(sweep path, out, the tool's process, the point's job-dir): a sweep of one
    10,000-step point started in the background, once `until(job_dir)` holds."""
    path = _toy_sweep(tmp_path, name='long', axes=None, repeats=1,
                      flags={'train-steps': 10000, 'checkpoint-num-steps': 2000,
                             'eval-frequency-secs': 100000})
    out = tmp_path / 'out'
    log = open(tmp_path / 'first.log', 'w+b')  # pylint: disable=consider-using-with
    tool = processes.popen([sys.executable, '-m', EXPERIMENT, path, '--out', str(out)],
                           cwd=REPO_ROOT, env=cli_env(), stdout=log, stderr=log,
                           stdin=subprocess.DEVNULL)
    job_dir = out / 'runs' / 'seed-1'
    deadline = time.monotonic() + 300
    while not until(job_dir):
        assert tool.poll() is None, (tmp_path / 'first.log').read_text()
        assert time.monotonic() < deadline
        time.sleep(0.2)
    return path, out, tool, job_dir


@pytest.mark.parametrize('stop', ['SIGTERM to the sweep', 'SIGKILL to the trainer'])
def test_a_sweep_stopped_mid_point_resumes_and_finishes(tmp_path, stop):
    """A point stopped (SIGTERM: the trainer saves; kill -9: it leaves its last
    checkpoint and a `running` session as of it) and finished by a rerun is
    reported by all its sessions: times add up, steps from 0."""
    path, out, tool, job_dir = _long_sweep(tmp_path, lambda job_dir: (
        job_dir / 'model.ckpt-2000.index').exists() and (
            stop.startswith('SIGTERM') or run_record.read(str(job_dir))))
    if stop.startswith('SIGTERM'):
        tool.send_signal(signal.SIGTERM)
        assert tool.wait(timeout=120) == 128 + signal.SIGTERM
        output = (tmp_path / 'first.log').read_text()
        assert 'stopped on SIGTERM; rerun the same command to resume' in output
        (stopped,) = run_record.read(str(job_dir))
        assert stopped['status'] == 'terminated' and 2000 <= stopped['steps']['to'] < 10000
    else:
        trainer = json.loads((job_dir / 'LEASE.json').read_text())['pid']
        os.kill(trainer, signal.SIGKILL)
        assert tool.wait(timeout=300) == 1
        assert 'FAILED (exit -9' in (tmp_path / 'first.log').read_text()
        (stopped,) = run_record.read(str(job_dir))
        # The record as of its latest checkpoint, where the rerun resumes.
        assert stopped['status'] == 'running' and stopped['steps']['to'] % 2000 == 0
        assert stopped['wall_secs'] > 0 and stopped['checkpoints']['count'] >= 1

    second = _experiment(path, '--out', out).stdout
    assert '[1/1] seed=1: resuming from its checkpoints (training)' in second
    assert '[1/1] seed=1: done (' in second
    first, resumed = run_record.read(str(job_dir))
    assert first == stopped
    assert resumed['status'] == 'succeeded'
    assert resumed['steps']['from'] == stopped['steps']['to'] and \
        resumed['steps']['to'] == 10000
    (row,) = _csv_rows(out)
    assert row['status'] == 'succeeded' and row['record_sessions'] == '2'
    assert int(row['steps_from']) == 0 and int(row['steps_to']) == 10000
    assert row['unrecorded_steps'] == '0'
    for column, figure in (('wall_secs', lambda s: s['wall_secs']),
                           ('cpu_secs', lambda s: s['cpu_secs']),
                           ('training_secs', lambda s: s['phases']['training_secs']),
                           ('checkpoints', lambda s: s['checkpoints']['count']),
                           ('checkpointing_secs', lambda s: s['checkpoints']['secs'])):
        assert float(row[column]) == pytest.approx(figure(first) + figure(resumed)), column
    training = [s['phases']['training_secs'] for s in (first, resumed)]
    assert float(row['examples_per_sec']) == pytest.approx(
        (first['examples_per_sec'] * training[0] + resumed['examples_per_sec'] * training[1])
        / sum(training))


SHIPPED = sorted(os.listdir(os.path.join(REPO_ROOT, 'configs', 'experiments')))


@pytest.mark.parametrize('name', SHIPPED)
def test_the_shipped_sweeps_are_sound_at_both_sizes(name):
    path = os.path.join(REPO_ROOT, 'configs', 'experiments', name)
    quick, full = sweep_lib.load(path), sweep_lib.load(path, full=True)
    assert quick.name == name[:-len('.yaml')] and quick.description
    assert quick.points and len(full.points) >= len(quick.points)
    steps = lambda s: max(t or 0 for p in s.points for t in p.targets)  # noqa: E731
    assert steps(quick) < steps(full) and steps(full) >= 1000


@pytest.mark.parametrize('spec, where, message', [
    ({'trainer': 'taxi', 'axis': {'batch-size': [32]}}, 'axis', 'unknown key (expected one of'),
    ({'trainer': 'taxi', 'axes': {'batch-sizes': [32]}}, 'axes.batch-sizes',
     'unknown flag --batch-sizes (see python -m taxi_estimator.task --help)'),
    ({'trainer': 'taxi', 'axes': {'batch-size': []}}, 'axes.batch-size',
     'empty axis; give at least one value'),
    ({'trainer': 'taxi', 'axes': {'batch-size': [32, 0]}}, 'axes.batch-size[1]',
     'argument --batch-size: expected an integer > 0'),
    ({'trainer': 'taxi', 'flags': {'random-seed': 3}}, 'flags.random-seed',
     'set by the sweep'),
    ({'trainer': 'cifar10', 'points': [{'sync': 'yes'}]}, 'points[0].sync',
     '--sync is a switch: expected true or false'),
    ({'trainer': 'taxi', 'metric': 'mse'}, 'metric', 'taxi evaluates accuracy, '),
    ({'package': 'packages', 'module': 'toy_estimator.trainer', 'axes': {'sync': [True]}},
     'axes.sync', 'unknown flag --sync (see python -m toy_estimator.trainer --help)'),
])
def test_a_bad_sweep_file_is_one_error_line_before_anything_runs(tmp_path, spec, where,
                                                                  message):
    write_guide_package(tmp_path / 'packages')
    path = tmp_path / 'bad.yaml'
    path.write_text(yaml.safe_dump(spec))
    proc = _experiment(str(path), '--out', tmp_path / 'out', check=2)
    one_error_line(proc, '%s: %s: %s' % (path, where, message))
    assert not (tmp_path / 'out').exists()


def _billion_laughs():
    """Nine levels of nine aliases in a point's value: 10**9 strings once expanded
    (the value is checked, so its expansion was built: a MemoryError)."""
    levels = ['&a [lol, lol, lol, lol, lol, lol, lol, lol, lol]']
    for previous, name in zip('abcdefgh', 'bcdefghi'):
        levels.append('&%s [%s]' % (name, ', '.join(['*' + previous] * 9)))
    return 'trainer: taxi\npoints:\n- batch-size: [\n    %s]\n' % ',\n    '.join(levels)


MILLION = ''.join('  %s: [%s]\n' % (flag, ', '.join(str(v) for v in range(1, 11))) for flag in (
    'batch-size', 'train-steps', 'checkpoint-num-steps', 'eval-steps', 'num-epochs',
    'save-summary-steps'))
HOSTILE_SWEEPS = [
    ('a grid of a million points', 'trainer: taxi\naxes:\n' + MILLION,
     'S: axes (10 x 10 x 10 x 10 x 10 x 10 values) x repeats (1) x sessions (1) = 1,000,000 '
     'training runs; a sweep holds at most 10,000: give fewer values, points or repeats'),
    ('repeats: 1000000000', 'trainer: taxi\naxes: {batch-size: [8, 16]}\n'
                            'repeats: 1000000000\n',
     'S: axes (2 values) x repeats (1,000,000,000) x sessions (1) = 2,000,000,000 training '
     'runs; a sweep holds at most 10,000: give fewer values, points or repeats'),
    ('100,000 nested [', 'trainer: taxi\nflags: ' + '[' * 100000 + '\n',
     'S line 2: flags[0][0]...: nested more than 16 levels deep'),
    ('Latin-1', 'trainer: taxi\ndescription: caf\xe9\n'.encode('latin-1'),
     'S line 2: not UTF-8 text (byte 0xe9 at column 17); save the file as UTF-8'),
    ('billion laughs', _billion_laughs(),
     'S line 8: points[0].batch-size[4][1]: more than 20000 values once aliases are '
     'expanded; a sweep file has far fewer'),
    ('a named pipe', None, 'S is a pipe, not a regular file'),
]


def _limit_memory():
    # Each is refused long before this; one that expanded what it declares
    # would hit it (a MemoryError traceback) instead of the line.
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))


@pytest.mark.parametrize('dry_run', [False, True], ids=['run', 'dry-run'])
@pytest.mark.parametrize('name,content,expected', HOSTILE_SWEEPS,
                         ids=[case[0] for case in HOSTILE_SWEEPS])
def test_a_hostile_sweep_file_is_one_line_at_once(tmp_path, name, content, expected, dry_run):
    """Sizes are declared before anything is built: each is refused in seconds, in
    1 GiB, also with --dry-run (a million points ran for minutes into 1.3 GB)."""
    path = tmp_path / 'hostile.yaml'
    if content is None:
        os.mkfifo(path)  # nothing ever writes: a read would wait for good
    else:
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    proc = processes.run([sys.executable, '-m', EXPERIMENT, str(path), '--out',
                          str(tmp_path / 'out')] + (['--dry-run'] if dry_run else []), 60,
                         cwd=REPO_ROOT, env=cli_env(), stdin=subprocess.DEVNULL,
                         preexec_fn=_limit_memory)
    one_error_line(proc, expected.replace('S', str(path), 1))
    assert not (tmp_path / 'out').exists(), name


def test_long_point_ids_are_shortened_with_a_hash_and_stay_unique(tmp_path):
    """Values of 300 characters: each job-dir and log name is at most 120 characters,
    ends in a hash of the whole id, and a rerun finds the same (was Errno 36)."""
    long_16, long_8 = '0' * 300 + '16', '0' * 300 + '8'
    path = _toy_sweep(tmp_path, name='long-ids', axes=None, repeats=1,
                      points=[{'batch-size': long_16}, {'batch-size': long_8}],
                      flags={'train-steps': 6, 'checkpoint-num-steps': 3,
                             'eval-frequency-secs': 0})
    out = tmp_path / 'out'
    first = _experiment(path, '--out', out, check=0).stdout
    ids = sorted(name for name in os.listdir(out / 'runs') if not name.startswith('events.'))
    assert len(ids) == 2 and ids[0] != ids[1], ids
    for point_id in ids:
        assert len(point_id) == sweep_lib.MAX_POINT_ID
        assert re.fullmatch(r'batch-size-0+-[0-9a-f]{12}', point_id), point_id
        assert (out / 'logs' / (point_id + '.log')).is_file()
        (session,) = run_record.read(str(out / 'runs' / point_id))
        assert session['status'] == 'succeeded'
    assert sorted(session['flags']['batch_size'] for session in (
        run_record.read(str(out / 'runs' / i))[0] for i in ids)) == [8, 16]
    assert first.count(': done (') == 2
    rows = _csv_rows(out)
    assert sorted(r['point'] for r in rows) == ids
    second = _experiment(path, '--out', out, check=0).stdout
    assert second.count('done earlier') == 2


def test_a_second_sweep_on_the_same_out_is_refused_naming_the_first(tmp_path):
    """Two sweeps on one --out both ran, and met in each other's job-dir leases."""
    path, out, first, job_dir = _long_sweep(
        tmp_path, lambda job_dir: (job_dir / 'LEASE.json').exists())
    try:
        second = _experiment(path, '--out', out, check=2)
        one_error_line(second, '--out %s is in use by another sweep: pid %d on %s since 20'
                       % (out, first.pid, socket.gethostname()))
        assert second.stderr.rstrip().endswith(
            ' -m %s %s --out %s (lock %s); wait for it to finish or use another --out'
            % (EXPERIMENT, path, out, out / 'LOCK.json'))
        assert first.poll() is None  # untouched: its point trains on
        # A dry run writes nothing and is not refused.
        assert _experiment(path, '--out', out, '--dry-run', check=0).stdout.startswith('== ')
    finally:
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=120) == 128 + signal.SIGTERM
    assert not (out / 'LOCK.json').exists()
    (stopped,) = run_record.read(str(job_dir))
    assert stopped['status'] == 'terminated'


@pytest.mark.parametrize('exists', [False, True], ids=['new', 'existing'])
def test_out_on_a_read_only_file_system_is_one_line(tmp_path, exists):
    path = _toy_sweep(tmp_path, axes={'batch-size': [8]}, repeats=1)
    mount = tmp_path / 'ro'
    with mounted_tmpfs(mount, '1m'):
        if exists:
            (mount / 'out').mkdir()
        subprocess.run(['mount', '-o', 'remount,ro', str(mount)], check=True)
        proc = _experiment(path, '--out', mount / 'out', check=2)
        one_error_line(proc, '--out %s is on a read-only file system (%s)' % (
            mount / 'out', mount / 'out' if exists else mount))


def test_a_finished_sweep_rerun_on_a_full_disk_is_one_line_and_then_completes(tmp_path):
    """24 KiB left: the rerun writes nothing partial, says so in one line (the plots
    were two chained matplotlib/PIL tracebacks); after freeing space it completes."""
    path = _toy_sweep(tmp_path, name='small', axes={'batch-size': [8]}, repeats=1,
                      flags={'train-steps': 6, 'checkpoint-num-steps': 3,
                             'eval-frequency-secs': 0})
    with mounted_tmpfs(tmp_path / 'fs', '32m') as mount:
        out = os.path.join(mount, 'out')
        _experiment(path, '--out', out, check=0)
        before = {name: open(os.path.join(out, name), 'rb').read()
                  for name in (results.RESULTS_CSV, results.RESULTS_MD)}
        shutil.rmtree(os.path.join(out, plots.PLOTS_DIR))
        filler = os.path.join(mount, 'filler')
        with open(filler, 'wb', buffering=0) as f:
            for chunk in (1 << 20, 4 << 10):  # fill the file system to the last page
                try:
                    while True:
                        f.write(b'\0' * chunk)
                except OSError:
                    pass
        os.truncate(filler, os.path.getsize(filler) - (24 << 10))  # leave 24 KiB
        free = os.statvfs(mount)
        assert free.f_bavail * free.f_frsize <= 28 << 10
        proc = _experiment(path, '--out', out, check=None)
        assert proc.returncode == 1, proc.stderr[-3000:]
        assert 'Traceback' not in proc.stderr, proc.stderr[-3000:]
        (line,) = [line for line in proc.stderr.splitlines() if line.startswith('error:')]
        assert line == proc.stderr.strip().splitlines()[-1]
        assert line.startswith('error: the file system of --out %s is full (No space left on '
                               'device) (writing %s' % (out, out)), line
        assert line.endswith('free space and rerun the same command (they are skipped)')
        leftovers = [os.path.join(d, n) for d, _, names in os.walk(out) for n in names
                     if n.endswith('.tmp') or '.tmp-' in n]
        assert leftovers == []
        for name, data in before.items():  # whole: the old file or the new one
            assert open(os.path.join(out, name), 'rb').read() == data
        os.remove(filler)
        again = _experiment(path, '--out', out, check=0)
        assert 'done earlier' in again.stdout
        assert sorted(os.listdir(os.path.join(out, plots.PLOTS_DIR))) == [
            'by-batch-size.png', 'metric-vs-wall-time.png']


def test_dry_run_prints_each_local_command(tmp_path):
    path = _toy_sweep(tmp_path, axes={'batch-size': [8, 16]},
                      cluster={'parameter-server-count': 1, 'worker-count': 1})
    out = tmp_path / 'out'
    proc = _experiment(path, '--out', out, '--dry-run')
    headers = re.findall(r'^== \[(\d)/4\] (.*): (\S+)$', proc.stdout, re.M)
    assert [h[0] for h in headers] == ['1', '2', '3', '4']
    assert headers[0][1] == 'batch-size=8 seed=1'
    commands = [line for line in proc.stdout.splitlines()
                if 'estimator_trainers.tools.launcher' in line]
    assert len(commands) == 4
    for (_, _, job_dir), command in zip(headers, commands):
        assert '--job-dir %s ' % job_dir in command
        assert '--parameter-server-count 1 --worker-count 1 --evaluator-count 0' in command
        assert '-m toy_estimator.trainer --data-dir %s' % (tmp_path / 'data') in command
    assert '--random-seed=2' in commands[2] and '--batch-size=8' in commands[2]
    assert not out.exists() and not (tmp_path / 'data').exists()


def test_dry_run_prints_each_flag_once_as_the_trainer_takes_it(tmp_path):
    """CIFAR-10's local default --train-steps=1000 and a sweep's 200 were both on the
    line; the point's own value is the one left, once, where it was given."""
    path = tmp_path / 'cifar.yaml'
    path.write_text(yaml.safe_dump({'trainer': 'cifar10', 'flags': {
        'num-layers': 8, 'train-steps': 200, 'sync': True}, 'points': [{'sync': False}]}))
    proc = _experiment(path, '--out', tmp_path / 'out', '--dry-run')
    (command,) = [line for line in proc.stdout.splitlines() if 'cifar10_main' in line]
    words = command.split()
    assert [w for w in words if 'train-steps' in w] == ['--train-steps=200']
    assert [w for w in words if w.endswith('sync')] == ['--no-sync']
    parser = registry.get('cifar10').make_parser()
    assert flags.last_wins(['--train-steps=1000', '--num-layers', '8', '--train-steps', '20',
                            '--sync', '--hidden', '--no-sync'], parser) == [
        '--num-layers', '8', '--train-steps', '20', '--hidden', '--no-sync']


def test_a_sweep_writes_under_experiments_by_default(tmp_path):
    """Without --out a sweep writes under ./experiments/<name>, which git ignores
    (and so image builds and the sdist leave out)."""
    path = _toy_sweep(tmp_path, name='no-out', axes={'batch-size': [8]}, repeats=1)
    work = tmp_path / 'work'
    work.mkdir()
    proc = processes.run([sys.executable, '-m', EXPERIMENT, path, '--dry-run'], 120,
                         cwd=str(work), env=cli_env())
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert re.search(r'^== \[1/1\] .*: %s/\S+$' % re.escape(
        str(work / 'experiments' / 'no-out' / 'runs')), proc.stdout, re.M), proc.stdout
    assert not (work / 'experiments').exists()
    ignored = subprocess.run(['git', 'check-ignore', '-q', 'experiments/no-out/runs/p'],
                             cwd=REPO_ROOT, check=False)
    assert ignored.returncode == 0


def test_vertex_dry_run_bodies_fit_the_aiplatform_schema(tmp_path):
    configs = os.path.join(REPO_ROOT, 'configs')
    path = tmp_path / 'cloud.yaml'
    path.write_text(yaml.safe_dump({
        'name': 'cpu-vs-gpu', 'trainer': 'cifar10', 'target': 'vertex',
        'flags': {'train-steps': 100, 'num-layers': 8},
        'axes': {'config': [os.path.join(configs, 'cmle_config.yaml'),
                            os.path.join(configs, 'cmle_config_gpu.yaml')]},
        'repeats': 2,
        'vertex': {'project': 'test-project', 'bucket': 'gs://bkt', 'max_parallel': 2}}))
    proc = _experiment(str(path), '--dry-run', '--out', tmp_path / 'out')
    sections = re.split(r'^== ', proc.stdout, flags=re.M)[1:]
    assert len(sections) == 4
    seen = set()
    for section in sections:
        header, _, text = section.partition('\n')
        label, job_dir = re.match(r'\[\d/4\] (.*): (\S+)$', header).groups()
        request = json.loads(text[:text.rindex('}') + 1])
        assert request['method'] == 'POST'
        assert request['uri'].startswith(
            'https://us-central1-aiplatform.googleapis.com/v1/projects/test-project/'
            'locations/us-central1/customJobs')
        body = request['body']
        schema.check('aiplatform', 'v1', 'GoogleCloudAiplatformV1CustomJob', body)
        assert job_dir.startswith('gs://bkt/experiments/cpu-vs-gpu/')
        assert body['jobSpec']['baseOutputDirectory']['outputUriPrefix'] == job_dir
        seed = re.search(r'seed=(\d)', label).group(1)
        for pool in body['jobSpec']['workerPoolSpecs']:
            args = (pool.get('containerSpec') or pool['pythonPackageSpec'])['args']
            assert '--random-seed=%s' % seed in args and '--job-dir=%s' % job_dir in args
            assert '--train-steps=100' in args and '--num-layers=8' in args
        chief = body['jobSpec']['workerPoolSpecs'][0]['machineSpec']
        assert ('acceleratorType' in chief) == ('cmle_config_gpu' in label)
        seen.add((label, job_dir))
    assert len(seen) == 4
    assert not (tmp_path / 'out').exists()


@pytest.mark.slow
def test_rehearse_runs_each_point_without_an_account(tmp_path):
    """target: rehearse, no credentials, no project: each point is the exact Vertex AI
    job, rehearsed into a gs:// job-dir on local storage the sweep starts, its data
    given from this machine; the job-dirs are kept in <out>/local-storage, where a
    second invocation finds every record."""
    (tmp_path / 'data').mkdir()
    data = taxi_trips.write_data_step_files(tmp_path / 'data', 800, 200)
    path = tmp_path / 'rehearse.yaml'
    path.write_text(yaml.safe_dump({
        'name': 'rehearsed', 'trainer': 'taxi', 'target': 'rehearse',
        'flags': dict([flag[2:].split('=', 1) for flag in taxi_data_flags('gs://taxi-data/data')],
                      **{'train-steps': 300, 'checkpoint-num-steps': 100,
                         'max-worker-delay-secs': 0}),
        'axes': {'batch-size': [64]},  # one point: each is a whole rehearsed cluster
        'rehearse': {'config': os.path.join(REPO_ROOT, 'configs', 'config_ps.yaml'),
                     'bucket': 'gs://taxi-data', 'job_dir': 'gs://taxi-data/sweeps/rehearsed',
                     'max_replicas': 1,
                     'options': ['--executor-image-uri',
                                 'us-docker.pkg.dev/vertex-ai/training/tf-cpu.2-15.py310:latest',
                                 '--local-input', 'gs://taxi-data/data=%s' % data]}}))
    env = cloud_fakes.no_account_env(tmp_path)
    out = tmp_path / 'out'
    proc = _experiment(str(path), '--out', out, env=env, timeout=1800)
    assert proc.stdout.count(': done (') == 1, proc.stdout[-3000:]
    mirror = out / 'local-storage' / 'taxi-data'
    assert proc.stdout.startswith(
        'note: rehearse.options has --local-input: rehearsing on local storage '
        '(fake-gcs-server) standing in for gs://taxi-data; nothing reaches Google Cloud, and '
        'what the job writes is kept in %s\n' % (out / 'local-storage'))
    assert 'local storage: gs://taxi-data/sweeps/rehearsed is kept in %s\n' % (
        mirror / 'sweeps' / 'rehearsed') in proc.stdout
    rows = _csv_rows(out)
    assert [r['batch-size'] for r in rows] == ['64']
    for row in rows:
        assert row['job_dir'] == 'gs://taxi-data/sweeps/rehearsed/%s' % row['point']
        job_dir = mirror / row['job_dir'][len('gs://taxi-data/'):]
        (session,) = json.loads((job_dir / 'run_record.json').read_text())['sessions']
        assert row['status'] == session['status'] == 'succeeded'
        assert session['cluster']['strategy'] == 'parameter_server'
        assert session['cluster']['training_tasks'] == 2  # chief + 1 of 4 workers
        # Each task that trained records its own rate: the chief in its session,
        # the worker in its own record, which may come after the chief's.
        workers = dict(session['workers'])
        for task in ('chief', 'worker-0'):
            record = job_dir / 'workers' / task / 'run_record.json'
            if task not in workers and record.exists():
                (entry,) = json.loads(record.read_text())['sessions']
                assert entry['job_id'] == session['job_id']
                workers[task] = entry['throughput']
        rates = dict(kv.split('=') for kv in row['worker_examples_per_sec'].split(';'))
        assert set(rates) == set(workers) == {'chief', 'worker-0'}
        assert any(workers[task]['examples_per_sec'] for task in rates)
        for task, rate in rates.items():
            assert rate == repr(workers[task]['examples_per_sec'])
        assert float(row['eval_auc']) == tf.constant(
            session['final_metrics']['auc'], tf.float32).numpy()
    # A second invocation loads the records from <out>/local-storage and runs nothing.
    again = _experiment(str(path), '--out', out, env=env).stdout
    assert again.count('done earlier') == 1


# Stands in for `python -m estimator_trainers.tools.cloud` (tests never reach Google):
# `submit ... --stream-logs` records the job it creates (`job_record`, where the
# runner asks; it prints a decoy name: the runner never reads the output), "runs" it
# for FAKE_CLOUD_SECS (default 1.5) and writes its run record into the gs:// job-dir
# (google-cloud-storage to the emulator; not with FAKE_CLOUD_NO_STORAGE);
# `logs NAME` follows a job submitted before; `submit ... --estimate-only` prints an
# estimate's figures. Every call but the estimates is noted in FAKE_CLOUD_LOG.
FAKE_CLOUD_CLI = r'''
import json, os, sys, time
if '--estimate-only' in sys.argv:
    print(json.dumps({'usd_per_hour': 1.0, 'low_usd': 0.05, 'high_usd': 0.1,
                      'low_secs': 180, 'high_secs': 360, 'time': 'model'}))
    sys.exit(0)

def note(*words):
    with open(os.environ['FAKE_CLOUD_LOG'], 'a') as f:
        f.write(' '.join(words) + '\n')

def finish(job_dir):
    if os.environ.get('FAKE_CLOUD_NO_STORAGE'):
        return
    from google.cloud import storage
    bucket, _, prefix = job_dir[len('gs://'):].partition('/')
    record = {'format': 1, 'sessions': [{
        'status': 'succeeded', 'steps': {'from': 0, 'to': 10, 'target': 10},
        'started_at_unix': time.time(), 'wall_secs': 1.0, 'examples_per_sec': 5.0,
        'final_metrics': {'accuracy': 0.5, 'global_step': 10}}]}
    storage.Client(project='test-project').bucket(bucket).blob(
        prefix + '/run_record.json').upload_from_string(json.dumps(record))

argv = sys.argv[1:]
jobs_file = os.environ['FAKE_CLOUD_LOG'] + '.jobs'
if argv[0] == 'submit':
    job_dir, name = argv[argv.index('--job-dir') + 1], argv[argv.index('--job-name') + 1]
    job = 'projects/test-project/locations/us-central1/customJobs/%s' % name
    with open(jobs_file, 'a') as f:
        f.write('%s %s\n' % (job, job_dir))
    from estimator_trainers import job_record
    job_record.write_if_asked(os.environ, job, 'us-central1', 'test-project')
    print('projects/decoy/locations/us-central1/customJobs/not-%s' % name, flush=True)
    note('start', name, repr(time.time()))
    time.sleep(float(os.environ.get('FAKE_CLOUD_SECS', '1.5')))
    note('end', name, repr(time.time()))
    finish(job_dir)
elif argv[0] == 'logs':
    note('follow', argv[1])
    finish(dict(line.split() for line in open(jobs_file))[argv[1]])
'''


@pytest.mark.slow
def test_vertex_submits_at_most_max_parallel_and_a_rerun_follows_its_jobs(
        gcs, tmp_path, monkeypatch):
    for name, value in gcs.env().items():
        monkeypatch.setenv(name, value)
    bucket = gcs.create_bucket('sweeps')
    fake = tmp_path / 'fake_cloud.py'
    fake.write_text(FAKE_CLOUD_CLI)
    log = tmp_path / 'cloud.log'
    monkeypatch.setenv('FAKE_CLOUD_LOG', str(log))
    path = tmp_path / 'vertex.yaml'
    path.write_text(yaml.safe_dump({
        'name': 'parallel', 'trainer': 'cifar10', 'target': 'vertex',
        'flags': {'train-steps': 10}, 'axes': {'num-layers': [8, 14, 20]}, 'repeats': 2,
        'vertex': {'config': os.path.join(REPO_ROOT, 'configs', 'cmle_config.yaml'),
                   'project': 'test-project', 'bucket': bucket, 'max_parallel': 2,
                   'poll_interval': 0}}))
    sweep = sweep_lib.load(str(path))
    layout = execute.Layout.of(sweep, str(tmp_path / 'out'))

    def run():
        out = io.StringIO()
        runner = execute.Runner(sweep, layout, out, execute.Signals(),
                                cloud_cli=[sys.executable, str(fake)])
        runner.run(execute.read_records(sweep, layout))
        return out.getvalue(), runner.failed

    output, failed = run()
    assert not failed and output.count(': done (accuracy 0.5') == 6, output
    assert ("estimate: the sweep's 6 jobs: $0.30-$0.60 for the 6 with a predicted time"
            in output.splitlines())  # summed before the first starts
    calls = [line.split() for line in log.read_text().splitlines()]
    events = sorted((float(t), +1 if kind == 'start' else -1)
                    for kind, _, t in calls if kind in ('start', 'end'))
    running = peak = 0
    for _, change in events:
        running += change
        peak = max(peak, running)
    assert peak == 2  # bounded, and parallel
    jobs = json.loads((tmp_path / 'out' / execute.VERTEX_STATE).read_text())
    assert sorted(jobs) == sorted('%s#0' % p.id for p in sweep.points)
    rows, _ = results.collect(sweep, layout)
    assert [r['status'] for r in rows] == ['succeeded'] * 6
    assert {r['job_dir'] for r in rows} == {'%s/experiments/parallel/%s' % (bucket, p.id)
                                            for p in sweep.points}

    # A point whose record is missing was submitted before: the rerun follows its job.
    lost = sweep.points[3]
    bucket_name, _, prefix = layout.job_dir(lost)[len('gs://'):].partition('/')
    from google.cloud import storage  # pylint: disable=import-outside-toplevel
    storage.Client(project='test-project').bucket(bucket_name).blob(
        prefix + '/run_record.json').delete()
    log.write_text('')
    output, failed = run()
    assert not failed and output.count('done earlier') == 5
    assert '[4/6] %s: following %s' % (lost.label, jobs[lost.id + '#0']) in output
    assert log.read_text().split() == ['follow', jobs[lost.id + '#0']]


def test_the_runner_keeps_the_job_name_the_cloud_command_records(tmp_path, monkeypatch):
    """The submitted job's name comes from the record the cloud command writes where
    the runner asks (`job_record`), not from its output (which here names a decoy)."""
    fake = tmp_path / 'fake_cloud.py'
    fake.write_text(FAKE_CLOUD_CLI)
    monkeypatch.setenv('FAKE_CLOUD_LOG', str(tmp_path / 'cloud.log'))
    monkeypatch.setenv('FAKE_CLOUD_SECS', '0')
    monkeypatch.setenv('FAKE_CLOUD_NO_STORAGE', '1')
    path = tmp_path / 'vertex.yaml'
    path.write_text(yaml.safe_dump({
        'name': 'recorded', 'trainer': 'cifar10', 'target': 'vertex',
        'flags': {'train-steps': 10},
        'vertex': {'config': os.path.join(REPO_ROOT, 'configs', 'cmle_config.yaml'),
                   'project': 'test-project', 'bucket': 'gs://bkt'}}))
    sweep = sweep_lib.load(str(path))
    layout = execute.Layout.of(sweep, str(tmp_path / 'out'))
    runner = execute.Runner(sweep, layout, io.StringIO(), execute.Signals(),
                            cloud_cli=[sys.executable, str(fake)])
    state, state_path = {}, str(tmp_path / 'out' / execute.VERTEX_STATE)
    point = sweep.points[0]
    progress = execute.Progress(total=1, stream=io.StringIO())
    _, _, process, _, record = runner._launch(  # pylint: disable=protected-access
        point, 0, state, progress)
    assert process.wait(timeout=60) == 0
    runner._note_job(point, 0, record, state, state_path)  # pylint: disable=protected-access
    name = 'projects/test-project/locations/us-central1/customJobs/%s' % execute.job_name(
        sweep, point, 0)
    assert state == {point.id + '#0': name}
    assert json.loads(open(state_path).read()) == state
    assert job_record.read(record) == job_record.JobRecord(name, 'us-central1', 'test-project')
