"""What the Kubernetes controllers decide about a manifest, reproduced from
their Go sources for the tests (no cluster runs here):

- JobSet's admission of a JobSet on create, v0.8.0 and v0.12.0
  (`JOBSET_VERSIONS`; the vendored CRDs of `tests/k8s_crds`): the CRD's
  defaults, the mutating webhook's `Default`, the CRD's schema and CEL rules
  (`k8s_schemas.crd_errors`), then the validating webhook's `ValidateCreate`
  (`pkg/webhooks/jobset_webhook.go` of each tag), `admission_errors`.
- JobSet's failure policy (`pkg/controllers/failure_policy.go`,
  `executeFailurePolicy`): what a failed child Job makes of the JobSet,
  `failure_action`.
- The Kubeflow training operator v1.9.4's end of a TFJob past its deadline
  (`pkg/controller.v1/common/job.go`, `ReconcileJobs`; `pkg/core/job.go`):
  `tfjob_deadline_end`.
"""
import copy
import re

import k8s_schemas

JOBSET_VERSIONS = ('v0.8.0', 'v0.12.0')
MAX_INT32 = 2 ** 31 - 1
# `validation.IsDNS1035Label` (k8s.io/apimachinery): what every name the
# webhook builds must be.
_DNS1035_RE = re.compile(r'[a-z]([-a-z0-9]*[a-z0-9])?')
DNS1035_MAX_CHARS = 63
# The Job controller's random pod-name suffix, as the webhook counts it.
POD_SUFFIX = '-abcde'
# `ruleNameFmt`, `validOnJobFailureReasons` (the same in both tags).
_RULE_NAME_RE = re.compile(r'[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?')
JOB_FAILURE_REASONS = ('BackoffLimitExceeded', 'DeadlineExceeded', 'FailedIndexes',
                       'MaxFailedIndexesExceeded', 'PodFailurePolicy')
# Actions that need v0.12's alpha `RestartJob` feature gate (off by default).
_RESTART_JOB_ACTIONS = ('RestartJob', 'RestartJobAndIgnoreMaxRestarts')


def _dns1035_errors(text, too_long):
    """`IsDNS1035Label`'s findings, its length message replaced by the webhook's."""
    errors = []
    if len(text) > DNS1035_MAX_CHARS:
        errors.append(too_long)
    if not _DNS1035_RE.fullmatch(text):
        errors.append('%r: a DNS-1035 label must consist of lower case alphanumeric '
                      "characters or '-', start with a letter and end with an "
                      'alphanumeric character' % text)
    return errors


def webhook_default(jobset):
    """`jobSetWebhook.Default` (both tags): success policy All, start-up in any
    order, Indexed jobs, pods restarting on failure, DNS hostnames and
    not-ready addresses published, failure-policy rules named by index."""
    jobset = copy.deepcopy(jobset)
    spec = jobset['spec']
    spec.setdefault('successPolicy', {'operator': 'All'})
    spec.setdefault('startupPolicy', {'startupPolicyOrder': 'AnyOrder'})
    for replicated in spec.get('replicatedJobs', []):
        job = replicated['template'].setdefault('spec', {})
        job.setdefault('completionMode', 'Indexed')
        pod = job.setdefault('template', {}).setdefault('spec', {})
        if not pod.get('restartPolicy'):
            pod['restartPolicy'] = 'OnFailure'
    network = spec.setdefault('network', {})
    network.setdefault('enableDNSHostnames', True)
    network.setdefault('publishNotReadyAddresses', True)
    for i, rule in enumerate(spec.get('failurePolicy', {}).get('rules', [])):
        if not rule.get('name'):
            rule['name'] = 'failurePolicyRule%d' % i
    return jobset


