"""Kubernetes `JobSet` manifest (jobset.x-k8s.io/v1alpha2), accepted by
kubernetes-sigs/jobset v0.8 through v0.12 (`SUPPORTED`).

JobSet is the maintained Kubernetes API for a job of several replicated
roles (Kueue runs it; Kubeflow Trainer v2 builds on it), with nothing
TensorFlow-specific: the pods derive their TF_CONFIG themselves
(`cluster.jobset_tf_config`, from the variables of `replicas.jobset_env`).

- One replicated job per role (`cluster.START_ORDER`: ps, chief, worker,
  evaluator), named after it, each one Indexed Job of all the role's pods:
  pod `<i>` of role `<role>` is task `<i>` at
  `<name>-<role>-0-<i>.<name>:2222` (the JobSet's headless service). The
  name is short enough for JobSet's webhook (`k8s.resource_name`).
- In-order start-up: each replicated job starts once the one before is ready
  (`dependsOn`), parameter servers first.
- Success when the chief and the evaluators have finished (`successPolicy`);
  JobSet then deletes the parameter servers, never an evaluator still
  evaluating the last checkpoint.
- Failure by the exit-code contract of `errors`: a pod that exits 1-127 (a
  user's mistake, a diverged loss) fails its Job by its `podFailurePolicy`,
  which fails the JobSet (`failurePolicy` rule); a retryable exit (a signal,
  `errors.EXIT_RETRYABLE`) fails its Job (`backoffLimit: 0`), and JobSet
  restarts every Job, at most `k8s.restarts` times; each restart resumes
  from the last checkpoint. A pod evicted or preempted (`DisruptionTarget`)
  is recreated without counting.
- `maxRunningTime` is each Job's `activeDeadlineSeconds`: a Job past it
  fails with `DeadlineExceeded`, which fails the JobSet (`DEADLINE_RULE`);
  without that rule JobSet's default action would restart it, with a new
  deadline, up to `maxRestarts` times. A restart for another reason starts
  Jobs with a deadline of their own: JobSet has no deadline over restarts.
- What JobSet before v0.11 requires is stated (`status: "True"` of a pod
  condition, which Kubernetes defaults when absent).
- The same requests, GPUs, labels and NetworkPolicy as `tfjob` (`k8s`).
"""
from typing import Dict, List, Optional

from estimator_trainers import cluster as cluster_lib
from estimator_trainers.errors import UserInputError
from estimator_trainers.tools.cloud import k8s
from estimator_trainers.tools.cloud import plan as plan_lib
from estimator_trainers.tools.cloud import replicas
from estimator_trainers.tools.cloud import roles
from estimator_trainers.tools.cloud.configs import Pool

TARGET: k8s.Target = 'jobset'
# The JobSet releases whose CRD and webhook the manifests are tested against
# (tests/k8s_crds); the ones between share their rules.
SUPPORTED = ('v0.8.0', 'v0.12.0')
JOBSET_NAME_LABEL = 'jobset.sigs.k8s.io/jobset-name'  # JobSet's label on every pod
PORT_NAME = 'tf-server'
# JobSet's failure policy rule names: ^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$.
FAIL_RULE = 'failOnExitCodesNotWorthARestart'
DEADLINE_RULE = 'failPastMaxRunningTime'


def manifest(plan: plan_lib.JobPlan) -> k8s.Manifest:
    """The JobSet and its NetworkPolicy of `plan` (`k8s.Manifest`).

    Raises:
      UserInputError: a pool without an image, a tuning config, a user's own
        container (its entrypoint would look for a TF_CONFIG JobSet does not
        set), a label Kubernetes refuses.
    """
    k8s.check_plan(plan, TARGET)
    if not plan.program.derives_tf_config():
        raise UserInputError('--target jobset runs this project\'s image: a container\'s own '
                             'entrypoint would look for the TF_CONFIG that JobSet does not set '
                             '(this project\'s trainers and bootstrap derive it); use --target '
                             'tfjob', flag='--target')
    name = k8s.resource_name(plan, TARGET)
    labels, notes = k8s.labels(plan)
    pools = {pool.role.name: pool for pool in plan.config.pools}
    deadline = k8s.deadline_secs(plan)
    env = replicas.jobset_env({role: pool.replica_count for role, pool in pools.items()})
    replicated_jobs: List[k8s.Object] = []
    for role in cluster_lib.START_ORDER:
        if role not in pools:
            continue
        job_spec = _job_spec(plan, pools[role], env, labels, deadline)
        replicated: k8s.Object = {'name': role, 'replicas': 1}
        if replicated_jobs:
            replicated['dependsOn'] = [{'name': replicated_jobs[-1]['name'], 'status': 'Ready'}]
        replicated['template'] = {'spec': job_spec}
        replicated_jobs.append(replicated)
    metadata: k8s.Object = {'name': name}
    if labels:
        metadata['labels'] = labels
    jobset = {
        'apiVersion': 'jobset.x-k8s.io/v1alpha2', 'kind': 'JobSet', 'metadata': metadata,
        'spec': {
            'network': {'enableDNSHostnames': True, 'publishNotReadyAddresses': True},
            'successPolicy': {'operator': 'All', 'targetReplicatedJobs': [
                role for role in (roles.CHIEF, roles.EVALUATOR) if role in pools]},
            'failurePolicy': {'maxRestarts': k8s.restarts(plan),
                              'rules': _failure_rules(deadline)},
            'replicatedJobs': replicated_jobs,
        },
    }
    said = (k8s.name_note(plan, TARGET),) + notes + (k8s.not_applied(plan, TARGET),)
    return k8s.Manifest((jobset, k8s.network_policy(name, JOBSET_NAME_LABEL)),
                        tuple(note for note in said if note))


def _job_spec(plan: plan_lib.JobPlan, pool: Pool, env: List[k8s.Object],
              labels: Dict[str, str], deadline: Optional[int]) -> k8s.Object:
    """The Indexed Job of one role: its pods all at once, none retried by the Job
    (the JobSet restarts as a whole), a non-retryable exit failing it."""
    job_spec: k8s.Object = {
        'parallelism': pool.replica_count,
        'completions': pool.replica_count,
        'completionMode': 'Indexed',
        'backoffLimit': 0,
        'podFailurePolicy': {'rules': [
            {'action': 'FailJob', 'onExitCodes': {
                'containerName': k8s.CONTAINER, 'operator': 'In',
                'values': k8s.non_retryable_exit_codes()}},
            {'action': 'Ignore', 'onPodConditions': [
                {'type': 'DisruptionTarget', 'status': 'True'}]}]},
        'template': k8s.pod_template(plan, pool, k8s.container(plan, pool, PORT_NAME, env),
                                     labels, restartPolicy='Never'),
    }
    if deadline:
        job_spec['activeDeadlineSeconds'] = deadline
    return job_spec


def _failure_rules(deadline: Optional[int]) -> List[k8s.Object]:
    """The JobSet fails on a Job's pod failure policy, and on its deadline."""
    rules: List[k8s.Object] = [{'name': FAIL_RULE, 'action': 'FailJobSet',
                                'onJobFailureReasons': ['PodFailurePolicy']}]
    if deadline:
        rules.append({'name': DEADLINE_RULE, 'action': 'FailJobSet',
                      'onJobFailureReasons': ['DeadlineExceeded']})
    return rules
