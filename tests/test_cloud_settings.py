"""The project and region of every cloud command: one rule (`location`), read as gcloud
reads its own settings (`gcloud_config`), said in the help texts and the docs, and
named in one note when no flag gave them.

What gcloud itself does with the same settings is checked against the real gcloud
in tests/test_gcloud_reference.py.
"""
import io
import json
import os
import subprocess

import pytest

import cloud_fakes
import processes
from conftest import REPO_ROOT, cli_env
from estimator_trainers.errors import UserInputError
from estimator_trainers.tools.cloud import ai_platform
from estimator_trainers.tools.cloud import location
from estimator_trainers.tools.cloud import train_cloud
from gcloud_reference import write_configuration
from test_cloud_cli import FakeBackend

IMAGE = 'us-central1-docker.pkg.dev/my-project/trainers/mnist:1'
CONTAINER_LINE = ['jobs', 'submit', 'training', 'job_1', '--master-image-uri', IMAGE,
                  '--use-chief-in-tf-config', 'true', '--dry-run']


def _environ(tmp_path, properties=None, name='default', **variables):
    """An environment whose gcloud configuration dir holds `properties`."""
    config_dir = str(tmp_path / 'gcloud')
    if properties is not None:
        write_configuration(config_dir, properties, name=name)
    return dict(variables, CLOUDSDK_CONFIG=config_dir)


# (variables, the active configuration's properties, --region, trainingInput.region)
# -> (region, where it came from) for a training job.
TRAINING_REGIONS = [
    ({}, None, None, None, ('us-central1', location.DEFAULT)),
    ({}, None, None, 'asia-east1', ('asia-east1', location.CONFIG_REGION)),
    ({}, {'compute/region': 'europe-west1'}, None, 'asia-east1',
     ('europe-west1', 'compute/region in gcloud configuration "default" (CONFIG)')),
    ({'REGION': 'us-east4'}, {'compute/region': 'europe-west1'}, None, None,
     ('us-east4', 'REGION')),
    ({'REGION': 'us-east4', 'CLOUDSDK_COMPUTE_REGION': 'europe-west4'},
     {'compute/region': 'europe-west1'}, None, None,
     ('europe-west4', 'CLOUDSDK_COMPUTE_REGION')),
    ({'CLOUDSDK_COMPUTE_REGION': 'europe-west4'}, None, 'us-west1', 'asia-east1',
     ('us-west1', location.FLAG)),
    # gcloud's jobs submit training reads compute/region, not ai_platform/region.
    ({'CLOUDSDK_AI_PLATFORM_REGION': 'asia-east1'}, {'ai_platform/region': 'asia-east1'},
     None, None, ('us-central1', location.DEFAULT)),
]


@pytest.mark.parametrize('variables, properties, flag, config_region, expected',
                         TRAINING_REGIONS)
def test_training_region_by_the_rule(tmp_path, variables, properties, flag, config_region,
                                     expected):
    environ = _environ(tmp_path, properties, **variables)
    setting = location.Settings(environ, location.TRAINING).region(flag, config_region)
    path = os.path.join(environ['CLOUDSDK_CONFIG'], 'configurations', 'config_default')
    assert (setting.value, setting.source) == (expected[0], expected[1].replace('CONFIG', path))


def test_serving_region_reads_ai_platform_region(tmp_path):
    """models, versions and predict read ai_platform/region, as gcloud's did; a global
    one (gcloud's global endpoint) is passed over with the note's reason."""
    environ = _environ(tmp_path, {'ai_platform/region': 'europe-west4',
                                  'compute/region': 'asia-east1'})
    settings = location.Settings(environ, location.SERVING)
    assert settings.region().value == 'europe-west4'
    environ['CLOUDSDK_AI_PLATFORM_REGION'] = 'global'
    setting = location.Settings(environ, location.SERVING).region()
    assert setting.value == 'europe-west4'
    assert setting.notes == ('CLOUDSDK_AI_PLATFORM_REGION global: Vertex AI has no global '
                             'endpoint',)


