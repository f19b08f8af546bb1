"""Cluster facts from `TF_CONFIG` (or Vertex AI's `CLUSTER_SPEC`).

The one place that reads the environment's cluster description. Trainers ask
`load_cluster()` for a `ClusterInfo` (role, chief-ness, worker count) and
call `export_tf_config()` so that `tf.estimator.RunConfig`, which reads
`TF_CONFIG` itself, sees the same normalised description.

Accepted shapes:
- AI Platform: `master` + `worker` + `ps`, with extra `job`, `environment`
  and `task.trial` keys (ignored). The master trains and evaluates.
- Vertex AI / TF2: `chief` + `worker` + `ps`; an `evaluator` task is not in
  `cluster`.
- Kubeflow TFJob: the same keys, possibly in upper case; a cluster of
  workers only (no chief) has worker 0 promoted to `chief`, because
  Estimator's RunConfig requires one.
- Vertex custom containers without `TF_CONFIG`: `CLUSTER_SPEC` with
  `workerpool0..3` (chief, worker, ps, evaluator).
- A JobSet pod (kubernetes-sigs/jobset) without `TF_CONFIG`: JobSet gives
  each pod its replicated job's name and its Job's index (annotations, passed
  as `JOBSET_*` variables by the downward API), Kubernetes its index in an
  Indexed Job (`JOB_COMPLETION_INDEX`), and the headless service gives every
  pod the name `<jobset>-<replicated job>-<job index>-<pod index>.<subdomain>`;
  with the pods of each role (`JOBSET_TF_TASKS`) that is the whole TF_CONFIG
  (`jobset_tf_config`): one replicated job per role, named after it.
- No `TF_CONFIG`, or one with an empty `cluster`: a single local process
  (refused for an `evaluator` or `ps` task, which must never train).
- A `cluster` of one training task (Vertex AI gives a one-replica job a
  TF_CONFIG naming just its chief): that task is a single process too, so
  that what runs in one process (`mirrored`) runs there; an evaluator of
  such a job still evaluates its checkpoints.

An `evaluator` listed in `cluster` is dropped from it (it is not part of the
training cluster); with `master`, the evaluator's exported TF_CONFIG names it
`chief`, since RunConfig refuses an evaluator beside a `master`.
"""
import dataclasses
import ipaddress
import json
import os
import re
from collections.abc import Mapping, MutableMapping
from typing import Final, Literal, Optional, TypeGuard

from estimator_trainers import user_files
from estimator_trainers.errors import UserInputError

# A task's role (TF_CONFIG's `task.type`, a `cluster` job name): the one
# vocabulary of roles; everything else names them through these constants.
Role = Literal['chief', 'master', 'worker', 'ps', 'evaluator']
CHIEF: Final = 'chief'
MASTER: Final = 'master'  # AI Platform's name for the chief before runtime 2.1
WORKER: Final = 'worker'
PS: Final = 'ps'
EVALUATOR: Final = 'evaluator'

TASK_TYPES: Final[tuple[Role, ...]] = (CHIEF, MASTER, WORKER, PS, EVALUATOR)
# The names of the task that leads a cluster (writes checkpoints, summaries, exports).
CHIEF_ROLES: Final[tuple[Role, ...]] = (CHIEF, MASTER)
# The roles that train (hold a replica of the model): the chief or master, and the workers.
TRAINING_ROLES: Final[tuple[Role, ...]] = (CHIEF, MASTER, WORKER)
# Vertex AI worker pools 0..3, in order; `CLUSTER_SPEC` names them workerpool<i>.
POOL_ORDER: Final[tuple[Role, ...]] = (CHIEF, WORKER, PS, EVALUATOR)
# The order a local cluster starts its tasks: servers the others connect to first.
START_ORDER: Final[tuple[Role, ...]] = (PS, CHIEF, WORKER, EVALUATOR)
# The order it stops them: the chief saves its last checkpoint while the
# parameter servers still serve (evaluators need no one), then the workers,
# then the parameter servers.
STOP_ORDER: Final[tuple[tuple[Role, ...], ...]] = ((CHIEF, MASTER, EVALUATOR), (WORKER,), (PS,))
_VERTEX_POOLS: Final[dict[str, Role]] = {'workerpool%d' % i: role
                                         for i, role in enumerate(POOL_ORDER)}

# A cluster description: role -> that role's tasks as `host:port` strings.
Cluster = dict[Role, list[str]]
# Parsed JSON of a TF_CONFIG-shaped object (its values are checked where read).
JSONObject = Mapping[str, object]
Environ = MutableMapping[str, str]


