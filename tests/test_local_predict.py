"""`ai-platform.sh local predict` on the exports users have: the three trainers'
(taxi in its three serving formats, CIFAR-10's ResNet, the Keras MNIST CNN) and a
user package's (the course package, trained with `local train`), each trained a few
steps on generated data. What it prints is what the export's signature gives when
loaded in TensorFlow directly; the instance formats are the ones
docs/migrating-from-ai-platform.md gives per trainer, and the docs' own lines
and instances run here.

Where Google's `gcloud` is on PATH, the taxi JSON, CIFAR-10 and Keras exports
are trained by `gcloud ai-platform local train` in one process (its TF_CONFIG
names no cluster), which must end as a run of its own does
(tests/gcloud_local.py; tests/test_gcloud_local.py runs the clusters).
"""
import base64
import csv
import io
import json
import os

import numpy as np
import pytest
import tensorflow as tf

import doc_examples
import gcloud_local
import mnist_archive
import processes
import taxi_trips
from conftest import cli_env, REPO_ROOT, run_module
from estimator_trainers.errors import UserInputError
from estimator_trainers.tools.cloud import ai_platform
from estimator_trainers.tools.cloud import instances as instances_lib
from taxi_estimator import predict as taxi_predict
from taxi_estimator import schema

pytestmark = pytest.mark.slow
SCRIPT = os.path.join(REPO_ROOT, 'scripts', 'ai-platform.sh')
PACKAGES = os.path.join(REPO_ROOT, 'tests', 'packages')


def _local_predict(*words):
    """`local predict WORDS` through the front, in this process; its stdout."""
    out, err = io.StringIO(), io.StringIO()
    assert ai_platform.main(['local', 'predict', *words], out=out, err=err) == 0, err.getvalue()
    return out.getvalue()


def _predictions(*words):
    return json.loads(_local_predict(*words, '--format', 'json'))['predictions']


def _write_lines(path, lines):
    path.write_text(''.join(line + '\n' for line in lines))
    return str(path)


def _direct(export_dir, signature='serving_default', **tensors):
    """The signature's outputs, loaded and called in TensorFlow directly."""
    function = tf.saved_model.load(export_dir).signatures[signature]
    return {name: value.numpy() for name, value in function(**tensors).items()}


def _assert_same(predictions, outputs):
    """Row-format predictions == the direct outputs, row by row, output by output."""
    count = len(next(iter(outputs.values())))
    assert len(predictions) == count
    for i, prediction in enumerate(predictions):
        assert sorted(prediction) == sorted(outputs)
        for name, values in outputs.items():
            expected = values[i]
            if expected.dtype == object:  # strings: text in the predictions
                assert prediction[name] == np.char.decode(expected.astype(bytes)).tolist()
            else:
                np.testing.assert_allclose(np.array(prediction[name]), expected, rtol=1e-6,
                                           atol=1e-7)


# --------------------------------------------------------------------- taxi


@pytest.fixture(scope='module')
def gcloud(tmp_path_factory):
    """Google's gcloud, offline (tests/gcloud_local.py), or None where it is absent."""
    return gcloud_local.Gcloud(tmp_path_factory.mktemp('gcloud')) if gcloud_local.GCLOUD \
        else None


@pytest.fixture(scope='module')
def taxi(tmp_path_factory, gcloud):
    """A taxi job-dir with a JSON, a CSV and an EXAMPLE export, and eval rows."""
    folder = tmp_path_factory.mktemp('taxi_predict')
    train, evals = taxi_trips.write_layout_files(folder, train_rows=300, eval_rows=20)
    job_dir = str(folder / 'job')
    for fmt in ('JSON', 'CSV', 'EXAMPLE'):
        gcloud_local.train_one_process(
            gcloud if fmt == 'JSON' else None, 'taxi_estimator.task', job_dir,
            ['--train-files', train, '--eval-files', evals, '--train-steps', '20',
             '--batch-size', '64', '--eval-frequency-secs', '0', '--serving-export-format',
             fmt])
    with open(evals, newline='') as f:
        rows = list(csv.DictReader(f))[:8]
    return dict(zip(('JSON', 'CSV', 'EXAMPLE'), taxi_trips.exports(job_dir)), rows=rows,
                folder=folder)


def _features(row):
    return {c: schema.parse_value(c, row[c]) for c in schema.FEATURES}


def test_taxi_json_export_takes_feature_objects(taxi):
    instances = [_features(row) for row in taxi['rows']]
    path = _write_lines(taxi['folder'] / 'features.json', map(json.dumps, instances))
    dtypes = {'float': tf.float32, 'int': tf.int64, 'string': tf.string}
    tensors = {c: tf.constant([i[c] for i in instances], dtypes[schema.kind(c)])
               for c in schema.FEATURES}
    _assert_same(_predictions('--model-dir', taxi['JSON'], '--json-instances', path),
                 _direct(taxi['JSON'], **tensors))


