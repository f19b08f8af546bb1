"""Reading taxi trip CSVs: validation up front, tf.data input, serving inputs.

`scan` reads every training/eval file once before anything is written to
the job-dir: a wrong header, a row with too few or too many fields, a
non-numeric number or an out-of-range category stops the run with one line
naming the flag, file, line and column (TensorFlow's CSV reader would fail
mid-training with neither). The same pass counts the rows and computes the
normalisation statistics of the training files. Files are checked in chunks
of lines by TensorFlow ops first (about 50x the rows/sec of checking each
field in Python, which took minutes for millions of rows); a file in which
anything looks wrong is checked again line by line in Python, which names
the problem. A cache directory (`taxi_estimator.cache`) was checked when it
was written: its record gives the rows and statistics.

The serving input functions accept the same features in three encodings
(`--serving-export-format`): JSON (one typed input per feature), CSV (one
`csv_row` string in `schema.FEATURES` order) and EXAMPLE (one serialized
`tf.train.Example` per instance, input `examples`).
"""
from __future__ import annotations

import codecs
import csv
import dataclasses
import json
import os
import re
import shlex
import time
from typing import (Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Sized,
                    Tuple, TypedDict, TypeVar, Union, cast)

import tensorflow as tf

from estimator_trainers import safe_io
from estimator_trainers import user_files
from estimator_trainers.errors import first_line
from estimator_trainers.errors import UserInputError
from taxi_estimator import features as features_lib
from taxi_estimator import schema
from taxi_estimator import trainer

BLOCK_BYTES = 1 << 18  # bytes of a CSV file read, split into lines and parsed together
SHUFFLE_ROWS = 1 << 16  # rows a streaming window permutes (memory stays flat)
_READ_PARALLEL = 8  # files read at once
_MAX_SHARDS = 1 << 16
_ALL_ROWS = 1 << 62
_GATHER_BATCHES = 64  # in-memory batches gathered by one tf.data element
CSV_INPUT = 'csv_row'
EXAMPLE_INPUT = 'examples'


CACHE_RECORD = 'taxi_cache.json'  # marks a complete cache directory
CACHE_FORMAT = 1
_SCAN_BLOCK_BYTES = 1 << 20  # bytes of lines checked together by the fast path
FAST_SCAN_BYTES = 16 << 20  # files at least this large in all are checked by ops first

Features = features_lib.Features
# An Estimator input_fn: the dataset of (features, label) batches it builds.
InputFn = Callable[[], tf.data.Dataset]
_F = TypeVar('_F', bound=Callable[..., Any])


def _do_not_convert(function: _F) -> _F:
    """`tf.autograph.experimental.do_not_convert`, keeping `function`'s type
    (TensorFlow's decorator is untyped)."""
    return cast(_F, tf.autograph.experimental.do_not_convert(function))


class CacheRecord(TypedDict):
    """What `taxi_cache.json` holds."""
    format: int
    rows: int
    stats: features_lib.Stats
    sources: List[str]
    shards: int


@dataclasses.dataclass(frozen=True)
class DataSummary:
    """What `scan` learned about a set of CSV files, or a cache directory.

    Attributes:
      files: the matched paths, in reading order (a cache: its directory).
      rows: number of data rows (header lines excluded).
      stats: {float feature: {'mean', 'std'}} over the non-missing values.
      cache: `files` is one cache directory of `taxi_estimator.cache`.
    """
    files: Tuple[str, ...]
    rows: int
    stats: features_lib.Stats
    cache: bool = False


def is_cache(path: str) -> bool:
    """True when `path` is a directory written by `taxi_estimator.cache`."""
    return bool(tf.io.gfile.exists(path.rstrip('/') + '/' + CACHE_RECORD))


