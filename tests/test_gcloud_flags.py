"""`ai-platform.sh jobs submit training`: every flag reaches its field of the Vertex AI request.

The translation table (`gcloud_flags.FLAGS`) is checked three ways: the docs hold
it verbatim, every accepted flag has a case here that names its Vertex AI
field (which the table must show) and runs a dry run whose request has the
value there, and every mapped or refused flag has a test of its one line.
The package checks before upload (a fresh virtualenv, the module read from
its source) are replaced by a recorder here; tests/test_gcloud_packages.py
runs them for real.
"""
import io
import json
import os
import re

import pytest

import cloud_fakes
from conftest import REPO_ROOT
from estimator_trainers.errors import FlagError, UserInputError
from estimator_trainers.tools.cloud import ai_platform
from estimator_trainers.tools.cloud import gcloud_flags
from estimator_trainers.tools.cloud import pipeline
from estimator_trainers.tools.cloud import schema
from test_cloud_cli import FakeBackend

PACKAGES = os.path.join(REPO_ROOT, 'tests', 'packages')
COURSE_TRAINER = os.path.join(PACKAGES, 'course', 'trainer')
IMAGE = 'us-central1-docker.pkg.dev/my-project/trainers/mnist:1'
OTHER_IMAGE = 'us-central1-docker.pkg.dev/my-project/trainers/mnist-worker:1'
PREBUILT = 'us-docker.pkg.dev/vertex-ai/training/tf-cpu.2-15.py310:latest'
BASE = ['jobs', 'submit', 'training', 'job_1', '--project', 'my-project', '--dry-run']
CONTAINER = ['--master-image-uri', IMAGE]
PACKAGE = ['--package-path', COURSE_TRAINER, '--module-name', 'trainer.task',
           '--job-dir', 'gs://bkt/out']
CUSTOM = ['--scale-tier', 'custom', '--master-machine-type', 'n1-standard-8']
WORKERS = ['--worker-machine-type', 'n1-standard-4', '--worker-count', '2']
PS = ['--parameter-server-machine-type', 'n1-highmem-8', '--parameter-server-count', '1']
PROJECT_IMAGE = re.compile(r'us-central1-docker\.pkg\.dev/my-project/estimator-trainers/'
                           r'estimator-trainers:[0-9a-f]{64}')
STAGED = re.compile(r'--package-uri=gs://bkt/out/packages/[0-9a-f]{64}/trainer-0\.0\.0\.tar\.gz')
POOL0 = 'jobSpec.workerPoolSpecs[0]'


@pytest.fixture(autouse=True)
def _no_environment(monkeypatch):
    for name in ('PROJECT_ID', 'CLOUDSDK_CORE_PROJECT', 'CLOUDSDK_AI_PLATFORM_REGION',
                 'REGION', 'BUCKET_NAME'):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def checks(monkeypatch):
    """Records the package checks instead of running them."""
    calls = []
    monkeypatch.setattr(pipeline, '_check_archives',
                        lambda plan, archives, tmp, environ, err: calls.append(
                            (getattr(plan.program, 'module', None),
                             [a.filename for a in archives])))
    return calls


def dry_run(*argv, user_args=None):
    """(printed JSON, stderr) of a dry run with these flags."""
    out, err = io.StringIO(), io.StringIO()
    full = BASE + list(argv) + (['--'] + list(user_args) if user_args is not None else [])
    backend = FakeBackend()
    assert ai_platform.main(full, backend=backend, out=out, err=err) == 0
    assert backend.calls == []  # no credentials, no client
    printed = json.loads(out.getvalue())
    body = printed['request']['body']
    kind = ('GoogleCloudAiplatformV1HyperparameterTuningJob' if 'trialJobSpec' in body
            else 'GoogleCloudAiplatformV1CustomJob')
    schema.check('aiplatform', 'v1', kind, body)
    return printed, ''.join(line + '\n' for line in cloud_fakes.said(err.getvalue()))


def users_labels(labels):
    """A job's labels without those every submission adds (run id, estimate)."""
    return {k: v for k, v in labels.items() if not k.startswith('et-')}


