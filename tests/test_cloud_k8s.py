"""The Kubernetes targets (`--target jobset`, `--target tfjob`): manifests that
validate against their kinds' published schemas (`k8s_schemas`), that JobSet
v0.8 through v0.12 admits (`k8s_controllers`: the vendored CRDs, the
webhook's rules), and that the trainers run in, pod by pod, as JobSet and the
Kubeflow operator set them up."""
import dataclasses
import functools
import io
import json
import os
import re

import pytest
import yaml

import k8s_controllers
import k8s_schemas
from conftest import REPO_ROOT
from estimator_trainers import cluster as cluster_lib
from estimator_trainers import errors
from estimator_trainers import registry
from estimator_trainers import startup
from estimator_trainers.errors import UserInputError
from estimator_trainers.tools.cloud import configs
from estimator_trainers.tools.cloud import jobset
from estimator_trainers.tools.cloud import k8s
from estimator_trainers.tools.cloud import pipeline
from estimator_trainers.tools.cloud import plan as plan_lib
from estimator_trainers.tools.cloud import preflight
from estimator_trainers.tools.cloud import replicas
from estimator_trainers.tools.cloud import tfjob
from estimator_trainers.tools.cloud import train_cloud

IMAGE = 'us-central1-docker.pkg.dev/my-project/trainers/estimator-trainers:gpu'
JOB_NAME = 'train_taxi_20260101_120000'
JOB_DIR = 'gs://b/jobs/' + JOB_NAME
TARGETS = {'jobset': jobset.manifest, 'tfjob': tfjob.manifest}
SHIPPED = sorted(name for name in os.listdir(os.path.join(REPO_ROOT, 'configs'))
                 if name.endswith('.yaml') and name != 'hptuning_config.yaml')
EVALUATOR_CONFIG = {'trainingInput': {
    'scaleTier': 'CUSTOM', 'masterType': 'n1-standard-4', 'workerType': 'n1-standard-4',
    'workerCount': 2, 'parameterServerType': 'n1-highmem-8', 'parameterServerCount': 2,
    'evaluatorType': 'n1-standard-4', 'evaluatorCount': 1,
    'scheduling': {'maxRunningTime': '7200s', 'strategy': 'SPOT'}}}
ODD_LABELS = {'team': '_alice', 'cost-center_': 'ml-', 'owner': 'bob'}
# The long name a user gave (issue 45): 57 characters, refused by JobSet's
# webhook for the worker and evaluator pods when cut to 47.
LONG_NAME = 'taxi_ps_experiment_with_a_rather_long_descriptive_name_01'


def _plan(config, model='taxi', name=JOB_NAME, labels=None):
    if isinstance(config, str):
        config = configs.load_config(os.path.join(REPO_ROOT, 'configs', config))
    else:
        config = configs.parse_config(dict(config, labels=labels or {}), 'cfg.yaml')
    trainer = registry.get(model)
    defaults = ['%s=%s' % item for item in trainer.cloud_data_args('gs://b')]
    return plan_lib.JobPlan(name=name, program=plan_lib.Trainer(trainer), config=config,
                            job_dir=JOB_DIR, args=tuple(defaults + list(config.args)),
                            images={plan_lib.CHIEF: IMAGE})


CASES = {name: (lambda name=name: _plan(name, model='cifar10' if 'gpu' in name else 'taxi'))
         for name in SHIPPED}
CASES.update({
    'long name': lambda: _plan('config_ps.yaml', name='train_' + 'x' * 120),
    'long descriptive name': lambda: _plan(EVALUATOR_CONFIG, name=LONG_NAME),
    'odd labels': lambda: _plan(EVALUATOR_CONFIG, labels=ODD_LABELS),
    'evaluator pool': lambda: _plan(EVALUATOR_CONFIG),
})


def _job(manifest):
    return manifest.documents[0]