def is_role(name: object) -> TypeGuard[Role]:
    """True when `name` is one of the roles (`TASK_TYPES`), spelled as TF_CONFIG does."""
    return name in TASK_TYPES

# What a JobSet pod is told (`jobset_tf_config`; tools/cloud/jobset sets them).
JOBSET_NAME_ENV = 'JOBSET_NAME'  # annotation jobset.sigs.k8s.io/jobset-name
JOBSET_REPLICATED_JOB_ENV = 'JOBSET_REPLICATED_JOB'  # jobset.sigs.k8s.io/replicatedjob-name
JOBSET_JOB_INDEX_ENV = 'JOBSET_JOB_INDEX'  # jobset.sigs.k8s.io/job-index
JOB_COMPLETION_INDEX_ENV = 'JOB_COMPLETION_INDEX'  # Kubernetes, in an Indexed Job's pods
JOBSET_SUBDOMAIN_ENV = 'JOBSET_SUBDOMAIN'  # the headless service (default: the JobSet's name)
JOBSET_TASKS_ENV = 'JOBSET_TF_TASKS'  # {"chief": 1, "worker": 2, ...}: pods per role
JOBSET_PORT = 2222  # where each task's server listens (the Kubeflow operator's too)


@dataclasses.dataclass(frozen=True)
class ClusterInfo:
    """The part of a cluster description the trainers act on.

    Attributes:
      cluster: job name -> list of `host:port`, never including `evaluator`;
        when not empty it always has a `chief` or a `master`.
      task_type: this process's role, or None for a single local process.
      task_index: index of this task within its role.
      environment: the `environment` value of TF_CONFIG (e.g. `cloud`).
      num_evaluators: evaluator tasks of the job, where the description says
        (an `evaluator` list, Vertex AI's worker pool 3, or AI Platform's and
        the local launcher's `job.evaluatorCount`); else 0.
    """
    cluster: Cluster
    task_type: Optional[Role] = None
    task_index: int = 0
    environment: Optional[str] = None
    num_evaluators: int = 0

    @property
    def is_distributed(self) -> bool:
        return bool(self.cluster)

    @property
    def chief_type(self) -> Optional[Role]:
        """`chief` or `master` when the cluster has one, else None."""
        for name in CHIEF_ROLES:
            if name in self.cluster:
                return name
        return None

    @property
    def is_chief(self) -> bool:
        """True for the task that writes checkpoints, summaries and exports."""
        if not self.is_distributed:
            return True
        return self.task_type == self.chief_type

    @property
    def is_evaluator(self) -> bool:
        return self.task_type == EVALUATOR

    @property
    def is_ps(self) -> bool:
        return self.task_type == PS

    @property
    def num_workers(self) -> int:
        """Training replicas: the chief/master plus the workers (at least 1)."""
        if not self.is_distributed:
            return 1
        return (len(self.cluster.get(CHIEF, ())) + len(self.cluster.get(MASTER, ()))
                + len(self.cluster.get(WORKER, ())))

    @property
    def num_ps(self) -> int:
        return len(self.cluster.get(PS, ()))

    def addresses(self, job: Role) -> tuple[str, ...]:
        """`host:port` strings of `job` (empty for an unknown job)."""
        return tuple(self.cluster.get(job, ()))

    def input_seed(self, seed: Optional[int]) -> Optional[int]:
        """This task's shuffle seed: workers must not all read the same order."""
        if seed is None or self.is_chief:
            return seed
        return seed + self.task_index + 1

    @property
    def task_label(self) -> str:
        """`worker-1` style name for logs; `local` for a single process."""
        if not self.task_type:
            return 'local'
        return '%s-%d' % (self.task_type, self.task_index)

    def master_as_chief(self) -> 'ClusterInfo':
        """This cluster with its `master` named `chief` (tf.distribute's name)."""
        if MASTER not in self.cluster:
            return self
        task_type = CHIEF if self.task_type == MASTER else self.task_type
        return dataclasses.replace(self, cluster=_master_as_chief(self.cluster),
                                   task_type=task_type)

    def to_tf_config(self) -> Optional[dict[str, object]]:
        """The normalised TF_CONFIG dict that RunConfig understands."""
        if not self.is_distributed:
            return None
        cluster = self.cluster
        if self.is_evaluator and MASTER in cluster:
            cluster = _master_as_chief(cluster)
        config: dict[str, object] = {'cluster': cluster,
                  'task': {'type': self.task_type, 'index': self.task_index}}
        if self.environment:
            config['environment'] = self.environment
        if self.num_evaluators:
            config['job'] = {'evaluatorCount': self.num_evaluators}
        return config


