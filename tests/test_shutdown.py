"""Stop signals, unreachable peers and killed tasks, through the real trainer and launcher.

Each test holds a promise of docs/reliability.md ("Signals, hangs and
shutdown order"): a task ends within a bound of --peer-timeout-secs or a few
seconds of a signal, wherever it is, with one line; a training chief saves
first; no task prints a traceback. Tasks run the toy trainer
of docs/adding-a-trainer.md, whose steps take no time, with TF_CONFIG by hand
or through the launcher. Hang bounds are bounds on a hang, not speed checks.
"""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest

import processes
from cluster_helpers import assert_all_exited, Cluster
from conftest import cli_env, REPO_ROOT
from estimator_trainers import cluster as cluster_lib
from estimator_trainers import errors
from estimator_trainers import faults
from estimator_trainers import lease
from estimator_trainers import run_record
from estimator_trainers.tools import local_cluster
from test_trainer_discovery import write_guide_package

TRAINER = 'toy_estimator.trainer'
# What a process gets beyond a bound to end: interpreter exit, a loaded machine.
SLACK_SECS = 10
_TOY = {}  # 'path': where the module fixture wrote the guide's toy package


@pytest.fixture(scope='module', autouse=True)
def toy_package(tmp_path_factory):
    _TOY['path'] = tmp_path_factory.mktemp('toy_package')
    write_guide_package(_TOY['path'])


@pytest.fixture(scope='module')
def data_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp('toy_data')
    proc = processes.run([sys.executable, '-m', 'toy_estimator.data', '--data-dir',
                          str(folder)], 120, cwd=REPO_ROOT, env=_env())
    assert proc.returncode == 0, proc.stderr
    return folder


def _env(tf_config=None):
    env = cli_env({'PYTHONPATH': str(_TOY['path']) + os.pathsep + cli_env()['PYTHONPATH']})
    if tf_config is not None:
        env['TF_CONFIG'] = json.dumps(tf_config)
    return env


class Task:
    """A trainer process with its merged output in a file."""

    def __init__(self, tmp_path, name, args, tf_config=None):
        self.log = tmp_path / (name + '.log')
        with open(self.log, 'w') as out:
            self.process = processes.popen(
                [sys.executable, '-m', TRAINER, *[str(a) for a in args]], cwd=REPO_ROOT,
                env=_env(tf_config), stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT)

    @property
    def output(self):
        return self.log.read_text()

    def wait_for(self, pattern, timeout=120):
        """Waits until the output matches `pattern`; returns the monotonic time it did."""
        deadline = time.monotonic() + timeout
        while not re.search(pattern, self.output):
            assert self.process.poll() is None, 'exited early:\n' + self.output[-3000:]
            assert time.monotonic() < deadline, 'no %r in\n%s' % (pattern,
                                                                   self.output[-3000:])
            time.sleep(0.1)
        return time.monotonic()

    def ends_within(self, secs):
        """Waits for the exit (killing the process after `secs`); returns its code."""
        try:
            return self.process.wait(secs)
        except subprocess.TimeoutExpired:
            processes.kill_tree(self.process, grace_secs=0)
            raise AssertionError('still running %ds later:\n%s'
                                 % (secs, self.output[-3000:])) from None

    def last_line(self):
        return self.output.strip().splitlines()[-1]


def _cluster(**jobs):
    return {job: ['127.0.0.1:%d' % port for port in ports] for job, ports in jobs.items()}


def _tf_config(cluster, task_type, index=0):
    return {'cluster': cluster, 'task': {'type': task_type, 'index': index}}


def _flags(data_dir, job_dir, *extra):
    return ['--data-dir', data_dir, '--job-dir', job_dir, '--max-worker-delay-secs', '0',
            *extra]


# --- peers that never come up, or come up and never join -------------------------------

@pytest.mark.parametrize('role, strategy', [
    ('chief', 'multi_worker_mirrored'), ('worker', 'multi_worker_mirrored'),
    ('worker', 'parameter_server')])
