"""The type checker runs in the test command: mypy, strict, as `pyproject.toml`
configures it, over every production package and the benchmarks.

It passes with no errors, and it would refuse a new unannotated function (the
configuration's strictness, shown on a module written here).
"""
import ast
import pathlib
import subprocess
import sys
import tomllib

from conftest import REPO_ROOT


def _mypy(*args, cwd=REPO_ROOT):
    return subprocess.run([sys.executable, '-m', 'mypy', *args], cwd=cwd,
                          capture_output=True, text=True, timeout=600)


def _config():
    with open('%s/pyproject.toml' % REPO_ROOT, 'rb') as f:
        return tomllib.load(f)['tool']['mypy']


def test_the_packages_type_check_with_no_errors():
    proc = _mypy()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert 'Success: no issues found' in proc.stdout


def test_an_unannotated_function_in_a_new_module_is_refused(tmp_path):
    config = _config()
    assert config['strict'] is True
    (tmp_path / 'fresh.py').write_text('def scale(x, factor=2):\n    return x * factor\n')
    proc = _mypy('--config-file', '%s/pyproject.toml' % REPO_ROOT, str(tmp_path / 'fresh.py'),
                 cwd=str(tmp_path))
    assert proc.returncode == 1, proc.stdout
    assert 'Function is missing a type annotation  [no-untyped-def]' in proc.stdout


def test_no_module_is_skipped():
    """The one pass of issue 46 is done: no module is left out of the check."""
    skipped = [override['module'] for override in _config().get('overrides', [])
               if override.get('ignore_errors')]
    assert skipped == []


def _annotated(function):
    arguments = function.args
    named = [a for a in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs)
             if a.arg not in ('self', 'cls')]
    starred = [a for a in (arguments.vararg, arguments.kwarg) if a is not None]
    return function.returns is not None and all(
        a.annotation is not None for a in named + starred)


def test_the_functions_of_the_packages_are_annotated():
    """An `ast` count, independent of the checker's settings: at least 95% of the
    functions of estimator_trainers/ (issue 46's bar) and of each trainer package
    carry parameter and return annotations."""
    for package in ('estimator_trainers', 'cifar10_estimator', 'taxi_estimator',
                    'keras_estimator'):
        functions = [node for path in pathlib.Path(REPO_ROOT, package).rglob('*.py')
                     for node in ast.walk(ast.parse(path.read_text(), str(path)))
                     if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]
        bare = [f.name for f in functions if not _annotated(f)]
        assert len(functions) > 20 and len(bare) <= 0.05 * len(functions), (package, bare)


# typing's names that Python 3.10 lacks (Vertex AI's TF 2.15 images run 3.10,
# tests/test_sdist_py310.py): a module may name them for the checker only.
NEWER_TYPING = {'Unpack', 'Required', 'NotRequired', 'Self', 'Never', 'assert_never',
                'LiteralString', 'TypeVarTuple', 'dataclass_transform', 'assert_type',
                'reveal_type', 'override'}


def test_typing_names_newer_than_python_3_10_are_imported_for_the_checker_only():
    offending = []
    for package in ('estimator_trainers', 'cifar10_estimator', 'taxi_estimator',
                    'keras_estimator'):
        for path in pathlib.Path(REPO_ROOT, package).rglob('*.py'):
            tree = ast.parse(path.read_text(), str(path))
            guarded = {id(node) for block in ast.walk(tree) if isinstance(block, ast.If)
                       and 'TYPE_CHECKING' in ast.unparse(block.test)
                       for node in ast.walk(block)}
            offending += ['%s:%d %s' % (path.relative_to(REPO_ROOT), node.lineno, alias.name)
                          for node in ast.walk(tree)
                          if isinstance(node, ast.ImportFrom) and node.module in (
                              'typing', 'typing_extensions') and id(node) not in guarded
                          for alias in node.names if alias.name in NEWER_TYPING]
    assert offending == []
