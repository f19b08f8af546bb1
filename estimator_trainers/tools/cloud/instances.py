"""Instances files as gcloud read them, predictions as gcloud printed them (no TensorFlow).

- `read`: `--json-instances` (one JSON value per line), `--text-instances`
  (one string per line) or `--json-request` (a request body,
  `{"instances": [...]}`), `-` for standard input; gcloud's rules (no empty
  line, at least one instance, at most `limit` for online predictions),
  within `user_files`' bounds (a regular file, UTF-8, `LOCAL_LIMITS`).
- `render`: a prediction response as gcloud printed it: a table of the
  predictions' keys (upper case, sorted), a line per prediction when they
  are not objects, or the whole response with `--format json|yaml`.
"""
import dataclasses
import json
import sys
from typing import Any, BinaryIO, List, Mapping, Optional, Sequence, Tuple

import yaml

from estimator_trainers import user_files
from estimator_trainers.errors import UserInputError

JSON_INSTANCES, TEXT_INSTANCES, JSON_REQUEST = '--json-instances', '--text-instances', \
    '--json-request'
FLAGS = (JSON_INSTANCES, TEXT_INSTANCES, JSON_REQUEST)
# A file of images may be large, but every value parsed costs tens of bytes of
# memory: 32 MiB of instances (about 2,500 CIFAR-10 images as pixel lists),
# each at most 4M values (a 1,000 x 1,000 RGB image).
LOCAL_LIMITS = user_files.Limits(bytes=32 * 1024 * 1024, depth=32, values=4 * 1024 * 1024,
                                 expected='split the instances into several files')
# What gcloud sent in one online prediction request, and what Vertex AI takes.
ONLINE_MAX_INSTANCES = 100
ONLINE_MAX_BYTES = 1_500_000
FORMATS = ('table', 'json', 'yaml')


@dataclasses.dataclass(frozen=True)
class Instances:
    """Instances read from a file, and how messages name each one.

    Attributes:
      values: the instances (parsed JSON values, or strings).
      source: `--json-instances FILE` and the like.
      by_line: instance i is on line i + 1 (instances files), else it is
        instance i + 1 of a request body.
    """
    values: Tuple[Any, ...]
    source: str
    by_line: bool

    def where(self, i: int) -> str:
        """How messages name instance `i`."""
        return '%s %s %d' % (self.source, 'line' if self.by_line else 'instance', i + 1)


def read(flag: str, path: str, limit: Optional[int] = None,
         stdin: Optional[BinaryIO] = None) -> 'Instances':
    """The instances of the file `flag` names (`-`: standard input).

    Args:
      flag: one of `FLAGS`.
      limit: the most instances allowed (online predictions: 100).

    Raises:
      UserInputError: one line naming the file (and line) when it cannot be
        read, holds an empty line, a line that is not JSON, no instances or
        more than `limit`.
    """
    source = '%s %s' % (flag, path)
    raw = _read_bytes(path, source, flag, stdin)
    _check_values(raw, flag, source)
    text = user_files.decode(raw, source)
    del raw  # freed before the lines are split
    if flag == JSON_REQUEST:
        body = user_files.parse_json(text, source, LOCAL_LIMITS)
        if not isinstance(body, dict) or 'instances' not in body:
            raise UserInputError('%s: expected a request body {"instances": [...]}' % source,
                                 flag=flag)
        if not isinstance(body['instances'], list):
            raise UserInputError('%s: "instances" must be a list' % source, flag=flag)
        values = tuple(body['instances'])
    else:
        read: List[Any] = []
        lines = text.split('\n')
        if lines and lines[-1] == '':
            lines.pop()  # the final newline
        for number, line in enumerate(lines, 1):
            line = line.rstrip('\r')
            where = '%s line %d' % (source, number)
            if not line:
                raise UserInputError('%s: empty line (gcloud refused them too; an instance '
                                     'per line)' % where, flag=flag)
            read.append(user_files.parse_json(line, where, LOCAL_LIMITS)
                          if flag == JSON_INSTANCES else line)
        values = tuple(read)
    if not values:
        raise UserInputError('%s: no instances' % source, flag=flag)
    if limit is not None and len(values) > limit:
        raise UserInputError('%s: %d instances; an online prediction takes at most %d '
                             '(split the file)' % (source, len(values), limit), flag=flag)
    return Instances(values, source, flag != JSON_REQUEST)


def _check_values(raw: bytes, flag: str, source: str) -> None:
    """Refuses an instance (a line, or the request body) that shows more values than
    `LOCAL_LIMITS`, in the bytes as read: before anything is decoded, split or
    parsed (a 30 MB line took seconds and a gigabyte to refuse)."""
    if flag == TEXT_INSTANCES:
        return
    if flag == JSON_REQUEST:
        user_files.check_values(raw, source, LOCAL_LIMITS)
        return
    start, number = 0, 1
    while start < len(raw):
        end = raw.find(b'\n', start)
        end = len(raw) if end < 0 else end
        user_files.check_values(raw, '%s line %d' % (source, number), LOCAL_LIMITS,
                                start, end)
        start, number = end + 1, number + 1


def _read_bytes(path: str, source: str, flag: str, stdin: Optional[BinaryIO]) -> bytes:
    if path != '-':
        data: bytes = user_files.read_bytes(path, source, LOCAL_LIMITS, flag)
        return data
    stream = stdin if stdin is not None else sys.stdin.buffer
    data = stream.read(LOCAL_LIMITS.bytes + 1)
    if len(data) > LOCAL_LIMITS.bytes:
        raise UserInputError('%s: more than %d bytes; %s' % (
            source, LOCAL_LIMITS.bytes, LOCAL_LIMITS.expected), flag=flag)
    return data


def render(response: Mapping[str, Any], fmt: str = 'table') -> str:
    """A prediction response (`{"predictions": [...]}`) as gcloud printed it (`fmt`:
    one of `FORMATS`)."""
    if fmt == 'json':
        return json.dumps(response, indent=2, sort_keys=True) + '\n'
    if fmt == 'yaml':
        return str(yaml.safe_dump(dict(response), sort_keys=True))
    predictions = response.get('predictions')
    if not isinstance(predictions, list):
        return json.dumps(response, indent=2, sort_keys=True) + '\n'
    if not predictions:
        return ''
    if not isinstance(predictions[0], dict):
        return ''.join(_cell(p) + '\n' for p in predictions)
    keys = sorted(predictions[0])
    return table([key.upper() for key in keys],
                 [[_cell(p.get(k)) if isinstance(p, dict) else '' for k in keys]
                  for p in predictions])


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns left-aligned, two spaces apart, as gcloud's table printer."""
    widths = [max(len(text) for text in column) for column in zip(header, *rows)]
    return ''.join('  '.join(text.ljust(width) for text, width in zip(row, widths)).rstrip()
                   + '\n' for row in [header, *rows])


def _cell(value: Any) -> str:
    if value is None:
        return ''
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True)