def test_task_whose_peers_never_come_up_says_so_and_gives_up(data_dir, tmp_path,
                                                             refused_port, role, strategy):
    """The issue's hang: an all-reduce task whose peer is down printed nothing, forever."""
    own = local_cluster.free_ports(1)[0]
    if strategy == 'parameter_server':
        cluster = _cluster(chief=[refused_port], worker=[own], ps=[local_cluster.free_ports(1)[0]])
        missing = 'ps-0 at %s, chief-0 at 127.0.0.1:%d' % (cluster['ps'][0], refused_port)
    elif role == 'chief':
        cluster = _cluster(chief=[own], worker=[refused_port])
        missing = 'worker-0 at 127.0.0.1:%d' % refused_port
    else:
        cluster = _cluster(chief=[refused_port], worker=[own])
        missing = 'chief-0 at 127.0.0.1:%d' % refused_port
    task = Task(tmp_path, role, _flags(data_dir, tmp_path / 'job', '--peer-timeout-secs', '3',
                                       '--distribution-strategy', strategy),
                _tf_config(cluster, role))
    waiting = task.wait_for(r'Waiting for %s \(from TF_CONFIG\) to accept connections'
                            % re.escape(missing))
    assert task.ends_within(3 + SLACK_SECS) == errors.EXIT_RETRYABLE
    assert time.monotonic() - waiting <= 3 + SLACK_SECS
    assert task.last_line() == (
        'error: cannot reach %s (from TF_CONFIG) after 3s; is that task running, and is the '
        'address right? (--peer-timeout-secs)' % missing)
    assert 'Traceback' not in task.output
    assert not (tmp_path / 'job').exists()


def test_signal_ends_an_all_reduce_task_waiting_for_its_peers(data_dir, tmp_path,
                                                              refused_port):
    cluster = _cluster(chief=[refused_port], worker=[local_cluster.free_ports(1)[0]])
    task = Task(tmp_path, 'worker', _flags(data_dir, tmp_path / 'job'),
                _tf_config(cluster, 'worker'))
    task.wait_for('Waiting for chief-0')
    task.process.send_signal(signal.SIGTERM)
    assert task.ends_within(SLACK_SECS) == 143
    assert task.last_line() == 'error: worker-0: stopped on SIGTERM'
    assert 'Traceback' not in task.output


@pytest.fixture
def silent_peer():
    """A port that accepts connections and never answers (a peer that hangs)."""
    with socket.create_server(('127.0.0.1', 0)) as server:
        yield server.getsockname()[1]


def test_all_reduce_peer_that_never_joins_the_set_up_ends_the_task(data_dir, tmp_path,
                                                                   silent_peer):
    """TensorFlow waits in C++, holding the interpreter lock, for a peer that came up
    but never joins the collective set-up: the bound holds there too."""
    cluster = _cluster(chief=[local_cluster.free_ports(1)[0]], worker=[silent_peer])
    task = Task(tmp_path, 'chief', _flags(data_dir, tmp_path / 'job', '--peer-timeout-secs',
                                          '3'), _tf_config(cluster, 'chief'))
    setting_up = task.wait_for('Setting up multi_worker_mirrored with worker-0')
    assert task.ends_within(3 + SLACK_SECS) == 1
    assert time.monotonic() - setting_up <= 3 + SLACK_SECS
    assert task.last_line() == (
        'error: chief-0: the collective set-up of multi_worker_mirrored with worker-0 at '
        '127.0.0.1:%d (from TF_CONFIG) did not complete within 3s; did one of them die? '
        '(--peer-timeout-secs)' % silent_peer)
    assert 'Traceback' not in task.output


@pytest.mark.parametrize('signum, to_group', [(signal.SIGINT, False), (signal.SIGTERM, True)])
def test_signal_ends_an_all_reduce_task_blocked_in_its_set_up(data_dir, tmp_path,
                                                               silent_peer, signum, to_group):
    """No Python runs in the task there: its sentinel process ends it at once. (SIGTERM
    to the pid alone goes to TensorFlow's preemption notifier: see docs/reliability.md.)"""
    cluster = _cluster(chief=[local_cluster.free_ports(1)[0]], worker=[silent_peer])
    task = Task(tmp_path, 'chief', _flags(data_dir, tmp_path / 'job'),
                _tf_config(cluster, 'chief'))
    task.wait_for('Setting up multi_worker_mirrored with worker-0')
    time.sleep(2)  # inside TensorFlow's wait
    if to_group:
        os.killpg(task.process.pid, signum)
    else:
        task.process.send_signal(signum)
    assert task.ends_within(SLACK_SECS) == -signal.SIGKILL
    assert task.last_line() == (
        'error: chief-0: stopped on %s (waiting inside TensorFlow for the collective set-up '
        'of multi_worker_mirrored with worker-0 at 127.0.0.1:%d)'
        % (signal.Signals(signum).name, silent_peer))