def at(printed, path):
    """The value at `path` in the printed request: `uri`, or a body path like
    `jobSpec.workerPoolSpecs[0].containerSpec.args[-1]`."""
    if path == 'uri':
        return printed['request']['uri']
    node = printed['request']['body']
    for name, index in re.findall(r'([A-Za-z]+)((?:\[-?\d+\])*)', path):
        node = node[name]
        for i in re.findall(r'-?\d+', index):
            node = node[int(i)]
    return node


def config_file(tmp_path, text):
    path = tmp_path / 'config.yaml'
    path.write_text(text)
    return str(path)


# flag -> (its Vertex AI field as the table must show it, flags, {path: expected}).
# Expected values are callables for values that contain hashes.
CASES = {
    'JOB': ('displayName', CONTAINER, {'displayName': 'job_1'}),
    '--job-dir': ('jobSpec.baseOutputDirectory.outputUriPrefix', PACKAGE, {
        'jobSpec.baseOutputDirectory.outputUriPrefix': 'gs://bkt/out',
        POOL0 + '.containerSpec.args[-1]': '--job-dir=gs://bkt/out'}),
    '--staging-bucket': ('gs://BUCKET/JOB/', PACKAGE + ['--staging-bucket', 'gs://stage'], {
        POOL0 + '.containerSpec.args[0]': lambda v: re.fullmatch(
            r'--package-uri=gs://stage/job_1/[0-9a-f]{64}/trainer-0\.0\.0\.tar\.gz', v)}),
    '--package-path': ('containerSpec.args --package-uri', PACKAGE, {
        POOL0 + '.containerSpec.args[0]': STAGED.fullmatch,
        POOL0 + '.containerSpec.command': ['python', '-m',
                                           'estimator_trainers.tools.cloud.bootstrap'],
        POOL0 + '.containerSpec.imageUri': PROJECT_IMAGE.fullmatch}),
    '--packages': ('containerSpec.args --package-uri', PACKAGE + [
        '--packages', 'gs://bkt/deps/helper-1.0.tar.gz'], {
            POOL0 + '.containerSpec.args[0]': STAGED.fullmatch,
            POOL0 + '.containerSpec.args[1]': '--package-uri=gs://bkt/deps/helper-1.0.tar.gz'}),
    '--module-name': ('containerSpec.args --module-name', PACKAGE, {
        POOL0 + '.containerSpec.args[1]': '--module-name=trainer.task'}),
    '--region': ('projects/P/locations/REGION', CONTAINER + ['--region', 'europe-west4'], {
        'uri': 'https://europe-west4-aiplatform.googleapis.com/v1/projects/my-project/'
               'locations/europe-west4/customJobs?alt=json'}),
    '--scale-tier': ('jobSpec.workerPoolSpecs[*]', CONTAINER + ['--scale-tier', 'standard-1'], {
        POOL0 + '.machineSpec.machineType': 'n1-highcpu-16',
        'jobSpec.workerPoolSpecs[1].replicaCount': '4',
        'jobSpec.workerPoolSpecs[2].replicaCount': '3',
        'jobSpec.workerPoolSpecs[2].machineSpec.machineType': 'n1-standard-4'}),
    '--master-machine-type': (POOL0 + '.machineSpec.machineType', CONTAINER + CUSTOM, {
        POOL0 + '.machineSpec': {'machineType': 'n1-standard-8'}}),
    '--master-accelerator': (POOL0 + '.machineSpec.acceleratorType', CONTAINER + CUSTOM + [
        '--master-accelerator', 'count=2,type=nvidia-tesla-t4'], {
            POOL0 + '.machineSpec': {'machineType': 'n1-standard-8',
                                     'acceleratorType': 'NVIDIA_TESLA_T4',
                                     'acceleratorCount': 2}}),
    '--master-image-uri': (POOL0 + '.containerSpec.imageUri', CONTAINER, {
        POOL0 + '.containerSpec': {'imageUri': IMAGE, 'args': []}}),
    '--worker-machine-type': ('jobSpec.workerPoolSpecs[1].machineSpec.machineType',
                              CONTAINER + CUSTOM + WORKERS, {
                                  'jobSpec.workerPoolSpecs[1].machineSpec.machineType':
                                  'n1-standard-4'}),
    '--worker-count': ('jobSpec.workerPoolSpecs[1].replicaCount', CONTAINER + CUSTOM + WORKERS,
                       {'jobSpec.workerPoolSpecs[1].replicaCount': '2'}),
    '--worker-accelerator': ('jobSpec.workerPoolSpecs[1].machineSpec.acceleratorType',
                             CONTAINER + CUSTOM + WORKERS + [
                                 '--worker-accelerator', 'count=1,type=NVIDIA_TESLA_V100'], {
        'jobSpec.workerPoolSpecs[1].machineSpec.acceleratorType': 'NVIDIA_TESLA_V100',
        'jobSpec.workerPoolSpecs[1].machineSpec.acceleratorCount': 1}),
    '--worker-image-uri': ('jobSpec.workerPoolSpecs[1].containerSpec.imageUri',
                           CONTAINER + CUSTOM + WORKERS + ['--worker-image-uri', OTHER_IMAGE], {
        'jobSpec.workerPoolSpecs[1].containerSpec.imageUri': OTHER_IMAGE,
        POOL0 + '.containerSpec.imageUri': IMAGE}),
    '--parameter-server-machine-type': ('jobSpec.workerPoolSpecs[2].machineSpec.machineType',
                                        CONTAINER + CUSTOM + PS, {
        'jobSpec.workerPoolSpecs[2].machineSpec.machineType': 'n1-highmem-8',
        'jobSpec.workerPoolSpecs[1]': {}}),
    '--parameter-server-count': ('jobSpec.workerPoolSpecs[2].replicaCount',
                                 CONTAINER + CUSTOM + PS, {
        'jobSpec.workerPoolSpecs[2].replicaCount': '1'}),
    '--parameter-server-accelerator': (
        'jobSpec.workerPoolSpecs[2].machineSpec.acceleratorType', CONTAINER + CUSTOM + [
            '--parameter-server-machine-type', 'n1-standard-8', '--parameter-server-count',
            '1', '--parameter-server-accelerator', 'count=4,type=nvidia-tesla-p100'], {
            'jobSpec.workerPoolSpecs[2].machineSpec.acceleratorType': 'NVIDIA_TESLA_P100',
            'jobSpec.workerPoolSpecs[2].machineSpec.acceleratorCount': 4}),
    '--parameter-server-image-uri': (
        'jobSpec.workerPoolSpecs[2].containerSpec.imageUri', CONTAINER + CUSTOM + PS + [
            '--parameter-server-image-uri', OTHER_IMAGE], {
            'jobSpec.workerPoolSpecs[2].containerSpec.imageUri': OTHER_IMAGE}),
    '--use-chief-in-tf-config': ('--tf-config-primary', PACKAGE + [
        '--runtime-version', '1.15', '--use-chief-in-tf-config', 'true'], {
            POOL0 + '.containerSpec.args[2]': '--'}),
    '--runtime-version': ('containerSpec.imageUri (this project\'s image',
                          PACKAGE + ['--runtime-version', '1.15'], {
        POOL0 + '.containerSpec.imageUri': PROJECT_IMAGE.fullmatch,
        POOL0 + '.containerSpec.args[2]': '--tf-config-primary=master'}),
    '--python-version': ('Python 3.11', PACKAGE + ['--python-version', '3.7'], {
        POOL0 + '.containerSpec.imageUri': PROJECT_IMAGE.fullmatch}),
    '--labels': ('labels', CONTAINER + ['--labels', 'team=ml,env=dev'], {
        'labels': lambda got: users_labels(got) == {'team': 'ml', 'env': 'dev'}}),
    '--service-account': ('jobSpec.serviceAccount', CONTAINER + [
        '--service-account', 'trainer@my-project.iam.gserviceaccount.com'], {
            'jobSpec.serviceAccount': 'trainer@my-project.iam.gserviceaccount.com'}),
    '--network': ('jobSpec.network', CONTAINER + [
        '--network', 'projects/123/global/networks/default'], {
            'jobSpec.network': 'projects/123/global/networks/default'}),
    '--enable-web-access': ('jobSpec.enableWebAccess', CONTAINER + ['--enable-web-access'], {
        'jobSpec.enableWebAccess': True}),
    '--kms-key': ('encryptionSpec.kmsKeyName', CONTAINER + [
        '--kms-key', 'key1', '--kms-keyring', 'ring', '--kms-location', 'us-central1',
        '--kms-project', 'keys'], {
            'encryptionSpec': {'kmsKeyName': 'projects/keys/locations/us-central1/'
                                             'keyRings/ring/cryptoKeys/key1'}}),
    'USER_ARGS': ('containerSpec.args', CONTAINER, {
        POOL0 + '.containerSpec.args': ['--learning-rate', '0.1']}),
}
USER_ARGS = {'USER_ARGS': ['--learning-rate', '0.1']}


