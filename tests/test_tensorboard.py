"""What TensorBoard and the console show of default runs of both trainers.

Job-dirs are read the way TensorBoard reads them: its own event reader
(`EventAccumulator`), and its HTTP API through `scripts/tensorboard.sh`.
The runs use the trainers' defaults (cadence, evaluation, summaries) with
less data or fewer steps, so they take seconds.
"""
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from tensorboard.backend.event_processing import event_accumulator
from tensorboard.plugins.hparams import plugin_data_pb2

import taxi_trips
from conftest import cli_env, run_module, REPO_ROOT
from taxi_estimator import schema

TRAIN_ROWS = 1200  # 10 epochs of 128: 94 steps
TAXI_STEPS = 94
CIFAR_STEPS = 40
CIFAR_SMALL = ['--num-layers', '8', '--train-batch-size', '32', '--eval-batch-size', '50',
               '--random-seed', '7']


def _run(job_dir, name=''):
    """TensorBoard's view of one run (directory) of `job_dir`."""
    acc = event_accumulator.EventAccumulator(
        os.path.join(str(job_dir), name), size_guidance={event_accumulator.SCALARS: 0,
                                                         event_accumulator.IMAGES: 0,
                                                         event_accumulator.TENSORS: 0})
    acc.Reload()
    return acc


def _steps(acc, tag):
    return [event.step for event in acc.Scalars(tag)]


def _messages(stderr):
    """Log lines without their timestamps."""
    return [re.sub(r'^\d\d:\d\d:\d\d ', '', line) for line in stderr.splitlines()]


@pytest.fixture(scope='module')
def taxi(tmp_path_factory):
    """A taxi run with every default (10 epochs), on 1,200 generated trips."""
    folder = tmp_path_factory.mktemp('taxi_tb')
    train, evals = taxi_trips.write_layout_files(folder, train_rows=TRAIN_ROWS,
                                                 eval_rows=200)
    # A space and a quote: the printed TensorBoard command must survive copying.
    job_dir = folder / "taxi job's dir"
    proc = run_module('taxi_estimator.task', '--train-files', train, '--eval-files', evals,
                      '--job-dir', str(job_dir), check=0)
    return job_dir, proc.stderr


@pytest.fixture(scope='module')
def cifar(cifar10_data_dir, tmp_path_factory):
    """A CIFAR-10 run with the default cadence, a small ResNet and 40 steps."""
    job_dir = tmp_path_factory.mktemp('cifar_tb') / 'job'
    proc = run_module('cifar10_estimator.cifar10_main', '--data-dir', cifar10_data_dir,
                      '--job-dir', str(job_dir), *CIFAR_SMALL,
                      '--train-steps', str(CIFAR_STEPS), check=0)
    return job_dir, proc.stderr


@pytest.mark.parametrize('which,steps', [('taxi', TAXI_STEPS), ('cifar', CIFAR_STEPS)])
def test_default_runs_draw_evaluation_curves(request, which, steps):
    job_dir, _ = request.getfixturevalue(which)
    evaluated = _steps(_run(job_dir, 'eval'), 'accuracy')
    assert len(evaluated) >= 5, evaluated
    assert min(evaluated) > 0, 'the untrained step-0 checkpoint was evaluated'
    assert min(evaluated) <= steps // 2 and max(evaluated) == steps


def test_taxi_tag_set(taxi):
    job_dir, _ = taxi
    train, evaluation = _run(job_dir), _run(job_dir, 'eval')
    scalars = set(train.Tags()['scalars'])
    assert {'loss', 'accuracy', 'auc', 'learning_rate/dnn_adam', 'learning_rate/linear_ftrl',
            'examples_per_sec', 'global_step/sec'} <= scalars, sorted(scalars)
    assert 'learning_rate' not in scalars
    assert {'loss', 'accuracy', 'auc'} <= set(evaluation.Tags()['scalars'])
    # Training curves reach the last step, off the 100-step summary cadence.
    assert max(_steps(train, 'loss')) == TAXI_STEPS
    assert max(_steps(train, 'auc')) == TAXI_STEPS
    # A single process writes no per-worker runs.
    assert not os.path.exists(job_dir / 'workers')