def _master_as_chief(cluster: Cluster) -> Cluster:
    """`cluster` with its `master` job named `chief`."""
    return {(CHIEF if job == MASTER else job): addresses for job, addresses in cluster.items()}


def load_cluster(environ: Optional[Mapping[str, str]] = None) -> ClusterInfo:
    """Parses the process environment into a `ClusterInfo`.

    Raises:
      UserInputError: TF_CONFIG or CLUSTER_SPEC is malformed.
    """
    environ = os.environ if environ is None else environ
    if environ.get('TF_CONFIG', '').strip():
        return parse_tf_config(environ['TF_CONFIG'], source='TF_CONFIG')
    if environ.get('CLUSTER_SPEC', '').strip():
        return parse_vertex_cluster_spec(environ['CLUSTER_SPEC'])
    config = jobset_tf_config(environ)
    if config is not None:
        return _from_tf_config(config, 'the JobSet pod\'s %s' % JOBSET_TASKS_ENV)
    return ClusterInfo(cluster={})


def jobset_tf_config(environ: Mapping[str, str]) -> Optional[dict[str, object]]:
    """The TF_CONFIG dict of a JobSet pod, or None when `environ` is not one's.

    The pod's role is its replicated job's name, its index its index in that
    role's Indexed Job (each role is one Job: job index 0), and every task's
    address its pod's DNS name on the JobSet's headless service. Evaluators
    are listed in `cluster`, as the Kubeflow operator lists them; `ClusterInfo`
    counts them and keeps them out of the training cluster.

    Raises:
      UserInputError: a JobSet pod whose variables do not describe a task.
    """
    jobset = environ.get(JOBSET_NAME_ENV, '').strip()
    if not jobset or not environ.get(JOBSET_TASKS_ENV, '').strip():
        return None
    source = 'the JobSet pod\'s %s' % JOBSET_TASKS_ENV
    tasks: dict[str, int] = {}
    for role, count in user_files.json_object(environ[JOBSET_TASKS_ENV], source).items():
        pods = _integer(count)
        if role not in POOL_ORDER or pods is None or pods < 1:
            raise UserInputError('%s: expected {role: pods} with roles among %s, got %r: %r'
                                 % (source, ', '.join(POOL_ORDER), role, count))
        tasks[role] = pods
    role = environ.get(JOBSET_REPLICATED_JOB_ENV, '')
    if role not in tasks:
        raise UserInputError('%s=%r: a JobSet of TensorFlow tasks names each replicated job '
                             'after its role, one of %s' % (JOBSET_REPLICATED_JOB_ENV, role,
                                                           ', '.join(sorted(tasks))))
    indices: dict[str, int] = {}
    for name in (JOBSET_JOB_INDEX_ENV, JOB_COMPLETION_INDEX_ENV):
        index = _integer(environ.get(name, ''))
        if index is None:
            raise UserInputError('%s=%r: expected the index JobSet and Kubernetes give the '
                                 'pod' % (name, environ.get(name)))
        indices[name] = index
    if indices[JOBSET_JOB_INDEX_ENV] != 0:
        raise UserInputError('%s=%d: each role runs as one Indexed Job of all its pods '
                             '(replicas: 1, parallelism: the pods)'
                             % (JOBSET_JOB_INDEX_ENV, indices[JOBSET_JOB_INDEX_ENV]))
    subdomain = environ.get(JOBSET_SUBDOMAIN_ENV, '').strip() or jobset
    cluster = {name: ['%s-%s-0-%d.%s:%d' % (jobset, name, i, subdomain, JOBSET_PORT)
                      for i in range(count)]
               for name, count in tasks.items()}
    return {'cluster': cluster,
            'task': {'type': role, 'index': indices[JOB_COMPLETION_INDEX_ENV]},
            'environment': 'cloud'}


def parse_tf_config(text: str, source: str = 'TF_CONFIG') -> ClusterInfo:
    """Parses and validates a TF_CONFIG JSON string."""
    return _from_tf_config(user_files.json_object(text, source), source)


