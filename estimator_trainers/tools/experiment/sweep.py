"""The sweep file: what to run, checked whole before anything runs.

A sweep file is YAML (see docs/experiments.md for every key):

    name: checkpoint-interval        # default: the file's name
    description: ...                 # one line for the results
    trainer: cifar10                 # a declared trainer, or
    # package: ../tests/toy_trainer  #   a directory put on PYTHONPATH, and
    # module: toy_estimator.trainer  #   the module `python -m` runs
    target: local                    # local (default), rehearse or vertex
    data_dir: data/cifar10           # local data (default: data/<trainer>, prepared if empty)
    flags: {train-steps: 200}        # trainer flags of every point
    axes:                            # a grid: every combination, in this order
      checkpoint-num-steps: [20, 50, 100, 200]
    # points: [{...}, {...}]         # or a list of points instead of a grid
    repeats: 2                       # each point this often, with seeds seed, seed+1, ...
    seed: 1
    sessions: [{train-steps: 100}, {train-steps: 200}]   # train each point's job-dir in turns
    cluster: {parameter-server-count: 1, worker-count: 1}   # a local cluster per point
    metric: accuracy                 # the evaluation metric the results lead with
                                     # (default: accuracy, else the trainer's first)
    full: {flags: {...}, axes: {...}}  # what --full changes: the course's sizes
                                     # (`flag: null` there: the trainer's default)
    vertex: {config: ../cmle_config.yaml, max_parallel: 4, ...}
    rehearse: {config: ../config_ps.yaml, max_replicas: 1, ...}

Axis and point keys are trainer flags (without `--`), `cluster` (a local
cluster shape, or `single`), or `config` (the trainingInput config of a
rehearse or vertex point). Flag names and values are checked with the
trainer's own parser. Every mistake is one `UserInputError` naming the file
and the key. No TensorFlow here (the module imports only declarations).
"""
import argparse
import dataclasses
import hashlib
import importlib
import itertools
import math
import os
import re
import sys
import typing
from typing import Any, Callable, Literal, NoReturn, Optional, TypedDict

from estimator_trainers import declaration
from estimator_trainers import gcs
from estimator_trainers import registry
from estimator_trainers import user_files
from estimator_trainers.errors import FlagError
from estimator_trainers.errors import UserInputError

Target = Literal['local', 'rehearse', 'vertex']
TARGETS: tuple[Target, ...] = typing.get_args(Target)
KEYS = ('name', 'description', 'trainer', 'package', 'module', 'target', 'data_dir',
        'flags', 'axes', 'points', 'repeats', 'seed', 'sessions', 'cluster', 'metric',
        'full', 'vertex', 'rehearse')
FULL_KEYS = ('flags', 'axes', 'points', 'repeats', 'sessions', 'cluster')
CLOUD_KEYS = {
    'vertex': ('config', 'project', 'region', 'bucket', 'job_dir', 'max_parallel',
               'poll_interval', 'options'),
    'rehearse': ('config', 'project', 'region', 'bucket', 'job_dir', 'max_replicas',
                 'options'),
}
CLUSTER_KEYS = ('parameter-server-count', 'worker-count', 'evaluator-count')
SINGLE = 'single'
# Axis keys that are not trainer flags.
CLUSTER = 'cluster'
CONFIG = 'config'
# Flags the sweep sets itself, per point.
OWN_FLAGS = {'job-dir': "each point's job-dir is <out>/runs/<point>",
             'random-seed': 'the repeats\' seeds come from `seed` (seed, seed+1, ...)'}
DEFAULT_SEED = 1
DEFAULT_METRIC = 'accuracy'
DEFAULT_MAX_PARALLEL = 4
# A sweep file is a few dozen lines; its values are checked one by one.
LIMITS = user_files.Limits(bytes=1 << 20, depth=16, values=20000,
                           expected='a sweep file has far fewer')
# Training runs (points x repeats x sessions) one sweep may ask for: each is
# a training job, so more is a typo (an extra zero), not an experiment.
MAX_RUNS = 10000
# A point id is a directory and log file name (at most 255 bytes on most file
# systems); a longer one is shortened and ends in a hash of the whole id.
MAX_POINT_ID = 120
_ID_HASH_CHARS = 12
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))

