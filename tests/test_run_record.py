"""Run records (`<job-dir>/run_record.json`) and same-seed runs, for every trainer.

Each trainer trains twice into fresh job-dirs with the same `--random-seed`
and small steps: the two runs' training losses and evaluation metrics must be
equal, and the first run's record must say what its console, its event files
(TensorBoard's reader) and this machine say. A resumed job, a terminated one,
a refused one and a multi_worker_mirrored cluster are recorded too; the
gs:// job-dir is in tests/test_gcs.py.
"""
import json
import os
import re
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time

import pytest
import tensorflow as tf
from tensorboard.backend.event_processing import event_accumulator

import console_lines
import mnist_archive
import processes
import taxi_trips
from cluster_helpers import launch
from conftest import cli_env, one_error_line, run_module
from estimator_trainers import devices
from estimator_trainers import run_record

SEED = 11
TRAINERS = {
    'taxi': ('taxi_estimator.task', ['--batch-size', '32', '--train-steps', '40',
                                     '--checkpoint-num-steps', '10']),
    'cifar10': ('cifar10_estimator.cifar10_main', [
        '--num-layers', '8', '--train-batch-size', '32', '--eval-batch-size', '50',
        '--train-steps', '30', '--checkpoint-num-steps', '10']),
    'keras': ('keras_estimator.trainer', ['--batch-size', '32', '--train-steps', '30',
                                          '--checkpoint-num-steps', '10']),
}
# What each trainer's console says by default (`console_lines`).
CONSOLE = {trainer: {'data', 'checkpoint', 'progress', 'evaluation', 'export',
                     'final evaluation', 'summary'} | extra
           for trainer, extra in (('taxi', {'step target'}), ('cifar10', set()),
                                  ('keras', set()))}
# An evaluation at every checkpoint's step (no time budget: the same steps in both
# runs), training summaries every 5 steps, progress lines every 10.
CADENCE = ['--eval-every-steps', '10', '--eval-frequency-secs', '0',
           '--save-summary-steps', '5', '--log-step-count-steps', '10']


@pytest.fixture(scope='module')
def data_flags(tmp_path_factory, cifar10_data_dir):
    """Each trainer's data flags, on small generated data sets."""
    folder = tmp_path_factory.mktemp('record_data')
    train, evals = taxi_trips.write_layout_files(folder, train_rows=400, eval_rows=100)
    mnist_dir = str(folder / 'mnist')
    source = str(folder / 'mnist.npz')
    run_module('keras_estimator.data', '--data-dir', mnist_dir, '--source', source,
               '--sha256', mnist_archive.write_npz(source), check=0)
    return {'taxi': ['--train-files', train, '--eval-files', evals],
            'cifar10': ['--data-dir', cifar10_data_dir],
            'keras': ['--data-dir', mnist_dir]}


def _train(trainer, data_flags, job_dir, *extra, check=0):
    module, flags = TRAINERS[trainer]
    return run_module(module, *data_flags[trainer], '--job-dir', job_dir, *flags, *CADENCE,
                      *extra, check=check)


@pytest.fixture(scope='module', params=sorted(TRAINERS))
def twice(request, data_flags, tmp_path_factory):
    """(trainer, [(job-dir, stderr)] of two runs with the same seed)."""
    trainer = request.param
    runs = []
    for name in ('first', 'second'):
        job_dir = tmp_path_factory.mktemp('%s_%s' % (trainer, name)) / 'job'
        proc = _train(trainer, data_flags, str(job_dir), '--random-seed', str(SEED))
        runs.append((job_dir, proc.stderr))
    return trainer, runs


def _scalars(job_dir, run=''):
    """{tag: [(step, value)]} of one run of a job-dir, through TensorBoard's reader."""
    acc = event_accumulator.EventAccumulator(os.path.join(str(job_dir), run),
                                             size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)]
            for tag in acc.Tags()['scalars']}


