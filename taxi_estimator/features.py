"""Inputs of the wide-and-deep model, and their normalisation stats.

Every column of the layout is used (the reference sample parsed time, areas,
tracts and coordinates but never fed them to the model), through two
tensors (`model_inputs`):

- wide side (linear): payment type, company, trip start month/hour/day,
  community areas and census tracts, plus crosses of bucketised pickup and
  dropoff latitude x longitude, trip miles x seconds, hour x day and payment
  type x fare. All fourteen are one id space (`WIDE_IDS`): each feature's
  ids are offset past the previous ones, and the linear model sums one
  weight per id. That is the sum of fourteen per-column linear models (FTRL
  and its L2 work per weight), at one sparse lookup and one sparse update
  per step instead of fourteen: those per-column ops made up most of a
  step's time (benchmarks/RESULTS.md). The crosses are exact (bucket x
  bucket), so they never collide, unlike hashed `crossed_column`s;
- deep side (DNN, `deep_inputs`): the numeric features (`NUMBERS`) as
  z-scores (statistics from the training files), one-hot payment type and
  an embedding of the hashed company (both from their wide ids). Time,
  areas and tracts stay on the wide side: as DNN inputs (one-hot or
  embedded) they made it overfit the ~10k real trips.

Missing values (NaN, -1, '') are handled here, so training and serving
treat them alike: a missing number has z-score 0 (the training mean) and
falls in a bucket of its own; a missing category contributes nothing.

The statistics are constants in the graph, so a job-dir keeps the ones its
checkpoints were trained with in `feature_stats.json` and reruns reuse them.
"""
from __future__ import annotations

import json
import math
import os
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple, TypedDict

import tensorflow as tf

from estimator_trainers import safe_io
from estimator_trainers import user_files
from estimator_trainers.errors import UserInputError
from taxi_estimator import schema

STATS_FILE = 'feature_stats.json'

# Chicago's bounding box, cut into a 10 x 10 grid.
_LATITUDE_RANGE = (41.64, 42.03)
_LONGITUDE_RANGE = (-87.94, -87.52)
_GRID = 10
_MILES_BOUNDARIES = (0.5, 1, 1.5, 2, 3, 5, 8, 12, 18, 25)
_SECONDS_BOUNDARIES = (180, 300, 480, 600, 900, 1200, 1800, 2700)
_FARE_BOUNDARIES = (5, 7.5, 10, 12.5, 15, 20, 30, 45, 60)
# A missing number is moved below this first boundary: bucket 0 = "missing".
_MISSING_BOUNDARY = -1e9
_MISSING_NUMBER = -2e9

COMPANY_BUCKETS = 100
_TRACT_BUCKETS = 1000
EMBEDDING_DIM = 8
WIDE_IDS = 'wide_ids'
NUMBERS = 'numbers'
NUMBER_COLUMNS = tuple(sorted(schema.FLOAT_FEATURES))
# The deep side's one-hot payment type: the vocabulary, then "other".
PAYMENT_IDS = len(schema.PAYMENT_TYPES) + 1
PAYMENT_INDICATOR = 'payment_type_indicator'
COMPANY_EMBEDDING = 'company_embedding'

# Named tensors: parsed features, the model's inputs (`model_inputs`), the DNN's.
Features = Dict[str, tf.Tensor]
# A wide feature: (name, number of ids, features -> its ids, -1 for none).
WideFeature = Tuple[str, int, Callable[[Features], tf.Tensor]]


class FeatureStats(TypedDict):
    """The normalisation statistics of one float feature."""
    mean: float
    std: float


# {float feature: its statistics}, as `feature_stats.json` holds them.
Stats = Dict[str, FeatureStats]


class StatsAccumulator:
    """Running count, mean and standard deviation per float feature (Welford)."""

    def __init__(self) -> None:
        # {column: [count, mean, sum of squared deviations]}
        self._moments: Dict[str, List[float]] = {
            c: [0, 0.0, 0.0] for c in schema.FLOAT_FEATURES}

    def add(self, column: str, value: float) -> None:
        """Adds one non-missing value of `column`."""
        moments = self._moments[column]
        moments[0] += 1
        delta = value - moments[1]
        moments[1] += delta / moments[0]
        moments[2] += delta * (value - moments[1])

    def merge(self, other: StatsAccumulator) -> None:
        """Adds the values another accumulator saw (Chan et al.'s pairwise update)."""
        for column, (count, mean, m2) in other._moments.items():  # pylint: disable=protected-access
            self.add_moments(column, int(count), mean, m2)

    def add_moments(self, column: str, count: int, mean: float, m2: float) -> None:
        """Adds `count` values of `column` with that mean and sum of squared deviations."""
        moments = self._moments[column]
        total = moments[0] + count
        if not count:
            return
        delta = mean - moments[1]
        moments[1] += delta * count / total
        moments[2] += m2 + delta * delta * moments[0] * count / total
        moments[0] = total

    def stats(self) -> Stats:
        """{column: {'mean', 'std'}}; a column without values gets 0 and 1, one
        whose values are all (nearly) equal std 1 (`min_std`)."""
        result: Stats = {}
        for column, (count, mean, m2) in self._moments.items():
            mean = mean if count else 0.0
            std = math.sqrt(m2 / count) if count else 0.0
            result[column] = {'mean': mean, 'std': std if std >= min_std(mean) else 1.0}
        return result


