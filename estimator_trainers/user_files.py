"""The one way in for a file a user hands over: bounded, regular, UTF-8, parsed safely.

Every reader of a user's YAML or JSON (trainer flags, `--config` files,
sweep files, run records, leases, feature statistics, `TF_CONFIG`) goes
through here, so no file, however written, costs more than a moment and a
few megabytes to refuse, and every refusal is one line naming the file:

- `read_bytes`: a local or gs:// file, refused unless it is a regular file
  (a named pipe planted where a file is expected would block the read for
  good) and at most `Limits.bytes` long (a larger one is not read);
  `optional=True` makes a missing file None, `regular=False` reads a pipe
  once (input read once, e.g. a process substitution `<(...)`);
- `decode`: UTF-8 (a byte order mark dropped); UTF-16/32 and other bytes
  are named with where they are;
- `parse_yaml` / `read_yaml`: PyYAML's safe loader, nested at most
  `Limits.depth` levels (PyYAML recurses per level), at most `Limits.values`
  values with every alias expanded ("billion laughs"), a key given twice in
  one mapping refused instead of silently taking the last value; returns
  where each field was written (`Written`) for messages;
- `parse_json` / `read_json`: the standard JSON decoder within the same
  bounds; `loads` is the decoder alone (nesting too deep for it a
  `ValueError`), for JSON that is no file (TF_CONFIG, a line of instances).

`tests/test_user_files.py` fails when a production module reads a file or
parses JSON or YAML any other way (an allowlist names the reads that are no
user input). No TensorFlow unless a gs:// path is read.
"""
import codecs
import dataclasses
import json
import os
import re
import reprlib
import stat
from typing import Any, AnyStr, Iterable, Literal, Optional, Protocol, Union, overload

import yaml

from estimator_trainers import logs
from estimator_trainers import safe_io
from estimator_trainers.errors import first_line
from estimator_trainers.errors import UserInputError


@dataclasses.dataclass(frozen=True)
class Limits:
    """How much of a file is read and parsed before it is refused.

    Attributes:
      bytes: the largest file read.
      depth: the deepest nesting of mappings and lists.
      values: the most values, aliases expanded.
      expected: what such a file usually holds, for the refusal.
    """
    bytes: int = 1024 * 1024
    depth: int = 32
    values: int = 10000
    expected: str = 'a file of this kind has far fewer'


# A config, a sweep file, a lease or a run record's session list: small files.
SMALL = Limits()

# Values in messages: one line, bounded, however large or nested.
_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 80
_REPR.maxlong = 40
_REPR.maxlevel = 2
_REPR.maxlist = _REPR.maxdict = 4


def show(value: object) -> str:
    """`repr(value)`, shortened to a bounded line."""
    return _REPR.repr(value)


@overload
def read_bytes(path: str, what: str, limits: Limits = ..., flag: Optional[str] = ..., *,
               optional: Literal[False] = ..., regular: bool = ...) -> bytes: ...


@overload
def read_bytes(path: str, what: str, limits: Limits = ..., flag: Optional[str] = ..., *,
               optional: bool, regular: bool = ...) -> Optional[bytes]: ...


def read_bytes(path: str, what: str, limits: Limits = SMALL, flag: Optional[str] = None, *,
               optional: bool = False, regular: bool = True) -> Optional[bytes]:
    """The bytes of the local or gs:// file `path`, at most `limits.bytes`.

    Args:
      what: how messages name the file (`--config FILE`, `FILE`).
      flag: the flag that named it, for the error's `flag`.
      optional: return None when there is no such file.
      regular: refuse anything but a regular file (a named pipe planted where
        a file is expected would block the read for good). False reads a
        pipe once, e.g. a process substitution `<(...)` of input read once.

    Raises:
      UserInputError: missing (unless `optional`), a directory, not a regular
        file, unreadable or larger than `limits.bytes`.
    """
    if safe_io.is_remote(path):
        return _read_remote(path, what, limits, flag, optional)
    try:
        # O_NONBLOCK: opening a named pipe with no writer returns at once
        # instead of blocking, and fstat then says what it is.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, 'O_CLOEXEC', 0))
    except FileNotFoundError:
        if optional:
            return None
        raise UserInputError('%s: no such file' % what, flag=flag, path=path) from None
    except OSError as e:
        raise UserInputError('%s: %s' % (what, e.strerror or e), flag=flag,
                             path=path) from None
    to_close: Optional[int] = fd  # until a file object owns it
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise UserInputError('%s is a directory; expected a file' % what, flag=flag,
                                 path=path)
        if regular and not stat.S_ISREG(mode):
            raise UserInputError('%s is %s, not a regular file' % (
                what, safe_io.not_a_regular_file(path) or 'a special file'), flag=flag,
                path=path)
        os.set_blocking(fd, True)
        with os.fdopen(fd, 'rb') as f:
            to_close = None
            data = f.read(limits.bytes + 1)
    except OSError as e:
        raise UserInputError('%s: %s' % (what, e.strerror or e), flag=flag,
                             path=path) from None
    finally:
        if to_close is not None:
            os.close(to_close)
    if len(data) > limits.bytes:
        raise _too_large(what, limits, flag, path)
    return data


