"""Google's own gcloud as the reference: what it sends for the seeds' lines, and
where it takes their project and region from, against this project's plan.

gcloud runs offline with a private configuration and its APIs on a recording
server (`gcloud_reference`); skipped with one line where it is not installed.

- The seeds' lines (HW3's `train-cloud.sh` with `cmle_config.yaml`, seed
  001's custom-container MWMS line, the taxi sample's ps line, seed 000's
  config with its region) through `gcloud ai-platform jobs submit training`:
  gcloud's ml v1 request, read by this project as a `--config` Job resource,
  gives the same Vertex AI request as the user's line itself (pools,
  machines, images, module, user args, job-dir, TF_CONFIG naming), and the
  same project and region: from the configuration file, from
  `CLOUDSDK_COMPUTE_REGION`/`CLOUDSDK_CORE_PROJECT` over it, from flags over
  both, the file's over `trainingInput.region`.
- Where gcloud refuses (no `compute/region` anywhere, whatever
  `ai_platform/region` says), this tool takes the default and says so.
- `--dry-run --format yaml`: `gcloud ai custom-jobs create --config` (and
  `hp-tuning-jobs create` for a tuning config) accepts the written spec and
  sends the request this tool's dry run shows.

gcloud's request has its int64 fields as JSON text (`workerCount: '2'`), as
`gcloud ai-platform jobs describe` prints them: a `--config` written so is read.

Every gcloud run of the module starts at once (`reference`): each costs about a
second of CPU and several of waiting (its start-up, the packages' sdists).
"""
import concurrent.futures
import dataclasses
import io
import json
import os
import re
import shlex

import pytest

import cloud_fakes
import gcloud_reference
from conftest import REPO_ROOT
from estimator_trainers.tools.cloud import ai_platform
from estimator_trainers.tools.cloud import gcloud_flags
from estimator_trainers.tools.cloud import jobs
from estimator_trainers.tools.cloud import location
from estimator_trainers.tools.cloud import pipeline
from estimator_trainers.tools.cloud import plan as plan_lib
from gcloud_reference import need_gcloud
from test_cloud_cli import FakeBackend

pytestmark = need_gcloud

PACKAGES = os.path.join(REPO_ROOT, 'tests', 'packages')
IMAGE = 'us-central1-docker.pkg.dev/my-project/trainers/mnist:1'
# What only staging and building reveal, the same on both sides of a comparison.
PACKAGE = 'gs://staged/PACKAGE.tar.gz'
PROJECT_IMAGE = 'REGION-docker.pkg.dev/PROJECT/estimator-trainers/estimator-trainers:HASH'
SEED_000_CONFIG = """\
trainingInput:
  scaleTier: BASIC
  region: asia-east1
  args: [--train-steps, '100']
"""


@dataclasses.dataclass(frozen=True)
class Line:
    """A seed's `gcloud ai-platform` line and the settings around it.

    Attributes:
      words: what followed `gcloud ai-platform` before `--`; `{config}` is
        replaced by the path of `config`.
      user_args: after `--`.
      cwd: where the script ran it.
      config: the `--config` file's text, or None.
      variables: the environment's gcloud (and this project's) variables.
      properties: the active gcloud configuration's properties.
      expected: `(project, region)` gcloud sent the job to.
      pools: `(machine type, replicas)` of each Vertex AI pool of the job.
    """
    words: tuple
    user_args: tuple
    cwd: str
    config: str = None
    variables: tuple = ()
    properties: tuple = ()
    expected: tuple = None
    pools: tuple = ()