def read_cache_record(path: str, flag: str = '--train-files') -> Dict[str, Any]:
    """The record of a cache directory: {'rows', 'stats', 'sources', ...}.

    Raises:
      UserInputError: naming `flag` and the record when it is not one
        `write_cache` writes (read within `user_files.SMALL`: a few hundred bytes).
    """
    record_path = path.rstrip('/') + '/' + CACHE_RECORD
    record = user_files.read_json(record_path, '%s %s' % (flag, record_path), flag=flag)
    rows = record.get('rows') if isinstance(record, dict) else None
    if (record.get('format') if isinstance(record, dict) else None) != CACHE_FORMAT or \
            isinstance(rows, bool) or not isinstance(rows, int) or rows < 0:
        raise UserInputError('%s %s: not a cache record of taxi_estimator.cache (expected '
                             '{"format": %d, "rows": N, "stats": {...}}); write the cache '
                             'again' % (flag, record_path, CACHE_FORMAT), flag=flag,
                             path=record_path)
    return cast(Dict[str, Any], record)  # a JSON object, as checked


def write_cache(patterns: Sequence[str], out_dir: str, shards: int,
                flag: str = '--files') -> CacheRecord:
    """Checks the CSV files `patterns` match and writes their cache into `out_dir`
    (the data step `taxi_estimator.cache`).

    Returns:
      The cache's record (what `taxi_cache.json` holds).

    Raises:
      UserInputError: a bad file (as `scan`), a cache given as input,
        or an `out_dir` that is not empty.
    """
    if tf.io.gfile.exists(out_dir) and tf.io.gfile.listdir(out_dir):
        raise UserInputError('--out-dir %s is not empty; give a new or empty directory'
                             % out_dir, flag='--out-dir', path=out_dir)
    started = time.time()
    summary = scan(patterns, flag)
    if summary.cache:
        raise UserInputError('%s %s is a cache already; give its CSV files'
                             % (flag, summary.files[0]), flag=flag)
    tf.compat.v1.logging.info('Checked %d rows in %d file(s) in %.1fs', summary.rows,
                              len(summary.files), time.time() - started)
    # Only the columns: ids derived from them are computed when read.
    chunks = parsed_chunks(list(summary.files), for_model=False).enumerate()
    chunks.save(out_dir, shard_func=lambda index, chunk: index % shards)
    record: CacheRecord = {'format': CACHE_FORMAT, 'rows': summary.rows,
                           'stats': summary.stats, 'sources': list(summary.files),
                           'shards': shards}
    with tf.io.gfile.GFile(os.path.join(out_dir, CACHE_RECORD), 'w') as f:
        f.write(json.dumps(record, indent=2, sort_keys=True))
    tf.compat.v1.logging.info('Wrote %d rows in %d shards to %s in %.1fs; train with '
                              '--train-files %s', summary.rows, shards, out_dir,
                              time.time() - started, shlex.quote(out_dir))
    return record


def resolve_files(patterns: Sequence[str], flag: str) -> Tuple[str, ...]:
    """Expands local or gs:// paths and globs, keeping their order.

    Raises:
      UserInputError: a pattern matches nothing, or matches a directory.
    """
    files: List[str] = []
    for pattern in patterns:
        try:
            matches = sorted(tf.io.gfile.glob(pattern))
        except tf.errors.OpError as e:
            raise UserInputError('%s %s: %s' % (flag, pattern, first_line(e))) from None
        if not matches:
            raise UserInputError('%s %s: no file matches this path' % (flag, pattern))
        for path in matches:
            if tf.io.gfile.isdir(path) and is_cache(path):
                if files or len(patterns) > 1 or len(matches) > 1:
                    raise UserInputError('%s %s: a cache directory is the whole data set; '
                                         'give it alone' % (flag, path), flag=flag)
                return (path,)
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


def scan(patterns: Sequence[str], flag: str) -> DataSummary:
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
    if is_cache(files[0]):
        record = read_cache_record(files[0], flag)
        return DataSummary(files=files, rows=record['rows'], cache=True,
                           stats=features_lib.check_stats(record['stats'], '%s %s' % (
                               flag, files[0])))
    accumulator = features_lib.StatsAccumulator()
    rows = 0
    checked = _fast_scan(files, flag)
    for path in files:
        where = '%s %s' % (flag, path)
        if path in checked:
            file_rows, file_stats = checked[path]
            rows += file_rows
            accumulator.merge(file_stats)
            continue
        try:
            rows += _scan_file(path, where, accumulator)
        except UnicodeDecodeError:
            raise UserInputError('%s: not UTF-8 text; expected a CSV file' % where) from None
        except tf.errors.OpError as e:
            raise UserInputError('%s: %s' % (where, first_line(e))) from None
    return DataSummary(files=files, rows=rows, stats=accumulator.stats())


