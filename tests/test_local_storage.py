"""Local storage, what a rehearsal without an account runs on (`tools/local_storage.py`,
`tools/storage_server.py`) and the inputs it is given from this machine
(`tools/cloud/local_inputs.py`).

The mirror keeps a prefix as files and directories (an empty directory too)
and gives it back; no process of the storage outlives whoever started it,
even killed; a port taken before the emulator binds it means another port; a
`--local-input` that cannot be copied is one line naming it.
The end-to-end rehearsals without an account are HW3's script
(tests/test_course_lines.py) and the Keras MNIST line
(tests/test_gcloud_packages.py); the pipeline's choice of storage is in
tests/test_cloud_cli.py.
"""
import argparse
import io
import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest

import cloud_fakes
import processes
from conftest import cli_env
from estimator_trainers.errors import UserInputError
from estimator_trainers.tools import storage_server
from estimator_trainers.tools.cloud import local_inputs


def test_the_mirror_keeps_a_prefix_and_gives_it_back(gcs, tmp_path):
    gcs.create_bucket('mirror-bkt')
    data = tmp_path / 'x.txt'
    data.write_text('checkpoint')
    for name in ('job/a/x.txt', 'other.txt'):
        gcs.upload('mirror-bkt', name, str(data))
    gcs.upload('mirror-bkt', 'job/empty/', None)  # a directory TensorFlow made
    mirror = tmp_path / 'mirror'
    assert gcs.save(str(mirror), ['gs://mirror-bkt/job', 'gs://mirror-bkt/none']) == {
        'gs://mirror-bkt/job': str(mirror / 'mirror-bkt' / 'job')}
    job = mirror / 'mirror-bkt' / 'job'
    assert (job / 'a' / 'x.txt').read_text() == 'checkpoint'
    assert (job / 'empty').is_dir() and not (mirror / 'mirror-bkt' / 'other.txt').exists()
    os.rename(mirror / 'mirror-bkt', mirror / 'mirror-two')
    assert gcs.load(str(mirror), ['gs://mirror-two/job']) == 4
    assert sorted(gcs.list_objects('mirror-two')) == ['job/', 'job/a/', 'job/a/x.txt',
                                                      'job/empty/']
    assert gcs.read_object('gs://mirror-two/job/a/x.txt') == b'checkpoint'


def _alive(pid):
    """Whether `pid` runs (a zombie waiting for its reaper does not)."""
    try:
        with open('/proc/%d/stat' % pid) as f:
            return f.read().rsplit(')', 1)[1].split()[0] not in ('Z', 'X')
    except OSError:
        return False


def test_nothing_outlives_a_killed_owner(tmp_path):
    """The owner SIGKILLed: its server sees it gone and stops the emulator."""
    owner = processes.popen(
        [sys.executable, '-c', 'import sys, time\nfrom estimator_trainers.tools import '
         'local_storage\nstorage = local_storage.LocalStorage(sys.argv[1]).start()\n'
         'print(*storage.pids, flush=True)\ntime.sleep(600)', str(tmp_path)],
        stdout=subprocess.PIPE, text=True, env=cli_env())
    pids = [int(pid) for pid in owner.stdout.readline().split()]
    assert len(pids) == 2 and all(_alive(pid) for pid in pids)
    os.kill(owner.pid, signal.SIGKILL)
    owner.wait()
    owner.stdout.close()
    deadline = time.monotonic() + 30
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(pid) for pid in pids)


@pytest.mark.parametrize('text, message', [
    ('data/cifar10', r'expected gs://BUCKET\[/PREFIX\]=DIR'),
    ('gs://Bad_Bucket/x=data', "bucket name 'Bad_Bucket' is not valid"),
])
def test_a_mapping_that_is_not_one_is_refused_when_parsed(text, message):
    with pytest.raises(argparse.ArgumentTypeError, match=message):
        local_inputs.parse(text)


def test_a_local_input_that_cannot_be_copied_is_one_line(tmp_path):
    missing = local_inputs.parse('gs://bkt/data=%s' % (tmp_path / 'nowhere'))
    with pytest.raises(UserInputError) as raised:
        local_inputs.files(missing)
    assert str(raised.value) == '--local-input gs://bkt/data=%s: no such file or directory' \
        % (tmp_path / 'nowhere')
    (tmp_path / 'data').mkdir()
    os.mkfifo(tmp_path / 'data' / 'pipe')
    with pytest.raises(UserInputError, match=r'pipe is a pipe; only regular files are copied'):
        local_inputs.files(local_inputs.parse('gs://bkt/data=%s' % (tmp_path / 'data')))
    os.remove(tmp_path / 'data' / 'pipe')
    (tmp_path / 'data' / 'sub').mkdir()
    (tmp_path / 'data' / 'sub' / 'train.csv').write_text('1,2\n')
    assert [name for name, _, _ in local_inputs.files(local_inputs.parse(
        'gs://bkt/data/=%s' % (tmp_path / 'data')))] == ['data/sub/train.csv']


def test_a_local_input_is_copied_again_only_when_it_changed(gcs, tmp_path):
    """On an emulator that outlives one rehearsal (an experiment's)."""
    (tmp_path / 'train.csv').write_text('1,2\n')
    mapping = local_inputs.parse('gs://inputs-again/data/train.csv=%s' % (tmp_path / 'train.csv'))
    said = io.StringIO()
    with cloud_fakes.storage_client(gcs, 'inputs-again') as client:
        for _ in range(2):
            local_inputs.copy(client, [mapping], said)
        os.utime(tmp_path / 'train.csv', ns=(0, 0))
        local_inputs.copy(client, [mapping], said)
    line = '--local-input gs://inputs-again/data/train.csv: 1 file (4 bytes) from %s' \
        % (tmp_path / 'train.csv')
    assert re.sub(r'in \d+\.\d s$', 'in S s', said.getvalue(), flags=re.M).splitlines() == [
        line + ' copied in S s', line + ', unchanged since they were copied',
        line + ' copied in S s']
    assert gcs.read_object('gs://inputs-again/data/train.csv') == b'1,2\n'


def test_a_port_taken_before_the_emulator_binds_it_is_tried_again(tmp_path, monkeypatch):
    """fake-gcs-server cannot take a port the kernel picks: a clash means another port."""
    with socket.socket() as taken:
        taken.bind(('127.0.0.1', 0))
        taken.listen()
        ports = [taken.getsockname()[1]]
        free = storage_server._free_port  # pylint: disable=protected-access
        monkeypatch.setattr(storage_server, '_free_port',
                            lambda: ports.pop() if ports else free())
        emulator = storage_server.Emulator(str(tmp_path / 'emulator.log'))
        try:
            emulator.start()
            assert emulator.port != taken.getsockname()[1] and not ports
            assert storage_server.request(emulator.port, 'GET', '/storage/v1/b')[0] == 200
        finally:
            emulator.stop()
    assert 'address already in use' in (tmp_path / 'emulator.log').read_text()
