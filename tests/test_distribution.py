"""--distribution-strategy resolved against clusters and devices; peers; device filters."""
import argparse
import dataclasses
import io
import json
import re
import socket
import sys
import threading
import time

import pytest

import processes
from conftest import cli_env, REPO_ROOT
from estimator_trainers import cluster as cluster_lib
from estimator_trainers import distribution
from estimator_trainers import errors
from estimator_trainers import registry
from estimator_trainers import run_config
from estimator_trainers.errors import UserInputError
from estimator_trainers.tools import local_cluster

CHIEF, W0, W1, PS0 = '127.0.0.1:1001', '127.0.0.1:1002', '127.0.0.1:1003', '127.0.0.1:1004'


def _cluster(task_type, index=0, ps=True, workers=2, master=False):
    cluster = {'master' if master else 'chief': [CHIEF], 'worker': [W0, W1][:workers]}
    if ps:
        cluster['ps'] = [PS0]
    if not workers:
        del cluster['worker']
    return cluster_lib.parse_tf_config(json.dumps(
        {'cluster': cluster, 'task': {'type': task_type, 'index': index}}))


LOCAL = cluster_lib.ClusterInfo(cluster={})


def _resolve(name, cluster, devices=('/cpu:0',), visible_gpus=0):
    return distribution.resolve(name, cluster, devices, visible_gpus=visible_gpus)


@pytest.mark.parametrize('cluster, devices, expected', [
    (LOCAL, ('/cpu:0',), 'none'),
    (LOCAL, ('/gpu:0', '/gpu:1'), 'none'),
    (_cluster('chief'), ('/cpu:0',), 'parameter_server'),
    (_cluster('chief', ps=False), ('/cpu:0',), 'multi_worker_mirrored'),
    (_cluster('chief', ps=False, workers=0), ('/cpu:0',), 'none'),
])
def test_default_strategy_follows_the_cluster(cluster, devices, expected):
    assert _resolve(None, cluster, devices).strategy == expected


def test_parameter_server_peers_are_the_ps_and_for_workers_the_chief():
    chief = _resolve('parameter_server', _cluster('chief'))
    worker = _resolve('parameter_server', _cluster('worker', 1))
    assert chief.peers == (('ps-0', PS0),)
    assert worker.peers == (('ps-0', PS0), ('chief-0', CHIEF))
    assert not chief.builds_strategy and run_config.train_distribute(chief) is None
    assert (chief.local_replicas, chief.synchronous) == (1, False)


def test_master_cluster_names_its_master_as_peer():
    worker = _resolve(None, _cluster('worker', 0, master=True))
    assert worker.peers == (('ps-0', PS0), ('master-0', CHIEF))


def test_multi_worker_mirrored_peers_are_all_other_workers():
    worker = _resolve('multi_worker_mirrored', _cluster('worker', 0, ps=False))
    assert worker.peers == (('chief-0', CHIEF), ('worker-1', W1))
    assert worker.builds_strategy and worker.synchronous
    assert worker.local_replicas == 1


def test_multi_worker_mirrored_replicates_over_all_gpus():
    dist = _resolve(None, _cluster('chief', ps=False), ('/gpu:0', '/gpu:1'), visible_gpus=2)
    assert dist.local_replicas == 2
    with pytest.raises(UserInputError, match='all 2 GPUs of each worker, not 1'):
        _resolve(None, _cluster('chief', ps=False), ('/gpu:0',), visible_gpus=2)


@pytest.mark.parametrize('task_type', ['ps', 'evaluator'])
def test_ps_and_evaluator_never_build_a_strategy_or_wait(task_type):
    dist = _resolve(None, _cluster(task_type, ps=task_type == 'ps'))
    assert (dist.builds_strategy, dist.peers) == (False, ())


def test_mirrored_in_one_process():
    dist = _resolve('mirrored', LOCAL, ('/cpu:0', '/cpu:1'))
    assert (dist.builds_strategy, dist.local_replicas, dist.peers) == (True, 2, ())


def test_batch_splits_over_local_replicas():
    dist = _resolve('mirrored', LOCAL, ('/cpu:0', '/cpu:1'))
    assert dist.replica_batch(128, '--batch-size') == 64
    with pytest.raises(UserInputError, match=r'^--batch-size=33 must be divisible by the '
                                             r'2 replicas of mirrored$'):
        dist.replica_batch(33, '--batch-size')
    assert _resolve('none', LOCAL).replica_batch(33, '--batch-size') == 33


@pytest.mark.parametrize('name, cluster, message', [
    ('parameter_server', LOCAL, 'needs ps tasks, but this TF_CONFIG cluster (no cluster)'),
    ('parameter_server', _cluster('chief', ps=False),
     'needs ps tasks, but this TF_CONFIG cluster (1 chief, 2 worker) has none'),
    ('multi_worker_mirrored', _cluster('chief'), 'has ps tasks; use parameter_server'),
    ('none', _cluster('chief'), 'has ps tasks; use parameter_server'),
    ('mirrored', _cluster('chief', ps=False, workers=1), 'runs in one process'),
    ('none', _cluster('chief', ps=False), 'has 3 training tasks; use multi_worker_mirrored'),
    ('multi_worker_mirrored', _cluster('master', ps=False, master=True),
     'needs a "chief", not a "master"'),
    ('towers', LOCAL, '--distribution-strategy=towers is not one of'),
])
def test_impossible_combinations_are_one_clear_error(name, cluster, message):
    with pytest.raises(UserInputError, match=message.replace('(', r'\(').replace(')', r'\)')):
        _resolve(name, cluster)


