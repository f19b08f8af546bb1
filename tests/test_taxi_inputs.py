"""Bad input to the taxi CLIs: one `error:` line naming file/line/column, exit 2,
and the job-dir left as it was."""
import argparse
import glob
import json
import os
import re
import shutil
import sys

import numpy as np
import pytest

import taxi_trips
import processes
from conftest import cli_env, REPO_ROOT, run_module
from estimator_trainers import errors
from estimator_trainers import flags
from estimator_trainers.errors import UserInputError
from taxi_estimator import features
from taxi_estimator import input as input_lib
from taxi_estimator import schema
from taxi_estimator import trainer as taxi_trainer

HEADER = schema.HEADER_LINE


def _lines(path):
    with open(path) as f:
        return f.read().splitlines()


def _write(path, lines):
    with open(path, 'w') as f:
        f.write(''.join(line + '\n' for line in lines))
    return str(path)


def _set_field(line, column, value):
    fields = line.split(',')
    fields[schema.COLUMNS.index(column)] = value
    return ','.join(fields)


def _error_line(proc):
    lines = proc.stderr.strip().splitlines()
    assert 'Traceback' not in proc.stderr, proc.stderr[-3000:]
    assert [l for l in lines if l.startswith('error:')] == lines[-1:], proc.stderr[-3000:]
    return lines[-1]


@pytest.fixture(scope='module')
def good_lines(tmp_path_factory):
    """A valid CSV's lines, without quoted fields (so they split on commas)."""
    rows = [r for r in taxi_trips.layout_rows(40, seed=4) if not set(',"') & set(r[-1])]
    return [HEADER] + [','.join(r) for r in rows[:20]]


# (name, which flag gets the bad file, bad file lines from good ones, expected message
# after "error: --<flag> <path>").
CASES = [
    ('missing column', 'train', lambda g: [l.rsplit(',', 1)[0] for l in g],
     ' line 1: missing column company; expected the header ' + HEADER),
    ('extra column', 'train', lambda g: [g[0] + ',driver'] + [l + ',x' for l in g[1:]],
     " line 1: unexpected column 'driver'; expected the header " + HEADER),
    ('renamed column', 'eval', lambda g: [g[0].replace(',fare,', ',fare_usd,')] + g[1:],
     " line 1: missing column fare; unexpected column 'fare_usd'; expected the header "
     + HEADER),
    ('no header', 'train', lambda g: g[1:],
     ' line 1: no header line; expected the header ' + HEADER),
    ('non-numeric number', 'train',
     lambda g: g[:3] + [_set_field(g[3], 'fare', 'twelve')] + g[4:],
     " line 4, column fare: 'twelve' is not a number"),
    ('too few fields', 'eval', lambda g: g[:2] + [g[2].rsplit(',', 1)[0]] + g[3:],
     ' line 3: 16 fields; expected 17 (%s)' % HEADER),
    ('hour out of range', 'train', lambda g: g[:1] + [_set_field(g[1], 'trip_start_hour', '24')] + g[2:],
     " line 2, column trip_start_hour: '24' is out of range [0, 23]"),
    ('bad label', 'eval', lambda g: g[:5] + [_set_field(g[5], 'tip', 'yes')] + g[6:],
     " line 6, column tip: 'yes' is not a label (expected 0 or 1)"),
    ('unquoted quote', 'train', lambda g: g[:2] + [g[2] + ' "Cab"'] + g[3:],
     ' line 3: malformed CSV quoting; a field with a comma or a double quote must be '
     'enclosed in double quotes, with inner quotes doubled, and rows cannot span lines'),
    ('empty file', 'eval', lambda g: [],
     ' is empty; expected the header line %s and data rows' % HEADER),
    ('header only', 'train', lambda g: g[:1], ' has a header but no data rows'),
    ('absurd fare', 'train', lambda g: g[:3] + [_set_field(g[3], 'fare', '1e308')] + g[4:],
     " line 4, column fare: '1e308' is out of range [0, 1e+09]"),
    ('negative trip seconds', 'eval',
     lambda g: g[:2] + [_set_field(g[2], 'trip_seconds', '-5')] + g[3:],
     " line 3, column trip_seconds: '-5' is out of range [0, 1e+09]"),
    ('latitude off the globe', 'train',
     lambda g: g[:7] + [_set_field(g[7], 'pickup_latitude', '4188')] + g[8:],
     " line 8, column pickup_latitude: '4188' is out of range [-90, 90]"),
]