def _from_tf_config(config: JSONObject, source: str) -> ClusterInfo:
    cluster = config.get('cluster') or {}
    task = config.get('task') or {}
    if not isinstance(cluster, dict) or not isinstance(task, dict):
        raise UserInputError('%s: "cluster" and "task" must be JSON objects' % source)
    if not cluster:
        _check_trains_alone(task, source)
        return ClusterInfo(cluster={})
    environment = config.get('environment')
    info = _validated(cluster, task, None if environment is None else str(environment), source)
    job = config.get('job')
    if not info.num_evaluators and isinstance(job, dict):
        # AI Platform's TF_CONFIG carries the job's trainingInput, with evaluatorCount.
        count = _integer(job.get('evaluatorCount') or 0)
        if count is None or count < 0:
            raise UserInputError('%s: job.evaluatorCount must be an integer >= 0, got %r'
                                 % (source, job.get('evaluatorCount')))
        info = dataclasses.replace(info, num_evaluators=count)
    return info


# What a task that never trains does, for the refusal of one without a cluster.
_NEVER_TRAINS: Final[dict[str, str]] = {EVALUATOR: 'an evaluator only evaluates the checkpoints a training '
                            'cluster writes',
                 PS: 'a parameter server only serves the variables of a training cluster'}


def _check_trains_alone(task: JSONObject, source: str) -> None:
    """Refuses a task that must never train when no cluster is given.

    With an empty `cluster` the process would train alone and write
    checkpoints into the job-dir, which an evaluator or a parameter server
    must never do.
    """
    task_type = str(task.get('type') or '').lower()
    if task_type in _NEVER_TRAINS:
        raise UserInputError('%s: task.type %r with an empty "cluster": %s and never trains; '
                             'give the cluster, or unset %s to train in one process'
                             % (source, task_type, _NEVER_TRAINS[task_type], source))


def parse_vertex_cluster_spec(text: str) -> ClusterInfo:
    """Maps Vertex AI's `CLUSTER_SPEC` (workerpool0..3) onto TF roles."""
    source = 'CLUSTER_SPEC'
    spec = user_files.json_object(text, source)
    pools = spec.get('cluster') or {}
    task = spec.get('task') or {}
    if not isinstance(pools, dict) or not isinstance(task, dict):
        raise UserInputError('%s: "cluster" and "task" must be JSON objects' % source)
    cluster: dict[str, object] = {}
    for pool, addresses in pools.items():
        if pool not in _VERTEX_POOLS:
            raise UserInputError('%s: unknown worker pool %r (expected one of %s)'
                                 % (source, pool, ', '.join(sorted(_VERTEX_POOLS))))
        cluster[_VERTEX_POOLS[pool]] = addresses
    pool = task.get('type')
    if pool not in _VERTEX_POOLS:
        raise UserInputError('%s: task.type %r is not a worker pool (expected one of %s)'
                             % (source, pool, ', '.join(sorted(_VERTEX_POOLS))))
    task = dict(task, type=_VERTEX_POOLS[pool])
    environment = spec.get('environment')
    return _validated(cluster, task, None if environment is None else str(environment), source)


def export_tf_config(info: ClusterInfo, environ: Optional[Environ] = None) -> None:
    """Writes `info` back to TF_CONFIG so RunConfig sees the normalised form."""
    environ = os.environ if environ is None else environ
    config = info.to_tf_config()
    if config is None:
        environ.pop('TF_CONFIG', None)
    else:
        environ['TF_CONFIG'] = json.dumps(config)


