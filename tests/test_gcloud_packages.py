"""Users' own packages through `ai-platform.sh`: the checks before upload, the
rehearsal on the gs:// emulator, `local train` and `train-local.sh` on the local
cluster, and the job commands (describe, stream-logs, cancel, list).

The packages live in tests/packages (not declared trainers). Command lines
are the shapes users wrote: the course's line with --runtime-version,
--job-dir, --config, --package-path and --module-name; the Keras MNIST
sample's custom-container line; the structured-data sample with its own
setup.py, REQUIRED_PACKAGES and a STANDARD_1 config.yaml.
"""
import importlib.metadata
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile

import pytest
import yaml

import cloud_fakes
import processes
from conftest import cli_env, one_error_line, REPO_ROOT
from estimator_trainers.errors import UserInputError
from estimator_trainers.tools.cloud import ai_platform
from estimator_trainers.tools.cloud import pipeline
from estimator_trainers.tools.cloud import replicas
from estimator_trainers.tools.cloud import schema
from estimator_trainers.tools.cloud import source_checks
from test_cloud_cli import FakeBackend, OFFLINE_ENV, PARENT, _entry
from test_gcs import taxi_data_flags

PACKAGES = os.path.join(REPO_ROOT, 'tests', 'packages')
CLI = 'estimator_trainers.tools.cloud.ai_platform'
SCRIPT = os.path.join(REPO_ROOT, 'scripts', 'ai-platform.sh')
COURSE_CONFIG = cloud_fakes.COURSE_CONFIG + '  parameterServerCount: 1\n'


def run(args, cwd, env=None, timeout=600, script=False):
    """`ai-platform.sh ARGS` (or `python -m gcloud_cli ARGS`) in `cwd`."""
    command = ['bash', SCRIPT] if script else [sys.executable, '-m', CLI]
    return processes.run(command + [str(a) for a in args], timeout, cwd=str(cwd),
                         env=cli_env(env), stdin=subprocess.DEVNULL)


def submit(job, *flags, user_args=(), cwd, env=None, check=0, script=False, timeout=600):
    proc = run(['jobs', 'submit', 'training', job, *flags, '--', *user_args], cwd,
               env=env, timeout=timeout, script=script)
    assert proc.returncode == check, 'exit %d\n%s\n%s' % (
        proc.returncode, proc.stdout[-4000:], proc.stderr[-8000:])
    assert 'Traceback' not in proc.stderr
    return proc


lines = cloud_fakes.said


# ------------------------------------------------------------- dry runs


def test_course_line_dry_run_runs_the_package_checks(tmp_path):
    """The course's line, word for word after `gcloud ai-platform`, through the script."""
    config = tmp_path / 'cmle_config.yaml'
    config.write_text(COURSE_CONFIG)
    proc = submit('course_job_1', '--runtime-version', '1.15', '--job-dir',
                  'gs://my-bucket/course', '--config', config, '--package-path', 'trainer',
                  '--module-name', 'trainer.task', '--region', 'us-central1', '--dry-run',
                  user_args=['--train-steps', '1000'], cwd=os.path.join(PACKAGES, 'course'),
                  env=OFFLINE_ENV, script=True)
    assert lines(proc.stderr) == [
        "warning: --runtime-version 1.15: Vertex AI has no AI Platform runtimes; the job "
        "runs TensorFlow 2.15.1 (this project's image): tf.contrib is gone, tf.compat.v1 "
        "and tf.estimator are there (import tensorflow.compat.v1 as tf); TF_CONFIG names "
        "pool 0 'master' as AI Platform did"]
    printed = json.loads(proc.stdout)
    body = printed['request']['body']
    schema.check('aiplatform', 'v1', 'GoogleCloudAiplatformV1CustomJob', body)
    (staged,) = printed['staging']
    assert staged['package'] == 'trainer-0.0.0.tar.gz'
    assert re.fullmatch(r'gs://my-bucket/course/packages/[0-9a-f]{64}/trainer-0\.0\.0\.tar\.gz',
                        staged['destination'])
    pools = body['jobSpec']['workerPoolSpecs']
    assert [p['replicaCount'] for p in pools] == ['1', '1', '1']
    for pool in pools:
        assert pool['containerSpec']['args'] == [
            '--package-uri=' + staged['destination'], '--module-name=trainer.task',
            '--tf-config-primary=master', '--', '--train-steps', '1000',
            '--job-dir=gs://my-bucket/course']
        assert pool['containerSpec']['imageUri'] == printed['image']['build']['body'][
            'images'][0]