def _pod_specs(document):
    """{role: (pods, pod template)} of a TFJob or JobSet."""
    if document['kind'] == 'TFJob':
        return {kind.lower(): (spec['replicas'], spec['template'])
                for kind, spec in document['spec']['tfReplicaSpecs'].items()}
    return {rjob['name']: (rjob['template']['spec']['parallelism'],
                           rjob['template']['spec']['template'])
            for rjob in document['spec']['replicatedJobs']}


@pytest.mark.parametrize('case', sorted(CASES))
@pytest.mark.parametrize('target', sorted(TARGETS))
def test_manifests_validate_against_their_kinds_schemas(target, case):
    """Every shipped config (cmle_config_gpu: GPUs), a long name, odd labels and an
    evaluator pool: the JobSet or TFJob, and the NetworkPolicy beside it."""
    manifest = TARGETS[target](CASES[case]())
    documents = list(yaml.safe_load_all(manifest.text))
    assert [d['kind'] for d in documents] == [
        {'jobset': 'JobSet', 'tfjob': 'TFJob'}[target], 'NetworkPolicy']
    assert k8s_schemas.manifest_errors(documents) == [], k8s_schemas.dumps(documents)


def test_the_schemas_catch_what_the_api_server_would_refuse_or_drop():
    """The checks are live: an unknown field, a wrong type, each kind."""
    for target, misspelt, where in (('tfjob', 'backofLimit', ('spec', 'runPolicy')),
                                    ('jobset', 'maxRestart', ('spec', 'failurePolicy'))):
        job = _job(TARGETS[target](CASES['evaluator pool']()))
        node = job
        for key in where:
            node = node[key]
        node[misspelt] = 3
        assert any(misspelt in error for error in k8s_schemas.manifest_errors([job]))
        pods = _pod_specs(job)['chief'][1]
        pods['spec']['containers'][0]['ports'][0]['containerPort'] = '2222'
        assert any('containerPort' in error for error in k8s_schemas.manifest_errors([job]))
    policy = k8s.network_policy('j', 'x')
    policy['spec']['ingres'] = []
    assert k8s_schemas.manifest_errors([policy])


@pytest.mark.parametrize('case', sorted(CASES))
@pytest.mark.parametrize('version', k8s_controllers.JOBSET_VERSIONS)
def test_every_jobset_is_admitted_by_the_oldest_and_newest_jobset(version, case):
    """Every shipped config, the long names, odd labels and an evaluator pool:
    JobSet v0.8.0's and v0.12.0's CRDs (defaults, schema, CEL rules) and
    webhooks (names with the pod suffix, policies) admit the JobSet as printed."""
    document = next(yaml.safe_load_all(TARGETS['jobset'](CASES[case]()).text))  # as printed
    assert k8s_controllers.admission_errors(document, version) == []


def _jobset(name, spec=(), job=(), **replicated):
    """A small JobSet of one replicated job `rj` (an Indexed Job of one pod), as
    upstream's webhook tests write one, with `spec`, `job` and `replicated` fields."""
    job = dict({'completionMode': 'Indexed', 'completions': 1, 'parallelism': 1,
                'template': {'spec': {'containers': [{'name': 'c', 'image': 'bash'}],
                                      'restartPolicy': 'Never'}}}, **dict(job))
    replicated = dict({'name': 'rj', 'replicas': 1, 'template': {'spec': job}}, **replicated)
    return {'apiVersion': 'jobset.x-k8s.io/v1alpha2', 'kind': 'JobSet',
            'metadata': {'name': name},
            'spec': dict({'replicatedJobs': [replicated]}, **dict(spec))}