def test_the_active_configuration_as_gcloud_names_it(tmp_path):
    """CLOUDSDK_ACTIVE_CONFIG_NAME, else active_config, else `default`; NONE: none."""
    config_dir = str(tmp_path / 'gcloud')
    write_configuration(config_dir, {'core/project': 'default-project'}, active=False)
    write_configuration(config_dir, {'core/project': 'work-project'}, name='work')
    environ = {'CLOUDSDK_CONFIG': config_dir}
    assert location.project_id(environ=environ) == 'work-project'
    os.remove(os.path.join(config_dir, 'active_config'))
    assert location.project_id(environ=environ) == 'default-project'
    environ['CLOUDSDK_ACTIVE_CONFIG_NAME'] = 'work'
    assert location.project_id(environ=environ) == 'work-project'
    environ['CLOUDSDK_ACTIVE_CONFIG_NAME'] = 'NONE'
    assert location.project_id(environ=environ, adc_project='adc-project') == 'adc-project'
    # The project's own variable comes after gcloud's, before the file.
    environ.pop('CLOUDSDK_ACTIVE_CONFIG_NAME')
    environ['PROJECT_ID'] = 'env-project'
    assert location.project_id(environ=environ) == 'env-project'
    environ['CLOUDSDK_CORE_PROJECT'] = 'gcloud-project'
    assert location.project_id(environ=environ) == 'gcloud-project'
    assert location.project_id('flag-project', environ) == 'flag-project'


def test_without_a_home_or_a_config_dir_nothing_is_read():
    assert location.Settings({}, location.TRAINING).region().value == 'us-central1'