# The z-scores are computed in float32 (about 7 significant digits): a std
# below a millionth of the mean's magnitude is below the precision of the
# values themselves, and only makes z-scores overflow.
_MIN_RELATIVE_STD = 1e-6
# A statistics file is a few hundred bytes.
STATS_LIMITS = user_files.Limits(bytes=1 << 20,
                                 expected='expected a small file (is this the right one?)')


def min_std(mean: float) -> float:
    """The smallest std `check_stats` accepts for a feature with this mean."""
    return _MIN_RELATIVE_STD * max(1.0, abs(mean))


def load_stats(path: str, what: str = '--feature-stats') -> Stats:
    """Reads and checks a stats JSON file ({feature: {"mean", "std"}}).

    Raises:
      UserInputError: the file is missing, not JSON, or lacks a feature.
    """
    where = '%s %s' % (what, path)
    # --feature-stats may be a process substitution <(...); a job-dir file may not.
    text = user_files.read_text(path, where, STATS_LIMITS, what.split()[0],
                                regular=what != '--feature-stats')
    return check_stats(user_files.parse_json(text, where, STATS_LIMITS), where)


def check_stats(stats: object, where: str) -> Stats:
    """The statistics as {feature: {'mean': float, 'std': float}}, checked.

    Every float feature needs a finite mean within the feature's valid range
    (`schema.FLOAT_RANGES`: the mean of valid values is a valid value) and a
    std from `min_std(mean)` up to the width of that range: anything else
    turns the float32 z-scores into infinities or NaN, and training (and
    every later run on the job-dir) fails.

    Raises:
      UserInputError: naming `where` and the first bad feature.
    """
    if not isinstance(stats, dict):
        raise UserInputError('%s: expected a JSON object' % where)
    result: Stats = {}
    for column in schema.FLOAT_FEATURES:
        entry = stats.get(column)
        if (not isinstance(entry, dict)
                or not all(_is_number(entry.get(k)) for k in ('mean', 'std'))
                or not entry['std'] > 0):
            raise UserInputError(
                '%s: feature %r needs {"mean": number, "std": number > 0}'
                % (where, column))
        mean, std = float(entry['mean']), float(entry['std'])
        low, high = schema.FLOAT_RANGES[column]
        if not low <= mean <= high:
            raise UserInputError('%s: feature %r has mean %g, outside the range of its '
                                 'values [%g, %g]' % (where, column, mean, low, high))
        if not min_std(mean) <= std <= high - low:
            raise UserInputError(
                '%s: feature %r has std %g; expected %g to %g (a smaller one is below '
                'the precision of float32 values near the mean %g, a larger one wider '
                'than the range of its values)'
                % (where, column, std, min_std(mean), high - low, mean))
        result[column] = {'mean': mean, 'std': std}
    return result


def _is_number(value: object) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value))


def resolve_stats(job_dir: str, computed: Stats,
                  supplied_path: Optional[str] = None) -> Tuple[Stats, bool]:
    """Picks the normalisation statistics for this run.

    The job-dir's recorded statistics win (its checkpoints were trained with
    them); else `--feature-stats`; else those computed from the training files.

    Returns:
      (stats, recorded): `recorded` is False when the job-dir has none yet.

    Raises:
      UserInputError: `--feature-stats` differs from the job-dir's record.
    """
    recorded_path = os.path.join(job_dir, STATS_FILE)
    supplied = load_stats(supplied_path) if supplied_path else None
    if tf.io.gfile.exists(recorded_path):
        try:
            recorded = load_stats(recorded_path, what='--job-dir file')
        except UserInputError as e:
            raise UserInputError('%s; the checkpoints in --job-dir were trained with the '
                                 'statistics it held: restore it, or use a new --job-dir'
                                 % e) from None
        if supplied is not None and supplied != recorded:
            raise UserInputError(
                '--feature-stats %s differs from %s, which the checkpoints in '
                '--job-dir were trained with; use a new --job-dir or drop '
                '--feature-stats' % (supplied_path, recorded_path))
        tf.compat.v1.logging.info('Using the normalisation statistics recorded in %s',
                                  recorded_path)
        return recorded, True
    if supplied is not None:
        tf.compat.v1.logging.info('Using the normalisation statistics from %s',
                                  supplied_path)
        return supplied, False
    return computed, False