# Refuses the sweep file: `(where, message)`, where a key path or None.
Fail = Callable[[Optional[str], str], NoReturn]
# A key's path as the sweep file spells it (`full.` in front of overridden keys).
Where = Callable[[str], str]
# Launcher counts of a local cluster: {CLUSTER_KEYS flag: n}.
ClusterCounts = dict[str, int]
# {flag name: (its YAML value, where the file gives it)}.
FlagValues = dict[str, tuple[object, str]]
# A point's ((axis key, YAML value), ...) and where each value is given.
Combination = tuple[tuple[tuple[str, object], ...], tuple[str, ...]]


class CloudSettings(TypedDict, total=False):
    """The checked `vertex` or `rehearse` section (`CLOUD_KEYS`); `options` always set."""
    config: str
    project: str
    region: str
    bucket: str
    job_dir: str
    max_parallel: int
    max_replicas: int
    poll_interval: float
    options: list[str]


@dataclasses.dataclass(frozen=True)
class Point:
    """One run of the sweep: a job-dir trained in one or more sessions.

    Attributes:
      index: position in the run order (0-based).
      values: ((axis key, value), ...), in the axes' order.
      repeat: 0-based repeat; `seed` is its `--random-seed`.
      id: the job-dir's name, stable across invocations.
      sessions: per session, the trainer flags as argv (without job-dir,
        data and seed).
      targets: per session, its `--train-steps`, or None where not set.
      cluster: launcher counts `{flag: n}`, or None for one process.
      config: the trainingInput config of a rehearse/vertex point, or None.
    """
    index: int
    values: tuple[tuple[str, object], ...]
    repeat: int
    seed: int
    id: str
    sessions: tuple[tuple[str, ...], ...]
    targets: tuple[Optional[int], ...]
    cluster: Optional[ClusterCounts] = None
    config: Optional[str] = None

    @property
    def label(self) -> str:
        """`checkpoint-num-steps=100 seed=2`: the point in the progress lines."""
        parts = ['%s=%s' % (key, value_label(value)) for key, value in self.values]
        return ' '.join(parts + ['seed=%d' % self.seed])

    def value(self, key: str) -> object:
        """The point's value on axis `key`, or None."""
        return dict(self.values).get(key)


@dataclasses.dataclass(frozen=True)
class Sweep:
    """A checked sweep file.

    Attributes:
      name: the sweep's name (the default --out directory).
      path: the sweep file.
      trainer: the `declaration.Trainer` (declared by `trainer`, or by `module`).
      module: what `python -m` runs.
      package_dir: a directory to put on PYTHONPATH, or None.
      axes: the axis keys, in order (points' keys for a list of points).
      points: every `Point`, in run order.
      cloud: the `vertex` or `rehearse` settings (a dict), for those targets.
      source: the file's bytes as read (copied into `--out`), or None.
    """
    name: str
    path: str
    description: str
    trainer: declaration.Trainer
    module: str
    package_dir: Optional[str]
    target: Target
    data_dir: Optional[str]
    metric: str
    axes: tuple[str, ...]
    points: tuple[Point, ...]
    repeats: int
    cloud: CloudSettings
    source: Optional[bytes] = None

    @property
    def uses_data_args(self) -> bool:
        """Whether the points get the trainer's local data flags (and its data step)."""
        return self.target == 'local' and self.data_dir is not None


def value_label(value: object) -> str:
    """An axis value as text (clusters and configs are shown by their labels already)."""
    if isinstance(value, bool):
        return 'true' if value else 'false'
    if isinstance(value, (list, tuple)):
        return ','.join(map(str, value))
    return str(value)


def flag_dest(name: str) -> str:
    """The attribute a flag's value has on parsed args (argparse's default dest)."""
    return name.replace('-', '_')


def config_name(path: object) -> str:
    """A config axis value as shown: its file name without `.yaml`."""
    return os.path.splitext(os.path.basename(str(path)))[0]