def test_course_line_on_this_repositorys_trainer_package():
    """The course scripts submitted cifar10_estimator itself: its parent's
    pyproject.toml builds it (as gcloud used the setup.py beside a package)."""
    proc = submit('cifar10_course', '--runtime-version', '1.15', '--job-dir',
                  'gs://my-bucket/cifar10', '--config', 'configs/cmle_config.yaml',
                  '--package-path', 'cifar10_estimator', '--module-name',
                  'cifar10_estimator.cifar10_main', '--dry-run',
                  user_args=['--data-dir', 'gs://my-bucket/data/cifar10'], cwd=REPO_ROOT,
                  env=OFFLINE_ENV)
    # The runtime warning, then the estimate's one note (a dedicated ps machine makes
    # this shape dearer per example than one machine): the flags were parsed.
    (note,) = lines(proc.stderr)[1:]
    assert note.startswith('note: this cluster is predicted to train faster')
    printed = json.loads(proc.stdout)
    assert printed['staging'][0]['package'] == 'estimator-trainers-0.1.0.tar.gz'
    schema.check('aiplatform', 'v1', 'GoogleCloudAiplatformV1CustomJob',
                 printed['request']['body'])


def test_this_repositorys_trainer_flags_are_parsed_by_its_own_parser():
    proc = submit('cifar10_bad', '--job-dir', 'gs://my-bucket/cifar10', '--package-path',
                  'cifar10_estimator', '--module-name', 'cifar10_estimator.cifar10_main',
                  '--dry-run', user_args=['--num-layers=45'], cwd=REPO_ROOT, env=OFFLINE_ENV,
                  check=2)
    one_error_line(proc, 'trainer flags: argument --num-layers: expected 6n+2')


def test_a_tf_contrib_import_is_one_line_naming_the_module(tmp_path):
    proc = submit('contrib_job', '--runtime-version', '1.15', '--job-dir', 'gs://my-bucket/out',
                  '--package-path', 'trainer', '--module-name', 'trainer.task', '--dry-run',
                  cwd=os.path.join(PACKAGES, 'contrib'), env=OFFLINE_ENV, check=2)
    one_error_line(proc, 'trainer/model.py line 4: tf.contrib.layers: tf.contrib was removed '
                         'in TensorFlow 2 and tf.compat.v1 has no contrib either: replace it '
                         '(docs/migrating-from-ai-platform.md)')
    assert proc.stdout == ''


@pytest.mark.parametrize('package, user_args, message', [
    ('course', ['--trian-steps', '5'],
     'trainer.task does not take --trian-steps (trainer/task.py defines --batch-size, '
     '--eval-steps, --hidden-units, --job-dir, --learning-rate, --train-steps)'),
    ('keras_mnist', ['--stpes=5'],
     'trainer.task does not take --stpes (trainer/task.py defines --batch-size, --job-dir, '
     '--steps)'),
], ids=['argparse', 'absl'])
def test_a_flag_the_module_refuses_stops_before_upload(package, user_args, message):
    out, err = io.StringIO(), io.StringIO()
    with pytest.raises(UserInputError) as raised:
        ai_platform.main(['jobs', 'submit', 'training', 'bad_flag', '--project', 'my-project',
                         '--job-dir', 'gs://my-bucket/out', '--module-name', 'trainer.task',
                         '--package-path', os.path.join(PACKAGES, package, 'trainer'),
                         '--dry-run', '--', *user_args], backend=FakeBackend(), out=out,
                        err=err)
    assert str(raised.value).startswith(message)
    assert out.getvalue() == ''


