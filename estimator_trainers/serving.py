"""A SavedModel's serving signature as a function of JSON instances (TensorFlow).

What `gcloud ai-platform local predict` did, and what Vertex AI's prebuilt
TensorFlow prediction image (TensorFlow Serving's REST API) does with the
`instances` of a request, for any export: this project's trainers' and a
user's package's.

- `find_export`: an export directory, or the newest timestamped one in it.
- `load`: the SavedModel and one signature (`--signature-name`, else
  `serving_default`, else the only one), refused in one line when it cannot
  be loaded or has no serving signature.
- `Signature.predict`: instances in TensorFlow Serving's row format ->
  predictions in the same format.
- `check_export`: the check before a deploy: the export loads and its
  signature runs on one instance.

Instances (TensorFlow Serving's row format): a signature with one input
takes each instance as that input's value (or as `{"<input>": value}`); with
several inputs each instance is an object with a value per input. A value is
a number, a string or a nested list shaped like the input without its batch
dimension. String inputs take text, or `{"b64": "<base64>"}` for bytes
(serialized tf.Example protos, encoded images).

Predictions: one per instance; a signature with one output gives that
output's value, several give an object of output name -> value. String
outputs are text, or `{"b64": ...}` when not UTF-8 or when the output's name
ends in `_bytes` (TensorFlow Serving's rule).
"""
import base64
import binascii
import dataclasses
import os
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import numpy.typing as npt
import tensorflow as tf

from estimator_trainers import errors
from estimator_trainers.errors import UserInputError

DEFAULT_SIGNATURE = tf.saved_model.DEFAULT_SERVING_SIGNATURE_DEF_KEY
# Instances per call of the signature: bounds the memory of a large file.
BATCH = 64
_EXPORTS_HINT = 'expected <job-dir>/export/<timestamp> or <job-dir>/export'
# A JSON value as `json.load` gives it: an instance, a prediction, or part of one.
Json = Union[None, bool, int, float, str, List['Json'], Dict[str, 'Json']]
# Names instance i in messages.
Where = Callable[[int], str]


def find_export(model_dir: str, flag: str = '--model-dir') -> str:
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
        raise UserInputError('%s %s: no SavedModel there (%s)' % (flag, model_dir, _EXPORTS_HINT),
                             flag=flag)
    return os.path.join(model_dir, exports[-1])


def load(export_dir: str, signature_name: Optional[str] = None,
         flag: str = '--model-dir') -> 'Signature':
    """The `Signature` of the SavedModel at `export_dir` that serving calls.

    Args:
      signature_name: `--signature-name`; None: `serving_default`, else the
        SavedModel's only signature.

    Raises:
      UserInputError: the SavedModel cannot be loaded (unparsable
        saved_model.pb, missing variables), has no serving signature, or not
        the one named.
    """
    where = '%s %s' % (flag, export_dir)
    try:
        loaded = tf.saved_model.load(export_dir, tags=[tf.saved_model.SERVING])
    except (OSError, ValueError, RuntimeError, tf.errors.OpError) as e:
        index = os.path.join(export_dir, 'variables', 'variables.index')
        # Restoring variables fails with an OpError (an Estimator's export) or a
        # FileNotFoundError (a TF2 object graph's); an unparsable graph with OSError.
        if isinstance(e, (tf.errors.OpError, FileNotFoundError)) and not tf.io.gfile.exists(
                index):
            raise UserInputError('%s: the export lacks its variables (%s); copy the whole '
                                 'export directory' % (where, index), flag=flag) from None
        raise UserInputError('%s: not a loadable SavedModel (%s)'
                             % (where, errors.first_line(e)), flag=flag) from None
    names = sorted(loaded.signatures.keys())
    if signature_name is not None:
        if signature_name not in names:
            raise UserInputError('--signature-name %s: %s has no such signature (it has: %s)'
                                 % (signature_name, where, ', '.join(names) or 'none'),
                                 flag='--signature-name')
        name = signature_name
    elif DEFAULT_SIGNATURE in names:
        name = DEFAULT_SIGNATURE
    elif len(names) == 1:
        name = names[0]
    elif not names:
        raise UserInputError(
            '%s: the SavedModel has no serving signature (export it with a '
            'serving_input_receiver_fn, or tf.saved_model.save(..., signatures=...))'
            % where, flag=flag)
    else:
        raise UserInputError('%s: no %s signature; pass --signature-name (it has: %s)'
                             % (where, DEFAULT_SIGNATURE, ', '.join(names)), flag=flag)
    return Signature(loaded, name, loaded.signatures[name], where)


