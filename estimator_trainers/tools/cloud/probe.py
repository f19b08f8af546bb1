"""Runs a user's module far enough to find what would fail on the cloud.

    python -I probe.py RECORD MODULE [ARGS...]

Run by the pre-submit checks (`packages.check_module`) with the Python of a
fresh virtualenv that has the user's package installed, so it imports only
the standard library (this project need not be installed there), by file
path and with `-I` (its own directory stays off `sys.path`). It

1. imports MODULE: an import error is recorded with the module of the
   package it happened in and its line; a TensorFlow 1.x name that
   TensorFlow 2 lacks (`tf.contrib`, `tf.app`) names the missing attribute
   and says whether `tf.compat.v1` has it;
2. when MODULE parses flags with argparse or absl (seen in its source, so a
   module that parses none is never run), runs it as `python -m MODULE
   --help` (argparse: must exit 0), then with ARGS, stopping right after
   the parser accepted them; a refused flag is recorded with the parser's
   own message.

What went wrong is written to RECORD as an error record (the fields of
`errors.Error.record`), which the caller reads back (`errors.read_record`);
the exit code is 0 (checked), 2 (refused) or 3 (flags not checked: the
module uses neither parser).
"""
import argparse
import ast
import importlib
import importlib.util
import io
import json
import os
import runpy
import sys
import traceback

EXIT_NOT_CHECKED = 3
_TENSORFLOW = ('tensorflow', 'tf')


class _Parsed(BaseException):
    """The module's parser accepted the args: stop before it trains."""


def _record(path, kind, text, source=None, exit_code=2):
    with open(path, 'w', encoding='utf-8') as f:
        json.dump({'kind': kind, 'text': text, 'flag': None, 'path': source,
                   'exit_code': exit_code}, f)


def _user_frame(error, module):
    """`(module, line, file)` of the innermost traceback frame in `module`'s
    package (`__main__`: `module` run by runpy)."""
    package = module.split('.')[0]
    found = None
    for frame, line in traceback.walk_tb(error.__traceback__):
        name = frame.f_globals.get('__name__', '')
        if name == '__main__':
            name = module
        if name == package or name.startswith(package + '.'):
            found = (name, line, frame.f_code.co_filename)
    return found


def _import_problem(module, error):
    """One sentence for an exception raised while importing `module`."""
    where = _user_frame(error, module)
    place = '%s (line %d)' % where[:2] if where else module
    if isinstance(error, AttributeError) and getattr(error, 'name', None) and \
            getattr(getattr(error, 'obj', None), '__name__', '') == 'tensorflow':
        name = error.name
        compat = sys.modules.get('tensorflow.compat.v1')
        if name == 'contrib':
            hint = ('tf.contrib was removed in TensorFlow 2 and tf.compat.v1 has no '
                    'contrib either: replace it (docs/migrating-from-ai-platform.md)')
        elif compat is not None and hasattr(compat, name):
            hint = 'TensorFlow 2 moved it: use tf.compat.v1.%s' % name
        else:
            hint = 'TensorFlow 2 has no tf.%s' % name
        return place, "module 'tensorflow' has no attribute '%s': %s" % (name, hint), where
    if isinstance(error, ModuleNotFoundError) and (error.name or '').startswith(
            'tensorflow.contrib'):
        return place, ('No module named %r: tf.contrib was removed in TensorFlow 2 and '
                       'tf.compat.v1 has no contrib either: replace it '
                       '(docs/migrating-from-ai-platform.md)' % error.name), where
    text = str(error).strip().splitlines()
    return place, '%s: %s' % (type(error).__name__, text[0] if text else ''), where


