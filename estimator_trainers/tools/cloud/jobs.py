"""Vertex AI job bodies and calls.

Bodies: a `plan.JobPlan` rendered as a `CustomJob` (pools in `roles` order:
0 chief, 1 workers, 2 parameter servers, 3 evaluators), or a
`HyperparameterTuningJob` when the config has `hyperparameters`. Every body
is checked against the bundled discovery schema before use.

Calls go through google-api-python-client's `aiplatform v1` service on the
regional endpoint `https://<region>-aiplatform.googleapis.com` (`api`: bounded
waits, one-line errors).
"""
import re
from typing import Any, Dict, List, Optional, Tuple

from estimator_trainers import errors
from estimator_trainers.errors import UserInputError
from estimator_trainers.google_api import ApiError
from estimator_trainers.tools.cloud import api
from estimator_trainers.tools.cloud import location
from estimator_trainers.tools.cloud import roles
from estimator_trainers.tools.cloud import schema
from estimator_trainers.tools.cloud.api import Json
from estimator_trainers.tools.cloud.configs import Hyperparameters, Parameter
from estimator_trainers.tools.cloud.plan import CUSTOM_JOBS, TUNING_JOBS, Collection, JobPlan, Launch

# Prebuilt Vertex AI training images for TF 2.15 (end of availability
# announced for 2025-11-14; --image-uri takes a container built from Dockerfile).
EXECUTOR_IMAGES = {
    'cpu': 'us-docker.pkg.dev/vertex-ai/training/tf-cpu.2-15.py310:latest',
    'gpu': 'us-docker.pkg.dev/vertex-ai/training/tf-gpu.2-15.py310:latest',
}
COLLECTIONS: Tuple[Collection, ...] = (CUSTOM_JOBS, TUNING_JOBS)
_SCHEMAS = {CUSTOM_JOBS: 'GoogleCloudAiplatformV1CustomJob',
            TUNING_JOBS: 'GoogleCloudAiplatformV1HyperparameterTuningJob'}

SUCCEEDED = 'JOB_STATE_SUCCEEDED'
FINAL_STATES = (SUCCEEDED, 'JOB_STATE_FAILED', 'JOB_STATE_CANCELLED',
                'JOB_STATE_EXPIRED', 'JOB_STATE_PARTIALLY_SUCCEEDED')


def endpoint(region: str) -> str:
    """Regional Vertex AI endpoint (the scheme is required by client_options)."""
    return 'https://%s-aiplatform.googleapis.com' % region


def parse_job_name(name: Optional[str]) -> Optional[location.ResourceName]:
    """`projects/P/locations/R/<collection>/ID` -> its parts, or None."""
    return location.parse_name(name, location.TRAINING)


# ---------------------------------------------------------------- bodies


def job_body(plan: JobPlan) -> Json:
    """The create body of `plan`: a CustomJob or HyperparameterTuningJob."""
    body = tuning_job_body(plan) if plan.config.is_tuning else custom_job_body(plan)
    schema.check('aiplatform', 'v1', _SCHEMAS[plan.collection], body)
    return body


def custom_job_body(plan: JobPlan) -> Json:
    body: Json = {'displayName': plan.name, 'jobSpec': _job_spec(plan, job_dir_flag=True)}
    return _with_labels_and_key(body, plan)


def tuning_job_body(plan: JobPlan) -> Json:
    """A HyperparameterTuningJob; each trial writes under its own job-dir.

    A declared trainer's trials get no `--job-dir` flag: Vertex AI sets
    `$AIP_MODEL_DIR` to `<job-dir>/<trial id>/model` per trial and the
    trainers default to it.
    """
    hp = plan.config.hyperparameters
    assert hp is not None, 'a tuning job has a study'
    body: Json = {
        'displayName': plan.name,
        'studySpec': study_spec(hp),
        'maxTrialCount': hp.max_trials,
        'parallelTrialCount': hp.max_parallel_trials,
        'trialJobSpec': _job_spec(plan, job_dir_flag=False),
    }
    if hp.max_failed_trials is not None:
        body['maxFailedTrialCount'] = hp.max_failed_trials
    return _with_labels_and_key(body, plan)


