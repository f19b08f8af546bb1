"""What the Kubernetes targets (`tfjob`, `jobset`) share, decided once.

- Names: the controllers name each task's pod (and Service) after the job:
  the operator `<job>-<role>-<i>`, JobSet `<jobset>-<role>-0-<i>` plus the
  Job controller's random `-abcde`; a name over 63 characters is never
  created (kubeflow/trainer#1101), and JobSet's webhook refuses the JobSet
  whose longest pod name would be. `resource_name` makes the job's name a
  DNS-1035 label short enough for the longest pod name of the plan's roles
  and replica counts (`longest_pod_name`).
- One job name, one Kubernetes name: a job's objects are found by name in
  their namespace, so two job names that read the same to Kubernetes
  (`Nightly_Run`, `nightly_run_`: both `nightly-run`) would meet there
  (`kubectl apply` of the second changes or keeps the first instead of
  starting a run). A name Kubernetes cannot take as written (upper case, a
  trailing `_`) or that is cut ends with a hash of the whole name, with one
  note (`name_note`); a lower-case name only has its `_` made `-`, which no
  other lower-case job name (`[a-z][a-z0-9_]*`) turns into.
- Labels: Vertex AI's label syntax allows what Kubernetes refuses (`_alice`,
  international letters); `labels` converts what it can, with a note, and
  refuses the rest, and two keys that would become one (`team`, `team_`).
- Sizes: each pool's machine type becomes the pod's CPU and memory requests
  (and a memory limit: an over-grown task is ended as it would be on the
  machine, not its neighbours), the machine's vCPUs and memory less what GKE
  keeps on such a node for itself and its system pods, so one task fits on
  one node of that machine type; GPUs become `nvidia.com/gpu` limits and a
  GKE node selector for the GPU type; `strategy: SPOT` a GKE Spot node
  selector.
- Restarts: the exit-code contract of `errors` (codes from 128 up, a
  preempted or lost peer, are retried; a user's mistake is not), at most
  `RESTARTS` times (none with `disableRetries`; the TFJob operator holds only
  the none: `tfjob`); no restart past `maxRunningTime`.
- The network: TensorFlow's gRPC servers are unauthenticated, so a
  NetworkPolicy lets only the job's own pods reach their port.
- `not_applied`: one note naming every config setting Kubernetes does not do.
"""
import dataclasses
import hashlib
import math
import re
from typing import Any, Dict, List, Literal, Optional, Sequence, Tuple

import yaml

from estimator_trainers import errors
from estimator_trainers.errors import UserInputError
from estimator_trainers.tools.cloud import configs
from estimator_trainers.tools.cloud import machines
from estimator_trainers.tools.cloud import replicas
from estimator_trainers.tools.cloud.configs import Pool
from estimator_trainers.tools.cloud.plan import JobPlan

Target = Literal['jobset', 'tfjob']
Object = Dict[str, Any]  # a Kubernetes object or a part of one, as YAML writes it

PORT = replicas.PORT
CONTAINER = 'tensorflow'  # the container name the Kubeflow operator looks for
MAX_NAME_CHARS = 63  # a DNS-1035 label's, every name a pod or Service is given
# What the Job controller adds to the name of each pod of an Indexed Job
# (`<job>-<index>-` + 5 random characters); JobSet's webhook counts it as
# `-abcde` (pkg/webhooks/jobset_webhook.go).
JOB_POD_SUFFIX = '-abcde'
# The longest name each target's controllers make of the job's, for pod `i`
# of a role: JobSet's `<jobset>-<replicatedJob>-<jobIndex>-<podIndex>` (one
# job per replicated job: index 0) and the Job controller's suffix; the
# operator's `<job>-<role>-<i>`, its pods' and Services' names.
POD_NAMES: Dict[Target, str] = {'jobset': '%s-%s-0-%d' + JOB_POD_SUFFIX, 'tfjob': '%s-%s-%d'}
KINDS: Dict[Target, str] = {'jobset': 'JobSet', 'tfjob': 'TFJob'}
HASH_CHARS = 6
# Restarts of a failing job before it fails for good (Kubernetes Jobs default
# to 6; each restart resumes from the last checkpoint).
RESTARTS = 3
# What the evaluator of a TFJob gets to finish its last evaluation once the
# chief has succeeded and the operator deletes the pods still running.
EVALUATOR_GRACE_SECS = 600
GPU_RESOURCE = 'nvidia.com/gpu'
GKE_ACCELERATOR_LABEL = 'cloud.google.com/gke-accelerator'
GKE_SPOT_LABEL = 'cloud.google.com/gke-spot'
# Kept on a node for its system pods (kube-proxy, logging, metrics, CSI
# drivers), beyond GKE's own reservations (`_allocatable`).
SYSTEM_PODS_CPU = 0.5
SYSTEM_PODS_GIB = 1.0
_DNS1035_RE = re.compile(r'[a-z]([-a-z0-9]*[a-z0-9])?')
# A job name (`plan.JOB_NAME_RE`) Kubernetes takes as written, but for `_`.
_AS_WRITTEN_RE = re.compile(r'[a-z]([a-z0-9_]*[a-z0-9])?')
_LABEL_RE = re.compile(r'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')
MAX_LABEL_CHARS = 63


