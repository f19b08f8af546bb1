"""A user's module checked from its source, without running it.

Before anything is uploaded, a `gcloud ai-platform` submission checks the
package it would run; a dry run or a submission never executes the user's
code to do so (a script-style `task.py` trains at import time). The package's
Python files are read from its built archives and parsed with `ast`:

1. the module is in the archives, and every file of its packages parses;
2. every module the job's module imports (and, transitively, the package
   modules it imports) resolves: a package of the archives, the standard
   library, or a distribution installed in the check's virtualenv (looked up
   by name with `importlib.util.find_spec`, which locates and runs nothing);
3. TensorFlow 1.x names TensorFlow 2.15 lacks (`tf.contrib`, `tf.app`,
   `tf.train.AdamOptimizer` ...) are named with their line, and whether
   `tf.compat.v1` has them;
4. the job's flags are ones the package's parser defines (argparse
   `add_argument`, absl `DEFINE_*`), as far as the source says: a parser that
   takes unknown arguments (`parse_known_args`) or builds flag names at run
   time is not checked, and a note says so.

What only running the module can find (a value its parser refuses, a
failure at import) is found by `--rehearse`, which runs it.

Before any of it, `check_top_level_names` refuses a package whose top-level
name is already taken where the job runs: a standard-library module (Vertex
AI's `python -m json.task` then imports the standard library's `json`: "No
module named json.task"), a module a distribution of the image installs, or
one another archive of the job holds (pip installs one over the other).
"""
import ast
import dataclasses
import email.parser
import json
import os
import subprocess
import sys
import tarfile
import zipfile
from typing import Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, TypedDict

from packaging.utils import canonicalize_name

from estimator_trainers import safe_io
from estimator_trainers.errors import UserInputError

# An archive's Python files are read up to these sizes (a package's sources
# are kilobytes; a larger member is data).
MAX_SOURCE_BYTES = 4 * 1024 * 1024
MAX_SOURCES_BYTES = 64 * 1024 * 1024
NAMES_TIMEOUT_SECS = 300
TENSORFLOW = 'tensorflow'
_ABSL_DEFINES = ('DEFINE_string', 'DEFINE_integer', 'DEFINE_float', 'DEFINE_boolean',
                 'DEFINE_bool', 'DEFINE_enum', 'DEFINE_list', 'DEFINE_multi_string',
                 'DEFINE_multi_integer', 'DEFINE_multi_float', 'DEFINE_multi_enum',
                 'DEFINE_spaceseplist', 'DEFINE_enum_class', 'DEFINE_alias')
# Run by the check's virtualenv Python: which top-level names resolve, and
# TensorFlow's own names (TensorFlow is this project's dependency, not the
# user's code): for each TensorFlow module asked for, its attributes, and
# for the attributes used, theirs.
_NAMES_SCRIPT = r'''
import importlib, importlib.util, json, os, sys, types
wanted = json.loads(sys.argv[1])
found = {name: importlib.util.find_spec(name) is not None for name in wanted['modules']}
api = {}
if wanted['tensorflow']:
    os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')
    for name, used in wanted['tensorflow'].items():
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        names = dict.fromkeys(dir(module))
        for attr in used:
            value = getattr(module, attr, None)
            if isinstance(value, types.ModuleType):
                names[attr] = dir(value)
        api[name] = names
print(json.dumps({'found': found, 'api': api}))
'''


@dataclasses.dataclass(frozen=True)
class Sources:
    """The Python files of a package's archives.

    Attributes:
      files: {path relative to the archive root (`trainer/task.py`): text}.
      packages: the top-level packages and modules they hold.
    """
    files: Dict[str, str]
    packages: Tuple[str, ...]

    def path_of(self, module: str) -> Optional[str]:
        base = module.replace('.', '/')
        for path in (base + '.py', base + '/__init__.py'):
            if path in self.files:
                return path
        return None