LINES = {
    # No --region: the region and project come from the configuration file.
    'hw3': Line(
        ('jobs', 'submit', 'training', 'cifar_hw3', '--runtime-version', '1.15',
         '--python-version', '3.7', '--job-dir=gs://4121-data//model_dirs/cifar_hw3',
         '--config', '{config}', '--package-path', 'cifar10_estimator/', '--module-name',
         'cifar10_estimator.cifar10_main'),
        ('--data-dir=gs://4121-data/cifar-10-data', '--num-gpus=0', '--train-steps=1000'),
        REPO_ROOT, config=cloud_fakes.COURSE_CONFIG,
        properties=(('core/project', 'cfg-project'), ('compute/region', 'europe-west1')),
        expected=('cfg-project', 'europe-west1'),
        pools=(('n1-standard-16', '1'), ('n1-standard-16', '1'))),
    # The variables over the file.
    'seed_001': Line(
        ('jobs', 'submit', 'training', 'mnist_1', '--scale-tier=CUSTOM',
         '--master-machine-type=n1-standard-8', '--master-image-uri=%s' % IMAGE,
         '--worker-machine-type=n1-standard-8', '--worker-count=2',
         '--use-chief-in-tf-config=true', '--package-path=trainer',
         '--module-name=trainer.task', '--job-dir=gs://mnist-bkt/mnist'),
        ('--steps=1000',), os.path.join(PACKAGES, 'keras_mnist'),
        variables=(('CLOUDSDK_COMPUTE_REGION', 'europe-west4'),
                   ('CLOUDSDK_CORE_PROJECT', 'env-project')),
        properties=(('core/project', 'cfg-project'), ('compute/region', 'europe-west1')),
        expected=('env-project', 'europe-west4'),
        pools=(('n1-standard-8', '1'), ('n1-standard-8', '2'))),
    # Flags over the variables and the file.
    'taxi_ps': Line(
        ('jobs', 'submit', 'training', 'taxi_ps', '--scale-tier', 'CUSTOM',
         '--master-machine-type', 'n1-standard-4', '--worker-machine-type', 'n1-standard-4',
         '--worker-count', '2', '--parameter-server-machine-type', 'n1-highmem-2',
         '--parameter-server-count', '1', '--package-path', 'trainer', '--module-name',
         'trainer.task', '--job-dir', 'gs://taxi-bkt/ps', '--runtime-version', '2.11',
         '--region', 'us-east1', '--project', 'flag-project'),
        ('--train-files', 'gs://taxi-bkt/data/train.csv', '--eval-files',
         'gs://taxi-bkt/data/eval.csv'), os.path.join(PACKAGES, 'structured'),
        variables=(('CLOUDSDK_COMPUTE_REGION', 'europe-west4'),),
        properties=(('core/project', 'cfg-project'),),
        expected=('flag-project', 'us-east1'),
        pools=(('n1-standard-4', '1'), ('n1-standard-4', '2'), ('n1-highmem-2', '1'))),
    # gcloud's jobs submit training reads compute/region only: ai_platform/region
    # (and CLOUDSDK_AI_PLATFORM_REGION) do not count, and gcloud refuses the line.
    'no_region': Line(
        ('jobs', 'submit', 'training', 'job_1', '--master-image-uri', IMAGE,
         '--use-chief-in-tf-config', 'true'), ('--steps=1',), REPO_ROOT,
        variables=(('CLOUDSDK_AI_PLATFORM_REGION', 'asia-east1'),),
        properties=(('core/project', 'cfg-project'), ('ai_platform/region', 'asia-east1'))),
    # The file's compute/region over trainingInput.region; no setup.py.
    'seed_000': Line(
        ('jobs', 'submit', 'training', 'course_1', '--config', '{config}', '--package-path',
         'trainer', '--module-name', 'trainer.task', '--job-dir', 'gs://course-bkt/out'),
        (), os.path.join(PACKAGES, 'course'), config=SEED_000_CONFIG,
        properties=(('core/project', 'cfg-project'), ('compute/region', 'europe-west1')),
        expected=('cfg-project', 'europe-west1'), pools=(('n1-standard-4', '1'),)),
}


def _run_gcloud(line, tmp_path):
    """`gcloud ai-platform LINE` on a recorder: `(environ, argv, proc, requests)`."""
    config_dir = tmp_path / 'gcloud'
    words = list(line.words)
    if line.config is not None:
        config = tmp_path / 'config.yaml'
        config.write_text(line.config)
        words = [str(config) if w == '{config}' else w for w in words]
    argv = words + (['--'] + list(line.user_args) if line.user_args else [])
    with gcloud_reference.Recorder() as recorder:
        gcloud = gcloud_reference.Gcloud(config_dir, recorder, properties=dict(line.properties))
        proc, requests = gcloud.run(['ai-platform'] + argv, cwd=line.cwd,
                                    env=dict(line.variables))
    environ = dict(line.variables, CLOUDSDK_CONFIG=str(config_dir))
    return environ, argv, proc, requests


