"""Faults of the machine and of shared job-dirs, through the real trainer CLIs.

Each test holds one promise of docs/reliability.md: one clear line, nothing
in the job-dir damaged, and a rerun that resumes.
"""
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

import taxi_trips
from conftest import cli_env, REPO_ROOT, run_module
from estimator_trainers import errors
from estimator_trainers.tools import local_cluster

TASK = 'taxi_estimator.task'
CIFAR = 'cifar10_estimator.cifar10_main'
FAST = ['--batch-size', '64', '--checkpoint-num-steps', '10', '--random-seed', '3',
        '--eval-frequency-secs', '0', '--log-step-count-steps', '10']


@pytest.fixture(scope='module')
def files(tmp_path_factory):
    """Generated taxi CSVs (800 train rows, 200 eval rows) in a world-readable folder."""
    folder = tmp_path_factory.mktemp('taxi_data')
    train, evals = taxi_trips.write_layout_files(folder)
    return ['--train-files', str(train), '--eval-files', str(evals)]


def _without_root_privileges(home):
    """(command prefix, env) that runs a root test's command without root's file powers.

    A user namespace without a uid mapping keeps our uid but drops the override
    of file permissions, so a clone in a private 0700 directory stays readable.
    Without user namespaces the command runs as nobody, which needs a checkout
    other users can read.
    """
    if subprocess.run(['unshare', '--user', 'true'], capture_output=True,
                      check=False).returncode == 0:
        return ['unshare', '--user'], None
    if not all(os.stat(path).st_mode & 0o005 == 0o005 for path in _ancestors(REPO_ROOT)):
        pytest.skip('no user namespaces here, and the checkout is not readable by other users')
    return ['setpriv', '--reuid=65534', '--regid=65534', '--clear-groups'], {'HOME': home}


def _ancestors(path):
    while True:
        yield path
        parent = os.path.dirname(path)
        if parent == path:
            return
        path = parent


def snapshot(directory):
    """{relative path: bytes} of every file under `directory` (byte-for-byte checks)."""
    result = {}
    for root, dirs, names in os.walk(str(directory)):
        for name in names + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            path = os.path.join(root, name)
            with open(path, 'rb') as f:
                result[os.path.relpath(path, str(directory))] = f.read()
    return result


def last_line(proc_or_text):
    text = getattr(proc_or_text, 'stderr', proc_or_text)
    lines = text.strip().splitlines()
    return lines[-1] if lines else ''


def checkpoint_step(path):
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    return int(tf.train.load_variable(path, 'global_step'))


def start(module, *args, env=None):
    """Starts `python -m module args` with stderr to a file; returns (process, log path)."""
    log = tempfile.NamedTemporaryFile('w+', suffix='.log', delete=False)  # pylint: disable=consider-using-with
    process = subprocess.Popen(  # pylint: disable=consider-using-with
        [sys.executable, '-m', module] + [str(a) for a in args], cwd=REPO_ROOT,
        env=cli_env(env), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
        text=True)
    return process, log.name


def read(path):
    with open(path) as f:
        return f.read()


def wait_for(predicate, what, process=None, timeout=300):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert process is None or process.poll() is None, 'exited while waiting for ' + what
        assert time.monotonic() < deadline, 'timed out waiting for %s' % what
        time.sleep(0.2)


@contextlib.contextmanager
def mounted_tmpfs(path, size, read_only=False):
    """A tmpfs of `size` at `path` (root only: the test is skipped otherwise)."""
    os.makedirs(str(path), exist_ok=True)
    options = 'size=%s%s' % (size, ',ro' if read_only else '')
    if subprocess.run(['mount', '-t', 'tmpfs', '-o', options, 'tmpfs', str(path)],
                      capture_output=True, check=False).returncode:
        pytest.skip('cannot mount a tmpfs here (needs root)')
    try:
        yield str(path)
    finally:
        subprocess.run(['umount', '-l', str(path)], check=False)


# --- the job-dir lease ----------------------------------------------------------