def _parsers(source):
    """Which flag parsers the module's source uses: a subset of {argparse, absl}."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ''] + ['%s.%s' % (node.module, a.name) for a in node.names]
        elif isinstance(node, ast.Attribute) and node.attr in ('flags', 'app') and \
                isinstance(node.value, (ast.Name, ast.Attribute)):
            # tf.compat.v1.flags / tf.compat.v1.app.run: absl underneath.
            names = ['absl.%s' % node.attr] if ast.unparse(node.value).split('.')[0] in \
                _TENSORFLOW else []
        else:
            continue
        for name in names:
            if name == 'argparse' or name.startswith('argparse.'):
                found.add('argparse')
            if name in ('absl.flags', 'absl.app') or name.startswith(('absl.flags.',
                                                                       'absl.app.')):
                found.add('absl')
    return found


def _forget_flags(module):
    """Drops the absl flags `module` (or a run of it as `__main__`) defined, so
    that running it again defines them anew instead of failing as duplicates."""
    flags = sys.modules.get('absl.flags')
    if flags is None:
        return
    by_module = flags.FLAGS.flags_by_module_dict()
    for name in (module, '__main__'):
        for flag in list(by_module.get(name, ())):
            for key in {flag.name, flag.short_name} - {None}:
                if key in flags.FLAGS:
                    delattr(flags.FLAGS, key)


def _run_main(module, argv):
    """Runs `module` as `python -m module argv...`; returns its SystemExit code."""
    _forget_flags(module)
    saved = sys.argv
    sys.argv = [module] + list(argv)
    try:
        runpy.run_module(module, run_name='__main__', alter_sys=True)
    except SystemExit as e:
        return 0 if e.code is None else e.code
    finally:
        sys.argv = saved
    return 0


def _stop_after_parsing(record, argv):
    """Patches argparse and absl: an accepted command line raises `_Parsed`,
    a refused one is recorded and exits 2."""
    parse_known_args = argparse.ArgumentParser.parse_known_args
    parse_args = argparse.ArgumentParser.parse_args
    inside = []  # parse_args calls parse_known_args, then refuses what is left

    def parses_argv(args):
        return args is None or list(args) == list(argv)

    def patched_parse_args(self, args=None, namespace=None):
        inside.append(self)
        try:
            result = parse_args(self, args, namespace)
        finally:
            inside.pop()
        if parses_argv(args):
            raise _Parsed()
        return result

    def patched_parse(self, args=None, namespace=None):
        result = parse_known_args(self, args, namespace)
        if not inside and parses_argv(args):
            raise _Parsed()
        return result

    def patched_error(self, message):
        _record(record, 'FlagError', message)
        raise SystemExit(2)

    argparse.ArgumentParser.parse_known_args = patched_parse
    argparse.ArgumentParser.parse_args = patched_parse_args
    argparse.ArgumentParser.error = patched_error
    try:
        # absl is the probed package's own dependency, if any: only its venv has it.
        from absl import flags  # pylint: disable=import-outside-toplevel
    except ImportError:
        return
    call = flags.FlagValues.__call__

    def patched_call(self, args, known_only=False):
        try:
            result = call(self, args, known_only)
        except flags.Error as e:
            _record(record, 'FlagError', str(e))
            raise SystemExit(2) from None
        if list(args[1:]) == list(argv):
            raise _Parsed()
        return result

    flags.FlagValues.__call__ = patched_call


def _failed(record, module, what, error):
    place, problem, where = _import_problem(module, error)
    if place == module:
        place = 'python -m %s' % module
    _record(record, 'UserInputError', '%s failed before parsing %s: %s'
            % (place, what, problem), where[2] if where else None)
    return 2


def main(argv):
    record, module, args = argv[0], argv[1], argv[2:]
    try:
        importlib.import_module(module)
    except BaseException as error:  # pylint: disable=broad-except
        place, problem, where = _import_problem(module, error)
        _record(record, 'UserInputError', '%s cannot be imported: %s' % (place, problem),
                where[2] if where else None)
        return 2
    origin = importlib.util.find_spec(module).origin
    with open(origin, encoding='utf-8', errors='replace') as f:
        parsers = _parsers(f.read())
    if not parsers:
        return EXIT_NOT_CHECKED
    stdout = sys.stdout
    if 'argparse' in parsers:
        sys.stdout = io.StringIO()
        try:
            code = _run_main(module, ['--help'])
        except Exception as error:  # pylint: disable=broad-except
            return _failed(record, module, '--help', error)
        finally:
            sys.stdout = stdout
        if code != 0:
            _record(record, 'UserInputError', 'python -m %s --help exits %s, not 0'
                    % (module, code), origin)
            return 2
    _stop_after_parsing(record, args)
    try:
        code = _run_main(module, args)
    except _Parsed:
        return 0
    except Exception as error:  # pylint: disable=broad-except
        return _failed(record, module, 'its flags', error)
    if code:
        if not os.path.exists(record) or not os.path.getsize(record):
            _record(record, 'UserInputError', 'python -m %s exits %s before its flags parse'
                    % (module, code), origin)
        return 2
    _record(record, 'UserInputError', 'python -m %s %s returned without parsing its flags'
            % (module, ' '.join(args)), origin, exit_code=EXIT_NOT_CHECKED)
    return EXIT_NOT_CHECKED


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