def test_unreachable_peers_waits_for_late_peers_and_names_missing_ones():
    late = socket.socket()
    late.bind(('127.0.0.1', 0))
    late_address = '127.0.0.1:%d' % late.getsockname()[1]
    closed = socket.socket()
    closed.bind(('127.0.0.1', 0))
    closed_address = '127.0.0.1:%d' % closed.getsockname()[1]
    try:
        result = []
        waiter = threading.Thread(target=lambda: result.extend(
            distribution.unreachable_peers(
                [('ps-0', late_address), ('worker-1', closed_address)], 2.5,
                retry_secs=0.1)))
        started = time.monotonic()
        waiter.start()
        time.sleep(0.5)
        late.listen()  # comes up late: no longer reported
        waiter.join()
        assert result == [('worker-1', closed_address)]
        assert time.monotonic() - started >= 2.5
    finally:
        late.close()
        closed.close()


def test_wait_for_peers_says_so_while_waiting_and_names_the_missing_peer(refused_port):
    """The start-up wait runs in the caller (no thread), with progress, then one line."""
    address = '127.0.0.1:%d' % refused_port
    dist = distribution.Distribution('parameter_server', peers=(('ps-0', address),),
                                     peer_timeout_secs=1)
    lines = []
    with pytest.raises(errors.TransientFailure) as raised:
        distribution.wait_for_peers(dist, lines.append)
    assert raised.value.exit_code == errors.EXIT_RETRYABLE
    assert str(raised.value) == (
        'cannot reach ps-0 at %s (from TF_CONFIG) after 1s; is that task running, and is '
        'the address right? (--peer-timeout-secs)' % address)
    assert lines == ['Waiting for ps-0 at %s (from TF_CONFIG) to accept connections: 0s '
                     'of --peer-timeout-secs=1' % address]


def test_all_reduce_tasks_listen_on_their_own_port_while_they_wait():
    """Two all-reduce tasks, neither with a server yet, each see the other's port."""
    ports = local_cluster.free_ports(2)
    labels = ('chief-0', 'worker-0')
    dists = [distribution.Distribution(
        'multi_worker_mirrored', peers=((labels[1 - i], '127.0.0.1:%d' % ports[1 - i]),),
        peer_timeout_secs=20, label=labels[i], address='127.0.0.1:%d' % ports[i])
        for i in range(2)]
    errors_seen, servers = [], []

    def wait(dist):
        try:
            distribution.wait_for_peers(dist, lambda line: None, listen=True)
        except UserInputError as e:
            errors_seen.append(e)
            return
        # What TensorFlow's server does next: bind the same port (it is free).
        servers.append(socket.create_server(('', int(dist.address.rsplit(':', 1)[1]))))

    waiters = [threading.Thread(target=wait, args=(d,)) for d in dists]
    for waiter in waiters:
        waiter.start()
        time.sleep(1)  # the second starts late, as tasks do
    for waiter in waiters:
        waiter.join(30)
    for server in servers:
        server.close()
    assert not errors_seen and len(servers) == 2
    taken = socket.create_server(('', 0))
    try:
        busy = dataclasses.replace(dists[0], address='127.0.0.1:%d' % taken.getsockname()[1])
        with pytest.raises(UserInputError, match=r'cannot listen on port \d+ of chief-0 '
                                                 r'\(127\.0\.0\.1:\d+ in TF_CONFIG\)'):
            distribution.wait_for_peers(busy, lambda line: None, listen=True)
    finally:
        taken.close()


def test_watch_peers_ends_the_process_when_a_peer_goes_away():
    """A peer that was up and stays unreachable for the bound ends the task: exit 203
    (retryable), one line."""
    program = (
        'import socket, time\n'
        'from estimator_trainers import distribution\n'
        'peer = socket.create_server(("127.0.0.1", 0))\n'
        'address = "127.0.0.1:%d" % peer.getsockname()[1]\n'
        'dist = distribution.Distribution("parameter_server", peers=(("ps-0", address),),\n'
        '                                 peer_timeout_secs=1)\n'
        'distribution.wait_for_peers(dist, print)\n'
        'distribution.watch_peers(dist, poll_secs=0.1)\n'
        'peer.close()\n'
        'time.sleep(60)\n')
    proc = processes.run([sys.executable, '-c', program], 30, cwd=REPO_ROOT, env=cli_env())
    assert proc.returncode == errors.EXIT_RETRYABLE
    assert re.fullmatch(r'error: lost ps-0 at 127\.0\.0\.1:\d+ \(from TF_CONFIG\): '
                        r'unreachable for 1s during training; did that task die\? '
                        r'\(--peer-timeout-secs\)\n', proc.stderr), proc.stderr