def _with_labels_and_key(body: Json, plan: JobPlan) -> Json:
    if plan.config.labels:
        body['labels'] = dict(plan.config.labels)
    if plan.kms_key:
        body['encryptionSpec'] = {'kmsKeyName': plan.kms_key}
    return body


def study_spec(hp: Hyperparameters) -> Json:
    """A study (`configs.Hyperparameters`) -> Vertex `StudySpec`."""
    spec: Json = {'metrics': [{'metricId': hp.metric_tag, 'goal': hp.goal}],
            'parameters': [_parameter_spec(p) for p in hp.params]}
    if hp.algorithm != 'ALGORITHM_UNSPECIFIED':
        spec['algorithm'] = hp.algorithm
    return spec


def _parameter_spec(param: Parameter) -> Json:
    spec: Json = {'parameterId': param.name}
    low, high = param.min_value, param.max_value
    if param.type in ('DOUBLE', 'INTEGER'):
        assert low is not None and high is not None, 'a ranged parameter has bounds'
        if param.type == 'DOUBLE':
            spec['doubleValueSpec'] = {'minValue': float(low), 'maxValue': float(high)}
        else:
            spec['integerValueSpec'] = {'minValue': str(int(low)), 'maxValue': str(int(high))}
    elif param.type == 'CATEGORICAL':
        spec['categoricalValueSpec'] = {'values': list(param.categorical_values)}
    else:
        spec['discreteValueSpec'] = {'values': [float(v) for v in param.discrete_values]}
    if param.scale_type not in (None, 'NONE'):
        spec['scaleType'] = param.scale_type
    return spec


def _job_spec(plan: JobPlan, job_dir_flag: bool) -> Json:
    config = plan.config
    spec: Json = {'workerPoolSpecs': worker_pool_specs(plan, job_dir_flag)}
    if plan.tensorboard_name:
        spec['tensorboard'] = tensorboard(plan)
    if plan.job_dir:
        spec['baseOutputDirectory'] = {'outputUriPrefix': plan.job_dir}
    if plan.enable_web_access:
        spec['enableWebAccess'] = True
    if config.scheduling.as_json():
        spec['scheduling'] = config.scheduling.as_json()
    if config.service_account:
        spec['serviceAccount'] = config.service_account
    if config.network:
        spec['network'] = config.network
    return spec


def tensorboard(plan: JobPlan) -> Optional[str]:
    """The TensorBoard of a custom job, checked for what Vertex AI needs to upload.

    Raises:
      UserInputError: a tuning job (each trial writes under its own
        `$AIP_MODEL_DIR`), no job-dir to upload from, or no service account
        (Vertex AI uploads with the job's own).
    """
    name = plan.tensorboard_name
    if plan.config.is_tuning:
        raise UserInputError('--tensorboard %s: a tuning job\'s trials each write under '
                             'their own $AIP_MODEL_DIR; Vertex AI TensorBoard uploads only a '
                             'custom job\'s logs: drop it, or run one trial as a custom job'
                             % name, flag='--tensorboard')
    if not plan.job_dir:
        raise UserInputError('--tensorboard %s needs a job-dir: Vertex AI uploads from '
                             '<job-dir>/logs' % name, flag='--tensorboard')
    if not plan.config.service_account:
        raise UserInputError(
            '--tensorboard %s needs trainingInput.serviceAccount: Vertex AI uploads the logs '
            'with the job\'s own service account (roles/storage.admin and '
            'roles/aiplatform.user, per its TensorBoard set-up page)' % name,
            flag='--tensorboard')
    return name