class Signature:
    """One signature of a loaded SavedModel, called on JSON instances.

    Attributes:
      name: the signature's key; `available`: every signature's key.
      function: the signature's concrete function (keyword tensors -> dict).
      inputs: {input name: tf.TensorSpec}, batch dimension first.
      outputs: the output names, sorted.
    """

    def __init__(self, loaded: tf.__internal__.tracking.AutoTrackable, name: str,
                 function: tf.types.experimental.ConcreteFunction, where: str) -> None:
        self._loaded = loaded  # the signature's variables live as long as it does
        self.function = function
        self.available: Tuple[str, ...] = tuple(sorted(loaded.signatures.keys()))
        self.name = name
        self.where = where
        self.inputs: Dict[str, tf.TensorSpec] = dict(
            sorted(function.structured_input_signature[1].items()))
        self.outputs: List[str] = sorted(function.structured_outputs)
        for input_name, spec in self.inputs.items():
            if spec.shape.rank == 0:
                raise UserInputError(
                    '%s: signature %s input %s is a scalar; serving needs a batch '
                    'dimension on every input' % (where, name, input_name))
            if spec.dtype not in _LEAVES:
                raise UserInputError('%s: signature %s input %s is %s, which JSON instances '
                                     'cannot give' % (where, name, input_name, spec.dtype.name))

    def describe(self) -> str:
        """`name (dtype [shape]), ...` of the inputs, for messages and docs."""
        return ', '.join('%s (%s %s)' % (n, s.dtype.name, _shape_text(s.shape))
                         for n, s in self.inputs.items())

    def predict(self, instances: Sequence[Json], where: Optional[Where] = None) -> List[Json]:
        """Predictions of `instances` (row format), `BATCH` at a time.

        Args:
          where: `where(i)` names instance i in messages (default `instance i+1`).

        Raises:
          UserInputError: an instance does not fit the signature, or the
            signature failed on it.
        """
        where = where or (lambda i: 'instance %d' % (i + 1))
        predictions: List[Json] = []
        for start in range(0, len(instances), BATCH):
            batch = instances[start:start + BATCH]
            try:
                predictions.extend(self.run(batch, lambda i: where(start + i)))  # (called at once)
            except tf.errors.OpError as e:
                span = (where(start) if len(batch) == 1 else
                        '%s to %s' % (where(start), where(start + len(batch) - 1)))
                raise UserInputError('%s: signature %s failed on %s (%s)' % (
                    self.where, self.name, span, errors.first_line(e))) from None
        return predictions

    def run(self, instances: Sequence[Json], where: Where) -> List[Json]:
        """Predictions of one batch of `instances`.

        Raises:
          UserInputError: an instance does not fit the signature.
          tf.errors.OpError: the signature failed on them.
        """
        return self._rows(self.function(**self.encode(instances, where)), len(instances))

    def encode(self, instances: Sequence[Json], where: Where) -> Dict[str, tf.Tensor]:
        """{input name: tf.Tensor} of a batch of instances."""
        columns: Dict[str, List[npt.NDArray[Any]]] = {name: [] for name in self.inputs}
        for i, instance in enumerate(instances):
            for name, value in self._values(instance, where(i)).items():
                columns[name].append(_array(self.inputs[name], value, '%s, input %s'
                                            % (where(i), name)))
        return {name: tf.constant(np.stack(values), self.inputs[name].dtype)
                for name, values in columns.items()}

    def _values(self, instance: Json, where: str) -> Mapping[str, Json]:
        if len(self.inputs) == 1:
            (name,) = self.inputs
            if isinstance(instance, dict) and set(instance) == {name}:
                return {name: instance[name]}
            return {name: instance}
        if not isinstance(instance, dict):
            raise UserInputError('%s: expected an object with the inputs %s, got %s'
                                 % (where, ', '.join(self.inputs), _kind(instance)))
        missing = [n for n in self.inputs if n not in instance]
        unknown = sorted(n for n in instance if n not in self.inputs)
        if missing or unknown:
            raise UserInputError('%s: %s (signature %s takes %s)' % (
                where, '; '.join(filter(None, (
                    'lacks %s' % ', '.join(missing) if missing else '',
                    'unknown input %s' % ', '.join(map(repr, unknown)) if unknown else ''))),
                self.name, ', '.join(self.inputs)))
        return instance

    def _rows(self, outputs: Mapping[str, tf.Tensor], count: int) -> List[Json]:
        arrays: Dict[str, npt.NDArray[Any]] = {}
        for name in self.outputs:
            array = outputs[name].numpy()
            if array.ndim == 0 or array.shape[0] != count:
                raise UserInputError(
                    '%s: signature %s output %s has shape %s, not a row per instance (%d); '
                    'serving needs a batch dimension on every output'
                    % (self.where, self.name, name, list(array.shape), count))
            arrays[name] = array
        rows: List[Json] = []
        for i in range(count):
            row = {name: _json_value(arrays[name][i], name.endswith('_bytes'))
                   for name in self.outputs}
            rows.append(row[self.outputs[0]] if len(self.outputs) == 1 else row)
        return rows

    def example_instance(self) -> Json:
        """One instance of the signature's shape: zeros, false, empty strings
        (unknown dimensions of length 1)."""
        def value(spec: tf.TensorSpec) -> Json:
            shape = [d if d is not None else 1 for d in spec.shape.as_list()[1:]]
            leaf: Json = '' if spec.dtype == tf.string else False if spec.dtype == tf.bool else 0
            filled: Json = np.full(shape, leaf, dtype=object).tolist() if shape else leaf
            return filled
        values = {name: value(spec) for name, spec in self.inputs.items()}
        return next(iter(values.values())) if len(values) == 1 else values


