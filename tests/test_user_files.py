"""The one way in for files users hand over (`estimator_trainers/user_files.py`).

The readers' bounds (regular file, size, UTF-8, nesting, aliases) and the
rule that production code reads a file or parses JSON or YAML only through
them: an `ast` scan of every production module fails on any other `open(`,
`GFile(`, `json.load(s)`, `yaml.*load*`, `pickle.load(s)` or `numpy.load`
for reading, outside the reader modules and a short allowlist of reads that
are no user input, each with its reason.
"""
import ast
import json
import os
import stat
from unittest import mock

import pytest

from conftest import REPO_ROOT
from estimator_trainers import user_files
from estimator_trainers.errors import UserInputError
from test_layering import production_modules

# The modules that are the readers.
READER_MODULES = ('estimator_trainers/user_files.py', 'estimator_trainers/safe_io.py')


def _table(text):
    """{(module, function): reason} of `module  function  reason` lines (# comments)."""
    rows = {}
    for line in text.strip().splitlines():
        if line.strip() and not line.lstrip().startswith('#'):
            module, function, reason = line.split(None, 2)
            rows[module, function] = reason
    return rows


# Reads that are no file a user hands over, or read with bounds of their own,
# each with why. Keep it short: a new reader of a user's file belongs in
# user_files.
ALLOWED = _table("""
# The kernel's files.
estimator_trainers/devices.py   native_bfloat16_flags  /proc/cpuinfo
estimator_trainers/host.py      cpu_model           /proc/cpuinfo
estimator_trainers/host.py      _meminfo_bytes      /proc/meminfo
estimator_trainers/host.py      process_started_at  /proc/self/stat and /proc/uptime
estimator_trainers/lease.py     _pid_start          /proc/<pid>/stat
# What this package's own processes wrote, at paths it chose.
estimator_trainers/errors.py    read_record   the error record a child command of ours wrote
estimator_trainers/sentinel.py  main          control messages of our own task over its pipe
estimator_trainers/tools/experiment/execute.py  failure  the log of a command the sweep started
estimator_trainers/tools/local_storage.py  LocalStorage._ready_line  the ready line our storage server printed
estimator_trainers/tools/local_storage.py  LocalStorage.list_objects  the listing our storage server answered
estimator_trainers/tools/storage_server.py  make_certificate  the certificate openssl wrote and certifi's bundle
estimator_trainers/tools/storage_server.py  Emulator._port_taken  the log of the emulator we started
# Python source, scanned as text for a marker, never parsed as data.
estimator_trainers/registry.py  candidate_packages  64 KiB of packages' declaration modules
# Data sets: gigabytes by design, read in pieces with checks of their own
# (docs/reliability.md, "Data archives and data sets").
cifar10_estimator/data.py  _check_first_length  a TFRecord header, checked against the size
cifar10_estimator/data.py  _check_lengths       every TFRecord header of a local file
cifar10_estimator/generate_cifar10_tfrecords.py  read_batch  through BatchUnpickler (arrays only)
keras_estimator/data.py    read    mnist.npz: zip entries and .npy headers checked first
keras_estimator/data.py    fetch   the same, for the data step's --source
taxi_estimator/input.py    _header_ok  the first line of a training CSV
taxi_estimator/input.py    _scan_file  a training CSV, checked line by line in 1 MiB pieces
estimator_trainers/tools/local_storage.py  LocalStorage.upload  a --local-input file, streamed to storage unparsed
""")

# The cloud tools' own reads (tools/cloud, the one pipeline): most are no user
# input; those marked "to move" are, and belong in user_files. Listed so that
# no new one comes in unseen.
PENDING_CLOUD = _table("""
estimator_trainers/tools/cloud/build.py  _read_text     Dockerfile, ignore files: to move
estimator_trainers/tools/cloud/build.py  _copy_sources  a Dockerfile COPY line's JSON: to move
estimator_trainers/tools/cloud/build.py  _head          a context file's first bytes (credentials)
estimator_trainers/tools/cloud/build.py  _add_file      a context file streamed into the archive
estimator_trainers/tools/cloud/packages.py  pins        constraints.txt and PIP_CONSTRAINT
estimator_trainers/tools/cloud/packages.py  _without    the same constraint files
estimator_trainers/tools/cloud/api.py       request_json   our own request body
estimator_trainers/tools/cloud/replicas.py  with_primary   TF_CONFIG as Vertex AI sets it
estimator_trainers/tools/cloud/source_checks.py  _installed  our own probe's JSON line
estimator_trainers/tools/cloud/rehearsal.py  _reported_metric  a rehearsed task's metrics file
estimator_trainers/tools/cloud/schema.py  discovery_document  google-api-python-client's bundle
""")