# --- Ctrl-C and a closed terminal on a single process ------------------------------------

@pytest.mark.parametrize('signum', [signal.SIGINT, signal.SIGHUP])
def test_ctrl_c_and_a_closed_terminal_save_and_stop_like_sigterm(data_dir, tmp_path, signum):
    job_dir = tmp_path / 'job'
    task = Task(tmp_path, 'local', _flags(data_dir, job_dir, '--train-steps', '100000000',
                                          '--checkpoint-num-steps', '100000000',
                                          '--log-step-count-steps', '100'))
    task.wait_for(r'step \d+00/')
    task.process.send_signal(signum)
    assert task.ends_within(SLACK_SECS) == 128 + signum
    match = re.fullmatch(r'error: local: stopped on %s; saved checkpoint (\S+-(\d+))'
                         % signal.Signals(signum).name, task.last_line())
    assert match, task.output[-3000:]
    assert int(match.group(2)) >= 100  # not the scheduled step-0 checkpoint
    assert os.path.exists(match.group(1) + '.index')
    assert 'Traceback' not in task.output


def test_second_ctrl_c_ends_a_chief_at_once(data_dir, tmp_path):
    """A chief whose parameter server hangs (SIGSTOP) cannot save: the first Ctrl-C
    would give it 25 s; the second ends it at once."""
    ports = local_cluster.free_ports(2)
    cluster = _cluster(chief=ports[:1], ps=ports[1:])
    flags = _flags(data_dir, tmp_path / 'job', '--train-steps', '100000000',
                   '--log-step-count-steps', '100')
    ps = Task(tmp_path, 'ps', flags, _tf_config(cluster, 'ps'))
    chief = Task(tmp_path, 'chief', flags, _tf_config(cluster, 'chief'))
    chief.wait_for(r'step \d+00/')
    ps.process.send_signal(signal.SIGSTOP)
    try:
        time.sleep(1)  # the chief's next step now waits for the ps
        chief.process.send_signal(signal.SIGINT)
        time.sleep(2)
        assert chief.process.poll() is None  # still trying to save
        chief.process.send_signal(signal.SIGINT)
        assert chief.ends_within(SLACK_SECS) == 130
    finally:
        ps.process.send_signal(signal.SIGCONT)
    assert chief.last_line() == ('error: chief-0: stopped on a second SIGINT, at once; no '
                                 'checkpoint saved')


# --- the launcher: stop order, a killed parameter server ----------------------------------

def _launch(data_dir, job_dir, *extra):
    return Cluster([sys.executable, '-m', 'estimator_trainers.tools.launcher',
                    '--job-dir', str(job_dir), '--parameter-server-count', '1',
                    '--worker-count', '1', '--', sys.executable, '-m', TRAINER,
                    *_flags(data_dir, job_dir, '--train-steps', '100000000',
                            '--log-step-count-steps', '100', *extra)],
                   env={'PYTHONPATH': _env()['PYTHONPATH']})


def _training(cluster):
    cluster.wait_for(lambda: re.search(r'^\[worker-0\] .*step \d+/', cluster.output, re.M),
                     'the worker training')


@pytest.mark.slow
def test_sigterm_to_the_launcher_lets_the_chief_save_before_the_ps_stop(data_dir, tmp_path):
    job_dir = tmp_path / 'job'
    cluster = _launch(data_dir, job_dir, '--checkpoint-num-steps', '100000000')
    _training(cluster)
    cluster.process.send_signal(signal.SIGTERM)
    assert cluster.finish(60) == 143, cluster.output[-3000:]
    output = cluster.output
    saved = re.search(r'^\[chief-0\] error: chief-0: stopped on SIGTERM; saved checkpoint '
                      r'(\S+)$', output, re.M)
    assert saved, output[-3000:]
    assert '[worker-0] error: worker-0: stopped on SIGTERM\n' in output
    # A parameter server ends on a stop signal in any job: a plain line, not an error.
    assert re.search(r'^\[ps-0\] [\d:]+ INFO ps-0: stopped on SIGTERM, as a parameter '
                     r'server ends: it serves until the job stops it$', output, re.M)
    assert '[ps-0] error:' not in output
    assert output.strip().splitlines()[-1] == (
        '[launcher] the job-dir keeps %s; the same command resumes from it' % saved.group(1))
    for noise in ('Traceback', 'killing', 'no checkpoint saved', 'failed to connect'):
        assert noise not in output, noise
    assert_all_exited(cluster.pids())