def _fast_scan(files: Sequence[str],
               flag: str) -> Dict[str, Tuple[int, features_lib.StatsAccumulator]]:
    """{path: (rows, StatsAccumulator)} of the files TensorFlow ops found valid.

    `_scan_file`'s check on chunks of lines: it accepts only what
    `_scan_file` accepts (the header, UTF-8, quoting, 17 fields, the label,
    number formats, finite numbers in range, whole-number categories in
    range); any other file, or one it cannot read, is left out for
    `_scan_file`, which names the problem. Below `FAST_SCAN_BYTES` in all,
    the files are only checked line by line: starting the ops costs more.
    """
    try:
        sizes = {path: tf.io.gfile.stat(path).length for path in files}
    except tf.errors.OpError:
        return {}
    if sum(sizes.values()) < FAST_SCAN_BYTES:
        return {}
    candidates = [path for path in files if _header_ok(path, flag)]
    if not candidates:
        return {}
    files_and_sizes = (candidates, tf.constant([sizes[path] for path in candidates], tf.int64))
    chunks = tf.data.Dataset.from_tensor_slices(files_and_sizes).enumerate().interleave(
        lambda index, file: _line_blocks(file[0], file[1], _SCAN_BLOCK_BYTES).map(
            lambda lines: (index, lines)),
        cycle_length=min(len(candidates), _READ_PARALLEL),
        num_parallel_calls=tf.data.AUTOTUNE, deterministic=False).map(
            lambda index, lines: (index,) + _checked_chunk(lines),
            num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)
    results = {path: (0, features_lib.StatsAccumulator()) for path in candidates}
    try:
        for index, ok, count, moments in chunks:
            path = candidates[int(index)]
            if path not in results:
                continue
            if not ok:
                del results[path]
                continue
            rows, accumulator = results[path]
            results[path] = (rows + int(count), accumulator)
            for column, (n, mean, m2) in zip(schema.FLOAT_FEATURES, moments.numpy()):
                accumulator.add_moments(column, int(n), mean, m2)
    except tf.errors.OpError:  # bad UTF-8, a wrong number of fields, ...: all line by line
        return {}
    return {path: result for path, result in results.items() if result[0]}


def _header_ok(path: str, flag: str) -> bool:
    """True when `path`'s header line is the layout's; `_scan_file` reports any other."""
    try:
        with tf.io.gfile.GFile(path, 'r') as f:
            header = f.readline()
    except (UnicodeDecodeError, tf.errors.OpError):
        return False
    header = header[1:] if header.startswith(safe_io.BOM) else header
    try:
        _check_header(_split_line(header.rstrip('\n').rstrip('\r'), flag, 1), flag)
    except UserInputError:
        return False
    return True


def _re2(pattern: re.Pattern[str]) -> str:
    """A Python pattern of this module or `schema` for RE2's full match."""
    return pattern.pattern.replace(r'\Z', '')


def _typed_line_pattern() -> str:
    """One line as `_scan_file` accepts it, field by field (RE2).

    The label is 0 or 1, numbers and whole numbers have the formats `schema`
    accepts (or are empty), any field may be quoted; text is any CSV field.
    """
    def optional(text: str) -> str:
        return '(?:(?:%s)|"(?:%s)"|"")?' % (text, text)
    label = r'(?:[01](?:\.0)?|"[01](?:\.0)?")'
    fields = []
    for column in schema.COLUMNS:
        kind = schema.kind(column)
        fields.append(label if kind == 'label' else
                      optional(_re2(schema.FLOAT_TEXT)) if kind == 'float' else
                      optional(_re2(schema.INT_TEXT)) if kind == 'int' else _FIELD)
    return ','.join(fields)


_NUMBERS = schema.FLOAT_FEATURES + tuple(schema.INT_FEATURES)