def _too_large(what: str, limits: Limits, flag: Optional[str], path: str) -> UserInputError:
    return UserInputError('%s is larger than %s; %s' % (
        what, safe_io.size_text(limits.bytes), limits.expected), flag=flag, path=path)


def _read_remote(path: str, what: str, limits: Limits, flag: Optional[str],
                 optional: bool) -> Optional[bytes]:
    """`read_bytes` of a gs:// (any tf.io.gfile) path: its size asked before it is read."""
    tf = logs.import_tensorflow()
    try:
        if tf.io.gfile.isdir(path):
            raise UserInputError('%s is a directory; expected a file' % what, flag=flag,
                                 path=path)
        if tf.io.gfile.stat(path).length > limits.bytes:
            raise _too_large(what, limits, flag, path)
        with tf.io.gfile.GFile(path, 'rb') as f:
            data: bytes = f.read(limits.bytes + 1)
    except tf.errors.NotFoundError:
        if optional:
            return None
        raise UserInputError('%s: no such file' % what, flag=flag, path=path) from None
    except tf.errors.OpError as e:
        raise UserInputError('%s: %s' % (what, first_line(e)), flag=flag,
                             path=path) from None
    if len(data) > limits.bytes:  # it grew since
        raise _too_large(what, limits, flag, path)
    return data


@overload
def read_text(path: str, what: str, limits: Limits = ..., flag: Optional[str] = ..., *,
              optional: Literal[False] = ..., regular: bool = ...) -> str: ...


@overload
def read_text(path: str, what: str, limits: Limits = ..., flag: Optional[str] = ..., *,
              optional: bool, regular: bool = ...) -> Optional[str]: ...


def read_text(path: str, what: str, limits: Limits = SMALL, flag: Optional[str] = None, *,
              optional: bool = False, regular: bool = True) -> Optional[str]:
    """`read_bytes` decoded as UTF-8 (`decode`; errors name `what`); None when
    `optional` and there is no such file."""
    raw = read_bytes(path, what, limits, flag, optional=optional, regular=regular)
    return None if raw is None else decode(raw, what)


def read_yaml(path: str, what: Optional[str] = None, limits: Limits = SMALL,
              flag: Optional[str] = None) -> tuple[Any, 'Written']:
    """The parsed YAML (or JSON) document at `path` and where each field was written.

    Returns:
      `(data, Written)`; the data is what the document holds, any YAML value
      (`Any`: the caller checks its shape).

    Raises:
      UserInputError: naming the file (`what`, default the path, when it
        cannot be read; the path, the line where known and the field when
        it cannot be parsed).
    """
    return parse_yaml(decode(read_bytes(path, what or path, limits, flag), path), path,
                      limits)


def parse_yaml(text: str, source: str, limits: Limits = SMALL) -> tuple[Any, 'Written']:
    """`(data, Written)` of YAML `text`, within `limits`; `source` names it in errors."""
    loader: Optional[_BoundedLoader] = None
    try:
        loader = _BoundedLoader(text, limits)
        return loader.get_single_data(), Written(loader.lines, loader.scalars)
    except _LimitError as e:
        raise UserInputError('%s: %s%s' % (where(source, e.line), '%s: ' % e.field
                                           if e.field else '', e), path=source) from None
    except yaml.YAMLError as e:
        raise UserInputError('%s: not valid YAML (%s)' % (where(source, _yaml_line(e, text)),
                                                          _yaml_problem(e)),
                             path=source) from None
    except ValueError as e:  # an integer of more digits than Python converts
        raise UserInputError('%s: not a usable YAML value (%s)' % (source, e),
                             path=source) from None
    except RecursionError:
        raise UserInputError('%s: nested too deeply' % source, path=source) from None
    finally:
        if loader is not None:
            loader.dispose()


