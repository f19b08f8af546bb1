"""Reading taxi trip CSVs: validation up front, tf.data input, serving inputs.

`scan` reads every training/eval file once in Python before anything is
written to the job-dir: a wrong header, a row with too few or too many
fields, a non-numeric number or an out-of-range category stops the run with
one line naming the flag, file, line and column (TensorFlow's CSV reader
would fail mid-training with neither). The same pass counts the rows and
computes the normalisation statistics of the training files.

The serving input functions accept the same features in three encodings
(`--serving-export-format`): JSON (one typed input per feature), CSV (one
`csv_row` string in `schema.FEATURES` order) and EXAMPLE (one serialized
`tf.train.Example` per instance, input `examples`).
"""
import codecs
import csv
import dataclasses
import re

import tensorflow as tf

from estimator_trainers import safe_io
from estimator_trainers.errors import first_line
from estimator_trainers.errors import UserInputError
from taxi_estimator import features as features_lib
from taxi_estimator import schema

SHUFFLE_BUFFER = 10000
CACHE_BYTES = 256 << 20  # training CSVs up to this size are kept in memory
_ALL_ROWS = 1 << 62
_CHUNK_LINES = 1024
CSV_INPUT = 'csv_row'
EXAMPLE_INPUT = 'examples'


@dataclasses.dataclass(frozen=True)
class DataSummary:
    """What `scan` learned about a set of CSV files.

    Attributes:
      files: the matched paths, in reading order.
      rows: number of data rows (header lines excluded).
      stats: {float feature: {'mean', 'std'}} over the non-missing values.
    """
    files: tuple
    rows: int
    stats: dict


def resolve_files(patterns, flag):
    """Expands local or gs:// paths and globs, keeping their order.

    Raises:
      UserInputError: a pattern matches nothing, or matches a directory.
    """
    files = []
    for pattern in patterns:
        try:
            matches = sorted(tf.io.gfile.glob(pattern))
        except tf.errors.OpError as e:
            raise UserInputError('%s %s: %s' % (flag, pattern, first_line(e))) from None
        if not matches:
            raise UserInputError('%s %s: no file matches this path' % (flag, pattern))
        for path in matches:
            if tf.io.gfile.isdir(path):
                raise UserInputError('%s %s: %s is a directory; expected CSV files '
                                     '(use a glob like DIR/*.csv)' % (flag, pattern, path))
            kind = safe_io.not_a_regular_file(path)
            if kind:
                raise UserInputError(
                    '%s %s is %s, not a regular file (a process substitution <(...) '
                    'is a pipe): training reads its files more than once (this check, '
                    'then every epoch) and a pipe gives its rows only once; write them to '
                    'a file and pass that' % (flag, path, kind))
            if path not in files:
                files.append(path)
    return tuple(files)


def scan(patterns, flag):
    """Validates every row of the files `patterns` match.

    Args:
      patterns: --train-files or --eval-files values.
      flag: the flag name, for error messages.

    Returns:
      `DataSummary`.

    Raises:
      UserInputError: naming flag, file, line and column of the first problem.
    """
    files = resolve_files(patterns, flag)
    accumulator = features_lib.StatsAccumulator()
    rows = 0
    for path in files:
        where = '%s %s' % (flag, path)
        try:
            rows += _scan_file(path, where, accumulator)
        except UnicodeDecodeError:
            raise UserInputError('%s: not UTF-8 text; expected a CSV file' % where) from None
        except tf.errors.OpError as e:
            raise UserInputError('%s: %s' % (where, first_line(e))) from None
    return DataSummary(files=files, rows=rows, stats=accumulator.stats())


def _scan_file(path, where, accumulator):
    """Checks one file line by line, as TensorFlow reads it; returns its row count."""
    rows = number = 0
    with tf.io.gfile.GFile(path, 'rb') as f:
        for number, line in _lines(f, where):
            if number == 1:  # TensorFlow skips the header line, byte order mark and all
                line = line[1:] if line.startswith(safe_io.BOM) else line
            fields = _split_line(line, where, number)
            if number == 1:
                _check_header(fields, where)
                continue
            if len(fields) != len(schema.COLUMNS):
                raise UserInputError('%s line %d: %s; expected %d (%s)' % (
                    where, number, '%d fields' % len(fields) if fields else 'empty line',
                    len(schema.COLUMNS), schema.HEADER_LINE))
            for column, text in zip(schema.COLUMNS, fields):
                try:
                    value = schema.parse_value(column, text)
                except ValueError as e:
                    raise UserInputError('%s line %d, column %s: %s'
                                         % (where, number, column, e)) from None
                if column in schema.FLOAT_FEATURES and value == value:
                    accumulator.add(column, value)
            rows += 1
    if number == 0:
        raise UserInputError('%s is empty; expected the header line %s and data rows'
                             % (where, schema.HEADER_LINE))
    if not rows:
        raise UserInputError('%s has a header but no data rows' % where)
    return rows


