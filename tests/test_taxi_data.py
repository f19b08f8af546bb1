"""The taxi data step (`python -m taxi_estimator.data`) through its real CLI."""
import csv
import functools
import http.server
import os
import random
import re
import threading
import zipfile

import pytest

import resources
import taxi_trips
from conftest import directory_of_another_user, one_error_line
from conftest import run_module
from conftest import tree_bytes
from taxi_estimator import data
from taxi_estimator import schema

MODULE = 'taxi_estimator.data'


def _read(path):
    with open(path, newline='') as f:
        return list(csv.reader(f))


def _raw_trips():
    """Generated raw trips plus the rows the sample's query drops."""
    rng = random.Random(5)
    trips = [taxi_trips.trip(rng) for _ in range(300)]
    bad = [dict(trips[0], fare='0'), dict(trips[0], trip_miles='0'),
           dict(trips[0], trip_miles='50.5'), dict(trips[0], trip_seconds='3601'),
           dict(trips[0], trip_seconds=''), dict(trips[0], tips=''),
           dict(trips[0], fare='1e308')]
    odd = dict(trips[1], pickup_census_tract='17031081500.0', pickup_community_area='8.0',
               dropoff_community_area='99', fare='10', tips='2', trip_seconds='600',
               trip_miles='3')
    return trips + bad + [odd]


def test_falls_back_to_the_tfx_wheel_and_cleans_like_the_sample_query(tmp_path, refused_port):
    raw = _raw_trips()
    wheel = taxi_trips.write_tfx_wheel(tmp_path / 'tfx-1.21.0-py3-none-any.whl', raw)
    out = tmp_path / 'out'
    proc = run_module(MODULE, '--out-dir', out, '--sample-url-prefix',
                      'http://127.0.0.1:%d/small/' % refused_port, '--tfx-wheel', wheel, check=0)

    assert 'Sample CSVs unavailable' in proc.stderr
    kept = [r for r in map(data.clean_row, raw) if r is not None]
    assert len(kept) == len(raw) - 7
    train, evals = _read(out / data.TRAIN_FILE), _read(out / data.EVAL_FILE)
    assert train[0] == evals[0] == list(schema.COLUMNS)
    assert len(evals) - 1 == round(len(kept) * 0.2)
    assert len(train) - 1 + len(evals) - 1 == len(kept)
    assert sorted(train[1:] + evals[1:]) == sorted(kept)
    assert 'Source: Chicago Taxi trips from the tfx wheel' in proc.stderr
    assert 'kept %d of %d trips' % (len(kept), len(raw)) in proc.stderr
    assert 'Wrote %d rows to %s' % (len(train) - 1, out / data.TRAIN_FILE) in proc.stderr
    assert 'Wrote %d rows to %s' % (len(evals) - 1, out / data.EVAL_FILE) in proc.stderr

    rows = [dict(zip(schema.COLUMNS, r)) for r in train[1:] + evals[1:]]
    for row in rows:  # the label is tips / fare >= 0.2, fields parse as the trainer reads them
        for column, text in row.items():
            schema.parse_value(column, text)
    by_fare = {(r['fare'], r['trip_seconds'], r['trip_miles']): r for r in rows}
    odd = by_fare[('10', '600', '3')]
    assert (odd['tip'], odd['pickup_census_tract'], odd['pickup_community_area'],
            odd['dropoff_community_area']) == ('1', '17031081500', '8', '')
    for trip in raw[:300]:
        row = data.clean_row(trip)
        assert row[0] == str(int(float(trip['tips']) / float(trip['fare']) >= 0.2))


def test_split_is_seeded(tmp_path):
    wheel = taxi_trips.write_tfx_wheel(tmp_path / 'tfx.whl', _raw_trips())
    outputs = {}
    for name, seed in (('a', '3'), ('b', '3'), ('c', '4')):
        run_module(MODULE, '--out-dir', tmp_path / name, '--source', 'tfx',
                   '--tfx-wheel', wheel, '--seed', seed, '--eval-fraction', '0.25', check=0)
        outputs[name] = _read(tmp_path / name / data.EVAL_FILE)
    assert outputs['a'] == outputs['b']
    assert outputs['a'] != outputs['c']
    assert len(outputs['a']) == len(outputs['c'])


@pytest.fixture
def sample_server(tmp_path):
    """Serves sample-layout CSVs over HTTP like gs://cloud-samples-data does."""
    folder = tmp_path / 'served' / 'small'
    folder.mkdir(parents=True)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler,
                                directory=str(tmp_path / 'served'))
    server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield folder, 'http://127.0.0.1:%d/small/' % server.server_address[1]
    server.shutdown()
    server.server_close()


def test_uses_the_sample_csvs_when_reachable(tmp_path, sample_server):
    folder, url = sample_server
    train = taxi_trips.layout_rows(40, seed=1)
    evals = taxi_trips.layout_rows(10, seed=2)
    unusable = list(train[0])
    unusable[schema.COLUMNS.index('fare')] = '0'
    taxi_trips.write_csv(folder / data.TRAIN_FILE, train + [unusable])
    taxi_trips.write_csv(folder / data.EVAL_FILE, evals, header=None)  # headerless export
    out = tmp_path / 'out'
    proc = run_module(MODULE, '--out-dir', out, '--sample-url-prefix', url, check=0)
    assert 'Source: AI Platform sample CSVs (%s); kept 50 of 51 rows' % url in proc.stderr
    assert _read(out / data.TRAIN_FILE) == [list(schema.COLUMNS)] + train
    assert _read(out / data.EVAL_FILE) == [list(schema.COLUMNS)] + evals