def test_second_trainer_is_refused_and_sigterm_saves_a_checkpoint(files, tmp_path):
    """Two trainers on one job-dir: the second is refused naming the first; SIGTERM
    stops the first promptly after a final checkpoint, which a rerun resumes."""
    job_dir = tmp_path / 'job'
    first, log = start(TASK, *files, '--job-dir', job_dir, '--train-steps', '100000',
                       *FAST, '--checkpoint-num-steps', '100000')
    try:
        wait_for(lambda: re.search(r'step \d+0/\d+, ', read(log)), 'training', first)
        second = run_module(TASK, *files, '--job-dir', job_dir, '--train-steps', '20',
                            *FAST)
        assert second.returncode == 2, second.stderr[-3000:]
        assert re.fullmatch(
            r'error: --job-dir %s is in use by local \(pid %d on %s, heartbeat [^)]+\) of '
            r'another job \(lease %s\); wait for it to finish, use another --job-dir, or '
            r'delete the lease if that job is gone'
            % (re.escape(str(job_dir)), first.pid, re.escape(socket.gethostname()),
               re.escape(str(job_dir / 'LEASE.json'))), last_line(second)), second.stderr

        first.send_signal(signal.SIGTERM)
        first.wait(timeout=120)
    finally:
        if first.poll() is None:
            first.kill()
    output = read(log)
    assert first.returncode == 128 + signal.SIGTERM, output[-3000:]
    match = re.fullmatch(r'error: local: stopped on SIGTERM; saved checkpoint (\S+)',
                         last_line(output))
    assert match, output[-3000:]
    saved = checkpoint_step(match.group(1))
    assert saved > 0 and saved % 100000, saved  # a final save, not a scheduled one
    assert not (job_dir / 'LEASE.json').exists()

    rerun = run_module(TASK, *files, '--job-dir', job_dir, '--train-steps',
                       str(saved + 10), *FAST, check=0)
    assert 'Resuming from global step %d' % saved in rerun.stderr


def _lease(pid, host, heartbeat, cluster_id='local-other'):
    return json.dumps({'token': 'f' * 32, 'cluster_id': cluster_id, 'host': host,
                       'pid': pid, 'pid_start': '1', 'task': 'local',
                       'heartbeat': heartbeat})


def test_stale_lease_is_taken_over_and_leftovers_are_cleaned(files, tmp_path):
    """A lease with an old heartbeat is taken over with a line; then the chief removes
    what interrupted saves left (TensorFlow's temporary names only) and releases the
    lease at exit."""
    job_dir = tmp_path / 'job'
    run_module(TASK, *files, '--job-dir', job_dir, '--train-steps', '10', *FAST, check=0)
    (job_dir / 'LEASE.json').write_text(_lease(4242, 'elsewhere', time.time() - 400))
    leftovers = [job_dir / 'model.ckpt-20_temp' / 'part-00000-of-00001.data-00000-of-00001',
                 job_dir / ('graph.pbtxt.tmp' + 'a' * 32),
                 job_dir / ('checkpoint.tmp' + '0' * 32),
                 job_dir / 'export' / 'temp-1795663074' / 'saved_model.pb']
    kept = [job_dir / 'notes.tmp', job_dir / 'model.ckpt-20_temp.txt',
            job_dir / 'export' / 'temp-mine' / 'file']
    for path in leftovers + kept:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b'partial')

    proc = run_module(TASK, *files, '--job-dir', job_dir, '--train-steps', '20', *FAST,
                      check=0)
    assert re.search(
        r'Job-dir lease: taking over the stale lease of local \(pid 4242 on elsewhere, '
        r'heartbeat [^)]+\): its heartbeat is \d+s old \(timeout 300s\)', proc.stderr)
    assert ('Removed 4 leftover(s) of interrupted saves: checkpoint.tmp%s, graph.pbtxt.tmp%s,'
            ' model.ckpt-20_temp, temp-1795663074' % ('0' * 32, 'a' * 32)) in proc.stderr
    assert not any(p.exists() for p in leftovers)
    assert not (job_dir / 'model.ckpt-20_temp').exists()
    assert all(p.read_bytes() == b'partial' for p in kept)
    assert checkpoint_step(str(job_dir / 'model.ckpt-20')) == 20
    assert not (job_dir / 'LEASE.json').exists()