# A taxi row is a few hundred characters; a longer line is not a row of the
# layout, and is refused before it is held in memory whole (a file without
# line breaks would be read into memory at once).
MAX_LINE_CHARS = 1 << 16
_READ_BYTES = 1 << 20


def _lines(f, where):
    """(number, text) of each line of the binary file `f`, as TensorFlow splits them.

    TensorFlow's `TextLineDataset` ends lines at LF only and drops the CR of a
    CRLF; so does this. A file whose lines end in a CR alone is one long line
    for TensorFlow: it is refused with that reason, as is any line longer
    than `MAX_LINE_CHARS`.

    Raises:
      UnicodeDecodeError: the file is not UTF-8.
      UserInputError: CR-only line ends, or a line too long.
    """
    decoder = codecs.getincrementaldecoder('utf-8')()
    pending = ''
    number = 0
    while True:
        chunk = f.read(_READ_BYTES)
        pending += decoder.decode(chunk, final=not chunk)
        lines = pending.split('\n')
        pending = lines.pop()
        if not chunk and pending:
            lines.append(pending)
            pending = ''
        for line in lines:
            number += 1
            _check_length(line, where, number)
            yield number, line[:-1] if line.endswith('\r') else line
        _check_length(pending, where, number + 1)
        if not chunk:
            return


def _check_length(line, where, number):
    if number == 1 and '\r' in line[:-1]:  # the header has no quoted fields
        raise UserInputError(
            '%s line %d: lines end in a carriage return alone (CR, as old Mac programs '
            'wrote them), but TensorFlow\'s CSV reader ends lines at line feeds (LF) '
            'only; convert the line ends, e.g. with tr \'\\r\' \'\\n\''
            % (where, number))
    if len(line) > MAX_LINE_CHARS:
        raise UserInputError('%s line %d is longer than %d characters; a row of the taxi '
                             'layout has %d short fields (is this the right file?)'
                             % (where, number, MAX_LINE_CHARS, len(schema.COLUMNS)))


# A CSV line as TensorFlow's decode_csv accepts it: fields are bare (no quotes,
# no line breaks) or enclosed in double quotes with inner quotes doubled.
_FIELD = r'(?:"(?:[^"]|"")*"|[^",\r\n]*)'
_CSV_LINE = re.compile(r'%s(?:,%s)*\Z' % (_FIELD, _FIELD))


def _split_line(text, where, number):
    """The fields of one line (rows never span lines: TensorFlow reads by line)."""
    if not _CSV_LINE.match(text):
        raise UserInputError(
            '%s line %d: malformed CSV quoting; a field with a comma or a double quote '
            'must be enclosed in double quotes, with inner quotes doubled, and rows '
            'cannot span lines' % (where, number))
    try:
        return next(csv.reader([text]), [])
    except csv.Error as e:  # e.g. a field beyond csv.field_size_limit()
        raise UserInputError('%s line %d: %s' % (where, number, e)) from None


def _check_header(header, where):
    if tuple(header) == schema.COLUMNS:
        return
    expected = 'expected the header %s' % schema.HEADER_LINE
    if len(header) == len(schema.COLUMNS) and header[0] in ('0', '1'):
        raise UserInputError('%s line 1: no header line; %s' % (where, expected))
    problems = []
    missing = [c for c in schema.COLUMNS if c not in header]
    extra = [c for c in header if c not in schema.COLUMNS]
    duplicate = sorted({c for c in header if header.count(c) > 1})
    if missing:
        problems.append('missing column%s %s' % (_plural(missing), ', '.join(missing)))
    if extra:
        problems.append('unexpected column%s %s' % (_plural(extra), ', '.join(map(repr, extra))))
    if duplicate:
        problems.append('repeated column%s %s' % (_plural(duplicate), ', '.join(duplicate)))
    if not problems:
        problems.append('columns in a different order')
    raise UserInputError('%s line 1: %s; %s' % (where, '; '.join(problems), expected))


def _plural(items):
    return 's' if len(items) > 1 else ''