def test_a_package_named_like_a_standard_module_stops_before_upload(tmp_path):
    """`python -m json.task` failed on Vertex AI with `No module named json.task`."""
    package = tmp_path / 'json'
    package.mkdir()
    (package / '__init__.py').write_text('')
    (package / 'task.py').write_text('print("training")\n')
    out, err = io.StringIO(), io.StringIO()
    with pytest.raises(UserInputError) as raised:
        ai_platform.main(['jobs', 'submit', 'training', 'shadowing', '--project', 'my-project',
                          '--job-dir', 'gs://my-bucket/out', '--module-name', 'json.task',
                          '--package-path', str(package), '--dry-run'],
                         backend=FakeBackend(), out=out, err=err)
    assert str(raised.value) == (
        "--package-path %s: its package json has the name of a Python standard-library "
        "module: on Vertex AI, python -m json.task finds the standard library's json first "
        "(No module named json.task); rename the package" % package)
    assert out.getvalue() == ''


def _wheel(path, files, name='helper'):
    with zipfile.ZipFile(path, 'w') as wheel:
        wheel.writestr('%s-1.0.dist-info/METADATA' % name, 'Name: %s\nVersion: 1.0\n' % name)
        for member in files:
            wheel.writestr(member, '')
    return str(path)


def test_top_level_names_taken_twice_or_shared_as_namespaces():
    """A package named like an installed distribution's module (this environment's:
    PyYAML's yaml) is refused; a namespace package (no __init__.py) merges with the
    image's; two regular packages of one name do not; a distribution's own names are
    its own."""
    installed = {'google': ['protobuf', 'google-auth'], 'helper': ['helper']}
    with tempfile.TemporaryDirectory() as tmp:
        yaml_like = _wheel(os.path.join(tmp, 'y.whl'), ['yaml/__init__.py', 'yaml/task.py'],
                           name='trainer')
        with pytest.raises(UserInputError) as raised:
            source_checks.check_top_level_names([('--packages Y', yaml_like)], 'yaml.task',
                                                importlib.metadata.packages_distributions())
        assert str(raised.value) == (
            '--packages Y: its package yaml has the name of a module the image installs '
            '(PyYAML): pip would install one over the other and python -m yaml.task would '
            'import either; rename the package')
        namespace = _wheel(os.path.join(tmp, 'a.whl'), ['google/mine/task.py'])
        own = _wheel(os.path.join(tmp, 'b.whl'), ['helper/__init__.py'])
        assert source_checks.top_level(namespace).names == {'google': False}
        source_checks.check_top_level_names([('--packages A', namespace),
                                             ('--packages B', own)], 'google.mine.task',
                                            installed)
        regular = _wheel(os.path.join(tmp, 'c.whl'), ['google/__init__.py'], name='mine')
        with pytest.raises(UserInputError, match=r'^--packages C: its package google has '
                           r'the name of a module the image installs \(google-auth, '
                           r'protobuf\)'):
            source_checks.check_top_level_names([('--packages C', regular)], 'x.task',
                                                installed)
        twice = _wheel(os.path.join(tmp, 'd.whl'), ['helper.py'], name='other')
        with pytest.raises(UserInputError, match=r'^--packages B and --packages D both '
                           r'install the top-level name helper'):
            source_checks.check_top_level_names([('--packages B', own),
                                                 ('--packages D', twice)], 'x.task', {})


def test_a_requirement_that_does_not_install_stops_before_upload(tmp_path):
    source = tmp_path / 'src'
    shutil.copytree(os.path.join(PACKAGES, 'structured'), source)
    setup = (source / 'setup.py').read_text()
    (source / 'setup.py').write_text(setup.replace(
        "REQUIRED_PACKAGES = [", "REQUIRED_PACKAGES = ['no-such-dependency-for-tests==1.0', "))
    proc = submit('needs_missing', '--job-dir', 'gs://my-bucket/out', '--package-path', 'trainer',
                  '--module-name', 'trainer.task', '--dry-run', cwd=source,
                  env=dict(OFFLINE_ENV, PIP_NO_INDEX='1'), check=2)
    one_error_line(proc, 'installing trainer-0.1.tar.gz into a fresh virtualenv failed: '
                         'Could not find a version that satisfies the requirement '
                         'no-such-dependency-for-tests==1.0')