@dataclasses.dataclass(frozen=True)
class Manifest:
    """What a Kubernetes target renders: its objects, and what to tell the user first."""
    documents: Tuple[Object, ...]
    notes: Tuple[str, ...] = ()

    @property
    def text(self) -> str:
        """The objects as one YAML stream, ready for `kubectl apply -f -`."""
        return yaml.dump_all(self.documents, Dumper=_Dumper, sort_keys=False)


class _Dumper(yaml.SafeDumper):
    """Writes every object out (no YAML aliases), a list of numbers on one line
    (the exit codes of a pod failure policy)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


_Dumper.add_representer(list, lambda dumper, items: dumper.represent_sequence(
    'tag:yaml.org,2002:seq', items, flow_style=bool(items) and all(
        isinstance(item, int) for item in items)))


def longest_pod_name(plan: JobPlan, target: Target, name: str) -> str:
    """The longest pod name `target`'s controllers make of `name` for the
    plan's roles and replica counts (the last pod of the longest role)."""
    return max((POD_NAMES[target] % (name, pool.role.kubernetes.lower(),
                                     pool.replica_count - 1)
                for pool in plan.config.pools), key=len)


def _name(plan: JobPlan, target: Target) -> Tuple[str, List[str]]:
    """`(name, why)`: the Kubernetes name of the plan's job, and why it is more
    than the job's name with `_` made `-` (nothing when it is not)."""
    name = re.sub(r'[^a-z0-9-]', '-', plan.name.lower()).strip('-')
    if not name or not name[0].isalpha():
        name = 'job-' + name
    room = MAX_NAME_CHARS - len(longest_pod_name(plan, target, ''))
    why = []
    if not _AS_WRITTEN_RE.fullmatch(plan.name):
        why.append('Kubernetes names are lower case and end with a letter or digit')
    cut = len(name) > room
    if why or cut:
        digest = hashlib.sha256(plan.name.encode('utf-8')).hexdigest()[:HASH_CHARS]
        name = '%s-%s' % (name[:room - HASH_CHARS - 1].rstrip('-'), digest)
    longest = longest_pod_name(plan, target, name)
    if cut:
        why.append('cut so that its longest pod name, %s, fits %d characters'
                   % (longest, MAX_NAME_CHARS))
    assert _DNS1035_RE.fullmatch(longest) and len(longest) <= MAX_NAME_CHARS, longest
    return name, why


def resource_name(plan: JobPlan, target: Target) -> str:
    """The name of the plan's TFJob or JobSet: a DNS-1035 label short enough
    for its longest pod name (`longest_pod_name`), ended with a hash of the
    job's name when it is cut or Kubernetes cannot take it as written."""
    return _name(plan, target)[0]


def name_note(plan: JobPlan, target: Target) -> Optional[str]:
    """One line saying the Kubernetes name when it is more than the job's
    name with `_` made `-`, or None."""
    name, why = _name(plan, target)
    if not why:
        return None
    return ('job name %s is %s %s on Kubernetes (%s; a hash of the whole name keeps it apart '
            'from other job names)' % (plan.name, KINDS[target], name, '; '.join(why)))