def test_watch_peers_without_peers_starts_nothing():
    assert distribution.watch_peers(distribution.Distribution('none'),
                                    stderr=io.StringIO()) is None


@pytest.mark.parametrize('task_type, index, expected', [
    ('chief', 0, ['/job:ps', '/job:chief']),
    ('worker', 1, ['/job:ps', '/job:worker/task:1']),
    ('evaluator', 0, []),
])
def test_run_config_keeps_between_graph_sessions_to_ps_and_self(
        task_type, index, expected, monkeypatch, tmp_path):
    cluster = _cluster(task_type, index)
    monkeypatch.setenv('TF_CONFIG', json.dumps(cluster.to_tf_config()))
    dist = _resolve(None, cluster)
    config = run_config.make_run_config(
        str(tmp_path), keep_checkpoint_max=2,
        session=run_config.session_config(num_intra_threads=3), distribution=dist)
    assert list(config.session_config.device_filters) == expected
    assert config.session_config.intra_op_parallelism_threads == 3
    assert config.train_distribute is None


@pytest.mark.parametrize('requested, train_steps, expected', [
    (None, 672, 0),       # the taxi default run: every worker at once
    (None, 1000, 1),      # train-local.sh's CIFAR-10 run
    (None, 80000, 60),    # long runs: TensorFlow's own cap
    (None, None, None),   # no step target known: TensorFlow's default
    (7, 672, 7),          # --max-worker-delay-secs wins
    (0, 80000, 0),
])
def test_run_config_passes_the_worker_delay_cap(requested, train_steps, expected,
                                                monkeypatch, tmp_path):
    cluster = _cluster('worker', 1)
    monkeypatch.setenv('TF_CONFIG', json.dumps(cluster.to_tf_config()))
    args = argparse.Namespace(job_dir=str(tmp_path), random_seed=None, num_intra_threads=0,
                              num_inter_threads=0, log_device_placement=False)
    dist = distribution.resolve(None, cluster, max_worker_delay_secs=requested,
                                visible_gpus=0)
    config = run_config.from_flags(args, dist, train_steps=train_steps)
    assert config.experimental_max_worker_delay_secs == expected
    assert (config.task_type, config.task_id, config.num_ps_replicas) == ('worker', 1, 1)


@pytest.mark.parametrize('name, cluster, requested, expected', [
    (None, LOCAL, None, 32),                               # the trainer's default
    (None, LOCAL, 1, 1),
    (None, _cluster('worker', 1), 8, 8),                   # parameter servers loop when asked
    (None, _cluster('worker', 1), None, 1),                # ... not by default
    (None, _cluster('chief'), None, 1),
    ('mirrored', LOCAL, None, 1),                          # strategies: one step per run
    (None, _cluster('chief', ps=False), None, 1),          # multi_worker_mirrored
    (None, _cluster('chief', ps=False), 1, 1),
])
def test_steps_per_loop_resolves_per_strategy(name, cluster, requested, expected):
    dist = _resolve(name, cluster)
    assert distribution.steps_per_loop(requested, 32, dist) == expected


@pytest.mark.parametrize('name, cluster, strategy', [
    ('mirrored', LOCAL, 'mirrored'),
    (None, _cluster('chief', ps=False), 'multi_worker_mirrored'),
])
def test_more_steps_per_loop_than_a_strategy_holds_is_refused(name, cluster, strategy):
    with pytest.raises(UserInputError) as caught:
        distribution.steps_per_loop(8, 32, _resolve(name, cluster))
    assert str(caught.value).startswith(
        '--steps-per-loop=8 cannot run under --distribution-strategy=%s' % strategy)
    assert caught.value.flag == '--steps-per-loop'


# The pools must be sized before TensorFlow runs: the first op fixes the
# process's kernel pool, which every Session then shares whatever its
# ConfigProto says. A fresh process, as a task is.
_THREADS = '''
import tensorflow as tf
from estimator_trainers import run_config
print(run_config.configure_threads(1, 1))
tf.constant(1.0) + 1.0  # TensorFlow runs from here: the pools are fixed
print(tf.config.threading.get_intra_op_parallelism_threads(),
      tf.config.threading.get_inter_op_parallelism_threads())
print(run_config.configure_threads(2, 2))
print(tf.config.threading.get_intra_op_parallelism_threads())
'''


def test_thread_flags_size_the_process_pools_before_tensorflow_runs():
    proc = processes.run([sys.executable, '-c', _THREADS], 120, cwd=REPO_ROOT,
                         env=cli_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ['True', '1', '1', 'False', '1']


def test_trainers_declare_their_thread_defaults():
    taxi = registry.get('taxi').parse_args(['--train-files', 'x', '--eval-files', 'x',
                                            '--job-dir', 'j'])
    assert (taxi.num_intra_threads, taxi.num_inter_threads) == (1, 1)
    cifar = registry.get('cifar10').parse_args(['--data-dir', 'd', '--job-dir', 'j'])
    assert (cifar.num_intra_threads, cifar.num_inter_threads) == (0, 0)