def test_structured_sample_dry_run_stages_setup_py_package_and_packages(tmp_path):
    helper = _helper_sdist(tmp_path)
    proc = submit('taxi_structured', '--config', 'config.yaml', '--package-path', 'trainer',
                  '--packages', helper, '--module-name', 'trainer.task',
                  '--staging-bucket', 'gs://stage-bkt', '--job-dir', 'gs://my-bucket/taxi',
                  '--runtime-version', '2.11', '--python-version', '3.7', '--dry-run',
                  user_args=['--train-files', 'gs://my-bucket/train.csv', '--eval-files',
                             'gs://my-bucket/eval.csv'],
                  cwd=os.path.join(PACKAGES, 'structured'), env=OFFLINE_ENV)
    printed = json.loads(proc.stdout)
    assert [s['package'] for s in printed['staging']] == ['trainer-0.1.tar.gz',
                                                          'taxi_helper-1.0.tar.gz']
    for staged in printed['staging']:
        assert re.fullmatch(r'gs://stage-bkt/taxi_structured/[0-9a-f]{64}/%s'
                            % re.escape(staged['package']), staged['destination'])
    pools = printed['request']['body']['jobSpec']['workerPoolSpecs']
    # STANDARD_1: master + 4 workers + 3 parameter servers of complex_model_s / standard.
    assert [(p['machineSpec']['machineType'], p['replicaCount']) for p in pools] == [
        ('n1-highcpu-16', '1'), ('n1-highcpu-16', '4'), ('n1-standard-4', '3')]
    assert pools[0]['containerSpec']['args'][:3] == [
        '--package-uri=' + printed['staging'][0]['destination'],
        '--package-uri=' + printed['staging'][1]['destination'], '--module-name=trainer.task']


def _helper_sdist(tmp_path):
    """A `--packages` archive the structured sample needs at start-up."""
    source = tmp_path / 'helper'
    (source / 'taxi_helper').mkdir(parents=True)
    (source / 'taxi_helper' / '__init__.py').write_text('TIP_SHARE = 0.2\n')
    (source / 'setup.py').write_text('from setuptools import setup\nsetup(name="taxi_helper", '
                                     'version="1.0", packages=["taxi_helper"])\n')
    subprocess.run([sys.executable, '-m', 'build', '--sdist', '--no-isolation', '--outdir',
                    str(tmp_path / 'dist'), str(source)], check=True, capture_output=True)
    return str(tmp_path / 'dist' / 'taxi_helper-1.0.tar.gz')


# ------------------------------------------------------------ rehearsals


def _rehearse(gcs, tmp_path, job, *flags, user_args=(), cwd, bucket):
    env = dict(gcs.env(), PIP_NO_INDEX='1', TMPDIR=str(tmp_path), PROJECT_ID='test-project')
    proc = submit(job, *flags, '--rehearse', user_args=user_args, cwd=cwd, env=env,
                  timeout=900)
    summary = proc.stderr[proc.stderr.index('rehearsal passed:'):]
    export = re.search(r'  export: (\S+)', summary).group(1)
    assert gcs.list_objects(bucket, export[len('gs://%s/' % bucket):] + '/saved_model.pb')
    return proc, summary, export


def test_rehearses_the_course_package_on_the_emulator(gcs, tmp_path):
    """Trains, evaluates and exports on gs://, as AI Platform's runtime 1.15 ran it:
    TF_CONFIG names the master, which trains, evaluates and exports."""
    bucket = gcs.create_bucket('course-bkt')[len('gs://'):]
    proc, summary, export = _rehearse(
        gcs, tmp_path, 'course_rehearsal', '--runtime-version', '1.15', '--job-dir',
        'gs://%s/out' % bucket, '--package-path', 'trainer', '--module-name', 'trainer.task',
        user_args=['--train-steps', '20', '--eval-steps', '2'],
        cwd=os.path.join(PACKAGES, 'course'), bucket=bucket)
    assert '  pools: chief 1\n' in summary
    assert export.startswith('gs://%s/out/export/exporter/' % bucket)
    staged = gcs.list_objects(bucket, 'out/packages/')
    assert len(staged) == 1 and staged[0].endswith('/trainer-0.0.0.tar.gz')
    assert [name for name in gcs.list_objects(bucket, 'out/eval/')
            if '/events.out.tfevents.' in '/' + name]
    assert '[chief-0] ' in proc.stdout