def cluster_label(cluster: Optional[ClusterCounts]) -> str:
    """`single`, or `1ps-2w` (+`-1e`): parameter servers, workers besides the chief."""
    if not cluster:
        return SINGLE
    label = '%dps-%dw' % (cluster.get('parameter-server-count', 0),
                          cluster.get('worker-count', 0))
    if cluster.get('evaluator-count'):
        label += '-%de' % cluster['evaluator-count']
    return label


def _fail(sweep_path: str, where: Optional[str], message: str) -> NoReturn:
    raise UserInputError('%s: %s%s' % (sweep_path, '%s: ' % where if where else '', message),
                         path=sweep_path)


def load(path: str, full: bool = False) -> Sweep:
    """Reads, checks and expands the sweep file at `path`.

    The file is read within `LIMITS` (`user_files`: a regular file, UTF-8,
    nesting, aliases expanded, duplicate keys), and the number of runs it
    asks for is capped (`MAX_RUNS`) before any point is made.

    Raises:
      UserInputError: one line naming the file and the key at fault.
    """
    source = user_files.read_bytes(path, path, LIMITS)
    spec, _ = user_files.parse_yaml(user_files.decode(source, path), path, LIMITS)
    return dataclasses.replace(parse(spec, path, full=full), source=source)


def parse(spec: object, path: str, full: bool = False) -> Sweep:
    """The `Sweep` of the parsed YAML `spec` of file `path` (see `load`)."""
    def fail(where: Optional[str], message: str) -> NoReturn:
        _fail(path, where, message)

    if not isinstance(spec, dict):
        fail(None, 'expected a mapping of keys (trainer, flags, axes, ...)')
    _check_keys(spec, KEYS, None, fail)
    base_dir = os.path.dirname(os.path.abspath(path))
    name = _text(spec, 'name', fail) or os.path.splitext(os.path.basename(path))[0]
    if not re.fullmatch(r'[A-Za-z0-9][A-Za-z0-9._-]*', name):
        fail('name', 'expected letters, digits, dots, dashes or underscores, got %r' % name)
    target = spec.get('target', 'local')
    if target not in TARGETS:
        fail('target', 'expected one of %s, got %r' % (', '.join(TARGETS), target))
    trainer, module, package_dir = _trainer(spec, base_dir, target, fail)

    settings = dict(spec)
    if full:
        overrides = spec.get('full')
        if not overrides:
            fail('full', '--full needs a `full` section in the sweep file')
        _check_keys(overrides, FULL_KEYS, 'full', fail)
        merged = dict(_mapping(spec, 'flags', fail) or {},
                      **(_mapping(overrides, 'flags', fail, 'full.flags') or {}))
        # `flag: null` in `full.flags` drops a quick-size flag (the trainer's default).
        settings['flags'] = {k: v for k, v in merged.items() if v is not None}
        for key in FULL_KEYS[1:]:
            if key in overrides:
                settings[key] = overrides[key]
        if 'axes' in overrides and 'points' not in overrides:
            settings.pop('points', None)
        if 'points' in overrides and 'axes' not in overrides:
            settings.pop('axes', None)
    elif spec.get('full') is not None:
        _check_keys(spec['full'], FULL_KEYS, 'full', fail)
    prefix = 'full.' if full else ''

    def where(key: str) -> str:
        return prefix + key if full and key in (spec.get('full') or {}) else key

    _check_size(settings, where, fail)
    parser = _flag_parser(trainer)
    flags = _flags(_mapping(settings, 'flags', fail, where('flags')) or {},
                   where('flags'), parser, fail)
    for own, why in OWN_FLAGS.items():
        if own in flags:
            fail('%s.%s' % (where('flags'), own), 'set by the sweep: %s' % why)
    combos, axes = _combinations(settings, where, target, parser, fail)
    sessions = _sessions(settings.get('sessions'), where('sessions'), parser, fail)
    repeats = _count(settings, 'repeats', 1, where('repeats'), fail)
    seed = spec.get('seed', DEFAULT_SEED)
    if isinstance(seed, bool) or not isinstance(seed, int):
        fail('seed', 'expected an integer, got %r' % (seed,))
    default_cluster = _cluster(settings.get('cluster'), where('cluster'), fail) \
        if 'cluster' in settings else None
    if default_cluster and target != 'local':
        fail(where('cluster'), 'a local cluster shape; a %s point\'s cluster is its config'
             % target)
    cloud = _cloud(spec, target, base_dir, fail)
    data_dir = spec.get('data_dir')
    if data_dir is not None:
        if target != 'local':
            fail('data_dir', 'local data; a %s point reads what its flags name' % target)
        data_dir = _path(base_dir, str(_text(spec, 'data_dir', fail)))
    elif target == 'local' and not _sets_data_flags(trainer, flags):
        data_dir = os.path.join(REPO_ROOT, 'data', str(trainer.name))

    runs: list[tuple[tuple[tuple[str, object], ...], tuple[tuple[str, ...], ...],
                     tuple[Optional[int], ...], Optional[ClusterCounts], Optional[str]]] = []
    for values, sources in combos:
        point_flags = dict(flags)
        cluster, config = default_cluster, cloud.get('config')
        for (key, value), source in zip(values, sources):
            if key == CLUSTER:
                cluster = _cluster(value, source, fail)
            elif key == CONFIG:
                config = _config_path(base_dir, value, source, fail)
            else:
                point_flags[key] = (value, source)
        if target != 'local' and not config:
            fail('%s.config' % target, 'a %s sweep needs a trainingInput config (here '
                 'or as an axis)' % target)
        argv_sessions: list[tuple[str, ...]] = []
        targets: list[Optional[int]] = []
        for stage in sessions or [{}]:
            merged = dict(point_flags, **stage)
            argv_sessions.append(tuple(_argv(merged, parser, fail)))
            steps = merged.get('train-steps')
            targets.append(int(steps[0]) if steps else None)
        shown = tuple((key, cluster_label(cluster) if key == CLUSTER else
                       config_name(value) if key == CONFIG else value)
                      for key, value in values)
        runs.append((shown, tuple(argv_sessions), tuple(targets), cluster, config))
    # Repeat-major: an interrupted sweep has every point of the first repeat first.
    points: list[Point] = []
    for repeat in range(repeats):
        for shown, run_sessions, run_targets, cluster, config in runs:
            points.append(Point(
                index=len(points), values=shown, repeat=repeat, seed=seed + repeat,
                id=point_id(shown, seed + repeat), sessions=run_sessions,
                targets=run_targets, cluster=cluster, config=config))
    ids = [p.id for p in points]
    duplicate = next((i for i in ids if ids.count(i) > 1), None)
    if duplicate:
        fail(where('points'), 'two points are the same run (%s)' % duplicate)
    metric = _text(spec, 'metric', fail) or (
        DEFAULT_METRIC if DEFAULT_METRIC in trainer.eval_metrics else trainer.eval_metrics[0])
    if metric not in trainer.eval_metrics:
        fail('metric', '%s evaluates %s, not %r' % (
            trainer.name, ', '.join(trainer.eval_metrics), metric))
    return Sweep(name=name, path=os.path.abspath(path),
                 description=_text(spec, 'description', fail) or '', trainer=trainer,
                 module=module, package_dir=package_dir, target=target, data_dir=data_dir,
                 metric=metric, axes=tuple(axes), points=tuple(points), repeats=repeats,
                 cloud=cloud)


