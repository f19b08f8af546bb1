"""The package's layers, checked from the source: no import circles, the runtime
never imports a trainer, the declarations and every `--help` stay free of
TensorFlow, and no module parses `error:` text back.

Imports are read with `ast`, at module level and inside functions alike, so a
circle hidden in a function body fails too.
"""
import ast
import os
import re
import subprocess
import sys

import pytest

from conftest import cli_env, REPO_ROOT
from estimator_trainers import registry

RUNTIME_PACKAGE = 'estimator_trainers'
TRAINER_PACKAGES = tuple(registry.candidate_packages([REPO_ROOT]))
PRODUCTION_PACKAGES = (RUNTIME_PACKAGE,) + TRAINER_PACKAGES

# What `--help`, the registry, the launcher and the cloud tools import: these
# modules, and everything they import, must not import TensorFlow.
TENSORFLOW_FREE = (
    'estimator_trainers.declaration', 'estimator_trainers.cli', 'estimator_trainers.flags',
    'estimator_trainers.errors', 'estimator_trainers.registry', 'estimator_trainers.cluster',
    'estimator_trainers.checkpoints', 'estimator_trainers.job_dir',
    'estimator_trainers.distribution', 'estimator_trainers.startup', 'estimator_trainers.gcs',
    'estimator_trainers.safe_io', 'estimator_trainers.user_files',
    'estimator_trainers.process', 'estimator_trainers.sentinel', 'estimator_trainers.host',
    'estimator_trainers.google_api', 'estimator_trainers.run_record',
    'estimator_trainers.job_record',
    'estimator_trainers.tools.local', 'estimator_trainers.tools.launcher',
    'estimator_trainers.tools.local_cluster', 'estimator_trainers.tools.cloud.train_cloud',
    'estimator_trainers.tools.cloud.ai_platform',
    'estimator_trainers.tools.cloud.pipeline', 'estimator_trainers.tools.cloud.endpoints',
    'estimator_trainers.tools.cloud.instances',
    'estimator_trainers.tools.cloud.bootstrap', 'estimator_trainers.tools.cloud.packages',
    'estimator_trainers.tools.experiment.cli', 'estimator_trainers.tools.experiment.execute',
    'estimator_trainers.perf_model', 'estimator_trainers.tools.cloud.pricing',
    'estimator_trainers.tools.cloud.estimate',
) + tuple('%s.trainer' % package for package in TRAINER_PACKAGES)

# Command-line modules whose `--help` must be instant.
ENTRY_POINTS = (
    'estimator_trainers.tools.local', 'estimator_trainers.tools.launcher',
    'estimator_trainers.tools.cloud', 'estimator_trainers.tools.experiment',
    'cifar10_estimator.generate_cifar10_tfrecords',
    'taxi_estimator.data', 'taxi_estimator.predict', 'taxi_estimator.cache',
    'keras_estimator.data',
    'estimator_trainers.tools.cloud.ai_platform', 'estimator_trainers.tools.cloud.bootstrap',
)
# The command lines users run: each turns its words into a plan or a call and
# never imports another (what two of them share lives in a module of its own).
FRONTS = ('estimator_trainers.tools.local', 'estimator_trainers.tools.cloud.train_cloud',
          'estimator_trainers.tools.cloud.ai_platform', 'estimator_trainers.tools.experiment.cli')
# The local cluster launcher's command line: it only parses flags; programs call
# its library, `local_cluster`.
LAUNCHER_FRONT = 'estimator_trainers.tools.launcher'
# The steps of a cloud action, by the pipeline that owns their order: only it
# calls them (the training pipeline: a job's checks, staging, build, body,
# rehearsal; the serving pipeline: a deploy's check of the export and requests).
PIPELINES = {
    'estimator_trainers.tools.cloud.pipeline': {
        'estimator_trainers.tools.cloud.preflight': ('check_replicas', 'check_storage'),
        'estimator_trainers.tools.cloud.staging': ('stage',),
        'estimator_trainers.tools.cloud.build': ('pack_context',),
        'estimator_trainers.tools.cloud.rehearsal': ('rehearse',),
        'estimator_trainers.tools.cloud.packages': ('install',),
        'estimator_trainers.tools.cloud.source_checks': ('check',),
        'estimator_trainers.tools.cloud.jobs': ('job_body',),
        # The estimate, the budget and the run id label of a job, before it is built.
        'estimator_trainers.tools.cloud.estimate': ('for_plan',),
    },
    'estimator_trainers.tools.cloud.serving_pipeline': {
        # A deploy: the export checked, then uploaded, deployed, or removed.
        'estimator_trainers.serving': ('check_export',),
        'estimator_trainers.tools.cloud.endpoints': ('upload_body', 'deploy_body',
                                                     'undeploy_body'),
    },
}
# Steps a step may call itself: the rehearsal installs what the pools install,
# and `bootstrap` installs the job's packages in the image.
STEP_CALLERS = {('estimator_trainers.tools.cloud.packages', 'install'): (
    'estimator_trainers.tools.cloud.rehearsal', 'estimator_trainers.tools.cloud.bootstrap')}
