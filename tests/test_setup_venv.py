"""scripts/setup-venv.sh: which Python it takes, the uv path, installs and the stamp.

Each test runs the real script from a scratch copy of the repository's set-up
files (the real .venv is never touched) under a PATH that holds only the
interpreters the test names, a few coreutils and, where the test says so, a
stand-in `uv`. The stand-in records every call and fakes what needs the
network: `uv python install` succeeds without downloading (or fails, for the
offline tests), `uv venv` makes a real venv from a Python 3.11 as a managed
3.11 would, and `uv pip install` installs nothing.
"""
import functools
import hashlib
import http.server
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import subprocess
import threading
import zipfile

import pytest

import interpreters
from conftest import REPO_ROOT

SETUP_FILES = ('scripts/setup-venv.sh', 'scripts/fetch_uv.py', 'requirements.txt',
               'requirements-tools.txt', 'requirements-experiments.txt', 'requirements-dev.txt', 'constraints.txt',
               'pyproject.toml')
COREUTILS = ('dirname', 'cat', 'sha256sum', 'cut', 'mkdir', 'mktemp', 'rm', 'mv')
UV_VERSION = re.search(r'^_uv_version="([^"]+)"$',
                       open(os.path.join(REPO_ROOT, 'scripts', 'setup-venv.sh')).read(),
                       re.M).group(1)
WAYS_OUT = ("install python3.11 (or set PYTHON=/path/to/python3.10 or 3.11), or run "
            "'uv python install 3.11' or 'pyenv install 3.11' and rerun, or use the "
            "Docker image (docker build -t estimator-trainers .)")

STAND_IN_UV = r'''#!/bin/bash
# Stand-in uv: records "UV_PYTHON_INSTALL_DIR<TAB>argv" and fakes the command.
printf '%s\t%s\n' "${{UV_PYTHON_INSTALL_DIR-}}" "$*" >> {log}
case "$1 $2" in
  "python install")
    if [[ -n "${{STAND_IN_UV_OFFLINE:-}}" ]]; then
      echo "error: Failed to download cpython-3.11 (network unreachable)" >&2
      exit 2
    fi ;;
  "venv "*) exec {python311} -m venv --without-pip "${{@: -1}}" ;;
  "pip install") ;;
  *) exit 3 ;;
esac
'''