def test_fresh_lease_of_another_host_refuses_and_keeps_the_job_dir(files, tmp_path):
    job_dir = tmp_path / 'job'
    job_dir.mkdir()
    (job_dir / 'LEASE.json').write_text(_lease(4242, 'elsewhere', time.time()))
    before = snapshot(job_dir)
    proc = run_module(TASK, *files, '--job-dir', job_dir, '--train-steps', '10', *FAST,
                      check=2)
    assert last_line(proc).startswith(
        'error: --job-dir %s is in use by local (pid 4242 on elsewhere, heartbeat '
        % job_dir), proc.stderr
    assert snapshot(job_dir) == before


# --- unusable job-dirs -------------------------------------------------------------

@pytest.mark.parametrize('case', ['file', 'read-only', 'unwritable-parent',
                                  'parent-is-file'])
def test_unusable_job_dir_is_one_line_before_training(case, files, tmp_path):
    env = None
    prefix = []
    kept = tmp_path
    with contextlib.ExitStack() as stack:
        if case == 'file':
            job_dir = tmp_path / 'job'
            job_dir.write_bytes(b'not a directory\n')
            expected = 'error: --job-dir %s is not a directory' % job_dir
        elif case == 'read-only':
            mount = stack.enter_context(mounted_tmpfs(tmp_path / 'ro', '1m', read_only=True))
            job_dir = os.path.join(mount, 'job')
            expected = ('error: --job-dir %s is on a read-only file system (%s)'
                        % (job_dir, mount))
        elif case == 'parent-is-file':
            (tmp_path / 'plain').write_bytes(b'x')
            job_dir = tmp_path / 'plain' / 'job'
            expected = ('error: --job-dir %s cannot be created: %s is a file'
                        % (job_dir, tmp_path / 'plain'))
        else:
            # Root writes anywhere: run the trainer without root's power over files.
            world = stack.enter_context(tempfile.TemporaryDirectory(prefix='faults-'))
            os.chmod(world, 0o755)
            parent = os.path.join(world, 'locked')
            os.mkdir(parent)
            os.chmod(parent, 0o555)
            job_dir = os.path.join(parent, 'job')
            kept = world
            expected = ('error: --job-dir %s cannot be created: %s is not writable by '
                        'this user' % (job_dir, parent))
            if os.geteuid() == 0:
                prefix, env = _without_root_privileges(world)
                if prefix[0] == 'setpriv':
                    files = files[:1] + [shutil.copy(files[1], world)] + files[2:3] + [
                        shutil.copy(files[3], world)]
        before = snapshot(kept) if case != 'read-only' else {}
        args = prefix + [sys.executable, '-m', TASK] + files + [
            '--job-dir', str(job_dir), '--train-steps', '10'] + FAST
        proc = subprocess.run(args, cwd=REPO_ROOT, env=cli_env(env), capture_output=True,
                              text=True, timeout=300, stdin=subprocess.DEVNULL, check=False)
        assert proc.returncode == 2, proc.stderr[-3000:]
        assert last_line(proc) == expected, proc.stderr[-3000:]
        assert 'Traceback' not in proc.stderr
        if case != 'read-only':
            assert snapshot(kept) == before


# --- a full disk -----------------------------------------------------------------------