def check_plan(plan: JobPlan, target: Target) -> None:
    """Refuses a plan a cluster cannot run from the manifest alone.

    Raises:
      UserInputError: a pool without an image (`--image-uri`), or a tuning
        config (Vertex AI only).
    """
    if any(plan.image_for(pool.role.name) is None for pool in plan.config.pools):
        raise UserInputError('--target %s needs --image-uri (a container built from '
                             'Dockerfile and pushed where the cluster can pull it)' % target,
                             flag='--image-uri')
    if plan.config.is_tuning:
        raise UserInputError('%s: hyperparameter tuning runs on Vertex AI only; drop '
                             '--target %s' % (plan.config.source, target), flag='--target')


def labels(plan: JobPlan) -> Tuple[Dict[str, str], Tuple[str, ...]]:
    """`(labels, notes)`: the config's labels as Kubernetes takes them.

    A key or value that starts or ends with `_` or `-` (Vertex AI allows it,
    Kubernetes does not) loses those characters, with a note.

    Raises:
      UserInputError: a label Kubernetes cannot take even so (international
        letters, 64 characters), or two keys that would become one (`team`,
        `team_`): keeping either value would lose the other silently, and
        renaming one would break the selectors written for it.
    """
    converted: Dict[str, str] = {}
    notes = []
    for key, value in plan.config.labels.items():
        new = []
        for what, text in (('key', key), ('value', value)):
            fixed = text.strip('_-')
            if (fixed or what == 'value') and len(fixed) <= MAX_LABEL_CHARS and (
                    not fixed or _LABEL_RE.fullmatch(fixed)):
                new.append(fixed)
                continue
            raise UserInputError(
                '%s: labels.%s: label %s %r is not a Kubernetes label %s (at most %d '
                'letters, digits, -, _ or . of ASCII, starting and ending with a letter or '
                'digit); rename it for the Kubernetes targets'
                % (plan.config.source, key, what, text, what, MAX_LABEL_CHARS),
                path=plan.config.source)
        if new[0] in converted:
            first = next(k for k in plan.config.labels if k.strip('_-') == new[0])
            raise UserInputError(
                '%s: labels.%s: label key %s becomes %s on Kubernetes, as labels.%s does, and '
                'one would be lost (Kubernetes labels start and end with a letter or digit); '
                'rename one of them for the Kubernetes targets'
                % (plan.config.source, key, key, new[0], first),
                path=plan.config.source)
        if new != [key, value]:
            notes.append('label %s: %s became %s: %s (Kubernetes labels start and end with '
                         'a letter or digit)' % (key, value, new[0], new[1]))
        converted[new[0]] = new[1]
    return converted, tuple(notes)


def _allocatable(vcpus: float, gib: float) -> Tuple[float, float]:
    """`(CPUs, GiB)` a GKE node of this size leaves to pods (GKE's node
    allocatable page: CPU 6% of the first core, 1% of the second, 0.5% of the
    next two, 0.25% of the rest; memory 25% of the first 4 GiB, 20% of the
    next 4, 10% of the next 8, 6% of the next 112, 2% of the rest, and 100 MiB
    for eviction)."""
    cpu = sum(rate * max(0.0, min(vcpus, high) - low) for low, high, rate in (
        (0, 1, .06), (1, 2, .01), (2, 4, .005), (4, math.inf, .0025)))
    memory = sum(rate * max(0.0, min(gib, high) - low) for low, high, rate in (
        (0, 4, .25), (4, 8, .2), (8, 16, .1), (16, 128, .06), (128, math.inf, .02)))
    return vcpus - cpu, gib - memory - 100 / 1024


def resources(pool: Pool) -> Object:
    """A pool's container `resources`: CPU and memory requests (memory limit
    alike) that fit one node of its machine type, and its GPUs."""
    cpus, gib = _allocatable(*machines.shape(pool.machine_type))
    memory = '%dMi' % int((gib - SYSTEM_PODS_GIB) * 1024)
    limits: Dict[str, Any] = {'memory': memory}
    spec = {'requests': {'cpu': '%dm' % (int((cpus - SYSTEM_PODS_CPU) * 100) * 10),
                         'memory': memory},
            'limits': limits}
    if pool.accelerator_count:
        limits[GPU_RESOURCE] = pool.accelerator_count
    return spec


def node_selector(plan: JobPlan, pool: Pool) -> Optional[Dict[str, str]]:
    """GKE's node labels for a pool's GPU type and for Spot VMs, or None."""
    selector = {}
    if pool.accelerator_type:
        selector[GKE_ACCELERATOR_LABEL] = machines.GKE_ACCELERATORS[pool.accelerator_type]
    if plan.config.scheduling.strategy == configs.SPOT:
        selector[GKE_SPOT_LABEL] = 'true'
    return selector or None