# Kills of a peer mid-step in one run of the test below: 1 in the suite, more by hand
# (e.g. 20, docs/reliability.md); the victim alternates, ps-0 first.
KILL_REPEATS = int(os.environ.get('ESTIMATOR_TRAINERS_KILL_REPEATS', '1'))


def _killed_parameter_server_ends_the_job(cluster):
    output = cluster.output
    assert output.strip().splitlines()[-1].startswith(
        'error: ps-0 exited (signal SIGKILL), but parameter servers only stop when the job '
        'ends; stopped the other tasks.'), output[-3000:]
    assert re.search(r'^\[chief-0\] error: chief-0: stopped on SIGTERM; no final checkpoint '
                     r'\(ps-0 at 127\.0\.0\.1:\d+ unreachable\); the job-dir keeps \S+$',
                     output, re.M), output[-3000:]
    assert '[worker-0] error: worker-0: stopped on SIGTERM\n' in output, output[-3000:]


def _killed_worker_ends_the_job(cluster):
    output = cluster.output
    assert output.strip().splitlines()[-1].startswith(
        'error: worker-0 failed (signal SIGKILL); stopped the other tasks.'), output[-3000:]
    assert re.search(r'^\[chief-0\] error: chief-0: stopped on SIGTERM; saved checkpoint \S+$',
                     output, re.M), output[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize('repeat', range(KILL_REPEATS))
def test_a_peer_killed_mid_step_ends_the_job_without_a_traceback(data_dir, tmp_path, repeat):
    """A ps (or, on odd repeats, a worker) SIGKILLed while the others train: the job
    ends within seconds, each task with one line. In 1 of 3 runs a worker printed a
    60-line traceback: the stop signal landed while TensorFlow was raising the
    peer's failure."""
    victim, ends = [('ps-0', _killed_parameter_server_ends_the_job),
                    ('worker-0', _killed_worker_ends_the_job)][repeat % 2]
    cluster = _launch(data_dir, tmp_path / 'job')
    _training(cluster)
    cluster.kill(victim)
    killed = time.monotonic()
    assert cluster.finish(60) == 1, cluster.output[-3000:]
    assert time.monotonic() - killed <= SLACK_SECS + faults.QUICK_EXIT_SECS
    ends(cluster)
    # TensorFlow's session recovery in one line, without the failing op's definition trace.
    for noise in ('Traceback', 'killing', 'An error was raised', '(most recent call last)'):
        assert noise not in cluster.output, (noise, cluster.output[-6000:])
    assert_all_exited(cluster.pids())


# --- the end of a job -------------------------------------------------------------------------

def test_sigterm_after_the_chief_finished_ends_an_evaluator_normally(data_dir, tmp_path):
    """gcloud's `local train --distributed` stops the other tasks with SIGTERM once the
    chief exits: an evaluator stopped after the chief recorded its success ends with an
    INFO line and status 0; one stopped before (no such record) is an error, as before."""
    cluster = _cluster(chief=[local_cluster.free_ports(1)[0]], ps=[local_cluster.free_ports(1)[0]])
    tf_config = _tf_config(cluster, 'evaluator')
    tasks = {name: Task(tmp_path, name, _flags(data_dir, tmp_path / name), tf_config)
             for name in ('after', 'before')}
    for task in tasks.values():
        task.wait_for('Waiting for the first checkpoint')
    # What the chief's recorder writes last: its session, succeeded, of this cluster.
    job_id = lease.cluster_id(cluster_lib.load_cluster({'TF_CONFIG': json.dumps(tf_config)}),
                              environ={})
    (tmp_path / 'after').mkdir(exist_ok=True)
    run_record.append(run_record.path(str(tmp_path / 'after')), {
        'status': run_record.SUCCEEDED, 'exit_code': 0, 'job_id': job_id,
        'started_at_unix': time.time() - 1, 'wall_secs': 1.0,
        'steps': {'from': 0, 'to': 40, 'target': 40}})
    for task in tasks.values():
        task.process.send_signal(signal.SIGTERM)
    assert tasks['after'].ends_within(SLACK_SECS + faults.QUICK_EXIT_SECS) == 0
    assert re.search(r'^[\d:]+ INFO evaluator-0: stopped on SIGTERM after the chief finished '
                     r'\(at step 40\): the job has ended$', tasks['after'].output, re.M)
    assert 'error' not in tasks['after'].output
    assert tasks['before'].ends_within(SLACK_SECS + faults.QUICK_EXIT_SECS) == 143
    assert tasks['before'].last_line() == 'error: evaluator-0: stopped on SIGTERM'


# --- a task that must never train -----------------------------------------------------------

def test_evaluator_without_a_cluster_never_trains(data_dir, tmp_path):
    task = Task(tmp_path, 'evaluator', _flags(data_dir, tmp_path / 'job'),
                {'cluster': {}, 'task': {'type': 'evaluator', 'index': 0}})
    assert task.ends_within(120) == 2
    assert task.output.strip().splitlines() == [
        'error: TF_CONFIG: task.type \'evaluator\' with an empty "cluster": an evaluator only '
        'evaluates the checkpoints a training cluster writes and never trains; give the '
        'cluster, or unset TF_CONFIG to train in one process']
    assert not (tmp_path / 'job').exists()


def test_session_recovery_messages_are_one_line_naming_the_cause(capsys):
    """TensorFlow logs a peer's failure with the failing op's definition trace."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    from estimator_trainers import logs  # pylint: disable=import-outside-toplevel
    logs.configure('INFO')
    error = tf.errors.UnavailableError(
        None, None, "Graph execution error:\n\nDetected at node 'CollectiveReduceV2' defined "
        'at (most recent call last):\n    File "<frozen runpy>", line 198\n'
        "Node: 'CollectiveReduceV2'\nFrom /job:worker/replica:0/task:0:\n"
        'Collective ops is aborted by: Connection reset by peer\nAdditional GRPC')
    tf.compat.v1.logging.info(  # as tensorflow/python/training/monitored_session.py does
        'An error was raised. This may be due to a preemption in a connected worker or '
        'parameter server. The current session will be closed and a new session will be '
        'created. Error: %s', error)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].endswith(
        'INFO A connected task failed (From /job:worker/replica:0/task:0: Collective ops is '
        'aborted by: Connection reset by peer); TensorFlow creates a new session and waits '
        'for it (bounded by --peer-timeout-secs)'), lines


@pytest.fixture
def stop_handlers():
    """The stop signals' handlers as they were (`ending_run` leaves the defaults)."""
    saved = {signum: signal.getsignal(signum) for signum in faults.STOP_SIGNALS}
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)