@pytest.mark.parametrize('name, flag, mutate, expected', CASES, ids=[c[0] for c in CASES])
def test_bad_csv_is_one_error_naming_flag_file_line_and_column(tmp_path, good_lines, name,
                                                               flag, mutate, expected):
    """Each case's words, from the check the trainer runs on its files (in process:
    the CLI cases below show the same check prints its line and changes nothing)."""
    del name
    bad = _write(tmp_path / 'bad.csv', mutate(good_lines))
    with pytest.raises(UserInputError) as raised:
        input_lib.scan([bad], '--%s-files' % flag)
    assert errors.line(raised.value) == 'error: --%s-files %s%s' % (flag, bad, expected)


CLI_CASES = [case for case in CASES
             if case[0] in ('missing column', 'too few fields', 'empty file')]


@pytest.mark.parametrize('name, flag, mutate, expected', CLI_CASES,
                         ids=[c[0] for c in CLI_CASES])
def test_bad_csv_is_one_error_line_and_leaves_the_job_dir(tmp_path, good_lines, name,
                                                          flag, mutate, expected):
    del name
    good = _write(tmp_path / 'good.csv', good_lines)
    bad = _write(tmp_path / 'bad.csv', mutate(good_lines))
    job_dir = tmp_path / 'job'
    job_dir.mkdir()
    (job_dir / 'notes.txt').write_text('kept')
    paths = {'train': good, 'eval': good, flag: bad}
    proc = run_module('taxi_estimator.task', '--train-files', paths['train'],
                      '--eval-files', paths['eval'], '--job-dir', job_dir,
                      '--train-steps', '10', check=2)
    assert _error_line(proc) == 'error: --%s-files %s%s' % (flag, bad, expected)
    assert os.listdir(job_dir) == ['notes.txt']


def test_misspelled_tuning_metric_is_refused_before_training(tmp_path, good_lines):
    """The metric is met after training and the export: it is checked against the
    trainer's declared metrics first (it trained, exported, then ended in a traceback)."""
    good = _write(tmp_path / 'good.csv', good_lines)
    job_dir = tmp_path / 'job'
    job_dir.mkdir()
    proc = run_module('taxi_estimator.task', '--train-files', good, '--eval-files', good,
                      '--job-dir', job_dir, '--train-steps', '10',
                      '--hypertune-metric', 'acuracy', check=2)
    assert _error_line(proc) == (
        "error: argument --hypertune-metric: 'acuracy' is not a metric the taxi trainer "
        'evaluates (expected one of: accuracy, accuracy_baseline, auc, '
        'auc_precision_recall, average_loss, label/mean, loss, precision, prediction/mean, '
        'recall) (see --help)')
    assert os.listdir(job_dir) == []
    for tag in ('auc', 'eval/auc', 'label/mean'):  # TensorBoard's spelling too
        assert taxi_trainer.TRAINER.parse_args(['--train-files=t', '--eval-files=e', '--job-dir=j',
                                '--hypertune-metric', tag]).hypertune_metric == tag
    for tag in ('eval/', 'global_step', 'eval/eval/auc'):
        with pytest.raises(errors.FlagError, match='is not a metric the taxi trainer'):
            taxi_trainer.TRAINER.parse_args(['--train-files=t', '--eval-files=e', '--job-dir=j',
                             '--hypertune-metric', tag])


def test_eval_files_matching_nothing(tmp_path, good_lines):
    good = _write(tmp_path / 'good.csv', good_lines)
    pattern = str(tmp_path / 'eval-*.csv')
    proc = run_module('taxi_estimator.task', '--train-files', good, '--eval-files', good,
                      pattern, '--job-dir', tmp_path / 'job', check=2)
    assert _error_line(proc) == 'error: --eval-files %s: no file matches this path' % pattern
    assert not (tmp_path / 'job').exists()