def webhook_errors(jobset, version):
    """`jobSetWebhook.ValidateCreate` of JobSet `version` (a defaulted JobSet)."""
    modern = version != 'v0.8.0'  # v0.12.0's additions, each marked below
    name = jobset['metadata']['name']
    spec = jobset['spec']
    replicated_jobs = spec.get('replicatedJobs', [])
    errors = []
    if modern and replicated_jobs and 'dependsOn' in replicated_jobs[0]:
        errors.append("DependsOn can't be set for the first ReplicatedJob")
    subdomain = spec.get('network', {}).get('subdomain')
    if subdomain:
        errors += _dns1035_errors(subdomain, '.spec.network.subdomain is too long')
    if 'managedBy' in spec:
        errors.append('spec.managedBy: not reproduced here')
    if 'coordinator' in spec:
        errors.append('spec.coordinator: not reproduced here')
    names = []
    for replicated in replicated_jobs:
        job = replicated['template']['spec']
        names.append(replicated['name'])
        replicas = replicated.get('replicas', 1)
        if job.get('parallelism', 1) * replicas > MAX_INT32:
            errors.append('%s: replicas x parallelism over %d' % (replicated['name'],
                                                                  MAX_INT32))
        if modern:
            errors += _dns1035_errors(replicated['groupName'],
                                      '.spec.replicatedJob[].groupName is too long')
        errors += _dns1035_errors('%s-%s-%d' % (name, replicated['name'], replicas - 1),
                                  'JobSet name is too long, job names generated for this '
                                  'JobSet will exceed 63 characters')
        if job.get('completionMode') == 'Indexed' and 'completions' in job:
            errors += _dns1035_errors(
                longest_pod_name(name, replicated['name'], replicas, job['completions']),
                'JobSet name is too long, pod names generated for this JobSet will exceed '
                '63 characters')
        depends_on = replicated.get('dependsOn', [])
        for dependency in depends_on if modern else depends_on[:1]:
            if dependency['name'] not in names:
                errors.append('replicatedJob: %s cannot depend on replicatedJob: %s'
                              % (replicated['name'], dependency['name']))
    for target in spec['successPolicy'].get('targetReplicatedJobs', []):
        if target not in names:
            errors.append("invalid replicatedJob name '%s' does not appear in "
                          '.spec.ReplicatedJobs' % target)
    rules = spec.get('failurePolicy', {}).get('rules', [])
    if modern and any(rule['action'] in _RESTART_JOB_ACTIONS for rule in rules):
        errors.append('RestartJob actions need the RestartJob feature gate')
    for rule in rules:
        if not 1 <= len(rule['name']) <= 128 or not _RULE_NAME_RE.fullmatch(rule['name']):
            errors.append("invalid failure policy rule name '%s'" % rule['name'])
        errors += ["invalid replicatedJob name '%s' in failure policy" % target
                   for target in rule.get('targetReplicatedJobs', []) if target not in names]
        errors += ["invalid job failure reason '%s' in failure policy" % reason
                   for reason in rule.get('onJobFailureReasons', [])
                   if reason not in JOB_FAILURE_REASONS]
    rule_names = [rule['name'] for rule in rules]
    errors += ['rule names are not unique: %s' % rule_name for rule_name in set(rule_names)
               if rule_names.count(rule_name) > 1]
    return errors


def longest_pod_name(jobset_name, replicated_job, replicas, completions):
    """`placement.GenPodName` of the last job's last pod, and the suffix."""
    return '%s-%s-%d-%d%s' % (jobset_name, replicated_job, replicas - 1, completions - 1,
                              POD_SUFFIX)


def admission_errors(jobset, version):
    """Everything JobSet `version` and the API server refuse of `jobset` on
    create, in their order: the CRD's defaults, the webhook's defaults, the
    CRD's schema and CEL rules, the webhook's validation."""
    defaulted = webhook_default(k8s_schemas.crd_defaulted(
        jobset, k8s_schemas.jobset_crd_schema(version)))
    errors = k8s_schemas.crd_errors(defaulted, version)
    if errors:  # the API server stops here; the webhook would not be called
        return errors
    return ['JobSet %s webhook: %s' % (version, error)
            for error in webhook_errors(defaulted, version)]


def failure_action(jobset, replicated_job, reason, restarts=0):
    """What JobSet does when a Job of `replicated_job` fails with `reason`
    (`executeFailurePolicy`): the first rule matching the reason and the
    replicated job acts; none matching, `RestartJobSet`, which fails the
    JobSet instead once `restarts` reached `maxRestarts`.

    Returns:
      `(action, rule name or None)`: `FailJobSet`, `RestartJobSet`, or
      `ReachedMaxRestarts` (a restart refused).
    """
    policy = jobset['spec'].get('failurePolicy')
    assert not any('onJobFailureMessagePatterns' in rule  # v0.12's, not reproduced
                   for rule in (policy or {}).get('rules', []))
    if policy is None:
        return 'FailJobSet', None
    for rule in policy.get('rules', []):
        reasons = rule.get('onJobFailureReasons') or [reason]
        targets = rule.get('targetReplicatedJobs') or [replicated_job]
        if reason in reasons and replicated_job in targets:
            action, matched = rule['action'], rule['name']
            break
    else:
        action, matched = 'RestartJobSet', None
    if action == 'RestartJobSet' and restarts >= policy.get('maxRestarts', 0):
        return 'ReachedMaxRestarts', matched
    return action, matched


def tfjob_deadline_end(tfjob, pod_starts):
    """When the operator (v1.9.4) fails a TFJob past `runPolicy.activeDeadlineSeconds`.

    It checks the deadline (`PastActiveDeadline`: now less the TFJob's start
    time, set once at its first reconcile, 0 here) only when it reconciles
    the TFJob, on an event of the TFJob or of its pods: the requeue it asks
    for at the deadline goes to a `FakeWorkQueue` that drops it
    (kubeflow/trainer#3358). In a run going quietly, the one later event is
    a pod failed by its own `activeDeadlineSeconds` (the kubelet's), at its
    start + that deadline; the TFJob's own is past by then (no pod starts
    before the TFJob), so the TFJob fails and its pods are deleted.

    Args:
      pod_starts: {role: [when each of its pods started, seconds after the
        TFJob]}: a pod restarted at 5000 s started at 5000.

    Returns:
      The seconds after its start at which the TFJob fails, or None: it runs
      on past its deadline until something else happens.
    """
    if tfjob['spec']['runPolicy'].get('activeDeadlineSeconds') is None:
        return None
    events = [start + spec['template']['spec']['activeDeadlineSeconds']
              for kind, spec in tfjob['spec']['tfReplicaSpecs'].items()
              if 'activeDeadlineSeconds' in spec['template']['spec']
              for start in pod_starts.get(kind.lower(), ())]
    return min(events, default=None)