def test_taxi_csv_export_takes_text_lines(taxi):
    lines = []
    for row in taxi['rows']:
        line = io.StringIO()
        csv.writer(line, lineterminator='').writerow([row[c] for c in schema.FEATURES])
        lines.append(line.getvalue())
    path = _write_lines(taxi['folder'] / 'rows.txt', lines)
    expected = _direct(taxi['CSV'], csv_row=tf.constant(lines))
    _assert_same(_predictions('--model-dir', taxi['CSV'], '--text-instances', path), expected)
    # The same rows as JSON instances {"csv_row": ...}: the same predictions.
    path = _write_lines(taxi['folder'] / 'rows.json',
                        [json.dumps({'csv_row': line}) for line in lines])
    _assert_same(_predictions('--model-dir', taxi['CSV'], '--json-instances', path), expected)


def test_taxi_example_export_takes_base64_examples(taxi):
    serialized = []
    for row in taxi['rows']:
        feature = {}
        for column, value in _features(row).items():
            if value == schema.missing_value(column) or value != value:
                continue
            kind = schema.kind(column)
            feature[column] = (
                tf.train.Feature(float_list=tf.train.FloatList(value=[value])) if kind == 'float'
                else tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))
                if kind == 'int' else
                tf.train.Feature(bytes_list=tf.train.BytesList(value=[value.encode()])))
        serialized.append(tf.train.Example(features=tf.train.Features(
            feature=feature)).SerializeToString())
    path = _write_lines(taxi['folder'] / 'examples.json', [
        json.dumps({'examples': {'b64': base64.b64encode(s).decode()}}) for s in serialized])
    _assert_same(_predictions('--model-dir', taxi['EXAMPLE'], '--json-instances', path),
                 _direct(taxi['EXAMPLE'], examples=tf.constant(serialized)))


def test_the_taxi_predict_command_agrees(taxi):
    """The taxi trainer's own CSV front and local predict: one model, one answer."""
    proc = run_module('taxi_estimator.predict', '--model-dir', taxi['JSON'],
                      '--csv-instances', _write_csv(taxi), check=0)
    friendly = [json.loads(line) for line in proc.stdout.splitlines()]
    instances = [_features(row) for row in taxi['rows']]
    path = _write_lines(taxi['folder'] / 'features2.json', map(json.dumps, instances))
    generic = _predictions('--model-dir', taxi['JSON'], '--json-instances', path)
    assert [f['class'] for f in friendly] == [g['class_ids'][0] for g in generic]
    for f, g in zip(friendly, generic):
        assert f['probabilities'] == pytest.approx(g['probabilities'], abs=1e-6)


def test_the_docs_predict_lines(taxi, capsys):
    """The docs' `local predict` and `python -m taxi_estimator.predict` lines, as written,
    with their instances (the docs' own) and placeholders set to the JSON export of a
    small taxi model, and their CSV line to the eval rows."""
    model_dir = taxi['folder'] / 'docs_model'
    (model_dir / 'export').mkdir(parents=True)
    os.symlink(taxi['JSON'], model_dir / 'export' / os.path.basename(taxi['JSON']))
    found = {doc: instance for doc, _, instance in doc_examples.instances()}
    instances = {'instances.json': found['docs/migrating-from-ai-platform.md'],
                 'instances.ndjson': found['docs/taxi.md']}
    instances['FILE'] = instances['instances.json']
    for name, instance in instances.items():
        _write_lines(taxi['folder'] / name, [json.dumps(instance)])
    words_as = {name: str(taxi['folder'] / name) for name in instances}
    words_as.update({'EXPORT': taxi['JSON'], '/tmp/taxi/export/<timestamp>': taxi['JSON'],
                     '<job-dir>/export/<timestamp>': taxi['JSON'],
                     '<job-dir>/export': str(model_dir / 'export'),
                     '$MODEL_DIR/export': str(model_dir / 'export'),
                     'data/taxi/taxi_trips_eval.csv': _write_csv(taxi)})
    lines = [c for c in doc_examples.commands()
             if c.text.startswith(('bash scripts/ai-platform.sh local predict --model-dir',
                                   'python -m taxi_estimator.predict'))]
    assert len(lines) == 5, lines
    for command in lines:
        words = [words_as.get(word, word) for word in command.words]
        capsys.readouterr()
        if words[:2] == ['bash', 'scripts/ai-platform.sh']:
            printed = _local_predict(*words[4:])
            assert printed.splitlines()[0].split()[:2] == ['ALL_CLASS_IDS', 'ALL_CLASSES'], \
                command
        else:
            assert taxi_predict.main(words[3:]) == 0, command
            printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
            assert printed and all(p['class'] in (0, 1) for p in printed), command


def _write_csv(taxi):
    path = taxi['folder'] / 'rows.csv'
    with open(path, 'w', newline='') as f:
        writer = csv.DictWriter(f, fieldnames=schema.FEATURES, extrasaction='ignore')
        writer.writeheader()
        writer.writerows(taxi['rows'])
    return str(path)


# ---------------------------------------------------------- image trainers


