"""Generated Chicago Taxi trip files, log helpers and baselines for the taxi tests.

Trips follow a learnable rule (card payers of short trips tip at least 20%)
with label noise, and have the empty fields the real trips have. A model
must beat the trivial baselines on the same eval file: always predicting the
majority class, and the one-rule `payment_type == "Credit Card"`.
"""
import csv
import glob
import os
import random
import re
import zipfile

from taxi_estimator import data
from taxi_estimator import schema

RAW_COLUMNS = ('pickup_community_area', 'fare', 'trip_start_month', 'trip_start_hour',
               'trip_start_day', 'trip_start_timestamp', 'pickup_latitude',
               'pickup_longitude', 'dropoff_latitude', 'dropoff_longitude', 'trip_miles',
               'pickup_census_tract', 'dropoff_census_tract', 'payment_type', 'company',
               'trip_seconds', 'dropoff_community_area', 'tips')
COMPANIES = ('Taxi Affiliation Services', 'Flash Cab', 'Blue Ribbon Taxi Association, Inc.',
             'Top Cab "Affiliation"')


def _maybe(rng, text, missing_rate):
    return '' if rng.random() < missing_rate else text


def trip(rng):
    """One raw trip dict (tfx CSV columns) with a tip that follows the rule."""
    fare = round(rng.uniform(3, 45), 2)
    card = rng.random() < 0.55
    likely = card and (fare < 15 or rng.random() < 0.3)
    if rng.random() < 0.05:
        likely = not likely
    tips = round(fare * (rng.uniform(0.2, 0.3) if likely else rng.uniform(0, 0.15)), 2)
    miles = round(max(0.1, fare / 2.6 + rng.uniform(-0.5, 0.5)), 2)
    return {
        'pickup_community_area': _maybe(rng, str(rng.randint(1, 77)), 0.05),
        'fare': str(fare),
        'trip_start_month': str(rng.randint(1, 12)),
        'trip_start_hour': str(rng.randint(0, 23)),
        'trip_start_day': str(rng.randint(1, 7)),
        'trip_start_timestamp': str(1380000000 + rng.randint(0, 10 ** 7)),
        'pickup_latitude': _maybe(rng, '%.6f' % rng.uniform(41.7, 42.0), 0.1),
        'pickup_longitude': _maybe(rng, '%.6f' % rng.uniform(-87.9, -87.55), 0.1),
        'dropoff_latitude': _maybe(rng, '%.6f' % rng.uniform(41.7, 42.0), 0.1),
        'dropoff_longitude': _maybe(rng, '%.6f' % rng.uniform(-87.9, -87.55), 0.1),
        'trip_miles': str(miles),
        'pickup_census_tract': _maybe(rng, str(17031000000 + rng.randint(1, 999) * 100), 0.6),
        'dropoff_census_tract': _maybe(rng, str(17031000000 + rng.randint(1, 999) * 100), 0.3),
        'payment_type': 'Credit Card' if card else rng.choice(('Cash', 'Cash', 'No Charge')),
        'company': _maybe(rng, rng.choice(COMPANIES), 0.3),
        'trip_seconds': str(int(miles * 150 + rng.randint(60, 300))),
        'dropoff_community_area': _maybe(rng, str(rng.randint(1, 77)), 0.05),
        'tips': str(tips),
    }


def layout_rows(count, seed):
    """`count` cleaned rows (lists of CSV fields in `schema.COLUMNS` order)."""
    rng = random.Random(seed)
    rows = []
    while len(rows) < count:
        row = data.clean_row(trip(rng))
        if row is not None:
            rows.append(row)
    return rows


def write_csv(path, rows, header=schema.COLUMNS):
    """Writes `rows` (lists or dicts) under `header`; returns `path` as str."""
    with open(path, 'w', newline='') as f:
        writer = csv.writer(f, lineterminator='\n')
        if header:
            writer.writerow(header)
        for row in rows:
            writer.writerow([row[c] for c in header] if isinstance(row, dict) else row)
    return str(path)


def write_layout_files(directory, train_rows=800, eval_rows=200, seed=1):
    """Train and eval CSVs in the sample layout; returns their paths."""
    return (write_csv(directory / 'train.csv', layout_rows(train_rows, seed)),
            write_csv(directory / 'eval.csv', layout_rows(eval_rows, seed + 1000)))


def write_data_step_files(directory, train_rows, eval_rows, seed=1):
    """Train and eval CSVs named as the taxi data step names them (`train-local.sh
    --data-dir`); returns `directory`."""
    write_csv(directory / 'taxi_trips_train.csv', layout_rows(train_rows, seed))
    write_csv(directory / 'taxi_trips_eval.csv', layout_rows(eval_rows, seed + 1000))
    return directory


def write_tfx_wheel(path, raw_rows):
    """A stand-in tfx wheel holding `raw_rows` as the Chicago Taxi trips CSV."""
    csv_path = str(path) + '.csv'
    write_csv(csv_path, raw_rows, header=RAW_COLUMNS)
    with zipfile.ZipFile(path, 'w') as wheel:
        wheel.write(csv_path, data.TFX_CSV_PATH)
        wheel.writestr('tfx-1.21.0.dist-info/METADATA', 'Name: tfx\nVersion: 1.21.0\n')
    return str(path)


def final_metrics(stderr):
    """(global step, {metric: value}) from the trainer's final log line."""
    match = re.search(r'Final evaluation at global step (\d+): (.*)', stderr)
    assert match, stderr[-3000:]
    metrics = dict(pair.split(' = ') for pair in match.group(2).split(', '))
    return int(match.group(1)), {k: float(v) for k, v in metrics.items()}


def exports(job_dir):
    """Timestamped export directories under `job_dir`, oldest first."""
    return sorted(glob.glob(os.path.join(job_dir, 'export', '[0-9]*')))


def exact_auc(labels, scores):
    """ROC AUC as the probability a positive outscores a negative (ties count 1/2)."""
    pairs = sorted(zip(scores, labels))
    positives = sum(labels)
    negatives = len(labels) - positives
    rank_sum, i = 0.0, 0
    while i < len(pairs):
        j = i
        while j < len(pairs) and pairs[j][0] == pairs[i][0]:
            j += 1
        rank_sum += (i + 1 + j) / 2 * sum(label for _, label in pairs[i:j])
        i = j
    return (rank_sum - positives * (positives + 1) / 2) / (positives * negatives)


def accuracy(labels, predicted):
    return sum(int(a == b) for a, b in zip(labels, predicted)) / len(labels)


def eval_labels(path):
    """(labels, rows) of a CSV in the sample layout."""
    with open(path, newline='') as f:
        rows = list(csv.DictReader(f))
    return [int(float(r['tip'])) for r in rows], rows


def baselines(path):
    """Trivial baselines on the CSV at `path`.

    Returns:
      {'majority': accuracy of always predicting the commoner class,
       'rule': accuracy of `payment_type == "Credit Card"`, 'rule_auc': its AUC}.
    """
    labels, rows = eval_labels(path)
    rule = [int(r['payment_type'] == 'Credit Card') for r in rows]
    positives = sum(labels)
    return {'majority': max(positives, len(labels) - positives) / len(labels),
            'rule': accuracy(labels, rule), 'rule_auc': exact_auc(labels, rule)}


def assert_beats_baselines(metrics, path, margin):
    """The trainer's final eval `metrics` beat every baseline on `path` by `margin`."""
    base = baselines(path)
    assert metrics['accuracy'] > max(base['majority'], base['rule']) + margin, (metrics, base)
    assert metrics['auc'] > base['rule_auc'] + margin, (metrics, base)