def test_full_disk_is_one_line_keeps_the_last_checkpoint_and_a_rerun_resumes(files,
                                                                             tmp_path):
    with mounted_tmpfs(tmp_path / 'fs', '40m') as mount:
        job_dir = os.path.join(mount, 'job')
        run_module(TASK, *files, '--job-dir', job_dir, '--train-steps', '10', *FAST,
                   check=0)
        ballast = os.path.join(mount, 'ballast')
        with open(ballast, 'wb', buffering=0) as f:
            try:
                while True:
                    f.write(b'\0' * 4096)
                    f.flush()
            except OSError:
                pass
        os.truncate(ballast, os.path.getsize(ballast) - 64 * 1024)  # room for a little
        proc = run_module(TASK, *files, '--job-dir', job_dir, '--train-steps', '30', *FAST)
        assert proc.returncode == 1, proc.stderr[-3000:]
        assert last_line(proc) == (
            'error: the file system of --job-dir %s is full (No space left on device); '
            'the last good checkpoint is %s/model.ckpt-10; free space and rerun the same '
            'command to resume' % (job_dir, job_dir)), proc.stderr[-5000:]
        assert 'Traceback' not in proc.stderr
        assert checkpoint_step(os.path.join(job_dir, 'model.ckpt-10')) == 10

        os.remove(ballast)
        rerun = run_module(TASK, *files, '--job-dir', job_dir, '--train-steps', '30',
                           *FAST, check=0)
        assert 'Resuming from global step 10' in rerun.stderr
        assert 'Final evaluation at global step 30' in rerun.stderr
        assert not [n for n in os.listdir(job_dir) if '_temp' in n or '.tmp' in n]


# --- batches larger than the data or the memory ------------------------------------------

def test_batch_larger_than_the_training_set_is_refused(cifar10_data_dir, tmp_path):
    job_dir = tmp_path / 'job'
    proc = run_module(CIFAR, '--data-dir', cifar10_data_dir, '--job-dir', job_dir,
                      '--num-layers', '8', '--train-batch-size', '100000',
                      '--eval-batch-size', '50', check=2)
    assert last_line(proc) == ('error: --train-batch-size=100000 is larger than the 400 '
                               'training examples; a step may not use an example twice')
    assert not job_dir.exists()


def test_taxi_batch_larger_than_the_rows_is_refused(files, tmp_path):
    proc = run_module(TASK, *files, '--job-dir', tmp_path / 'job', '--batch-size', '801',
                      check=2)
    assert last_line(proc) == ('error: --batch-size=801 is larger than the 800 training '
                               'examples; a step may not use an example twice')
    assert not (tmp_path / 'job').exists()


def test_model_larger_than_the_memory_is_refused_with_the_estimate(files, tmp_path):
    proc = run_module(TASK, *files, '--job-dir', tmp_path / 'job', '--batch-size', '64',
                      '--hidden-units', '300000,300000', check=2)
    assert re.fullmatch(
        r'error: --batch-size=64 needs about [\d.]+ GiB for one step of 64 examples '
        r'\([\d.]+ MiB per example, rough estimate of the model\'s activations and '
        r'variables\), but only [\d.]+ GiB is available \(MemAvailable\); lower '
        r'--batch-size', last_line(proc)), proc.stderr[-3000:]
    assert not (tmp_path / 'job').exists()


def test_memory_estimate_is_logged_before_training(files, tmp_path):
    """At DEBUG: the console hears of memory when it is short (above)."""
    proc = run_module(TASK, *files, '--job-dir', tmp_path / 'job', '--train-steps', '1',
                      *FAST, '--verbosity', 'debug', check=0)
    assert re.search(r'Memory: about [\d.]+ [KM]iB for one step of 64 examples .*; '
                     r'[\d.]+ GiB available', proc.stderr)
    # DEBUG brings back what the default console leaves out (#48): TensorFlow's C++
    # start-up lines and its Python INFO lines.
    assert 'oneDNN custom operations are on' in proc.stderr
    assert 'INFO Using config: ' in proc.stderr


# --- distributed faults --------------------------------------------------------------------

def _tf_config(cluster, task_type):
    return {'TF_CONFIG': json.dumps({'cluster': cluster,
                                     'task': {'type': task_type, 'index': 0}})}


