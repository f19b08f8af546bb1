"""Every command README.md and docs/*.md show runs here as written, or says why not.

The commands come from the docs themselves (`doc_examples.commands`), with the
docs' placeholders set as a user would set them (`SETTINGS`, and the docs'
own `export` and `VAR=` lines). Each is dispatched by what it is, the cheap
way that still runs the real code:

- a cloud submission (`train-cloud.sh MODEL ...`, `ai-platform.sh jobs submit
  training ...`): the front's own plan of it, every replica's start-up checks
  and the request body against the discovery schema (what `--dry-run` does
  before it builds and stages; tests/test_cloud_*.py run whole dry runs);
- a gcloud line: the line after it must be the same words through
  `ai-platform.sh` (the migration the docs promise), which runs;
- a local training line (`train-local.sh`, `ai-platform.sh local train`):
  its options and the trainer's flags through the real parsers (training
  takes minutes: tests/test_cluster_*.py and test_gcloud_packages.py train);
- a sweep: `experiment.sh ... --dry-run`; a serving command that writes:
  its `--dry-run`; a synopsis (`status|cancel|logs JOB`, `[--limit N]`):
  the command's `--help`; the run-record snippet on a record written here;
- `local predict` and `python -m taxi_estimator.predict` lines and the
  taxi instances: tests/test_local_predict.py, on its small exports.

`NOT_RUN` lists the commands deliberately not executed, with why (real
cloud, a server that runs until stopped, downloads, Docker); a command that
matches nothing above fails the test until it is given a way to run or a
reason.
"""
import io
import json
import os
import re
import subprocess
import sys

import pytest

import cloud_fakes
import doc_examples
from conftest import cli_env, REPO_ROOT
from estimator_trainers import flags
from estimator_trainers import registry
from estimator_trainers import run_record
from estimator_trainers.tools import launcher
from estimator_trainers.tools import local
from estimator_trainers.tools.cloud import actions
from estimator_trainers.tools.cloud import ai_platform
from estimator_trainers.tools.cloud import jobs
from estimator_trainers.tools.cloud import preflight
from estimator_trainers.tools.cloud import train_cloud
from estimator_trainers.tools.experiment import cli as experiment_cli
from test_cloud_cli import FakeBackend

# The docs' placeholders, as a user would have set them.
SETTINGS = {
    'JOB_NAME': 'cifar_1', 'JOB': 'job_1', 'REGION': 'us-central1',
    'IMAGE_URI': 'us-central1-docker.pkg.dev/my-project/trainers/mnist:1',
    'JOB_DIR': 'gs://my-bucket/jobs/job_1', 'LOCAL_DIR': '/tmp/out',
    'TRAIN': '/tmp/data/train.csv', 'EVAL': '/tmp/data/eval.csv',
    'MODEL_NAME': 'taxi_model', 'MODEL_DIR': 'gs://my-bucket/taxi/model',
}
# Files the docs' lines name relative to the user's directory (instances.json: the
# docs' own taxi instance).
FILES = {'config.yaml': 'trainingInput:\n  scaleTier: STANDARD_1\n',
         'cifar10_estimator/cmle_config.yaml': cloud_fakes.COURSE_CONFIG,
         'instances.json': json.dumps(next(
             instance for doc, _, instance in doc_examples.instances()
             if doc == 'docs/migrating-from-ai-platform.md')) + '\n'}
# Commands deliberately not executed here: a pattern of the command -> why.
NOT_RUN = {
    r'^bash scripts/test\.sh$': 'the whole test suite (CI runs it)',
    r'^bash scripts/tensorboard\.sh |^tensorboard ':
        'starts a TensorBoard server that runs until stopped (tests/test_tensorboard.py '
        'serves job-dirs through scripts/tensorboard.sh)',
    r'^docker ': 'needs Docker and a registry (the image is built by Cloud Build; '
                 'tests/test_cloud_build.py checks its context and request)',
    r'^\.venv/bin/saved_model_cli ': "TensorFlow's own tool on a trained export (tests/"
                                     'test_cifar10_train.py and test_keras_trainer.py run it '
                                     'on theirs)',
    r'generate_cifar10_tfrecords --data-dir DIR$': 'downloads CIFAR-10 (163 MB) from '
                                                   'www.cs.toronto.edu',
    r'generate_cifar10_tfrecords --data-dir DIR --source ':
        "tests/conftest.py's cifar10_data_dir runs it on a generated tarball",
    r'^python -m taxi_estimator\.cache --files .gs://BUCKET':
        'reads a bucket of yours (tests/test_taxi_large_data.py runs it on the gs:// '
        'emulator)',
    r'^bash scripts/(train-local|train-cloud)\.sh toy':
        "the guide's toy package, not in this repository: tests/test_trainer_discovery.py "
        'writes it from the guide and runs these lines',
    r'^bash scripts/ai-platform\.sh versions create v1 ':
        'loads the export from Cloud Storage before anything else (tests/'
        'test_serving_cloud.py runs the sample\'s line against the gs:// emulator and a '
        'fake Vertex AI)',
    r'^gcloud ai (custom-jobs|hp-tuning-jobs) create ':
        "Google's own gcloud creating a Vertex AI job (tests/test_gcloud_reference.py runs "
        'it on the written spec against a recording server)',
    r'^bash scripts/ai-platform\.sh models (list|delete)':
        "reads the project's Vertex AI endpoints with its credentials (tests/"
        "test_serving_cloud.py runs seed 002's clean-up lines against a fake Vertex AI)",
}
_SYNOPSIS = re.compile(r'\||\[|\.\.\.| (JOB|DIR|EXPORT|FILE|MODEL|VERSION|USER_ARGS)\b')
_GCLOUD = re.compile(r'^gcloud (ai-platform|ml-engine) ')
_PREDICTS = re.compile(r'^(bash scripts/ai-platform\.sh local predict |'
                       r'python -m taxi_estimator\.predict )')