@pytest.fixture(scope='module')
def reference(tmp_path_factory):
    """Every gcloud run of the module, at once: `{'lines': {name: _run_gcloud's},
    'specs': {name: (our dry run's request, gcloud ai's process, its requests)}}`.

    The seeds' lines start first; our dry runs of `SPEC_LINES` (the package checks
    left out: tests/test_gcloud_packages.py runs them) are made meanwhile, then
    `gcloud ai ... create --config spec.yaml` of each.
    """
    with concurrent.futures.ThreadPoolExecutor(len(LINES) + len(SPEC_LINES)) as pool:
        lines = {name: pool.submit(_run_gcloud, line, tmp_path_factory.mktemp(name))
                 for name, line in LINES.items()}
        ours = {}
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(pipeline, '_check_archives', lambda *args: None)
            for name in SPEC_LINES:
                tmp_path = tmp_path_factory.mktemp(name)
                request, command = _ours_and_spec(name, tmp_path)
                ours[name] = (request, pool.submit(_gcloud_ai, command, tmp_path))
        return {'lines': {name: future.result() for name, future in lines.items()},
                'specs': {name: (request,) + future.result()
                          for name, (request, future) in ours.items()}}


def _plan(argv, environ):
    """This project's plan of `jobs submit training ...`, and its project."""
    words, user_args = argv, None
    if '--' in argv:
        words, user_args = argv[:argv.index('--')], argv[argv.index('--') + 1:]
    args = ai_platform.build_parser().parse_args(words)
    return ai_platform.training_plan(args, user_args, environ), location.project_id(
        args.project, environ)


def _body(plan):
    """The Vertex AI request body of `plan`, what staging reveals set to placeholders."""
    if plan.builds_image:
        plan = plan.resolved(project_image=PROJECT_IMAGE)
    if isinstance(plan.program, plan_lib.Package):
        plan = plan.resolved(package_uris=[PACKAGE])
    return jobs.job_body(plan)


SEED_LINES = sorted(name for name in LINES if LINES[name].expected)


@pytest.mark.parametrize('name', SEED_LINES)
def test_a_seed_line_plans_what_gcloud_sent(reference, name):
    environ, argv, proc, requests = reference['lines'][name]
    assert proc.returncode == 0, proc.stderr[-3000:]
    (sent,) = [r for r in requests if r.method == 'POST' and r.path.endswith('/jobs')]
    project, region = LINES[name].expected
    # Where gcloud sent it ...
    assert (sent.path, sent.body['trainingInput']['region']) == (
        '/v1/projects/%s/jobs' % project, region)
    # ... is where this project's plan goes.
    ours, our_project = _plan(argv, environ)
    assert (our_project, ours.region) == (project, region)
    # gcloud's request, read as a --config Job resource with no flags, is the
    # same job as the line: the flags merge into trainingInput as gcloud merged them.
    theirs = gcloud_flags.build_plan(sent.body['jobId'], {}, None, sent.body,
                                     'gcloud\'s request', environ={})
    assert theirs.region == region
    assert tuple((pool['machineSpec']['machineType'], pool['replicaCount'])
                 for pool in _body(theirs)['jobSpec']['workerPoolSpecs']) == LINES[name].pools
    assert _body(theirs) == _body(ours)
    # gcloud staged the package it built from the line; this project stages its own.
    if isinstance(ours.program, plan_lib.Package) and ours.program.package_path:
        (uploaded,) = [r for r in requests if r.path.startswith('/upload/storage/')]
        assert sent.body['trainingInput']['packageUris'] == [
            'gs://%s/%s' % (uploaded.path.split('/b/')[1].split('/')[0], uploaded.query['name'])]


def test_without_compute_region_gcloud_refuses_and_this_tool_says_its_default(reference):
    """Neither reads ai_platform/region for a training job; where gcloud refuses, this
    tool takes the documented default, and says so."""
    environ, argv, proc, requests = reference['lines']['no_region']
    assert proc.returncode == 1 and requests == []
    assert 'The required property [region] is not currently set' in proc.stderr
    out, err = io.StringIO(), io.StringIO()
    assert ai_platform.main(_before_dashes(argv, '--dry-run'), backend=FakeBackend(), out=out,
                            err=err, environ=environ) == 0
    assert '/projects/cfg-project/locations/us-central1/' in json.loads(out.getvalue())[
        'request']['uri']
    (said,) = [line for line in err.getvalue().splitlines()
               if line.startswith(cloud_fakes.SETTINGS_NOTE)]
    assert said.endswith('and region us-central1, the default')


def _before_dashes(argv, *flags):
    at = argv.index('--') if '--' in argv else len(argv)
    return argv[:at] + list(flags) + argv[at:]


def _dry_run(argv, environ, fmt):
    out, err = io.StringIO(), io.StringIO()
    assert ai_platform.main(_before_dashes(argv, '--dry-run', '--format', fmt),
                            backend=FakeBackend(), out=out, err=err, environ=environ) == 0
    return out.getvalue(), err.getvalue()


