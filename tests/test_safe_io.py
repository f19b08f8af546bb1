"""safe_io and job_dir.check_owner: writing where another local user was first."""
import os
import threading

import pytest

from estimator_trainers import job_dir
from estimator_trainers import safe_io
from estimator_trainers.errors import UserInputError

needs_root = pytest.mark.skipif(os.geteuid() != 0,
                                reason='needs root to give files to another user')


@needs_root
def test_job_dir_of_another_user_is_refused(tmp_path):
    os.chown(tmp_path, 65534, 65534)
    with pytest.raises(UserInputError, match=r'^--job-dir %s is owned by user nobody '
                       r'\(uid 65534\), not by you' % tmp_path):
        job_dir.check_owner(str(tmp_path))


def test_job_dir_check_passes_own_missing_and_remote_dirs_and_refuses_a_file(tmp_path):
    job_dir.check_owner(str(tmp_path))
    job_dir.check_owner(str(tmp_path / 'new'))
    job_dir.check_owner('gs://bucket/job')
    (tmp_path / 'file').write_text('x')
    with pytest.raises(UserInputError, match='is not a directory'):
        job_dir.check_owner(str(tmp_path / 'file'))


def test_write_atomic_replaces_a_planted_symlink_instead_of_following_it(tmp_path):
    victim = tmp_path / 'victim'
    victim.write_text('precious')
    os.symlink(victim, tmp_path / 'params.json')
    safe_io.write_atomic(str(tmp_path / 'params.json'), '{}')
    assert victim.read_text() == 'precious'
    assert not os.path.islink(tmp_path / 'params.json')
    assert (tmp_path / 'params.json').read_text() == '{}'
    assert sorted(os.listdir(tmp_path)) == ['params.json', 'victim']


def test_open_append_refuses_a_symlink(tmp_path):
    victim = tmp_path / 'victim'
    victim.write_text('precious')
    os.symlink(victim, tmp_path / 'chief-0.log')
    with pytest.raises(UserInputError, match='is a symlink; refusing to write'):
        safe_io.open_append(str(tmp_path / 'chief-0.log'), 'task log')
    assert victim.read_text() == 'precious'


@needs_root
def test_open_append_refuses_a_file_someone_else_owns(tmp_path):
    theirs = tmp_path / 'chief-0.log'
    theirs.write_text('theirs')
    os.chown(theirs, 65534, 65534)
    with pytest.raises(UserInputError, match='not a regular file of yours'):
        safe_io.open_append(str(theirs), 'task log')
    assert theirs.read_text() == 'theirs'


def _snapshot(directory):
    return {n: (directory / n).read_text() for n in os.listdir(directory)}


def test_staged_files_publish_whole_sets_or_nothing(tmp_path):
    names = ('a.txt', 'index.json')
    with safe_io.staged_files(str(tmp_path), names, '--out-dir') as staging:
        for name in names:
            with open(os.path.join(staging, name), 'w') as f:
                f.write('old ' + name)
    before = _snapshot(tmp_path)
    assert before == {'a.txt': 'old a.txt', 'index.json': 'old index.json'}

    with pytest.raises(RuntimeError, match='disk fell off'):
        with safe_io.staged_files(str(tmp_path), names, '--out-dir') as staging:
            with open(os.path.join(staging, 'a.txt'), 'w') as f:
                f.write('new')
            raise RuntimeError('disk fell off')
    assert _snapshot(tmp_path) == before

    with pytest.raises(RuntimeError, match='staged set lacks index.json'):
        with safe_io.staged_files(str(tmp_path), names, '--out-dir') as staging:
            with open(os.path.join(staging, 'a.txt'), 'w') as f:
                f.write('new')
    assert _snapshot(tmp_path) == before


def _planted_link(tmp_path, name):
    """A symlink `name` in tmp_path to a directory of ours, given to user nobody."""
    victim = tmp_path / 'victim'
    victim.mkdir(exist_ok=True)
    (victim / 'precious').write_text('kept')
    link = tmp_path / name
    os.symlink(victim, link)
    os.lchown(link, 65534, 65534)
    return link


@needs_root
def test_symlink_of_another_user_is_refused_wherever_it_leads(tmp_path):
    """A job-dir that is someone else's symlink to a directory of ours was followed."""
    link = _planted_link(tmp_path, 'taxi')
    with pytest.raises(UserInputError, match=r'^--job-dir %s is a symlink owned by user '
                       r'nobody \(uid 65534\), not by you \(uid 0\); refusing to follow '
                       r'it' % link):
        job_dir.check_owner(str(link))
    with pytest.raises(UserInputError, match=r'^--log-dir %s/logs: %s is a symlink owned '
                       r'by user nobody' % (link, link)):
        safe_io.check_owner(str(link / 'logs'), '--log-dir')
    own = tmp_path / 'mine'
    os.symlink(tmp_path / 'victim', own)
    job_dir.check_owner(str(own))  # our own symlink is fine


def test_listed_checkpoint_does_not_wait_on_a_named_pipe(tmp_path):
    """The launcher names the checkpoint a stopped job kept; a named pipe planted as
    the state file would have blocked it for good."""
    os.mkfifo(tmp_path / job_dir.CHECKPOINT_STATE_FILE)
    answers = []
    thread = threading.Thread(target=lambda: answers.append(
        job_dir.listed_checkpoint(str(tmp_path))), daemon=True)
    thread.start()
    thread.join(10)
    assert answers == [None]
    (tmp_path / 'job').mkdir()
    (tmp_path / 'job' / 'checkpoint').write_text('model_checkpoint_path: "model.ckpt-5"\n')
    assert job_dir.listed_checkpoint(str(tmp_path / 'job')) == str(
        tmp_path / 'job' / 'model.ckpt-5')