class Sandbox:
    """A scratch repo, a HOME and a PATH directory to run setup-venv.sh in."""

    def __init__(self, tmp_path):
        self.tmp = tmp_path
        self.repo = tmp_path / 'repo'
        self.venv = self.repo / '.venv'
        self.bin = tmp_path / 'bin'
        self.home = tmp_path / 'home'
        self.uv_log = tmp_path / 'uv-calls.log'
        for name in SETUP_FILES:
            (self.repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(os.path.join(REPO_ROOT, name), self.repo / name)
        self.bin.mkdir()
        self.home.mkdir()
        for tool in COREUTILS:
            os.symlink(shutil.which(tool), self.bin / tool)
        self.env = {'PATH': str(self.bin), 'HOME': str(self.home),
                    'PIP_CONFIG_FILE': os.devnull, 'PIP_NO_INDEX': '1',
                    'PIP_FIND_LINKS': str(self._dir('wheels'))}

    def _dir(self, name):
        path = self.tmp / name
        path.mkdir(exist_ok=True)
        return path

    def python(self, name, minor):
        """Puts the real Python 3.<minor> on PATH as `name`; returns its path."""
        target = interpreters.require(minor)
        os.symlink(target, self.bin / name)
        return str(self.bin / name)

    def stand_in_uv(self):
        """The stand-in uv's script text (its `uv venv` makes 3.11 venvs)."""
        return STAND_IN_UV.format(log=self.uv_log, python311=interpreters.require(11))

    def uv_on_path(self):
        uv = self.bin / 'uv'
        uv.write_text(self.stand_in_uv())
        uv.chmod(0o755)
        return str(uv)

    def uv_wheel(self):
        """A uv wheel of the pinned version holding the stand-in, for pip to find."""
        write_wheel(self._dir('wheels'), 'uv', UV_VERSION,
                    {'uv-%s.data/scripts/uv' % UV_VERSION: self.stand_in_uv()})

    def run(self, *args, **env):
        return subprocess.run(['/bin/bash', str(self.repo / 'scripts' / 'setup-venv.sh'), *args],
                              cwd=str(self.repo), env=dict(self.env, **env),
                              capture_output=True, text=True, timeout=300,
                              stdin=subprocess.DEVNULL)

    def uv_calls(self):
        """[(UV_PYTHON_INSTALL_DIR, argv)] of every stand-in uv call so far."""
        if not self.uv_log.exists():
            return []
        return [tuple(line.split('\t')) for line in self.uv_log.read_text().splitlines()]

    def venv_version(self):
        return subprocess.run([str(self.venv / 'bin' / 'python'), '-c',
                               'import sys; print("%d.%d" % sys.version_info[:2])'],
                              capture_output=True, text=True, check=True).stdout.strip()


def load_fetch_uv():
    spec = importlib.util.spec_from_file_location(
        'fetch_uv', os.path.join(REPO_ROOT, 'scripts', 'fetch_uv.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def installed_wheel(folder, name):
    """A wheel of the pure-Python distribution `name` as this environment has it;
    returns `(name, version)`."""
    dist = importlib.metadata.distribution(name)
    info = '%s-%s.dist-info/' % (name, dist.version)
    files = {str(f): f.read_text() for f in dist.files if str(f).endswith('.py')
             and not str(f).startswith('..')}
    if dist.read_text('entry_points.txt'):  # wheel's bdist_wheel command for setuptools
        files[info + 'entry_points.txt'] = dist.read_text('entry_points.txt')
    write_wheel(folder, name, dist.version, files)
    return name, dist.version


def write_wheel(folder, name, version, files, tag='py3-none-any'):
    """A minimal wheel of `files` ({archive path: text}), scripts executable; its path."""
    info = '%s-%s.dist-info' % (name, version)
    members = dict(files)
    members[info + '/METADATA'] = 'Metadata-Version: 2.1\nName: %s\nVersion: %s\n' % (name, version)
    members[info + '/WHEEL'] = ('Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n'
                                'Tag: %s\n' % tag)
    members[info + '/RECORD'] = ''.join('%s,,\n' % path for path in members) + info + '/RECORD,,\n'
    wheel_path = folder / ('%s-%s-%s.whl' % (name, version, tag))
    with zipfile.ZipFile(wheel_path, 'w') as wheel:
        for path, text in members.items():
            member = zipfile.ZipInfo(path)
            member.external_attr = (0o100755 if '.data/scripts/' in path else 0o100644) << 16
            wheel.writestr(member, text)
    return wheel_path


@pytest.fixture
def box(tmp_path):
    return Sandbox(tmp_path)


def managed_python_dir(box):
    return str(box.home / '.local' / 'share' / 'estimator-trainers' / 'python')


def expected_uv_calls(box):
    """What the set-up asks uv for on the managed-Python path, in order."""
    python = str(box.venv / 'bin' / 'python')
    return [(managed_python_dir(box), 'python install --quiet --no-bin 3.11'),
            (managed_python_dir(box), 'venv --quiet --seed --managed-python --python 3.11 %s'
             % box.venv),
            ('', 'pip install --quiet --compile-bytecode --python %s -r %s/requirements-tools.txt '
                 '-c %s/constraints.txt' % (python, box.repo, box.repo)),
            ('', 'pip install --quiet --compile-bytecode --python %s --no-deps '
                 '--no-build-isolation '
                 '--config-settings editable_mode=compat -e %s' % (python, box.repo))]


def test_only_python312_bootstraps_uv_privately_and_makes_a_managed_311_venv(box):
    python312 = box.python('python3', 12)
    box.uv_wheel()
    proc = box.run()
    assert proc.returncode == 0, proc.stderr
    uv_dir = box.home / '.cache' / 'estimator-trainers' / ('uv-' + UV_VERSION)
    uv = str(uv_dir / 'bin' / 'uv')
    assert proc.stderr.splitlines() == [
        'No Python 3.10 or 3.11 on PATH: installing uv %s from PyPI into %s (with %s), then a '
        'managed CPython 3.11 into %s for %s'
        % (UV_VERSION, uv_dir, python312, managed_python_dir(box), box.venv),
        'Installing pinned requirements into %s with uv pip (%s) (first run takes a few '
        'minutes)' % (box.venv, uv)]
    assert box.uv_calls() == expected_uv_calls(box)
    assert box.venv_version() == '3.11'
    # uv went into the private tool dir only, not into 3.12's site-packages.
    assert sorted(os.listdir(uv_dir.parent)) == ['setup.log', 'uv-' + UV_VERSION]
    site = subprocess.run([python312, '-m', 'pip', 'list', '--format=freeze'],
                          capture_output=True, text=True, check=True, env=box.env).stdout
    assert 'uv==' not in site

    # Pins unchanged: nothing is asked again, nothing printed.
    proc = box.run()
    assert (proc.returncode, proc.stderr) == (0, '')
    assert len(box.uv_calls()) == 4


def test_python_without_pip_fetches_uv_from_the_index_json(box):
    """Debian's and Ubuntu's python3 lack pip unless python3-pip is installed."""
    no_pip = box.tmp / 'no-pip'
    subprocess.run([interpreters.require(12), '-m', 'venv', '--without-pip', str(no_pip)],
                   check=True)
    python3 = box.bin / 'python3'
    python3.write_text('#!/bin/sh\nexec %s "$@"\n' % (no_pip / 'bin' / 'python3'))
    python3.chmod(0o755)
    index = box.tmp / 'index'
    (index / 'simple' / 'uv').mkdir(parents=True)
    wheels = []
    for tag in ('py3-none-win_amd64', 'py3-none-%s_1_0_%s' % load_fetch_uv().platform_tags()):
        wheel = write_wheel(index, 'uv', UV_VERSION,
                            {'uv-%s.data/scripts/uv' % UV_VERSION: box.stand_in_uv()}, tag=tag)
        wheels.append({'filename': wheel.name, 'url': '../../' + wheel.name, 'hashes': {
            'sha256': hashlib.sha256(wheel.read_bytes()).hexdigest()}})
    (index / 'simple' / 'uv' / 'index.html').write_text(json.dumps({'files': wheels}))
    server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), functools.partial(
        http.server.SimpleHTTPRequestHandler, directory=str(index)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        proc = box.run(PIP_INDEX_URL='http://127.0.0.1:%d/simple' % server.server_port)
    finally:
        server.shutdown()
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.startswith('No Python 3.10 or 3.11 on PATH: installing uv %s from PyPI '
                                  'into %s/.cache/estimator-trainers/uv-%s (with %s)'
                                  % (UV_VERSION, box.home, UV_VERSION, python3))
    assert box.uv_calls() == expected_uv_calls(box)
    assert box.venv_version() == '3.11'


@pytest.mark.parametrize('tags, wheel', [
    (('manylinux', 'x86_64'), 'manylinux_2_17_x86_64.manylinux2014_x86_64'),
    (('manylinux', 'aarch64'),
     'manylinux_2_17_aarch64.manylinux2014_aarch64.musllinux_1_1_aarch64'),
    (('musllinux', 'aarch64'),
     'manylinux_2_17_aarch64.manylinux2014_aarch64.musllinux_1_1_aarch64'),
    (('musllinux', 'x86_64'), 'musllinux_1_1_x86_64'),
    (('macosx', 'arm64'), 'macosx_11_0_arm64'),
    (('macosx', 'x86_64'), 'macosx_10_12_x86_64'),
])
def test_fetch_uv_picks_the_wheel_for_the_platform(tags, wheel):
    """Against the file names uv 0.13.8 has on PyPI."""
    names = ['linux_armv6l', 'macosx_10_12_x86_64', 'macosx_11_0_arm64',
             'manylinux_2_17_aarch64.manylinux2014_aarch64.musllinux_1_1_aarch64',
             'manylinux_2_17_armv7l.manylinux2014_armv7l.musllinux_1_1_armv7l',
             'manylinux_2_17_armv7l.manylinux2014_armv7l',
             'manylinux_2_17_i686.manylinux2014_i686',
             'manylinux_2_17_ppc64le.manylinux2014_ppc64le',
             'manylinux_2_17_s390x.manylinux2014_s390x',
             'manylinux_2_17_x86_64.manylinux2014_x86_64', 'manylinux_2_28_aarch64',
             'manylinux_2_31_riscv64.musllinux_1_1_riscv64', 'manylinux_2_31_riscv64',
             'musllinux_1_1_i686', 'musllinux_1_1_x86_64', 'win32', 'win_amd64', 'win_arm64']
    files = [{'filename': 'uv-0.13.7-py3-none-%s.whl' % wheel}] + [
        {'filename': 'uv-0.13.8-py3-none-%s.whl' % name} for name in names]
    picked = load_fetch_uv().pick_wheel(files, '0.13.8', tags)
    assert picked['filename'] == 'uv-0.13.8-py3-none-%s.whl' % wheel


def test_uv_on_path_is_used_for_the_managed_python(box):
    box.python('python3', 12)
    uv = box.uv_on_path()
    proc = box.run()
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == [
        'No Python 3.10 or 3.11 on PATH: installing a managed CPython 3.11 with %s into %s '
        'for %s' % (uv, managed_python_dir(box), box.venv),
        'Installing pinned requirements into %s with uv pip (%s) (first run takes a few '
        'minutes)' % (box.venv, uv)]
    assert box.uv_calls() == expected_uv_calls(box)
    assert not (box.home / '.cache' / 'estimator-trainers' / ('uv-' + UV_VERSION)).exists()


def test_offline_bootstrap_fails_in_one_line_naming_the_ways_out(box):
    python312 = box.python('python3', 12)  # and no uv wheel to find: pip cannot get uv
    proc = box.run()
    assert proc.returncode == 1
    tools = box.home / '.cache' / 'estimator-trainers'
    assert proc.stderr.splitlines()[1:] == [
        'error: installing Python 3.11 with uv failed (offline? details in %s/setup.log); %s'
        % (tools, WAYS_OUT)]
    assert proc.stderr.startswith('No Python 3.10 or 3.11 on PATH: installing uv %s from PyPI '
                                  'into %s/uv-%s (with %s)' % (UV_VERSION, tools, UV_VERSION,
                                                               python312))
    assert 'uv==%s' % UV_VERSION in (tools / 'setup.log').read_text()
    assert sorted(os.listdir(tools)) == ['setup.log']  # no half-installed uv left
    assert not box.venv.exists()


def test_offline_managed_python_download_fails_in_one_line(box):
    box.python('python3', 12)
    box.uv_on_path()
    proc = box.run(STAND_IN_UV_OFFLINE='1')
    assert proc.returncode == 1
    log = box.home / '.cache' / 'estimator-trainers' / 'setup.log'
    assert proc.stderr.splitlines()[1:] == [
        'error: installing Python 3.11 with uv failed (offline? details in %s); %s'
        % (log, WAYS_OUT)]
    assert 'Failed to download cpython-3.11' in log.read_text()
    assert [argv for _, argv in box.uv_calls()] == ['python install --quiet --no-bin 3.11']
    assert not box.venv.exists()


def test_no_python_at_all(box):
    proc = box.run()
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [
        'error: no Python 3.10 or 3.11 on PATH, nor any Python to install uv with; ' + WAYS_OUT]


def test_python310_alone_is_taken_and_uv_on_path_installs(box):
    python310 = box.python('python3.10', 10)
    box.python('python3', 12)
    uv = box.uv_on_path()
    proc = box.run('--dev')
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == [
        'Creating %s with Python 3.10 (%s)' % (box.venv, python310),
        'Installing pinned requirements into %s with uv pip (%s) (first run takes a few '
        'minutes)' % (box.venv, uv)]
    assert box.venv_version() == '3.10'
    python = box.venv / 'bin' / 'python'
    assert [argv for _, argv in box.uv_calls()] == [
        'pip install --quiet --compile-bytecode --python %s -r %s/requirements-dev.txt '
        '-c %s/constraints.txt' % (python, box.repo, box.repo),
        'pip install --quiet --compile-bytecode --python %s --no-deps --no-build-isolation '
        '--config-settings editable_mode=compat -e %s' % (python, box.repo)]


def test_311_is_preferred_over_310(box):
    box.python('python3.10', 10)
    python311 = box.python('python3', 11)
    box.uv_on_path()
    proc = box.run()
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines()[0] == 'Creating %s with Python 3.11 (%s)' % (box.venv,
                                                                                python311)
    assert box.venv_version() == '3.11'


def test_python_variable_is_honoured_and_checked(box):
    box.python('python3.11', 11)
    box.uv_on_path()
    python310 = interpreters.require(10)
    proc = box.run(PYTHON=interpreters.require(12))
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        'error: PYTHON=%s is Python 3.12; expected Python 3.10 or 3.11 (unset PYTHON to let '
        'the set-up find or install one)' % interpreters.find(12)]
    assert not box.venv.exists()
    proc = box.run(PYTHON=python310)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines()[0] == 'Creating %s with Python 3.10 (%s)' % (box.venv,
                                                                                python310)
    assert box.venv_version() == '3.10'


def test_existing_venv_of_another_python_is_refused(box):
    subprocess.run([interpreters.require(12), '-m', 'venv', '--without-pip', str(box.venv)],
                   check=True)
    box.python('python3.11', 11)
    proc = box.run()
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [
        'error: %s is not a Python 3.10 or 3.11 environment; remove it and rerun' % box.venv]


@pytest.mark.slow
def test_pip_installs_without_uv_and_again_only_when_pins_change(box):
    """The pip fallback for real, from a local wheel: installs, stamp, reinstall."""
    python310 = box.python('python3.10', 10)
    write_wheel(box.tmp / 'wheels', 'pinned_dep', '1.0', {'pinned_dep.py': 'VERSION = "1.0"\n'})
    # The editable install builds with the venv's setuptools, whose PEP 660 hook
    # before 70.1 needs `wheel`; the real requirements bring it (TensorFlow ->
    # astunparse), this scratch project's from copies of the installed ones.
    build_requirements = [installed_wheel(box.tmp / 'wheels', name)
                          for name in ('wheel', 'packaging')]
    (box.repo / 'requirements.txt').write_text('pinned_dep\nwheel\npackaging\n')
    (box.repo / 'requirements-tools.txt').write_text('-r requirements.txt\n')
    (box.repo / 'constraints.txt').write_text(
        'pinned_dep==1.0\n' + ''.join('%s==%s\n' % pin for pin in build_requirements))
    (box.repo / 'pyproject.toml').write_text(
        '[build-system]\nrequires = ["setuptools>=64"]\n'
        'build-backend = "setuptools.build_meta"\n'
        '[project]\nname = "scratch"\nversion = "0"\n'
        '[tool.setuptools]\npy-modules = ["scratch"]\n')
    (box.repo / 'scratch.py').write_text('')
    proc = box.run()
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == [
        'Creating %s with Python 3.10 (%s)' % (box.venv, python310),
        'Installing pinned requirements into %s with pip (first run takes a few minutes)'
        % box.venv]
    check = subprocess.run(
        [str(box.venv / 'bin' / 'python'), '-c',
         'import pinned_dep, scratch; print(pinned_dep.VERSION, scratch.__file__)'],
        cwd=str(box.tmp), capture_output=True, text=True, check=True)
    assert check.stdout.split() == ['1.0', str(box.repo / 'scratch.py')]

    assert box.run().stderr == ''
    with open(box.repo / 'constraints.txt', 'a') as f:
        f.write('# a pin changed\n')
    proc = box.run()
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == [
        'Installing pinned requirements into %s with pip (first run takes a few minutes)'
        % box.venv]