def test_cifar_tag_set_images_and_graph(cifar):
    job_dir, _ = cifar
    train = _run(job_dir)
    scalars = set(train.Tags()['scalars'])
    assert {'loss', 'accuracy', 'learning_rate/momentum', 'examples_per_sec'} <= scalars
    assert 'train_accuracy' not in scalars
    assert {'loss', 'accuracy'} <= set(_run(job_dir, 'eval').Tags()['scalars'])
    tags = sorted(t for t in train.Tags()['images'] if t.startswith('images/'))
    assert tags == ['images/image/0', 'images/image/1', 'images/image/2']
    for tag in tags:
        images = train.Images(tag)
        assert [i.step for i in images] == [2]  # written rarely: then every 1,000 steps
        assert images[0].width == 32 and images[0].height == 32
    top = [node.name for node in train.Graph().node if '/' not in node.name]
    assert not [n for n in top if n.startswith(('L2Loss', 'Cast'))], top
    assert {'weight_decay', 'metrics', 'input'} <= {
        node.name.split('/')[0] for node in train.Graph().node}


def _hparams_content(acc):
    content = {}
    for tag in acc.Tags()['tensors']:
        if acc.SummaryMetadata(tag).plugin_data.plugin_name == 'hparams':
            data = plugin_data_pb2.HParamsPluginData.FromString(
                acc.SummaryMetadata(tag).plugin_data.content)
            content[data.WhichOneof('data')] = data
    return content


def test_hparams_session_with_the_flags(taxi):
    """The session is the `eval` run: its metrics are the evaluation's, not a batch's."""
    job_dir, _ = taxi
    assert not _hparams_content(_run(job_dir))
    content = _hparams_content(_run(job_dir, 'eval'))
    start = content['session_start_info'].session_start_info
    assert start.hparams['num_epochs'].number_value == 10
    assert start.hparams['batch_size'].number_value == 128
    assert start.hparams['serving_export_format'].string_value == 'JSON'
    assert start.hparams['training_tasks'].number_value == 1
    assert start.hparams['strategy'].string_value == 'none'
    assert start.hparams['precision'].string_value == 'float32'
    assert 'job_dir' not in start.hparams
    assert content['session_end_info'].session_end_info.status == 1  # STATUS_SUCCESS


@pytest.mark.parametrize('which', ['taxi', 'cifar'])
def test_console_each_message_once_with_eta_and_summary_block(request, which):
    job_dir, stderr = request.getfixturevalue(which)
    messages = _messages(stderr)
    repeated = [a for a, b in zip(messages, messages[1:]) if a == b]
    assert not repeated, repeated
    assert not any('Using config' in m for m in messages)  # TensorFlow's, at DEBUG only
    assert 'signatures can only accept' not in stderr
    assert 'Signatures EXCLUDED' not in stderr
    assert 'Calling checkpoint listeners' not in stderr
    assert re.search(r'INFO Saving checkpoints for %d into ' % (
        TAXI_STEPS if which == 'taxi' else CIFAR_STEPS), stderr)
    assert re.search(r'INFO step \d+/\d+, [\d.]+ steps/s, ETA (\d+h\d\dm|\d+m\d\ds|\d+s): '
                     r'.*loss = [\d.]+ \([\d.]+ examples/sec, average [\d.]+\)', stderr)
    block = stderr[stderr.index('INFO Run summary:'):].splitlines()
    fields = dict(re.match(r'  (\S+(?: \S+)?)\s{2,}(.*)', line).groups() for line in block[1:])
    assert re.match(r'[\d.]+[hms].*, of which evaluating [\d.]+[hms].* '
                    r'\([\d.]+%, \d+ evaluations\)',
                    fields['wall time'])
    steps = TAXI_STEPS if which == 'taxi' else CIFAR_STEPS
    assert fields['steps'] == '0 -> %d (%d this run)' % (steps, steps)
    assert fields['examples/sec'].startswith('average ')
    assert float(fields['examples/sec'].split()[1]) > 0
    assert 'accuracy = ' in fields['final metrics']
    assert fields['checkpoints'] == str(job_dir)
    assert fields['export'].startswith(str(job_dir / 'export') + '/')
    command = fields['TensorBoard']
    assert command.startswith('bash scripts/tensorboard.sh ')
    # Pasted into bash, the command names the job-dir as one argument, as it is.
    proc = subprocess.run(['bash', '-c', 'words() { printf "%s\\n" "$#" "$3"; }; words '
                           + command], capture_output=True, text=True, check=True)
    assert proc.stdout.splitlines() == ['3', str(job_dir)]