def _progress_values(stderr):
    """The `name = value` pairs of every progress line, without the rates."""
    return [re.sub(r', \d[\d.]* steps/s, ETA \S+:|\([\d.]+ examples/sec, average [\d.]+\)',
                   '', line.split(' INFO ', 1)[1])
            for line in stderr.splitlines() if re.search(r' INFO step \d+/\d+', line)]


def test_same_seed_gives_the_same_losses_and_eval_metrics(twice):
    _, ((first, first_log), (second, second_log)) = twice
    progress = _progress_values(first_log)
    assert len(progress) >= 3 and progress == _progress_values(second_log)
    train = _scalars(first)
    assert len(train['loss']) >= 4 and train['loss'] == _scalars(second)['loss']
    evaluated = _scalars(first, 'eval')
    assert len(evaluated['loss']) >= 3, evaluated['loss']
    assert evaluated == _scalars(second, 'eval')


def _summary_block(stderr):
    block = stderr[stderr.index('INFO Run summary:'):].splitlines()[1:8]
    return dict(re.match(r'  (\S+(?: \S+)?)\s{2,}(.*)', line).groups() for line in block)


def test_the_record_says_what_the_run_did(twice):
    trainer, ((job_dir, stderr), _) = twice
    (session,) = run_record.read(str(job_dir))
    target = int(TRAINERS[trainer][1][TRAINERS[trainer][1].index('--train-steps') + 1])
    assert session['status'] == 'succeeded' and session['exit_code'] == 0
    assert session['error'] is None
    assert session['steps'] == {'from': 0, 'to': target, 'target': target}
    phases = session['phases']
    assert set(phases) == {'startup_secs', 'training_secs', 'evaluating_secs',
                           'checkpointing_secs', 'export_secs', 'closing_hooks_secs',
                           'closing_session_secs', 'waiting_for_evaluation_thread_secs',
                           'writing_summaries_secs', 'waiting_for_workers_secs',
                           'other_secs'}
    assert all(phases[p] > 0 for p in ('startup_secs', 'training_secs', 'evaluating_secs',
                                       'checkpointing_secs', 'export_secs',
                                       'closing_session_secs', 'writing_summaries_secs')), phases
    assert phases['waiting_for_workers_secs'] < 0.1  # one process: no other task
    assert sum(phases.values()) == pytest.approx(session['wall_secs'])
    # Every second named: what is left is the driver's own few lines.
    assert 0 <= phases['other_secs'] < 1, phases
    # A quiet console: one line per event of the run (issue #48).
    console_lines.assert_kinds(stderr, CONSOLE[trainer])
    assert 0 < session['evaluations']['final_secs'] <= phases['evaluating_secs']
    assert 0 < session['cpu_secs']
    # Rates and counts as the run itself printed them.
    block = _summary_block(stderr)
    average = block['examples/sec'].split()
    assert average[0] == 'average' and '%.1f' % session['examples_per_sec'] == average[1]
    # One examples/sec: the last progress line's average is the summary's.
    last_line = re.findall(r' INFO step (\d+)/\d+, .*average ([\d.]+)\)', stderr)[-1]
    assert last_line == (str(target), average[1])
    assert session['workers']['local']['steps'] == target
    assert session['workers']['local']['examples_per_sec'] > 0
    saves = re.findall(r'INFO Saving checkpoints for (\d+) into', stderr)
    assert session['checkpoints']['count'] == len(saves) == target // 10 + 1
    assert session['checkpoints']['every_steps'] == 10
    assert 0 < session['checkpoints']['mean_secs'] < session['checkpoints']['secs']
    evaluations = int(re.search(r'(\d+) evaluations?\)', block['wall time']).group(1))
    assert session['evaluations']['count'] == evaluations
    # Final metrics: the last point of each eval curve.
    final = session['final_metrics']
    assert final['global_step'] == target
    curves = _scalars(job_dir, 'eval')
    assert set(final) - {'global_step'} == set(curves)
    for tag, points in curves.items():
        assert points[-1][0] == target
        assert tf.constant(final[tag], tf.float32).numpy() == points[-1][1], tag
    # The run's settings and this machine.
    assert session['flags']['random_seed'] == SEED and session['flags']['job_dir'] == str(job_dir)
    assert session['determinism'] == {'random_seed': SEED, 'op_determinism': True}
    assert session['cluster']['training_tasks'] == 1
    assert session['cluster']['strategy'] == 'none'
    expected = (devices.resolve_mixed_precision('auto', 0) if trainer == 'cifar10'
                else 'none')
    assert session['precision']['compute'] == {'none': 'float32'}.get(expected, expected)
    with open('/proc/cpuinfo') as f:
        model = re.search(r'^model name\s*: (.*)$', f.read(), re.M).group(1).strip()
    hardware = session['hardware']
    assert hardware['cpu_model'] == model and hardware['cpu_cores'] == os.cpu_count()
    assert hardware['gpus'] == [] and len(hardware['load_average']['end']) == 3
    assert session['software']['tensorflow'] == tf.__version__
    assert session['export_dir'].startswith(str(job_dir / 'export'))