def test_every_accepted_flag_has_a_case_and_the_table_shows_its_field():
    accepted = {f.name for f in gcloud_flags.FLAGS if f.kind in (gcloud_flags.FIELD, gcloud_flags.MAPPED)}
    assert set(CASES) | {'--config'} == accepted
    for name, (field, _, _) in CASES.items():
        assert field in gcloud_flags.FLAG_ROWS[name].vertex, (name, field)


def test_the_table_is_typed_data():
    """Each row says which trainingInput field it sets and how its value is parsed;
    the docs columns are prose, never parsed: where a row names a field, the
    docs column shows that same path."""
    for row in gcloud_flags.FLAGS:
        if row.field is not None:
            assert row.legacy == 'trainingInput.' + '.'.join(row.field), row.name
        if row.name.startswith('--') and row.kind in (gcloud_flags.FIELD, gcloud_flags.MAPPED):
            assert row.switch or row.parse is not None or row.field is not None, row.name
    assert gcloud_flags.FLAG_ROWS['--worker-count'].parse('3') == 3
    with pytest.raises(ValueError):
        gcloud_flags.FLAG_ROWS['--worker-count'].parse('many')


@pytest.mark.parametrize('flag', sorted(CASES))
def test_flag_reaches_its_field(flag, checks):
    _, argv, expected = CASES[flag]
    printed, _ = dry_run(*argv, user_args=USER_ARGS.get(flag))
    for path, value in expected.items():
        got = at(printed, path)
        if callable(value):
            assert value(got), (path, got)
        else:
            assert got == value, (path, got)