@pytest.mark.parametrize('flags, expected', [
    (['--dropout-prob', '1.5'],
     "error: argument --dropout-prob: expected a number in [0, 1), got '1.5' (see --help)"),
    (['--serving-export-format', 'xml'], 'error: argument --serving-export-format: '
     "invalid choice: 'XML' (choose from 'JSON', 'CSV', 'EXAMPLE') (see --help)"),
    (['--num-layers', '3'], 'error: --num-layers=3 needs --layer-sizes-scale-factor > 0; '
     'without it --hidden-units gives every layer size'),
    (['--learning-rate', '1e400'],
     "error: argument --learning-rate: expected a finite number, got '1e400' (see --help)"),
    (['--train-steps', '9223372036854775808'],
     'error: argument --train-steps: expected an integer of at most 9223372036854775807 '
     "(int64), got '9223372036854775808' (see --help)"),
    (['--hidden-units', '64,9223372036854775808'],
     'error: argument --hidden-units: expected comma-separated integers >= 0 like '
     "128,64, got '64,9223372036854775808' (see --help)"),
    (['--hidden-units', '32,,16'],
     'error: argument --hidden-units: expected comma-separated integers >= 0 like '
     "128,64, got '32,,16' (an empty item) (see --help)"),
    (['--job-dir', ''],
     "error: argument --job-dir: expected a path, got '' (an unset variable?) (see --help)"),
    (['--feature-stats', ' '],
     "error: argument --feature-stats: expected a path, got ' ' (an unset variable?) "
     '(see --help)'),
])
def test_bad_flags(tmp_path, good_lines, flags, expected):
    good = _write(tmp_path / 'good.csv', good_lines)
    proc = run_module('taxi_estimator.task', '--train-files', good, '--eval-files', good,
                      '--job-dir', tmp_path / 'job', *flags, check=2)
    assert _error_line(proc) == expected
    assert not (tmp_path / 'job').exists()


def _instances(good_lines):
    header = good_lines[0].split(',')
    return [{c: v for c, v in zip(header, line.split(',')) if c != schema.LABEL}
            for line in good_lines[1:4]]


@pytest.mark.parametrize('name, edit, expected', [
    ('lacks a feature', lambda i: i.pop('company'),
     'line 2: instance lacks feature company (give every feature; null or an empty '
     'field marks a missing value)'),
    ('bad number', lambda i: i.update(fare='twelve'), "line 2, feature fare: 'twelve' is "
     'not a number'),
    ('unknown feature', lambda i: i.update(fare_usd=3), "line 2: unknown feature 'fare_usd'"),
])
def test_bad_json_instance(tmp_path, good_lines, name, edit, expected):
    del name
    instances = _instances(good_lines)
    edit(instances[1])
    path = _write(tmp_path / 'instances.ndjson', [json.dumps(i) for i in instances])
    proc = run_module('taxi_estimator.predict', '--model-dir', tmp_path,
                      '--json-instances', path, check=2)
    line = _error_line(proc)
    assert line.startswith('error: --json-instances %s %s' % (path, expected)), line


def test_bad_csv_instances_and_model_dir(tmp_path, good_lines):
    path = _write(tmp_path / 'instances.csv',
                  [re.sub(',company$', '', good_lines[0])] + good_lines[1:3])
    proc = run_module('taxi_estimator.predict', '--model-dir', tmp_path,
                      '--csv-instances', path, check=2)
    assert _error_line(proc).startswith(
        'error: --csv-instances %s line 1: missing column company; expected a header line '
        'naming the features' % path)

    path = _write(tmp_path / 'instances.csv', good_lines[:3])
    proc = run_module('taxi_estimator.predict', '--model-dir', tmp_path / 'nothing',
                      '--csv-instances', path, check=2)
    assert _error_line(proc) == (
        'error: --model-dir %s: no SavedModel there (expected <job-dir>/export/<timestamp> '
        'or <job-dir>/export)' % (tmp_path / 'nothing'))


def test_bad_instances_are_refused_before_tensorflow_loads(tmp_path, good_lines):
    """Reading the instances needs no TensorFlow, so a bad file is refused at once."""
    path = _write(tmp_path / 'instances.csv', good_lines[:1] + ['1,2'])
    probe = ('import sys\nfrom estimator_trainers import errors\n'
             'from taxi_estimator import predict\ntry:\n'
             '    predict.main(["--model-dir", "unused", "--csv-instances", %r])\n'
             'except errors.UserInputError as e:\n'
             '    print("tensorflow" in sys.modules, e)\n' % str(path))
    proc = processes.run([sys.executable, '-c', probe], 300, cwd=REPO_ROOT, env=cli_env())
    assert proc.stdout.startswith('False --csv-instances %s line 2: ' % path), (
        proc.stdout, proc.stderr[-3000:])


