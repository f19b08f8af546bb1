"""Taxi data larger than memory: the fast check, the cache step, shards on gs://.

The fast check of `input.scan` (TensorFlow ops on chunks of lines) must
accept exactly what the line-by-line check accepts, with the same row count
and statistics, and leave every file it doubts to it, so errors name the
same line and column. The cache step and streaming are run through the real
CLIs, locally and on the gs:// emulator with a set of CSV shards.
"""
import json
import os
import sys

import pytest
import tensorflow as tf

import processes
import taxi_trips
from conftest import cli_env, one_error_line, run_module
from estimator_trainers.errors import UserInputError
from taxi_estimator import input as input_lib
from taxi_estimator import schema
from taxi_trips import final_metrics

TAXI = 'taxi_estimator.task'
CACHE = 'taxi_estimator.cache'
FAST = ['--batch-size', '64', '--random-seed', '3', '--eval-frequency-secs', '0',
        '--checkpoint-num-steps', '40', '--train-steps', '80']


def _set(line, column, value):
    fields = line.split(',')
    fields[schema.COLUMNS.index(column)] = value
    return ','.join(fields)


# (name, mutate the lines of a good file). Accepted ones must be accepted by both checks.
CASES = [
    ('good', lambda g: g),
    ('quoted numbers and text', lambda g: g[:3] + [
        _set(_set(g[3], 'fare', '"12.5"'), 'company', '"Cab, ""Top"" Co."')] + g[4:]),
    ('non-ascii company', lambda g: g[:3] + [_set(g[3], 'company', 'Taxi Zoé')] + g[4:]),
    ('whole number written 8.0', lambda g: g[:3] + [
        _set(g[3], 'trip_start_month', '8.0')] + g[4:]),
    ('byte order mark', lambda g: ['\ufeff' + g[0]] + g[1:]),
    ('non-numeric number', lambda g: g[:3] + [_set(g[3], 'fare', 'twelve')] + g[4:]),
    ('infinite fare', lambda g: g[:3] + [_set(g[3], 'fare', 'inf')] + g[4:]),
    ('fare overflows', lambda g: g[:3] + [_set(g[3], 'fare', '1e400')] + g[4:]),
    ('hexadecimal', lambda g: g[:3] + [_set(g[3], 'fare', '0x10')] + g[4:]),
    ('space before a number', lambda g: g[:3] + [_set(g[3], 'fare', ' 5')] + g[4:]),
    ('fractional hour', lambda g: g[:3] + [_set(g[3], 'trip_start_hour', '3.5')] + g[4:]),
    ('hour out of range', lambda g: g[:3] + [_set(g[3], 'trip_start_hour', '24')] + g[4:]),
    ('latitude off the globe', lambda g: g[:3] + [
        _set(g[3], 'pickup_latitude', '4188')] + g[4:]),
    ('bad label', lambda g: g[:5] + [_set(g[5], 'tip', 'yes')] + g[6:]),
    ('empty label', lambda g: g[:5] + [_set(g[5], 'tip', '')] + g[6:]),
    ('too few fields', lambda g: g[:2] + [g[2].rsplit(',', 1)[0]] + g[3:]),
    ('unquoted quote', lambda g: g[:2] + [g[2] + ' "Cab"'] + g[3:]),
    ('empty line', lambda g: g[:4] + [''] + g[4:]),
    ('line too long', lambda g: g[:3] + [_set(g[3], 'company', 'x' * 70000)] + g[4:]),
    ('line longer than a cut', lambda g: g[:3] + [
        _set(g[3], 'company', 'x' * 300000)] + g[4:]),
    ('wrong header', lambda g: [g[0].replace('fare', 'fare_usd')] + g[1:]),
    ('header only', lambda g: g[:1]),
]


def _scan(path, fast_bytes, monkeypatch):
    monkeypatch.setattr(input_lib, 'FAST_SCAN_BYTES', fast_bytes)
    monkeypatch.setattr(input_lib, '_SCAN_BLOCK_BYTES', 4096)  # lines across blocks
    try:
        summary = input_lib.scan([path], '--train-files')
    except UserInputError as e:
        return 'error', str(e)
    return summary.rows, summary.stats