@pytest.mark.parametrize('version', k8s_controllers.JOBSET_VERSIONS)
def test_the_admission_checks_refuse_what_jobset_refuses(version):
    """The reproduction is live and where upstream draws its lines: its own
    webhook test cases (a 56-character name with `-rj-0-0` refused for its pods,
    62 characters with 101 replicas for its jobs), the pod suffix's boundary,
    what each CRD requires, refuses, or has a CEL rule for."""
    admit = functools.partial(k8s_controllers.admission_errors, version=version)
    assert admit(_jobset('a' * 50)) == []  # a-...-rj-0-0-abcde: 63 characters
    assert admit(_jobset('a' * 51)) == ['JobSet %s webhook: JobSet name is too long, pod names '
                                        'generated for this JobSet will exceed 63 characters'
                                        % version]
    assert len(admit(_jobset('a' * 56))) == 1
    assert [e.split(': ', 1)[1] for e in admit(_jobset('a' * 62, replicas=101))] == [
        'JobSet name is too long, job names generated for this JobSet will exceed 63 '
        'characters', 'JobSet name is too long, pod names generated for this JobSet will '
        'exceed 63 characters']
    required = admit(_jobset('j', job={'podFailurePolicy': {'rules': [
        {'action': 'Ignore', 'onPodConditions': [{'type': 'DisruptionTarget'}]}]}}))
    if version == 'v0.8.0':  # v0.5-v0.10 require the status Kubernetes defaults
        assert required == ['JobSet v0.8.0/spec/replicatedJobs/0/template/spec/'
                            "podFailurePolicy/rules/0/onPodConditions/0: 'status' is a "
                            'required property']
    else:
        assert required == []
    assert admit(_jobset('j', spec={'failurePolicy': {'maxRestart': 3}})) == [
        "JobSet %s/spec/failurePolicy: Additional properties are not allowed ('maxRestart' "
        'was unexpected)' % version]
    where = {'v0.8.0': '/spec', 'v0.12.0': ' webhook'}[version]  # a CEL rule, then Go
    assert admit(_jobset('j', dependsOn=[{'name': 'rj', 'status': 'Ready'}])) == [
        "JobSet %s%s: DependsOn can't be set for the first ReplicatedJob" % (version, where)]
    in_order = _jobset('j', spec={'startupPolicy': {'startupPolicyOrder': 'InOrder'}})
    rj, = in_order['spec']['replicatedJobs']
    in_order['spec']['replicatedJobs'].append(
        dict(rj, name='rj2', dependsOn=[{'name': 'rj', 'status': 'Ready'}]))
    assert admit(in_order) == ['JobSet %s/spec: StartupPolicy and DependsOn APIs are '
                               'mutually exclusive' % version]
    reasons = _jobset('j', spec={'failurePolicy': {'maxRestarts': 1, 'rules': [
        {'name': 'r', 'action': 'FailJobSet', 'onJobFailureReasons': ['Deadline']}]}})
    assert admit(reasons) == ["JobSet %s webhook: invalid job failure reason 'Deadline' in "
                              'failure policy' % version]


@pytest.mark.parametrize('target', sorted(TARGETS))
def test_a_long_job_name_gives_names_kubernetes_creates(target):
    """Over ~51 characters the operator's Services were never created
    (kubeflow/trainer#1101), and JobSet's webhook refuses a JobSet whose
    longest pod name, the Job controller's `-abcde` included, is over 63:
    every name made of the job's fits, for every role and replica count, and
    the name given is said in one line."""
    plan = _plan(EVALUATOR_CONFIG, name=LONG_NAME)
    manifest = TARGETS[target](plan)
    name = _job(manifest)['metadata']['name']
    assert manifest.notes[0] == (
        'job name %s is %s %s on Kubernetes (cut so that its longest pod name, %s, fits 63 '
        'characters; a hash of the whole name keeps it apart from other job names)' % (
            LONG_NAME, k8s.KINDS[target], name, k8s.longest_pod_name(plan, target, name)))
    other = _job(TARGETS[target](_plan(EVALUATOR_CONFIG, name=LONG_NAME[:-1] + '2')))
    assert other['metadata']['name'] != name
    derived = [name, manifest.documents[1]['metadata']['name']]
    for role, (pods, _) in _pod_specs(_job(manifest)).items():
        derived += [k8s.POD_NAMES[target] % (name, role, index) for index in range(pods)]
    for text in derived:
        assert re.fullmatch(r'[a-z]([-a-z0-9]{0,61}[a-z0-9])?', text), text
    assert max(len(text) for text in derived) == 63
    many = dict(EVALUATOR_CONFIG, trainingInput=dict(EVALUATOR_CONFIG['trainingInput'],
                                                     evaluatorCount=configs.MAX_REPLICAS))
    crowded = _job(TARGETS[target](_plan(many, name=LONG_NAME)))['metadata']['name']
    assert len(k8s.POD_NAMES[target] % (crowded, 'evaluator', configs.MAX_REPLICAS - 1)) == 63
    assert len(crowded) == len(name) - 2
    short = TARGETS[target](_plan(EVALUATOR_CONFIG))
    assert _job(short)['metadata']['name'] == 'train-taxi-20260101-120000'
    assert not any(note.startswith('job name') for note in short.notes)


