"""`setup.py` at the top level, as users' scripts and gcloud call it.

gcloud's `--package-path` ran the package's parent's setup.py as
`setup.py egg_info --egg-base W build --build-base W --build-temp W sdist
--dist-dir OUT`; Vertex AI's docs say `python setup.py sdist --formats=gztar`.
Both must give an sdist with every package of the repository (the runtime,
its tools, each trainer), whose metadata is pyproject.toml's, and which
installs with its requirements; its three trainer entry points then answer
`--help` from the installed package, outside the checkout.
"""
import os
import subprocess
import sys
import tarfile

import pytest

import checkouts
from conftest import REPO_ROOT
from estimator_trainers import registry
from estimator_trainers.tools.cloud import packages

GCLOUD = ['egg_info', '--egg-base', '{work}', 'build', '--build-base', '{work}',
          '--build-temp', '{work}', 'sdist', '--dist-dir', '{out}']
VERTEX = ['sdist', '--formats=gztar', '--dist-dir', '{out}']


@pytest.mark.parametrize('command', [GCLOUD, VERTEX], ids=['gcloud', 'vertex-docs'])
def test_setup_py_builds_an_sdist_of_every_package_that_installs_and_runs(tmp_path, command):
    copy = checkouts.clone(tmp_path / 'checkout')
    work, out = tmp_path / 'work', tmp_path / 'out'
    work.mkdir()
    argv = [arg.format(work=work, out=out) for arg in command]
    proc = subprocess.run([sys.executable, 'setup.py', *argv], cwd=copy, capture_output=True,
                          text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (sdist,) = out.glob('*.tar.gz')
    assert sdist.name == 'estimator-trainers-0.1.0.tar.gz'
    with tarfile.open(sdist) as tar:
        names = {name.split('/', 1)[1] for name in tar.getnames() if '/' in name}
    trainers = registry.discover([REPO_ROOT]).values()
    for module in ['estimator_trainers.runner', 'estimator_trainers.tools.cloud.pipeline'] + [
            trainer.module for trainer in trainers]:
        assert module.replace('.', '/') + '.py' in names, module
    assert 'tests/conftest.py' not in names and 'configs/cmle_config.yaml' in names

    python = packages.install([str(sdist)], str(tmp_path / 'venv'),
                              dict(os.environ, PIP_NO_INDEX='1'))
    outside = tmp_path / 'elsewhere'
    outside.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ('PYTHONPATH', 'TF_CONFIG')}
    for trainer in trainers:
        proc = subprocess.run(
            [python, '-c', 'import runpy, sys, %s as m; print(m.__file__); sys.argv[1:] = '
             '["--help"]; runpy.run_module("%s", run_name="__main__")'
             % (trainer.module, trainer.module)], cwd=outside, env=env, capture_output=True,
            text=True, timeout=300, check=False)
        assert proc.returncode == 0, proc.stderr[-3000:]
        location, usage = proc.stdout.split('\n', 1)
        assert location.startswith(str(tmp_path / 'venv')), location  # not the checkout
        assert usage.startswith('usage: python -m %s' % trainer.module)
