"""Google's own `gcloud ai-platform local train` and `local predict`, run offline as the reference.

The machine image ships the Cloud SDK (`gcloud` on PATH); where it is absent
the tests that need it skip with `SKIP`. Each `Gcloud` has a private
configuration directory (`CLOUDSDK_CONFIG`: no account, no prompts, no update
checks) whose `ml_engine/local_python` is this project's virtualenv, as
/work/shared/notes/reference-facts.md describes: gcloud then runs the
trainers and predicts with this project's TensorFlow, and touches no
network.

One shortcut, named here because it is not gcloud's code: before it starts
each task of `--distributed`, gcloud asks `local_python -c 'import tensorflow
as tf; print(tf.version.VERSION)'` to choose `chief` or `master` (a
TensorFlow import each time, about ten seconds per task on a shared 2-core
machine). The configured python is a small script that answers that one
question with the installed TensorFlow's version, what the import prints,
and runs everything else with the virtualenv's python.
"""
import importlib.metadata
import json
import os
import re
import shutil
import socket
import subprocess
import sys

from conftest import cli_env

GCLOUD = shutil.which('gcloud')
SKIP = "gcloud is not on PATH: the differential tests run Google's Cloud SDK as the reference"
_VERSION_QUESTION = 'import tensorflow as tf; print(tf.version.VERSION)'
_PYTHON = """\
#!/bin/sh
# gcloud's question before each task it starts, answered as the import would.
if [ "$#" -eq 2 ] && [ "$1" = "-c" ] && [ "$2" = {question} ]; then
  echo {version}
  exit 0
fi
exec {python} "$@"
"""


def free_block(count, first=20000, last=60000):
    """The first port of `count` consecutive free ports on 127.0.0.1 (gcloud's
    `--start-port` takes a block, which it does not check)."""
    for start in range(first + os.getpid() * 37 % (last - first), last, count + 1):
        sockets = []
        try:
            for port in range(start, start + count):
                sock = socket.socket()
                sockets.append(sock)
                sock.bind(('127.0.0.1', port))
            return start
        except OSError:
            continue
        finally:
            for sock in sockets:
                sock.close()
    raise RuntimeError('no %d consecutive free ports' % count)


class Gcloud:
    """A private gcloud configuration that runs this project's Python, offline."""

    def __init__(self, directory):
        self.directory = str(directory)
        self.config_dir = os.path.join(self.directory, 'config')
        os.makedirs(self.config_dir, exist_ok=True)
        self.python = os.path.join(self.directory, 'python')
        with open(self.python, 'w') as f:
            f.write(_PYTHON.format(question="'%s'" % _VERSION_QUESTION,
                                   version=importlib.metadata.version('tensorflow'),
                                   python=sys.executable))
        os.chmod(self.python, 0o755)
        # What `gcloud config set SECTION/NAME VALUE` writes, once per setting.
        os.makedirs(os.path.join(self.config_dir, 'configurations'), exist_ok=True)
        with open(os.path.join(self.config_dir, 'active_config'), 'w') as f:
            f.write('default')
        with open(os.path.join(self.config_dir, 'configurations', 'config_default'),
                  'w') as f:
            f.write('[ml_engine]\nlocal_python = %s\n\n[core]\ndisable_usage_reporting = '
                    'true\n\n[component_manager]\ndisable_update_check = true\n\n'
                    '[survey]\ndisable_prompts = true\n' % self.python)
        proc = self.run(['config', 'get', 'ml_engine/local_python'], timeout=120)
        assert proc.stdout.strip() == self.python, proc.stderr[-2000:]

    def env(self):
        return cli_env({'CLOUDSDK_CONFIG': self.config_dir,
                        'CLOUDSDK_CORE_DISABLE_PROMPTS': '1'})

    def run(self, args, timeout, cwd=None):
        """`gcloud ARGS`: the finished process, output as text."""
        return subprocess.run([GCLOUD, *args], cwd=cwd, env=self.env(), capture_output=True,
                              text=True, timeout=timeout, stdin=subprocess.DEVNULL,
                              check=False)

    def local_train(self, package_path, module, job_dir, user_args, *, distributed=None,
                    timeout=900):
        """`gcloud ai-platform local train` from the package's parent directory.

        Args:
          distributed: None for one process, else `(parameter servers, workers,
            evaluators)` for `--distributed` on a free block of ports.
        """
        args = ['ai-platform', 'local', 'train', '--package-path', package_path,
                '--module-name', module, '--job-dir', str(job_dir)]
        if distributed:
            ps, workers, evaluators = distributed
            args += ['--distributed', '--parameter-server-count', str(ps), '--worker-count',
                     str(workers), '--evaluator-count', str(evaluators), '--start-port',
                     str(free_block(1 + ps + workers))]
        return self.run(args + ['--', *[str(a) for a in user_args]], timeout,
                        cwd=os.path.dirname(os.path.abspath(package_path)))

    def local_predict(self, model_dir, instances, timeout=300):
        """`gcloud ai-platform local predict --json-instances`: its predictions."""
        path = os.path.join(self.directory, 'instances.json')
        with open(path, 'w') as f:
            f.write(''.join(json.dumps(instance) + '\n' for instance in instances))
        proc = self.run(['ai-platform', 'local', 'predict', '--model-dir', str(model_dir),
                         '--json-instances', path, '--format', 'json'], timeout)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads(proc.stdout)['predictions']


def train_one_process(gcloud, module, job_dir, args):
    """One process of `module`'s trainer: `gcloud ai-platform local train` with `gcloud`
    (a `Gcloud`), else `python -m MODULE` (where gcloud is absent). Returns the
    finished process, checked by `ended_well`."""
    if gcloud is None:
        proc = subprocess.run([sys.executable, '-m', module, *[str(a) for a in args],
                               '--job-dir', str(job_dir)], env=cli_env(),
                              capture_output=True, text=True, timeout=900,
                              stdin=subprocess.DEVNULL, check=False)
    else:
        package = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                               module.split('.')[0])
        proc = gcloud.local_train(package, module, job_dir, args)
    ended_well(proc)
    return proc


def ended_well(proc):
    """Asserts a run ended with status 0, no `error` line and no traceback; its output."""
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-5000:]
    assert not re.search(r'^(\S+ )?error', output, re.M | re.I), output[-5000:]
    assert 'Traceback' not in output, output[-5000:]
    return output