def read_json(path: str, what: Optional[str] = None, limits: Limits = SMALL,
              flag: Optional[str] = None, *, optional: bool = False) -> Any:
    """The parsed JSON document at `path` (`parse_json`; errors name the path).

    `what` names the file when it cannot be read (default: the path); with
    `optional`, a missing file is None.
    """
    raw = read_bytes(path, what or path, limits, flag, optional=optional)
    return None if raw is None else parse_json(decode(raw, path), path, limits)


def parse_json(text: str, source: str, limits: Limits = SMALL) -> Any:
    """JSON `text`, refused in one line naming `source` when it is not valid JSON,
    is nested deeper than `limits.depth` or holds more than `limits.values` values
    (counted in the text before it is parsed, where the text shows it: `check_values`)."""
    check_values(text, source, limits)
    try:
        data = loads(text)
    except ValueError as e:
        raise UserInputError('%s: not valid JSON (%s)' % (source, e), path=source) from None
    depth, values = _measure(data, limits)
    if depth > limits.depth:
        raise UserInputError('%s: nested more than %d levels deep' % (source, limits.depth),
                             path=source)
    if values > limits.values:
        raise UserInputError('%s: more than %d values; %s' % (source, limits.values,
                                                              limits.expected), path=source)
    return data


def json_object(text: str, source: str, expected: str = 'a JSON object',
                limits: Optional[Limits] = None) -> dict[str, Any]:
    """`text` as one JSON object (a dict): not valid JSON, or JSON of another
    kind, is refused in one line naming `source` and what was `expected`. For
    JSON that is a value, not a file (an environment variable, a line); with
    `limits`, more values than `limits.values` are refused before parsing
    (`check_values`)."""
    if limits is not None:
        check_values(text, source, limits)
    try:
        data = loads(text)
    except ValueError as e:
        raise UserInputError('%s: not valid JSON (%s)' % (source, e)) from None
    if not isinstance(data, dict):
        raise UserInputError('%s: expected %s, got %s' % (source, expected,
                                                          type(data).__name__))
    return data


def loads(text: Union[str, bytes]) -> Any:
    """`json.loads(text)`, with input nested too deeply for it a `ValueError` too.

    Python's JSON decoder recurses once per level of nesting and ends in a
    `RecursionError` (a traceback of thousands of lines) at about 1,000. For
    JSON that is no file: a line of instances, a message of our own.
    """
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError('nested too deeply: more levels of [ and { than Python\'s JSON '
                         'reader allows') from None


# JSON is read for `check_values` this much at a time: the copies and the pieces
# of one window are what the count costs in memory.
_COUNT_WINDOW = 1 << 20


def check_values(data: AnyStr, source: str, limits: Limits, start: int = 0,
                 end: Optional[int] = None) -> None:
    """Refuses JSON `data[start:end]` (text or bytes) that shows more than
    `limits.values` values, before it is parsed.

    Parsing builds every value (tens of bytes each) before `_measure` can
    count them: a 30 MB line of numbers took 7-11 s and 1.3 GB to refuse. The
    text shows a lower bound without parsing, by counting characters in place
    (no copy): a value for each comma outside strings, plus one; and for every
    two strings at least one value (a key has its value). Strings are only
    walked when neither count decides. What the text does not show (nesting,
    valid JSON) is left to the parse and `_measure`.

    Raises:
      UserInputError: the lower bound passes `limits.values`, naming `source`.
    """
    if _fewest_values(data, start, len(data) if end is None else end,
                      limits.values) > limits.values:
        raise UserInputError('%s: more than %d values; %s' % (source, limits.values,
                                                             limits.expected), path=source)


# What `_fewest_values` looks for, in text and in bytes: , " \\ [ { and nothing.
_SYMBOLS = (',', '"', '\\', '[', '{', '')
_BYTE_SYMBOLS = (b',', b'"', b'\\', b'[', b'{', b'')