def test_cifar10_export_takes_raw_pixel_lists(cifar10_data_dir, gcloud, tmp_path):
    job_dir = tmp_path / 'job'
    gcloud_local.train_one_process(
        gcloud, 'cifar10_estimator.cifar10_main', job_dir,
        ['--data-dir', cifar10_data_dir, '--num-layers', '8', '--train-steps', '2',
         '--train-batch-size', '10', '--eval-batch-size', '50'])
    (export,) = taxi_trips.exports(str(job_dir))
    from cifar10_estimator import data as cifar10_data  # pylint: disable=import-outside-toplevel
    features, _ = next(iter(cifar10_data.make_dataset(cifar10_data_dir, 'eval', 5)))
    images = tf.cast(features['images'], tf.uint8).numpy()
    # Bare pixel lists and {"images": ...} objects alike (one input).
    lines = [json.dumps(image.tolist()) if i % 2 else json.dumps({'images': image.tolist()})
             for i, image in enumerate(images)]
    path = _write_lines(tmp_path / 'images.json', lines)
    predictions = _predictions('--model-dir', str(job_dir / 'export'), '--json-instances', path)
    _assert_same(predictions, _direct(export, images=tf.constant(images)))
    table = _local_predict('--model-dir', export, '--json-instances', path)
    assert table == instances_lib.render({'predictions': predictions})
    assert table.splitlines()[0].split() == sorted(k.upper() for k in predictions[0])


def test_keras_mnist_export_takes_raw_pixel_lists(gcloud, tmp_path):
    source = str(tmp_path / 'mnist.npz')
    sha256 = mnist_archive.write_npz(source, train=64, test=8)
    data_dir = tmp_path / 'data'
    run_module('keras_estimator.data', '--data-dir', data_dir, '--source', source, '--sha256',
               sha256, check=0)
    job_dir = tmp_path / 'job'
    gcloud_local.train_one_process(gcloud, 'keras_estimator.trainer', job_dir,
                                   ['--data-dir', data_dir, '--train-steps', '2',
                                    '--batch-size', '32'])
    (export,) = taxi_trips.exports(str(job_dir))
    with np.load(source) as npz:
        images = npz['x_test']
    path = _write_lines(tmp_path / 'digits.json', [json.dumps(i.tolist()) for i in images])
    _assert_same(_predictions('--model-dir', export, '--json-instances', path),
                 _direct(export, images=tf.constant(images, tf.uint8)))


# ------------------------------------------------------- a user's package


@pytest.fixture(scope='module')
def course_export(tmp_path_factory):
    """The course package (canned DNNClassifier, a tf.Example parsing export),
    trained by `local train` as gcloud ran it."""
    job_dir = str(tmp_path_factory.mktemp('course') / 'job')
    proc = processes.run(['bash', SCRIPT, 'local', 'train', '--package-path', 'trainer',
                          '--module-name', 'trainer.task', '--job-dir', job_dir, '--',
                          '--train-steps', '20'], 600, cwd=os.path.join(PACKAGES, 'course'),
                         env=cli_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    return os.path.join(job_dir, 'export', 'exporter')


def _course_examples(count):
    rng = np.random.RandomState(3)
    return [tf.train.Example(features=tf.train.Features(feature={
        name: tf.train.Feature(float_list=tf.train.FloatList(value=[float(v)]))
        for name, v in zip(('x0', 'x1'), rng.uniform(0, 1, 2))})).SerializeToString()
        for _ in range(count)]


def test_a_user_packages_export_through_the_script(course_export, tmp_path):
    """Its default (classification) signature takes {"b64": ...} serialized
    tf.Examples; --signature-name predict takes {"examples": {"b64": ...}}."""
    serialized = _course_examples(4)
    export = os.path.join(course_export, max(os.listdir(course_export)))  # the newest
    path = _write_lines(tmp_path / 'examples.json', [
        json.dumps({'b64': base64.b64encode(s).decode()}) for s in serialized])
    proc = processes.run(['bash', SCRIPT, 'local', 'predict', '--model-dir', course_export,
                          '--json-instances', path, '--format', 'json'], 300, cwd=REPO_ROOT,
                         env=cli_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    # The predictions and nothing else: no TensorFlow start-up line, no warning (#48).
    assert proc.stderr == ''
    expected = _direct(export, inputs=tf.constant(serialized))
    _assert_same(json.loads(proc.stdout)['predictions'], expected)

    path = _write_lines(tmp_path / 'predict.json', [
        json.dumps({'examples': {'b64': base64.b64encode(s).decode()}}) for s in serialized])
    _assert_same(_predictions('--model-dir', export, '--json-instances', path,
                              '--signature-name', 'predict'),
                 _direct(export, 'predict', examples=tf.constant(serialized)))
    with pytest.raises(UserInputError) as raised:
        _local_predict('--model-dir', export, '--json-instances', path, '--signature-name',
                       'serve')
    assert str(raised.value) == (
        '--signature-name serve: --model-dir %s has no such signature (it has: '
        'classification, predict, regression, serving_default)' % export)