def read_sources(archives: List[str]) -> Sources:
    """The `.py` files of sdists (`.tar.gz`) and wheels (`.whl`, `.zip`).

    Raises:
      UserInputError: an archive that cannot be read, or sources over the bounds.
    """
    files = {}
    total = 0
    for archive in archives:
        for name, read in _members(archive):
            if not name.endswith('.py') or name.split('/')[0] in ('tests', 'test'):
                continue
            data = read(MAX_SOURCE_BYTES + 1)
            total += len(data)
            if len(data) > MAX_SOURCE_BYTES or total > MAX_SOURCES_BYTES:
                raise UserInputError('%s: its Python files are larger than %s; a package '
                                     'holds code, data goes to Cloud Storage'
                                     % (archive, safe_io.size_text(MAX_SOURCES_BYTES)))
            files[name] = data.decode('utf-8', errors='replace')
    packages = sorted({path.split('/')[0][:-3] if path.count('/') == 0 else path.split('/')[0]
                       for path in files if path != 'setup.py'})
    return Sources(files=files, packages=tuple(packages))


def _members(archive: str) -> Iterator[Tuple[str, Callable[[int], bytes]]]:
    """`(name relative to the archive's root, read(n))` of its regular files."""
    try:
        if archive.endswith(('.whl', '.zip')):
            with zipfile.ZipFile(archive) as zf:
                for info in zf.infolist():
                    if not info.is_dir():
                        yield info.filename, _zip_reader(zf, info)
            return
        with tarfile.open(archive, 'r:*') as tar:
            for member in tar:
                if member.isfile():
                    # An sdist's members live under `<name>-<version>/`.
                    name = member.name.split('/', 1)[1] if '/' in member.name else member.name
                    yield name, _tar_reader(tar, member)
    except (OSError, tarfile.TarError, zipfile.BadZipFile) as e:
        raise UserInputError('%s: not a readable archive (%s)' % (archive, e)) from None


