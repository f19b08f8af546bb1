"""Command line: predict tips with an exported model.

    python -m taxi_estimator.predict --model-dir JOB_DIR/export/TIMESTAMP \
        --json-instances instances.ndjson
    python -m taxi_estimator.predict --model-dir JOB_DIR/export \
        --json-instances request.json      # {"instances": [{...}, ...]}
    python -m taxi_estimator.predict --model-dir JOB_DIR/export \
        --csv-instances trips.csv

The local equivalent of `gcloud ai-platform local predict`: loads a SavedModel
written by `taxi_estimator.task` (any `--serving-export-format`), checks every
instance, and prints one JSON line per instance to stdout:
`{"class": 1, "probabilities": [p_no_tip, p_tip]}` (class 1: tip >= 20%).

Instances carry every feature of `schema.FEATURES`; a missing value is
written as null (JSON) or an empty field (CSV). JSON instances are one object
per line; CSV instances need a header line naming the columns (so the eval
CSV works as is: its `tip` column is ignored).
"""
import _csv
import argparse
import csv
import io
import json
from typing import List, Mapping, Optional, Sequence

from estimator_trainers import errors
from estimator_trainers import flags
from estimator_trainers import logs
from estimator_trainers import user_files
from estimator_trainers.errors import UserInputError
from taxi_estimator import schema

# Instances are read into memory at once, as `gcloud ai-platform local predict` did.
INSTANCES_LIMITS = user_files.Limits(
    bytes=64 << 20, values=4 << 20,
    expected='predict reads its instances into memory at once: split the file')
# One line of instances: an object of the 16 features, counted before it is parsed.
LINE_LIMITS = user_files.Limits(
    bytes=INSTANCES_LIMITS.bytes, values=1000,
    expected='a line is one instance, an object of %d features' % len(schema.FEATURES))


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser: argparse.ArgumentParser = flags.make_parser(
        'python -m taxi_estimator.predict',
        'Predict with a SavedModel exported by taxi_estimator.task; prints one JSON '
        'line per instance with the class and the class probabilities.')
    parser.add_argument('--model-dir', type=flags.path, required=True,
                        help='An export, <job-dir>/export/<timestamp>, or '
                             '<job-dir>/export to use its newest export.')
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument('--json-instances', type=flags.path,
                        help='Newline-delimited JSON: one object per line with every '
                             'feature (null for a missing value); or a TensorFlow '
                             'Serving request body, {"instances": [{...}, ...]}.')
    source.add_argument('--csv-instances', type=flags.path,
                        help='CSV with a header line naming every feature (a tip '
                             'column is ignored; empty fields are missing values).')
    parser.add_argument('--batch-size', type=flags.positive_int, default=256,
                        help='Instances per prediction call.')
    parser.add_argument('--verbosity', choices=flags.VERBOSITY_LEVELS, default='WARN',
                        type=str.upper, help='Log level.')
    return parser.parse_args(argv)


def check_instance(raw: Mapping[str, object], where: str) -> schema.Instance:
    """The parsed feature values of one instance (dict of JSON/CSV values).

    Raises:
      UserInputError: a feature is absent, unknown or has a bad value.
    """
    unknown = [k for k in raw if k not in schema.COLUMNS]
    if unknown:
        raise UserInputError('%s: unknown feature %r (expected %s)'
                             % (where, unknown[0], ', '.join(schema.FEATURES)))
    missing = [c for c in schema.FEATURES if c not in raw]
    if missing:
        raise UserInputError('%s: instance lacks feature%s %s (give every feature; '
                             'null or an empty field marks a missing value)'
                             % (where, 's' if len(missing) > 1 else '', ', '.join(missing)))
    values: schema.Instance = {}
    for column in schema.FEATURES:
        try:
            values[column] = schema.parse_value(column, raw[column])
        except ValueError as e:
            raise UserInputError('%s, feature %s: %s' % (where, column, e)) from None
    return values


def read_json_instances(path: str, text: str) -> List[schema.Instance]:
    """Parsed instances from newline-delimited JSON (blank lines skipped), or from
    a TensorFlow Serving request body `{"instances": [{...}, ...]}`."""
    body = _serving_request(text)
    if body is not None:
        return _request_instances(path, body)
    instances = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = '--json-instances %s line %d' % (path, number)
        raw = user_files.json_object(line, where, 'a JSON object of features', LINE_LIMITS)
        instances.append(check_instance(raw, where))
    return instances