_WRITE_MODES = set('wax')


def _mode(call, position):
    """The literal mode string of an open-like call, '' when absent, None when not literal."""
    node = call.args[position] if len(call.args) > position else next(
        (k.value for k in call.keywords if k.arg == 'mode'), None)
    if node is None:
        return ''
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _reads(call):
    """What `call` reads or parses ('open', 'json.loads', ...), or None."""
    func = call.func
    name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(
        func, ast.Attribute) else None
    owner = func.value.id if isinstance(func, ast.Attribute) and isinstance(
        func.value, ast.Name) else None
    opener = {'open': (None, 'io', 'codecs'), 'fdopen': ('os',), 'GFile': None}
    if name in opener and (opener[name] is None or owner in opener[name]):
        mode = _mode(call, 1)
        if mode is not None and set(mode) & _WRITE_MODES and '+' not in mode:
            return None  # a write
        return '%s(' % name
    if owner == 'json' and name in ('load', 'loads'):
        return 'json.%s' % name
    if owner == 'yaml' and 'load' in name or name in ('safe_load', 'full_load', 'unsafe_load'):
        return 'yaml.%s' % name
    if owner == 'pickle' and name in ('load', 'loads') or owner in ('np', 'numpy') \
            and name == 'load':
        return '%s.%s' % (owner, name)
    if name in ('read_text', 'read_bytes') and owner not in ('user_files',):
        return '.%s(' % name
    return None


def reads_outside_the_readers():
    """{(module path, function): [(line, what)]} of every read outside the readers."""
    found = {}
    for path in production_modules().values():
        relative = os.path.relpath(path, REPO_ROOT)
        if relative in READER_MODULES:
            continue
        with open(path, encoding='utf-8') as f:
            tree = ast.parse(f.read(), path)
        stack = []

        def visit(node):
            scoped = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            if scoped:
                stack.append(node.name)
            if isinstance(node, ast.Call):
                what = _reads(node)
                if what:
                    function = '.'.join(n for n in stack if n) or '<module>'
                    found.setdefault((relative, function), []).append((node.lineno, what))
            for child in ast.iter_child_nodes(node):
                visit(child)
            if scoped:
                stack.pop()

        visit(tree)
    return found


def test_the_scan_finds_each_way_of_reading(tmp_path):
    tree = ast.parse('open(p)\nopen(p, "w")\nio.open(p, "rb")\nos.fdopen(fd, "r")\n'
                     'tf.io.gfile.GFile(p)\ngfile.GFile(p, "wb")\njson.load(f)\n'
                     'json.loads(t)\nyaml.safe_load(t)\nyaml.load_all(t)\npickle.loads(b)\n'
                     'np.load(p)\npathlib.Path(p).read_text()\nuser_files.read_text(p, p)\n'
                     'open(p, mode)\n')
    assert [_reads(node.value) for node in tree.body] == [
        'open(', None, 'open(', 'fdopen(', 'GFile(', None, 'json.load', 'json.loads',
        'yaml.safe_load', 'yaml.load_all', 'pickle.loads', 'np.load', '.read_text(', None,
        'open(']


def test_production_modules_read_user_files_only_through_the_readers():
    found = reads_outside_the_readers()
    unexplained = {place: calls for place, calls in found.items()
                   if place not in ALLOWED and place not in PENDING_CLOUD}
    assert not unexplained, (
        'these read a file or parse JSON/YAML outside estimator_trainers/user_files.py: '
        'read a file a user can hand over with user_files (read_bytes, read_text, '
        'read_json, read_yaml; parse_json/parse_yaml/loads for text), or, for a read '
        'that is no user input, add it to ALLOWED with the reason:\n%s' % '\n'.join(
            '%s:%d %s (in %s)' % (place[0], line, what, place[1])
            for place, calls in sorted(unexplained.items()) for line, what in calls))
    # The lists name only places that still read: no stale reasons.
    assert sorted((set(ALLOWED) | set(PENDING_CLOUD)) - set(found)) == []


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / 'fifo'
    os.mkfifo(path)
    return str(path)