@pytest.mark.parametrize('name, mutate', CASES, ids=[c[0] for c in CASES])
def test_the_fast_check_agrees_with_the_line_by_line_check(name, mutate, tmp_path,
                                                           monkeypatch):
    good = taxi_trips.write_csv(tmp_path / 'good.csv', taxi_trips.layout_rows(300, 7))
    with open(good, encoding='utf-8') as f:
        lines = f.read().splitlines()
    path = tmp_path / 'case.csv'
    path.write_text('\n'.join(mutate(lines)) + '\n', encoding='utf-8')
    fast = _scan(str(path), 0, monkeypatch)
    slow = _scan(str(path), 1 << 62, monkeypatch)
    assert fast[0] == slow[0], (fast, slow)
    if fast[0] == 'error':
        assert fast[1] == slow[1]
        return
    for column, stats in slow[1].items():
        assert fast[1][column] == pytest.approx(stats, rel=1e-9), column
    # And the accepted file was accepted by the fast check itself.
    monkeypatch.setattr(input_lib, 'FAST_SCAN_BYTES', 0)
    assert str(path) in input_lib._fast_scan([str(path)], '--train-files')  # pylint: disable=protected-access


def test_invalid_utf8_is_left_to_the_line_by_line_check(tmp_path, monkeypatch):
    good = taxi_trips.write_csv(tmp_path / 'good.csv', taxi_trips.layout_rows(50, 3))
    data = open(good, 'rb').read()
    (tmp_path / 'bad.csv').write_bytes(data.replace(b'Cash', b'Ca\xffh', 1))
    fast = _scan(str(tmp_path / 'bad.csv'), 0, monkeypatch)
    assert fast == ('error', '--train-files %s: not UTF-8 text; expected a CSV file'
                    % (tmp_path / 'bad.csv'))


# Files whose lines the block reader must split as TextLineDataset does.
LINE_FILES = {
    'LF': b'head\nrow 1\nrow 2\n',
    'CRLF': b'head\r\nrow 1\r\nrow 2\r\n',
    'no last LF': b'head\nrow 1\nrow 2',
    'last line ends in CR': b'head\r\nrow 1\r\nrow 2\r',
    'empty lines': b'head\n\nrow 1\n\n\nrow 2\n\n',
    'CRs inside lines dropped': b'head\nro\rw 1\r\r\nrow 2\n',
    'header only': b'head\n',
    'header without LF': b'head',
    'byte order mark': '\ufeffhead\r\nZo\u00e9\r\n'.encode(),
    'empty': b'',
}


@pytest.mark.parametrize('block_bytes', [1, 2, 5, 1 << 18])
@pytest.mark.parametrize('name', sorted(LINE_FILES))
def test_lines_of_blocks_are_the_lines_of_tensorflows_reader(name, block_bytes, tmp_path):
    """The trainer reads CSV a block of bytes at a time; the lines it parses
    are exactly those `TextLineDataset` gives after the header, wherever a
    block ends (in a CRLF, in a line, at the end of the file)."""
    path = tmp_path / 'lines.csv'
    path.write_bytes(LINE_FILES[name])
    expected = list(tf.data.TextLineDataset(str(path)).skip(1).as_numpy_iterator())
    blocks = input_lib._line_blocks(  # pylint: disable=protected-access
        tf.constant(str(path)), tf.constant(path.stat().st_size, tf.int64), block_bytes)
    assert [line for block in blocks.as_numpy_iterator() for line in block] == expected


@pytest.fixture(scope='module')
def shards(tmp_path_factory):
    """Four training shards and an eval file."""
    folder = tmp_path_factory.mktemp('taxi_shards')
    paths = [taxi_trips.write_csv(folder / ('trips-%d-of-4.csv' % i),
                                  taxi_trips.layout_rows(250, 11 + i)) for i in range(4)]
    evals = taxi_trips.write_csv(folder / 'eval.csv', taxi_trips.layout_rows(200, 99))
    return paths, evals