def point_id(values: tuple[tuple[str, object], ...], seed: int) -> str:
    """The job-dir name of a point: `checkpoint-num-steps-100.seed-2`, path and job-name safe.

    An id longer than `MAX_POINT_ID` (long values: a list of hidden units, a
    path) keeps its start and ends in a hash of the whole id, so distinct
    points keep distinct ids and the same point the same id in every run.
    """
    parts = ['%s-%s' % (key, value_label(value)) for key, value in values]
    text = '.'.join(re.sub(r'[^A-Za-z0-9_-]+', '_', part) for part in
                    parts + ['seed-%d' % seed])
    if len(text) <= MAX_POINT_ID:
        return text
    digest = hashlib.sha256(text.encode('utf-8')).hexdigest()[:_ID_HASH_CHARS]
    return '%s-%s' % (text[:MAX_POINT_ID - _ID_HASH_CHARS - 1], digest)


def _check_size(settings: dict[str, Any], where: Where, fail: Fail) -> None:
    """Refuses a sweep of more than `MAX_RUNS` training runs.

    The count (points x repeats x sessions) is taken from the sizes the keys
    declare, before a point is made: a grid of a million points or
    `repeats: 1000000000` is one line at once, not minutes of expanding it.
    Malformed keys are left to the checks that follow.
    """
    axes, points = settings.get('axes'), settings.get('points')
    if isinstance(axes, dict) and axes and points is None:
        lengths = [len(v) if isinstance(v, list) else 1 for v in axes.values()]
        count = math.prod(lengths)
        shape = '%s (%s values)' % (where('axes'), ' x '.join('{:,}'.format(n)
                                                              for n in lengths))
    elif isinstance(points, list) and axes is None:
        count = len(points)
        shape = '%s (%s)' % (where('points'), '{:,}'.format(count))
    else:
        count, shape = 1, 'one point'
    repeats = settings.get('repeats', 1)
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        repeats = 1
    sessions = settings.get('sessions')
    stages = len(sessions) if isinstance(sessions, list) and sessions else 1
    runs = count * repeats * stages
    if runs > MAX_RUNS:
        fail(None, '%s x %s (%s) x %s (%s) = %s training runs; a sweep holds at most %s: '
             'give fewer values, points or repeats' % (
                 shape, where('repeats'), '{:,}'.format(repeats), where('sessions'),
                 '{:,}'.format(stages), '{:,}'.format(runs), '{:,}'.format(MAX_RUNS)))