@pytest.mark.slow
def test_rehearses_the_keras_mnist_line_without_an_account(tmp_path):
    """The custom-container MWMS line (seed 001's shape), by a user with no
    credentials, no project and no network: rehearsed on local storage, the
    job-dir kept where the note says."""
    proc = submit(
        'keras_mnist', '--scale-tier=CUSTOM', '--master-machine-type=n1-standard-8',
        '--master-image-uri=us-central1-docker.pkg.dev/test-project/trainers/mnist:1',
        '--worker-machine-type=n1-standard-8', '--worker-count=2',
        '--use-chief-in-tf-config=true', '--package-path=trainer',
        '--module-name=trainer.task', '--job-dir=gs://mnist-bkt/mnist', '--rehearse',
        user_args=['--steps=4'], cwd=os.path.join(PACKAGES, 'keras_mnist'),
        env=cloud_fakes.no_account_env(tmp_path), timeout=900)
    assert lines(proc.stderr)[:1] == [
        'note: no Application Default Credentials found: rehearsing on local storage '
        '(fake-gcs-server) standing in for gs://mnist-bkt, in project local-rehearsal; '
        'nothing reaches Google Cloud, and what the job writes is kept in %s'
        % cloud_fakes.mirror(tmp_path, 'gs://')]
    summary = proc.stderr[proc.stderr.index('rehearsal passed:'):]
    assert '  pools: chief 1, worker 2\n' in summary
    assert '  export: gs://mnist-bkt/mnist/keras_export\n' in summary
    job_dir = cloud_fakes.mirror(tmp_path, 'gs://mnist-bkt/mnist')
    assert (job_dir / 'keras_export' / 'saved_model.pb').is_file()
    metrics = json.loads((job_dir / 'metrics.json').read_text())
    assert set(metrics) == {'loss', 'accuracy'}


@pytest.mark.slow
def test_rehearses_the_structured_sample_on_standard_1(gcs, gcs_taxi_data, tmp_path):
    """Its own setup.py and REQUIRED_PACKAGES, a --packages archive, scaleTier
    STANDARD_1 (master, workers and parameter servers), taxi CSVs on gs://."""
    helper = _helper_sdist(tmp_path)
    proc, summary, export = _rehearse(
        gcs, tmp_path, 'taxi_standard_1', '--config', 'config.yaml', '--package-path',
        'trainer', '--packages', helper, '--module-name', 'trainer.task', '--job-dir',
        'gs://taxi-data/structured', '--runtime-version', '1.15', '--max-replicas', '1',
        user_args=[*taxi_data_flags(gcs_taxi_data[0]), '--train-steps', '30'],
        cwd=os.path.join(PACKAGES, 'structured'), bucket='taxi-data')
    assert '  pools: chief 1, worker 1 of 4, ps 1 of 3\n' in summary
    assert export.startswith('gs://taxi-data/structured/export/taxi/')


# ----------------------------------------------------- local runs


@pytest.mark.slow
def test_local_train_distributed_runs_the_package_on_the_local_cluster(tmp_path):
    job_dir = tmp_path / 'job'
    proc = run(['local', 'train', '--package-path', 'trainer', '--module-name',
                'trainer.task', '--job-dir', job_dir, '--distributed',
                '--parameter-server-count', '1', '--worker-count', '1', '--evaluator-count',
                '1', '--', '--train-steps', '30', '--eval-steps', '2'],
               os.path.join(PACKAGES, 'course'), script=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-6000:]
    for label in ('ps-0', 'chief-0', 'worker-0', 'evaluator-0'):
        assert '[launcher] started %s' % label in proc.stderr
        assert (job_dir / 'logs' / ('%s.log' % label)).exists()
    assert list((job_dir / 'export' / 'exporter').glob('*/saved_model.pb'))


