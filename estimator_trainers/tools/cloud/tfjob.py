"""Kubeflow `TFJob` manifest (kubeflow.org/v1, training operator v1.9).

The operator starts one pod per replica, each behind a Service
`<job>-<role>-<i>`, and sets `TF_CONFIG` with lowercase `chief`/`worker`/
`ps`/`evaluator` keys on port 2222, the evaluator inside `cluster`
(`replicas.tfjob`; `cluster` keeps it out of the training cluster). Pods run
the image (Dockerfile) with what `plan.launch` says; `k8s` decides their
names, sizes, GPUs and labels.

What the manifest asks of the operator:

- `restartPolicy: ExitCode` on every replica: the operator restarts a pod
  that exited 128 or above (a signal: preemption, out of memory; or
  `errors.EXIT_RETRYABLE`: a peer not up yet or lost) and fails the job on
  1-127 (a user's mistake, a diverged loss). `runPolicy.backoffLimit` is
  `k8s.restarts`, but v1.9.4 enforces only 0 (`disableRetries`) on such
  pods: it counts container restarts of running pods and its work queue's
  requeues, and it recreates the pod instead, on a queue that counts none
  (kubeflow/trainer#2045); without `maxRunningTime` a manifest says so in
  one note (`RESTARTS_NOTE`).
- `maxRunningTime` is `runPolicy.activeDeadlineSeconds`, which the operator
  (`PastActiveDeadline`) counts from the TFJob's start time, set once:
  restarted pods do not reset it, and a TFJob past it fails for good
  (deleting its pods). It checks it only when something happens to the job
  or its pods (its requeue at the deadline is dropped: kubeflow/trainer#3358),
  so each pod has the same `activeDeadlineSeconds`: the kubelet ends a pod
  at its deadline, never before the TFJob's, and the operator, woken up,
  fails the TFJob instead of restarting the pod.
- The job succeeds when the chief does, and `cleanPodPolicy: Running`
  deletes the pods still running (parameter servers never end on their own).
  An evaluator may still be evaluating the last checkpoint then
  (kubeflow/trainer#1658): its pod waits up to `k8s.EVALUATOR_GRACE_SECS` in
  a `preStop` hook before it is sent SIGTERM, and ends sooner by itself as
  soon as it has evaluated the final checkpoint.
- A NetworkPolicy lets only the job's own pods reach port 2222.

The operator is in maintenance (kubeflow/trainer release-1.9, v1.9.4 of
2026-08-18) and Kueue no longer runs TFJobs by default: `jobset` is the
maintained target (docs/distributed.md).
"""
from typing import Tuple

from estimator_trainers.tools.cloud import k8s
from estimator_trainers.tools.cloud import roles
from estimator_trainers.tools.cloud.plan import JobPlan

TARGET: k8s.Target = 'tfjob'
RESTARTS_NOTE = ('--target tfjob: the training operator (v1.9.4) does not count the restarts '
                 'of pods that exit 128 or above (a signal, a lost peer) against '
                 'runPolicy.backoffLimit (kubeflow/trainer#2045): a pod killed again and again '
                 'is restarted for as long as the job runs; set scheduling.maxRunningTime to '
                 'bound it, or use --target jobset')
JOB_NAME_LABEL = 'training.kubeflow.org/job-name'  # the operator's label on every pod
PORT_NAME = 'tfjob-port'  # the port name the operator looks for


def manifest(plan: JobPlan) -> k8s.Manifest:
    """The TFJob and its NetworkPolicy of `plan` (`k8s.Manifest`).

    Raises:
      UserInputError: a pool without an image (`--image-uri`), a tuning
        config (use Vertex AI), a label Kubernetes refuses.
    """
    k8s.check_plan(plan, TARGET)
    name = k8s.resource_name(plan, TARGET)
    labels, notes = k8s.labels(plan)
    deadline = k8s.deadline_secs(plan)
    replica_specs: k8s.Object = {}
    for pool in plan.config.pools:
        container = k8s.container(plan, pool, PORT_NAME)
        pod: k8s.Object = {'activeDeadlineSeconds': deadline} if deadline else {}
        if pool.role.name == roles.EVALUATOR:
            container['lifecycle'] = {'preStop': {'exec': {'command': [
                'python', '-c', 'import time; time.sleep(%d)' % k8s.EVALUATOR_GRACE_SECS]}}}
            pod['terminationGracePeriodSeconds'] = k8s.EVALUATOR_GRACE_SECS + 30
        replica_specs[pool.role.kubernetes] = {
            'replicas': pool.replica_count,
            'restartPolicy': 'ExitCode',
            'template': k8s.pod_template(plan, pool, container, labels, **pod),
        }
    run_policy: k8s.Object = {'cleanPodPolicy': 'Running', 'backoffLimit': k8s.restarts(plan)}
    if deadline:
        run_policy['activeDeadlineSeconds'] = deadline
    metadata: k8s.Object = {'name': name}
    if labels:
        metadata['labels'] = labels
    job = {'apiVersion': 'kubeflow.org/v1', 'kind': 'TFJob', 'metadata': metadata,
           'spec': {'runPolicy': run_policy, 'tfReplicaSpecs': replica_specs}}
    also: Tuple[Tuple[str, str], ...] = ()
    if plan.config.scheduling.restart_job_on_worker_restart:
        also = (('scheduling.restartJobOnWorkerRestart',
                 'the operator restarts only the failed pod; --target jobset restarts all'),)
    said = (k8s.name_note(plan, TARGET),) + notes + (k8s.not_applied(plan, TARGET, also),)
    if k8s.restarts(plan) and not deadline:
        said += (RESTARTS_NOTE,)
    return k8s.Manifest((job, k8s.network_policy(name, JOB_NAME_LABEL)),
                        tuple(note for note in said if note))