# --- keys ---------------------------------------------------------------------

def _check_keys(mapping: object, allowed: tuple[str, ...], where: Optional[str],
                fail: Fail) -> None:
    """Refuses a non-mapping, or a key not in `allowed`."""
    if not isinstance(mapping, dict):
        fail(where, 'expected a mapping, got %r' % (mapping,))
    for key in mapping:
        if key not in allowed:
            fail('%s.%s' % (where, key) if where else key,
                 'unknown key (expected one of: %s)' % ', '.join(allowed))


def _text(spec: dict[str, Any], key: str, fail: Fail) -> Optional[str]:
    """`spec[key]`: text or None."""
    value = spec.get(key)
    if value is not None and not isinstance(value, str):
        fail(key, 'expected text, got %r' % (value,))
    return value


def _mapping(spec: dict[str, Any], key: str, fail: Fail,
             where: Optional[str] = None) -> Optional[dict[str, Any]]:
    """`spec[key]`: a mapping or None."""
    value = spec.get(key)
    if value is not None and not isinstance(value, dict):
        fail(where or key, 'expected a mapping of flag: value, got %r' % (value,))
    return value


def _count(spec: dict[str, Any], key: str, default: int, where: str, fail: Fail) -> int:
    """`spec[key]` (default `default`): an integer >= 1."""
    value = spec.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        fail(where, 'expected an integer >= 1, got %r' % (value,))
    return value


def _path(base_dir: str, path: str) -> str:
    """`path` relative to the sweep file's directory (a remote one as it is)."""
    return path if '://' in path else os.path.normpath(os.path.join(base_dir, path))


def _config_path(base_dir: str, value: object, where: str, fail: Fail) -> str:
    """The trainingInput config file a `config` value names; it must exist."""
    if not isinstance(value, str) or not value:
        fail(where, 'expected the path of a trainingInput YAML config, got %r' % (value,))
    path = _path(base_dir, value)
    if not os.path.isfile(path):
        fail(where, '%s: no such file (relative paths are relative to the sweep file)'
             % path)
    return path


def _trainer(spec: dict[str, Any], base_dir: str, target: str,
             fail: Fail) -> tuple[declaration.Trainer, str, Optional[str]]:
    """(Trainer, module, package dir) of `trainer`, or of `package` + `module`."""
    if spec.get('trainer') is not None:
        if spec.get('module') or spec.get('package'):
            fail('trainer', 'give either trainer, or package and module, not both')
        name = _text(spec, 'trainer', fail)
        assert name is not None  # checked just above
        try:
            trainer = registry.get(name)
        except UserInputError as e:
            fail('trainer', str(e))
        return trainer, trainer.module, None
    module = _text(spec, 'module', fail)
    if not module:
        fail(None, 'no trainer: give `trainer: NAME` (%s) or `module:` (with `package:` '
             'where it lives)' % ', '.join(sorted(registry.discover())))
    if target != 'local':
        fail('module', 'a %s sweep runs a trainer of this repository (`trainer: NAME`); '
             'a package/module sweep runs locally' % target)
    package_dir = None
    if spec.get('package') is not None:
        package_dir = _path(base_dir, str(_text(spec, 'package', fail)))
        if not os.path.isdir(package_dir):
            fail('package', '%s: no such directory' % package_dir)
    return _module_trainer(module, package_dir, fail), module, package_dir