# The one YAML reader of the files users hand over.
YAML_READER = 'estimator_trainers.user_files'
# What builds an API request: a client's `*_request(s)` methods, a request
# body's `*_body` functions, a discovery client or an unsent request printed.
REQUEST_MAKERS = re.compile(r'.*_requests?$|.*_body$')
REQUEST_CALLS = {('estimator_trainers.tools.cloud.api', 'build'),
                 ('estimator_trainers.tools.cloud.api', 'request_json'),
                 ('estimator_trainers.tools.cloud.api', 'anonymous_credentials')}
# The only modules that spell a role's name (`cluster.TASK_TYPES`): the
# runtime's table and the cloud tools' table of its other names.
ROLE_TABLES = ('estimator_trainers.cluster', 'estimator_trainers.tools.cloud.roles')
# Where the rule holds: the runtime, its tools and the trainers (every production
# package; the benchmarks name the shapes they time as data).
ROLE_SCOPE = PRODUCTION_PACKAGES


def production_modules():
    """{dotted name: path} of every module of the production packages."""
    modules = {}
    for package in PRODUCTION_PACKAGES:
        for directory, _, files in os.walk(os.path.join(REPO_ROOT, package)):
            for name in files:
                if name.endswith('.py'):
                    path = os.path.join(directory, name)
                    dotted = os.path.relpath(path, REPO_ROOT)[:-3].replace(os.sep, '.')
                    modules[dotted[:-len('.__init__')] if dotted.endswith('.__init__')
                            else dotted] = path
    return modules