def container(plan: JobPlan, pool: Pool, port_name: str,
              env: Optional[List[Object]] = None) -> Object:
    """The one container of a pool's pods: what `plan.launch` runs, its size and port."""
    launch = plan.launch(pool.role.name)
    spec: Object = {'name': CONTAINER, 'image': launch.image}
    if launch.command:
        spec['command'] = list(launch.command)
    spec['args'] = list(launch.args)
    if env:
        spec['env'] = env
    spec['ports'] = [{'name': port_name, 'containerPort': PORT}]
    spec['resources'] = resources(pool)
    return spec


def pod_template(plan: JobPlan, pool: Pool, container_spec: Object,
                 pod_labels: Dict[str, str], **pod_fields: Any) -> Object:
    """A pool's PodTemplateSpec: its container, node selector and labels."""
    spec: Object = {'containers': [container_spec]}
    selector = node_selector(plan, pool)
    if selector:
        spec['nodeSelector'] = selector
    spec.update(pod_fields)
    template: Object = {'metadata': {'labels': dict(pod_labels)}} if pod_labels else {}
    template['spec'] = spec
    return template


def restarts(plan: JobPlan) -> int:
    """How often a failing job is restarted: `RESTARTS`, none with `disableRetries`."""
    return 0 if plan.config.scheduling.disable_retries else RESTARTS


def deadline_secs(plan: JobPlan) -> Optional[int]:
    """`maxRunningTime` in whole seconds (`activeDeadlineSeconds`), or None."""
    timeout = plan.config.scheduling.timeout_secs
    return math.ceil(timeout) if timeout is not None else None


def non_retryable_exit_codes() -> List[int]:
    """The exit codes a restart would not cure (`errors.retryable`)."""
    return [code for code in range(1, errors.FIRST_RETRYABLE) if not errors.retryable(code)]


def network_policy(name: str, pod_label: str) -> Object:
    """A NetworkPolicy that lets only the job's own pods (`pod_label`: the label
    its controller puts on them, valued `name`) reach their TensorFlow port."""
    pods = {'matchLabels': {pod_label: name}}
    return {
        'apiVersion': 'networking.k8s.io/v1',
        'kind': 'NetworkPolicy',
        'metadata': {'name': '%s-tf-port' % name},
        'spec': {'podSelector': pods, 'policyTypes': ['Ingress'],
                 'ingress': [{'from': [{'podSelector': pods}],
                              'ports': [{'protocol': 'TCP', 'port': PORT}]}]},
    }


def not_applied(plan: JobPlan, target: Target,
                also: Sequence[Tuple[str, str]] = ()) -> Optional[str]:
    """One note naming every setting of the plan `target` does not apply, or None.

    Args:
      also: `(setting, why)` pairs the target adds.
    """
    config = plan.config
    found = list(also)
    if config.scheduling.max_wait_duration or config.scheduling.strategy == configs.FLEX_START:
        found.append(('scheduling.strategy FLEX_START and maxWaitTime',
                      'queueing is the cluster\'s (Kueue, GKE\'s Dynamic Workload Scheduler)'))
    if plan.config.service_account:
        found.append(('trainingInput.serviceAccount', 'pods run as their namespace\'s '
                      'Kubernetes service account: bind it to %s with Workload Identity'
                      % plan.config.service_account))
    if plan.config.network:
        found.append(('trainingInput.network', 'pods are on the cluster\'s network'))
    if any(pool.boot_disk for pool in plan.config.pools):
        found.append(('diskConfig', 'boot disks are the node pool\'s'))
    for field, value in (('region', config.region), ('runtimeVersion', config.runtime_version),
                         ('pythonVersion', config.python_version)):
        if value is not None:
            found.append(('trainingInput.%s' % field, 'the cluster\'s and the image\'s'))
    if plan.tensorboard_name:
        found.append(('tensorboard', 'Vertex AI only: point TensorBoard at the job-dir'))
    if plan.enable_web_access or plan.kms_key:
        found.append(('web access and KMS keys', 'Vertex AI only'))
    if not found:
        return None
    return '--target %s does not apply %s' % (target, '; '.join(
        '%s (%s)' % item for item in found))
