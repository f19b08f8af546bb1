"""The taxi trip CSV layout: columns, types, value ranges and missing values.

One place that knows the columns, so the data step, the training input, the
serving signatures and `predict` agree on types (the reference sample's JSON
signature and CSV defaults disagreed). Columns are in the AI Platform
sample's order; `tip` is the label (1 when the tip was at least 20% of the
fare). Every feature may be missing (an empty CSV field, a JSON null): the
real trips have many empty fields. Missing values travel through the model
as NaN (floats), -1 (integers) or '' (strings), which the feature columns
treat as "no value".
"""
import math
import re
from typing import Dict, Literal, Tuple, Union

LABEL = 'tip'

COLUMNS = (
    'tip', 'trip_miles', 'trip_seconds', 'fare', 'trip_start_month',
    'trip_start_hour', 'trip_start_day', 'pickup_community_area',
    'dropoff_community_area', 'pickup_census_tract', 'dropoff_census_tract',
    'pickup_latitude', 'pickup_longitude', 'dropoff_latitude',
    'dropoff_longitude', 'payment_type', 'company')

# Features a serving request carries: everything but the label.
FEATURES = COLUMNS[1:]

# Numeric features, normalised with training-set statistics.
FLOAT_FEATURES = (
    'trip_miles', 'trip_seconds', 'fare', 'pickup_latitude',
    'pickup_longitude', 'dropoff_latitude', 'dropoff_longitude')

# Valid [low, high] of the numeric features. Coordinates are bounded by the
# globe; distances, durations and fares by MAX_AMOUNT, far above any real
# trip: a larger value is a data error (e.g. fare=1e308, which float32 reads
# as infinity) and would wreck the normalisation statistics.
MAX_AMOUNT = 1e9
FLOAT_RANGES: Dict[str, Tuple[float, float]] = {
    'trip_miles': (0.0, MAX_AMOUNT),
    'trip_seconds': (0.0, MAX_AMOUNT),
    'fare': (0.0, MAX_AMOUNT),
    'pickup_latitude': (-90.0, 90.0),
    'pickup_longitude': (-180.0, 180.0),
    'dropoff_latitude': (-90.0, 90.0),
    'dropoff_longitude': (-180.0, 180.0),
}

# Integer-coded categorical features and their valid [low, high] range.
INT_FEATURES: Dict[str, Tuple[int, int]] = {
    'trip_start_month': (1, 12),
    'trip_start_hour': (0, 23),
    'trip_start_day': (1, 7),  # day of week, 1 = Sunday (BigQuery DAYOFWEEK)
    'pickup_community_area': (1, 77),
    'dropoff_community_area': (1, 77),
}

# Free-text categorical features (census tracts are 11-digit codes kept as
# text, so no precision is lost and they hash like any other category).
STRING_FEATURES = (
    'pickup_census_tract', 'dropoff_census_tract', 'payment_type', 'company')

PAYMENT_TYPES = ('Cash', 'Credit Card', 'Pcard', 'Unknown', 'No Charge',
                 'Prcard', 'Dispute', 'Mobile')

MISSING_FLOAT = float('nan')
MISSING_INT = -1
MISSING_STRING = ''

HEADER_LINE = ','.join(COLUMNS)

# Number spellings that Python, TensorFlow's CSV reader and JSON all read the
# same way (no '1_000', 'inf', ' 5').
FLOAT_TEXT = re.compile(r'[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\Z')
INT_TEXT = re.compile(r'[-+]?\d+(\.0*)?\Z')  # '8' or '8.0'

# What a column holds (`kind`).
Kind = Literal['label', 'float', 'int', 'string']
# A parsed value of a column: float, int (a category or the label) or text.
Value = Union[float, int, str]
# One instance to predict: {feature: parsed value} of every feature.
Instance = Dict[str, Value]


def kind(column: str) -> Kind:
    """'label', 'float', 'int' or 'string'."""
    if column == LABEL:
        return 'label'
    if column in FLOAT_FEATURES:
        return 'float'
    if column in INT_FEATURES:
        return 'int'
    if column in STRING_FEATURES:
        return 'string'
    raise KeyError(column)


def missing_value(column: str) -> Value:
    """The in-model stand-in for a missing value of `column`."""
    missing: Dict[str, Value] = {'float': MISSING_FLOAT, 'int': MISSING_INT,
                                 'string': MISSING_STRING}
    return missing[kind(column)]


def parse_value(column: str, value: object) -> Value:
    """Converts one CSV field or JSON value of `column` to its Python value.

    Args:
      column: a name from `COLUMNS`.
      value: text from a CSV field, or a JSON scalar (None and '' mean
        missing, except for the label, which is required).

    Returns:
      float, int or str; the missing stand-in for an absent feature value.

    Raises:
      ValueError: with a short reason, e.g. "'abc' is not a number".
    """
    what = kind(column)
    if value is None or (isinstance(value, str) and value == ''):
        if what == 'label':
            raise ValueError('the label is empty (expected 0 or 1)')
        return missing_value(column)
    if what == 'string':
        if isinstance(value, (dict, list)):
            raise ValueError('%s is not text' % _show(value))
        return str(value)
    if what == 'label':
        if isinstance(value, bool) or value not in (0, 1, '0', '1', '0.0', '1.0'):
            raise ValueError('%s is not a label (expected 0 or 1)' % _show(value))
        return int(float(value))
    number = parse_number(value)
    if what == 'float':
        low, high = FLOAT_RANGES[column]
        if not low <= number <= high:
            raise ValueError('%s is out of range [%g, %g]' % (_show(value), low, high))
        return number
    if not number.is_integer() or (isinstance(value, str) and not INT_TEXT.match(value)):
        raise ValueError('%s is not an integer' % _show(value))
    number = int(number)
    low, high = INT_FEATURES[column]
    if not low <= number <= high:
        raise ValueError('%s is out of range [%d, %d]' % (_show(value), low, high))
    return number


def parse_number(value: object) -> float:
    """A finite float from CSV text or a JSON number.

    Raises:
      ValueError: e.g. "'abc' is not a number".
    """
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError('%s is not a number' % _show(value))
    if isinstance(value, str) and not FLOAT_TEXT.match(value):
        raise ValueError('%s is not a number' % _show(value))
    number = float(value)
    if not math.isfinite(number):
        raise ValueError('%s is not a finite number' % _show(value))
    return number


def _show(value: object) -> str:
    return repr(value) if isinstance(value, str) else str(value)
