"""Data step: fetch Chicago Taxi trips, clean them, write train/eval CSVs.

    python -m taxi_estimator.data --out-dir DIR [--source auto|sample|tfx]

Writes `taxi_trips_train.csv` and `taxi_trips_eval.csv` (with a header line)
in the AI Platform sample's column layout (`schema.COLUMNS`). Sources, tried
in this order with `--source auto`:

1. `sample`: the public CSVs the AI Platform sample trained on
   (gs://cloud-samples-data/ml-engine/chicago_taxi/training/small/, read over
   HTTPS without credentials), keeping their own train/eval split.
2. `tfx`: the real trips CSV that the `tfx` wheel on PyPI ships
   (`pip download --no-deps tfx==1.21.0`; tfx itself is never installed),
   split by a seeded shuffle.

Rows are cleaned as the sample's BigQuery query did: fare > 0,
0 < trip_miles <= 50, 0 < trip_seconds <= 3600, and a known tip; also
fare <= `schema.MAX_AMOUNT`, the trainer's bound (e.g. 1e308). Unlike the
query, rows with empty community areas, tracts, coordinates or company are
kept (in the tfx data nearly every row lacks a pickup census tract, so the
query's filter would keep none); the trainer handles missing values.

The two files are written as a set: to a staging directory first, then
moved in together (`safe_io.staged_files`), so a failed run leaves the
previous pair as it was.
"""
import argparse
import csv
import io
import os
import random
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
import zipfile
from typing import Dict, Iterable, List, Literal, Mapping, Optional, Sequence, Tuple, TypedDict

from estimator_trainers import errors
from estimator_trainers import flags
from estimator_trainers import logs
from estimator_trainers import safe_io
from estimator_trainers.errors import UserInputError
from taxi_estimator import schema

TRAIN_FILE = 'taxi_trips_train.csv'
EVAL_FILE = 'taxi_trips_eval.csv'
SAMPLE_URL_PREFIX = ('https://storage.googleapis.com/cloud-samples-data/ml-engine/'
                     'chicago_taxi/training/small/')
TFX_REQUIREMENT = 'tfx==1.21.0'
TFX_CSV_PATH = 'tfx/examples/chicago_taxi_pipeline/data/simple/data.csv'
MIN_TIP_FRACTION = 0.2
MAX_TRIP_MILES = 50.0
MAX_TRIP_SECONDS = 3600.0

# `--source`: where the trips come from (`auto`: the sample, else the tfx wheel).
Source = Literal['auto', 'sample', 'tfx']
# A cleaned row: its CSV fields in `schema.COLUMNS` order.
Row = List[str]


class Prepared(TypedDict):
    """What `prepare` wrote: the source used and the rows of each file."""
    source: Literal['sample', 'tfx']
    train: int
    eval: int


class SourceUnavailable(Exception):
    """A data source cannot be reached or does not hold what was expected."""


def clean_row(raw: Mapping[str, Optional[str]]) -> Optional[Row]:
    """One cleaned output row (list of CSV fields in `schema.COLUMNS` order).

    Args:
      raw: dict from a CSV row, either a raw trip (with `tips`, as in the tfx
        CSV) or an already labelled row in the sample layout (with `tip`).

    Returns:
      The row, or None when the trip fails the sample query's filters or has
      no usable label.
    """
    fare, miles, seconds = (_number((raw.get(c) or '').strip())
                            for c in ('fare', 'trip_miles', 'trip_seconds'))
    if (fare is None or miles is None or seconds is None
            or not 0 < fare <= schema.FLOAT_RANGES['fare'][1]
            or not 0 < miles <= MAX_TRIP_MILES or not 0 < seconds <= MAX_TRIP_SECONDS):
        return None
    if 'tips' in raw:
        tips = _number((raw['tips'] or '').strip())
        if tips is None:
            return None
        tip: schema.Value = int(tips / fare >= MIN_TIP_FRACTION)
    else:
        try:
            tip = schema.parse_value(schema.LABEL, (raw.get('tip') or '').strip())
        except ValueError:
            return None
    row = [str(tip)]
    for column in schema.FEATURES:
        text = (raw.get(column) or '').strip()
        row.append(_clean_field(column, text))
    return row


def _clean_field(column: str, text: str) -> str:
    """Canonical CSV text of one feature; '' when absent or invalid."""
    if not text:
        return ''
    if column in ('pickup_census_tract', 'dropoff_census_tract'):
        number = _number(text)  # tracts may come as 17031081500.0
        return str(int(number)) if number is not None else ''
    try:
        value = schema.parse_value(column, text)
    except ValueError:
        return ''
    return str(value) if isinstance(value, int) else text


def _number(text: str) -> Optional[float]:
    try:
        return schema.parse_number(text)
    except ValueError:
        return None


def read_rows(text: str, source: str) -> List[Dict[str, Optional[str]]]:
    """Parses CSV text with a header line into dicts.

    Raises:
      SourceUnavailable: the text has no header line.
    """
    reader = csv.DictReader(io.StringIO(text))
    if not reader.fieldnames:
        raise SourceUnavailable('%s is empty' % source)
    return list(reader)