def _serving_request(text: str) -> Optional[Mapping[str, object]]:
    """The parsed body if `text` is one JSON object with `instances`, else None.

    Text showing more values than `INSTANCES_LIMITS` allows is not parsed whole
    (newline-delimited instances may hold that many; their lines are read one
    by one, each within `LINE_LIMITS`).
    """
    try:
        user_files.check_values(text, '--json-instances', INSTANCES_LIMITS)
        body = user_files.loads(text)
    except (ValueError, UserInputError):
        return None
    return body if isinstance(body, dict) and 'instances' in body else None


def _request_instances(path: str, body: Mapping[str, object]) -> List[schema.Instance]:
    where = '--json-instances %s' % path
    extra = sorted(set(body) - {'instances', 'signature_name'})
    if extra:
        raise UserInputError('%s: unexpected key %r in the request body (expected '
                             '"instances")' % (where, extra[0]))
    if not isinstance(body['instances'], list):
        raise UserInputError('%s: "instances" must be a list of objects of features'
                             % where)
    instances = []
    for number, raw in enumerate(body['instances']):
        here = '%s instance %d' % (where, number)
        if not isinstance(raw, dict):
            raise UserInputError('%s: expected a JSON object of features, got %s'
                                 % (here, type(raw).__name__))
        instances.append(check_instance(raw, here))
    return instances


def read_csv_instances(path: str, text: str) -> List[schema.Instance]:
    """Parsed instances from CSV text with a header line.

    Lines may end in LF, CRLF or CR alone; a quoted field may span lines.
    """
    where = '--csv-instances %s' % path
    # newline='': the csv module splits the lines itself, at any line end.
    reader = csv.reader(io.StringIO(text, newline=''))
    try:
        return _csv_instances(reader, where)
    except csv.Error as e:  # e.g. a field beyond csv.field_size_limit()
        raise UserInputError('%s line %d: not CSV that Python\'s csv module reads (%s)'
                             % (where, reader.line_num, e)) from None


def _csv_instances(reader: _csv.Reader, where: str) -> List[schema.Instance]:
    header = next(reader, None)
    if header is None:
        return []
    problems = []
    missing = [c for c in schema.FEATURES if c not in header]
    unknown = [c for c in header if c not in schema.COLUMNS]
    if missing:
        problems.append('missing column%s %s' % ('s' if len(missing) > 1 else '',
                                                 ', '.join(missing)))
    if unknown:
        problems.append('unknown column%s %s' % ('s' if len(unknown) > 1 else '',
                                                 ', '.join(map(repr, unknown))))
    if problems:
        raise UserInputError('%s line 1: %s; expected a header line naming the '
                             'features %s' % (where, '; '.join(problems),
                                              ','.join(schema.FEATURES)))
    instances = []
    for fields in reader:
        line = '%s line %d' % (where, reader.line_num)
        if not fields:
            continue
        if len(fields) != len(header):
            raise UserInputError('%s: %d fields, expected %d as in the header'
                                 % (line, len(fields), len(header)))
        instances.append(check_instance(dict(zip(header, fields)), line))
    return instances


def main(argv: Optional[Sequence[str]] = None) -> int:
    logs.quiet_tensorflow_native_logs()
    args = parse_args(argv)
    path = args.json_instances or args.csv_instances
    flag = '--json-instances' if args.json_instances else '--csv-instances'
    # Read once: a process substitution <(...) works too.
    text = user_files.read_text(path, '%s %s' % (flag, path), INSTANCES_LIMITS, flag,
                                regular=False)
    reader = read_json_instances if args.json_instances else read_csv_instances
    instances = reader(path, text)
    if not instances:
        raise UserInputError('%s %s: no instances' % (flag, path))
    # Flags and instances are read without TensorFlow; the model needs it.
    logs.configure(args.verbosity)
    from estimator_trainers import serving  # pylint: disable=g-import-not-at-top
    from taxi_estimator import predictor  # pylint: disable=g-import-not-at-top
    predict = predictor.make_predictor(serving.find_export(args.model_dir))
    for start in range(0, len(instances), args.batch_size):
        class_ids, probabilities = predict(instances[start:start + args.batch_size])
        for class_id, probs in zip(class_ids, probabilities):
            print(json.dumps({'class': int(class_id),
                              'probabilities': [round(float(p), 6) for p in probs]}))
    return 0


if __name__ == '__main__':
    errors.run_cli(main)