@pytest.mark.parametrize('text, message', [
    ('project = p\n', 'line 1: not a configuration of properties (a line before the first '
                      '[section])'),
    ('[core]\nproject = a\nproject = b\n', 'line 3: not a configuration of properties '
                                           '(project given twice in [core])'),
    ('[core]\nthis is not a property\n', 'line 2: not a configuration of properties (a line '
                                         'that is neither [section] nor name = value)'),
    (b'[core]\nproject = \xff\n', 'line 2: not UTF-8 text'),
])
def test_a_malformed_configuration_is_one_line(tmp_path, text, message):
    environ = _environ(tmp_path, {})
    path = os.path.join(environ['CLOUDSDK_CONFIG'], 'configurations', 'config_default')
    with open(path, 'wb') as f:
        f.write(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(UserInputError) as raised:
        location.Settings(environ).project()
    assert str(raised.value).startswith('gcloud configuration %s %s' % (path, message))
    assert '\n' not in str(raised.value)


def test_a_configuration_that_is_no_regular_file_is_one_line(tmp_path):
    environ = _environ(tmp_path, {})
    path = os.path.join(environ['CLOUDSDK_CONFIG'], 'configurations', 'config_default')
    os.remove(path)
    os.mkfifo(path)
    with pytest.raises(UserInputError, match='^gcloud configuration .* not a regular file$'):
        location.Settings(environ).region()


def test_a_bad_value_names_where_it_came_from(tmp_path):
    environ = _environ(tmp_path, {'compute/region': 'Europe West'})
    with pytest.raises(UserInputError) as raised:
        location.Settings(environ).region()
    assert str(raised.value).startswith("region 'Europe West' (compute/region in gcloud "
                                        'configuration "default" (')
    with pytest.raises(UserInputError, match=r"^project 'P' \(CLOUDSDK_CORE_PROJECT\): "):
        location.Settings({'CLOUDSDK_CORE_PROJECT': 'P'}).project()


def _ai_platform(argv, environ):
    out, err = io.StringIO(), io.StringIO()
    assert ai_platform.main(argv, backend=FakeBackend(), out=out, err=err,
                            environ=environ) == 0
    return out.getvalue(), err.getvalue()


def test_a_dry_run_says_where_the_project_and_region_came_from(tmp_path):
    """HW3's and seed 001's lines have no --region: the job goes where gcloud's would."""
    environ = _environ(tmp_path, {'core/project': 'cfg-project',
                                  'compute/region': 'europe-west1'})
    out, err = _ai_platform(CONTAINER_LINE, environ)
    assert json.loads(out)['request']['uri'] == (
        'https://europe-west1-aiplatform.googleapis.com/v1/projects/cfg-project/locations/'
        'europe-west1/customJobs?alt=json')
    path = os.path.join(environ['CLOUDSDK_CONFIG'], 'configurations', 'config_default')
    assert _settings_notes(err) == [
        'note: using project cfg-project from core/project in gcloud configuration '
        '"default" (%s) and region europe-west1 from compute/region in gcloud '
        'configuration "default" (%s)' % (path, path)]
    # Flags say nothing; a variable is named; the config's region it beats is said.
    config = tmp_path / 'config.yaml'
    config.write_text('trainingInput:\n  region: asia-east1\n')
    environ['CLOUDSDK_COMPUTE_REGION'] = 'europe-west4'
    out, err = _ai_platform(CONTAINER_LINE + ['--project', 'flag-project', '--config',
                                              str(config)], environ)
    assert '/locations/europe-west4/' in json.loads(out)['request']['uri']
    assert _settings_notes(err) == [
        'note: using region europe-west4 from CLOUDSDK_COMPUTE_REGION '
        '(trainingInput.region asia-east1 comes after it, as in gcloud)']
    out, err = _ai_platform(CONTAINER_LINE + ['--project', 'p-1234', '--region', 'us-west1'],
                            environ)
    assert _settings_notes(err) == []
    assert '/projects/p-1234/locations/us-west1/' in json.loads(out)['request']['uri']


def _settings_notes(err):
    return [line for line in err.splitlines() if line.startswith(cloud_fakes.SETTINGS_NOTE)]


def test_train_cloud_follows_the_same_rule(tmp_path):
    environ = _environ(tmp_path, {'compute/region': 'europe-west1'}, PROJECT_ID='env-project',
                       BUCKET_NAME='gs://my-bucket')
    out, err = io.StringIO(), io.StringIO()
    backend = FakeBackend([(200, {}), (200, {})])
    assert train_cloud.main(['list'], backend=backend, out=out, err=err, environ=environ) == 0
    assert backend.calls[-1] == ('vertex', 'env-project', 'europe-west1')
    assert err.getvalue().startswith('note: using project env-project from PROJECT_ID and '
                                     'region europe-west1 from compute/region in gcloud ')


def test_help_texts_and_docs_say_the_one_rule():
    training = location.region_help(location.TRAINING, with_config=True)
    serving = location.region_help(location.SERVING)
    helps = {
        'train': train_cloud.build_parser()._subparsers._group_actions[0].choices[  # pylint: disable=protected-access
            'submit'].format_help(),
        'submit': _help(['jobs', 'submit', 'training']),
        'jobs': _help(['jobs', 'describe']),
        'serving': _help(['models', 'delete']),
    }
    for name, text in helps.items():  # compared without the line breaks
        assert _flat(location.PROJECT_HELP) in _flat(text), name
        assert _flat({'train': training, 'submit': training, 'serving': serving,
                      'jobs': location.region_help(location.TRAINING)}[name]) in _flat(text), name
    for doc in ('cloud.md', 'migrating-from-ai-platform.md'):
        with open(os.path.join(REPO_ROOT, 'docs', doc)) as f:
            text = _flat(f.read())
        for rule in (training, serving, location.PROJECT_HELP):
            assert _flat(rule) in text, (doc, rule)


def _flat(text):
    return ''.join(text.split())


def _help(words):
    parser = ai_platform.build_parser()
    for word in words:
        parser = next(a for a in parser._actions  # pylint: disable=protected-access
                      if a.__class__.__name__ == '_SubParsersAction').choices[word]
    return parser.format_help()


def test_train_cloud_sh_usage_lists_the_targets_the_code_takes():
    proc = processes.run(['bash', os.path.join(REPO_ROOT, 'scripts', 'train-cloud.sh'),
                          '--help'], 60, env=cli_env(), stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    assert '--target %s\n' % '|'.join(train_cloud.TARGETS) in proc.stdout