def _module_trainer(module: str, package_dir: Optional[str],
                    fail: Fail) -> declaration.Trainer:
    """The `TRAINER` that `module` (or its package's `trainer` module) declares.

    `package_dir` is on the import path only while the declaration imports:
    the sweep's points run in their own processes, and the path of this one
    (registry discovery included) stays as it was.
    """
    saved_path = list(sys.path)
    if package_dir:
        sys.path.insert(0, package_dir)
    try:
        for name in [module, module.split('.')[0] + '.' + registry.DECLARATION]:
            try:
                declared = getattr(importlib.import_module(name), 'TRAINER', None)
            except ImportError as e:
                if name == module:
                    fail('module', 'cannot import %s (%s)%s' % (
                        module, e, '' if package_dir else '; give `package:`, the '
                        'directory it lives in'))
                continue
            if isinstance(declared, declaration.Trainer):
                return declared
    finally:
        sys.path[:] = saved_path
    fail('module', '%s declares no TRAINER (a declaration.Trainer, as in '
         'docs/adding-a-trainer.md), so its flags cannot be checked' % module)


def _sets_data_flags(trainer: declaration.Trainer, flags: FlagValues) -> bool:
    """Whether the sweep's flags already name the data (then no data step runs)."""
    names = [arg[2:].split('=')[0] for arg in trainer.data_args('DATA')
             if arg.startswith('--')]
    return any(name in flags for name in names)


def _cloud(spec: dict[str, Any], target: Target, base_dir: str,
           fail: Fail) -> CloudSettings:
    """The settings of the sweep's target (`vertex` or `rehearse`), checked."""
    for other in ('vertex', 'rehearse'):
        if spec.get(other) is not None and other != target:
            fail(other, 'settings for target %s, but the target is %s' % (other, target))
    if target == 'local':
        return CloudSettings()
    settings = spec.get(target) or {}
    _check_keys(settings, CLOUD_KEYS[target], target, fail)
    cloud: dict[str, Any] = dict(settings)
    if settings.get('config') is not None:
        cloud['config'] = _config_path(base_dir, settings['config'], '%s.config' % target,
                                       fail)
    for key in ('project', 'region', 'bucket', 'job_dir'):
        if settings.get(key) is not None and not isinstance(settings[key], str):
            fail('%s.%s' % (target, key), 'expected text, got %r' % (settings[key],))
    if cloud.get('job_dir') and not gcs.is_gcs_path(cloud['job_dir']):
        fail('%s.job_dir' % target, 'expected a gs:// directory (every task of a %s job '
             'must reach it), got %r' % (target, cloud['job_dir']))
    if cloud.get('job_dir') and gcs.path_problem(cloud['job_dir']):
        fail('%s.job_dir' % target, '%s: %s' % (cloud['job_dir'],
                                                gcs.path_problem(cloud['job_dir'])))
    for key in ('max_parallel', 'max_replicas'):
        if key in settings:
            _count(settings, key, 1, '%s.%s' % (target, key), fail)
    if 'poll_interval' in settings and (
            isinstance(settings['poll_interval'], bool)
            or not isinstance(settings['poll_interval'], (int, float))
            or settings['poll_interval'] < 0):
        fail('%s.poll_interval' % target, 'expected seconds >= 0, got %r'
             % (settings['poll_interval'],))
    options = settings.get('options', [])
    if not isinstance(options, list) or not all(isinstance(o, str) for o in options):
        fail('%s.options' % target, 'expected a list of submit options (text)')
    cloud['options'] = list(options)
    return typing.cast(CloudSettings, cloud)  # every key and value checked above


# --- axes and points ------------------------------------------------------------