@pytest.mark.slow
def test_train_local_sh_runs_any_package(gcs_taxi_data, tmp_path):
    """train-local.sh --package-path: the structured sample from its directory."""
    del gcs_taxi_data
    data = tmp_path / 'data'
    data.mkdir()
    import taxi_trips  # pylint: disable=import-outside-toplevel
    train, evals = taxi_trips.write_layout_files(data, train_rows=200, eval_rows=50)
    job_dir = tmp_path / 'job'
    proc = processes.run(
        ['bash', os.path.join(REPO_ROOT, 'scripts', 'train-local.sh'), '--package-path',
         'trainer', '--module-name', 'trainer.task', '--job-dir', str(job_dir),
         '--distributed', '--parameter-server-count', '1', '--worker-count', '1',
         '--evaluator-count', '1', '--', '--train-files', train, '--eval-files', evals,
         '--train-steps', '20'], 600, cwd=os.path.join(PACKAGES, 'structured'),
        env=cli_env(), stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-6000:]
    assert list((job_dir / 'export' / 'taxi').glob('*/saved_model.pb'))


def test_local_train_runs_the_module_once_with_the_job_dir(tmp_path):
    """Without --distributed: python -m MODULE ARGS --job-dir DIR from the package's parent."""
    package = tmp_path / 'pkg'
    (package / 'trainer').mkdir(parents=True)
    (package / 'trainer' / '__init__.py').write_text('')
    (package / 'trainer' / 'task.py').write_text(
        'import json, os, sys\nprint(json.dumps([sys.argv[1:], os.getcwd(), '
        '"TF_CONFIG" in os.environ]))\n')
    proc = run(['local', 'train', '--package-path', package / 'trainer', '--module-name',
                'trainer.task', '--job-dir', 'out', '--', '--steps', '3'], tmp_path,
               env={'TF_CONFIG': '{"task": {}}'})
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == [['--steps', '3', '--job-dir', str(tmp_path / 'out')],
                                       str(package), False]
    proc = run(['local', 'train', '--module-name', 'trainer.task', '--worker-count', '2'],
               package)
    one_error_line(proc, '--worker-count needs --distributed')


# ----------------------------------------------------------- job commands


JOB = {'name': PARENT + '/customJobs/42', 'displayName': 'census_1',
       'state': 'JOB_STATE_SUCCEEDED', 'createTime': '2026-01-02T03:04:05Z',
       'labels': {'team': 'ml'}}


def _main(argv, responses):
    backend = FakeBackend(responses)
    out, err = io.StringIO(), io.StringIO()
    code = ai_platform.main(argv + ['--project', 'my-project'], backend=backend, out=out,
                           err=err)
    return code, out.getvalue(), err.getvalue(), backend


def test_describe_by_job_name_in_the_legacy_shape(monkeypatch):
    monkeypatch.delenv('REGION', raising=False)
    listing = [(200, {'customJobs': [JOB]}), (200, {})]
    code, out, _, backend = _main(['jobs', 'describe', 'census_1'], listing + [(200, JOB)])
    assert code == 0
    assert yaml.safe_load(out) == {
        'jobId': 'census_1', 'state': 'SUCCEEDED', 'createTime': '2026-01-02T03:04:05Z',
        'labels': {'team': 'ml'}, 'vertexJob': JOB['name'],
        'consoleUrl': 'https://console.cloud.google.com/vertex-ai/locations/us-central1/'
                      'training/42?project=my-project'}
    assert backend.http.requests[0].uri.endswith(
        'customJobs?pageSize=100&filter=display_name%3D%22census_1%22&alt=json')
    code, out, _, _ = _main(['jobs', 'describe', 'census_1', '--format', 'value(state)'],
                            listing + [(200, JOB)])
    assert out == 'SUCCEEDED\n'