def test_config_fields_and_flags_that_override_them(tmp_path, checks):
    """gcloud's rule: a given flag replaces its field of the --config Job; the rest stays."""
    config = config_file(tmp_path, """\
jobId: ignored_in_favour_of_JOB
labels: {team: research}
trainingInput:
  scaleTier: CUSTOM
  masterType: n1-highmem-8
  workerType: n1-standard-4
  workerCount: 3
  masterConfig:
    imageUri: %s
    acceleratorConfig: {count: 1, type: NVIDIA_TESLA_T4}
  args: [--from-config]
  region: europe-west1
  scheduling: {maxRunningTime: 7200s}
""" % IMAGE)
    printed, _ = dry_run('--config', config)
    assert at(printed, 'displayName') == 'job_1'
    assert users_labels(at(printed, 'labels')) == {'team': 'research'}
    assert at(printed, POOL0) == {
        'machineSpec': {'machineType': 'n1-highmem-8', 'acceleratorType': 'NVIDIA_TESLA_T4',
                        'acceleratorCount': 1},
        'replicaCount': '1', 'containerSpec': {'imageUri': IMAGE, 'args': ['--from-config']}}
    assert at(printed, 'jobSpec.workerPoolSpecs[1].replicaCount') == '3'
    assert at(printed, 'jobSpec.scheduling') == {'timeout': '7200s'}
    assert '/locations/europe-west1/' in at(printed, 'uri')

    printed, _ = dry_run('--config', config, '--worker-count', '5', '--master-machine-type',
                         'n1-standard-16', '--region', 'us-east1', '--labels', 'env=dev',
                         user_args=['--from-flags'])
    assert at(printed, POOL0 + '.machineSpec.machineType') == 'n1-standard-16'
    assert at(printed, POOL0 + '.machineSpec.acceleratorCount') == 1  # the file's, kept
    assert at(printed, 'jobSpec.workerPoolSpecs[1].replicaCount') == '5'
    assert at(printed, 'jobSpec.workerPoolSpecs[1].machineSpec.machineType') == 'n1-standard-4'
    assert at(printed, POOL0 + '.containerSpec.args') == ['--from-flags']
    assert users_labels(at(printed, 'labels')) == {'team': 'research', 'env': 'dev'}
    assert '/locations/us-east1/' in at(printed, 'uri')


