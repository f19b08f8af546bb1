"""The local cluster launcher, driven with scripted stand-in tasks (tests/fake_task.py)."""
import glob
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
from conftest import REPO_ROOT, cli_env, directory_of_another_user
from estimator_trainers import errors
from estimator_trainers.tools import launcher
from estimator_trainers.tools import local_cluster
from test_trainer_discovery import write_guide_package

FAKE_TASK = os.path.join(REPO_ROOT, 'tests', 'fake_task.py')


def _start(tmp_path, plan, *flags, wrapper=(), task_args=(), env=None):
    """Starts the launcher (under `wrapper`, a command prefix) on fake tasks."""
    state = tmp_path / 'state'
    state.mkdir(exist_ok=True)
    env = cli_env(dict(env or {}, FAKE_PLAN=json.dumps(plan), FAKE_STATE=str(state)))
    command = [*wrapper, sys.executable, '-m', 'estimator_trainers.tools.launcher',
               '--job-dir', str(tmp_path / 'job'), *flags, '--',
               sys.executable, FAKE_TASK, *task_args]
    return processes.popen(command, cwd=REPO_ROOT, env=env, text=True,
                           stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE)


def _run(tmp_path, plan, *flags, **kwargs):
    proc = _start(tmp_path, plan, *flags, **kwargs)
    stdout, stderr = proc.communicate(timeout=60)
    return proc.returncode, stdout, stderr


def _records(tmp_path):
    """label -> list of records written by the fake tasks."""
    records = {}
    for path in glob.glob(str(tmp_path / 'state' / '*.jsonl')):
        label = os.path.basename(path)[:-len('.jsonl')]
        with open(path) as f:
            records[label] = [json.loads(line) for line in f]
    return records


def _starts(tmp_path):
    """label -> list of start records written by the fake tasks."""
    return {label: [r for r in records if 'pid' in r]
            for label, records in _records(tmp_path).items()}


def _stops(tmp_path):
    """label -> {term, exit} times of a fake task stopped by SIGTERM."""
    return {label: [r for r in records if 'term' in r][-1]
            for label, records in _records(tmp_path).items()
            if any('term' in r for r in records)}


def _pids(starts):
    pids = []
    for records in starts.values():
        for record in records:
            pids.append(record['pid'])
            if 'child_pid' in record:
                pids.append(record['child_pid'])
    return pids