def worker_pool_specs(plan: JobPlan, job_dir_flag: bool) -> List[Json]:
    """Pools in `roles` order; a missing role below a present one is `{}`."""
    last = plan.config.pools[-1].role.pool
    specs: List[Json] = []
    for role in roles.ROLES[:last + 1]:
        pool = plan.config.pool(role.name)
        if pool is None:
            specs.append({})
            continue
        machine: Json = {'machineType': pool.machine_type}
        if pool.accelerator_type:
            machine['acceleratorType'] = pool.accelerator_type
            machine['acceleratorCount'] = pool.accelerator_count
        spec: Json = {'machineSpec': machine, 'replicaCount': str(pool.replica_count)}
        if pool.boot_disk:
            spec['diskSpec'] = dict(pool.boot_disk)
        spec.update(_program(plan.launch(role.name, job_dir_flag)))
        specs.append(spec)
    return specs


def _program(launch: Launch) -> Json:
    """`pythonPackageSpec` (a prebuilt image installs the packages) or `containerSpec`."""
    if launch.python_package:
        return {'pythonPackageSpec': {'executorImageUri': launch.image,
                                      'packageUris': list(launch.package_uris),
                                      'pythonModule': launch.module,
                                      'args': list(launch.args)}}
    spec: Json = {'imageUri': launch.image}
    if launch.command:
        spec['command'] = list(launch.command)
    spec['args'] = list(launch.args)
    return {'containerSpec': spec}


# ----------------------------------------------------------------- calls


class VertexJobs:
    """Create, get, list and cancel Vertex AI training jobs in one region."""

    def __init__(self, project: str, region: str, credentials: Any = None,
                 http: Optional[api.Http] = None) -> None:
        """Builds the `aiplatform v1` service from the bundled discovery document.

        Args:
          project, region: where the jobs live.
          credentials: google-auth credentials (Application Default Credentials).
          http: an httplib2-compatible object instead (tests pass mocks).
        """
        self.project = project
        self.region = region
        self.parent = 'projects/%s/locations/%s' % (project, region)
        self._service = api.build('aiplatform', 'v1',
                                  http or api.authorized_http(credentials),
                                  endpoint=endpoint(region))

    def _collection(self, collection: str) -> api.Service:
        return getattr(self._service.projects().locations(), collection)()

    def create_request(self, collection: Collection, body: Json) -> api.Request:
        """The unsent `create` request (its method, uri and body are exact)."""
        return self._collection(collection).create(parent=self.parent, body=body)

    def create(self, collection: Collection, body: Json) -> Json:
        """Creates the job; returns the job resource (with its `name`)."""
        return self._execute(self.create_request(collection, body),
                             '%s.create in %s' % (collection, self.parent), retry=False)

    def get(self, name: str) -> Json:
        return self._execute(self._collection(_collection_of(name)).get(name=name),
                             'get %s' % name)

    def cancel_request(self, name: str) -> api.Request:
        """The unsent `cancel` request of job `name`."""
        return self._collection(_collection_of(name)).cancel(name=name)

    def cancel(self, name: str) -> None:
        self._execute(self.cancel_request(name), 'cancel %s' % name, retry=False)

    def find_requests(self, ref: str) -> List[api.Request]:
        """The unsent requests `resolve` makes to find `ref` (a numeric id or a name)."""
        if ref.isdigit():
            return [self._collection(c).get(name='%s/%s/%s' % (self.parent, c, ref))
                    for c in COLLECTIONS]
        return [self._collection(c).list(parent=self.parent, pageSize=100,
                                         filter=self._name_filter(ref))
                for c in COLLECTIONS]

    @staticmethod
    def _name_filter(ref: str) -> str:
        if '/' in ref:
            raise UserInputError('job %r: expected a job name, a numeric id or a job\'s full '
                                 'resource name (projects/P/locations/R/customJobs/ID)' % ref)
        return api.equals_filter('display_name', ref, 'job')

    def list(self, limit: int = 50, filter_expr: Optional[str] = None) -> List[Json]:
        """Jobs of both kinds, newest first, at most `limit`."""
        jobs: List[Json] = []
        for collection in COLLECTIONS:
            api = self._collection(collection)
            kwargs: Dict[str, Any] = {'parent': self.parent, 'pageSize': min(limit, 100)}
            if filter_expr:
                kwargs['filter'] = filter_expr
            request = api.list(**kwargs)
            found = 0
            while request is not None and found < limit:
                response = self._execute(request, '%s.list in %s' % (collection, self.parent))
                page = response.get(collection, [])
                jobs.extend(page)
                found += len(page)
                request = api.list_next(request, response)
        jobs.sort(key=lambda job: job.get('createTime', ''), reverse=True)
        return jobs[:limit]

    def resolve(self, ref: str) -> str:
        """A job resource name from a resource name, a numeric id or a display name.

        Only jobs displayed exactly as `ref` count, whatever the filter matched.

        Raises:
          ApiError: no such job, or a display name shared by several jobs.
          UserInputError: a name no lookup takes (`api.equals_filter`).
        """
        if parse_job_name(ref):
            return ref
        if ref.isdigit():
            for collection in COLLECTIONS:
                name = '%s/%s/%s' % (self.parent, collection, ref)
                try:
                    resolved: str = self.get(name)['name']
                    return resolved
                except ApiError as e:
                    if e.status != 404:
                        raise
            raise ApiError('no custom or hyperparameter tuning job with id %s in %s'
                           % (ref, self.parent))
        matches: List[str] = [job['name'] for job in self.list(limit=100, filter_expr=self._name_filter(
            ref)) if job.get('displayName') == ref]
        if not matches:
            raise ApiError('no job named %r in %s (`list` shows the jobs there; '
                           'pass --region if it ran elsewhere)' % (ref, self.parent))
        if len(matches) > 1:
            raise ApiError('%d jobs are named %r: %s; pass one of these names'
                           % (len(matches), ref, ', '.join(matches)))
        return matches[0]

    def _execute(self, request: api.Request, action: str, retry: bool = True) -> Json:
        return api.execute(request, action, 'aiplatform', self.project, retry=retry)


