"""Package sdist build and upload to a local GCS emulator."""
import concurrent.futures
import io
import os
import shutil
import socket
import stat
import tarfile

import pytest

import cloud_fakes
from conftest import one_error_line, REPO_ROOT
from estimator_trainers.tools.cloud import staging
from estimator_trainers.errors import UserInputError

BUCKET = 'test-bucket'


@pytest.fixture(scope='module')
def gcs(gcs):  # pylint: disable=redefined-outer-name
    """A google-cloud-storage client of the suite's fake-gcs-server (conftest's gcs)."""
    with cloud_fakes.storage_client(gcs, BUCKET) as client:
        yield client


@pytest.fixture(scope='module')
def sdist(tmp_path_factory):
    return staging.build_sdist(str(tmp_path_factory.mktemp('sdist')))


def _tar_gz(path, files, mtime):
    """Writes a tar.gz of `{name: bytes}` with every member at `mtime`."""
    with tarfile.open(path, 'w:gz') as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), mtime
            tar.addfile(info, io.BytesIO(data))
    return path


def test_sdist_holds_the_packages_and_leaves_the_checkout_alone(tmp_path):
    before = sorted(os.listdir(REPO_ROOT))
    built = staging.build_sdist(str(tmp_path))
    assert sorted(os.listdir(REPO_ROOT)) == before  # built from a copy in tmp_path
    assert built.filename == 'estimator-trainers-0.1.0.tar.gz'
    assert built.size == os.path.getsize(built.path)
    assert built.requires_python == '<3.12,>=3.10'
    with tarfile.open(built.path) as tar:
        names = set(tar.getnames())
    for member in ('pyproject.toml', 'requirements.txt', 'estimator_trainers/tools/cloud/train_cloud.py',
                   'estimator_trainers/training.py', 'cifar10_estimator/cifar10_main.py'):
        assert 'estimator-trainers-0.1.0/' + member in names


def test_two_builds_at_once_do_not_meet(tmp_path):
    """Each build works on its own copy of the tree: `setup.py sdist` in the
    checkout made its release tree there, and a second build removed it."""
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        built = list(pool.map(staging.build_sdist, [str(tmp_path / 'a'), str(tmp_path / 'b')]))
    assert built[0].sha256 == built[1].sha256
    assert os.listdir(tmp_path / 'a') == [built[0].filename]


def test_content_hash_ignores_timestamps_but_not_contents(tmp_path):
    one = _tar_gz(str(tmp_path / 'one.tar.gz'), {'p/a.py': b'x = 1\n'}, mtime=1000)
    two = _tar_gz(str(tmp_path / 'two.tar.gz'), {'p/a.py': b'x = 1\n'}, mtime=2000)
    changed = _tar_gz(str(tmp_path / 'three.tar.gz'), {'p/a.py': b'x = 2\n'}, mtime=1000)
    renamed = _tar_gz(str(tmp_path / 'four.tar.gz'), {'p/b.py': b'x = 1\n'}, mtime=1000)
    with open(one, 'rb') as f1, open(two, 'rb') as f2:
        assert f1.read() != f2.read()
    assert staging.content_sha256(one) == staging.content_sha256(two)
    assert staging.content_sha256(one) != staging.content_sha256(changed)
    assert staging.content_sha256(one) != staging.content_sha256(renamed)


def test_rebuilding_the_same_tree_gives_the_same_hash(tmp_path, sdist):
    assert staging.build_sdist(str(tmp_path)).sha256 == sdist.sha256


def test_stage_uploads_then_skips_the_same_contents(gcs, sdist):
    destination = staging.staging_uri('gs://%s' % BUCKET, 'train_cifar10_1', sdist.filename)
    assert destination == 'gs://test-bucket/staging/train_cifar10_1/estimator-trainers-0.1.0.tar.gz'
    assert staging.stage(gcs, sdist, destination) is True
    blob = gcs.bucket(BUCKET).get_blob('staging/train_cifar10_1/' + sdist.filename)
    assert blob.metadata == {'content-sha256': sdist.sha256}
    generation = blob.generation
    assert generation
    with open(sdist.path, 'rb') as f:
        assert blob.download_as_bytes() == f.read()

    assert staging.stage(gcs, sdist, destination) is False
    assert gcs.bucket(BUCKET).get_blob('staging/train_cifar10_1/' + sdist.filename).generation \
        == generation


def test_stage_replaces_different_contents(gcs, sdist, tmp_path):
    destination = 'gs://%s/staging/train_taxi_2/%s' % (BUCKET, sdist.filename)
    assert staging.stage(gcs, sdist, destination)
    path = _tar_gz(str(tmp_path / sdist.filename), {'p/a.py': b'changed\n'}, mtime=0)
    other = staging.Sdist(path, staging.content_sha256(path), os.path.getsize(path))
    assert staging.stage(gcs, other, destination) is True
    blob = gcs.bucket(BUCKET).get_blob('staging/train_taxi_2/' + sdist.filename)
    assert blob.metadata == {'content-sha256': other.sha256}
    assert blob.size == other.size