def _fewest_values(data: AnyStr, start: int, end: int, limit: int) -> int:
    """A lower bound on the values `_measure` would count in `data[start:end]`,
    exact enough to decide `> limit` (it stops counting once past it)."""
    comma, quote, backslash, open_list, open_dict, empty = (
        _BYTE_SYMBOLS if isinstance(data, bytes) else _SYMBOLS)
    commas = data.count(comma, start, end)
    if commas + data.count(open_list, start, end) + data.count(open_dict, start, end) < limit:
        return commas + 1  # at most that many values: nothing to refuse
    quotes = data.count(quote, start, end)
    if not quotes:
        return commas + 1
    # Two unescaped quotes a string; an escape hides one quote (`\"`) at most.
    if (quotes - data.count(backslash + quote, start, end)) // 4 > limit:
        return limit + 1
    outside, quotes, position = 0, 0, start
    while position < end and outside < limit and quotes // 4 <= limit:
        stop = min(end, position + _COUNT_WINDOW)
        while stop < end and data[stop - 1:stop] == backslash:
            stop += 1  # an escape stays in one window
        window = data[position:stop]
        if backslash in window:  # escaped backslashes first: `\\"` ends a string
            window = window.replace(backslash * 2, empty).replace(backslash + quote, empty)
        pieces = window.split(quote)  # outside, inside, outside, ... of strings
        outside += empty.join(pieces[quotes % 2::2]).count(comma)
        quotes += len(pieces) - 1
        position = stop
    return max(outside + 1, (quotes // 2 + 1) // 2)


def _measure(data: object, limits: Limits) -> tuple[int, int]:
    """(depth, values) of parsed JSON, stopping once either passes its limit."""
    depth = values = 0
    stack: list[tuple[object, int]] = [(data, 1)]
    while stack and depth <= limits.depth and values <= limits.values:
        value, level = stack.pop()
        values += 1
        depth = max(depth, level)
        if isinstance(value, dict):
            stack.extend((v, level + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, level + 1) for v in value)
    return depth, values


def decode(raw: bytes, path: str) -> str:
    """UTF-8 text (a byte order mark dropped); other encodings are one line
    naming `path` (how messages name the file)."""
    for bom, name in ((codecs.BOM_UTF32_LE, 'UTF-32'), (codecs.BOM_UTF32_BE, 'UTF-32'),
                      (codecs.BOM_UTF16_LE, 'UTF-16'), (codecs.BOM_UTF16_BE, 'UTF-16')):
        if raw.startswith(bom):
            raise UserInputError('%s: saved as %s; save it as UTF-8' % (path, name), path=path)
    try:
        return raw.decode('utf-8-sig')
    except UnicodeDecodeError as e:
        line_start = raw.rfind(b'\n', 0, e.start) + 1
        raise UserInputError(
            '%s: not UTF-8 text (byte 0x%02x at column %d); save the file as UTF-8'
            % (where(path, raw.count(b'\n', 0, e.start) + 1), raw[e.start],
               e.start - line_start + 1), path=path) from None


def where(source: str, line: Optional[int]) -> str:
    return '%s line %d' % (source, line) if line else source


def _yaml_line(error: yaml.YAMLError, text: str) -> Optional[int]:
    """The 1-based line of a YAML error, or None."""
    mark: Optional[_Mark] = (getattr(error, 'problem_mark', None)
                             or getattr(error, 'context_mark', None))
    if mark is not None:
        return mark.line + 1
    # A ReaderError (an unacceptable character) has a position instead.
    position: Optional[int] = getattr(error, 'position', None)
    return text.count('\n', 0, position) + 1 if position is not None else None


def _yaml_problem(error: yaml.YAMLError) -> str:
    if isinstance(error, yaml.reader.ReaderError):
        return 'character %s is not allowed in YAML' % show(chr(error.character)) \
            if isinstance(error.character, int) else error.reason
    text = '; '.join(filter(None, (getattr(error, 'context', None),
                                   getattr(error, 'problem', None)))) or type(error).__name__
    return key_text(text) if len(text) <= 60 else show(text)[1:-1]


# A field's place in a document: a mapping key's text or a list index.
PathElement = Union[str, int]


@dataclasses.dataclass(frozen=True)
class Written:
    """How a config file wrote its fields, for messages.

    Attributes:
      lines: {field path: the 1-based line it starts on}.
      scalars: {field path: the text of a plain (unquoted) scalar as written}.
    """
    lines: dict[str, int]
    scalars: dict[str, str]


class _Mark(Protocol):
    """Where PyYAML's parser was (a pure-Python or a LibYAML `Mark`)."""

    @property
    def line(self) -> int:
        """The 0-based line."""


class _LimitError(Exception):
    """A limit or a duplicated key found while composing; `line` is 1-based."""

    def __init__(self, message: str, mark: Optional[_Mark], field: str) -> None:
        super().__init__(message)
        self.line = mark.line + 1 if mark is not None else None
        self.field = field


class _BoundedLoader(yaml.SafeLoader):  # pylint: disable=too-many-ancestors
    """PyYAML's SafeLoader with bounds, duplicate-key refusal and field lines.

    Composing is where nesting and aliases cost: `compose_node` recurses once
    per level (a RecursionError after about 1000) and an alias reuses the
    anchored node, so the size of the document as written is not what a walk
    over the loaded data costs. Each node's size with its aliases expanded is
    counted here, from the sizes of its children, before anything is built.

    Attributes:
      lines: {field path (`field_path`): the 1-based line it starts on}.
      scalars: {field path: the text of a plain (unquoted) scalar as written}.
    """

    def __init__(self, stream: str, limits: Limits) -> None:
        super().__init__(stream)
        self._limits = limits
        self.lines: dict[str, int] = {}
        self.scalars: dict[str, str] = {}
        self._path: list[PathElement] = []
        self._depth = 0
        self._sizes: dict[int, int] = {}  # id(node) -> values in it, aliases expanded
        self._total = 0  # values composed so far, aliases expanded

    def compose_node(self, parent: Optional[yaml.Node],
                     index: object) -> Optional[yaml.Node]:
        """The node, sized and placed; `index` is its key's node in a mapping
        (None for the key itself), its position in a sequence."""
        # types-PyYAML leaves the parser's peek_event unannotated.
        event = self.peek_event()  # type: ignore[no-untyped-call]
        label = _label(parent, index)
        if label is not None:
            self._path.append(label)
            mark = index.start_mark if isinstance(index, yaml.Node) else event.start_mark
            if mark is not None:
                self.lines.setdefault(field_path(self._path), mark.line + 1)
        field = field_path(self._path)
        self._depth += 1
        if self._depth > self._limits.depth:
            raise _LimitError('nested more than %d levels deep' % self._limits.depth,
                              event.start_mark, field_path(self._path[:3]) + '...')
        # typeshed's stub says `index: int`; PyYAML passes a mapping's key node too.
        node = super().compose_node(parent, index)  # type: ignore[arg-type]
        self._depth -= 1
        if isinstance(node, yaml.ScalarNode) and not node.style and label is not None:
            self.scalars.setdefault(field_path(self._path), node.value)
        if isinstance(event, yaml.AliasEvent):
            if id(node) not in self._sizes:
                raise _LimitError('alias *%s refers to a value that contains it'
                                  % event.anchor, event.start_mark, field)
            self._total += self._sizes[id(node)]
        else:
            if isinstance(node, yaml.MappingNode):
                self._refuse_duplicate_keys(node)
                children = [child for pair in node.value for child in pair]
            else:
                children = node.value if isinstance(node, yaml.SequenceNode) else []
            self._sizes[id(node)] = 1 + sum(self._sizes[id(child)] for child in children)
            self._total += 1
        if self._total > self._limits.values:  # counted as composed: a long list stops early
            raise _LimitError('more than %d values once aliases are expanded; %s'
                              % (self._limits.values, self._limits.expected),
                              event.start_mark, field)
        if label is not None:
            self._path.pop()
        return node

    def _refuse_duplicate_keys(self, node: yaml.MappingNode) -> None:
        first: dict[tuple[str, str], int] = {}
        for key, _ in node.value:
            if not isinstance(key, yaml.ScalarNode):
                continue
            if (key.tag, key.value) in first:
                raise _LimitError(
                    'duplicated key (first on line %d); YAML would silently keep only the '
                    'last value: remove one' % first[key.tag, key.value], key.start_mark,
                    field_path(self._path + [key_text(key.value)]))
            first[key.tag, key.value] = key.start_mark.line + 1


def _label(parent: Optional[yaml.Node], index: object) -> Optional[PathElement]:
    """The path element of a node being composed: its key's text in a mapping,
    its index in a sequence, None for a key or the document itself."""
    if isinstance(parent, yaml.MappingNode) and isinstance(index, yaml.Node):
        return key_text(index.value) if isinstance(index, yaml.ScalarNode) else '?'
    if isinstance(parent, yaml.SequenceNode) and isinstance(index, int):
        return index
    return None


def field_path(elements: Iterable[PathElement]) -> str:
    """`['trainingInput', 'params', 0]` -> `trainingInput.params[0]`."""
    text = ''
    for element in elements:
        text += '[%d]' % element if isinstance(element, int) else \
            ('.' if text else '') + element
    return text


def key_text(key: object) -> str:
    """A mapping key as a field path shows it: one line, at most 60 characters."""
    text = ''.join(c if c.isprintable() else repr(c)[1:-1] for c in str(key))
    return text if len(text) <= 60 else text[:57] + '...'


