"""Every name a role goes by in the cloud tools, in one table.

A training job's roles (`cluster.POOL_ORDER`: chief, worker, ps, evaluator)
are named differently by each system they pass through; this table is the
only place those names are written:

| role | Vertex pool | replica (Vertex, AI Platform) | trainingInput fields | gcloud flags | Kubernetes |
|---|---|---|---|---|---|
| chief | 0 | `workerpool0-<i>`, `master-replica-<i>` | `masterType`, `masterConfig` | `--master-*` | `Chief` |
| worker | 1 | `workerpool1-<i>`, `worker-replica-<i>` | `workerType`, `workerCount`, `workerConfig` | `--worker-*` | `Worker` |
| ps | 2 | `workerpool2-<i>`, `ps-replica-<i>` | `parameterServerType`, ... | `--parameter-server-*` | `PS` |
| evaluator | 3 | `workerpool3-<i>`, `evaluator-replica-<i>` | `evaluatorType`, ... | none | `Evaluator` |

AI Platform named the chief `master` (in TF_CONFIG too, for runtimes before
2.1 and custom containers); `cluster.MASTER` is that name.
"""
import dataclasses
import re
from typing import Dict, Final, Literal, Optional, Tuple, cast

from estimator_trainers import cluster

# A role's name: one of `cluster.POOL_ORDER` (`NAMES`; a test holds the two alike).
RoleName = Literal['chief', 'worker', 'ps', 'evaluator']
CHIEF: Final[RoleName] = cluster.CHIEF
WORKER: Final[RoleName] = cluster.WORKER
PS: Final[RoleName] = cluster.PS
EVALUATOR: Final[RoleName] = cluster.EVALUATOR
# What TF_CONFIG calls pool 0: `chief` (Vertex AI), or `master` as AI Platform did.
Primary = Literal['chief', 'master']
MASTER: Final[Primary] = cluster.MASTER
VERTEX_PRIMARY: Final[Primary] = cluster.CHIEF
NAMES: Final = cast(Tuple[RoleName, ...], tuple(cluster.POOL_ORDER))


@dataclasses.dataclass(frozen=True)
class Role:
    """One role of a training job, under each of its names.

    Attributes:
      name: the TF_CONFIG task type Vertex AI gives it (`cluster.POOL_ORDER`).
      pool: its index in a CustomJob's `workerPoolSpecs`.
      legacy: AI Platform's name of its replicas (`master` for the chief).
      type_field, count_field, config_field: its `trainingInput` fields (the
        chief has no count: one replica).
      flag_prefix: gcloud's `--<prefix>-machine-type` etc., or None.
      kubernetes: its TFJob replica type (`tfReplicaSpecs` key).
    """
    name: RoleName
    pool: int
    legacy: str
    type_field: str
    count_field: Optional[str]
    config_field: str
    flag_prefix: Optional[str]
    kubernetes: str

    @property
    def workerpool(self) -> str:
        """`workerpool<N>`: Vertex AI's `CLUSTER_SPEC` key and replica prefix."""
        return 'workerpool%d' % self.pool

    def replica(self, index: int) -> str:
        """Vertex AI's name of replica `index` (Cloud Logging's `task_name`)."""
        return '%s-%d' % (self.workerpool, index)

    def label(self, index: int) -> str:
        """This project's name of replica `index` in logs: `chief-0`, `worker-1`."""
        return '%s-%d' % (self.name, index)


_FIELDS: Dict[RoleName, Tuple[str, str, Optional[str], str, Optional[str], str]] = {
    CHIEF: (MASTER, 'masterType', None, 'masterConfig', 'master', 'Chief'),
    WORKER: (WORKER, 'workerType', 'workerCount', 'workerConfig', 'worker', 'Worker'),
    PS: (PS, 'parameterServerType', 'parameterServerCount', 'parameterServerConfig',
         'parameter-server', 'PS'),
    EVALUATOR: (EVALUATOR, 'evaluatorType', 'evaluatorCount', 'evaluatorConfig', None,
                'Evaluator'),
}
ROLES: Final = tuple(Role(name, pool, *_FIELDS[name]) for pool, name in enumerate(NAMES))
_BY_NAME: Dict[str, Role] = {role.name: role for role in ROLES}
_BY_NAME[MASTER] = _BY_NAME[CHIEF]
_REPLICA_RE = re.compile(r'(?P<role>[a-z]+)-replica-(?P<index>\d+)|workerpool(?P<pool>\d)-'
                         r'(?P<pool_index>\d+)')


def role(name: str) -> Role:
    """The `Role` called `name` (`master` is the chief).

    Raises:
      KeyError: no role is called `name`.
    """
    return _BY_NAME[name]


def by_pool(pool: int) -> Role:
    """The `Role` of Vertex AI's worker pool `pool`."""
    return ROLES[pool]


def parse_replica(text: Optional[str]) -> Optional[Tuple[Role, int]]:
    """`(Role, index)` of a replica name (`workerpool1-0`, `master-replica-0`), else None."""
    match = _REPLICA_RE.fullmatch(text or '')
    if not match:
        return None
    if match.group('pool') is not None:
        pool = int(match.group('pool'))
        return (ROLES[pool], int(match.group('pool_index'))) if pool < len(ROLES) else None
    found = _BY_NAME.get(match.group('role'))
    return (found, int(match.group('index'))) if found else None