def test_a_resumed_job_appends_a_session(data_flags, tmp_path):
    job_dir = str(tmp_path / 'job')
    _train('taxi', data_flags, job_dir, '--train-steps', '20')
    _train('taxi', data_flags, job_dir, '--train-steps', '40')
    first, second = run_record.read(job_dir)
    assert first['steps'] == {'from': 0, 'to': 20, 'target': 20}
    assert second['steps'] == {'from': 20, 'to': 40, 'target': 40}
    assert first['status'] == second['status'] == 'succeeded'
    assert second['started_at_unix'] > first['started_at_unix'] + first['wall_secs'] - 1
    # 30 and 40: the checkpoint it resumed from (20) is not saved again.
    assert second['checkpoints']['count'] == 2


def test_sigterm_is_recorded_and_a_refused_run_is_not(data_flags, tmp_path):
    job_dir = str(tmp_path / 'job')
    module, flags = TRAINERS['taxi']
    command = ['-m', module, *data_flags['taxi'], '--job-dir', job_dir, *flags,
               '--train-steps', '1000000', '--checkpoint-num-steps', '100000']
    log = open(tmp_path / 'log', 'w+b')  # pylint: disable=consider-using-with
    proc = processes.popen([sys.executable] + command, env=cli_env(), stdout=log,
                           stderr=log)
    deadline = time.monotonic() + 120
    while b'INFO step ' not in open(tmp_path / 'log', 'rb').read():
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(timeout=60)
    # The log's end is the evidence should the exit ever be another (once: SIGABRT).
    assert code == 128 + signal.SIGTERM, (code, open(tmp_path / 'log', 'rb').read()[-3000:])
    (session,) = run_record.read(job_dir)
    assert session['status'] == 'terminated' and session['exit_code'] == 143
    assert session['error'] == 'stopped on SIGTERM'
    assert 0 < session['steps']['to'] < 1000000 and session['final_metrics'] == {}
    # Another model's flags are refused before training: no session of this job-dir.
    before = open(run_record.path(job_dir)).read()
    proc = _train('taxi', data_flags, job_dir, '--hidden-units', '7', check=2)
    one_error_line(proc, '--hidden-units=7 does not match the checkpoints')
    assert open(run_record.path(job_dir)).read() == before


@pytest.mark.parametrize('obstacle', ['directory', 'not a record'])
def test_a_record_that_cannot_be_written_is_a_warning(data_flags, tmp_path, obstacle):
    job_dir = tmp_path / 'job'
    job_dir.mkdir()
    record = job_dir / 'run_record.json'
    if obstacle == 'directory':
        record.mkdir()
    else:
        record.write_text('{"notes": "mine"}')
    proc = _train('taxi', data_flags, str(job_dir), '--train-steps', '10')
    (warning,) = [line for line in proc.stderr.splitlines() if line.startswith('warning: run')]
    assert warning.startswith('warning: run record not written: ')
    assert 'INFO Run summary:' in proc.stderr
    if obstacle == 'directory':
        assert record.is_dir() and not os.listdir(record)
    else:
        assert record.read_text() == '{"notes": "mine"}'