def _zip_reader(zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> Callable[[int], bytes]:
    return lambda n: zf.open(info).read(n)


def _tar_reader(tar: tarfile.TarFile, member: tarfile.TarInfo) -> Callable[[int], bytes]:
    """read(n) of a regular member (`extractfile` is None only for other kinds)."""
    def read(n: int) -> bytes:
        data = tar.extractfile(member)
        assert data is not None
        return data.read(n)
    return read


@dataclasses.dataclass(frozen=True)
class TopLevel:
    """What an archive installs at the top of site-packages.

    Attributes:
      distribution: its distribution's name (`Name:` of its metadata), or None.
      names: {top-level module or package: True when it is a module or a
        regular package (an `__init__.py`), False for a namespace package}.
    """
    distribution: Optional[str]
    names: Dict[str, bool]


def top_level(archive: str) -> TopLevel:
    """The distribution name and the top-level names an sdist or a wheel installs.

    The names are its metadata's `top_level.txt` (setuptools writes one), else
    the first part of the path of each Python file (`setup.py` and `tests/`
    left out).

    Raises:
      UserInputError: an archive that cannot be read.
    """
    distribution, declared, files = None, None, []
    for name, read in _members(archive):
        parts = name.split('/')
        if name == 'PKG-INFO' or (len(parts) == 2 and parts[0].endswith('.dist-info')
                                  and parts[1] == 'METADATA'):
            text = read(MAX_SOURCE_BYTES).decode('utf-8', errors='replace')
            distribution = email.parser.Parser().parsestr(text).get('Name') or distribution
        elif len(parts) == 2 and parts[1] == 'top_level.txt' and parts[0].endswith(
                ('.egg-info', '.dist-info')):
            declared = read(MAX_SOURCE_BYTES).decode('utf-8', errors='replace').split()
        elif name.endswith('.py') and name != 'setup.py' and parts[0] not in ('tests', 'test'):
            files.append(name)
    tops = declared if declared is not None else sorted(
        {path.split('/')[0] if '/' in path else path[:-3] for path in files})
    return TopLevel(distribution=distribution, names={
        top: top + '.py' in files or top + '/__init__.py' in files or not any(
            path.startswith(top + '/') for path in files) for top in tops})


def check_top_level_names(archives: Iterable[Tuple[str, str]], module: str,
                          installed: Mapping[str, List[str]],
                          own: Iterable[str] = ()) -> None:
    """Refuses an archive whose top-level name is taken where the job runs.

    Args:
      archives: `(how to name it, path)` of the user's archives
        (`--package-path DIR`, `--packages FILE`).
      module: the job's `--module-name`, for the message.
      installed: {top-level name: [distributions]} of the environment that
        stands for the image (`importlib.metadata.packages_distributions()`).
      own: distribution names of the job's other archives (this repository's
        sdist): what they install is theirs, not the image's.

    Raises:
      UserInputError: one line naming the archive, the name and who has it.
    """
    found = [(label, top_level(path)) for label, path in archives]
    mine = {canonicalize_name(n) for n in own} | {
        canonicalize_name(t.distribution) for _, t in found if t.distribution}
    holders: Dict[str, str] = {}
    for label, tops in found:
        for name, regular in sorted(tops.names.items()):
            run = ('python -m %s' % module if module.split('.')[0] == name
                   else 'import %s' % name)
            if name in sys.stdlib_module_names:
                raise UserInputError(
                    '%s: its package %s has the name of a Python standard-library module: '
                    'on Vertex AI, %s finds the standard library\'s %s first (No module '
                    'named %s); rename the package' % (
                        label, name, run, name,
                        module if module.split('.')[0] == name else '%s.<module>' % name))
            others = [d for d in installed.get(name, ())
                      if canonicalize_name(d) not in mine]
            if regular and others:
                raise UserInputError(
                    '%s: its package %s has the name of a module the image installs (%s): '
                    'pip would install one over the other and %s would import either; '
                    'rename the package' % (label, name, ', '.join(sorted(others)), run))
            if regular and name in holders:
                raise UserInputError('%s and %s both install the top-level name %s: pip '
                                     'would install one over the other; rename one'
                                     % (holders[name], label, name))
            if regular:
                holders[name] = label


@dataclasses.dataclass
class _Module:
    """What one source file imports, uses of TensorFlow and defines as flags.

    Attributes:
      imports: `(module, line)` of each module it imports.
      maybe_modules: names imported from a module (`from trainer import
        model`), which may be submodules of the package.
      tf_names: `(TensorFlow module, attribute chain, line)` of each use.
      flags: the flags its parsers define (`--name`).
      flags_open: its parser takes unknown flags, or makes names at run time.
    """
    imports: List[Tuple[str, int]] = dataclasses.field(default_factory=list)
    maybe_modules: List[str] = dataclasses.field(default_factory=list)
    tf_names: List[Tuple[str, Tuple[str, ...], int]] = dataclasses.field(
        default_factory=list)
    flags: List[str] = dataclasses.field(default_factory=list)
    flags_open: bool = False


def _scan(path: str, text: str) -> '_Module':
    """The `_Module` of the source file `path`.

    Raises:
      UserInputError: it does not parse.
    """
    try:
        tree = ast.parse(text, filename=path)
    except SyntaxError as e:
        raise UserInputError('%s line %s: %s: the module cannot be imported'
                             % (path, e.lineno, e.msg)) from None
    package = path.rsplit('/', 1)[0].replace('/', '.') if '/' in path else ''
    found = _Module()
    aliases: Dict[str, str] = {}  # local name -> the TensorFlow module it names
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.imports.append((alias.name, node.lineno))
                if alias.name.split('.')[0] == TENSORFLOW:
                    aliases[alias.asname or TENSORFLOW] = (
                        alias.name if alias.asname else TENSORFLOW)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node.module, node.level, package)
            if base is None:
                continue
            found.imports.append((base, node.lineno))
            found.maybe_modules.extend('%s.%s' % (base, a.name) for a in node.names)
            if base.split('.')[0] == TENSORFLOW:
                for alias in node.names:
                    aliases[alias.asname or alias.name] = '%s.%s' % (base, alias.name)
        elif isinstance(node, ast.Call):
            _flag_call(node, found)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        chain = _chain(node)
        if chain and chain[0] in aliases:
            found.tf_names.append((aliases[chain[0]], tuple(chain[1:3]), node.lineno))
    return found


def _absolute(module: Optional[str], level: int, package: str) -> Optional[str]:
    if not level:
        return module
    parts = package.split('.') if package else []
    if level - 1 > len(parts):
        return None
    base = parts[:len(parts) - (level - 1)]
    return '.'.join(base + ([module] if module else [])) or None


def _chain(node: ast.expr) -> Optional[List[str]]:
    """`['tf', 'contrib', 'layers']` of `tf.contrib.layers`, else None."""
    names = []
    while isinstance(node, ast.Attribute):
        names.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id] + names[::-1]


