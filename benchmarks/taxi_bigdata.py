"""Larger taxi data sets from the real trips, for the data-size benchmark.

    python -m benchmarks.taxi_bigdata --source taxi_trips_train.csv \
        --rows 10000000 --shards 16 --out-dir DIR [--seed 1]

Writes `--rows` rows in the layout of the data step, spread over `--shards`
files `trips-00000-of-00016.csv`, ... (each with the header line). Each row
is a trip of `--source` drawn at random, with jitter so that no two rows are
alike: trip miles, seconds and fare scaled by the same factor (5% spread,
kept inside the data step's cleaning bounds), coordinates moved by up to
about 200 m; categories, tracts and the label as drawn. The source and every
row pass the trainer's own check (`taxi_estimator.input.scan`).
"""
import argparse
import csv
import os
from typing import Dict, List, Optional, Sequence

import numpy as np
import numpy.typing as npt

from taxi_estimator import data as data_lib
from taxi_estimator import schema

_CHUNK = 100000
_COORDINATE_JITTER = 0.002  # degrees, about 200 m


# The drawn-from trips' columns: CSV text (categories, label) or floats (NaN: missing).
TextColumns = Dict[str, npt.NDArray[np.object_]]
NumberColumns = Dict[str, npt.NDArray[np.float64]]


def generate(source: str, rows: int, shards: int, out_dir: str, seed: int = 1) -> List[str]:
    """Writes the shards; returns their paths."""
    with open(source, newline='', encoding='utf-8-sig') as f:
        table = list(csv.DictReader(f))
    text = {c: np.array([_quoted(row[c]) for row in table], dtype=object)
            for c in schema.COLUMNS if c not in schema.FLOAT_FEATURES}
    numbers = {c: np.array([float(row[c]) if row[c] else np.nan for row in table])
               for c in schema.FLOAT_FEATURES}
    rng = np.random.default_rng(seed)
    os.makedirs(out_dir, exist_ok=True)
    paths = []
    for shard in range(shards):
        path = os.path.join(out_dir, 'trips-%05d-of-%05d.csv' % (shard, shards))
        count = rows // shards + (1 if shard < rows % shards else 0)
        with open(path + '.tmp', 'w', newline='') as f:
            f.write(schema.HEADER_LINE + '\n')
            for start in range(0, count, _CHUNK):
                f.write(_lines(text, numbers, len(table), rng, min(_CHUNK, count - start)))
        os.replace(path + '.tmp', path)
        paths.append(path)
    return paths


def _quoted(value: str) -> str:
    """A CSV field: quoted when it holds a comma or a double quote."""
    if ',' in value or '"' in value:
        return '"%s"' % value.replace('"', '""')
    return value


def _lines(text: TextColumns, numbers: NumberColumns, size: int, rng: np.random.Generator,
           count: int) -> str:
    """`count` jittered rows drawn from the source, as CSV text."""
    picks = rng.integers(0, size, count)
    scale = np.clip(rng.normal(1.0, 0.05, count), 0.8, 1.2)
    fields: List[List[str]] = []
    for column in schema.COLUMNS:
        if column in text:
            fields.append(text[column][picks].tolist())
            continue
        value = numbers[column][picks]
        if column in ('trip_miles', 'trip_seconds', 'fare'):
            high = {'trip_miles': data_lib.MAX_TRIP_MILES,
                    'trip_seconds': data_lib.MAX_TRIP_SECONDS}.get(column, schema.MAX_AMOUNT)
            value = np.clip(value * scale, 0.01, high)
        else:
            low, high = schema.FLOAT_RANGES[column]
            value = np.clip(value + rng.uniform(-_COORDINATE_JITTER, _COORDINATE_JITTER,
                                                 count), low, high)
        fields.append(['' if v != v else '%.6g' % v for v in value.tolist()])
    return ''.join(','.join(row) + '\n' for row in zip(*fields))


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--source', required=True, help='A CSV of the data step.')
    parser.add_argument('--rows', type=int, required=True)
    parser.add_argument('--shards', type=int, default=16)
    parser.add_argument('--out-dir', required=True)
    parser.add_argument('--seed', type=int, default=1)
    args = parser.parse_args(argv)
    for path in generate(args.source, args.rows, args.shards, args.out_dir, args.seed):
        print(path)


if __name__ == '__main__':
    main()