COMMANDS = doc_examples.commands()


def _expand(text, env):
    return re.sub(r'\$\{?([A-Z_][A-Z0-9_]*)\}?', lambda m: env.get(m.group(1), m.group(0)), text)


def _settings(command):
    """The placeholders of `command`: `SETTINGS`, then its doc's `export`/`VAR=` lines
    before it."""
    env = dict(SETTINGS)
    for earlier in COMMANDS:
        if earlier.doc != command.doc or earlier.line >= command.line:
            continue
        words = earlier.words
        if words[0] == 'export':
            words = words[1:]
        if all(re.fullmatch(r'[A-Z_][A-Z0-9_]*=.*', word) for word in words):
            env.update(word.split('=', 1) for word in words)
    return env


def _not_run(command):
    return next((why for pattern, why in NOT_RUN.items()
                 if re.search(pattern, command.text)), None)


@pytest.fixture
def user_dir(tmp_path, monkeypatch):
    """The user's directory: the files the lines name, the repository's configs."""
    for name, text in FILES.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    os.symlink(os.path.join(REPO_ROOT, 'configs'), tmp_path / 'configs')
    monkeypatch.chdir(tmp_path)
    for name in ('PROJECT_ID', 'BUCKET_NAME', 'REGION', 'CLOUDSDK_CORE_PROJECT',
                 'CLOUDSDK_AI_PLATFORM_REGION', 'CLOUDSDK_COMPUTE_REGION', 'JOB_DIR',
                 'DATA_DIR'):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def test_every_command_of_the_docs_is_found():
    """The extraction itself: the docs hold commands of every kind dispatched below."""
    texts = [command.text for command in COMMANDS]
    assert len(texts) > 60
    assert any(text.startswith('bash scripts/train-cloud.sh cifar10 ') for text in texts)
    assert any(_GCLOUD.match(text) for text in texts)
    assert any(_PREDICTS.match(text) for text in texts)


@pytest.mark.parametrize('command', COMMANDS, ids=lambda c: '%s:%d' % (c.doc, c.line))
def test_a_docs_command_runs_as_written(command, user_dir, monkeypatch, capsys):
    env = _settings(command)
    for name in ('PROJECT_ID', 'BUCKET_NAME', 'REGION'):
        if name in env:
            monkeypatch.setenv(name, env[name])
    words = [_expand(word, env) for word in command.words]
    text = command.text
    if words[0] == 'export' or re.fullmatch(r'[A-Z_][A-Z0-9_]*=.*', words[0]):
        return  # a setting: the lines after it use it
    if _not_run(command):
        pytest.skip('not run: %s' % _not_run(command))
    if _PREDICTS.match(text):
        pytest.skip('run by tests/test_local_predict.py::test_the_docs_predict_lines')
    if _GCLOUD.match(text):
        _is_migrated(command)
    elif text.startswith('bash scripts/train-cloud.sh ') and not _SYNOPSIS.search(text):
        _train_cloud_plan(words[2:])
    elif text.startswith('bash scripts/ai-platform.sh jobs submit training ') and \
            not _SYNOPSIS.search(text):
        _ai_platform_plan(words[5:])
    elif text.startswith('python -c '):
        _run_record_snippet(words[2], user_dir)
    elif _SYNOPSIS.search(text) or text.startswith('python -m taxi_estimator.task '):
        _help(words)
        assert 'usage:' in capsys.readouterr().out.lower(), command
    elif text.startswith('bash scripts/train-local.sh'):
        _train_local_parse(words[2:])
    elif text.startswith('bash scripts/ai-platform.sh local train '):
        ai_platform.build_parser().parse_args(flags.split_at_dashes(words[2:])[0])
    elif text.startswith('bash scripts/experiment.sh '):
        _sweep_dry_run(words[2:], user_dir)
    elif text.startswith('bash scripts/ai-platform.sh '):
        _serving_dry_run(words[2:])
    else:
        raise AssertionError('%s: no way to run it here and no reason in NOT_RUN' % (command,))