def _flag_call(node: ast.Call, found: '_Module') -> None:
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, 'id', None)
    if name == 'add_argument':
        strings = [a.value for a in node.args if isinstance(a, ast.Constant)
                   and isinstance(a.value, str)]
        if len(strings) != len(node.args):
            found.flags_open = True
        found.flags.extend(s for s in strings if s.startswith('-'))
    elif name in _ABSL_DEFINES:
        first = node.args[0] if node.args else next(
            (k.value for k in node.keywords if k.arg == 'name'), None)
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            found.flags.append('--' + first.value)
            if 'bool' in name:
                found.flags.append('--no' + first.value)
        else:
            found.flags_open = True
    elif name in ('parse_known_args', 'parse_known_intermixed_args'):
        found.flags_open = True


def check(sources: Sources, module: str, args: Sequence[str], python: str,
          environ: Mapping[str, str]) -> List[str]:
    """Checks `module` of `sources` against the job's `args`, statically.

    Args:
      python: the check virtualenv's interpreter (the package installed).
      environ: the environment it runs with.

    Returns:
      Notes: what could not be checked.

    Raises:
      UserInputError: one line naming the file, the line and the problem.
    """
    path = sources.path_of(module)
    if path is None:
        raise UserInputError('%s is not in the package (its archives hold %s); check '
                             '--module-name and the packages setup.py lists'
                             % (module, ', '.join(sorted(sources.files)[:8]) or 'no Python files'))
    scanned = _scan_imported(sources, path)
    outside = sorted({name.split('.')[0] for module_ in scanned.values()
                      for name, _ in module_.imports
                      if name.split('.')[0] not in sources.packages
                      and name.split('.')[0] not in sys.stdlib_module_names})
    used: Dict[str, set[str]] = {}
    for module_ in scanned.values():
        for tf_module, chain, _ in module_.tf_names:
            if chain:
                used.setdefault(tf_module, set()).add(chain[0])
    if TENSORFLOW in used:
        used.setdefault('tensorflow.compat.v1', set()).update(used[TENSORFLOW])
    installed = _installed(python, outside, {k: sorted(v) for k, v in used.items()}, environ)
    for current, module_ in sorted(scanned.items()):
        for name, line in module_.imports:
            top = name.split('.')[0]
            if name.startswith('tensorflow.contrib'):
                raise UserInputError('%s line %d imports %s: %s' % (
                    current, line, name, _CONTRIB))
            if top in outside and not installed['found'].get(top):
                raise UserInputError(
                    '%s line %d imports %s, which the package does not install: add it '
                    'to REQUIRED_PACKAGES (install_requires) in its setup.py'
                    % (current, line, top))
        for tf_module, chain, line in module_.tf_names:
            problem = _tf_problem(installed['api'], tf_module, chain)
            if problem:
                raise UserInputError('%s line %d: %s' % (current, line, problem))
    return _check_flags(scanned, module, path, args)


# What `_NAMES_SCRIPT` prints: {TensorFlow module: {attribute: its own attributes
# when it is a module, else None}}, and whether each top-level name resolves.
_Api = Dict[str, Dict[str, Optional[List[str]]]]


class _Installed(TypedDict):
    found: Dict[str, bool]
    api: _Api


def _scan_imported(sources: Sources, path: str) -> Dict[str, _Module]:
    """`{path: _Module}` of `path` and every file of the package it imports,
    transitively (a module and the packages it is in)."""
    scanned: Dict[str, _Module] = {}
    order = [path]
    while order:
        current = order.pop()
        if current in scanned:
            continue
        scanned[current] = _scan(current, sources.files[current])
        names = [name for name, _ in scanned[current].imports] + \
            scanned[current].maybe_modules
        for name in names:
            parts = name.split('.')
            for end in range(1, len(parts) + 1):  # a module and its packages
                own = sources.path_of('.'.join(parts[:end]))
                if own and own not in scanned:
                    order.append(own)
    return scanned


_CONTRIB = ('tf.contrib was removed in TensorFlow 2 and tf.compat.v1 has no contrib '
            'either: replace it (docs/migrating-from-ai-platform.md)')