def _wait_for_starts(tmp_path, labels, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        starts = _starts(tmp_path)
        if all(starts.get(label) for label in labels):  # a file may not hold its line yet
            return starts
        time.sleep(0.1)
    raise AssertionError('tasks did not start: %s' % sorted(_starts(tmp_path)))


def test_tasks_do_not_inherit_the_launchers_error_record(tmp_path):
    """The record says why the launcher failed; a task writing there would overwrite
    it, so each task records its own beside its log."""
    record = tmp_path / 'launcher-error.json'
    code, _, stderr = _run(tmp_path, {'ps': 'serve', 'default': 'run:0.2'},
                           '--parameter-server-count', '1', '--worker-count', '1',
                           env={errors.ERROR_RECORD_ENV: str(record)})
    assert code == 0, stderr
    starts = _starts(tmp_path)
    assert sorted(starts) == ['chief-0', 'ps-0', 'worker-0']
    assert {label: [r['error_record'] for r in rs] for label, rs in starts.items()} == {
        label: [str(tmp_path / 'job' / 'logs' / ('%s.log.error.json' % label))]
        for label in starts}


def test_a_failed_task_is_named_with_its_own_error_line(tmp_path):
    """The launcher's line is the task's own `error:` (from its error record), not a
    pointer into its log."""
    code, _, stderr = _run(tmp_path, {'ps': 'serve', 'worker-0': 'refuse:bad flag --x',
                                      'default': 'hang'},
                           '--parameter-server-count', '1', '--worker-count', '1')
    assert code == local_cluster.EXIT_FAILED
    assert stderr.strip().splitlines()[-1] == (
        'error: worker-0 failed (exit code 2): bad flag --x; stopped the other tasks. Its '
        'log: %s' % (tmp_path / 'job' / 'logs' / 'worker-0.log'))


def test_cluster_runs_to_the_chief_and_stops_parameter_servers(tmp_path):
    code, stdout, stderr = _run(
        tmp_path, {'ps': 'serve', 'default': 'run:0.6'},
        '--parameter-server-count', '2', '--worker-count', '2', '--evaluator-count', '1')
    assert code == 0, stderr
    starts = _starts(tmp_path)
    assert sorted(starts) == ['chief-0', 'evaluator-0', 'ps-0', 'ps-1',
                              'worker-0', 'worker-1']
    cluster = starts['chief-0'][0]['tf_config']['cluster']
    assert sorted(cluster) == ['chief', 'ps', 'worker']
    addresses = [a for job in cluster.values() for a in job]
    assert len(addresses) == 5 and len(set(addresses)) == 5
    assert all(a.startswith('127.0.0.1:') for a in addresses)
    for label, records in starts.items():
        task_type, index = label.rsplit('-', 1)
        assert records[0]['tf_config'] == {
            'cluster': cluster, 'task': {'type': task_type, 'index': int(index)},
            'job': {'evaluatorCount': 1}}
    # Every line on the console carries its role; the logs hold the raw lines.
    assert '[worker-1] worker-1 step 2' in stdout
    assert '[chief-0] chief-0 done' in stdout
    assert '[ps-1] serving on 127.0.0.1:' in stdout
    with open(tmp_path / 'job' / 'logs' / 'evaluator-0.log') as f:
        log = f.read()
    assert 'evaluator-0 step 0\n' in log and '[evaluator-0]' not in log
    assert '[launcher] stopping ps-0, ps-1' in stderr
    assert_all_exited(_pids(starts))


def test_failed_task_stops_the_cluster_and_is_named(tmp_path):
    code, _, stderr = _run(
        tmp_path, {'ps': 'serve', 'worker-1': 'fail:3:0.5', 'default': 'spawn-child'},
        '--parameter-server-count', '1', '--worker-count', '2')
    assert code == local_cluster.EXIT_FAILED
    assert ('error: worker-1 failed (exit code 3); stopped the other tasks. Its log: %s'
            % (tmp_path / 'job' / 'logs' / 'worker-1.log')) in stderr
    starts = _starts(tmp_path)
    assert len(starts) == 4
    assert_all_exited(_pids(starts))


def test_parameter_server_exit_fails_the_job(tmp_path):
    code, _, stderr = _run(tmp_path, {'ps': 'fail:0:0.3', 'default': 'hang'},
                           '--parameter-server-count', '1', '--worker-count', '1')
    assert code == local_cluster.EXIT_FAILED
    assert 'error: ps-0 exited (exit code 0), but parameter servers only stop' in stderr
    assert_all_exited(_pids(_starts(tmp_path)))


def test_killed_parameter_server_is_restarted_with_restarts_left(tmp_path):
    code, stdout, stderr = _run(
        tmp_path, {'ps': 'crash-then-serve:0.3', 'chief': 'run:3', 'default': 'run:0.3'},
        '--parameter-server-count', '1', '--worker-count', '1', '--max-restarts', '1')
    assert code == 0, stderr
    assert ('[launcher] ps-0 failed (signal SIGKILL); restarting it with the same '
            'TF_CONFIG (restart 1 of 1); its variables are lost: the chief resumes from '
            'its last checkpoint') in stderr
    records = _starts(tmp_path)['ps-0']
    assert len(records) == 2 and records[0]['tf_config'] == records[1]['tf_config']
    assert stdout.count('[ps-0] serving on 127.0.0.1:') == 2
    assert_all_exited(_pids(_starts(tmp_path)))


def test_killed_task_is_restarted_with_the_same_tf_config(tmp_path):
    code, stdout, stderr = _run(
        tmp_path, {'ps': 'serve', 'chief': 'run:3', 'worker-0': 'fail-once:0.3',
                   'default': 'run:0.3'},
        '--parameter-server-count', '1', '--worker-count', '1', '--max-restarts', '1')
    assert code == 0, stderr
    assert ('[launcher] worker-0 failed (signal SIGKILL); restarting it with the same '
            'TF_CONFIG (restart 1 of 1)') in stderr
    assert '[worker-0] worker-0 restarted' in stdout
    records = _starts(tmp_path)['worker-0']
    assert len(records) == 2 and records[0]['pid'] != records[1]['pid']
    assert records[0]['tf_config'] == records[1]['tf_config']
    with open(tmp_path / 'job' / 'logs' / 'worker-0.log') as f:
        assert f.read().count('---- worker-0: ') == 2
    assert_all_exited(_pids(_starts(tmp_path)))


def test_restarts_are_bounded(tmp_path):
    code, _, stderr = _run(tmp_path, {'worker': 'fail:4:0.2', 'default': 'hang'},
                           '--parameter-server-count', '0', '--worker-count', '1',
                           '--max-restarts', '2')
    assert code == local_cluster.EXIT_FAILED
    assert stderr.count('[launcher] worker-0 failed (exit code 4); restarting') == 2
    assert 'error: worker-0 failed (exit code 4); stopped the other tasks' in stderr
    assert len(_starts(tmp_path)['worker-0']) == 3
    assert_all_exited(_pids(_starts(tmp_path)))


def test_workers_still_running_after_the_grace_period_are_stopped(tmp_path):
    code, _, stderr = _run(
        tmp_path, {'chief': 'run:0.3', 'worker': 'ignore-term', 'ps': 'serve'},
        '--parameter-server-count', '1', '--worker-count', '1',
        '--shutdown-grace-secs', '1', '--stop-timeout-secs', '1')
    assert code == 0, stderr
    assert '[launcher] worker-0 still running 1s after the chief finished' in stderr
    assert '[launcher] worker-0 ignored SIGTERM; killing it' in stderr
    assert_all_exited(_pids(_starts(tmp_path)))


@pytest.mark.parametrize('signum, code', [(signal.SIGINT, 130), (signal.SIGTERM, 143),
                                          (signal.SIGHUP, 129)])
def test_interrupt_stops_every_task_and_their_children(tmp_path, signum, code):
    proc = _start(tmp_path, {'ps': 'serve', 'default': 'spawn-child'},
                  '--parameter-server-count', '1', '--worker-count', '1',
                  '--evaluator-count', '1')
    starts = _wait_for_starts(tmp_path, ['ps-0', 'chief-0', 'worker-0', 'evaluator-0'])
    proc.send_signal(signum)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == code, stderr
    assert ('[launcher] got %s; stopping the tasks: the chief (which saves a checkpoint) '
            'and evaluators first, then workers, then parameter servers'
            % signal.Signals(signum).name) in stderr
    assert '[launcher] no checkpoint was saved in %s' % (tmp_path / 'job') in stderr
    pids = _pids(starts)
    assert len(pids) == 7  # four tasks, three grandchildren
    assert_all_exited(pids)


def test_interrupt_stops_the_chief_while_parameter_servers_serve(tmp_path):
    """SIGTERM: the chief (2 s to save) ends before workers are stopped, they before
    the parameter servers; the launcher names the checkpoint the chief left."""
    proc = _start(tmp_path, {'ps': 'serve-until-term', 'chief': 'save-on-term:2',
                             'default': 'save-on-term'},
                  '--parameter-server-count', '2', '--worker-count', '2',
                  '--evaluator-count', '1')
    _wait_for_starts(tmp_path, ['ps-0', 'ps-1', 'chief-0', 'worker-0', 'worker-1',
                                'evaluator-0'])
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 143, stderr
    stops = _stops(tmp_path)
    assert sorted(stops) == ['chief-0', 'evaluator-0', 'ps-0', 'ps-1', 'worker-0',
                             'worker-1']
    chief = stops['chief-0']
    assert chief['exit'] - chief['term'] >= 2
    assert abs(stops['evaluator-0']['term'] - chief['term']) < 1  # stopped together
    for label in ('worker-0', 'worker-1'):
        assert stops[label]['term'] >= chief['exit']
    for label in ('ps-0', 'ps-1'):
        assert stops[label]['term'] >= max(stops['worker-0']['exit'],
                                           stops['worker-1']['exit'])
    assert stderr.strip().splitlines()[-1] == (
        '[launcher] the job-dir keeps %s; the same command resumes from it'
        % (tmp_path / 'job' / 'model.ckpt-7'))
    assert 'killing' not in stderr
    assert_all_exited(_pids(_starts(tmp_path)))


def test_second_ctrl_c_kills_every_task_at_once(tmp_path):
    """A chief that takes long to stop: a second Ctrl-C does not wait for it."""
    proc = _start(tmp_path, {'default': 'ignore-term'}, '--parameter-server-count', '1',
                  '--worker-count', '1', '--stop-timeout-secs', '600')
    starts = _wait_for_starts(tmp_path, ['ps-0', 'chief-0', 'worker-0'])
    proc.send_signal(signal.SIGINT)
    time.sleep(1)
    assert proc.poll() is None  # still waiting for the chief
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130, stderr
    assert 'Ctrl-C again to kill them at once' in stderr
    assert '[launcher] got a second SIGINT; killing chief-0 at once' in stderr
    assert_all_exited(_pids(starts))


def test_tasks_die_with_a_killed_launcher(tmp_path):
    proc = _start(tmp_path, {'ps': 'serve', 'default': 'hang'},
                  '--parameter-server-count', '1', '--worker-count', '1')
    starts = _wait_for_starts(tmp_path, ['ps-0', 'chief-0', 'worker-0'])
    proc.kill()
    proc.communicate(timeout=30)
    assert_all_exited(_pids(starts))


def test_free_ports_from_a_start_port_skip_ports_in_use():
    busy = socket.create_server(('', 0))
    try:
        start = busy.getsockname()[1]
        ports = local_cluster.free_ports(2, start_port=start)
    finally:
        busy.close()
    assert start not in ports and len(set(ports)) == 2
    assert all(p > start for p in ports)


def test_make_cluster_without_workers_or_ps():
    assert local_cluster.make_cluster([5000], 0, 0) == {'chief': ['127.0.0.1:5000']}


@pytest.mark.parametrize('argv, message', [
    (['--job-dir', 'j'], 'missing the task command after "--"'),
    (['--job-dir', 'gs://b/j', '--', 'true'], 'pass --log-dir'),
    (['--job-dir', 'j', '--worker-count', '-1', '--', 'true'], '--worker-count'),
])
def test_usage_errors_are_one_line(argv, message):
    with pytest.raises(errors.FlagError) as raised:
        launcher.parse_args(argv)
    assert raised.value.exit_code == 2
    line = errors.line(raised.value)
    assert message in line and '\n' not in line


def _listening_ports(proc_net):
    """{port: set of local addresses} of TCP sockets in LISTEN state in a
    /proc/.../net directory (the network namespace of that process)."""
    ports = {}
    for name in ('tcp', 'tcp6'):
        with open(os.path.join(proc_net, name)) as f:
            for line in f.readlines()[1:]:
                local, _, state = line.split()[1:4]
                if state == '0A':
                    address, port = local.rsplit(':', 1)
                    ports.setdefault(int(port, 16), set()).add(address)
    return ports


def _serving_ports(tmp_path, proc):
    """The ps ports once every fake ps listens (seen from its own namespace)."""
    starts = _wait_for_starts(tmp_path, ['ps-0', 'ps-1', 'chief-0'])
    cluster = starts['chief-0'][0]['tf_config']['cluster']
    ports = [int(a.rsplit(':', 1)[1]) for a in cluster['ps']]
    deadline = time.monotonic() + 30
    for label in ('ps-0', 'ps-1'):
        net = '/proc/%d/net' % starts[label][0]['pid']
        while ports[int(label[-1])] not in _listening_ports(net):
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
            time.sleep(0.1)
    return ports


NO_USER_NAMESPACES = ['unshare', '--user', '--map-root-user', 'sh', '-c',
                      'echo 0 > /proc/sys/user/max_user_namespaces && exec "$@"', 'sh']


@pytest.mark.parametrize('flags, wrapper, task_args, isolated, reason', [
    ((), (), (), True, None),
    (('--network', 'host'), (), (), False, '--network host'),
    ((), (), ('--data', 'gs://bucket/data'), False,
     'gs://bucket/data names a remote path, which a private network cannot reach'),
    ((), NO_USER_NAMESPACES, (), False,
     'no private network namespace here: unshare: No space left on device'),
], ids=['private', 'host', 'remote-path', 'no-namespaces'])
def test_task_ports_are_not_reachable_from_other_hosts(tmp_path, flags, wrapper,
                                                       task_args, isolated, reason):
    if wrapper and subprocess.run(['unshare', '--user', '--map-root-user', 'true'],
                                  check=False).returncode:
        pytest.skip('no user namespaces to take away here')
    proc = _start(tmp_path, {'ps': 'serve-all', 'default': 'hang'}, *flags,
                  '--parameter-server-count', '2', '--worker-count', '0',
                  wrapper=wrapper, task_args=task_args)
    try:
        ports = _serving_ports(tmp_path, proc)
        outside = _listening_ports('/proc/self/net')
    finally:
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 143, stderr
    if isolated:
        assert not set(ports) & set(outside), outside
        assert 'in a private network namespace; logs in' in stderr
        assert 'warning' not in stderr
    else:
        # What the namespace prevents: TensorFlow-like servers on every interface.
        assert all(outside.get(p) & {'00000000', '00000000000000000000000000000000'}
                   for p in ports), outside
        warnings = [l for l in stderr.splitlines() if 'warning' in l]
        assert warnings == ['[launcher] warning: the tasks share this machine\'s network '
                            '(%s); their unauthenticated gRPC servers listen on all '
                            'interfaces and run any graph sent to them, so run this only '
                            'where untrusted hosts cannot reach its ports '
                            '(docs/reliability.md)' % reason]


def test_private_network_that_the_system_refuses_is_one_line(tmp_path):
    if subprocess.run(['unshare', '--user', '--map-root-user', 'true'],
                      check=False).returncode:
        pytest.skip('no user namespaces to take away here')
    code, _, stderr = _run(tmp_path, {'default': 'run:0'}, '--network', 'private',
                           '--parameter-server-count', '0', '--worker-count', '0',
                           wrapper=NO_USER_NAMESPACES)
    assert code == 2, stderr
    assert stderr.strip().splitlines() == [
        'error: --network private: this system does not allow a private network '
        'namespace (unshare: No space left on device); use --network host on a '
        'machine whose ports untrusted hosts cannot reach']
    assert not (tmp_path / 'state' / 'chief-0.jsonl').exists()


def test_planted_log_symlink_is_refused_and_its_target_untouched(tmp_path):
    logs = tmp_path / 'job' / 'logs'
    logs.mkdir(parents=True)
    victim = tmp_path / 'victim'
    victim.write_text('precious')
    os.symlink(victim, logs / 'chief-0.log')
    code, _, stderr = _run(tmp_path, {'default': 'run:0'},
                           '--parameter-server-count', '0', '--worker-count', '0')
    assert code == 2, stderr
    assert stderr.strip().splitlines()[-1] == (
        'error: task log %s is a symlink; refusing to write through it (remove it)'
        % (logs / 'chief-0.log'))
    assert victim.read_text() == 'precious'
    assert not (tmp_path / 'state' / 'chief-0.jsonl').exists()


@pytest.mark.parametrize('flag', ['--job-dir', '--log-dir'])
def test_directory_of_another_user_is_refused(tmp_path, flag):
    theirs = directory_of_another_user(tmp_path / 'theirs')
    flags = ['--log-dir', str(theirs)] if flag == '--log-dir' else []
    command = [sys.executable, '-m', 'estimator_trainers.tools.launcher', '--job-dir',
               str(theirs if flag == '--job-dir' else tmp_path / 'job'), *flags,
               '--parameter-server-count', '0', '--worker-count', '0', '--', 'true']
    proc = subprocess.run(command, cwd=REPO_ROOT, env=cli_env(), capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        'error: %s %s is owned by user nobody (uid 65534), not by you (uid 0); files '
        'another user controls could redirect what is written there: use a directory of '
        'your own' % (flag, theirs)]
    assert os.listdir(theirs) == []


@pytest.mark.parametrize('case', ['cap', 'ports', 'private-refused', 'planted-log'])
def test_refused_launch_leaves_nothing_behind(tmp_path, case):
    """A launch refused before any task starts: one line, and no logs/ or job-dir made."""
    job = tmp_path / 'job'
    flags, wrapper = ['--parameter-server-count', '0', '--worker-count', '0'], ()
    if case == 'cap':
        flags = ['--worker-count', '200']
        expected = ('error: --worker-count=200, --parameter-server-count=2, '
                    '--evaluator-count=0: a local cluster of 203 tasks is more than the 64 '
                    'this launcher starts on one machine (each is a TensorFlow process of '
                    'its own); lower the counts')
    elif case == 'ports':
        flags += ['--start-port', '65535', '--worker-count', '1']
        expected = 'error: no 2 free ports from --start-port 65535'
    elif case == 'private-refused':
        if subprocess.run(['unshare', '--user', '--map-root-user', 'true'],
                          check=False).returncode:
            pytest.skip('no user namespaces to take away here')
        flags += ['--network', 'private']
        wrapper = NO_USER_NAMESPACES
        expected = ('error: --network private: this system does not allow a private network '
                    'namespace (unshare: No space left on device); use --network host on a '
                    'machine whose ports untrusted hosts cannot reach')
    else:
        (job / 'logs').mkdir(parents=True)
        (job / 'logs' / 'worker-0.log').symlink_to(tmp_path / 'victim')
        flags = ['--parameter-server-count', '1', '--worker-count', '1']
        expected = ('error: task log %s is a symlink; refusing to write through it (remove '
                    'it)' % (job / 'logs' / 'worker-0.log'))
    before = sorted(os.listdir(job / 'logs')) if job.exists() else None
    code, _, stderr = _run(tmp_path, {'default': 'run:0'}, *flags, wrapper=wrapper)
    assert code == 2, stderr
    assert stderr.strip().splitlines() == [expected]
    assert (sorted(os.listdir(job / 'logs')) if job.exists() else None) == before
    assert not (tmp_path / 'state' / 'chief-0.jsonl').exists()


def test_cluster_larger_than_the_memory_is_refused_naming_how_many_fit():
    options = launcher.parse_args(['--job-dir', 'j', '--worker-count', '30', '--', 'true'])[0]
    with pytest.raises(errors.UserInputError) as raised:
        local_cluster.check_size(options, available_bytes=4 * 2 ** 30)
    assert str(raised.value) == (
        '--worker-count=30, --parameter-server-count=2, --evaluator-count=0: a local cluster '
        'of 33 tasks needs about 16.1 GiB (about 500 MiB per TensorFlow process before its '
        'model), but only 4.0 GiB is available (MemAvailable); at most 8 tasks fit: lower '
        'the counts')
    local_cluster.check_size(options, available_bytes=17 * 2 ** 30)  # fits


def _net_namespace(pid):
    return os.readlink('/proc/%s/ns/net' % pid)


def test_train_local_runs_the_tasks_in_a_private_network_namespace(tmp_path):
    """Through train-local.sh (which imports numpy, whose threads made unshare fail with
    EINVAL): where this kernel allows user namespaces, the launcher and its tasks are in
    a network namespace of their own, and it honours --network. A fallback fails here."""
    if subprocess.run(['unshare', '-rn', 'true'], check=False).returncode:
        pytest.skip('this kernel refuses unprivileged network namespaces')
    toy = tmp_path / 'packages'
    write_guide_package(toy)
    job_dir = tmp_path / 'job'
    cluster = Cluster(['bash', os.path.join(REPO_ROOT, 'scripts', 'train-local.sh'), 'toy',
                       '--job-dir', str(job_dir), '--data-dir', str(tmp_path / 'data'),
                       '--distributed', '--network', 'private',
                       '--parameter-server-count', '1', '--worker-count', '0',
                       '--', '--train-steps', '100000000'],
                      env={'PYTHONPATH': str(toy) + os.pathsep + cli_env()['PYTHONPATH']})
    cluster.wait_for(lambda: '[chief-0] ' in cluster.output, 'the chief')
    host = _net_namespace('self')
    assert 'in a private network namespace; logs in' in cluster.output
    assert 'warning' not in cluster.output
    for pid in [cluster.process.pid] + cluster.pids():  # bash exec'd the launcher
        assert _net_namespace(pid) != host, cluster.output
    ps_port = int(re.search(r'"ps": \["127\.0\.0\.1:(\d+)"\]', cluster.output).group(1))
    cluster.wait_for(lambda: 'Parameter server ps-0 serving' in cluster.output, 'ps-0')
    assert ps_port not in _listening_ports('/proc/self/net')
    assert ps_port in _listening_ports('/proc/%d/net' % cluster.pids('ps-0')[0])
    cluster.process.send_signal(signal.SIGTERM)
    assert cluster.finish(timeout=120) == 143, cluster.output[-3000:]
    assert_all_exited(cluster.pids())


def test_sigterm_to_train_local_stops_its_data_step(tmp_path):
    """`timeout` or `kill` during the data step: the step is stopped too, not left running."""
    write_guide_package(tmp_path / 'packages')
    toy = tmp_path / 'packages' / 'toy_estimator'
    (toy / 'data.py').write_text(  # a data step that takes its time
        'import os, sys, time\n'
        'with open(sys.argv[2] + ".pid", "w") as f:\n'
        '    f.write(str(os.getpid()))\n'
        'time.sleep(600)\n')
    data_dir = tmp_path / 'data'
    proc = processes.popen(
        ['bash', os.path.join(REPO_ROOT, 'scripts', 'train-local.sh'), 'toy', '--job-dir',
         str(tmp_path / 'job'), '--data-dir', str(data_dir)], cwd=REPO_ROOT,
        env=cli_env({'PYTHONPATH': str(toy.parent) + os.pathsep + cli_env()['PYTHONPATH']}),
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pid_file = tmp_path / 'data.pid'
    deadline = time.monotonic() + 120
    while not pid_file.exists() or not pid_file.read_text():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)  # to train-local.sh's pid alone, as `timeout` does
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 143, stderr
    assert stderr.strip().splitlines()[-1] == (
        'error: stopped on SIGTERM during the data step (python -m toy_estimator.data '
        '--data-dir %s); the same command starts it again' % data_dir)
    assert_all_exited([int(pid_file.read_text())])
