"""Typed checks of a parsed config that fail with `<file> line <n>: <field>: <what is wrong>`.

`configs` validates a trainingInput with a `Checker`: each check names the
field path it checks (`trainingInput.workerConfig.acceleratorConfig.count`),
and a failure names the line where the file wrote it (`user_files.Written`),
the value as written where YAML 1.1 read it as something else (`no` as
false, `1:30` as 90), and what was expected.
"""
import math
import re
from typing import Any, Mapping, NoReturn, Optional, Sequence

from estimator_trainers import user_files
from estimator_trainers.errors import UserInputError

# Vertex AI sends INTEGER parameters as int64.
MAX_INT64 = 2**63 - 1
_DECIMAL_RE = re.compile(r'[-+]?(0|[1-9][0-9]*)')  # YAML 1.1: 010 is octal
show = user_files.show


def describe(value: Any) -> str:
    """`value` for a message: its kind and a bounded repr."""
    if value is None:
        return 'nothing'
    if isinstance(value, str):
        return 'text %s' % show(value)
    return '%s %s' % ({dict: 'a mapping', list: 'a list', bool: 'a boolean'}.get(
        type(value), type(value).__name__), show(value))


def field(path: str, key: Any) -> str:
    """The field path of `key` in the mapping at `path`."""
    return '%s.%s' % (path, user_files.key_text(key)) if path else user_files.key_text(key)


class Checker:
    """Type checks that fail with `<source> line <n>: <field path>: <what is wrong>`."""

    def __init__(self, source: str, written: Optional[user_files.Written] = None,
                 hints: Optional[Mapping[str, str]] = None) -> None:
        """A checker of the config `source`.

        Args:
          source: the file (or a description), for messages.
          written: where and how the file wrote each field (`user_files.Written`).
          hints: {field name: what to do instead} for fields refused as unsupported.
        """
        self.source = source
        self.hints = hints or {}
        self.lines = written.lines if written else {}
        self.scalars = written.scalars if written else {}

    def fail(self, path: str, message: str) -> NoReturn:
        """Raises the `UserInputError` naming `path`, its line and `message`."""
        line = None
        field = path
        while field and line is None:  # the field's line, else its nearest parent's
            line = self.lines.get(field)
            field = field[:max(field.rfind('.'), field.rfind('['), 0)]
        raise UserInputError('%s: %s: %s' % (user_files.where(self.source, line),
                                             path or '(top level)', message),
                             path=self.source)

    def mapping(self, value: Any, path: str, fields: Optional[Sequence[str]]) -> None:
        """A mapping whose keys are all in `fields` (any keys when None)."""
        if not isinstance(value, dict):
            self.fail(path, 'expected a mapping, got %s' % describe(value))
        if fields is None:
            return
        for key in value:
            if key not in fields:
                hint = self.hints.get(key)
                self.fail(field(path, key), 'not supported: %s' % hint if hint else
                          'unknown field (expected one of %s)' % ', '.join(fields))

    def _describe(self, value: Any, path: str) -> str:
        """`describe(value)`, with the text as written where YAML 1.1 read it
        as something else (`no` as false, `1:30` as 90)."""
        text = self.scalars.get(path)
        if text is None or isinstance(value, str) or text == str(value):
            return describe(value)
        return '%s (written %s)' % (describe(value), show(text))

    def string(self, value: Any, path: str) -> None:
        """Text."""
        if not isinstance(value, str):
            self.fail(path, 'expected text, got %s' % self._describe(value, path))

    def string_list(self, value: Any, path: str) -> None:
        """A list of text."""
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            self.fail(path, 'expected a list of text, got %s' % describe(value))

    def boolean(self, value: Any, path: str) -> None:
        """true or false."""
        if not isinstance(value, bool):
            self.fail(path, 'expected true or false, got %s' % self._describe(value, path))

    def choice(self, value: Any, path: str, choices: Sequence[str]) -> None:
        """One of `choices`."""
        if not isinstance(value, str) or value not in choices:
            self.fail(path, 'expected one of %s, got %s'
                      % (', '.join(choices), self._describe(value, path)))

    def count(self, value: Any, path: str, minimum: int = 0,
              maximum: Optional[int] = None) -> None:
        """An integer from `minimum` (to `maximum`), written as a plain decimal."""
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            self.fail(path, 'expected an integer >= %d, got %s'
                      % (minimum, self._describe(value, path)))
        text = self.scalars.get(path)
        if text is not None and not _DECIMAL_RE.fullmatch(text):
            self.fail(path, 'write %s as a plain decimal number: YAML 1.1 reads it as %d'
                      % (show(text), value))
        if maximum is not None and value > maximum:
            self.fail(path, 'expected at most %d, got %s' % (maximum, show(value)))

    def number(self, value: Any, path: str, integral: bool = False) -> None:
        """A finite number (`integral`: whole, within int64), not text that reads as one."""
        if isinstance(value, str) and _is_number(value):
            self.fail(path, 'expected a number, got text %s (YAML reads an exponent '
                      'as a number only with a dot and a sign: write 1.0e-4 or 1.0e+6)'
                      % show(value))
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self.fail(path, 'expected a number, got %s' % self._describe(value, path))
        if isinstance(value, float) and not math.isfinite(value):
            self.fail(path, 'expected a finite number, got %s' % show(value))
        if integral and value != int(value):
            self.fail(path, 'expected a whole number for an INTEGER parameter, got %s'
                      % show(value))
        if integral and abs(value) > MAX_INT64:
            self.fail(path, 'expected an INTEGER parameter within int64, got %s' % show(value))


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
