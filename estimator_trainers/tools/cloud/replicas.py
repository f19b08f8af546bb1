"""The environment each replica of a job gets, built on this machine, per target.

`vertex`: what Vertex AI gives each replica; `tfjob`: what the Kubeflow
training operator gives each pod of a TFJob; `jobset`: what each pod of this
project's JobSet sees (`jobset_env`, the variables its manifest sets, as
JobSet and Kubernetes fill them in). Used so that what is checked is what
runs: the start-up checks before anything is uploaded or printed
(`preflight.check_replicas`) decide each replica's start-up in its target's
environment, and a rehearsal (`rehearsal`) starts each replica's process in
Vertex AI's.

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
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from estimator_trainers import cluster as cluster_lib
from estimator_trainers.tools.cloud import roles

PORT = cluster_lib.JOBSET_PORT
# The JobSet annotations the manifest passes to its pods (`jobset_env`).
JOBSET_ANNOTATIONS = {
    cluster_lib.JOBSET_NAME_ENV: 'jobset.sigs.k8s.io/jobset-name',
    cluster_lib.JOBSET_REPLICATED_JOB_ENV: 'jobset.sigs.k8s.io/replicatedjob-name',
    cluster_lib.JOBSET_JOB_INDEX_ENV: 'jobset.sigs.k8s.io/job-index',
}


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
            task: Dict[str, Any] = {'type': role.name, 'index': index}
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


def package_env(environ: Mapping[str, str], primary: str) -> Dict[str, str]:
    """The environment `bootstrap` runs a user's package in: TF_CONFIG derived
    in a JobSet pod (`cluster.jobset_tf_config`), pool 0 named `primary`."""
    env = dict(environ)
    if not env.get('TF_CONFIG', '').strip():
        derived = cluster_lib.jobset_tf_config(env)
        env['TF_CONFIG'] = json.dumps(derived) if derived else ''
    env['TF_CONFIG'] = with_primary(env['TF_CONFIG'], primary) or ''
    if not env['TF_CONFIG']:
        env.pop('TF_CONFIG')
    return env


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


def tfjob(counts: Mapping[str, int], job: str, namespace: str = 'default') -> Tuple[Replica, ...]:
    """Every pod of a TFJob named `job` with `{role: replicas}`, as the Kubeflow
    training operator (v1.9) sets them up.

    Its `TF_CONFIG` (`genTFConfigJSONStr`): lowercase replica types as keys,
    the evaluator inside `cluster`, each task at its Service
    `<job>-<role>-<i>.<namespace>.svc:2222`, `"environment": "cloud"`.
    """
    cluster = {role.name: ['%s-%s-%d.%s.svc:%d' % (job, role.name, i, namespace, PORT)
                           for i in range(counts[role.name])]
               for role in roles.ROLES if counts.get(role.name)}
    return tuple(Replica(role, index, {'TF_CONFIG': json.dumps(
        {'cluster': cluster, 'task': {'type': role.name, 'index': index},
         'environment': 'cloud'})})
                 for role in roles.ROLES for index in range(counts.get(role.name, 0)))


def jobset_env(counts: Mapping[str, int]) -> List[Dict[str, Any]]:
    """The `env` of every container of this project's JobSet (Kubernetes EnvVars).

    JobSet's own annotations of each pod through the downward API, and the
    pods of each role; Kubernetes adds `JOB_COMPLETION_INDEX` to the pods of
    an Indexed Job itself. `cluster.jobset_tf_config` makes TF_CONFIG of them.
    """
    env = [{'name': name, 'valueFrom': {'fieldRef': {
        'fieldPath': "metadata.annotations['%s']" % annotation}}}
           for name, annotation in JOBSET_ANNOTATIONS.items()]
    env.append({'name': cluster_lib.JOBSET_TASKS_ENV, 'value': json.dumps(
        {role.name: counts[role.name] for role in roles.ROLES if counts.get(role.name)})})
    return env


def jobset(counts: Mapping[str, int], name: str) -> Tuple[Replica, ...]:
    """Every pod of this project's JobSet named `name`, with the variables of
    `jobset_env` as JobSet (v0.12) and Kubernetes fill them in: replicated
    job `<role>` of one Indexed Job (job index 0), pod index = task index."""
    replicas = []
    for role in roles.ROLES:
        for index in range(counts.get(role.name, 0)):
            annotations = {'jobset.sigs.k8s.io/jobset-name': name,
                           'jobset.sigs.k8s.io/replicatedjob-name': role.name,
                           'jobset.sigs.k8s.io/job-index': '0'}
            env = {}
            for var in jobset_env(counts):
                if 'value' in var:
                    env[var['name']] = var['value']
                else:
                    path = var['valueFrom']['fieldRef']['fieldPath']
                    env[var['name']] = annotations[path[len("metadata.annotations['"):-2]]
            env[cluster_lib.JOB_COMPLETION_INDEX_ENV] = str(index)
            replicas.append(Replica(role, index, env))
    return tuple(replicas)
