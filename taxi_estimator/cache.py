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
the step again into an empty directory. The cache's format is `input`'s,
which writes (`input.write_cache`) and reads it.
"""
import argparse
from typing import Optional, Sequence

from estimator_trainers import errors
from estimator_trainers import flags
from estimator_trainers import logs

DEFAULT_SHARDS = 16


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser: argparse.ArgumentParser = flags.make_parser('python -m taxi_estimator.cache',
                                                        __doc__.split('\n')[0])
    parser.add_argument('--files', type=flags.path, nargs='+', required=True,
                        help='CSV files or globs, local or gs://, in the layout of the '
                             'data step (header line first).')
    parser.add_argument('--out-dir', type=flags.path, required=True,
                        help='New or empty directory, local or gs://, for the cache.')
    parser.add_argument('--shards', type=flags.positive_int, default=DEFAULT_SHARDS,
                        help='Files the rows are spread over (read in parallel while '
                             'training).')
    return parser.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = logs.start_tool(parse_args, argv)
    # Flags are parsed without TensorFlow (an instant --help); the work needs it.
    from taxi_estimator import input as input_lib  # pylint: disable=g-import-not-at-top
    input_lib.write_cache(args.files, args.out_dir, args.shards)
    return 0


if __name__ == '__main__':
    errors.run_cli(main)
