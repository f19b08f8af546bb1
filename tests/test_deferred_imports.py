"""What TensorFlow imports but the trainers never use is loaded on first use only."""
import json
import subprocess
import sys

from conftest import cli_env, REPO_ROOT
from estimator_trainers import deferred_imports

# In a fresh interpreter: TensorFlow loaded the way every command loads it, then
# whether googleapiclient.discovery ran, and whether it works once used.
_PROBE = '''
import json, sys, types
from estimator_trainers import logs
tf = logs.import_tensorflow()
module = sys.modules['googleapiclient.discovery']
ran_at_import = type(module) is types.ModuleType
from googleapiclient import discovery
service = discovery.build('storage', 'v1', static_discovery=True,
                          credentials=None, developerKey='unused')
print(json.dumps({'ran_at_import': ran_at_import, 'tf_has_estimator': hasattr(tf, 'estimator'),
                  'buckets': hasattr(service, 'buckets'),
                  'finders_left': sum(type(f).__module__ == 'estimator_trainers.deferred_imports'
                                      for f in sys.meta_path)}))
'''


def test_tensorflow_loads_without_running_googleapiclient_discovery_which_works_when_used():
    proc = subprocess.run([sys.executable, '-c', _PROBE], cwd=REPO_ROOT, env=cli_env(),
                          capture_output=True, text=True, timeout=300, check=True)
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen == {'ran_at_import': False, 'tf_has_estimator': True,
                    'buckets': True, 'finders_left': 0}, seen


def _package(tmp_path, monkeypatch):
    """A package `deferme` whose modules append their names to `deferme.ran` when run."""
    package = tmp_path / 'deferme'
    package.mkdir()
    (package / '__init__.py').write_text('ran = []\n')
    for name in ('lazy', 'eager'):
        (package / ('%s.py' % name)).write_text(
            'import deferme\ndeferme.ran.append(%r)\nVALUE = %r\n' % (name, name.upper()))
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [n for n in sys.modules if n == 'deferme' or n.startswith('deferme.')]:
        monkeypatch.delitem(sys.modules, name)


def test_a_deferred_module_runs_on_first_attribute_use_and_others_at_once(tmp_path,
                                                                           monkeypatch):
    _package(tmp_path, monkeypatch)
    with deferred_imports.deferring(['deferme.lazy']):
        import deferme  # pylint: disable=import-outside-toplevel,import-error
        from deferme import eager, lazy  # pylint: disable=import-outside-toplevel,import-error
        assert deferme.ran == ['eager']
    assert lazy.VALUE == 'LAZY' and eager.VALUE == 'EAGER'
    assert deferme.ran == ['eager', 'lazy']


def test_outside_the_block_imports_run_at_once(tmp_path, monkeypatch):
    _package(tmp_path, monkeypatch)
    with deferred_imports.deferring(['deferme.lazy']):
        pass
    import deferme  # pylint: disable=import-outside-toplevel,import-error
    from deferme import lazy  # pylint: disable=import-outside-toplevel,import-error,unused-import
    assert deferme.ran == ['lazy']
