"""Runs a user's package in this project's image, as AI Platform's runtimes did.

    python -m estimator_trainers.tools.cloud.bootstrap --package-uri gs://.../trainer-0.0.0.tar.gz \\
        [--package-uri ...] --module-name trainer.task [--tf-config-primary master] \\
        [--unpin NAME ...] -- ARGS...

The command of every pool of a `gcloud ai-platform` submission whose package
runs on this project's image (TensorFlow 2.15.1 with tf.estimator): it
downloads the staged archives, pip-installs them together (with their
requirements, which pip resolves) into a fresh virtualenv layered over the
image's packages, so nothing the image pins is replaced (except the
requirements the submission let the package choose, `--unpin`), then
replaces itself with `python -m MODULE ARGS` from there. With `--tf-config-primary
master` it first renames TF_CONFIG's `chief` to `master` (not for
evaluators, which TensorFlow refuses beside a master), as AI Platform
named it for runtimes before 2.1. In a JobSet pod, which has no TF_CONFIG,
it sets the one `cluster.jobset_tf_config` derives (`replicas.package_env`),
so the package reads TF_CONFIG as anywhere else.

A download or install failure is one `error:` line, and the replica exits 2.
"""
import argparse
import os
import sys
import tempfile
from typing import List, Mapping, Optional, Sequence, Tuple

from estimator_trainers import errors
from estimator_trainers import flags
from estimator_trainers import google_api
from estimator_trainers.tools.cloud import packages
from estimator_trainers.tools.cloud import replicas
from estimator_trainers.tools.cloud.roles import CHIEF, MASTER


def parse_args(argv: Sequence[str]) -> Tuple[argparse.Namespace, List[str]]:
    """The bootstrap's flags, and the user's args after `--`."""
    argv, user_args = flags.split_at_dashes(argv)
    user_args = user_args or []
    parser = flags.make_parser('python -m estimator_trainers.tools.cloud.bootstrap',
                               'Install a job\'s packages, then run its module.')
    parser.add_argument('--package-uri', action='append', default=[], required=True,
                        help='A staged archive (gs:// or a local path); repeatable.')
    parser.add_argument('--module-name', required=True, help='The module to run.')
    parser.add_argument('--tf-config-primary', choices=(CHIEF, MASTER), default=CHIEF,
                        help='TF_CONFIG\'s name for the first pool.')
    parser.add_argument('--unpin', action='append', default=[],
                        help='A requirement the package may choose over the image\'s pin; '
                             'repeatable.')
    args = parser.parse_args(argv)
    return args, user_args


def download(uris: Sequence[str], work_dir: str, environ: Mapping[str, str]) -> List[str]:
    """Local paths of `uris` (gs:// objects downloaded into `work_dir`)."""
    paths = []
    client = None
    for uri in uris:
        if not uri.startswith('gs://'):
            paths.append(uri)
            continue
        project = environ.get('CLOUD_ML_PROJECT_ID') or None
        client = client or google_api.storage_client(project, None)
        bucket, _, name = uri[len('gs://'):].partition('/')
        path = os.path.join(work_dir, '%d-%s' % (len(paths), os.path.basename(name)))
        blob = client.bucket(bucket).blob(name)
        google_api.storage_call(
            lambda: blob.download_to_filename(path, timeout=google_api.TIMEOUT_SECS, retry=None),
            'downloading the package %s' % uri, project, client.api_endpoint)
        paths.append(path)
    return paths


def main(argv: Optional[Sequence[str]] = None) -> None:
    """Installs the job's packages into a fresh virtualenv and runs its module there."""
    args, user_args = parse_args(sys.argv[1:] if argv is None else argv)
    environ = dict(os.environ)
    work_dir = tempfile.mkdtemp(prefix='job-packages-')
    archives = download(args.package_uri, work_dir, environ)
    python = packages.install(archives, os.path.join(work_dir, 'venv'), environ,
                              layers=packages.path_layers(),
                              what=', '.join(args.package_uri), unpinned=args.unpin)
    environ = replicas.package_env(environ, args.tf_config_primary)
    sys.stdout.flush()
    os.execve(python, [python, '-m', args.module_name, *user_args], environ)


if __name__ == '__main__':
    errors.run_cli(main)