def make_input_fn(files, batch_size, *, training, seed=None):
    """Estimator input_fn over validated CSV files.

    Rows are read as text lines, shuffled and batched, and each batch is
    parsed by one vectorised `decode_csv`: about 10x the rows/sec of parsing
    row by row with `CsvDataset`, which was as slow as training itself
    (benchmarks/RESULTS.md). Training files of at most `CACHE_BYTES` in all are
    held in memory as one tensor of lines that every epoch is permuted whole
    and sliced into batches (the last one partial), which costs per batch, not
    per row; larger ones stream through a `SHUFFLE_BUFFER`-row shuffle. Rows
    never span lines: `scan` checks every line as `decode_csv` will read it.

    Args:
      files: paths from `scan` (each with a header line).
      batch_size: examples per batch.
      training: shuffle and repeat forever (the step target ends training);
        else read every row once, in order.
      seed: shuffle seed; with one, files are also read in a fixed order
        (None: nondeterministic, the fastest).
    """
    files = list(files)
    cache = sum(tf.io.gfile.stat(f).length for f in files) <= CACHE_BYTES

    def input_fn():
        defaults = [_csv_default(c) for c in schema.COLUMNS]
        dataset = tf.data.Dataset.from_tensor_slices(files)
        if training:
            dataset = dataset.shuffle(len(files), seed=seed)
        # Files are read in parallel in chunks of lines: a parallel interleave
        # of single lines costs more per line than parsing it (~40k lines/s).
        dataset = dataset.interleave(
            lambda f: tf.data.TextLineDataset(f).skip(1).batch(_CHUNK_LINES),
            cycle_length=min(len(files), 4), deterministic=not training or seed is not None,
            num_parallel_calls=tf.data.AUTOTUNE).unbatch()
        if training and cache:
            dataset = dataset.batch(_ALL_ROWS).cache().repeat().flat_map(
                lambda lines: _shuffled_batches(lines, batch_size, seed))
        else:
            if training:
                dataset = dataset.shuffle(SHUFFLE_BUFFER, seed=seed).repeat()
            dataset = dataset.batch(batch_size)
        dataset = dataset.map(
            lambda lines: _features_and_label(*tf.io.decode_csv(lines, defaults)),
            num_parallel_calls=tf.data.AUTOTUNE)
        return dataset.prefetch(tf.data.AUTOTUNE)

    return input_fn


def _shuffled_batches(lines, batch_size, seed):
    """One epoch: `lines` in a fresh random order, in batches of `batch_size`."""
    lines = tf.random.shuffle(lines, seed=seed)
    count = (tf.size(lines, out_type=tf.int64) + batch_size - 1) // batch_size
    return tf.data.Dataset.range(count).map(
        lambda i: lines[i * batch_size:(i + 1) * batch_size])


def _csv_default(column):
    """CsvDataset/decode_csv default. The label is required. Labels and integer
    categories are read as floats (so '8' and '8.0' both parse, as `scan`
    accepts) and converted to integers afterwards."""
    what = schema.kind(column)
    if what == 'label':
        return tf.constant([], tf.float32)
    if what == 'string':
        return tf.constant([schema.MISSING_STRING])
    return tf.constant([schema.MISSING_FLOAT], tf.float32)


def _features_and_label(*columns):
    values = dict(zip(schema.COLUMNS, columns))
    label = tf.cast(values.pop(schema.LABEL), tf.int32)
    return _model_features(values), label


def _model_features(values):
    """Converts decoded CSV columns to the model's dtypes (int categories to
    int64, NaN to the -1 that feature columns ignore)."""
    result = dict(values)
    for column in schema.INT_FEATURES:
        x = values[column]
        result[column] = tf.where(tf.math.is_nan(x),
                                  tf.constant(schema.MISSING_INT, tf.int64),
                                  tf.cast(x, tf.int64))
    return result


def _serving_dtype(column):
    return {'float': tf.float32, 'int': tf.int64, 'string': tf.string}[schema.kind(column)]


def json_serving_input_fn():
    """One input per feature, shape [batch]: float32, int64 or string."""
    inputs = {c: tf.compat.v1.placeholder(_serving_dtype(c), [None], name=c)
              for c in schema.FEATURES}
    return tf.estimator.export.ServingInputReceiver(dict(inputs), inputs)


def csv_serving_input_fn():
    """One string input `csv_row`: the features in `schema.FEATURES` order."""
    rows = tf.compat.v1.placeholder(tf.string, [None], name=CSV_INPUT)
    columns = tf.io.decode_csv(rows, [_csv_default(c) for c in schema.FEATURES])
    return tf.estimator.export.ServingInputReceiver(
        _model_features(dict(zip(schema.FEATURES, columns))), {CSV_INPUT: rows})


def example_serving_input_fn():
    """One string input `examples`: serialized tf.train.Example protos."""
    serialized = tf.compat.v1.placeholder(tf.string, [None], name=EXAMPLE_INPUT)
    spec = {c: tf.io.FixedLenFeature([], _serving_dtype(c), schema.missing_value(c))
            for c in schema.FEATURES}
    return tf.estimator.export.ServingInputReceiver(
        tf.io.parse_example(serialized, spec), {EXAMPLE_INPUT: serialized})


SERVING_INPUT_FNS = {
    'JSON': json_serving_input_fn,
    'CSV': csv_serving_input_fn,
    'EXAMPLE': example_serving_input_fn,
}