def record_stats(job_dir: str, stats: Stats) -> None:
    """Writes `stats` to `<job-dir>/feature_stats.json` (chief, first run).

    Statistics that `check_stats` refuses are never written: a job-dir with
    them could not be trained on again.
    """
    path = os.path.join(job_dir, STATS_FILE)
    stats = check_stats(stats, 'statistics for %s' % path)
    tf.io.gfile.makedirs(job_dir)
    safe_io.write_atomic(path, json.dumps(stats, indent=2, sort_keys=True))


def deep_inputs(inputs: Features, stats: Stats) -> Features:
    """{name: float32 [batch, width]} of the DNN's inputs, from `model_inputs`.

    The z-score of each float feature (`stats`; missing: 0, the training
    mean) and the one-hot payment type (missing: all zeros). The DNN also
    embeds `own_ids(inputs[WIDE_IDS], 'company')` (missing: no embedding).
    Names are those of the feature columns these replaced, so the model can
    lay its input out as `DenseFeatures` did (by name) and checkpoints of
    either restore into the other.
    """
    z_scores = _z_score([stats[c]['mean'] for c in NUMBER_COLUMNS],
                        [stats[c]['std'] for c in NUMBER_COLUMNS])(inputs[NUMBERS])
    result = dict(zip(NUMBER_COLUMNS, tf.split(z_scores, len(NUMBER_COLUMNS), axis=1)))
    result[PAYMENT_INDICATOR] = tf.one_hot(own_ids(inputs[WIDE_IDS], 'payment_type'),
                                           PAYMENT_IDS, dtype=tf.float32)
    return result


def own_ids(wide_ids: tf.Tensor, name: str) -> tf.Tensor:
    """The ids of wide feature `name` within its own range (-1: none), from `WIDE_IDS`."""
    column, offset = _WIDE_COLUMNS[name]
    ids = wide_ids[:, column]
    return tf.where(ids < 0, ids, ids - offset)


def _wide_features() -> List[WideFeature]:
    """(name, number of ids, function(features) -> int64 ids, -1 for none) of the wide side.

    Each function gets the features flattened to [batch] and returns [batch].
    """
    def payment(f: Features) -> tf.Tensor:
        return _payment_ids(f['payment_type'])

    def hashed(column: str, buckets: int) -> Callable[[Features], tf.Tensor]:
        return lambda f: _unless_empty(f[column], tf.strings.to_hash_bucket_fast(
            f[column], buckets))

    def category(column: str) -> Callable[[Features], tf.Tensor]:
        return lambda f: _category(f[column], schema.INT_FEATURES[column][1] + 1)

    def cell(latitude: str, longitude: str) -> Callable[[Features], tf.Tensor]:
        return lambda f: (_bucket(f[latitude], _LATITUDE_GRID) * (_GRID + 1)
                          + _bucket(f[longitude], _LONGITUDE_GRID))

    hours, days = (schema.INT_FEATURES[c][1] + 1
                   for c in ('trip_start_hour', 'trip_start_day'))

    def hour_x_day(f: Features) -> tf.Tensor:
        hour = _category(f['trip_start_hour'], hours)
        day = _category(f['trip_start_day'], days)
        return tf.where((hour < 0) | (day < 0), tf.constant(-1, tf.int64), hour * days + day)

    def payment_x_fare(f: Features) -> tf.Tensor:
        paid = _payment_ids(f['payment_type'])
        fare = _bucket(f['fare'], _FARE_BOUNDARIES)
        return tf.where(paid < 0, tf.constant(-1, tf.int64),
                        paid * (len(_FARE_BOUNDARIES) + 2) + fare)

    return [
        ('payment_type', PAYMENT_IDS, payment),
        ('company', COMPANY_BUCKETS, hashed('company', COMPANY_BUCKETS)),
        *[(c, schema.INT_FEATURES[c][1] + 1, category(c))
          for c in ('trip_start_month', 'trip_start_hour', 'trip_start_day',
                    'pickup_community_area', 'dropoff_community_area')],
        *[(c, _TRACT_BUCKETS, hashed(c, _TRACT_BUCKETS))
          for c in ('pickup_census_tract', 'dropoff_census_tract')],
        ('pickup_cell', (_GRID + 1) ** 2, cell('pickup_latitude', 'pickup_longitude')),
        ('dropoff_cell', (_GRID + 1) ** 2, cell('dropoff_latitude', 'dropoff_longitude')),
        ('miles_x_seconds', (len(_MILES_BOUNDARIES) + 2) * (len(_SECONDS_BOUNDARIES) + 2),
         lambda f: (_bucket(f['trip_miles'], _MILES_BOUNDARIES)
                    * (len(_SECONDS_BOUNDARIES) + 2)
                    + _bucket(f['trip_seconds'], _SECONDS_BOUNDARIES))),
        ('hour_x_day', hours * days, hour_x_day),
        ('payment_x_fare', PAYMENT_IDS * (len(_FARE_BOUNDARIES) + 2), payment_x_fare),
    ]


