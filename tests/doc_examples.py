"""The shell commands and JSON instances that README.md and docs/*.md show, as the docs hold them.

`commands()` reads every fenced block of shell (no language, `bash`, `sh`):
continuation lines joined, a trailing `# comment` dropped, and keeps the
lines that run something (`bash scripts/...`, `python ...`, `gcloud ...`,
`export ...`, `VAR=...`); the rest of those blocks is output. `instances()`
reads the taxi instances written as inline JSON. tests/test_docs_examples.py
runs or accounts for every command, tests/test_local_predict.py predicts the
instances and the `local predict` lines on its small exports.
"""
import glob
import json
import os
import re
import shlex
import typing

from conftest import REPO_ROOT

DOCS = ['README.md'] + sorted(os.path.relpath(path, REPO_ROOT) for path in
                              glob.glob(os.path.join(REPO_ROOT, 'docs', '*.md')))
_BLOCK = re.compile(r'^```(\w*)\n(.*?)^```', re.M | re.S)
_SHELL = ('', 'bash', 'sh')
_RUNS = ('bash', 'python', 'gcloud', 'tensorboard', 'docker', 'export',
         '.venv/bin/saved_model_cli')
_ASSIGNMENT = re.compile(r'[A-Z_][A-Z0-9_]*=\S')
_COMMENT = re.compile(r'\s+#\s.*$')
_INSTANCE = re.compile(r'`(\{"trip_miles".*?\})`')


class Command(typing.NamedTuple):
    """One command of a doc: where it is and its text as written (one line)."""
    doc: str
    line: int
    text: str

    @property
    def words(self):
        return shlex.split(self.text)

    def __str__(self):
        return '%s:%d: %s' % (self.doc, self.line, self.text)


def _read(doc):
    with open(os.path.join(REPO_ROOT, doc), encoding='utf-8') as f:
        return f.read()


def commands():
    """Every command of the docs' shell blocks, in the docs' order."""
    found = []
    for doc in DOCS:
        text = _read(doc)
        for block in _BLOCK.finditer(text):
            if block.group(1) not in _SHELL:
                continue
            first = text[:block.start(2)].count('\n') + 1
            pending, start = '', None
            for offset, line in enumerate(block.group(2).splitlines()):
                line = _COMMENT.sub('', line).rstrip()
                if start is None:
                    start = first + offset
                if line.endswith('\\'):
                    pending += line[:-1].strip() + ' '
                    continue
                whole, pending = (pending + line.strip()).strip(), ''
                words = whole.split()
                if words and (words[0] in _RUNS or _ASSIGNMENT.match(words[0])):
                    found.append(Command(doc, start, whole))
                start = None
    return found


def instances():
    """(doc, line, instance) of every taxi instance the docs write as inline JSON."""
    found = []
    for doc in DOCS:
        text = _read(doc)
        for match in _INSTANCE.finditer(text):
            found.append((doc, text[:match.start()].count('\n') + 1,
                          json.loads(match.group(1))))
    return found
