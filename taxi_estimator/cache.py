"""Data step for taxi data larger than memory: a cache of parsed rows.

    python -m taxi_estimator.cache --files 'gs://BUCKET/trips/train-*.csv' \
        --out-dir gs://BUCKET/trips/train-cache [--shards 16]

Checks every row as the trainer does (one `error:` line naming the file,
line and column of the first problem), then writes the rows, parsed, in
`--shards` files of TensorFlow's dataset format (`tf.data.Dataset.save`) and,
last, `taxi_cache.json`: the row count, the normalisation statistics and the
source files. Train on it with `--train-files OUT_DIR` (`--eval-files`
takes one too): no CSV is parsed again, so a streamed epoch costs about what
an epoch held in memory does, where streaming CSV pays the parsing every
epoch (benchmarks/RESULTS.md), and the trainer's start-up check reads the
record instead of every row.

A directory without the record (an interrupted run) is not a cache: run
the step again into an empty directory.
"""
import json
import os
import time

from estimator_trainers import errors
from estimator_trainers import flags
from estimator_trainers import logs
from estimator_trainers.errors import UserInputError

FORMAT = 1
DEFAULT_SHARDS = 16


def write_cache(patterns, out_dir, shards, flag='--files'):
    """Checks the CSV files `patterns` match and writes their cache into `out_dir`.

    Returns:
      The cache's record (what `taxi_cache.json` holds).

    Raises:
      UserInputError: a bad file (as `input.scan`), a cache given as input,
        or an `out_dir` that is not empty.
    """
    # Here, not at the top: flags are parsed first, so --help is instant.
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    from taxi_estimator import features as features_lib  # pylint: disable=g-import-not-at-top
    from taxi_estimator import input as input_lib  # pylint: disable=g-import-not-at-top
    if tf.io.gfile.exists(out_dir) and tf.io.gfile.listdir(out_dir):
        raise UserInputError('--out-dir %s is not empty; give a new or empty directory'
                             % out_dir, flag='--out-dir', path=out_dir)
    started = time.time()
    summary = input_lib.scan(patterns, flag)
    if summary.cache:
        raise UserInputError('%s %s is a cache already; give its CSV files'
                             % (flag, summary.files[0]), flag=flag)
    tf.compat.v1.logging.info('Checked %d rows in %d file(s) in %.1fs', summary.rows,
                              len(summary.files), time.time() - started)
    # Only the columns: ids derived from them are computed when read.
    chunks = input_lib.parsed_chunks(list(summary.files)).map(
        lambda features, label: ({k: v for k, v in features.items()
                                  if k != features_lib.WIDE_IDS}, label)).enumerate()
    chunks.save(out_dir, shard_func=lambda index, chunk: index % shards)
    record = {'format': FORMAT, 'rows': summary.rows, 'stats': summary.stats,
              'sources': list(summary.files), 'chunk_rows': input_lib.CHUNK_ROWS,
              'shards': shards}
    with tf.io.gfile.GFile(os.path.join(out_dir, input_lib.CACHE_RECORD), 'w') as f:
        f.write(json.dumps(record, indent=2, sort_keys=True))
    tf.compat.v1.logging.info('Wrote %d rows in %d shards to %s in %.1fs; train with '
                              '--train-files %s', summary.rows, shards, out_dir,
                              time.time() - started, out_dir)
    return record


def parse_args(argv=None):
    parser = flags.make_parser('python -m taxi_estimator.cache', __doc__.split('\n')[0])
    parser.add_argument('--files', nargs='+', required=True,
                        help='CSV files or globs, local or gs://, in the layout of the '
                             'data step (header line first).')
    parser.add_argument('--out-dir', required=True,
                        help='New or empty directory, local or gs://, for the cache.')
    parser.add_argument('--shards', type=flags.positive_int, default=DEFAULT_SHARDS,
                        help='Files the rows are spread over (read in parallel while '
                             'training).')
    return parser.parse_args(argv)


def main(argv=None):
    logs.quiet_tensorflow_native_logs()
    args = parse_args(argv)
    logs.configure('INFO')
    write_cache(args.files, args.out_dir, args.shards)
    return 0


if __name__ == '__main__':
    errors.run_cli(main)
