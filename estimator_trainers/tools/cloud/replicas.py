"""The environment Vertex AI gives each replica of a job, built on this machine.

Used twice, so that what is checked is what is rehearsed: the start-up
checks before anything is uploaded (`preflight.check_replicas`) decide each
replica's start-up in this environment, and a rehearsal (`rehearsal`) starts
each replica's process in it.

What Vertex AI sets (reference-facts.md, "TF_CONFIG shapes"):

- `TF_CONFIG`: `{"cluster": {"chief": [...], "worker": [...], "ps": [...]},
  "task": {"type", "index", "trial"?}, "environment": "cloud"}`, evaluators
  outside `cluster`;
- `CLUSTER_SPEC`: the same by pool (`workerpool0..3`);
- with `baseOutputDirectory`: `AIP_MODEL_DIR`, `AIP_CHECKPOINT_DIR`,
  `AIP_TENSORBOARD_LOG_DIR` (a tuning trial's under `<base>/<trial id>`), and
  `CLOUD_ML_TRIAL_ID` for a trial.

A package that this project's image runs (`bootstrap`) with AI Platform's
`master` naming (`JobPlan.primary`) sees TF_CONFIG as `with_primary` renames it.
"""
import dataclasses
import json
from typing import Dict, Mapping, Optional, Sequence, Tuple

from estimator_trainers.tools.cloud import roles

PORT = 2222


@dataclasses.dataclass(frozen=True)
class Replica:
    """One replica of a job and the variables Vertex AI sets for it.

    Attributes:
      role: its `roles.Role`.
      index: its index within the pool.
      env: TF_CONFIG, CLUSTER_SPEC, AIP_* (and CLOUD_ML_TRIAL_ID in a trial).
    """
    role: roles.Role
    index: int
    env: Mapping[str, str]

    @property
    def label(self) -> str:
        return self.role.label(self.index)


def vertex_addresses(counts: Mapping[str, int]) -> Dict[str, Tuple[str, ...]]:
    """Host names like Vertex AI's (`workerpool1-0:2222`) for `{role: replicas}`."""
    return {name: tuple('%s:%d' % (roles.role(name).replica(i), PORT) for i in range(count))
            for name, count in counts.items()}


def vertex(counts: Mapping[str, int], base_output_dir: Optional[str] = None,
           addresses: Optional[Mapping[str, Sequence[str]]] = None,
           trial: Optional[str] = None) -> Tuple[Replica, ...]:
    """Every replica of a job with `{role: replicas}`, in pool order.

    Args:
      base_output_dir: `baseOutputDirectory.outputUriPrefix`, or None.
      addresses: `{role: [host:port]}` (default: `vertex_addresses`).
      trial: the trial id of a tuning job's trial, or None.
    """
    addresses = addresses or vertex_addresses(counts)
    cluster = {role.name: list(addresses[role.name]) for role in roles.ROLES
               if role.name != roles.EVALUATOR and counts.get(role.name)}
    cluster_spec = {role.workerpool: list(addresses[role.name]) for role in roles.ROLES
                    if counts.get(role.name)}
    base = base_output_dir.rstrip('/') if base_output_dir else None
    if base and trial:
        base = '%s/%s' % (base, trial)
    output_dirs = {'AIP_MODEL_DIR': base + '/model',
                   'AIP_CHECKPOINT_DIR': base + '/checkpoints',
                   'AIP_TENSORBOARD_LOG_DIR': base + '/logs'} if base else {}
    replicas = []
    for role in roles.ROLES:
        for index in range(counts.get(role.name, 0)):
            task = {'type': role.name, 'index': index}
            if trial:
                task['trial'] = trial
            env = dict(output_dirs)
            env['TF_CONFIG'] = json.dumps({'cluster': cluster, 'task': task,
                                           'environment': 'cloud'})
            env['CLUSTER_SPEC'] = json.dumps({'cluster': cluster_spec, 'environment': 'cloud',
                                              'task': dict(task, type=role.workerpool)})
            if trial:
                env['CLOUD_ML_TRIAL_ID'] = trial
            replicas.append(Replica(role, index, env))
    return tuple(replicas)


def with_primary(tf_config: Optional[str], primary: str) -> Optional[str]:
    """TF_CONFIG with pool 0 named `primary` (unchanged for `chief`, and for
    evaluators, which TensorFlow refuses beside a `master`)."""
    if primary == roles.CHIEF or not tf_config:
        return tf_config
    config = json.loads(tf_config)
    task = config.get('task') or {}
    cluster = config.get('cluster') or {}
    if roles.CHIEF not in cluster or task.get('type') == roles.EVALUATOR:
        return tf_config
    cluster[roles.MASTER] = cluster.pop(roles.CHIEF)
    if task.get('type') == roles.CHIEF:
        task['type'] = roles.MASTER
    return json.dumps(config)