def test_after_a_stop_whatever_tensorflow_raises_ends_the_run_as_the_stop(stop_handlers,
                                                                           monkeypatch):
    """A stop signal landing while TensorFlow raises a dead peer's failure: the run ends
    with the stop's one line whichever exception comes out (it was a traceback in 1 of 3
    kills of a ps); before any stop, and for our own errors, nothing changes."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    termination = faults.Termination('worker-0', lambda line: None)
    with pytest.raises(tf.errors.UnavailableError):
        with termination.ending_run():
            raise tf.errors.UnavailableError(None, None, 'Connection reset by peer')
    termination.signum = signal.SIGTERM  # as its handler or watchdog records it
    with pytest.raises(errors.TaskFailure) as raised:
        with termination.ending_run():
            raise tf.errors.UnavailableError(None, None, 'Connection reset by peer')
    assert errors.line(raised.value) == 'error: worker-0: stopped on SIGTERM'
    assert raised.value.exit_code == 143 and raised.value.__cause__ is None
    with pytest.raises(errors.UserInputError, match='^bad flag$'):
        with termination.ending_run():
            raise errors.UserInputError('bad flag')

    class Finalized:
        def __init__(self, error):
            self.error = error

        def __del__(self):
            raise self.error

    unraisable = []  # what Python would report as "Exception ignored in ..."
    monkeypatch.setattr(sys, 'unraisablehook', lambda args: unraisable.append(args.exc_value))
    with termination.ending_run():  # a stop inside a finalizer is dropped, no other
        Finalized(faults.Terminated(signal.SIGTERM))
        Finalized(ValueError('a finalizer of its own'))
    assert [type(e) for e in unraisable] == [ValueError]