def _combinations(settings: dict[str, Any], where: Where, target: Target,
                  parser: argparse.ArgumentParser,
                  fail: Fail) -> tuple[list[Combination], list[str]]:
    """([(values, sources)], axis keys): the grid of `axes` or the list of `points`."""
    axes, points = settings.get('axes'), settings.get('points')
    if axes is not None and points is not None:
        fail(where('points'), 'give axes (a grid) or points (a list), not both')
    if axes is not None:
        if not isinstance(axes, dict):
            fail(where('axes'), 'expected a mapping of axis: [values]')
        keys = list(axes)
        columns: list[list[tuple[object, str]]] = []
        for key in keys:
            source = '%s.%s' % (where('axes'), key)
            values = axes[key]
            if not isinstance(values, list):
                fail(source, 'expected a list of values, got %r' % (values,))
            if not values:
                fail(source, 'empty axis; give at least one value')
            _check_axis_key(key, source, target, parser, fail)
            for i, value in enumerate(values):
                _check_value(key, value, '%s[%d]' % (source, i), parser, fail)
            columns.append([(value, '%s[%d]' % (source, i)) for i, value in enumerate(values)])
        combos: list[Combination] = []
        for row in itertools.product(*columns):
            combos.append((tuple((k, v) for k, (v, _) in zip(keys, row)),
                           tuple(s for _, s in row)))
        return combos, [_flag_name(k) for k in keys]
    if points is not None:
        if not isinstance(points, list):
            fail(where('points'), 'expected a list of points (mappings of key: value)')
        if not points:
            fail(where('points'), 'empty list; give at least one point')
        keys = []
        combos = []
        for i, point in enumerate(points):
            source = '%s[%d]' % (where('points'), i)
            if not isinstance(point, dict) or not point:
                fail(source, 'expected a mapping of key: value')
            for key, value in point.items():
                _check_axis_key(key, '%s.%s' % (source, key), target, parser, fail)
                _check_value(key, value, '%s.%s' % (source, key), parser, fail)
                if _flag_name(key) not in keys:
                    keys.append(_flag_name(key))
        for i, point in enumerate(points):
            source = '%s[%d]' % (where('points'), i)
            given = {_flag_name(k): v for k, v in point.items()}
            values = tuple((k, given[k]) for k in keys if k in given)
            combos.append((values, tuple('%s.%s' % (source, k) for k, _ in values)))
        return combos, keys
    return [((), ())], []


def _flag_name(key: str) -> str:
    """A flag's name without `--` (both spellings are accepted)."""
    return key[2:] if isinstance(key, str) and key.startswith('--') else key


def _check_axis_key(key: str, source: str, target: Target,
                    parser: argparse.ArgumentParser, fail: Fail) -> None:
    """Refuses an axis key that is not a trainer flag, `cluster` or `config` here."""
    name = _flag_name(key)
    if name == CLUSTER:
        if target != 'local':
            fail(source, 'a local cluster shape; a %s point\'s cluster is its config' % target)
        return
    if name == CONFIG:
        if target == 'local':
            fail(source, 'a trainingInput config is for target rehearse or vertex')
        return
    if name in OWN_FLAGS:
        fail(source, 'set by the sweep: %s' % OWN_FLAGS[name])
    _action(name, source, parser, fail)


def _check_value(key: str, value: object, source: str, parser: argparse.ArgumentParser,
                 fail: Fail) -> None:
    """Refuses a flag value the trainer's parser refuses."""
    name = _flag_name(key)
    if name in (CLUSTER, CONFIG):
        return
    _argv({name: (value, source)}, parser, fail)


# --- flags ------------------------------------------------------------------------

def _flag_parser(trainer: declaration.Trainer) -> argparse.ArgumentParser:
    """The trainer's own parser, with required flags optional (the sweep adds them)."""
    parser: argparse.ArgumentParser = trainer.make_parser()
    for action in parser._actions:  # pylint: disable=protected-access
        action.required = False
    return parser


def _action(name: str, source: str, parser: argparse.ArgumentParser,
            fail: Fail) -> argparse.Action:
    """The parser's action of flag `name`; an unknown flag is refused."""
    action = parser._option_string_actions.get('--' + name)  # pylint: disable=protected-access
    if action is None or not isinstance(name, str):
        fail(source, 'unknown flag --%s (see %s --help)' % (name, parser.prog))
    return action