@pytest.mark.parametrize('target', sorted(TARGETS))
def test_job_names_that_read_the_same_to_kubernetes_stay_apart(target):
    """`Nightly_Run` and `nightly_run_` both read `nightly-run`: two runs of them in
    one namespace would meet (`kubectl apply` of the second keeps or changes the
    first's objects). A name Kubernetes cannot take as written gets a hash of
    itself, with one note; a lower-case one keeps its name."""
    names = {}
    for job_name in ('Nightly_Run', 'nightly_run_', 'nightly_run', 'NIGHTLY_RUN'):
        manifest = TARGETS[target](_plan(EVALUATOR_CONFIG, name=job_name))
        names[job_name] = _job(manifest)['metadata']['name']
        notes = [note for note in manifest.notes if note.startswith('job name')]
        if job_name == 'nightly_run':
            assert names[job_name] == 'nightly-run' and notes == []
        else:
            assert re.fullmatch(r'nightly-run-[0-9a-f]{6}', names[job_name])
            assert notes == ['job name %s is %s %s on Kubernetes (Kubernetes names are lower '
                             'case and end with a letter or digit; a hash of the whole name '
                             'keeps it apart from other job names)'
                             % (job_name, k8s.KINDS[target], names[job_name])]
    assert len(set(names.values())) == len(names)


@pytest.mark.parametrize('target', sorted(TARGETS))
def test_labels_kubernetes_refuses_are_converted_with_a_note_or_refused(target):
    manifest = TARGETS[target](_plan(EVALUATOR_CONFIG, labels=ODD_LABELS))
    assert _job(manifest)['metadata']['labels'] == {
        'team': 'alice', 'cost-center': 'ml', 'owner': 'bob'}
    for _, template in _pod_specs(_job(manifest)).values():
        assert template['metadata']['labels'] == _job(manifest)['metadata']['labels']
    assert manifest.notes[:2] == (
        'label team: _alice became team: alice (Kubernetes labels start and end with a letter '
        'or digit)',
        'label cost-center_: ml- became cost-center: ml (Kubernetes labels start and end '
        'with a letter or digit)')
    with pytest.raises(UserInputError, match=r"^cfg\.yaml: labels\.owner: label value 'ñandú' "
                                             r'is not a Kubernetes label value'):
        TARGETS[target](_plan(EVALUATOR_CONFIG, labels={'owner': 'ñandú'}))
    collide = {'team': 'alpha', 'team_': 'beta'}
    with pytest.raises(UserInputError) as refused:
        TARGETS[target](_plan(EVALUATOR_CONFIG, labels=collide))
    assert (errors.line(refused.value), refused.value.path) == (
        'error: cfg.yaml: labels.team_: label key team_ becomes team on Kubernetes, as '
        'labels.team does, and one would be lost (Kubernetes labels start and end with a '
        'letter or digit); rename one of them for the Kubernetes targets', 'cfg.yaml')


