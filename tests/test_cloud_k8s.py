"""The Kubernetes targets (`--target jobset`, `--target tfjob`): manifests that
validate against their kinds' published schemas (`k8s_schemas`) and that the
trainers run in, pod by pod, as JobSet and the Kubeflow operator set them up."""
import dataclasses
import io
import json
import os
import re

import pytest
import yaml

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


@pytest.mark.parametrize('target', sorted(TARGETS))
def test_a_long_job_name_gives_names_kubernetes_creates(target):
    """Over ~51 characters the operator's Services were never created
    (kubeflow/trainer#1101): every name made of the job's fits a DNS label."""
    long_name = 'train_taxi_' + 'a' * 117
    manifest = TARGETS[target](_plan(EVALUATOR_CONFIG, name=long_name))
    name = _job(manifest)['metadata']['name']
    other = _job(TARGETS[target](_plan(EVALUATOR_CONFIG, name=long_name[:-1] + 'b')))
    assert other['metadata']['name'] != name
    assert len(name) <= k8s.MAX_NAME_CHARS
    derived = [name, manifest.documents[1]['metadata']['name']]
    for role, (pods, _) in _pod_specs(_job(manifest)).items():
        for index in range(max(pods, configs.MAX_REPLICAS)):
            derived.append('%s-%s-%d' % (name, role, index) if target == 'tfjob' else
                           '%s-%s-0-%d' % (name, role, index))
    for text in derived:
        assert re.fullmatch(r'[a-z]([-a-z0-9]{0,61}[a-z0-9])?', text), text
    assert k8s.resource_name(JOB_NAME) == 'train-taxi-20260101-120000'


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
    with pytest.raises(UserInputError, match=r"labels\.owner: label value 'ñandú' is not a "
                                             r'Kubernetes label value'):
        TARGETS[target](_plan(EVALUATOR_CONFIG, labels={'owner': 'ñandú'}))


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
        for replica in names({'chief': 1, 'worker': 2}, k8s.resource_name(plan.name)):
            args = preflight.parse_trainer_args(plan.declared, list(plan.task_args()))
            decided = startup.decide(plan.declared, args, replica.env, visible_gpus=0)
            assert decided.distribution.strategy == 'multi_worker_mirrored'
            assert len(decided.distribution.peers) == 2


@pytest.mark.parametrize('target', sorted(TARGETS))
def test_restarts_follow_the_exit_code_contract(target):
    """A user's mistake (1-127) fails the job; a signal or a peer not up yet
    (128 and above, `errors.EXIT_RETRYABLE`) restarts it, a bounded number of times."""
    job = _job(TARGETS[target](_plan(EVALUATOR_CONFIG)))
    if target == 'tfjob':
        assert job['spec']['runPolicy'] == {'cleanPodPolicy': 'Running',
                                            'backoffLimit': k8s.RESTARTS,
                                            'activeDeadlineSeconds': 7200}
        assert {spec['restartPolicy'] for spec in job['spec']['tfReplicaSpecs'].values()} == {
            'ExitCode'}  # the operator retries exit codes >= 128 (IsRetryableExitCode)
    else:
        assert job['spec']['failurePolicy'] == {'maxRestarts': k8s.RESTARTS, 'rules': [{
            'name': jobset.FAIL_RULE, 'action': 'FailJobSet',
            'onJobFailureReasons': ['PodFailurePolicy']}]}
        for rjob in job['spec']['replicatedJobs']:
            spec = rjob['template']['spec']
            assert spec['backoffLimit'] == 0 and spec['activeDeadlineSeconds'] == 7200
            assert spec['template']['spec']['restartPolicy'] == 'Never'
            fail, ignore = spec['podFailurePolicy']['rules']
            failing = set(fail['onExitCodes']['values'])
            assert fail['action'] == 'FailJob' and fail['onExitCodes']['operator'] == 'In'
            assert ignore == {'action': 'Ignore', 'onPodConditions': [
                {'type': 'DisruptionTarget'}]}
    for code in (errors.EXIT_USAGE, errors.EXIT_FAILED, 127):
        assert not errors.retryable(code) and (target == 'tfjob' or code in failing)
    for code in (errors.EXIT_RETRYABLE, 143, 137, 128):
        assert errors.retryable(code) and (target == 'tfjob' or code not in failing)
    no_retries = dict(EVALUATOR_CONFIG, trainingInput=dict(
        EVALUATOR_CONFIG['trainingInput'], scheduling={'disableRetries': True}))
    job = _job(TARGETS[target](_plan(no_retries)))
    assert (job['spec']['runPolicy']['backoffLimit'] if target == 'tfjob' else
            job['spec']['failurePolicy']['maxRestarts']) == 0


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
    note, = tfjob.manifest(_plan(config)).notes
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
    assert tfjob.manifest(_plan('config_ps.yaml')).notes == ()


@pytest.mark.parametrize('target', sorted(TARGETS))
def test_manifest_needs_an_image_and_no_tuning(target):
    plan = _plan('config_ps.yaml')
    with pytest.raises(UserInputError, match='^--target %s needs --image-uri' % target):
        TARGETS[target](dataclasses.replace(plan, images={}))
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