def _collection_of(name: str) -> str:
    parsed = parse_job_name(name)
    if not parsed:
        raise UserInputError('%r is not a job resource name '
                             '(projects/P/locations/R/customJobs/ID)' % name)
    return parsed['collection']


# ------------------------------------------------------------- following


def describe(job: Json) -> List[str]:
    """Lines summarising a job resource for `status`."""
    lines = ['name: %s' % job.get('name', '?'),
             'displayName: %s' % job.get('displayName', ''),
             'state: %s' % job.get('state', 'JOB_STATE_UNSPECIFIED')]
    for key in ('createTime', 'startTime', 'endTime'):
        if job.get(key):
            lines.append('%s: %s' % (key, job[key]))
    if job.get('error', {}).get('message'):
        lines.append(errors.line(errors.TaskFailure(job['error']['message'])))
    best = best_trial(job)
    if best:
        lines.append('bestTrial: %s' % best)
    return lines


def best_trial(job: Json) -> Optional[str]:
    """`id metric=value (param=value, ...)` of a tuning job's best trial, or None."""
    metrics = job.get('studySpec', {}).get('metrics') or []
    if not metrics:
        return None
    metric_id, goal = metrics[0]['metricId'], metrics[0].get('goal', 'MAXIMIZE')
    scored: List[Tuple[Any, Json]] = []
    for trial in job.get('trials', []):
        for metric in trial.get('finalMeasurement', {}).get('metrics', []):
            if metric.get('metricId') == metric_id and 'value' in metric:
                scored.append((metric['value'], trial))
    if not scored:
        return None
    value, trial = (max if goal == 'MAXIMIZE' else min)(scored, key=lambda s: s[0])
    params = ', '.join('%s=%s' % (p['parameterId'], p.get('value'))
                       for p in trial.get('parameters', []))
    return '%s %s=%s (%s)' % (trial.get('id', '?'), metric_id, value, params)