def test_a_named_pipe_is_refused_at_once_or_read_once_when_asked(fifo):
    with pytest.raises(UserInputError, match='F is a pipe, not a regular file'):
        user_files.read_bytes(fifo, 'F')
    # regular=False: read once (a process substitution); no writer: nothing.
    assert user_files.read_bytes(fifo, 'F', regular=False) == b''


def test_a_missing_file_is_none_when_optional(tmp_path):
    assert user_files.read_json(str(tmp_path / 'missing.json'), optional=True) is None
    with pytest.raises(UserInputError, match='F: no such file'):
        user_files.read_text(str(tmp_path / 'missing'), 'F')


def test_a_sparse_file_larger_than_the_limit_is_refused_unread(tmp_path):
    path = tmp_path / 'huge.json'
    with open(path, 'wb') as f:
        f.truncate(3 << 30)  # 3 GiB of holes
    assert os.stat(path).st_blocks < 64 and stat.S_ISREG(os.stat(path).st_mode)
    with pytest.raises(UserInputError, match='is larger than 16 KiB; a small file'):
        user_files.read_json(str(path), limits=user_files.Limits(bytes=16 << 10,
                                                                 expected='a small file'))


def test_json_beyond_the_limits_is_one_line():
    deep = '[' * 50 + ']' * 50
    with pytest.raises(UserInputError, match='S: nested more than 32 levels deep'):
        user_files.parse_json(deep, 'S')
    with pytest.raises(UserInputError, match=r'S: not valid JSON \(nested too deeply'):
        user_files.parse_json('[' * 100000, 'S')
    with pytest.raises(UserInputError, match='S: more than 10 values'):
        user_files.parse_json('[%s]' % ','.join(['1'] * 11), 'S',
                              user_files.Limits(values=10))


@pytest.mark.parametrize('text, values', [
    ('[1, 2, 3]', 4), ('{"a": 1, "b": [2, 3]}', 5), ('["a,b", "c"]', 3),
    ('["\\"", ","]', 3), ('["\\\\", ","]', 3), ('{"k,": "v,", "k2": ",,"}', 3),
    ('"just, a, string"', 1), ('[[], {}, [[]]]', 5), ('[",\\",\\"," , "x"]', 3),
])
def test_values_are_counted_in_the_text_never_above_what_it_holds(text, values):
    """The count before parsing is a lower bound (commas inside strings are no values,
    escaped quotes end no string), so nothing within the limit is refused unparsed."""
    assert user_files._measure(json.loads(text), user_files.Limits())[1] == values
    for data in (text, text.encode()):
        user_files.check_values(data, 'S', user_files.Limits(values=values))
    limits = user_files.Limits(values=values - 1)
    with pytest.raises(UserInputError, match='^S: more than %d values' % (values - 1)):
        user_files.parse_json(text, 'S', limits)


def test_values_beyond_the_limit_are_refused_from_the_text_whatever_its_strings():
    """Short strings, commas inside strings, escapes across the count's windows."""
    limits = user_files.Limits(values=1000)
    for text in ('[%s]' % ','.join(['0'] * 2000), '[%s]' % ','.join(['""'] * 2000),
                 '[%s]' % ','.join(['"a,b"'] * 1500),
                 '[%s]' % ','.join(['"\\\\\\","'] * 1500)):
        assert json.loads(text)
        for data in (text, text.encode()):
            with pytest.raises(UserInputError, match='^S: more than 1000 values'):
                user_files.check_values(data, 'S', limits)
        with mock.patch.object(user_files, '_COUNT_WINDOW', 7):
            with pytest.raises(UserInputError, match='^S: more than 1000 values'):
                user_files.check_values(text.encode(), 'S', limits)
    user_files.check_values('["%s"]' % (',' * 5000), 'S', limits)  # one string