# What a sample CSV download or the tfx wheel's CSV may hold at most: they are
# a few MB, and a server or a wheel offering more is not read into memory.
MAX_SAMPLE_BYTES = 256 << 20


def fetch_sample(url_prefix: str, timeout: float) -> Tuple[List[Row], List[Row], int]:
    """Downloads and cleans the sample's train and eval CSVs.

    Returns:
      (train_rows, eval_rows, raw_count) of cleaned rows.

    Raises:
      SourceUnavailable: a file cannot be fetched or lacks the layout's columns.
    """
    result: List[List[Row]] = []
    raw_count = 0
    for name in (TRAIN_FILE, EVAL_FILE):
        url = url_prefix.rstrip('/') + '/' + name
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response:
                body = io.BytesIO()
                if not safe_io.copy_at_most(response, body, MAX_SAMPLE_BYTES):
                    raise SourceUnavailable('%s serves more than %s; the sample CSVs are a '
                                            'few MB' % (url, safe_io.size_text(
                                                MAX_SAMPLE_BYTES)))
                text = body.getvalue().decode('utf-8')
        except (urllib.error.URLError, OSError, UnicodeDecodeError) as e:
            raise SourceUnavailable('%s: %s' % (url, getattr(e, 'reason', e))) from None
        if not text.startswith(schema.HEADER_LINE):
            # Headerless export: the fields are in the layout's order.
            text = schema.HEADER_LINE + '\n' + text
        rows = read_rows(text, url)
        raw_count += len(rows)
        result.append([r for r in map(clean_row, rows) if r is not None])
    return result[0], result[1], raw_count


def fetch_tfx_csv(wheel: Optional[str] = None, timeout: float = 300) -> str:
    """The trips CSV text out of a tfx wheel (downloaded with pip if not given).

    Raises:
      SourceUnavailable: pip cannot fetch the wheel, or it lacks the CSV.
    """
    with tempfile.TemporaryDirectory() as tmp:
        if wheel is None:
            command = [sys.executable, '-m', 'pip', 'download', '--no-deps',
                       '--only-binary=:all:', '--disable-pip-version-check',
                       '--dest', tmp, TFX_REQUIREMENT]
            try:
                done = subprocess.run(command, capture_output=True, text=True,
                                      timeout=timeout, check=False)
            except subprocess.TimeoutExpired:
                raise SourceUnavailable('pip download %s took over %d s'
                                        % (TFX_REQUIREMENT, timeout)) from None
            wheels = [f for f in os.listdir(tmp) if f.endswith('.whl')]
            if done.returncode or not wheels:
                lines = (done.stderr or done.stdout).strip().splitlines()
                raise SourceUnavailable('pip download %s failed: %s' % (
                    TFX_REQUIREMENT, lines[-1] if lines else 'exit %d' % done.returncode))
            wheel = os.path.join(tmp, wheels[0])
        try:
            with zipfile.ZipFile(wheel) as archive:
                info = archive.getinfo(TFX_CSV_PATH)
                # The real CSV is about 2 MB; a member declaring far more, or inflating
                # like a "zip bomb", is not read into memory.
                if (info.file_size > MAX_SAMPLE_BYTES
                        or info.file_size > 100 * max(1, info.compress_size)):
                    raise SourceUnavailable(
                        '%s: %s inflates from %d to %d bytes; the real one is about 2 MB'
                        % (wheel, TFX_CSV_PATH, info.compress_size, info.file_size))
                return archive.read(info).decode('utf-8')
        except (OSError, KeyError, zipfile.BadZipFile, UnicodeDecodeError) as e:
            raise SourceUnavailable('%s: no readable %s (%s)' % (wheel, TFX_CSV_PATH, e)) from None


def split(rows: Sequence[Row], eval_fraction: float, seed: int) -> Tuple[List[Row], List[Row]]:
    """Seeded train/eval split; each part keeps the input order.

    The eval part gets round(len(rows) * eval_fraction) rows, at least one,
    and the train part at least one.
    """
    if len(rows) < 2:
        raise SourceUnavailable('only %d usable trips; need at least 2' % len(rows))
    num_eval = min(max(1, round(len(rows) * eval_fraction)), len(rows) - 1)
    order = list(range(len(rows)))
    random.Random(seed).shuffle(order)
    eval_index = set(order[:num_eval])
    train = [r for i, r in enumerate(rows) if i not in eval_index]
    evals = [r for i, r in enumerate(rows) if i in eval_index]
    return train, evals


def write_csv(path: str, rows: Iterable[Row]) -> None:
    """Writes `rows` with the layout's header (into a staging directory)."""
    tf = logs.import_tensorflow()
    with tf.io.gfile.GFile(path, 'w') as f:
        writer = csv.writer(f, lineterminator='\n')
        writer.writerow(schema.COLUMNS)
        writer.writerows(rows)