def model_inputs(features: Mapping[str, tf.Tensor]) -> Features:
    """The model's two inputs, from parsed features (`schema.FEATURES`, shape [batch]):

    - `WIDE_IDS`: int64 [batch, 14], each wide feature's id or -1. A missing
      category (or one out of its range, e.g. in a serving request)
      contributes nothing; a missing number falls in a bucket of its own;
    - `NUMBERS`: float32 [batch, 7], the float features in `NUMBER_COLUMNS`
      order (NaN where missing).

    The input_fns compute them on tf.data's threads (once for data held in
    memory); serving computes them in the model.
    """
    flat = {k: tf.reshape(v, [-1]) for k, v in features.items()}
    ids = []
    for name, _, make in _wide_features():
        value = tf.cast(make(flat), tf.int64)
        ids.append(tf.where(value < 0, value, value + _WIDE_COLUMNS[name][1]))
    return {WIDE_IDS: tf.stack(ids, axis=1),
            NUMBERS: tf.stack([tf.cast(flat[c], tf.float32) for c in NUMBER_COLUMNS], axis=1)}


def _grid(low: float, high: float) -> List[float]:
    step = (high - low) / _GRID
    return [low + i * step for i in range(1, _GRID)]


_LATITUDE_GRID = _grid(*_LATITUDE_RANGE)
_LONGITUDE_GRID = _grid(*_LONGITUDE_RANGE)


def _bucket(x: tf.Tensor, boundaries: Sequence[float]) -> tf.Tensor:
    """Bucket of a float feature: 0 for missing (NaN), then one per boundary interval."""
    x = _fill_missing(tf.cast(x, tf.float32))
    return tf.cast(tf.raw_ops.Bucketize(
        input=x, boundaries=[_MISSING_BOUNDARY] + [float(b) for b in boundaries]), tf.int64)


def _category(x: tf.Tensor, buckets: int) -> tf.Tensor:
    """An integer category as its own id; missing (-1) or out of [0, buckets): -1."""
    x = tf.cast(x, tf.int64)
    return tf.where((x < 0) | (x >= buckets), tf.constant(-1, tf.int64), x)


def _payment_ids(payment: tf.Tensor) -> tf.Tensor:
    """Vocabulary index of the payment type, `len(PAYMENT_TYPES)` for others, -1 for ''."""
    matches = tf.equal(payment[:, None], tf.constant(schema.PAYMENT_TYPES)[None, :])
    index = tf.where(tf.reduce_any(matches, axis=1),
                     tf.argmax(tf.cast(matches, tf.int32), axis=1, output_type=tf.int64),
                     tf.constant(len(schema.PAYMENT_TYPES), tf.int64))
    return _unless_empty(payment, index)


def _unless_empty(text: tf.Tensor, ids: tf.Tensor) -> tf.Tensor:
    return tf.where(tf.equal(text, schema.MISSING_STRING), tf.constant(-1, tf.int64), ids)


def _fill_missing(x: tf.Tensor) -> tf.Tensor:
    return tf.where(tf.math.is_nan(x), tf.fill(tf.shape(x), _MISSING_NUMBER), x)


def _z_score(mean: Sequence[float], std: Sequence[float]) -> Callable[[tf.Tensor], tf.Tensor]:
    """x -> its z-score, 0 where x is missing (NaN); mean and std broadcast over x."""
    def normalize(x: tf.Tensor) -> tf.Tensor:
        return tf.where(tf.math.is_nan(x), tf.zeros_like(x), (x - mean) / std)
    return normalize


# Ids of the whole wide side (2,963).
WIDE_BUCKETS = sum(size for _, size, _ in _wide_features())


def _column_offsets() -> Dict[str, Tuple[int, int]]:
    offsets: Dict[str, Tuple[int, int]] = {}
    offset = 0
    for column, (name, size, _) in enumerate(_wide_features()):
        offsets[name] = (column, offset)
        offset += size
    return offsets


# name -> (column of WIDE_IDS, offset of its ids).
_WIDE_COLUMNS = _column_offsets()