@pytest.mark.parametrize('target', sorted(TARGETS))
def test_every_pod_starts_in_the_environment_its_controller_gives_it(target):
    """The operator's TF_CONFIG (evaluator inside `cluster`) and a JobSet pod's
    variables, read from the manifest itself and filled in as JobSet and
    Kubernetes do, go through the trainers' own cluster and strategy code for
    every pod: none refuses, each is the task its pod is, at its pod's address."""
    plan = _plan(EVALUATOR_CONFIG)
    manifest = TARGETS[target](plan)
    name = _job(manifest)['metadata']['name']
    trainer = plan.declared
    args = preflight.parse_trainer_args(trainer, list(plan.task_args()))
    specs = _pod_specs(_job(manifest))
    assert {role: pods for role, (pods, _) in specs.items()} == {
        'chief': 1, 'worker': 2, 'ps': 2, 'evaluator': 1}
    seen = []
    for role, (pods, template) in specs.items():
        container, = template['spec']['containers']
        assert container['args'] == list(plan.task_args())
        for index in range(pods):
            if target == 'tfjob':
                environ, = [r.env for r in replicas.tfjob(
                    {r: p for r, (p, _) in specs.items()}, name)
                    if (r.role.name, r.index) == (role, index)]
                address = '%s-%s-%d.default.svc:2222' % (name, role, index)
            else:
                annotations = {'jobset.sigs.k8s.io/jobset-name': name,
                               'jobset.sigs.k8s.io/replicatedjob-name': role,
                               'jobset.sigs.k8s.io/job-index': '0'}
                environ = {'JOB_COMPLETION_INDEX': str(index)}  # Kubernetes, Indexed Jobs
                for var in container['env']:
                    field = var.get('valueFrom', {}).get('fieldRef', {}).get('fieldPath')
                    environ[var['name']] = (annotations[re.fullmatch(
                        r"metadata\.annotations\['(.+)'\]", field).group(1)]
                        if field else var['value'])
                address = '%s-%s-0-%d.%s:2222' % (name, role, index, name)
            decided = startup.decide(trainer, args, environ, visible_gpus=0)
            assert (decided.cluster.task_type, decided.cluster.task_index) == (role, index)
            assert decided.cluster.num_evaluators == 1
            if role != 'evaluator':
                assert decided.cluster.addresses(role)[index] == address
                assert decided.distribution.strategy == 'parameter_server'
            seen.append((role, index))
    assert len(seen) == 6
    preflight.check_replicas(plan, target)  # the pipeline's own replay, every pod


def test_a_jobset_pod_that_is_not_a_task_is_one_line():
    environ = {cluster_lib.JOBSET_NAME_ENV: 'j', cluster_lib.JOBSET_REPLICATED_JOB_ENV: 'leader',
               cluster_lib.JOBSET_JOB_INDEX_ENV: '0', cluster_lib.JOB_COMPLETION_INDEX_ENV: '0',
               cluster_lib.JOBSET_TASKS_ENV: '{"chief": 1, "worker": 1}'}
    with pytest.raises(UserInputError, match="JOBSET_REPLICATED_JOB='leader': a JobSet of "
                                             'TensorFlow tasks names each replicated job'):
        cluster_lib.load_cluster(environ)
    assert cluster_lib.load_cluster({cluster_lib.JOBSET_NAME_ENV: 'j'}).cluster == {}


def test_mwms_is_replayed_on_the_kubernetes_targets_too():
    """An all-reduce job: every pod resolves multi_worker_mirrored, the chief's peers
    are the workers' pods."""
    plan = _plan('config_mwms.yaml')
    for target in TARGETS:
        names = replicas.jobset if target == 'jobset' else replicas.tfjob
        for replica in names({'chief': 1, 'worker': 2}, k8s.resource_name(plan, target)):
            args = preflight.parse_trainer_args(plan.declared, list(plan.task_args()))
            decided = startup.decide(plan.declared, args, replica.env, visible_gpus=0)
            assert decided.distribution.strategy == 'multi_worker_mirrored'
            assert len(decided.distribution.peers) == 2