def import_graph(modules):
    """{module: set of production modules it imports, anywhere in its body}."""
    def resolve(name):
        while name and name not in modules:
            name = name.rpartition('.')[0]
        return name or None

    graph = {}
    for module, path in modules.items():
        with open(path, encoding='utf-8') as f:
            tree = ast.parse(f.read(), path)
        targets = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets.update(resolve(alias.name) for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                targets.update(resolve('%s.%s' % (node.module, alias.name))
                               for alias in node.names)
        graph[module] = {t for t in targets if t and t != module}
    return graph


def circles(graph):
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_import_graph_is_read_from_every_kind_of_import():
    graph = {'a': {'b'}, 'b': {'c'}, 'c': {'a'}, 'd': {'a'}}
    assert circles(graph) == [['a', 'b', 'c']]
    modules = production_modules()
    found = import_graph(modules)
    # A module-level import and one inside a function are both edges.
    assert 'estimator_trainers.runner' in found['estimator_trainers.cli']
    assert 'estimator_trainers.declaration' in found['taxi_estimator.trainer']


def test_no_import_circles_among_production_modules():
    assert circles(import_graph(production_modules())) == []


def test_the_runtime_and_tools_never_import_a_trainer_package():
    graph = import_graph(production_modules())
    offending = sorted('%s -> %s' % (module, target)
                       for module, targets in graph.items()
                       if module.split('.')[0] == RUNTIME_PACKAGE
                       for target in targets if target.split('.')[0] in TRAINER_PACKAGES)
    assert offending == []


@pytest.mark.parametrize('module', TENSORFLOW_FREE)
def test_declarations_and_tools_import_without_tensorflow(module):
    proc = subprocess.run(
        [sys.executable, '-c', 'import importlib, sys; importlib.import_module(sys.argv[1]); '
         'sys.exit(3 if "tensorflow" in sys.modules else 0)', module],
        cwd=REPO_ROOT, env=cli_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, '%s imports TensorFlow\n%s' % (module, proc.stderr[-3000:])


@pytest.mark.parametrize('module', ENTRY_POINTS + tuple(
    trainer.module for trainer in registry.discover([REPO_ROOT]).values()))
def test_help_of_every_entry_point_is_instant(module):
    """`-X importtime` lists every module the process imported."""
    proc = subprocess.run([sys.executable, '-X', 'importtime', '-m', module, '--help'],
                          cwd=REPO_ROOT, env=cli_env(), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert 'usage' in proc.stdout.lower()
    imported = re.findall(r'^import time:.*\|\s+(\S+)$', proc.stderr, re.M)
    assert imported and not [m for m in imported if m.split('.')[0] == 'tensorflow']


def test_no_production_module_parses_error_lines():
    """Errors are values (`errors.py`): only it writes `error: ...`, and no module
    reads such a line back (a regex or a prefix test on `error:`)."""
    offending = []
    for module, path in production_modules().items():
        if module == 'estimator_trainers.errors':
            continue
        with open(path, encoding='utf-8') as f:
            tree = ast.parse(f.read(), path)
        docstrings = {id(node.value) for node in ast.walk(tree)
                      if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                    and id(node) not in docstrings and re.search(r'(^|[^\w-])error: ', node.value)):
                offending.append('%s:%d %r' % (module, node.lineno, node.value[:60]))
    assert offending == []


def test_the_readme_lists_every_trainer_the_registry_finds():
    """README's trainer table names each declared trainer's package and command line."""
    with open(os.path.join(REPO_ROOT, 'README.md'), encoding='utf-8') as f:
        readme = f.read()
    table = readme[readme.index('## The trainers'):]
    rows = re.findall(r'^\| `(\w+)` \|.*\| `python -m ([\w.]+)` \|$', table, re.M)
    trainers = registry.discover([REPO_ROOT])
    assert sorted(rows) == sorted((t.module.split('.')[0], t.module)
                                  for t in trainers.values())


def test_fronts_never_import_each_other():
    graph = import_graph(production_modules())
    offending = sorted('%s -> %s' % (front, target) for front in FRONTS
                       for target in graph[front] if target in FRONTS)
    assert offending == []


def test_programs_import_the_cluster_library_not_the_launcher_front():
    graph = import_graph(production_modules())
    importers = sorted(module for module, targets in graph.items()
                       if LAUNCHER_FRONT in targets)
    assert importers == []


def _calls(path):
    """`(module alias or name, function)` of every `x.f(...)` call in a file, with
    the file's `import a.b.c as x` / `from a.b import c` aliases resolved."""
    with open(path, encoding='utf-8') as f:
        tree = ast.parse(f.read(), path)
    aliases = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                aliases[alias.asname or alias.name] = alias.name
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                aliases[alias.asname or alias.name] = '%s.%s' % (node.module, alias.name)
    calls = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                isinstance(node.func.value, ast.Name):
            calls.add((aliases.get(node.func.value.id, node.func.value.id), node.func.attr))
    return calls


def test_only_its_pipeline_orders_the_steps_of_a_cloud_action():
    modules = production_modules()
    offending = []
    for module, path in modules.items():
        for pipeline, steps in PIPELINES.items():
            if module == pipeline:
                continue
            for target, function in _calls(path):
                allowed = STEP_CALLERS.get((target, function), ())
                if function in steps.get(target, ()) and module not in allowed:
                    offending.append('%s calls %s.%s' % (module, target, function))
    assert offending == []
    # The rule can fail: each pipeline calls every one of its steps.
    for pipeline, steps in PIPELINES.items():
        called = _calls(modules[pipeline])
        assert all((target, function) in called for target, functions in steps.items()
                   for function in functions if (target, function) not in STEP_CALLERS)


def test_every_user_yaml_goes_through_the_one_reader():
    """No module but `user_files` parses YAML: a file a user hands over is read
    within its bounds (size, regular file, UTF-8, depth, aliases)."""
    offending = []
    for module, path in production_modules().items():
        if module == YAML_READER:
            continue
        for target, function in _calls(path):
            if target == 'yaml' and function in ('load', 'safe_load', 'full_load',
                                                 'unsafe_load', 'load_all', 'safe_load_all'):
                offending.append('%s: yaml.%s' % (module, function))
    assert offending == []


def _request_makers(path):
    """The calls in a file that build an API request (`REQUEST_MAKERS`, `REQUEST_CALLS`)."""
    return sorted('%s.%s' % call for call in _calls(path)
                  if REQUEST_MAKERS.match(call[1]) or call in REQUEST_CALLS)


def test_fronts_never_construct_requests():
    """A front turns words into a plan and an action; the pipelines (and the
    clients they call) build every request, dry runs' included."""
    modules = production_modules()
    offending = ['%s: %s' % (front, call) for front in FRONTS
                 for call in _request_makers(modules[front])]
    assert offending == []
    # The rule can fail: the pipelines build requests through these very calls.
    assert _request_makers(modules['estimator_trainers.tools.cloud.pipeline'])
    assert _request_makers(modules['estimator_trainers.tools.cloud.serving_pipeline'])


def _role_literals(path):
    """`(line, name)` of every string constant in a file that is a role's name."""
    from estimator_trainers import cluster  # pylint: disable=import-outside-toplevel
    with open(path, encoding='utf-8') as f:
        tree = ast.parse(f.read(), path)
    return sorted((node.lineno, node.value) for node in ast.walk(tree)
                  if isinstance(node, ast.Constant) and node.value in cluster.TASK_TYPES)


def test_role_names_are_spelled_only_in_the_role_tables():
    """`'chief'`, `'master'`, `'worker'`, `'ps'`, `'evaluator'` as strings appear in
    `ROLE_TABLES` only: everything else names a role by their constants, so a
    role's name (or what a system calls it) changes in one place."""
    modules = production_modules()
    offending = ['%s:%d %r' % (module, line, name) for module, path in sorted(modules.items())
                 if module not in ROLE_TABLES and any(
                     module == scope or module.startswith(scope + '.') for scope in ROLE_SCOPE)
                 for line, name in _role_literals(path)]
    assert offending == []
    # The rule can fail: the tables spell every name.
    assert {name for table in ROLE_TABLES for _, name in _role_literals(modules[table])} >= {
        'chief', 'master', 'worker', 'ps', 'evaluator'}
