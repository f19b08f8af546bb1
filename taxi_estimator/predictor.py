"""A taxi export as a function of instances: loads its serving signature (TensorFlow).

`predict` is the command line; it checks the instances without TensorFlow
and loads this module only then. Instances are encoded the way the export's
serving signature expects, whatever its `--serving-export-format`. Finding
and loading the export is `estimator_trainers.serving`'s, as for any export
(`ai-platform.sh local predict`).
"""
from __future__ import annotations

import csv
import io
import math
from typing import Callable, Dict, Sequence, Tuple

import numpy as np
import numpy.typing as npt
import tensorflow as tf

from estimator_trainers import serving
from estimator_trainers.errors import UserInputError
from taxi_estimator import input as input_lib
from taxi_estimator import schema

# A batch of instances -> (class ids [batch] int64, probabilities [batch, 2] float32).
Predict = Callable[[Sequence[schema.Instance]],
                   Tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]]
# A batch of instances -> the serving signature's input tensors.
Encode = Callable[[Sequence[schema.Instance]], Dict[str, tf.Tensor]]


def make_predictor(export_dir: str) -> Predict:
    """A function list-of-instances -> (class_ids, probabilities) arrays.

    Encodes the instances the way the export's serving signature expects:
    typed feature inputs (JSON), `csv_row` strings (CSV) or serialized
    tf.Example `examples` (EXAMPLE).
    """
    signature = _predict_signature(export_dir)
    inputs = set(signature.inputs)
    encode: Encode
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

    def predict(batch: Sequence[schema.Instance]
                ) -> Tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
        outputs = signature.function(**encode(batch))
        return outputs['class_ids'].numpy()[:, 0], outputs['probabilities'].numpy()
    return predict


def _predict_signature(export_dir: str) -> serving.Signature:
    """The `serving_default` signature of a taxi export (every format has one).

    Raises:
      UserInputError: the SavedModel cannot be loaded (`serving.load`) or is
        not a taxi classifier.
    """
    signature: serving.Signature = serving.load(export_dir)
    if signature.name != serving.DEFAULT_SIGNATURE or \
            not {'class_ids', 'probabilities'} <= set(signature.outputs):
        raise UserInputError('%s: not a taxi model export (its serving_default signature '
                             'lacks class_ids and probabilities; signatures: %s)'
                             % (signature.where, ', '.join(signature.available) or 'none'))
    return signature


def _feature_tensors(batch: Sequence[schema.Instance]) -> Dict[str, tf.Tensor]:
    dtypes = {'float': tf.float32, 'int': tf.int64, 'string': tf.string}
    return {c: tf.constant([i[c] for i in batch], dtypes[schema.kind(c)])
            for c in schema.FEATURES}


def _csv_row(instance: schema.Instance) -> str:
    out = io.StringIO()
    csv.writer(out, lineterminator='').writerow(
        [_csv_field(instance[c]) for c in schema.FEATURES])
    return out.getvalue()


def _csv_field(value: schema.Value) -> str:
    if isinstance(value, float):
        return '' if math.isnan(value) else repr(value)
    if isinstance(value, int):
        return '' if value == schema.MISSING_INT else str(value)
    return value


def _example(instance: schema.Instance) -> tf.train.Example:
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
                bytes_list=tf.train.BytesList(value=[str(value).encode('utf-8')]))
    return tf.train.Example(features=tf.train.Features(feature=feature))