@pytest.mark.parametrize('target', sorted(TARGETS))
def test_restarts_follow_the_exit_code_contract(target):
    """A user's mistake (1-127) fails the job; a signal or a peer not up yet
    (128 and above, `errors.EXIT_RETRYABLE`) restarts it, a bounded number of
    times (JobSet's failure policy replayed; the operator's bound is only 0)."""
    job = _job(TARGETS[target](_plan(EVALUATOR_CONFIG)))
    if target == 'tfjob':
        assert job['spec']['runPolicy'] == {'cleanPodPolicy': 'Running',
                                            'backoffLimit': k8s.RESTARTS,
                                            'activeDeadlineSeconds': 7200}
        assert {spec['restartPolicy'] for spec in job['spec']['tfReplicaSpecs'].values()} == {
            'ExitCode'}  # the operator retries exit codes >= 128 (IsRetryableExitCode)
    else:
        assert job['spec']['failurePolicy']['maxRestarts'] == k8s.RESTARTS
        for rjob in job['spec']['replicatedJobs']:
            spec = rjob['template']['spec']
            assert spec['backoffLimit'] == 0
            assert spec['template']['spec']['restartPolicy'] == 'Never'
            fail, ignore = spec['podFailurePolicy']['rules']
            failing = set(fail['onExitCodes']['values'])
            assert fail['action'] == 'FailJob' and fail['onExitCodes']['operator'] == 'In'
            assert ignore == {'action': 'Ignore', 'onPodConditions': [
                {'type': 'DisruptionTarget', 'status': 'True'}]}
            # a pod exiting 1-127 fails its Job by its pod failure policy...
            assert k8s_controllers.failure_action(job, rjob['name'], 'PodFailurePolicy') == (
                'FailJobSet', jobset.FAIL_RULE)
            # ...one exiting 128 or above by its backoff limit: a restart, while any are left
            for restarts, action in ((0, 'RestartJobSet'), (k8s.RESTARTS - 1, 'RestartJobSet'),
                                     (k8s.RESTARTS, 'ReachedMaxRestarts')):
                assert k8s_controllers.failure_action(
                    job, rjob['name'], 'BackoffLimitExceeded', restarts) == (action, None)
    for code in (errors.EXIT_USAGE, errors.EXIT_FAILED, 127):
        assert not errors.retryable(code) and (target == 'tfjob' or code in failing)
    for code in (errors.EXIT_RETRYABLE, 143, 137, 128):
        assert errors.retryable(code) and (target == 'tfjob' or code not in failing)
    no_retries = dict(EVALUATOR_CONFIG, trainingInput=dict(
        EVALUATOR_CONFIG['trainingInput'], scheduling={'disableRetries': True}))
    manifest = TARGETS[target](_plan(no_retries))
    assert (_job(manifest)['spec']['runPolicy']['backoffLimit'] if target == 'tfjob' else
            _job(manifest)['spec']['failurePolicy']['maxRestarts']) == 0
    assert tfjob.RESTARTS_NOTE not in manifest.notes  # nothing restarts: nothing to bound
    unbounded = TARGETS[target](_plan('config_ps.yaml')).notes
    assert (tfjob.RESTARTS_NOTE in unbounded) == (target == 'tfjob')


@pytest.mark.parametrize('target', sorted(TARGETS))
def test_a_job_past_max_running_time_fails_instead_of_restarting(target):
    """`maxRunningTime: 7200s`: JobSet fails a Job past it with `DeadlineExceeded`,
    which restarted the JobSet (its default action, up to `maxRestarts` times, each
    with a new deadline) until a rule failed the JobSet on it. The operator checks
    a TFJob's deadline only when woken up (kubeflow/trainer#3358): the pods' own
    deadline wakes it, a worker restarted at 5000 s included, at 7200 s."""
    job = _job(TARGETS[target](_plan(EVALUATOR_CONFIG)))
    if target == 'jobset':
        assert job['spec']['failurePolicy']['rules'][1] == {
            'name': jobset.DEADLINE_RULE, 'action': 'FailJobSet',
            'onJobFailureReasons': ['DeadlineExceeded']}
        for rjob in job['spec']['replicatedJobs']:
            assert rjob['template']['spec']['activeDeadlineSeconds'] == 7200
            assert k8s_controllers.failure_action(job, rjob['name'], 'DeadlineExceeded') == (
                'FailJobSet', jobset.DEADLINE_RULE)
        del job['spec']['failurePolicy']['rules'][1]
        assert k8s_controllers.failure_action(job, 'chief', 'DeadlineExceeded') == (
            'RestartJobSet', None)
    else:
        starts = {'ps': [0, 0], 'chief': [0], 'worker': [0, 5000], 'evaluator': [0]}
        assert k8s_controllers.tfjob_deadline_end(job, starts) == 7200
        for spec in job['spec']['tfReplicaSpecs'].values():
            assert spec['template']['spec']['activeDeadlineSeconds'] == 7200
            del spec['template']['spec']['activeDeadlineSeconds']
        assert k8s_controllers.tfjob_deadline_end(job, starts) is None  # runs on
    unlimited = dict(EVALUATOR_CONFIG, trainingInput=dict(
        EVALUATOR_CONFIG['trainingInput'], scheduling={}))
    assert 'activeDeadlineSeconds' not in json.dumps(_job(TARGETS[target](_plan(unlimited))))
    assert jobset.DEADLINE_RULE not in json.dumps(_job(TARGETS[target](_plan(unlimited))))