def _is_migrated(command):
    """A gcloud line is followed by the same words through ai-platform.sh."""
    following = COMMANDS[COMMANDS.index(command) + 1]
    assert following.doc == command.doc, command
    assert _GCLOUD.sub('bash scripts/ai-platform.sh ', command.text) == following.text, (
        command, following)


def _checked_body(plan):
    """What a dry run checks before it builds: every replica's start-up, the body."""
    preflight.check_replicas(plan)
    return jobs.job_body(plan.resolved(package_uris=['gs://my-bucket/staging/p.tar.gz'],
                                       project_image='us-central1-docker.pkg.dev/p/r/i:1'))


def _train_cloud_plan(argv):
    options, trainer_flags = flags.split_at_dashes(argv)
    args = train_cloud.build_parser().parse_args(['submit'] + options)
    actions.training_action(args, on_created=None)
    _checked_body(train_cloud.make_plan(args, trainer_flags or [], os.environ))


def _ai_platform_plan(argv):
    options, user_args = flags.split_at_dashes(argv)
    args = ai_platform.build_parser().parse_args(['jobs', 'submit', 'training'] + options)
    _checked_body(ai_platform.training_plan(args, user_args, os.environ))


def _help(words):
    """The command's `--help` (the words before its synopsis), exit 0."""
    if words[:2] == ['bash', 'scripts/ai-platform.sh']:
        main, argv = ai_platform.main, words[2:]
    elif words[:3] == ['python', '-m', 'estimator_trainers.tools.cloud']:
        main, argv = train_cloud.main, words[3:]
    else:
        assert words[:2] == ['python', '-m'], words
        module = words[2]
        proc = subprocess.run([sys.executable, '-m', module, '--help'], cwd=REPO_ROOT,
                              env=cli_env(), capture_output=True, text=True, timeout=120,
                              check=False)
        assert proc.returncode == 0, proc.stderr[-2000:]
        print(proc.stdout)
        return
    head = []
    for word in argv:
        if _SYNOPSIS.search(' ' + word) or word.startswith('-'):
            break
        head.append(word)
    with pytest.raises(SystemExit) as exited:
        main(head + ['--help'])
    assert exited.value.code == 0


def _train_local_parse(argv):
    """`train-local.sh` options and the trainer's flags, through the real parsers."""
    args, trainer_flags = local.parse_args(argv)
    extra = local.launcher_args(args)
    if args.distributed:
        launcher.parse_args(['--job-dir', '/tmp/out', *extra, '--', 'python'])
    if args.package_path:
        return  # a user's package: its own flags, run by the launcher
    trainer = registry.get(args.model)
    trainer.parse_args(trainer.data_args('/tmp/data') + ['--job-dir', '/tmp/job']
                       + list(trainer.local_args) + trainer_flags)


def _sweep_dry_run(argv, user_dir):
    argv = [os.path.join(REPO_ROOT, argv[0])] + argv[1:]
    if '--dry-run' not in argv:
        argv.append('--dry-run')
    out = io.StringIO()
    assert experiment_cli.main(argv + ['--out', str(user_dir / 'sweep')], stream=out) == 0
    assert out.getvalue()


def _serving_dry_run(argv):
    out, err = io.StringIO(), io.StringIO()
    backend = FakeBackend()
    assert ai_platform.main(argv + ['--dry-run'], backend=backend, out=out, err=err) == 0
    assert backend.calls == []
    assert json.loads(out.getvalue())['request']


def _run_record_snippet(code, user_dir):
    """The docs' one-liner that reads a job-dir's run record, on one written here."""
    job_dir = user_dir / 'taxi'
    job_dir.mkdir()
    run_record.append(run_record.path(str(job_dir)), {
        'status': run_record.SUCCEEDED, 'phases': {'training_secs': 1.5}})
    assert "'/tmp/taxi'" in code
    proc = subprocess.run([sys.executable, '-c', code.replace('/tmp/taxi', str(job_dir))],
                          cwd=REPO_ROOT, env=cli_env(), capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout) == {'training_secs': 1.5}


def test_the_commands_not_run_here_are_listed_with_why():
    """Each reason in NOT_RUN still names a command of the docs."""
    for pattern in NOT_RUN:
        assert any(re.search(pattern, command.text) for command in COMMANDS), pattern
