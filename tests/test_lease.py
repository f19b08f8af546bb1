"""The job-dir lease itself: who gets it, who shares it, locally and on gs://."""
import json
import os
import tempfile

import pytest

from estimator_trainers import cluster as cluster_lib
from estimator_trainers import job_dir
from estimator_trainers import lease
from estimator_trainers.errors import UserInputError

CLUSTER = {'cluster': {'chief': ['10.0.0.1:2222'], 'worker': ['10.0.0.2:2222'],
                       'ps': ['10.0.0.3:2222']}}


def _info(task_type, environ=None):
    config = dict(CLUSTER, task={'type': task_type, 'index': 0})
    return cluster_lib.parse_tf_config(json.dumps(config)), environ or {}


def test_tasks_of_one_cluster_share_an_id_and_other_jobs_do_not():
    chief = lease.cluster_id(*_info('chief'))
    assert lease.cluster_id(*_info('worker')) == chief
    assert lease.cluster_id(*_info('evaluator')) == chief
    assert lease.cluster_id(*_info('chief', {'CLOUD_ML_JOB_ID': '123'})) != chief
    single = cluster_lib.ClusterInfo(cluster={})
    assert lease.cluster_id(single) != lease.cluster_id(single)


def test_workers_share_the_chiefs_lease_and_refuse_another_jobs(tmp_path):
    lines = []
    chief = lease.Lease(str(tmp_path), 'cluster-a', 'chief-0', log=lines.append).acquire()
    try:
        lease.Lease(str(tmp_path), 'cluster-a', 'worker-0').check_shared()
        with pytest.raises(UserInputError, match=r'is in use by chief-0 \(pid %d '
                           % os.getpid()):
            lease.Lease(str(tmp_path), 'cluster-b', 'worker-0').check_shared()
        with pytest.raises(UserInputError, match='of another job'):
            lease.Lease(str(tmp_path), 'cluster-b', 'chief-0').acquire()
        # A chief restarted with the same TF_CONFIG takes its predecessor's lease.
        restarted = lease.Lease(str(tmp_path), 'cluster-a', 'chief-0', log=lines.append)
        restarted.acquire()
        assert lines == ['Job-dir lease: taking over from chief-0 (pid %d on %s, heartbeat '
                         '%s), an earlier process of this cluster'
                         % (os.getpid(), lease.socket.gethostname(),
                            lines[0].split('heartbeat ')[1].split(')')[0])]
        restarted.release()
    finally:
        chief.release()
    assert not (tmp_path / job_dir.LEASE_FILE).exists()


def test_lease_of_a_process_gone_from_this_host_is_stale(tmp_path):
    lines = []
    gone = lease.Owner(token='0' * 32, cluster_id='local-x', host=lease.socket.gethostname(),
                       pid=os.getpid(), pid_start='not-this-process', task='local',
                       heartbeat=lease.time.time())
    (tmp_path / job_dir.LEASE_FILE).write_text(json.dumps(gone.__dict__))
    taken = lease.Lease(str(tmp_path), 'local-y', 'local', log=lines.append).acquire()
    taken.release()
    assert lines[0].endswith(': its process %d on this host is gone' % os.getpid())


@pytest.mark.parametrize('client', ['google-cloud-storage', 'gfile'])
def test_gcs_lease_is_exclusive(client, monkeypatch):
    """gs://: created with if_generation_match=0, or written and read back (fallback)."""
    gcs_emulator = pytest.importorskip('gcs_emulator')
    with gcs_emulator.GcsEmulator(tempfile.mkdtemp()) as emulator:
        for name, value in emulator.env().items():
            monkeypatch.setenv(name, value)
        emulator.create_bucket('bucket')
        if client == 'gfile':
            monkeypatch.setattr(lease, '_create_gcs_object', lambda path, text: None)
        else:
            assert lease._create_gcs_object('gs://bucket/probe', 'x') is True  # pylint: disable=protected-access
            assert lease._create_gcs_object('gs://bucket/probe', 'y') is False  # pylint: disable=protected-access
        job_dir = 'gs://bucket/job'
        first = lease.Lease(job_dir, 'cluster-a', 'chief-0').acquire()
        with pytest.raises(UserInputError, match='of another job'):
            lease.Lease(job_dir, 'cluster-b', 'chief-0').acquire()
        first.release()
        assert emulator.list_objects('bucket', 'job') == []
        lease.Lease(job_dir, 'cluster-b', 'chief-0').acquire().release()


@pytest.mark.parametrize('text', [
    '{"token": "t", "cluster_id": "c", "host": "h", "pid": "x", "pid_start": "1", '
    '"task": "local", "heartbeat": 1}',
    '{"token": "t", "cluster_id": "c", "host": "h", "pid": 7, "pid_start": "1", '
    '"task": "local", "heartbeat": null}',
    '[' * 100000 + ']' * 100000,
], ids=['pid-text', 'heartbeat-null', 'deep-nesting'])
def test_garbled_lease_is_unreadable_and_taken_over(tmp_path, text):
    """A lease with wrong field types or nesting too deep for Python's JSON reader is
    taken over as unreadable (it was a TypeError or RecursionError traceback)."""
    (tmp_path / job_dir.LEASE_FILE).write_text(text)
    lines = []
    taken = lease.Lease(str(tmp_path), 'local-y', 'local', log=lines.append).acquire()
    taken.release()
    assert lines == ['Job-dir lease: taking over the stale lease of LEASE.json: it is '
                     'unreadable']