def _validated(described: Mapping[str, object], task: JSONObject,
               environment: Optional[str], source: str) -> ClusterInfo:
    cluster: Cluster = {}
    for name, addresses in described.items():
        job = str(name).lower()
        if not is_role(job):
            raise UserInputError('%s: unknown task type %r in "cluster" (expected %s)'
                                 % (source, job, ', '.join(TASK_TYPES)))
        if (not isinstance(addresses, list) or not addresses
                or not all(isinstance(a, str) and ':' in a for a in addresses)):
            raise UserInputError('%s: cluster.%s must be a non-empty list of '
                                 '"host:port" strings' % (source, job))
        cluster[job] = addresses
    for job, addresses in cluster.items():
        for index, address in enumerate(addresses):
            problem = address_problem(address)
            if problem:
                raise UserInputError('%s: cluster.%s[%d] %r: %s' % (source, job, index,
                                                                     address, problem))
    if CHIEF in cluster and MASTER in cluster:
        raise UserInputError('%s: cluster has both "chief" and "master"; use one' % source)
    for job in CHIEF_ROLES:
        if len(cluster.get(job, ())) > 1:
            raise UserInputError('%s: cluster.%s must have exactly one address' % (source, job))
    _refuse_shared_addresses(cluster, source)
    evaluators = cluster.pop(EVALUATOR, None)

    task_type = str(task.get('type', '')).lower()
    if not is_role(task_type):
        raise UserInputError('%s: unknown task.type %r (expected %s)'
                             % (source, task.get('type'), ', '.join(TASK_TYPES)))
    task_index = _integer(task.get('index', 0))
    if task_index is None:
        raise UserInputError('%s: task.index must be an integer, got %r'
                             % (source, task.get('index')))
    if task_type == EVALUATOR:
        limit = len(evaluators) if evaluators else None
    else:
        if task_type not in cluster:
            raise UserInputError('%s: task.type %r has no entry in "cluster"'
                                 % (source, task_type))
        limit = len(cluster[task_type])
    if task_index < 0 or (limit is not None and task_index >= limit):
        raise UserInputError('%s: task.index %d is out of range for %r (%s tasks)'
                             % (source, task_index, task_type, limit))
    if not any(job in cluster for job in TRAINING_ROLES):
        raise UserInputError('%s: cluster needs a "chief", "master" or "worker" task'
                             % source)
    if CHIEF not in cluster and MASTER not in cluster:
        cluster, task_type, task_index = _promote_first_worker(
            cluster, task_type, task_index)
    if task_type != EVALUATOR and sum(len(a) for a in cluster.values()) == 1:
        cluster = {}  # the only training task: one process (see the module docstring)
    return ClusterInfo(cluster=cluster, task_type=task_type if cluster else None,
                       task_index=task_index if cluster else 0,
                       environment=environment, num_evaluators=len(evaluators or ()))


# A host name: dot-separated labels of letters, digits, '-' and '_' (RFC 1123,
# with the underscores some resolvers take), at most 253 characters.
_HOST_LABEL = re.compile(r'^[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?$')
MAX_PORT = 65535


def address_problem(address: str) -> Optional[str]:
    """Why `address` cannot be a task's `host:port`, or None.

    A port outside 1-65535 or a host no resolver takes is the user's typo:
    waiting `--peer-timeout-secs` for it and then exiting with the retryable
    code (a restart cures nothing) made controllers retry it. A well-formed
    address nobody answers at stays a peer not up yet.
    """
    host, _, port = address.rpartition(':')
    if not port.isascii() or not port.isdigit() or not 0 < int(port) <= MAX_PORT:
        return 'the port must be a number from 1 to %d' % MAX_PORT
    if host.startswith('[') and host.endswith(']'):
        try:
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            return 'not an IPv6 address in brackets'
        return None
    if ':' in host:
        return 'an IPv6 address goes in brackets: [%s]:%s' % (host, port)
    labels = host[:-1].split('.') if host.endswith('.') else host.split('.')
    if len(host) > 253 or not all(_HOST_LABEL.match(label) for label in labels):
        return ('the host must be a name (letters, digits, - and _, dot-separated) or '
                'an IP address')
    if all(label.isdigit() for label in labels):
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            return 'not an IPv4 address (four numbers from 0 to 255)'
    return None


def _refuse_shared_addresses(cluster: Cluster, source: str) -> None:
    """Refuses two tasks of `cluster` at one host:port: the second cannot listen
    there, and its peers would wait for it until --peer-timeout-secs."""
    seen: dict[str, str] = {}
    for job in sorted(cluster):
        for index, address in enumerate(cluster[job]):
            task = '%s-%d' % (job, index)
            if address in seen:
                raise UserInputError(
                    '%s: %s and %s have the same address %s; each task needs a host:port '
                    'of its own' % (source, seen[address], task, address))
            seen[address] = task


def _integer(value: object) -> Optional[int]:
    """An integer written as a JSON number or as digits (`2`, `"2"`, `2.0`), else None.

    `true`, `1.5` and `1e400` (infinity) are no task index: `int()` read the
    first two as 1 and failed on the last with a traceback.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() else None
    if isinstance(value, str) and value.strip().lstrip('+-').isdigit():
        return int(value)
    return None


def _promote_first_worker(cluster: Cluster, task_type: Role,
                          task_index: int) -> tuple[Cluster, Role, int]:
    """Makes worker 0 the `chief` (TFJob without chief: worker 0 leads)."""
    workers = cluster[WORKER]
    cluster = {**cluster, CHIEF: workers[:1]}
    if len(workers) > 1:
        cluster[WORKER] = workers[1:]
    else:
        del cluster[WORKER]
    if task_type == WORKER:
        if task_index == 0:
            return cluster, CHIEF, 0
        return cluster, WORKER, task_index - 1
    return cluster, task_type, task_index
