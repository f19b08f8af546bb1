"""A taxi export as a function of instances: loads its serving signature (TensorFlow).

`predict` is the command line; it checks the instances without TensorFlow
and loads this module only then. Instances are encoded the way the export's
serving signature expects, whatever its `--serving-export-format`.
"""
import csv
import io
import math
import os

import tensorflow as tf

from estimator_trainers import errors
from estimator_trainers.errors import UserInputError
from taxi_estimator import input as input_lib
from taxi_estimator import schema


def find_export(model_dir):
    """`model_dir` itself, or its newest timestamped export.

    Raises:
      UserInputError: no SavedModel there.
    """
    if tf.saved_model.contains_saved_model(model_dir):
        return model_dir
    exports = []
    if tf.io.gfile.isdir(model_dir):
        exports = sorted(
            name.rstrip('/') for name in tf.io.gfile.listdir(model_dir)
            if name.rstrip('/').isdigit()
            and tf.saved_model.contains_saved_model(os.path.join(model_dir, name)))
    if not exports:
        raise UserInputError('--model-dir %s: no SavedModel there (expected '
                             '<job-dir>/export/<timestamp> or <job-dir>/export)'
                             % model_dir)
    return os.path.join(model_dir, exports[-1])


def make_predictor(export_dir):
    """A function list-of-instances -> (class_ids, probabilities) arrays.

    Encodes the instances the way the export's serving signature expects:
    typed feature inputs (JSON), `csv_row` strings (CSV) or serialized
    tf.Example `examples` (EXAMPLE).
    """
    signature = _predict_signature(export_dir)
    inputs = set(signature.structured_input_signature[1])
    if inputs == {input_lib.CSV_INPUT}:
        encode = lambda batch: {input_lib.CSV_INPUT: tf.constant([_csv_row(i) for i in batch])}
    elif inputs == {input_lib.EXAMPLE_INPUT}:
        encode = lambda batch: {input_lib.EXAMPLE_INPUT: tf.constant(
            [_example(i).SerializeToString() for i in batch])}
    elif inputs == set(schema.FEATURES):
        encode = _feature_tensors
    else:
        raise UserInputError('%s: the serving signature takes %s, not a taxi model '
                             'export' % (export_dir, ', '.join(sorted(inputs))))

    def predict(batch):
        outputs = signature(**encode(batch))
        return outputs['class_ids'].numpy()[:, 0], outputs['probabilities'].numpy()
    return predict


def _predict_signature(export_dir):
    """The `serving_default` signature of a taxi export (every format has one).

    Raises:
      UserInputError: the SavedModel cannot be loaded (unparsable
        saved_model.pb, missing variables) or is not a taxi classifier.
    """
    where = '--model-dir %s' % export_dir
    try:
        loaded = tf.saved_model.load(export_dir)
    except (OSError, ValueError, tf.errors.OpError) as e:
        index = os.path.join(export_dir, 'variables', 'variables.index')
        # Restoring variables fails with an OpError; an unparsable graph with OSError.
        if isinstance(e, tf.errors.OpError) and not tf.io.gfile.exists(index):
            raise UserInputError('%s: the export lacks its variables (%s); copy the whole '
                                 'export directory' % (where, index)) from None
        raise UserInputError('%s: not a loadable SavedModel (%s)'
                             % (where, errors.first_line(e))) from None
    signature = loaded.signatures.get('serving_default')
    outputs = signature and signature.structured_outputs
    if not outputs or not {'class_ids', 'probabilities'} <= set(outputs):
        raise UserInputError('%s: not a taxi model export (its serving_default signature '
                             'lacks class_ids and probabilities; signatures: %s)'
                             % (where, ', '.join(sorted(loaded.signatures)) or 'none'))
    return signature


def _feature_tensors(batch):
    dtypes = {'float': tf.float32, 'int': tf.int64, 'string': tf.string}
    return {c: tf.constant([i[c] for i in batch], dtypes[schema.kind(c)])
            for c in schema.FEATURES}


def _csv_row(instance):
    out = io.StringIO()
    csv.writer(out, lineterminator='').writerow(
        [_csv_field(instance[c]) for c in schema.FEATURES])
    return out.getvalue()


def _csv_field(value):
    if isinstance(value, float):
        return '' if math.isnan(value) else repr(value)
    if isinstance(value, int):
        return '' if value == schema.MISSING_INT else str(value)
    return value


def _example(instance):
    feature = {}
    for column in schema.FEATURES:
        value = instance[column]
        if value == schema.missing_value(column) or value != value:
            continue  # absent: the parser fills in the missing stand-in
        what = schema.kind(column)
        if what == 'float':
            feature[column] = tf.train.Feature(float_list=tf.train.FloatList(value=[value]))
        elif what == 'int':
            feature[column] = tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))
        else:
            feature[column] = tf.train.Feature(
                bytes_list=tf.train.BytesList(value=[value.encode('utf-8')]))
    return tf.train.Example(features=tf.train.Features(feature=feature))