def test_list_cancel_and_stream_logs():
    code, out, _, backend = _main(['jobs', 'list', '--limit', '5', '--region', 'europe-west4'],
                                  [(200, {'customJobs': [JOB]}), (200, {})])
    assert out.splitlines()[1].split() == ['census_1', 'SUCCEEDED', '2026-01-02T03:04:05Z']
    assert backend.calls[-1] == ('vertex', 'my-project', 'europe-west4')

    code, _, err, backend = _main(['jobs', 'cancel', JOB['name']], [(200, {})])
    assert (code, err) == (0, 'Cancelled job [%s].\n' % JOB['name'])
    assert backend.http.requests[0].uri.endswith('/customJobs/42:cancel?alt=json')

    code, out, _, backend = _main(
        ['jobs', 'stream-logs', JOB['name'], '--polling-interval', '0', '--task-name',
         'master-replica-0', '--allow-multiline-logs'],
        [(200, JOB), (200, {'entries': [_entry('workerpool0-0', 1, 'step 1')]}),
         (200, {})])
    assert code == 0
    assert out.splitlines() == ['[job] JOB_STATE_SUCCEEDED', '[chief-0] step 1']
    assert backend.http.requests[1].body['filter'] == (
        'resource.type="ml_job" AND resource.labels.job_id="42" AND '
        'resource.labels.task_name="workerpool0-0"')


def test_submit_creates_the_job_once_per_name(monkeypatch, tmp_path):
    """A real (recorded) submission of a container job; a second job of the same
    name is refused, as AI Platform refused it."""
    image = 'us-central1-docker.pkg.dev/my-project/trainers/mnist:1'
    created = {'name': PARENT + '/customJobs/77', 'displayName': 'mnist_1',
               'state': 'JOB_STATE_QUEUED'}
    argv = ['jobs', 'submit', 'training', 'mnist_1', '--master-image-uri', image,
            '--use-chief-in-tf-config=true', '--async']
    checks = []

    class Checks:
        def __init__(self, service, project, missing_hint=None):
            del service, project, missing_hint

        def check_writable(self, uri, what):
            checks.append((uri, what))

    monkeypatch.setattr(pipeline.preflight, 'BucketChecks', Checks)
    code, out, err, backend = _main(argv, [(200, {}), (200, {}), (200, created)])
    assert code == 0
    assert yaml.safe_load(out) == {'jobId': 'mnist_1', 'state': 'QUEUED',
                                   'vertexJob': created['name'], 'consoleUrl': (
                                       'https://console.cloud.google.com/vertex-ai/locations/'
                                       'us-central1/training/77?project=my-project')}
    assert '\n'.join(cloud_fakes.without_estimate(err)).startswith(
        'Job [mnist_1] submitted successfully (%s).' % created['name'])
    assert '$ bash scripts/ai-platform.sh jobs describe mnist_1' in err
    create = backend.http.requests[-1]
    assert create.method == 'POST' and create.uri.endswith('/customJobs?alt=json')
    schema.check('aiplatform', 'v1', 'GoogleCloudAiplatformV1CustomJob', create.body)

    with pytest.raises(UserInputError, match=r'^job mnist_1 already exists in us-central1 '):
        _main(argv, [(200, {'customJobs': [created]}), (200, {})])


def test_bootstrap_names_the_master_as_ai_platform_did():
    config = {'cluster': {'chief': ['h:1'], 'worker': ['h:2'], 'ps': ['h:3']},
              'task': {'type': 'chief', 'index': 0}, 'environment': 'cloud'}
    renamed = json.loads(replicas.with_primary(json.dumps(config), 'master'))
    assert renamed['cluster'] == {'master': ['h:1'], 'worker': ['h:2'], 'ps': ['h:3']}
    assert renamed['task'] == {'type': 'master', 'index': 0}
    worker = dict(config, task={'type': 'worker', 'index': 0})
    assert json.loads(replicas.with_primary(json.dumps(worker), 'master'))[
        'cluster']['master'] == ['h:1']
    evaluator = dict(config, task={'type': 'evaluator', 'index': 0})
    assert replicas.with_primary(json.dumps(evaluator), 'master') == json.dumps(
        evaluator)
    assert replicas.with_primary(json.dumps(config), 'chief') == json.dumps(config)