@dataclasses.dataclass(frozen=True)
class Checked:
    """What the check before a deploy found.

    Attributes:
      export_dir: the SavedModel checked.
      signature: its signature's name; `inputs`: its inputs described.
      prediction: the prediction of the instance it ran, or None.
      note: why it did not run one, or None.
    """
    export_dir: str
    signature: Optional[str]
    inputs: Optional[str]
    prediction: Json = None
    note: Optional[str] = None


def check_export(origin: str, signature_name: Optional[str] = None,
                 instances: Sequence[Json] = (), flag: str = '--origin',
                 instances_flag: str = '--check-instances') -> Checked:
    """Loads the export at `origin` and calls its signature on one instance.

    Args:
      instances: the user's instances (`instances_flag`; the first is used).
        None given: one made from the signature (`example_instance`), whose
        refusal by the model's own input checks (a tf.Example parser, a CSV
        decoder) is a note, not a broken export.

    Returns:
      `Checked`.

    Raises:
      UserInputError: no export there, not loadable, no serving signature,
        outputs without a batch dimension, or the signature failed on the
        user's instance, or on its own example in any other way.
    """
    export_dir = find_export(origin, flag)
    signature = load(export_dir, signature_name, flag)
    given = tuple(instances[:1])
    instance = given[0] if given else signature.example_instance()
    where = '%s instance 1' % instances_flag if given else 'the generated instance'
    try:
        (prediction,) = signature.run([instance], lambda i: where)
    except tf.errors.InvalidArgumentError as e:
        if given:
            raise UserInputError('%s %s: signature %s failed on %s (%s)' % (
                flag, export_dir, signature.name, where, errors.first_line(e))) from None
        return Checked(export_dir, signature.name, signature.describe(), note=(
            'signature %s refused an instance of zeros and empty strings (%s): the export '
            'loads and runs; pass %s FILE with one instance of yours to check a prediction'
            % (signature.name, errors.first_line(e), instances_flag)))
    except tf.errors.OpError as e:
        raise UserInputError('%s %s: signature %s failed (%s); the export is broken'
                             % (flag, export_dir, signature.name, errors.first_line(e))) from None
    return Checked(export_dir, signature.name, signature.describe(), prediction=prediction)


# ----------------------------------------------------------------- values


_LEAVES: Dict[tf.DType, str] = {
    tf.string: 'text or {"b64": ...}', tf.bool: 'true or false',
    **{t: 'a number' for t in (tf.float16, tf.bfloat16, tf.float32, tf.float64)},
    **{t: 'an integer' for t in (tf.int8, tf.int16, tf.int32, tf.int64, tf.uint8,
                                 tf.uint16, tf.uint32, tf.uint64)},
}