def test_json_export_serves_by_default(taxi, tmp_path):
    """serving_default through saved_model_cli, and a TF Serving request body."""
    job_dir, _ = taxi
    export_dir = str(job_dir / 'export' / os.listdir(job_dir / 'export')[0])
    instances = [{c: _typed(c, text) for c, text in zip(schema.COLUMNS, row)
                  if c in schema.FEATURES} for row in taxi_trips.layout_rows(50, seed=5)]
    instance = next(i for i in instances if None not in i.values())  # saved_model_cli: no nulls
    exprs = ';'.join('%s=[%r]' % (c, v) for c, v in instance.items())
    shown = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), 'saved_model_cli'), 'run', '--dir',
         export_dir, '--tag_set', 'serve', '--signature_def', 'serving_default',
         '--input_exprs', exprs], capture_output=True, text=True, env=cli_env(), check=True)
    assert 'probabilities' in shown.stdout and 'class_ids' in shown.stdout

    request = tmp_path / 'request.json'
    request.write_text(json.dumps({'instances': [instance, instance, instances[0]]}))
    proc = run_module('taxi_estimator.predict', '--model-dir', str(job_dir / 'export'),
                      '--json-instances', str(request), check=0)
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(lines) == 3 and lines[0] == lines[1]
    assert lines[0]['class'] in (0, 1) and abs(sum(lines[0]['probabilities']) - 1) < 1e-4


def test_request_body_errors_name_the_file(taxi, tmp_path):
    job_dir, _ = taxi
    request = tmp_path / 'request.json'
    request.write_text(json.dumps({'instances': [{'fare': 3.0}]}))
    proc = run_module('taxi_estimator.predict', '--model-dir', str(job_dir / 'export'),
                      '--json-instances', str(request), check=2)
    assert proc.stderr.startswith('error: --json-instances %s instance 0: instance lacks'
                                  % request)
    assert 'Traceback' not in proc.stderr


def _typed(column, text):
    value = schema.parse_value(column, text)
    return None if value != value or value == schema.missing_value(column) else value


def _free_port():
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


@pytest.mark.slow
def test_tensorboard_script_serves_the_job_dir_on_localhost(taxi):
    """`bash scripts/tensorboard.sh JOB_DIR`: TensorBoard's HTTP API on loopback."""
    job_dir, _ = taxi
    port = _free_port()
    server = subprocess.Popen(
        ['bash', os.path.join(REPO_ROOT, 'scripts', 'tensorboard.sh'), str(job_dir),
         '--port', str(port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env=cli_env(), start_new_session=True)
    try:
        base = 'http://localhost:%d' % port
        runs = _get_json(base + '/data/runs', server)
        assert set(runs) == {'.', 'eval'}
        tags = _get_json(base + '/data/plugin/scalars/tags', server)
        assert {'accuracy', 'auc', 'loss'} <= set(tags['.']) & set(tags['eval'])
        experiment = _post_json(base + '/data/plugin/hparams/experiment',
                                {'experimentName': ''})
        metrics = {(m['name'].get('group', ''), m['name']['tag'])
                   for m in experiment['metricInfos']}
        # The evaluation's metrics, and nothing of the training batches.
        assert {('', 'accuracy'), ('', 'auc'), ('', 'loss')} <= metrics, metrics
        assert not {tag for _, tag in metrics} & {'examples_per_sec', 'learning_rate/dnn_adam'}
        hparams = _post_json(base + '/data/plugin/hparams/session_groups', {
            'experimentName': '', 'allowedStatuses': ['STATUS_SUCCESS'],
            'colParams': [{'hparam': 'num_epochs'}, {'metric': {'tag': 'auc', 'group': ''}}],
            'startIndex': 0, 'sliceSize': 10})
        group = hparams['sessionGroups'][0]
        assert group['hparams']['num_epochs'] == 10
        (auc,) = [m['value'] for m in group['metricValues'] if m['name']['tag'] == 'auc']
        final = [e.value for e in _run(job_dir, 'eval').Scalars('auc')][-1]
        assert auc == pytest.approx(final, rel=1e-6)
    finally:
        os.killpg(server.pid, 15)
        output = server.communicate(timeout=30)[0]
    assert 'http://localhost:%d/' % port in output


def _get_json(url, server, timeout=120):
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                return json.load(response)
        except OSError:
            assert server.poll() is None, server.communicate()[0]
            if time.monotonic() > deadline:
                raise
            time.sleep(1)


def _post_json(url, body):
    request = urllib.request.Request(url, data=json.dumps(body).encode(),
                                     headers={'Content-Type': 'application/json'})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)