def _stats(**overrides):
    stats = {c: {'mean': 1.0, 'std': 2.0} for c in schema.FLOAT_FEATURES}
    stats.update(overrides)
    return stats


def test_statistics_that_are_not_finite_are_never_recorded(tmp_path):
    for bad in ({'mean': 1.0, 'std': float('inf')}, {'mean': float('nan'), 'std': 1.0}):
        with pytest.raises(UserInputError, match="feature 'fare' needs"):
            features.record_stats(str(tmp_path), _stats(fare=bad))
    assert os.listdir(tmp_path) == []


def test_feature_stats_are_checked_used_and_recorded(tmp_path, good_lines):
    good = _write(tmp_path / 'good.csv', good_lines)
    common = ['--train-files', good, '--eval-files', good, '--train-steps', '1', '--batch-size', '16']
    bad = tmp_path / 'bad_stats.json'
    bad.write_text(json.dumps(_stats(fare={'mean': 1.0, 'std': 0})))
    proc = run_module('taxi_estimator.task', *common, '--job-dir', tmp_path / 'job',
                      '--feature-stats', bad, check=2)
    assert _error_line(proc) == ('error: --feature-stats %s: feature \'fare\' needs '
                                 '{"mean": number, "std": number > 0}' % bad)
    assert not (tmp_path / 'job').exists()

    supplied = tmp_path / 'stats.json'
    supplied.write_text(json.dumps(_stats(fare={'mean': 12.5, 'std': 9.5})))
    proc = run_module('taxi_estimator.task', *common, '--job-dir', tmp_path / 'job',
                      '--feature-stats', supplied, '--verbosity', 'debug', check=0)
    assert 'Using the normalisation statistics from %s' % supplied in proc.stderr
    assert 'Normalisation of fare: mean 12.5, std 9.5' in proc.stderr
    recorded = tmp_path / 'job' / 'feature_stats.json'
    assert json.loads(recorded.read_text()) == json.loads(supplied.read_text())

    other = tmp_path / 'other.json'
    other.write_text(json.dumps(_stats()))
    proc = run_module('taxi_estimator.task', *common, '--job-dir', tmp_path / 'job',
                      '--feature-stats', other, check=2)
    assert _error_line(proc) == (
        'error: --feature-stats %s differs from %s, which the checkpoints in --job-dir '
        'were trained with; use a new --job-dir or drop --feature-stats' % (other, recorded))


def _predict(model_dir, tmp_path, good_lines):
    path = _write(tmp_path / 'instances.ndjson', [json.dumps(i) for i in _instances(good_lines)])
    return run_module('taxi_estimator.predict', '--model-dir', model_dir,
                      '--json-instances', path, check=2)


def test_predict_on_a_bogus_saved_model_is_one_line(tmp_path, good_lines):
    export = tmp_path / 'export' / '123'
    export.mkdir(parents=True)
    (export / 'saved_model.pb').write_bytes(b'not a protocol buffer')
    assert _error_line(_predict(tmp_path / 'export', tmp_path, good_lines)) == (
        "error: --model-dir %s: not a loadable SavedModel (Cannot parse file b'%s': Error "
        'parsing message.)' % (export, export / 'saved_model.pb'))