def _array(spec: tf.TensorSpec, value: Json, where: str) -> npt.NDArray[Any]:
    """One instance's value of input `spec` as a numpy array (no batch dimension)."""
    shape, leaves = _shape_and_leaves(value, where)
    expected = spec.shape.as_list()[1:]
    if len(shape) != len(expected) or any(e is not None and e != s
                                           for e, s in zip(expected, shape)):
        raise UserInputError('%s: expected shape %s of %s, got shape %s'
                             % (where, _shape_text(expected), spec.dtype.name,
                                _shape_text(shape)))
    dtype = spec.dtype
    if dtype == tf.string:
        converted = [_bytes(leaf, where) for leaf in leaves]
        return np.array(converted, dtype=object).reshape(shape)
    return np.array([_number(dtype, leaf, where) for leaf in leaves],
                    dtype=dtype.as_numpy_dtype).reshape(shape)


def _shape_and_leaves(value: Json, where: str) -> Tuple[Tuple[int, ...], List[Json]]:
    """The shape of a nested list and its leaves in row-major order.

    Raises:
      UserInputError: rows of different lengths.
    """
    if not isinstance(value, list):
        return (), [value]
    if not value:
        return (0,), []
    parts = [_shape_and_leaves(item, where) for item in value]
    inner = parts[0][0]
    if any(shape != inner for shape, _ in parts):
        raise UserInputError('%s: nested lists of different lengths (%s)'
                             % (where, ', '.join(sorted({_shape_text(s) for s, _ in parts}))))
    return (len(value),) + inner, [leaf for _, leaves in parts for leaf in leaves]


def _bytes(leaf: Json, where: str) -> bytes:
    if isinstance(leaf, str):
        return leaf.encode('utf-8')
    if isinstance(leaf, dict) and set(leaf) == {'b64'} and isinstance(leaf['b64'], str):
        try:
            return base64.b64decode(leaf['b64'], validate=True)
        except (binascii.Error, ValueError):
            raise UserInputError('%s: "b64" holds no valid base64 text' % where) from None
    raise UserInputError('%s: expected text or {"b64": "<base64>"}, got %s'
                         % (where, _kind(leaf)))


def _number(dtype: tf.DType, leaf: Json, where: str) -> Union[bool, int, float]:
    if dtype == tf.bool:
        if not isinstance(leaf, bool):
            raise UserInputError('%s: expected true or false, got %s' % (where, _kind(leaf)))
        return leaf
    if isinstance(leaf, bool) or not isinstance(leaf, (int, float)):
        raise UserInputError('%s: expected %s, got %s' % (where, _LEAVES[dtype], _kind(leaf)))
    if dtype.is_integer:
        if isinstance(leaf, float) and not leaf.is_integer():
            raise UserInputError('%s: expected an integer (%s), got %r'
                                 % (where, dtype.name, leaf))
        if not dtype.min <= leaf <= dtype.max:
            raise UserInputError('%s: %s is outside %s\'s range [%d, %d]'
                                 % (where, _show(leaf), dtype.name, dtype.min, dtype.max))
        return int(leaf)
    if abs(leaf) > dtype.max and leaf == leaf and abs(leaf) != float('inf'):
        raise UserInputError('%s: %s is outside %s\'s range' % (where, _show(leaf), dtype.name))
    return leaf


def _json_value(value: Union[npt.NDArray[Any], np.generic, bytes, Json],
                as_b64: bool) -> Json:
    """A numpy value (array or scalar) as JSON data; bytes as text or {"b64": ...}."""
    if isinstance(value, np.ndarray):
        return [_json_value(item, as_b64) for item in value]
    if isinstance(value, bytes):
        if not as_b64:
            try:
                return value.decode('utf-8')
            except UnicodeDecodeError:
                pass
        return {'b64': base64.b64encode(value).decode('ascii')}
    item: Json = value.item() if isinstance(value, np.generic) else value
    return item


def _kind(value: object) -> str:
    if isinstance(value, dict):
        return 'an object with keys %s' % ', '.join(map(repr, sorted(value)[:5]))
    return {list: 'a list', str: 'text', bool: 'a boolean', type(None): 'null',
            int: 'a number', float: 'a number'}.get(type(value), type(value).__name__)


def _show(number: Union[int, float]) -> str:
    text = repr(number)
    return text if len(text) <= 24 else text[:21] + '...'


def _shape_text(shape: Union[tf.TensorShape, Sequence[Optional[int]]]) -> str:
    dims = shape.as_list() if hasattr(shape, 'as_list') else list(shape)
    return '[%s]' % ', '.join('?' if d is None else str(d) for d in dims)