@pytest.mark.parametrize('target', sorted(TARGETS))
def test_machines_become_requests_and_gpus_node_selectors(target):
    job = _job(TARGETS[target](_plan('cmle_config_gpu.yaml', model='cifar10')))
    specs = _pod_specs(job)
    chief = specs['chief'][1]['spec']
    resources = chief['containers'][0]['resources']
    # n1-standard-16: 16 vCPUs, 60 GiB, less GKE's reservations and the system pods
    assert resources == {'requests': {'cpu': '15390m', 'memory': '54950Mi'},
                         'limits': {'memory': '54950Mi', 'nvidia.com/gpu': 4}}
    assert chief['nodeSelector'] == {'cloud.google.com/gke-accelerator': 'nvidia-tesla-t4'}
    ps = specs['ps'][1]['spec']  # n1-highmem-8, no GPU
    assert ps['containers'][0]['resources']['requests'] == {'cpu': '7410m',
                                                            'memory': '47249Mi'}
    assert 'nodeSelector' not in ps
    spot = _pod_specs(_job(TARGETS[target](_plan(EVALUATOR_CONFIG))))
    assert spot['worker'][1]['spec']['nodeSelector'] == {'cloud.google.com/gke-spot': 'true'}


def test_the_evaluator_finishes_its_last_evaluation():
    """TFJob: the operator deletes the running evaluator once the chief succeeds
    (kubeflow/trainer#1658); its preStop hook holds SIGTERM off for up to
    EVALUATOR_GRACE_SECS while it evaluates the final checkpoint and ends by itself.
    JobSet: the job succeeds only once the chief and the evaluator have."""
    job = _job(tfjob.manifest(_plan(EVALUATOR_CONFIG)))
    evaluator = job['spec']['tfReplicaSpecs']['Evaluator']['template']['spec']
    assert evaluator['terminationGracePeriodSeconds'] == k8s.EVALUATOR_GRACE_SECS + 30
    assert evaluator['containers'][0]['lifecycle'] == {'preStop': {'exec': {'command': [
        'python', '-c', 'import time; time.sleep(%d)' % k8s.EVALUATOR_GRACE_SECS]}}}
    for kind in ('Chief', 'Worker', 'PS'):
        assert 'lifecycle' not in job['spec']['tfReplicaSpecs'][kind]['template']['spec'][
            'containers'][0]
    job = _job(jobset.manifest(_plan(EVALUATOR_CONFIG)))
    assert job['spec']['successPolicy'] == {'operator': 'All',
                                            'targetReplicatedJobs': ['chief', 'evaluator']}
    assert [(r['name'], r.get('dependsOn')) for r in job['spec']['replicatedJobs']] == [
        ('ps', None), ('chief', [{'name': 'ps', 'status': 'Ready'}]),
        ('worker', [{'name': 'chief', 'status': 'Ready'}]),
        ('evaluator', [{'name': 'worker', 'status': 'Ready'}])]


@pytest.mark.parametrize('target,pod_label', [('jobset', 'jobset.sigs.k8s.io/jobset-name'),
                                              ('tfjob', 'training.kubeflow.org/job-name')])