def _other_saved_model(parent):
    """parent/1: a SavedModel with a variable whose serving_default gives `scores`, as
    another model's export would (training one to get it cost the suite 20 s)."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    module = tf.Module()
    module.scale = tf.Variable(2.0)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
    def serve(x):
        return {'scores': x * module.scale}

    export = os.path.join(str(parent), '1')
    tf.saved_model.save(module, export, signatures={'serving_default': serve})
    return export


def test_predict_on_an_export_without_variables_is_one_line(tmp_path, good_lines):
    export = _other_saved_model(tmp_path / 'export')
    shutil.rmtree(os.path.join(export, 'variables'))
    assert _error_line(_predict(export, tmp_path, good_lines)) == (
        'error: --model-dir %s: the export lacks its variables (%s); copy the whole '
        'export directory' % (export, os.path.join(export, 'variables', 'variables.index')))


def test_predict_on_another_models_export_is_one_line(tmp_path, good_lines):
    export = _other_saved_model(tmp_path / 'export')
    assert _error_line(_predict(tmp_path / 'export', tmp_path, good_lines)) == (
        'error: --model-dir %s: not a taxi model export (its serving_default signature '
        'lacks class_ids and probabilities; signatures: serving_default)' % export)


def test_planted_temp_symlinks_in_the_job_dir_are_not_followed(tmp_path, good_lines):
    good = _write(tmp_path / 'good.csv', good_lines)
    job_dir = tmp_path / 'job'
    job_dir.mkdir()
    victim = tmp_path / 'victim'
    victim.write_text('precious')
    planted = ['model_params.json.tmp', 'feature_stats.json.tmp']
    for name in planted:
        os.symlink(victim, job_dir / name)
    run_module('taxi_estimator.task', '--train-files', good, '--eval-files', good,
               '--job-dir', job_dir, '--train-steps', '1', '--batch-size', '16', check=0)
    assert victim.read_text() == 'precious'
    for name in planted:
        assert os.readlink(job_dir / name) == str(victim)
    assert json.loads((job_dir / 'model_params.json').read_text())['hidden-units']
    assert not [n for n in os.listdir(job_dir) if n.startswith('.')]


def test_directories_where_files_are_expected_are_one_line(tmp_path, good_lines):
    good = _write(tmp_path / 'good.csv', good_lines)
    proc = run_module('taxi_estimator.task', '--train-files', good, '--eval-files', good,
                      '--job-dir', tmp_path / 'job', '--feature-stats', tmp_path, check=2)
    assert _error_line(proc) == 'error: --feature-stats %s is a directory; expected a file' % tmp_path
    assert not (tmp_path / 'job').exists()
    proc = run_module('taxi_estimator.predict', '--model-dir', tmp_path,
                      '--csv-instances', tmp_path, check=2)
    assert _error_line(proc) == 'error: --csv-instances %s is a directory; expected a file' % tmp_path


def test_byte_order_mark_of_spreadsheet_csvs_is_accepted(tmp_path, good_lines):
    path = tmp_path / 'bom.csv'
    path.write_bytes(b'\xef\xbb\xbf' + ''.join(l + '\n' for l in good_lines).encode())
    summary = input_lib.scan([str(path)], '--train-files')
    assert summary.rows == len(good_lines) - 1
    # TensorFlow's reader skips the header line, mark and all: the same rows.
    batches = input_lib.make_input_fn(summary.files, 100, training=False)()
    assert sum(int(labels.shape[0]) for _, labels in batches) == summary.rows

    instances = tmp_path / 'instances.csv'
    instances.write_bytes(b'\xef\xbb\xbf' + ''.join(l + '\n' for l in good_lines[:3]).encode())
    proc = run_module('taxi_estimator.predict', '--model-dir', tmp_path / 'nothing',
                      '--csv-instances', instances, check=2)
    assert 'no SavedModel there' in _error_line(proc)  # the instances were read


@pytest.mark.parametrize('text', ['32,,16', '32,16,', ',32', ' ', '32, ,16'])
def test_int_list_flags_refuse_empty_items(text):
    """`--hidden-units 32,,16` was read as 32,16: a typo must not change the model."""
    with pytest.raises(argparse.ArgumentTypeError, match='expected comma-separated'):
        flags.int_list(text)
    assert flags.int_list(' 32, 16') == [32, 16]


def test_the_samples_hidden_units_are_read_as_the_sample_read_them():
    """The AI Platform sample's line: `--hidden-units="128,0,0" --layer-sizes-scale-factor=0.5
    --num-layers=3`: the zeros stand for the sizes the scale factor computes."""
    args = taxi_trainer.TRAINER.parse_args([
        '--train-files', 't.csv', '--eval-files', 'e.csv', '--job-dir', 'j',
        '--hidden-units=128,0,0', '--layer-sizes-scale-factor=0.5', '--num-layers=3'])
    assert taxi_trainer.TRAINER.model_params(args) == {'hidden-units': [128, 64, 32]}
    with pytest.raises(UserInputError, match=r'^--hidden-units 128,0,0: a layer of 0 units'):
        taxi_trainer.layer_sizes([128, 0, 0])
    with pytest.raises(UserInputError, match=r'^--hidden-units 0,64: the first layer'):
        taxi_trainer.layer_sizes([0, 64], 0.5)
    with pytest.raises(argparse.ArgumentTypeError, match='integers >= 0'):
        flags.size_list('128,-1')


def test_empty_aip_model_dir_is_no_job_dir(tmp_path, good_lines):
    """An empty $AIP_MODEL_DIR (an unset variable exported) does not become --job-dir ''."""
    good = _write(tmp_path / 'good.csv', good_lines)
    proc = run_module('taxi_estimator.task', '--train-files', good, '--eval-files', good,
                      env={'AIP_MODEL_DIR': ''}, check=2)
    assert _error_line(proc) == ('error: the following arguments are required: --job-dir '
                                 '(see --help)')


# --- parsers at their limits, line ends and pipes -------------------------------------

def _long_field(lines):
    """Line 2 with a company name beyond Python's csv field limit (131072)."""
    fields = lines[1].split(',')
    fields[schema.COLUMNS.index('company')] = 'x' * 200000
    return [lines[0], ','.join(fields)] + lines[2:]


@pytest.mark.parametrize('flag', ['train', 'eval'])
@pytest.mark.parametrize('case', ['long field', 'CR line ends', 'pipe'])
def test_csv_at_the_parsers_limits_is_one_line(tmp_path, good_lines, flag, case):
    """A field beyond csv's limit was a `_csv.Error` traceback, CR-only line ends were
    'malformed CSV quoting' and a process substitution was 'empty': each is now one
    line that says what is wrong, before the job-dir is touched."""
    good = _write(tmp_path / 'good.csv', good_lines)
    bad = tmp_path / 'bad.csv'
    if case == 'long field':
        _write(bad, _long_field(good_lines))
        expected = ('error: --%s-files %s line 2 is longer than 65536 characters; a row of '
                    'the taxi layout has 17 short fields (is this the right file?)'
                    % (flag, bad))
    elif case == 'CR line ends':
        bad.write_bytes('\r'.join(good_lines).encode() + b'\r')
        expected = ('error: --%s-files %s line 1: lines end in a carriage return alone '
                    '(CR, as old Mac programs wrote them), but TensorFlow\'s CSV reader '
                    'ends lines at line feeds (LF) only; convert the line ends, e.g. with '
                    "tr '\\r' '\\n'" % (flag, bad))
    else:
        bad = '<(cat %s)' % good
        expected = re.compile(
            r'error: --%s-files /dev/fd/\d+ is a pipe, not a regular file \(a process '
            r'substitution <\(\.\.\.\) is a pipe\): training reads its files more than '
            r'once \(this check, then every epoch\) and a pipe gives its rows only once; '
            r'write them to a file and pass that' % flag)
    paths = {'train': good, 'eval': good, flag: str(bad)}
    command = ('exec %s -m taxi_estimator.task --train-files %s --eval-files %s --job-dir '
               '%s --train-steps 10' % (sys.executable, paths['train'], paths['eval'],
                                        tmp_path / 'job'))
    proc = processes.run(['bash', '-c', command], 300, cwd=REPO_ROOT, env=cli_env())
    assert proc.returncode == 2, proc.stderr[-3000:]
    line = _error_line(proc)
    assert (expected.fullmatch(line) if case == 'pipe' else line == expected), line
    assert not (tmp_path / 'job').exists()


def test_crlf_and_a_missing_last_line_break_are_read(tmp_path, good_lines):
    crlf = tmp_path / 'crlf.csv'
    crlf.write_bytes('\r\n'.join(good_lines).encode() + b'\r\n')
    unterminated = tmp_path / 'unterminated.csv'
    unterminated.write_text('\n'.join(good_lines))
    for path in (crlf, unterminated):
        assert input_lib.scan([str(path)], '--train-files').rows == len(good_lines) - 1


@pytest.mark.parametrize('case', ['long field', 'CR line ends', 'pipe', 'deep JSON',
                                  'a million values'])
def test_predict_instances_at_the_parsers_limits(tmp_path, good_lines, case):
    """predict reads CR-only CSV and a process substitution (it reads its input once);
    a field beyond csv's limit and JSON nested too deeply are one line (they were
    `_csv.Error` and `RecursionError` tracebacks); a line of a million values is
    refused before it is parsed (it was parsed whole first)."""
    instances = tmp_path / 'instances.csv'
    flag = '--csv-instances'
    if case == 'long field':
        _write(instances, _long_field(good_lines[:3]))
    elif case == 'CR line ends':
        instances.write_bytes('\r'.join(good_lines[:3]).encode())
    elif case == 'pipe':
        _write(tmp_path / 'rows.csv', good_lines[:3])
        instances = '<(cat %s)' % (tmp_path / 'rows.csv')
    elif case == 'deep JSON':
        flag = '--json-instances'
        instances = tmp_path / 'instances.json'
        instances.write_text('{"instances": ' + '[' * 50000 + ']' * 50000 + '}')
    else:
        flag = '--json-instances'
        instances = tmp_path / 'instances.json'
        instances.write_text('{"fare": [%s]}\n' % ','.join(['0'] * 1000000))
    command = 'exec %s -m taxi_estimator.predict --model-dir %s %s %s' % (
        sys.executable, tmp_path / 'nothing', flag, instances)
    proc = processes.run(['bash', '-c', command], 300, cwd=REPO_ROOT, env=cli_env())
    assert proc.returncode == 2, proc.stderr[-3000:]
    line = _error_line(proc)
    if case == 'long field':
        assert line == ('error: --csv-instances %s line 2: not CSV that Python\'s csv module '
                        'reads (field larger than field limit (131072))' % instances)
    elif case == 'deep JSON':
        assert line == ('error: --json-instances %s line 1: not valid JSON (nested too '
                        'deeply: more levels of [ and { than Python\'s JSON reader allows)'
                        % instances)
    elif case == 'a million values':
        assert line == ('error: --json-instances %s line 1: more than 1000 values; a line '
                        'is one instance, an object of 16 features' % instances)
    else:  # the instances were read: the missing model is what stops it
        assert line == ('error: --model-dir %s: no SavedModel there (expected '
                        '<job-dir>/export/<timestamp> or <job-dir>/export)'
                        % (tmp_path / 'nothing'))


def test_tf_config_nested_too_deeply_is_one_line(tmp_path, good_lines):
    good = _write(tmp_path / 'good.csv', good_lines)
    proc = run_module('taxi_estimator.task', '--train-files', good, '--eval-files', good,
                      '--job-dir', tmp_path / 'job', env={
                          'TF_CONFIG': '{"cluster": ' + '[' * 20000 + ']' * 20000 + '}'},
                      check=2)
    assert _error_line(proc) == ('error: TF_CONFIG: not valid JSON (nested too deeply: '
                                 'more levels of [ and { than Python\'s JSON reader allows)')
    assert not (tmp_path / 'job').exists()


BAD_STATS = {
    'absurd mean': (lambda: json.dumps(_stats(fare={'mean': 1e300, 'std': 12.0})),
                    "feature 'fare' has mean 1e+300, outside the range of its values "
                    "[0, 1e+09]"),
    'tiny std': (lambda: json.dumps(_stats(trip_miles={'mean': 3.0, 'std': 1e-300})),
                 "feature 'trip_miles' has std 1e-300; expected 3e-06 to 1e+09 (a smaller "
                 'one is below the precision of float32 values near the mean 3, a larger '
                 'one wider than the range of its values)'),
    'deep nesting': (lambda: '[' * 100000 + ']' * 100000,
                     'not valid JSON (nested too deeply: more levels of [ and { than '
                     'Python\'s JSON reader allows)'),
}


@pytest.mark.parametrize('case', sorted(BAD_STATS))
def test_absurd_feature_stats_are_refused_on_read(tmp_path, good_lines, case):
    """--feature-stats and a job-dir's feature_stats.json with an absurd mean, a tiny
    std or JSON nested too deeply: one line, nothing written (they were accepted, and
    every later run on the job-dir crashed; or a RecursionError)."""
    text, expected = BAD_STATS[case][0](), BAD_STATS[case][1]
    good = _write(tmp_path / 'good.csv', good_lines)
    common = ['--train-files', good, '--eval-files', good, '--train-steps', '1',
              '--batch-size', '16']
    supplied = tmp_path / 'stats.json'
    supplied.write_text(text)
    proc = run_module('taxi_estimator.task', *common, '--job-dir', tmp_path / 'job',
                      '--feature-stats', supplied, check=2)
    assert _error_line(proc) == 'error: --feature-stats %s: %s' % (supplied, expected)
    assert not (tmp_path / 'job').exists()

    job_dir = tmp_path / 'recorded'
    job_dir.mkdir()
    (job_dir / 'feature_stats.json').write_text(text)
    before = os.listdir(job_dir)
    proc = run_module('taxi_estimator.task', *common, '--job-dir', job_dir, check=2)
    assert _error_line(proc) == (
        'error: --job-dir file %s: %s; the checkpoints in --job-dir were trained with the '
        'statistics it held: restore it, or use a new --job-dir'
        % (job_dir / 'feature_stats.json', expected))
    assert os.listdir(job_dir) == before


def test_statistics_of_a_constant_column_get_std_one():
    accumulator = features.StatsAccumulator()
    for value in (10.0, 10.0, 10.0 + 1e-9):
        accumulator.add('fare', value)
    assert accumulator.stats()['fare']['std'] == 1.0
    features.check_stats(accumulator.stats(), 'computed')


def test_training_batches_of_data_in_memory_have_a_thread_of_their_own(tmp_path, good_lines):
    """On the trainer's one inter-op thread the batches' gathers queued behind the
    training step; a private pool runs them on the other core (RESULTS.md, taxi)."""
    summary = input_lib.scan([_write(tmp_path / 'train.csv', good_lines)], '--train-files')
    in_memory = input_lib.make_input_fn(summary.files, 8, training=True, seed=1,
                                        rows=summary.rows)()
    assert in_memory.options().threading.private_threadpool_size == 1
    features, labels = next(iter(in_memory))
    assert labels.shape == [8] and set(features) == set(next(iter(
        input_lib.make_input_fn(summary.files, 8, training=False)()))[0])


def _row_tuples(features, labels):
    """Each row of a batch as one comparable tuple of all its values (NaN too)."""
    columns = [np.reshape(features[k].numpy(), [len(labels), -1]) for k in sorted(features)]
    values = np.concatenate(columns + [np.reshape(labels.numpy(), [-1, 1])], axis=1)
    return [tuple(map(repr, row)) for row in values.tolist()]


def test_every_epoch_in_memory_is_all_rows_once_in_gathered_groups(tmp_path, good_lines,
                                                                   monkeypatch):
    """Batches are gathered several at once (RESULTS.md, #33) and then cut: each
    epoch still holds every row once, in batches of the batch size but its last,
    in a fresh order, and the batches are those gathered one at a time."""
    monkeypatch.setattr(input_lib, '_GATHER_BATCHES', 2)  # 6 rows a group, 4 an epoch
    summary = input_lib.scan([_write(tmp_path / 'train.csv', good_lines)], '--train-files')
    assert summary.rows == 20
    every_row = sorted(row for features, labels in input_lib.make_input_fn(
        summary.files, 20, training=False)() for row in _row_tuples(features, labels))
    batches = list(input_lib.make_input_fn(summary.files, 3, training=True, seed=1,
                                           rows=summary.rows)().take(14))
    epochs = [batches[:7], batches[7:]]
    orders = []
    for epoch in epochs:
        assert [len(labels) for _, labels in epoch] == [3] * 6 + [2]
        order = [row for features, labels in epoch for row in _row_tuples(features, labels)]
        assert sorted(order) == every_row
        orders.append(order)
    assert orders[0] != orders[1]
    # The same batches as gathered one at a time, for the same seed.
    monkeypatch.setattr(input_lib, '_GATHER_BATCHES', 1)
    one_by_one = list(input_lib.make_input_fn(summary.files, 3, training=True, seed=1,
                                              rows=summary.rows)().take(14))
    assert [_row_tuples(*b) for b in one_by_one] == [_row_tuples(*b) for b in batches]


def test_streamed_csv_is_parsed_on_threads_of_its_own(tmp_path, good_lines):
    """One per core but the training step's (RESULTS.md §9: on tf.data's shared
    pool parsing competed with the step)."""
    summary = input_lib.scan([_write(tmp_path / 'train.csv', good_lines)], '--train-files')
    streamed = input_lib.make_input_fn(summary.files, 8, training=True, seed=1,
                                       in_memory_mb=0, rows=summary.rows)()
    assert streamed.options().threading.private_threadpool_size == max(
        1, os.cpu_count() - 1)
    assert next(iter(streamed))[1].shape == [8]