def test_no_usable_source_is_one_error_line(tmp_path, refused_port):
    wheel = tmp_path / 'not-tfx.whl'
    with open(wheel, 'wb') as f:
        f.write(b'not a zip')
    proc = run_module(MODULE, '--out-dir', tmp_path / 'out', '--sample-url-prefix',
                      'http://127.0.0.1:%d/small/' % refused_port, '--tfx-wheel', wheel,
                      check=2)
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith('error: no taxi data source could be used (sample CSVs: ')
    assert 'tfx wheel: %s: no readable %s' % (wheel, data.TFX_CSV_PATH) in last
    assert 'Traceback' not in proc.stderr
    assert not (tmp_path / 'out').exists()

    proc = run_module(MODULE, '--out-dir', tmp_path / 'out', '--tfx-wheel',
                      tmp_path / 'missing.whl', check=2)
    assert proc.stderr.strip().splitlines()[-1] == (
        'error: --tfx-wheel %s: no such file' % (tmp_path / 'missing.whl'))


def _run_tfx(tmp_path, out, seed='42'):
    wheel = tmp_path / 'tfx.whl'
    if not wheel.exists():
        taxi_trips.write_tfx_wheel(wheel, _raw_trips())
    return run_module(MODULE, '--out-dir', out, '--source', 'tfx', '--tfx-wheel', wheel,
                      '--seed', seed)


def test_failed_run_leaves_the_previous_files_byte_for_byte(tmp_path):
    out = tmp_path / 'out'
    assert _run_tfx(tmp_path, out).returncode == 0
    os.remove(out / data.EVAL_FILE)
    (out / data.EVAL_FILE).mkdir()  # a directory where the eval file goes
    before = tree_bytes(out)
    proc = _run_tfx(tmp_path, out, seed='7')
    one_error_line(proc, '--out-dir %s: %s is a directory' % (out, data.EVAL_FILE))
    assert tree_bytes(out) == before


def test_out_dir_that_is_a_file_is_one_line(tmp_path):
    out = tmp_path / 'out'
    out.write_text('not a directory')
    one_error_line(_run_tfx(tmp_path, out), '--out-dir %s is not a directory' % out)
    assert out.read_text() == 'not a directory'


def test_planted_temp_symlink_is_not_followed(tmp_path):
    out = tmp_path / 'out'
    out.mkdir()
    victim = tmp_path / 'victim'
    victim.write_text('precious')
    os.symlink(victim, out / (data.TRAIN_FILE + '.tmp'))
    assert _run_tfx(tmp_path, out).returncode == 0
    assert victim.read_text() == 'precious'
    assert os.readlink(out / (data.TRAIN_FILE + '.tmp')) == str(victim)
    assert _read(out / data.TRAIN_FILE)[0] == list(schema.COLUMNS)
    assert sorted(os.listdir(out)) == sorted([data.TRAIN_FILE, data.EVAL_FILE,
                                              data.TRAIN_FILE + '.tmp'])


def test_out_dir_owned_by_another_user_is_refused(tmp_path):
    out = directory_of_another_user(tmp_path / 'out')
    one_error_line(_run_tfx(tmp_path, out), '--out-dir %s is owned by user' % out)
    assert os.listdir(out) == []


def test_sample_download_that_never_ends_falls_back_unread(tmp_path):
    """A sample URL serving an endless stream was read into memory whole."""
    wheel = taxi_trips.write_tfx_wheel(tmp_path / 'tfx.whl', _raw_trips())
    with resources.endless_download() as url:
        proc = run_module(MODULE, '--out-dir', tmp_path / 'out', '--sample-url-prefix',
                          url.rsplit('/', 1)[0] + '/small/', '--tfx-wheel', wheel,
                          env={'NO_PROXY': '127.0.0.1', 'no_proxy': '127.0.0.1'}, check=0)
    assert re.search(r'serves more than 256 MiB; the sample CSVs are a few MB\); falling back '
                     r'to the tfx wheel', proc.stderr), proc.stderr[-3000:]


def test_tfx_wheel_whose_csv_inflates_like_a_bomb_is_not_read(tmp_path, refused_port):
    wheel = tmp_path / 'tfx.whl'
    with zipfile.ZipFile(wheel, 'w', zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        with archive.open(data.TFX_CSV_PATH, 'w', force_zip64=True) as f:
            for _ in range(300):
                f.write(b'\0' * (1 << 20))
    proc = run_module(MODULE, '--out-dir', tmp_path / 'out', '--source', 'tfx',
                      '--tfx-wheel', wheel, check=2)
    assert re.search(r'%s: %s inflates from \d+ to 314572800 bytes; the real one is about '
                     r'2 MB' % (re.escape(str(wheel)), re.escape(data.TFX_CSV_PATH)),
                     proc.stderr.strip().splitlines()[-1]), proc.stderr[-3000:]