def test_only_the_jobs_own_pods_reach_port_2222(target, pod_label):
    manifest = TARGETS[target](_plan('config_ps.yaml'))
    name = _job(manifest)['metadata']['name']
    pods = {'matchLabels': {pod_label: name}}
    assert manifest.documents[1]['spec'] == {
        'podSelector': pods, 'policyTypes': ['Ingress'],
        'ingress': [{'from': [{'podSelector': pods}],
                     'ports': [{'protocol': 'TCP', 'port': 2222}]}]}


def test_settings_kubernetes_does_not_apply_are_named_in_one_note():
    config = {'trainingInput': {
        'scaleTier': 'CUSTOM', 'masterType': 'n1-standard-4',
        'masterConfig': {'diskConfig': {'bootDiskSizeGb': 200}}, 'region': 'europe-west4',
        'serviceAccount': 'trainer@my-project.iam.gserviceaccount.com',
        'network': 'projects/123/global/networks/vpc',
        'scheduling': {'restartJobOnWorkerRestart': True}}}
    note, restarts = tfjob.manifest(_plan(config)).notes
    assert restarts == tfjob.RESTARTS_NOTE
    assert note == (
        '--target tfjob does not apply scheduling.restartJobOnWorkerRestart (the operator '
        'restarts only the failed pod; --target jobset restarts all); '
        'trainingInput.serviceAccount (pods run as their namespace\'s Kubernetes service '
        'account: bind it to trainer@my-project.iam.gserviceaccount.com with Workload '
        'Identity); trainingInput.network (pods are on the cluster\'s network); diskConfig '
        '(boot disks are the node pool\'s); trainingInput.region (the cluster\'s and the '
        'image\'s)')
    assert jobset.manifest(_plan(config)).notes[0].startswith(
        '--target jobset does not apply trainingInput.serviceAccount')
    assert tfjob.manifest(_plan(EVALUATOR_CONFIG)).notes == ()


@pytest.mark.parametrize('target', sorted(TARGETS))
def test_manifest_needs_an_image_and_no_tuning(target):
    plan = _plan('config_ps.yaml')
    with pytest.raises(UserInputError, match='^--target %s needs --image-uri' % target):
        TARGETS[target](dataclasses.replace(plan, images={}, staging='gs://b/staging'))
    with pytest.raises(UserInputError, match='hyperparameter tuning runs on Vertex AI only'):
        TARGETS[target](_plan('hptuning_config.yaml', model='cifar10'))


def test_the_cli_prints_the_jobset_and_its_notes(tmp_path):
    """train-cloud.sh submit --target jobset: the manifest on stdout, the notes on stderr,
    nothing uploaded (no credentials asked for)."""
    config = tmp_path / 'cfg.yaml'
    config.write_text(yaml.safe_dump(dict(EVALUATOR_CONFIG, labels={'team': '_alice'})))
    out, err = io.StringIO(), io.StringIO()
    assert train_cloud.main(['submit', 'taxi', '--config', str(config), '--target', 'jobset',
                             '--image-uri', IMAGE, '--job-name', JOB_NAME, '--bucket', 'gs://my-bucket'],
                            out=out, err=err, environ={}) == 0
    documents = list(yaml.safe_load_all(out.getvalue()))
    assert [d['kind'] for d in documents] == ['JobSet', 'NetworkPolicy']
    assert k8s_schemas.manifest_errors(documents) == []
    assert 'note: label team: _alice became team: alice' in err.getvalue()
    assert train_cloud.TARGETS == ('vertex', 'jobset', 'tfjob')
    assert set(pipeline.MANIFESTS) == {'jobset', 'tfjob'}
    env = {var['name']: var.get('value') for var in
           documents[0]['spec']['replicatedJobs'][0]['template']['spec']['template']['spec'][
               'containers'][0]['env']}
    assert json.loads(env[cluster_lib.JOBSET_TASKS_ENV]) == {
        'chief': 1, 'worker': 2, 'ps': 2, 'evaluator': 1}