def _run_measured(argv, timeout):
    """(exit code, stderr, peak resident bytes) of `argv`; killed after `timeout` s."""
    with tempfile.TemporaryFile('w+') as err:
        proc = processes.popen(argv, env=cli_env(), stdout=subprocess.DEVNULL, stderr=err,
                               stdin=subprocess.DEVNULL)
        timer = threading.Timer(timeout, os.killpg, (proc.pid, signal.SIGKILL))
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)  # this child's own peak memory
        finally:
            timer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        return proc.returncode, err.read(), usage.ru_maxrss * 1024


@pytest.mark.parametrize('planted', ['named pipe', '3 GB sparse file'])
def test_a_record_that_is_no_regular_small_file_is_one_warning_unread(data_flags, tmp_path,
                                                                       planted):
    """A pipe blocked the run for good after it exported; a 3 GB sparse record was read
    whole (6.8 GB peak). Both are refused unread with the warning line."""
    job_dir = tmp_path / 'job'
    job_dir.mkdir()
    record = job_dir / 'run_record.json'
    if planted == 'named pipe':
        os.mkfifo(record)
    else:
        with open(record, 'wb') as f:
            f.truncate(3 << 30)
    module, flags = TRAINERS['taxi']
    code, stderr, peak = _run_measured(
        [sys.executable, '-m', module, *data_flags['taxi'], '--job-dir', str(job_dir), *flags,
         *CADENCE, '--train-steps', '10'], timeout=300)
    assert code == 0, stderr[-3000:]
    (warning,) = [line for line in stderr.splitlines() if line.startswith('warning: run')]
    assert warning == 'warning: run record not written: %s %s' % (record, (
        'is a pipe, not a regular file' if planted == 'named pipe' else
        'is larger than 16 MiB; a run record holds a few KiB per session'))
    assert 'INFO Run summary:' in stderr and os.listdir(job_dir / 'export')
    assert peak < 2 << 30, peak
    if planted == 'named pipe':
        assert stat.S_ISFIFO(os.lstat(record).st_mode)
    else:
        assert os.path.getsize(record) == 3 << 30 and os.stat(record).st_blocks == 0


@pytest.mark.slow
def test_a_cluster_records_every_training_task(data_flags, tmp_path):
    """multi_worker_mirrored: the chief's session lists its own and worker-0's rates."""
    job_dir = str(tmp_path / 'job')
    module, flags = TRAINERS['taxi']
    cluster = launch(job_dir, ['--parameter-server-count', '0', '--worker-count', '1'],
                     [sys.executable, '-m', module, *data_flags['taxi'], '--job-dir',
                      job_dir, *flags, '--distribution-strategy', 'multi_worker_mirrored',
                      '--random-seed', str(SEED)])
    assert cluster.finish() == 0, cluster.output[-6000:]
    (session,) = run_record.read(job_dir)
    assert session['status'] == 'succeeded'
    assert session['cluster']['training_tasks'] == 2
    assert session['cluster']['strategy'] == 'multi_worker_mirrored'
    assert session['cluster']['synchronous'] is True
    assert session['job_id'].startswith('cluster-')
    assert set(session['workers']) == {'chief', 'worker-0'}
    for rate in session['workers'].values():
        assert rate['steps'] == 40 and rate['examples_per_sec'] > 0
    # Each global step takes both workers' batches.
    assert session['examples_per_global_step'] == 64
    with open(run_record.worker_path(job_dir, 'worker-0')) as f:
        (entry,) = json.load(f)['sessions']
    assert entry['job_id'] == session['job_id']