def test_a_json_config_and_config_package_fields(tmp_path, checks):
    """`--config` takes JSON too, with packageUris and pythonModule of a package
    already in the bucket (nothing to build or check)."""
    config = config_file(tmp_path, json.dumps({'trainingInput': {
        'packageUris': ['gs://bkt/pkgs/trainer-0.1.tar.gz'], 'pythonModule': 'trainer.task',
        'jobDir': 'gs://bkt/json-out', 'runtimeVersion': '2.11', 'pythonVersion': '3.7'}}))
    printed, err = dry_run('--config', config)
    assert at(printed, POOL0 + '.containerSpec.args') == [
        '--package-uri=gs://bkt/pkgs/trainer-0.1.tar.gz', '--module-name=trainer.task', '--',
        '--job-dir=gs://bkt/json-out']
    assert checks == [('trainer.task', [])]  # nothing local to install
    assert err.splitlines() == [
        "warning: --runtime-version 2.11: Vertex AI has no AI Platform runtimes; the job runs "
        "TensorFlow 2.15.1 (this project's image): tf.estimator is still there (2.15 is its "
        "last release)",
        "warning: --python-version 3.7: the job runs Python 3.11 (this project's image)"]


def test_a_prebuilt_vertex_image_installs_the_package_itself(checks):
    printed, err = dry_run(*PACKAGE, '--master-image-uri', PREBUILT,
                           '--use-chief-in-tf-config', 'true', '--scale-tier', 'custom',
                           '--master-machine-type', 'n1-standard-4', *WORKERS)
    for pool in (0, 1):
        spec = at(printed, 'jobSpec.workerPoolSpecs[%d].pythonPackageSpec' % pool)
        assert spec['executorImageUri'] == PREBUILT
        assert STAGED.fullmatch('--package-uri=' + spec['packageUris'][0])
        assert (spec['pythonModule'], spec['args']) == ('trainer.task', [
            '--job-dir=gs://bkt/out'])
    assert 'image' not in printed  # nothing to build
    assert err == ''


def test_keras_mnist_custom_container_line(checks):
    """The Keras MNIST sample's line: its package on a CUSTOM cluster of this
    project's image, chief named chief in TF_CONFIG."""
    printed, err = dry_run(
        '--scale-tier=CUSTOM', '--master-machine-type=n1-standard-8',
        '--master-image-uri=%s' % IMAGE, '--worker-machine-type=n1-standard-8',
        '--worker-count=2', '--use-chief-in-tf-config=true',
        '--package-path=%s' % os.path.join(PACKAGES, 'keras_mnist', 'trainer'),
        '--module-name=trainer.task', '--job-dir=gs://bkt/mnist', user_args=['--steps=10'])
    chief, workers = at(printed, 'jobSpec.workerPoolSpecs')
    assert workers['replicaCount'] == '2'
    for pool in (chief, workers):
        assert pool['containerSpec']['imageUri'] == IMAGE
        assert pool['containerSpec']['args'][1:] == [
            '--module-name=trainer.task', '--', '--steps=10', '--job-dir=gs://bkt/mnist']
    assert err == ''


# ----------------------------------------------------------- mapped and refused


def _error(*argv, user_args=None):
    with pytest.raises(UserInputError) as raised:
        dry_run(*argv, user_args=user_args)
    assert '\n' not in str(raised.value)
    return raised.value


@pytest.mark.parametrize('argv, line', [
    (PACKAGE + ['--runtime-version', '1.15'],
     "warning: --runtime-version 1.15: Vertex AI has no AI Platform runtimes; the job runs "
     "TensorFlow 2.15.1 (this project's image): tf.contrib is gone, tf.compat.v1 and "
     "tf.estimator are there (import tensorflow.compat.v1 as tf); TF_CONFIG names pool 0 "
     "'master' as AI Platform did"),
    (PACKAGE + ['--runtime-version', '2.11'],
     "warning: --runtime-version 2.11: Vertex AI has no AI Platform runtimes; the job runs "
     "TensorFlow 2.15.1 (this project's image): tf.estimator is still there (2.15 is its "
     "last release)"),
    (CONTAINER + ['--runtime-version', '1.15', '--use-chief-in-tf-config', 'true'],
     'warning: --runtime-version 1.15: ignored: the pools run your container %s, which has '
     'its own TensorFlow' % IMAGE),
    (PACKAGE + ['--python-version', '3.7'],
     "warning: --python-version 3.7: the job runs Python 3.11 (this project's image)"),
    (CONTAINER,
     "warning: trainingInput.useChiefInTfConfig is not true: AI Platform named the first "
     "pool 'master' in your container's TF_CONFIG; Vertex AI names it 'chief' (code that "
     "looks for 'master' must look for 'chief')"),
])
def test_mapped_flag_is_one_warning_line(argv, line, checks):
    _, err = dry_run(*argv)
    assert err.splitlines() == [line]