def prepare(out_dir: str, *, source: Source = 'auto',
            sample_url_prefix: str = SAMPLE_URL_PREFIX, tfx_wheel: Optional[str] = None,
            eval_fraction: float = 0.2, seed: int = 42, timeout: float = 10) -> Prepared:
    """Fetches, cleans and writes the train/eval CSVs into `out_dir`.

    Returns:
      dict with `source` ('sample' or 'tfx'), `train` and `eval` row counts.

    Raises:
      UserInputError: no source could be used.
    """
    tf = logs.import_tensorflow()
    log = tf.compat.v1.logging
    safe_io.check_owner(out_dir, '--out-dir')
    failures: List[str] = []
    train: List[Row] = []
    evals: List[Row] = []
    used: Optional[Literal['sample', 'tfx']] = None
    if source in ('auto', 'sample'):
        log.info('Fetching the AI Platform sample CSVs from %s', sample_url_prefix)
        try:
            train, evals, raw_count = fetch_sample(sample_url_prefix, timeout)
            used = 'sample'
            log.info('Source: AI Platform sample CSVs (%s); kept %d of %d rows after '
                     'cleaning', sample_url_prefix, len(train) + len(evals), raw_count)
        except SourceUnavailable as e:
            failures.append('sample CSVs: %s' % e)
            log.warning('Sample CSVs unavailable (%s)%s', e,
                        '; falling back to the tfx wheel' if source == 'auto' else '')
    if used is None and source in ('auto', 'tfx'):
        origin = tfx_wheel or 'pip download --no-deps %s' % TFX_REQUIREMENT
        log.info('Reading %s from %s', TFX_CSV_PATH, origin)
        try:
            raw = read_rows(fetch_tfx_csv(tfx_wheel), TFX_CSV_PATH)
            cleaned = [r for r in map(clean_row, raw) if r is not None]
            train, evals = split(cleaned, eval_fraction, seed)
            used = 'tfx'
            log.info('Source: Chicago Taxi trips from the tfx wheel (%s, %s); kept %d '
                     'of %d trips after cleaning; split with seed %d, eval fraction %g',
                     origin, TFX_CSV_PATH, len(cleaned), len(raw), seed, eval_fraction)
        except SourceUnavailable as e:
            failures.append('tfx wheel: %s' % e)
    if used is None:
        raise UserInputError(
            'no taxi data source could be used (%s); pass --tfx-wheel PATH to a '
            'downloaded %s wheel' % ('; '.join(failures), TFX_REQUIREMENT))
    if not train or not evals:
        raise UserInputError('the %s source left %d train and %d eval rows after '
                             'cleaning; expected both non-empty'
                             % (used, len(train), len(evals)))
    with safe_io.staged_files(out_dir, (TRAIN_FILE, EVAL_FILE), '--out-dir') as staging:
        for name, rows in ((TRAIN_FILE, train), (EVAL_FILE, evals)):
            write_csv(os.path.join(staging, name), rows)
    for name, rows in ((TRAIN_FILE, train), (EVAL_FILE, evals)):
        log.info('Wrote %d rows to %s', len(rows), os.path.join(out_dir, name))
    return {'source': used, 'train': len(train), 'eval': len(evals)}


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser: argparse.ArgumentParser = flags.make_parser(
        'python -m taxi_estimator.data',
        'Fetch Chicago Taxi trips, clean them like the AI Platform sample and write '
        '%s and %s.' % (TRAIN_FILE, EVAL_FILE))
    parser.add_argument('--out-dir', type=flags.path, required=True,
                        help='Directory (local or gs://) for the two CSV files.')
    parser.add_argument('--source', choices=('auto', 'sample', 'tfx'), default='auto',
                        help='auto: the sample CSVs, else the tfx wheel.')
    parser.add_argument('--sample-url-prefix', default=SAMPLE_URL_PREFIX,
                        help='HTTP(S) folder holding the sample CSVs (e.g. a mirror).')
    parser.add_argument('--tfx-wheel', type=flags.path, default=None,
                        help='A downloaded %s wheel to read the trips from instead '
                             'of running pip download.' % TFX_REQUIREMENT)
    parser.add_argument('--eval-fraction', type=_fraction, default=0.2,
                        help='Share of the tfx trips held out for evaluation.')
    parser.add_argument('--seed', type=int, default=42,
                        help='Seed of the tfx trips train/eval split.')
    parser.add_argument('--timeout', type=flags.positive_float, default=10,
                        help='Seconds to wait for the sample CSVs before falling back.')
    return parser.parse_args(argv)


def _fraction(text: str) -> float:
    value: float = flags.unit_interval(text)
    if value == 0:
        raise argparse.ArgumentTypeError('expected a number in (0, 1), got %r' % text)
    return value


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = logs.start_tool(parse_args, argv)
    if args.tfx_wheel and not os.path.isfile(args.tfx_wheel):
        raise UserInputError('--tfx-wheel %s: no such file' % args.tfx_wheel)
    prepare(args.out_dir, source=args.source, sample_url_prefix=args.sample_url_prefix,
            tfx_wheel=args.tfx_wheel, eval_fraction=args.eval_fraction,
            seed=args.seed, timeout=args.timeout)
    return 0


if __name__ == '__main__':
    errors.run_cli(main)