@_do_not_convert
def _checked_chunk(lines: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """(all rows valid, row count, [float feature] x (count, mean, m2)) of a chunk."""
    # UTF-8: lines beyond ASCII are decoded strictly (an error: line by line).
    ascii_only = tf.strings.regex_full_match(lines, r'[\x00-\x7f]*')
    decoded = tf.strings.unicode_transcode(tf.boolean_mask(lines, ~ascii_only), 'UTF-8',
                                           'UTF-8', errors='strict')
    ok = tf.equal(tf.size(decoded), tf.reduce_sum(tf.cast(~ascii_only, tf.int32)))
    ok &= tf.reduce_all(tf.strings.regex_full_match(lines, _TYPED_LINE))
    # `_check_length` counts a CRLF's CR too: a line of the limit itself is left to it.
    ok &= tf.reduce_all(tf.strings.length(lines, unit='UTF8_CHAR') < MAX_LINE_CHARS)
    indices = sorted(schema.COLUMNS.index(c) for c in _NUMBERS)
    columns = dict(zip([schema.COLUMNS[i] for i in indices], tf.io.decode_csv(
        lines, [[''] for _ in indices], select_cols=indices)))
    moments = []
    for column in _NUMBERS:
        text = columns[column]
        present = tf.not_equal(text, schema.MISSING_STRING)
        value = tf.strings.to_number(tf.where(present, text, '0'), tf.float64)
        low, high = (schema.INT_FEATURES.get(column) or schema.FLOAT_RANGES[column])
        ok &= tf.reduce_all((tf.math.is_finite(value) & (value >= low) & (value <= high))
                            | ~present)
        if column in schema.FLOAT_FEATURES:
            values = tf.boolean_mask(value, present)
            count = tf.cast(tf.size(values), tf.float64)
            mean = tf.math.divide_no_nan(tf.reduce_sum(values), count)
            moments.append(tf.stack([count, mean, tf.reduce_sum((values - mean) ** 2)]))
    return ok, tf.size(lines), tf.stack(moments)


def _scan_file(path: str, where: str, accumulator: features_lib.StatsAccumulator) -> int:
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
                    accumulator.add(column, float(value))
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
_MAX_LINE_BYTES = 4 * MAX_LINE_CHARS  # UTF-8: a longer line has too many characters
_READ_BYTES = 1 << 20


def _lines(f: tf.io.gfile.GFile, where: str) -> Iterator[Tuple[int, str]]:
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


def _check_length(line: str, where: str, number: int) -> None:
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
# A line field by field, for the fast check of `scan` (RE2 syntax).
_TYPED_LINE = _typed_line_pattern()


def _split_line(text: str, where: str, number: int) -> List[str]:
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


def _check_header(header: Sequence[str], where: str) -> None:
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


def _plural(items: Sized) -> str:
    return 's' if len(items) > 1 else ''


def make_input_fn(files: Sequence[str], batch_size: int, *, training: bool,
                  seed: Optional[int] = None,
                  in_memory_mb: int = trainer.DEFAULT_MAX_IN_MEMORY_MB,
                  rows: Optional[int] = None) -> InputFn:
    """Estimator input_fn over validated CSV files.

    Files are read in parallel (`_READ_PARALLEL` at a time, local or gs://)
    in blocks of `BLOCK_BYTES`, and the lines of each block are parsed by one
    vectorised `decode_csv`, on tf.data's threads: parsing row by row with
    `CsvDataset` was as slow as training itself (benchmarks/RESULTS.md).
    Rows never span lines: `scan` checks every line as `decode_csv` will
    read it.

    Training repeats forever (the step target ends training), in one of two
    ways, both costing per batch rather than per row:
    - files of at most `in_memory_mb` in all are parsed once and held in
      memory as columns; every epoch is a fresh permutation of all rows,
      sliced into batches (the last one partial);
    - larger ones stream: each epoch reads the files in a fresh order, and
      every `SHUFFLE_ROWS` consecutive rows (or all `rows`, when fewer) are
      permuted before being cut into batches, so memory stays flat however
      large the files are.

    Args:
      files: paths from `scan` (each with a header line).
      batch_size: examples per batch.
      training: shuffle and repeat forever (the step target ends training);
        else read every row once, in order.
      seed: shuffle seed; with one, files are also read in a fixed order
        (None: nondeterministic, the fastest).
      in_memory_mb: `--max-in-memory-mb`.
      rows: the files' rows where `scan` counted them: a streaming window
        holds at most that many (a window larger than the data would read
        it many times over before the first batch: 65 epochs of 1000 rows,
        half a minute on gs://).
    """
    files = list(files)
    cache = len(files) == 1 and is_cache(files[0])
    sizes = None if cache else [tf.io.gfile.stat(f).length for f in files]
    in_memory = (training and sizes is not None and in_memory_mb > 0
                 and sum(sizes) <= in_memory_mb * 2 ** 20)

    def input_fn() -> tf.data.Dataset:
        chunks = (cached_chunks(files[0], training, seed) if cache
                  else parsed_chunks(files, training, seed, sizes=sizes))
        if not training:
            return chunks.rebatch(batch_size).prefetch(tf.data.AUTOTUNE)
        if in_memory:
            # All rows as one element of columns (rebatch: no tensor per row
            # on the way, which took twice the memory); each epoch's batches
            # are prefetched a group at a time (`_shuffled_batches`).
            batches = chunks.rebatch(_ALL_ROWS).cache().repeat().flat_map(
                lambda features, label: _shuffled_batches(features, label, batch_size,
                                                          seed))
            # The batches' gathers get a thread of their own: on the session's
            # one inter-op thread they queued behind the training step
            # instead of using the other core (~1.09x examples/sec, 1.08x per
            # CPU-second: benchmarks/RESULTS.md, taxi).
            return batches.with_options(_private_threads(1))
        # Each window's rows in a fresh order, handed over a group at a time
        # as in memory (`_shuffled_groups`).
        window = min(SHUFFLE_ROWS, rows) if rows else SHUFFLE_ROWS
        batches = chunks.repeat().rebatch(window).flat_map(
            lambda features, label: _shuffled_groups(features, label, batch_size, seed)
        ).prefetch(1).rebatch(batch_size)
        if cache:
            return batches
        # Streamed CSV is parsed on threads of its own, one per core but the
        # one the training step runs on (taxi's one intra-op and one inter-op
        # thread): on tf.data's shared pool, one thread per core, parsing
        # competed with the step (on 2 cores 1.4x rows/sec, 1.2x per
        # CPU-second: benchmarks/RESULTS.md §9). The cache, unparsed, lost.
        return batches.with_options(_private_threads(max(1, (os.cpu_count() or 1) - 1)))

    return input_fn


def _private_threads(count: int) -> tf.data.Options:
    """Options giving a dataset `count` threads of its own, off tf.data's shared pool."""
    options = tf.data.Options()
    options.threading.private_threadpool_size = count
    return options


def parsed_chunks(files: Sequence[str], training: bool = False, seed: Optional[int] = None,
                  for_model: bool = True,
                  sizes: Optional[Sequence[int]] = None) -> tf.data.Dataset:
    """(features, label) of the rows of a block of `BLOCK_BYTES` of CSV each.

    The features are the model's (`features_lib.model_inputs`), or with
    `for_model=False` the columns as parsed (what a cache keeps). `sizes`:
    the files' lengths in bytes where the caller has them (else each file is
    stat'ed: a request per file on gs://).

    In training the files are read in a fresh order per epoch, several at
    once, blocks as they come (in a fixed order with a `seed`); else in order.
    """
    ordered = not training or seed is not None
    defaults = [_csv_default(c) for c in schema.COLUMNS]
    sizes = tf.constant(sizes or [tf.io.gfile.stat(f).length for f in files], tf.int64)
    if len(files) == 1:
        # No interleave: its threads cost every evaluation's new iterator ~60
        # ms, half the taxi default run's evaluation.
        dataset = _line_blocks(files[0], sizes[0])
    else:
        dataset = tf.data.Dataset.from_tensor_slices((files, sizes))
        if training:
            dataset = dataset.shuffle(len(files), seed=seed)
        dataset = dataset.interleave(
            _line_blocks, cycle_length=min(len(files), _READ_PARALLEL),
            deterministic=ordered, num_parallel_calls=tf.data.AUTOTUNE)
    return dataset.map(
        tf.autograph.experimental.do_not_convert(
            lambda lines: _features_and_label(*tf.io.decode_csv(lines, defaults),
                                              for_model=for_model)),
        num_parallel_calls=tf.data.AUTOTUNE, deterministic=ordered)


@_do_not_convert
def _line_blocks(path: Union[str, tf.Tensor], size: tf.Tensor,
                 block_bytes: int = BLOCK_BYTES) -> tf.data.Dataset:
    """The lines after the header of the file `path` of `size` bytes, a vector per
    block of `block_bytes` read (the lines that end in it).

    Lines are split as `TextLineDataset` splits them (at LF, every CR
    dropped; the last one may lack its LF); empty lines are kept, for the
    checks. Reading an element per line, as `TextLineDataset` does, took as
    much CPU as parsing the lines (benchmarks/RESULTS.md §9).
    """
    whole = size - size % block_bytes
    blocks = tf.data.FixedLengthRecordDataset(path, block_bytes, footer_bytes=size - whole)
    rest = tf.data.FixedLengthRecordDataset(path, tf.maximum(size - whole, 1),
                                            header_bytes=whole)
    # (bytes, last): a last empty block flushes a final line without its LF.
    blocks = blocks.concatenate(rest).map(lambda block: (block, False)).concatenate(
        tf.data.Dataset.from_tensors((tf.constant(''), True)))

    def split(state: Tuple[tf.Tensor, tf.Tensor], block: Tuple[tf.Tensor, tf.Tensor]
              ) -> Tuple[Tuple[tf.Tensor, tf.Tensor], tf.Tensor]:
        pending, header = state
        text, last = block
        # The raw op: `tf.strings.split` adds ~55 ops of ragged bookkeeping, which
        # every evaluation's new iterator instantiates again.
        parts = tf.raw_ops.StringSplitV2(
            input=tf.reshape(pending + tf.strings.regex_replace(text, '\r', ''), [1]),
            sep='\n').values
        pending = parts[-1]
        # A line too long for `scan` (no LF in sight) is cut, not held whole.
        flush = ((last & tf.not_equal(pending, ''))
                 | (tf.strings.length(pending) > _MAX_LINE_BYTES))
        lines = tf.concat([parts[:-1], tf.reshape(pending, [1])[:tf.cast(flush, tf.int32)]], 0)
        count = tf.size(lines, out_type=tf.int64)
        return ((tf.where(flush, '', pending), tf.maximum(header - count, 0)),
                lines[tf.minimum(header, count):])

    return blocks.scan((tf.constant(''), tf.constant(1, tf.int64)), split).filter(
        lambda lines: tf.size(lines) > 0)


def cached_chunks(directory: str, training: bool = False,
                  seed: Optional[int] = None) -> tf.data.Dataset:
    """`parsed_chunks` as `taxi_estimator.cache` saved them in `directory`.

    In training the shards are read in a fresh order per epoch, several at
    once (chunks in a fixed order with a `seed`).
    """
    ordered = not training or seed is not None

    def reader(shards: tf.data.Dataset) -> tf.data.Dataset:
        if training:
            shards = shards.shuffle(_MAX_SHARDS, seed=seed)
        return shards.interleave(lambda shard: shard, cycle_length=_READ_PARALLEL,
                                 num_parallel_calls=tf.data.AUTOTUNE,
                                 deterministic=ordered)
    return tf.data.Dataset.load(directory, reader_func=reader).map(
        lambda index, chunk: (features_lib.model_inputs(chunk[0]), chunk[1]),
        num_parallel_calls=tf.data.AUTOTUNE, deterministic=ordered)


def _rows(features: Features, label: tf.Tensor,
          indices: tf.Tensor) -> Tuple[Features, tf.Tensor]:
    return {k: tf.gather(v, indices) for k, v in features.items()}, tf.gather(label, indices)


@_do_not_convert
def _shuffled_batches(features: Features, label: tf.Tensor, batch_size: int,
                      seed: Optional[int]) -> tf.data.Dataset:
    """One epoch: all rows in a fresh random order, in batches of `batch_size`
    (the last one partial), a group prefetched ahead (`_shuffled_groups`)."""
    return _shuffled_groups(features, label, batch_size, seed).prefetch(1).rebatch(
        batch_size)


@_do_not_convert
def _shuffled_groups(features: Features, label: tf.Tensor, batch_size: int,
                     seed: Optional[int]) -> tf.data.Dataset:
    """The rows in a fresh random order, `_GATHER_BATCHES` batches per element.

    The rows of a group are gathered at once, on the pipeline's thread, and
    cut into batches as they are taken (`rebatch` after a `prefetch(1)`): a
    tf.data element per batch, each handed from thread to thread, cost more
    than its gather (the in-memory pipeline alone delivered ~2x the examples
    per CPU-second grouped, and another 1.3x with the hand-over per group:
    benchmarks/RESULTS.md, #33). The batches are the same either way.
    """
    rows = tf.size(label, out_type=tf.int64)
    order = tf.random.shuffle(tf.range(rows), seed=seed)
    group = batch_size * _GATHER_BATCHES
    count = (rows + group - 1) // group
    return tf.data.Dataset.range(count).map(
        tf.autograph.experimental.do_not_convert(
            lambda i: _rows(features, label, order[i * group:(i + 1) * group])))


def _csv_default(column: str) -> tf.Tensor:
    """CsvDataset/decode_csv default. The label is required. Labels and integer
    categories are read as floats (so '8' and '8.0' both parse, as `scan`
    accepts) and converted to integers afterwards."""
    what = schema.kind(column)
    if what == 'label':
        return tf.constant([], tf.float32)
    if what == 'string':
        return tf.constant([schema.MISSING_STRING])
    return tf.constant([schema.MISSING_FLOAT], tf.float32)


def _features_and_label(*columns: tf.Tensor,
                        for_model: bool = True) -> Tuple[Features, tf.Tensor]:
    """The model's inputs (`features_lib.model_inputs`, computed here on tf.data's
    threads, once for data held in memory), or with `for_model=False` the typed
    columns, and the int label."""
    values = dict(zip(schema.COLUMNS, columns))
    label = tf.cast(values.pop(schema.LABEL), tf.int32)
    features = _model_features(values)
    return (features_lib.model_inputs(features) if for_model else features), label


def _model_features(values: Mapping[str, tf.Tensor]) -> Features:
    """Converts decoded CSV columns to the model's dtypes (int categories to
    int64, NaN to the -1 that feature columns ignore)."""
    result = dict(values)
    for column in schema.INT_FEATURES:
        x = values[column]
        result[column] = tf.where(tf.math.is_nan(x),
                                  tf.constant(schema.MISSING_INT, tf.int64),
                                  tf.cast(x, tf.int64))
    return result


def _serving_dtype(column: str) -> tf.dtypes.DType:
    return {'float': tf.float32, 'int': tf.int64, 'string': tf.string}[schema.kind(column)]


def json_serving_input_fn() -> tf.estimator.export.ServingInputReceiver:
    """One input per feature, shape [batch]: float32, int64 or string."""
    inputs = {c: tf.compat.v1.placeholder(_serving_dtype(c), [None], name=c)
              for c in schema.FEATURES}
    return tf.estimator.export.ServingInputReceiver(dict(inputs), inputs)


def csv_serving_input_fn() -> tf.estimator.export.ServingInputReceiver:
    """One string input `csv_row`: the features in `schema.FEATURES` order."""
    rows = tf.compat.v1.placeholder(tf.string, [None], name=CSV_INPUT)
    columns = tf.io.decode_csv(rows, [_csv_default(c) for c in schema.FEATURES])
    return tf.estimator.export.ServingInputReceiver(
        _model_features(dict(zip(schema.FEATURES, columns))), {CSV_INPUT: rows})


def example_serving_input_fn() -> tf.estimator.export.ServingInputReceiver:
    """One string input `examples`: serialized tf.train.Example protos."""
    serialized = tf.compat.v1.placeholder(tf.string, [None], name=EXAMPLE_INPUT)
    spec = {c: tf.io.FixedLenFeature([], _serving_dtype(c), schema.missing_value(c))
            for c in schema.FEATURES}
    return tf.estimator.export.ServingInputReceiver(
        tf.io.parse_example(serialized, spec), {EXAMPLE_INPUT: serialized})


# `--serving-export-format` -> the serving input function of the export.
SERVING_INPUT_FNS: Dict[trainer.ExportFormat,
                        Callable[[], tf.estimator.export.ServingInputReceiver]] = {
    'JSON': json_serving_input_fn,
    'CSV': csv_serving_input_fn,
    'EXAMPLE': example_serving_input_fn,
}