def test_runtime_1_on_a_prebuilt_image_cannot_name_the_master(checks):
    _, err = dry_run(*PACKAGE, '--runtime-version', '1.15', '--master-image-uri', PREBUILT)
    assert err.splitlines() == [
        "warning: --runtime-version 1.15: Vertex AI has no AI Platform runtimes; the job runs "
        "TensorFlow 2.15 (%s): tf.contrib is gone, tf.compat.v1 and tf.estimator are there "
        "(import tensorflow.compat.v1 as tf)" % PREBUILT,
        "warning: %s runs the package with TF_CONFIG naming the first pool 'chief', where AI "
        "Platform said 'master' (Estimator's chief does not evaluate; add an evaluator pool "
        "or use this project's image)" % PREBUILT]


def test_use_chief_in_tf_config_true_silences_the_container_warning(checks):
    _, err = dry_run(*CONTAINER, '--use-chief-in-tf-config', 'true')
    assert err == ''


def test_a_job_dir_or_bucket_that_is_not_gs_is_one_line(checks):
    assert str(_error(*CONTAINER, '--job-dir', '/tmp/out')).startswith('--job-dir /tmp/out: ')
    assert str(_error(*PACKAGE, '--staging-bucket', 'Not_A_Bucket')).startswith(
        '--staging-bucket Not_A_Bucket: ')


@pytest.mark.parametrize('argv, message', [
    (PACKAGE + ['--tpu-tf-version', '1.15'],
     '--tpu-tf-version: not supported: TPUs need TPUEstimator; these runs are for CPUs and '
     'GPUs'),
    (PACKAGE + ['--python-version', '2.7'],
     '--python-version 2.7: not supported: TensorFlow 2.15.1 needs Python 3; port the '
     'package to Python 3'),
    (PACKAGE + ['--runtime-version', 'latest'],
     '--runtime-version latest: expected an AI Platform runtime version like 1.15 or 2.11'),
    (PACKAGE + ['--scale-tier', 'basic-tpu'],
     'command line: trainingInput.scaleTier: BASIC_TPU: TPUs need TPUEstimator; these '
     'Estimator trainers run on CPUs and GPUs'),
    (CONTAINER + ['--master-machine-type', 'n1-standard-8'],
     '--master-machine-type needs --scale-tier custom (the scale tier is BASIC)'),
    (CONTAINER + ['--scale-tier', 'custom'],
     '--scale-tier custom needs --master-machine-type (or trainingInput.masterType in '
     '--config)'),
    (CONTAINER + CUSTOM + ['--worker-count', '2'],
     '--worker-count 2 needs --worker-machine-type'),
    (['--package-path', COURSE_TRAINER, '--job-dir', 'gs://bkt/out'],
     '--module-name is required with --package-path or --packages (the module the job '
     'runs, e.g. trainer.task)'),
    (['--package-path', COURSE_TRAINER, '--module-name', 'trainer.task'],
     "local packages (and the build context of this project's image) are staged to Cloud "
     "Storage: give --staging-bucket or --job-dir (as gcloud required)"),
    (['--packages', 'gs://bkt/trainer-0.1.tar.gz', '--module-name', 'trainer.task'],
     "local packages (and the build context of this project's image) are staged to Cloud "
     "Storage: give --staging-bucket or --job-dir (as gcloud required)"),
    ([], 'nothing to run: give --package-path (or --packages) with --module-name, or '
         '--master-image-uri for a container'),
    (CONTAINER + ['--kms-key', 'projects/k/locations/europe-west1/keyRings/r/cryptoKeys/c'],
     "--kms-key projects/k/locations/europe-west1/keyRings/r/cryptoKeys/c: the key is in "
     "europe-west1; Vertex AI needs it in the job's region us-central1"),
    (CONTAINER + ['--labels', 'Team=A'],
     "command line: labels.Team: label key 'Team': 'T' is not allowed (a key starts with a "
     "lowercase letter)"),
    (CONTAINER + ['--kms-key', 'short'],
     '--kms-key short: expected projects/P/locations/L/keyRings/R/cryptoKeys/K, or a key id '
     'with --kms-keyring, --kms-location and --kms-project'),
])
def test_refused_flag_is_one_line(argv, message, checks):
    assert str(_error(*argv)) == message


