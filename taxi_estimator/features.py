"""Feature columns of the wide-and-deep model, and their normalisation stats.

Every column of the layout is used (the reference sample parsed time, areas,
tracts and coordinates but never fed them to the model):

- wide side (linear): payment type, company, trip start month/hour/day,
  community areas and census tracts, plus crosses of bucketised pickup and
  dropoff latitude x longitude, trip miles x seconds, hour x day and payment
  type x fare;
- deep side (DNN): the numeric features as z-scores (statistics from the
  training files), one-hot payment type and an embedding of the hashed
  company. Time, areas and tracts stay on the wide side: as DNN inputs
  (one-hot or embedded) they made it overfit the ~10k real trips.

Missing values (NaN, -1, '') are handled here, so training and serving
treat them alike: a missing number has z-score 0 (the training mean) and
falls in a bucket of its own; a missing category contributes nothing.

The statistics are constants in the graph, so a job-dir keeps the ones its
checkpoints were trained with in `feature_stats.json` and reruns reuse them.
"""
import json
import math
import os

import tensorflow as tf

from estimator_trainers import safe_io
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

_COMPANY_BUCKETS = 100
_TRACT_BUCKETS = 1000
_CROSS_BUCKETS = 1000
_EMBEDDING_DIM = 8


class StatsAccumulator:
    """Running count, mean and standard deviation per float feature (Welford)."""

    def __init__(self):
        self._moments = {c: [0, 0.0, 0.0] for c in schema.FLOAT_FEATURES}

    def add(self, column, value):
        """Adds one non-missing value of `column`."""
        moments = self._moments[column]
        moments[0] += 1
        delta = value - moments[1]
        moments[1] += delta / moments[0]
        moments[2] += delta * (value - moments[1])

    def stats(self):
        """{column: {'mean', 'std'}}; a column without values gets 0 and 1, one
        whose values are all (nearly) equal std 1 (`min_std`)."""
        result = {}
        for column, (count, mean, m2) in self._moments.items():
            mean = mean if count else 0.0
            std = math.sqrt(m2 / count) if count else 0.0
            result[column] = {'mean': mean, 'std': std if std >= min_std(mean) else 1.0}
        return result


# The z-scores are computed in float32 (about 7 significant digits): a std
# below a millionth of the mean's magnitude is below the precision of the
# values themselves, and only makes z-scores overflow.
_MIN_RELATIVE_STD = 1e-6
STATS_MAX_BYTES = 1 << 20  # a statistics file is a few hundred bytes


def min_std(mean):
    """The smallest std `check_stats` accepts for a feature with this mean."""
    return _MIN_RELATIVE_STD * max(1.0, abs(mean))


def load_stats(path, what='--feature-stats'):
    """Reads and checks a stats JSON file ({feature: {"mean", "std"}}).

    Raises:
      UserInputError: the file is missing, not JSON, or lacks a feature.
    """
    text = safe_io.read_text(path, what, max_bytes=STATS_MAX_BYTES,
                             regular=what != '--feature-stats')
    try:
        stats = safe_io.parse_json(text)
    except ValueError as e:
        raise UserInputError('%s %s: not valid JSON (%s)' % (what, path, e)) from None
    return check_stats(stats, '%s %s' % (what, path))


def check_stats(stats, where):
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
    result = {}
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


def _is_number(value):
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value))


def resolve_stats(job_dir, computed, supplied_path=None):
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


def record_stats(job_dir, stats):
    """Writes `stats` to `<job-dir>/feature_stats.json` (chief, first run).

    Statistics that `check_stats` refuses are never written: a job-dir with
    them could not be trained on again.
    """
    path = os.path.join(job_dir, STATS_FILE)
    stats = check_stats(stats, 'statistics for %s' % path)
    tf.io.gfile.makedirs(job_dir)
    safe_io.write_atomic(path, json.dumps(stats, indent=2, sort_keys=True))


def wide_and_deep_columns(stats):
    """(wide_columns, deep_columns) for `DNNLinearCombinedClassifier`."""
    fc = tf.feature_column

    def bucketized(column, boundaries):
        source = fc.numeric_column(column, normalizer_fn=_fill_missing)
        return fc.bucketized_column(source, [_MISSING_BOUNDARY] + list(boundaries))

    pickup_lat, dropoff_lat = (
        bucketized(c, _grid(*_LATITUDE_RANGE))
        for c in ('pickup_latitude', 'dropoff_latitude'))
    pickup_lon, dropoff_lon = (
        bucketized(c, _grid(*_LONGITUDE_RANGE))
        for c in ('pickup_longitude', 'dropoff_longitude'))
    miles = bucketized('trip_miles', _MILES_BOUNDARIES)
    seconds = bucketized('trip_seconds', _SECONDS_BOUNDARIES)
    fare = bucketized('fare', _FARE_BOUNDARIES)

    payment = fc.categorical_column_with_vocabulary_list(
        'payment_type', schema.PAYMENT_TYPES, num_oov_buckets=1)
    times = {c: fc.categorical_column_with_identity(c, schema.INT_FEATURES[c][1] + 1)
             for c in ('trip_start_month', 'trip_start_hour', 'trip_start_day')}
    areas = {c: fc.categorical_column_with_identity(c, schema.INT_FEATURES[c][1] + 1)
             for c in ('pickup_community_area', 'dropoff_community_area')}
    tracts = {c: fc.categorical_column_with_hash_bucket(c, _TRACT_BUCKETS)
              for c in ('pickup_census_tract', 'dropoff_census_tract')}
    company = fc.categorical_column_with_hash_bucket('company', _COMPANY_BUCKETS)

    wide = [payment, company, *times.values(), *areas.values(), *tracts.values(),
            fc.crossed_column([pickup_lat, pickup_lon], _CROSS_BUCKETS),
            fc.crossed_column([dropoff_lat, dropoff_lon], _CROSS_BUCKETS),
            fc.crossed_column([miles, seconds], _CROSS_BUCKETS),
            fc.crossed_column([times['trip_start_hour'], times['trip_start_day']],
                              _CROSS_BUCKETS),
            fc.crossed_column(['payment_type', fare], _CROSS_BUCKETS)]
    deep = [fc.numeric_column(c, normalizer_fn=_z_score(stats[c]['mean'], stats[c]['std']))
            for c in schema.FLOAT_FEATURES]
    deep += [fc.indicator_column(payment), fc.embedding_column(company, _EMBEDDING_DIM)]
    return wide, deep


def _grid(low, high):
    step = (high - low) / _GRID
    return [low + i * step for i in range(1, _GRID)]


def _fill_missing(x):
    return tf.where(tf.math.is_nan(x), tf.fill(tf.shape(x), _MISSING_NUMBER), x)


def _z_score(mean, std):
    def normalize(x):
        return tf.where(tf.math.is_nan(x), tf.zeros_like(x), (x - mean) / std)
    return normalize