def _tf_problem(api: '_Api', tf_module: str, chain: Tuple[str, ...]) -> Optional[str]:
    """Why `<tf_module>.<chain>` is not in TensorFlow 2.15, or None."""
    names = api.get(tf_module)
    if not names or not chain:
        return None
    shown = 'tf.' + '.'.join(chain) if tf_module == TENSORFLOW else '%s.%s' % (
        tf_module, '.'.join(chain))
    if chain[0] == 'contrib':
        return '%s: %s' % (shown, _CONTRIB)
    compat = api.get('tensorflow.compat.v1') or {}
    if chain[0] not in names:
        if tf_module == TENSORFLOW and chain[0] in compat:
            return ('TensorFlow 2 has no %s: use tf.compat.v1.%s (or import '
                    'tensorflow.compat.v1 as tf)' % (shown, '.'.join(chain)))
        return 'TensorFlow 2.15 has no %s' % shown
    inner = names[chain[0]]
    if len(chain) > 1 and inner is not None and chain[1] not in inner and \
            not chain[1].startswith('_'):
        compat_inner = compat.get(chain[0])
        if tf_module == TENSORFLOW and compat_inner and chain[1] in compat_inner:
            return ('TensorFlow 2 has no %s: use tf.compat.v1.%s (or import '
                    'tensorflow.compat.v1 as tf)' % (shown, '.'.join(chain)))
        return 'TensorFlow 2.15 has no %s' % shown
    return None


def _installed(python: str, modules: List[str], tensorflow_names: Dict[str, List[str]],
               environ: Mapping[str, str]) -> '_Installed':
    """`{'found': {module: bool}, 'api': {tf module: {attr: [names] or None}}}`.

    Args:
      modules: top-level module names to look up.
      tensorflow_names: {TensorFlow module: the attributes used of it}.
    """
    if not modules and not tensorflow_names:
        return {'found': {}, 'api': {}}
    env = {k: v for k, v in environ.items() if k not in ('PYTHONPATH', 'TF_CONFIG')}
    try:
        proc = subprocess.run(
            [python, '-I', '-c', _NAMES_SCRIPT,
             json.dumps({'modules': modules, 'tensorflow': tensorflow_names})],
            env=env, capture_output=True, text=True, timeout=NAMES_TIMEOUT_SECS,
            stdin=subprocess.DEVNULL, check=False)
    except subprocess.TimeoutExpired:
        raise UserInputError('looking up the modules the package imports did not end '
                             'within %d s' % NAMES_TIMEOUT_SECS) from None
    lines = proc.stdout.strip().splitlines()
    if proc.returncode or not lines:
        last = [line for line in proc.stderr.strip().splitlines() if line.strip()]
        raise UserInputError('looking up the modules the package imports failed: %s'
                             % (last[-1] if last else 'exit code %d' % proc.returncode))
    installed: _Installed = json.loads(lines[-1])
    return installed


def _check_flags(scanned: Mapping[str, '_Module'], module: str, path: str,
                 args: Sequence[str]) -> List[str]:
    """Refuses a flag of `args` that no parser of the package defines."""
    defined: set[str] = set()
    open_, parsers = False, False
    for module_ in scanned.values():
        defined.update(module_.flags)
        open_ = open_ or module_.flags_open
        parsers = parsers or bool(module_.flags)
    if not parsers:
        return ['%s defines no flags with argparse or absl that its source shows: its '
                'flags are checked when it runs (--rehearse)' % module]
    if open_:
        return ['%s takes flags its source does not list (parse_known_args, or names '
                'made at run time): its flags are checked when it runs (--rehearse)' % module]
    longs = sorted(flag for flag in defined if flag.startswith('--'))
    for arg in args:
        if not arg.startswith('--') or arg == '--':
            continue
        name = arg.split('=', 1)[0]
        matches = [flag for flag in longs if flag == name] or \
            [flag for flag in longs if flag.startswith(name)]
        if len(matches) != 1 and name not in defined:
            raise UserInputError(
                '%s does not take %s (%s defines %s); the job would stop at its first '
                'line' % (module, name, path, ', '.join(longs[:12]) +
                          (', ...' if len(longs) > 12 else '')), flag=name)
    return []