def _flags(mapping: dict[str, Any], where: str, parser: argparse.ArgumentParser,
           fail: Fail) -> FlagValues:
    """{flag name: (value, source)} of a `flags` mapping, each checked."""
    flags: FlagValues = {}
    for key, value in mapping.items():
        name = _flag_name(key)
        source = '%s.%s' % (where, name)
        _action(name, source, parser, fail)
        _argv({name: (value, source)}, parser, fail)
        flags[name] = (value, source)
    return flags


def _sessions(sessions: object, where: str, parser: argparse.ArgumentParser,
              fail: Fail) -> Optional[list[FlagValues]]:
    """The flags of each session of `sessions`, or None when not given."""
    if sessions is None:
        return None
    if not isinstance(sessions, list) or not sessions:
        fail(where, 'expected a list of flag mappings, one per session (e.g. '
             '[{train-steps: 1000}, {train-steps: 2000}])')
    result: list[FlagValues] = []
    for i, stage in enumerate(sessions):
        if not isinstance(stage, dict):
            fail('%s[%d]' % (where, i), 'expected a mapping of flag: value')
        flags = _flags(stage, '%s[%d]' % (where, i), parser, fail)
        for own, why in OWN_FLAGS.items():
            if own in flags:
                fail('%s[%d].%s' % (where, i, own), 'set by the sweep: %s' % why)
        result.append(flags)
    return result


def _argv(flags: FlagValues, parser: argparse.ArgumentParser, fail: Fail) -> list[str]:
    """argv of {name: (value, source)}, each value checked by the trainer's parser."""
    argv: list[str] = []
    for name, (value, source) in flags.items():
        action = _action(name, source, parser, fail)
        args = flag_args(name, value, action, source, fail)
        _parse_one(parser, args, source, fail)
        argv.extend(args)
    return argv


def flag_args(name: str, value: object, action: argparse.Action, source: str,
              fail: Fail) -> list[str]:
    """The argv that sets flag `name` to the YAML `value`."""
    option = '--' + name
    if isinstance(action, argparse.BooleanOptionalAction):
        if not isinstance(value, bool):
            fail(source, '%s is a switch: expected true or false, got %r' % (option, value))
        return [option if value else '--no-' + name]
    if action.nargs == 0:
        if value is not True and value is not False:
            fail(source, '%s is a switch: expected true or false, got %r' % (option, value))
        return [option] if value else []
    if value is None or isinstance(value, dict):
        fail(source, '%s: expected a value, got %r' % (option, value))
    if isinstance(value, list):
        if action.nargs in ('+', '*') or isinstance(action.nargs, int):
            return [option] + [_text_value(v) for v in value]
        return ['%s=%s' % (option, ','.join(_text_value(v) for v in value))]
    return ['%s=%s' % (option, _text_value(value))]


def _text_value(value: object) -> str:
    """A YAML value as a flag's text (booleans as the trainers spell them)."""
    if isinstance(value, bool):
        return 'true' if value else 'false'
    return str(value)


def _parse_one(parser: argparse.ArgumentParser, args: list[str], source: str,
               fail: Fail) -> None:
    """Parses `args` alone with `parser`; a refusal is the sweep file's error at `source`."""
    try:
        parser.parse_args(args)
    except FlagError as e:
        fail(source, str(e))


def _cluster(value: object, where: str, fail: Fail) -> Optional[ClusterCounts]:
    """Launcher counts of a cluster shape: `single` (None) or a mapping of counts."""
    if value in (None, SINGLE):
        return None
    if not isinstance(value, dict):
        fail(where, 'expected `single` or a mapping of %s' % ', '.join(CLUSTER_KEYS))
    _check_keys(value, CLUSTER_KEYS, where, fail)
    for key, count in value.items():
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            fail('%s.%s' % (where, key), 'expected an integer >= 0, got %r' % (count,))
    # The launcher's defaults (2 and 2) would surprise: a shape says what it has.
    return {key: value.get(key, 0) for key in CLUSTER_KEYS}