def _without_empty(value):
    """The API's view: an empty repeated or message field is the same as none."""
    if isinstance(value, dict):
        return {k: _without_empty(v) for k, v in value.items() if v not in ([], {})}
    if isinstance(value, list):
        return [_without_empty(v) for v in value]
    return value


def _staged_as_placeholder(body):
    return json.loads(re.sub(r'gs://[^"]*/packages/[0-9a-f]{64}/[^"]*\.tar\.gz', PACKAGE,
                             json.dumps(body)))


SPEC_LINES = {
    # (jobs submit training words, user args, the --config file or None)
    'seed_001': (('jobs', 'submit', 'training', 'mnist_1', '--scale-tier=CUSTOM',
                  '--master-machine-type=n1-standard-8', '--master-image-uri=%s' % IMAGE,
                  '--worker-machine-type=n1-standard-8', '--worker-count=2',
                  '--use-chief-in-tf-config=true',
                  '--package-path=%s' % os.path.join(PACKAGES, 'keras_mnist', 'trainer'),
                  '--module-name=trainer.task', '--job-dir=gs://mnist-bkt/mnist', '--labels',
                  'team=ml,course=hw'), ('--steps=1000',), None),
    'ps_containers': (('jobs', 'submit', 'training', 'ps_1', '--scale-tier', 'CUSTOM',
                       '--master-machine-type', 'n1-standard-8', '--master-image-uri', IMAGE,
                       '--parameter-server-machine-type', 'n1-highmem-2',
                       '--parameter-server-count', '1', '--worker-machine-type',
                       'n1-standard-4', '--worker-count', '2', '--use-chief-in-tf-config',
                       'true', '--job-dir', 'gs://bkt/ps', '--kms-key',
                       'projects/my-project/locations/us-central1/keyRings/r/cryptoKeys/k'),
                      ('--steps=10',), None),
    'tuning': (('jobs', 'submit', 'training', 'hp_1', '--master-image-uri', IMAGE,
                '--use-chief-in-tf-config', 'true', '--config', '{config}'), ('--steps=10',),
               """\
trainingInput:
  scaleTier: CUSTOM
  masterType: n1-standard-8
  hyperparameters: {goal: MINIMIZE, hyperparameterMetricTag: loss, maxTrials: 6,
                    maxParallelTrials: 3, algorithm: RANDOM_SEARCH, params: [
      {parameterName: learning-rate, type: DOUBLE, minValue: 0.001, maxValue: 0.1,
       scaleType: UNIT_LOG_SCALE},
      {parameterName: layers, type: INTEGER, minValue: 1, maxValue: 4},
      {parameterName: optimizer, type: CATEGORICAL, categoricalValues: [adam, sgd]}]}
"""),
}


def _ours_and_spec(name, tmp_path):
    """Our dry run's request, and the spec of the same line with the command of it."""
    words, user_args, config = SPEC_LINES[name]
    if config is not None:
        (tmp_path / 'config.yaml').write_text(config)
        words = tuple(str(tmp_path / 'config.yaml') if w == '{config}' else w for w in words)
    argv = list(words) + ['--'] + list(user_args)
    environ = {'CLOUDSDK_CONFIG': str(tmp_path / 'ours'), 'CLOUDSDK_CORE_PROJECT': 'my-project'}
    out, _ = _dry_run(argv, environ, 'json')
    spec, err = _dry_run(argv, environ, 'yaml')
    (tmp_path / 'spec.yaml').write_text(spec)
    command = shlex.split(err.splitlines()[-1].split('note: the spec is the --config of: ')[1])
    return json.loads(out)['request'], command


def _gcloud_ai(command, tmp_path):
    with gcloud_reference.Recorder() as recorder:
        gcloud = gcloud_reference.Gcloud(tmp_path / 'gcloud', recorder)
        return gcloud.run(command[1:], cwd=str(tmp_path))


@pytest.mark.parametrize('name', sorted(SPEC_LINES))
def test_gcloud_ai_creates_the_job_from_the_written_spec(reference, name):
    ours, proc, requests = reference['specs'][name]
    assert proc.returncode == 0, proc.stderr[-3000:]
    (sent,) = requests
    assert (sent.method, sent.path) == ('POST', '/' + ours['uri'].split('.com/', 1)[1].split(
        '?')[0])
    assert _without_empty(_staged_as_placeholder(sent.body)) == _without_empty(
        _staged_as_placeholder(ours['body']))