def test_parameter_server_lost_during_training_ends_the_chief(files, tmp_path):
    """A ps killed after start-up (TF_CONFIG by hand, no launcher): the chief fails
    within --peer-timeout-secs naming it instead of waiting forever."""
    chief_port, ps_port = local_cluster.free_ports(2)
    cluster = {'chief': ['127.0.0.1:%d' % chief_port], 'ps': ['127.0.0.1:%d' % ps_port]}
    job_dir = tmp_path / 'job'
    common = [*files, '--job-dir', job_dir, *FAST, '--peer-timeout-secs', '5']
    ps, ps_log = start(TASK, *common, env=_tf_config(cluster, 'ps'))
    chief, chief_log = start(TASK, *common, '--train-steps', '100000',
                             env=_tf_config(cluster, 'chief'))
    try:
        wait_for(lambda: re.search(r'step \d+0/\d+, ', read(chief_log)), 'training', chief)
        ps.kill()
        chief.wait(timeout=180)
    finally:
        for process in (ps, chief):
            if process.poll() is None:
                process.kill()
    output = read(chief_log)
    assert chief.returncode == errors.EXIT_RETRYABLE, output[-3000:]
    assert last_line(output) == (
        'error: lost ps-0 at 127.0.0.1:%d (from TF_CONFIG): unreachable for 5s during '
        'training; did that task die? (--peer-timeout-secs)' % ps_port)


def test_exit_codes_say_what_a_restart_can_cure(files, tmp_path, refused_port):
    """The contract the Kubernetes targets restart by (`errors`): a bad flag is the
    user's to fix (2, never retried); a peer that never comes up is the
    cluster's (203, retried: a parameter server scheduled late comes up)."""
    bad_flag = run_module(TASK, *files, '--job-dir', tmp_path / 'a', '--train-stepz', '5',
                          check=errors.EXIT_USAGE)
    assert not errors.retryable(bad_flag.returncode)
    assert last_line(bad_flag.stderr).startswith('error: unrecognized arguments: '
                                                 '--train-stepz')
    chief_port, = local_cluster.free_ports(1)
    cluster = {'chief': ['127.0.0.1:%d' % chief_port], 'ps': ['127.0.0.1:%d' % refused_port]}
    no_peer = run_module(TASK, *files, '--job-dir', tmp_path / 'b', *FAST,
                         '--train-steps', '5', '--peer-timeout-secs', '1',
                         env=_tf_config(cluster, 'chief'), check=errors.EXIT_RETRYABLE)
    assert errors.retryable(no_peer.returncode)
    assert last_line(no_peer.stderr) == (
        'error: cannot reach ps-0 at 127.0.0.1:%d (from TF_CONFIG) after 1s; is that task '
        'running, and is the address right? (--peer-timeout-secs)' % refused_port)


def test_sigterm_ends_a_waiting_worker_and_a_parameter_server(files, tmp_path):
    """A worker waiting for an unreachable chief, and a ps serving, end on SIGTERM."""
    ports = local_cluster.free_ports(3)
    dead = socket.socket()
    dead.bind(('127.0.0.1', 0))  # the chief: reserved, never listening
    cluster = {'chief': ['127.0.0.1:%d' % dead.getsockname()[1]],
               'worker': ['127.0.0.1:%d' % ports[0]], 'ps': ['127.0.0.1:%d' % ports[1]]}
    common = [*files, '--job-dir', tmp_path / 'job', *FAST, '--peer-timeout-secs', '600',
              '--max-worker-delay-secs', '0']
    ps, ps_log = start(TASK, *common, env=_tf_config(cluster, 'ps'))
    worker, worker_log = start(TASK, *common, env=_tf_config(cluster, 'worker'))
    try:
        wait_for(lambda: 'Parameter server ps-0 serving' in read(ps_log), 'ps', ps)
        wait_for(lambda: 'Step target' in read(worker_log), 'worker start-up', worker)
        time.sleep(5)  # inside TensorFlow's wait for the chief
        for process in (worker, ps):
            process.send_signal(signal.SIGTERM)
        for process in (worker, ps):
            process.wait(timeout=60)
    finally:
        dead.close()
        for process in (ps, worker):
            if process.poll() is None:
                process.kill()
    for process, log in ((worker, worker_log), (ps, ps_log)):
        assert process.returncode == 128 + signal.SIGTERM, read(log)[-3000:]
    assert last_line(read(worker_log)) == 'error: worker-0: stopped on SIGTERM'
    # Stopping is how a parameter server ends: said plainly, not as an error.
    assert re.fullmatch(r'[\d:]+ INFO ps-0: stopped on SIGTERM, as a parameter server ends: '
                        r'it serves until the job stops it', last_line(read(ps_log)))