def test_cache_step_then_train_from_the_cache(shards, tmp_path):
    paths, evals = shards
    cache = tmp_path / 'cache'
    proc = run_module(CACHE, '--files', *paths, '--out-dir', cache, '--shards', 3, check=0)
    assert 'Wrote 1000 rows in 3 shards to %s' % cache in proc.stderr
    record = json.loads((cache / input_lib.CACHE_RECORD).read_text())
    assert record['rows'] == 1000 and record['sources'] == paths
    for column, stats in input_lib.scan(paths, '--files').stats.items():
        assert record['stats'][column] == pytest.approx(stats)
    proc = run_module(TAXI, '--train-files', cache, '--eval-files', evals,
                      '--job-dir', tmp_path / 'job', *FAST, check=0)
    assert 'Training data: 1000 rows in 1 file(s)' in proc.stderr
    step, metrics = final_metrics(proc.stderr)
    assert step == 80 and metrics['auc'] > 0.7, metrics
    # Unparsed, the cache streams on tf.data's shared pool (it lost with a
    # private one, where streamed CSV gained: RESULTS.md §9).
    streamed = input_lib.make_input_fn([str(cache)], 8, training=True, seed=1)()
    assert streamed.options().threading.private_threadpool_size is None
    assert next(iter(streamed))[1].shape == [8]


@pytest.mark.parametrize('flags, flag', [(['--files', '', '--out-dir', 'out'], '--files'),
                                         (['--files', 'a.csv', '--out-dir', ''], '--out-dir')])
def test_cache_step_refuses_empty_paths(flags, flag):
    """An unset variable's empty path is refused before anything is read or written."""
    proc = run_module(CACHE, *flags)
    one_error_line(proc, 'argument %s: expected a path' % flag)


def test_cache_step_refusals_are_one_line(shards, tmp_path):
    paths, evals = shards
    occupied = tmp_path / 'occupied'
    occupied.mkdir()
    (occupied / 'notes.txt').write_text('mine')
    proc = run_module(CACHE, '--files', *paths, '--out-dir', occupied)
    one_error_line(proc, '--out-dir %s is not empty' % occupied)
    assert sorted(os.listdir(occupied)) == ['notes.txt']

    cache = tmp_path / 'cache'
    run_module(CACHE, '--files', paths[0], '--out-dir', cache, check=0)
    proc = run_module(CACHE, '--files', cache, '--out-dir', tmp_path / 'again')
    one_error_line(proc, '--files %s is a cache already' % cache)
    proc = run_module(TAXI, '--train-files', cache, paths[1], '--eval-files', evals,
                      '--job-dir', tmp_path / 'job', *FAST)
    one_error_line(proc, '--train-files %s: a cache directory is the whole data set' % cache)

    # An interrupted cache step leaves no record: not a cache, refused as a directory.
    os.remove(cache / input_lib.CACHE_RECORD)
    proc = run_module(TAXI, '--train-files', cache, '--eval-files', evals,
                      '--job-dir', tmp_path / 'job', *FAST)
    one_error_line(proc, '--train-files %s: %s is a directory; expected CSV files'
                   % (cache, cache))


@pytest.mark.slow
def test_streams_csv_shards_and_a_cache_on_gs(gcs, shards, tmp_path):
    """The streaming path on gs://: four shards read in parallel, then their cache."""
    paths, evals = shards
    bucket = gcs.create_bucket('taxi-shards')
    copy = [sys.executable, '-c', 'import sys, tensorflow as tf\n'
            'for path in sys.argv[1:-1]:\n'
            '    tf.io.gfile.copy(path, sys.argv[-1] + "/" + path.rsplit("/", 1)[1])']
    done = processes.run(copy + paths + [bucket + '/trips'], 300, env=cli_env(gcs.env()))
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(gcs.list_objects('taxi-shards', 'trips/')) == 4

    proc = run_module(TAXI, '--train-files', bucket + '/trips/*.csv', '--eval-files', evals,
                      '--job-dir', tmp_path / 'job', '--max-in-memory-mb', 0, *FAST,
                      env=gcs.env(), check=0)
    assert 'Training data: 1000 rows in 4 file(s)' in proc.stderr
    step, metrics = final_metrics(proc.stderr)
    assert step == 80 and metrics['auc'] > 0.7, metrics

    run_module(CACHE, '--files', bucket + '/trips/*.csv', '--out-dir', bucket + '/cache',
               env=gcs.env(), check=0)
    record = json.loads(gcs.read_object(bucket + '/cache/' + input_lib.CACHE_RECORD))
    assert record['rows'] == 1000 and len(record['sources']) == 4
    proc = run_module(TAXI, '--train-files', bucket + '/cache', '--eval-files', evals,
                      '--job-dir', tmp_path / 'job2', *FAST, env=gcs.env(), check=0)
    step, metrics = final_metrics(proc.stderr)
    assert step == 80 and metrics['auc'] > 0.7, metrics