def test_python_mismatch_of_prebuilt_images():
    py310 = 'us-docker.pkg.dev/vertex-ai/training/tf-cpu.2-15.py310:latest'
    assert staging.python_mismatch('>=3.10,<3.12', py310) is None
    assert staging.python_mismatch(None, py310) is None
    assert staging.python_mismatch('==3.11.*', 'us-docker.pkg.dev/p/r/tf:latest') is None
    assert staging.python_mismatch('==3.11.*', py310) == (
        'the package requires Python ==3.11.* (pyproject.toml) but %s runs Python 3.10, so pip '
        'cannot install it there; build the container in Dockerfile and pass --image-uri'
        % py310)


def _special_file(path, kind):
    """Makes a named pipe, a socket or a character device at `path`."""
    if kind == 'pipe':
        os.mkfifo(path)
    elif kind == 'socket':
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind(str(path))  # the file stays after the socket is closed
    else:
        try:
            os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 5))  # like /dev/zero
        except PermissionError:
            pytest.skip('cannot make a device file here (needs root)')


@pytest.mark.parametrize('kind,named', [('pipe', 'a pipe'), ('socket', 'a socket'),
                                        ('device', 'a character device')])
def test_a_package_holding_a_special_file_is_one_line(tmp_path, kind, named):
    """`ai-platform.sh jobs submit training --package-path DIR` with a named pipe in DIR
    was a shutil.Error traceback from the sdist build (a device would be read for good)."""
    from test_cloud_cli import OFFLINE_ENV  # pylint: disable=import-outside-toplevel
    from test_gcloud_packages import submit  # pylint: disable=import-outside-toplevel
    source = tmp_path / 'src'
    shutil.copytree(os.path.join(REPO_ROOT, 'tests', 'packages', 'course'), source)
    special = source / 'trainer' / 'inputs'
    _special_file(special, kind)
    proc = submit('special_file', '--job-dir', 'gs://my-bucket/out', '--package-path',
                  'trainer', '--module-name', 'trainer.task', '--dry-run', cwd=source,
                  env=OFFLINE_ENV, check=2, script=True, timeout=120)
    one_error_line(proc, '--package-path trainer: %s is %s; a package holds files and '
                   'directories, so the sdist cannot be built: move it out' % (special, named))
    assert proc.stdout == ''


def test_an_empty_package_is_one_line(tmp_path):
    from test_cloud_cli import OFFLINE_ENV  # pylint: disable=import-outside-toplevel
    from test_gcloud_packages import submit  # pylint: disable=import-outside-toplevel
    (tmp_path / 'trainer').mkdir()
    (tmp_path / 'trainer' / '__init__.py').write_text('')
    proc = submit('empty', '--job-dir', 'gs://my-bucket/out', '--package-path', 'trainer',
                  '--module-name', 'trainer.task', '--dry-run', cwd=tmp_path,
                  env=OFFLINE_ENV, check=2, script=True, timeout=120)
    one_error_line(proc, '--package-path trainer: the package holds no module besides '
                   '__init__.py; expected the module --module-name runs (e.g. %s)'
                   % (tmp_path / 'trainer' / 'task.py'))


def test_the_package_check_skips_what_the_build_leaves_out(tmp_path):
    """A pipe in a directory the copy leaves out (no Python, named by no build file)
    does not stop the build."""
    package = tmp_path / 'trainer'
    (package / 'data').mkdir(parents=True)
    (package / '__init__.py').write_text('')
    (package / 'task.py').write_text('print(1)\n')
    os.mkfifo(package / 'data' / 'fifo')
    staging.check_package_files(str(package), str(package), '--package-path trainer')
    os.mkfifo(package / 'fifo')
    with pytest.raises(UserInputError, match='fifo is a pipe'):
        staging.check_package_files(str(package), str(package), '--package-path trainer')


def test_an_empty_or_broken_setup_py_is_named_in_one_line(tmp_path):
    """Seed 000's empty setup.py beside its trainer/: the build backend only said
    `ERROR Backend subprocess exited when trying to invoke build_sdist`."""
    package = tmp_path / 'trainer'
    package.mkdir()
    (package / '__init__.py').write_text('')
    (package / 'task.py').write_text('print(1)\n')
    setup = tmp_path / 'setup.py'
    setup.write_text('# nothing here yet\n\n')
    with pytest.raises(UserInputError) as raised:
        staging.build_package(str(package), str(tmp_path / 'out'))
    assert str(raised.value) == (
        '--package-path %s: %s is empty, so it builds no package (gcloud built the package '
        'with the setup.py beside it); make it call setuptools.setup(name=..., packages='
        'find_packages()), or delete it to pack trainer/ alone with a generated one'
        % (package, setup))
    setup.write_text('import setuptools_scm_missing\n')
    with pytest.raises(UserInputError) as raised:
        staging.build_package(str(package), str(tmp_path / 'out'))
    assert str(raised.value) == (
        'building the sdist of --package-path %s (with %s) failed: %s: ModuleNotFoundError: '
        "No module named 'setuptools_scm_missing'" % (package, setup, setup))