@pytest.mark.parametrize('argv, message', [
    (CONTAINER + CUSTOM + ['--master-accelerator', 'count=2'],
     'argument --master-accelerator: expected count=N,type=TYPE (type is required), got '
     "'count=2'"),
    (CONTAINER + ['--scale-tier', 'huge'],
     "argument --scale-tier: expected one of basic, basic-gpu, basic-tpu, standard-1, "
     "premium-1, custom, got 'huge'"),
    (CONTAINER + ['--master-machine-type', 'n1-standard-5'],
     "argument --master-machine-type: unknown machine type 'n1-standard-5': Vertex AI "
     "offers n1-standard in sizes 4, 8, 16, 32, 64, 96"),
    (CONTAINER + ['--use-chief-in-tf-config', 'maybe'],
     "argument --use-chief-in-tf-config: expected true or false, got 'maybe'"),
    (CONTAINER + ['--labels', 'team'],
     "argument --labels: expected KEY=VALUE,..., got 'team'"),
    (CONTAINER + ['--master-accelerator', 'count=1,type=nvidia-tesla-x1'],
     "argument --master-accelerator: unknown GPU type 'NVIDIA_TESLA_X1'"),
    (CONTAINER + ['--no-such-flag'], 'unrecognized arguments: --no-such-flag'),
    # An unset shell variable: `--package-path $PKG` with PKG unset.
    (['--package-path', '', '--module-name', 'trainer.task', '--job-dir', 'gs://bkt/out'],
     "argument --package-path: expected a value, got '' (an unset variable?)"),
    (CONTAINER + ['--packages', ' , '],
     "argument --packages: expected archives (local paths or gs:// URIs), got ' , '"),
])
def test_bad_flag_values_name_the_flag(argv, message):
    with pytest.raises(FlagError) as raised:
        dry_run(*argv)
    assert str(raised.value).startswith(message)


def test_async_and_stream_logs_are_client_behaviour(checks):
    printed, _ = dry_run(*CONTAINER, '--async')
    assert printed == dry_run(*CONTAINER)[0]
    with pytest.raises(FlagError, match='not allowed with argument'):
        dry_run(*CONTAINER, '--async', '--stream-logs')


def test_docs_hold_the_translation_table():
    with open(os.path.join(REPO_ROOT, 'docs', 'migrating-from-ai-platform.md')) as f:
        docs = f.read()
    assert gcloud_flags.markdown_table() in docs


def test_readme_migrates_a_gcloud_line_by_two_words():
    with open(os.path.join(REPO_ROOT, 'README.md')) as f:
        readme = f.read()
    before = re.findall(r'^gcloud ai-platform (jobs submit training .*)$', readme, re.M)
    after = re.findall(r'^bash scripts/ai-platform\.sh (jobs submit training .*)$', readme, re.M)
    assert before and before == after


def test_a_tuning_config_gives_every_trial_the_job_dir(tmp_path, checks):
    """AI Platform passed --job-dir to every trial (the package adds the trial id
    itself); no --hypertune-metric, which only the declared trainers take."""
    config = config_file(tmp_path, """\
trainingInput:
  hyperparameters:
    goal: MAXIMIZE
    hyperparameterMetricTag: accuracy
    maxTrials: 4
    maxParallelTrials: 2
    params:
      - parameterName: learning-rate
        type: DOUBLE
        minValue: 0.001
        maxValue: 0.1
        scaleType: UNIT_LOG_SCALE
""")
    printed, _ = dry_run(*PACKAGE, '--config', config)
    assert printed['request']['uri'].endswith('/hyperparameterTuningJobs?alt=json')
    body = printed['request']['body']
    assert body['studySpec']['metrics'] == [{'metricId': 'accuracy', 'goal': 'MAXIMIZE'}]
    (pool,) = body['trialJobSpec']['workerPoolSpecs']
    assert pool['containerSpec']['args'][-2:] == ['--', '--job-dir=gs://bkt/out']
