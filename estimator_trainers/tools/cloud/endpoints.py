"""Vertex AI Model Registry and Endpoints in AI Platform Prediction's words.

The mapping (docs/migrating-from-ai-platform.md, "Serving"):

- a model M is a Vertex AI **endpoint** displayed as M: free while nothing
  is deployed on it;
- a version V of M is a Vertex AI **model** (the SavedModel uploaded with
  TensorFlow 2.15's prebuilt prediction image, displayed as `M/V`) deployed
  on M's endpoint as a **deployed model** displayed as V, on its own
  machines (billed while deployed, used or not);
- the default version is the deployed model that takes the endpoint's
  traffic (the first version takes all of it; `set-default` moves it);
- `predict` is the endpoint's `:predict`, which Vertex AI routes by that
  traffic split.

Everything this tool creates carries the label `MARK`; what lacks it is
removed only when named by its full resource name (`created_here`).

Calls go through google-api-python-client's `aiplatform v1` service on the
regional endpoint (`api`: bounded waits, one-line errors); every body is
checked against the bundled discovery schema; long-running operations are
polled to their end (`VertexServing.wait`) with progress lines and a deadline.
"""
import datetime
import json
import re
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, TextIO, Tuple

from estimator_trainers.errors import UserInputError
from estimator_trainers.google_api import ApiError
from estimator_trainers.tools.cloud import api
from estimator_trainers.tools.cloud import configs
from estimator_trainers.tools.cloud import gcs_paths
from estimator_trainers.tools.cloud import instances as instances_lib
from estimator_trainers.tools.cloud import location
from estimator_trainers.tools.cloud import machines
from estimator_trainers.tools.cloud import plan as plan_lib
from estimator_trainers.tools.cloud import schema
from estimator_trainers.tools.cloud.api import Json, Request

# What marks a resource as this tool's: `models delete` removes only these
# (and what the user names by its full resource name).
MARK = {'managed-by': 'estimator-trainers'}
# `models create --enable-logging`, kept on the endpoint for its versions.
ACCESS_LOGGING_LABEL = 'access-logging'
# TensorFlow 2.15's prebuilt prediction images (Vertex AI lists them as
# available until 2027-01-14); after that, --image-uri names a serving image.
PREDICTION_IMAGES = {
    'cpu': 'us-docker.pkg.dev/vertex-ai/prediction/tf2-cpu.2-15:latest',
    'gpu': 'us-docker.pkg.dev/vertex-ai/prediction/tf2-gpu.2-15:latest',
}
PREDICTION_IMAGES_UNTIL = datetime.date(2027, 1, 14)
SERVING_TENSORFLOW = '2.15'
FRAMEWORKS = ('tensorflow',)
# How long an operation is followed before the command gives up on it (it
# goes on in Vertex AI), and what it usually takes (for the progress lines).
TIMEOUTS = {'upload': 1800, 'deploy': 3600, 'undeploy': 1800, 'delete': 1800,
            'create': 600}
TYPICAL = {'upload': 'uploads usually take a minute or two',
           'deploy': 'deploys usually take 5 to 20 minutes'}
PROGRESS_EVERY_SECS = 60

_MODEL_OF_OPERATION_RE = re.compile(r'(projects/[^/]+/locations/[^/]+/models/[^/]+)/'
                                    r'operations/[^/]+')
_SCHEMAS = {
    'endpoint': 'GoogleCloudAiplatformV1Endpoint',
    'upload': 'GoogleCloudAiplatformV1UploadModelRequest',
    'deploy': 'GoogleCloudAiplatformV1DeployModelRequest',
    'undeploy': 'GoogleCloudAiplatformV1UndeployModelRequest',
    'predict': 'GoogleCloudAiplatformV1PredictRequest',
}


def parse_endpoint_name(name: Optional[str]) -> Optional[location.ResourceName]:
    """`projects/P/locations/R/endpoints/ID` -> its parts, or None."""
    return location.parse_name(name, location.SERVING)


def model_filter(model: str) -> str:
    """The `endpoints.list` filter that finds model `model` by its display name.

    Raises:
      UserInputError: a `/` in what is no endpoint resource name (a half-typed
        one), or a name no filter holds safely (`api.equals_filter`).
    """
    if '/' in model:
        raise UserInputError('model %r: expected a model name, or an endpoint\'s full '
                             'resource name (projects/P/locations/R/endpoints/ID)' % model,
                             flag='--model')
    return api.equals_filter('display_name', model, 'model', '--model')


def created_here(resource: Json) -> bool:
    """Whether this tool created `resource` (an endpoint or a model): it has `MARK`."""
    labels = resource.get('labels') or {}
    return all(labels.get(k) == v for k, v in MARK.items())


def model_of_operation(operation_name: Optional[str]) -> Optional[str]:
    """The model a `models.upload` operation creates, from the operation's name."""
    match = _MODEL_OF_OPERATION_RE.fullmatch(operation_name or '')
    return match.group(1) if match else None


def check(kind: str, body: Json) -> Json:
    """`body` if it is a valid request of `kind` (`_SCHEMAS`) by the discovery document."""
    schema.check('aiplatform', 'v1', _SCHEMAS[kind], body)
    return body


# ------------------------------------------------------------ gcloud's words


def prediction_image(gpus: Optional[str], image_uri: Optional[str] = None,
                     today: Optional[datetime.date] = None) -> str:
    """The serving container: `--image-uri`, else TF 2.15's prebuilt image while it exists.

    Raises:
      UserInputError: the prebuilt image is gone and no --image-uri was given.
    """
    if image_uri:
        return image_uri
    today = today or datetime.date.today()
    if today > PREDICTION_IMAGES_UNTIL:
        raise UserInputError(
            'TensorFlow %s\'s prebuilt prediction image was available until %s; pass '
            '--image-uri with a serving image in Artifact Registry (docs/migrating-from-'
            'ai-platform.md, "Serving")' % (SERVING_TENSORFLOW, PREDICTION_IMAGES_UNTIL),
            flag='--image-uri')
    return PREDICTION_IMAGES['gpu' if gpus else 'cpu']


def version_plan(version: str, model: str, origin: str, *,
                 runtime_version: Optional[str] = None, python_version: Optional[str] = None,
                 framework: Optional[str] = None, machine_type: Optional[str] = None,
                 accelerator: Optional[Mapping[str, Any]] = None,
                 min_nodes: Optional[int] = None, max_nodes: Optional[int] = None,
                 description: Optional[str] = None, labels: Optional[Mapping[str, str]] = None,
                 service_account: Optional[str] = None, image_uri: Optional[str] = None,
                 signature_name: Optional[str] = None, check_instances: Sequence[Any] = (),
                 wait: bool = True, today: Optional[datetime.date] = None
                 ) -> plan_lib.ServingPlan:
    """`versions create VERSION --model M --origin gs://...` and its flags -> `plan.ServingPlan`.

    Flags with no Vertex AI meaning add a note saying what runs instead.

    Raises:
      UserInputError: one line naming the flag.
    """
    plan_lib.check_serving_name(version, 'VERSION')
    if not parse_endpoint_name(model):
        plan_lib.check_serving_name(model, '--model')
    if not origin.startswith('gs://'):
        raise UserInputError(
            '--origin %s: Vertex AI serves a SavedModel from Cloud Storage; copy the export '
            'there (gsutil cp -r %s gs://BUCKET/...) and pass its gs:// path' % (origin, origin),
            flag='--origin')
    if framework and framework.lower() not in FRAMEWORKS:
        raise UserInputError('--framework %s: this tool deploys TensorFlow SavedModels '
                             '(--framework tensorflow)' % framework, flag='--framework')
    origin, note = gcs_paths.normalized(origin)
    notes = [note] if note else []
    if runtime_version:
        notes.append('--runtime-version %s: Vertex AI has no AI Platform runtimes; the '
                     'version is served by %s (TensorFlow %s); the check before the upload '
                     'loads it with this project\'s TensorFlow 2.15.1'
                     % (runtime_version, image_uri or 'TensorFlow %s\'s prebuilt prediction '
                        'image' % SERVING_TENSORFLOW, SERVING_TENSORFLOW))
    if python_version:
        notes.append('--python-version %s: a TensorFlow SavedModel is served without Python '
                     'code; nothing to choose' % python_version)
    gpu = accelerator or {}
    try:
        machine, gpu_type, gpu_count, note = machines.prediction_machine(
            machine_type or machines.PREDICTION_MACHINE_TYPE, gpu.get('type'),
            gpu.get('count', 0))
    except machines.MachineError as e:
        flag = '--accelerator' if e.on_accelerator and accelerator else '--machine-type'
        raise UserInputError('%s: %s' % (flag, e), flag=flag) from None
    if note:
        notes.append(note)
    low, high = _nodes(min_nodes, max_nodes, notes)
    if labels:
        configs.check_labels(labels)
    return plan_lib.ServingPlan(
        model=model, version=version, origin=origin.rstrip('/'),
        image=prediction_image(gpu_type, image_uri, today), machine_type=machine,
        accelerator_type=gpu_type, accelerator_count=gpu_count, min_nodes=low,
        max_nodes=high, description=description, labels=dict(labels or {}),
        service_account=service_account, signature_name=signature_name,
        check_instances=tuple(check_instances), wait=wait, notes=tuple(notes))


def _nodes(min_nodes: Optional[int], max_nodes: Optional[int],
           notes: List[str]) -> Tuple[int, int]:
    """(min, max) replicas: Vertex AI keeps at least one node of a deployed model."""
    low = 1 if min_nodes is None else min_nodes
    if low == 0:
        notes.append('--min-nodes 0: Vertex AI keeps at least one node of a deployed '
                     'version, billed while it is deployed; 1 it is')
        low = 1
    high = max(low, max_nodes or low)
    if max_nodes is not None and max_nodes < low:
        raise UserInputError('--max-nodes %d is below --min-nodes %d' % (max_nodes, low),
                             flag='--max-nodes')
    return low, high


# ------------------------------------------------------------------ bodies


def endpoint_body(model: str, description: Optional[str] = None,
                  labels: Optional[Mapping[str, str]] = None,
                  access_logging: bool = False) -> Json:
    """The `endpoints.create` body of model `model` (marked as this tool's)."""
    body: Json = {'displayName': model, 'labels': dict(labels or {}, **MARK)}
    if access_logging:
        body['labels'][ACCESS_LOGGING_LABEL] = 'true'
    if description:
        body['description'] = description
    return check('endpoint', body)


def upload_body(plan: plan_lib.ServingPlan, model_display: Optional[str] = None) -> Json:
    """The `models.upload` body of a version: the SavedModel and its serving image,
    displayed as `MODEL/VERSION` (`model_display`: the endpoint's display name)."""
    model: Json = {'displayName': version_display(model_display or _display(plan.model),
                                            plan.version),
             'artifactUri': plan.origin,
             'containerSpec': {'imageUri': plan.image},
             'labels': dict(plan.labels, **MARK)}
    if plan.description:
        model['description'] = plan.description
    return check('upload', {'model': model})


def deploy_body(plan: plan_lib.ServingPlan, model_name: str, first: bool,
                access_logging: bool = False) -> Json:
    """The `endpoints.deployModel` body: `model_name` on the plan's machines; the
    first version of a model takes all its traffic, a later one none."""
    machine: Json = {'machineType': plan.machine_type}
    if plan.accelerator_type:
        machine['acceleratorType'] = plan.accelerator_type
        machine['acceleratorCount'] = plan.accelerator_count
    deployed: Json = {'model': model_name, 'displayName': plan.version,
                'dedicatedResources': {'machineSpec': machine,
                                       'minReplicaCount': plan.min_nodes,
                                       'maxReplicaCount': plan.max_nodes}}
    if access_logging:
        deployed['enableAccessLogging'] = True
    if plan.service_account:
        deployed['serviceAccount'] = plan.service_account
    body: Json = {'deployedModel': deployed}
    if first:
        body['trafficSplit'] = {'0': 100}
    return check('deploy', body)


def undeploy_body(deployed_id: str, traffic_split: Optional[Mapping[str, int]] = None) -> Json:
    """The `endpoints.undeployModel` body (`traffic_split`: what is left, if anything)."""
    body: Json = {'deployedModelId': deployed_id}
    if traffic_split:
        body['trafficSplit'] = dict(traffic_split)
    return check('undeploy', body)


def predict_body(values: Sequence[Any]) -> Json:
    """The `endpoints.predict` body, refused when Vertex AI would refuse its size."""
    body = check('predict', {'instances': list(values)})
    size = len(json.dumps(body, separators=(',', ':')).encode('utf-8'))
    if size > instances_lib.ONLINE_MAX_BYTES:
        raise UserInputError('the instances are %d bytes as a request; Vertex AI takes at most '
                             '%d per online prediction (split the file)'
                             % (size, instances_lib.ONLINE_MAX_BYTES))
    return body


def version_display(model_display: str, version: str) -> str:
    """How the Model Registry displays a version this tool uploaded: `MODEL/VERSION`."""
    return '%s/%s' % (model_display, version)


def _display(model: str) -> str:
    """A model's display name: its name, or its endpoint's id when given by resource name."""
    parsed = parse_endpoint_name(model)
    return parsed['id'] if parsed else model


# ------------------------------------------------------------------- calls


class VertexServing:
    """Endpoints, models and their operations in one region of one project."""

    def __init__(self, project: str, region: str, credentials: Any = None,
                 http: Optional[api.Http] = None) -> None:
        """Builds the `aiplatform v1` service from the bundled discovery document.

        Args:
          http: an httplib2-compatible object instead of `credentials` (tests).
        """
        self.project = project
        self.region = region
        self.parent = 'projects/%s/locations/%s' % (project, region)
        self._service = api.build('aiplatform', 'v1',
                                  http or api.authorized_http(credentials),
                                  endpoint='https://%s-aiplatform.googleapis.com' % region)

    @property
    def _locations(self) -> api.Service:
        return self._service.projects().locations()

    def _endpoints(self) -> api.Service:
        return self._locations.endpoints()

    def _models(self) -> api.Service:
        return self._locations.models()

    def execute(self, request: Request, action: str, retry: bool = True) -> Json:
        """Sends `request` (`api.execute`: `action` names it in errors)."""
        return api.execute(request, action, 'aiplatform', self.project, retry=retry)

    # Unsent requests: printed by dry runs, sent by the calls below.

    def create_endpoint_request(self, body: Json) -> Request:
        return self._endpoints().create(parent=self.parent, body=body)

    def list_models_request(self, filter_expr: str) -> Request:
        return self._models().list(parent=self.parent, pageSize=100, filter=filter_expr)

    def list_endpoints_request(self, filter_expr: Optional[str] = None) -> Request:
        kwargs: Dict[str, Any] = {'parent': self.parent, 'pageSize': 100}
        if filter_expr:
            kwargs['filter'] = filter_expr
        return self._endpoints().list(**kwargs)

    def upload_request(self, body: Json) -> Request:
        return self._models().upload(parent=self.parent, body=body)

    def deploy_request(self, endpoint_name: str, body: Json) -> Request:
        return self._endpoints().deployModel(endpoint=endpoint_name, body=body)

    def undeploy_request(self, endpoint_name: str, body: Json) -> Request:
        return self._endpoints().undeployModel(endpoint=endpoint_name, body=body)

    def delete_model_request(self, name: str) -> Request:
        return self._models().delete(name=name)

    def delete_endpoint_request(self, name: str) -> Request:
        return self._endpoints().delete(name=name)

    def predict_request(self, endpoint_name: str, body: Json) -> Request:
        return self._endpoints().predict(endpoint=endpoint_name, body=body)

    def traffic_request(self, endpoint_name: str, split: Mapping[str, int]) -> Request:
        body = check('endpoint', {'trafficSplit': dict(split)})
        return self._endpoints().patch(name=endpoint_name, body=body,
                                       updateMask='traffic_split')

    # Calls.

    def list_endpoints(self, filter_expr: Optional[str] = None) -> List[Json]:
        """Every endpoint of the region (matching `filter_expr`), all pages."""
        endpoints: List[Json] = []
        request = self.list_endpoints_request(filter_expr)
        while request is not None:
            response = self.execute(request, 'endpoints.list in %s' % self.parent)
            endpoints.extend(response.get('endpoints', []))
            request = self._endpoints().list_next(request, response)
        return endpoints

    def list_models(self, filter_expr: str) -> List[Json]:
        """Every model of the region matching `filter_expr`, all pages."""
        models: List[Json] = []
        request = self.list_models_request(filter_expr)
        while request is not None:
            response = self.execute(request, 'models.list in %s' % self.parent)
            models.extend(response.get('models', []))
            request = self._models().list_next(request, response)
        return models

    def get_endpoint(self, name: str) -> Json:
        return self.execute(self._endpoints().get(name=name), 'get %s' % name)

    def get_model(self, name: str) -> Json:
        return self.execute(self._models().get(name=name), 'get %s' % name)

    def get_operation(self, name: str) -> Json:
        return self.execute(self._operations(name).get(name=name), 'get %s' % name)

    def cancel_operation(self, name: str) -> None:
        self.execute(self._operations(name).cancel(name=name), 'cancel %s' % name,
                     retry=False)

    def _operations(self, name: str) -> api.Service:
        """An operation's collection: under its model, its endpoint or its location."""
        if '/models/' in name:
            return self._models().operations()
        if '/endpoints/' in name:
            return self._endpoints().operations()
        return self._locations.operations()

    def start(self, request: Request, action: str) -> Json:
        """Sends a request that starts an operation (never retried); returns it."""
        return self.execute(request, action, retry=False)

    def wait(self, operation: Json, what: str, err: TextIO, poll_interval: float = 10.0,
             timeout: Optional[float] = None, clock: Callable[[], float] = time.monotonic,
             sleep: Callable[[float], None] = time.sleep) -> Json:
        """Polls `operation` until it is done; returns its `response`.

        Progress goes to `err`: a line when it starts, when a deploy moves to
        another stage, at least every `PROGRESS_EVERY_SECS`, and when it ends.

        Raises:
          ApiError: the operation failed, or is still running after `timeout`
            seconds (it goes on in Vertex AI; the line names it).
        """
        name = operation.get('name', '?')
        kind = what.split()[0]
        timeout = TIMEOUTS.get(kind, 1800) if timeout is None else timeout
        start = clock()
        if not operation.get('done'):
            err.write('%s: waiting for operation %s (%s)\n'
                      % (what, name, TYPICAL.get(kind, 'polled every %gs' % poll_interval)))
            err.flush()
        stage: Optional[str] = None
        reported: Optional[float] = None
        while not operation.get('done'):
            elapsed = clock() - start
            if elapsed > timeout:
                raise ApiError('%s: operation %s still running after %s; it goes on in Vertex '
                               'AI (the console shows it)' % (what, name, _duration(elapsed)))
            sleep(poll_interval)
            operation = self.get_operation(name)
            elapsed = clock() - start
            now = (operation.get('metadata') or {}).get('deploymentStage')
            if not operation.get('done') and (
                    now != stage or elapsed - (reported or 0) >= PROGRESS_EVERY_SECS):
                err.write('  %s: %s elapsed%s\n' % (what, _duration(elapsed), ', %s' % (
                    now.lower().replace('_', ' ')) if now else ''))
                err.flush()
                stage, reported = now, elapsed
        if operation.get('error'):
            problem = operation['error']
            raise ApiError('%s failed: %s (operation %s)' % (
                what, problem.get('message') or 'code %s' % problem.get('code'), name))
        err.write('%s: done in %s\n' % (what, _duration(clock() - start)))
        err.flush()
        return operation.get('response') or {}


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    return '%dm%02ds' % divmod(seconds, 60) if seconds >= 60 else '%ds' % seconds


# ----------------------------------------------------------------- lookups


def find_model(vertex: VertexServing, model: str) -> Json:
    """The endpoint of model `model` (a display name or a full resource name).

    Only endpoints displayed exactly as `model` count, whatever the filter
    matched.

    Raises:
      UserInputError: no such model, or several endpoints of that name, or a
        name no lookup takes (`model_filter`).
    """
    if parse_endpoint_name(model):
        return vertex.get_endpoint(model)
    found = [e for e in vertex.list_endpoints(model_filter(model))
             if e.get('displayName') == model]
    if not found:
        raise UserInputError(
            'model %s: no such model in %s (`models list` shows the models there; '
            '`models create %s` makes one; --region if it is elsewhere)'
            % (model, vertex.parent, model), flag='--model')
    if len(found) > 1:
        raise UserInputError('model %s: %d Vertex AI endpoints have that name (%s); pass '
                             'one by its resource name' % (model, len(found), ', '.join(
                                 e['name'] for e in found)), flag='--model')
    return found[0]


def find_version(endpoint: Json, version: str) -> Json:
    """The deployed model of `version` on `endpoint` (by display name or id).

    Raises:
      UserInputError: no such version.
    """
    deployed: List[Json] = endpoint.get('deployedModels') or []
    for candidate in deployed:
        if version in (candidate.get('displayName'), candidate.get('id')):
            return candidate
    raise UserInputError('version %s of model %s: no such version (it has: %s)' % (
        version, endpoint.get('displayName', endpoint.get('name')),
        ', '.join(d.get('displayName') or d.get('id', '?') for d in deployed) or 'none'),
        flag='VERSION')


def undeployed_versions(vertex: VertexServing, endpoint: Json,
                        version: Optional[str] = None) -> List[Json]:
    """Models this tool uploaded for `endpoint`'s model (for `version`, else any)
    that nothing deploys: what a deploy that failed after `--async`, or a roll
    back that could not finish, left in the Model Registry."""
    prefix = version_display(endpoint.get('displayName', ''), version or '')
    found = vertex.list_models('labels.%s="%s"' % next(iter(MARK.items())))
    return [m for m in found if created_here(m) and not m.get('deployedModels') and (
        m.get('displayName') == prefix if version else
        (m.get('displayName') or '').startswith(prefix))]


def traffic(endpoint: Json, deployed: Json) -> int:
    """The percentage of `endpoint`'s traffic `deployed` takes."""
    return int((endpoint.get('trafficSplit') or {}).get(deployed.get('id'), 0))


def default_version(endpoint: Json) -> Optional[Json]:
    """The deployed model taking most of the endpoint's traffic, or None."""
    deployed = [d for d in endpoint.get('deployedModels') or [] if traffic(endpoint, d) > 0]
    return max(deployed, key=lambda d: traffic(endpoint, d)) if deployed else None


def split_without(endpoint: Json, deployed: Json) -> Dict[str, int]:
    """The traffic split once `deployed` is gone: its share goes to the
    largest remaining one. Empty when no other deployed model takes traffic."""
    split = {k: int(v) for k, v in (endpoint.get('trafficSplit') or {}).items()
             if k != deployed.get('id') and int(v) > 0}
    share = traffic(endpoint, deployed)
    if split and share:
        largest = max(split, key=lambda k: split[k])
        split[largest] += share
    return split


def access_logging(endpoint: Json) -> bool:
    """Whether `models create --enable-logging` asked for access logs on the endpoint."""
    return (endpoint.get('labels') or {}).get(ACCESS_LOGGING_LABEL) == 'true'


# ------------------------------------------------------------------- views


def machines_of(deployed: Json) -> Tuple[int, str]:
    """`(billed nodes at least, text)` of a deployed model's machines."""
    dedicated = deployed.get('dedicatedResources')
    if dedicated:
        spec = dedicated.get('machineSpec') or {}
        low = int(dedicated.get('minReplicaCount', 1))
        high = int(dedicated.get('maxReplicaCount') or low)
        text = '%s x %s' % (low if low == high else '%d-%d' % (low, high),
                            spec.get('machineType', '?'))
        if spec.get('acceleratorType'):
            text += ' (%d %s each)' % (int(spec.get('acceleratorCount', 1)),
                                       spec['acceleratorType'])
        return low, text
    automatic = deployed.get('automaticResources')
    if automatic is not None:
        low = int(automatic.get('minReplicaCount', 1))
        high = int(automatic.get('maxReplicaCount') or low)
        return low, '%s x automatic' % (low if low == high else '%d-%d' % (low, high))
    if deployed.get('sharedResources'):
        return 0, 'shared (%s)' % deployed['sharedResources']
    return 0, '?'


def legacy_version(endpoint: Json, deployed: Json, model: Optional[Json] = None,
                   project: Optional[str] = None) -> Json:
    """A deployed model as AI Platform's `Version` (`versions describe`), plus
    the Vertex AI names and what it costs (`project`: the id gcloud named)."""
    model = model or {}
    _, machine_text = machines_of(deployed)
    record: Json = {
        'name': 'projects/%s/models/%s/versions/%s' % (
            project or _project_of(endpoint), endpoint.get('displayName', '?'),
            deployed.get('displayName') or deployed.get('id')),
        'deploymentUri': model.get('artifactUri', ''),
        'state': 'READY',
        'isDefault': default_version(endpoint) is deployed,
        'framework': 'TENSORFLOW',
        'machines': machine_text,
        'trafficPercent': traffic(endpoint, deployed),
    }
    if deployed.get('createTime'):
        record['createTime'] = deployed['createTime']
    if model.get('containerSpec', {}).get('imageUri'):
        record['predictionImage'] = model['containerSpec']['imageUri']
    if model.get('description'):
        record['description'] = model['description']
    record['vertexModel'] = deployed.get('model', '')
    record['vertexDeployedModelId'] = deployed.get('id', '')
    return record


def legacy_model(endpoint: Json, models: Optional[Mapping[str, Json]] = None,
                 project: Optional[str] = None) -> Json:
    """An endpoint as AI Platform's `Model` (`models describe`/`list`), plus the
    Vertex AI endpoint and the machines its versions keep.

    Args:
      models: {Vertex AI model name: model} for the deployment URIs.
      project: the project id gcloud named (the endpoint's name has its number).
    """
    models = models or {}
    project = project or _project_of(endpoint)
    default = default_version(endpoint)
    deployed = endpoint.get('deployedModels') or []
    record: Json = {'name': 'projects/%s/models/%s' % (project,
                                                        endpoint.get('displayName', '?'))}
    if endpoint.get('description'):
        record['description'] = endpoint['description']
    parsed = parse_endpoint_name(endpoint.get('name'))
    record['regions'] = [parsed['region'] if parsed else '?']
    if default is not None:
        record['defaultVersion'] = legacy_version(endpoint, default,
                                                  models.get(default.get('model', '')), project)
    labels = {k: v for k, v in (endpoint.get('labels') or {}).items() if k not in MARK}
    if labels:
        record['labels'] = labels
    record['versions'] = [d.get('displayName') or d.get('id') for d in deployed]
    record['nodes'] = sum(machines_of(d)[0] for d in deployed)
    record['machines'] = '; '.join(machines_of(d)[1] for d in deployed)
    record['vertexEndpoint'] = endpoint.get('name', '')
    record['createdByThisTool'] = created_here(endpoint)
    return record


def _project_of(endpoint: Json) -> str:
    parsed = parse_endpoint_name(endpoint.get('name'))
    return parsed['project'] if parsed else '?'


# --------------------------------------------------------- the other verbs


def create_model(vertex: VertexServing, model: str, err: TextIO,
                 description: Optional[str] = None, labels: Optional[Mapping[str, str]] = None,
                 access_logging_on: bool = False, poll_interval: float = 10.0) -> Json:
    """`models create`: an endpoint named `model`, marked as this tool's.

    Raises:
      UserInputError: an endpoint of that name exists.
    """
    existing = [e for e in vertex.list_endpoints(model_filter(model))
                if e.get('displayName') == model]
    if existing:
        raise UserInputError('model %s already exists in %s (%s); AI Platform refused a second '
                             'model of one name' % (model, vertex.parent, existing[0]['name']))
    operation = vertex.start(vertex.create_endpoint_request(
        endpoint_body(model, description, labels, access_logging_on)),
        'endpoints.create in %s' % vertex.parent)
    return vertex.wait(operation, 'create model %s' % model, err, poll_interval)


def models_of(vertex: VertexServing, deployed: Sequence[Json]) -> Dict[str, Json]:
    """{Vertex AI model name: model} of deployed models (a deleted one is left out)."""
    found: Dict[str, Json] = {}
    for item in deployed:
        try:
            found[item['model']] = vertex.get_model(item['model'])
        except ApiError as e:
            if e.status != 404:
                raise
    return found


def set_default(vertex: VertexServing, endpoint: Json, version: str) -> Json:
    """`versions set-default`: all of the endpoint's traffic to `version`."""
    deployed = find_version(endpoint, version)
    return vertex.execute(vertex.traffic_request(endpoint['name'], {deployed['id']: 100}),
                          'set the traffic split of %s' % endpoint['name'])


def predict(vertex: VertexServing, endpoint: Json, version: Optional[str], body: Json) -> Json:
    """`predict --model M [--version V]`: the endpoint's `:predict`.

    Raises:
      UserInputError: nothing deployed, or `version` does not take all the
        traffic (Vertex AI routes a prediction by the traffic split, never to
        a deployed model by name).
    """
    name = endpoint.get('displayName', endpoint['name'])
    deployed = endpoint.get('deployedModels') or []
    if not deployed:
        raise UserInputError('model %s has no versions: nothing serves predictions '
                             '(`versions create VERSION --model %s --origin gs://...`)'
                             % (name, name), flag='--model')
    if version:
        chosen = find_version(endpoint, version)
        share = traffic(endpoint, chosen)
        if share != 100:
            raise UserInputError(
                '--version %s: Vertex AI sends predictions by the traffic split, and %s takes '
                '%d%% of model %s\'s traffic; make it the default first (versions set-default '
                '%s --model %s), or predict without --version'
                % (version, version, share, name, version, name), flag='--version')
    elif default_version(endpoint) is None:
        raise UserInputError('model %s has no default version (no deployed version takes '
                             'traffic): `versions set-default VERSION --model %s`'
                             % (name, name), flag='--model')
    return vertex.execute(vertex.predict_request(endpoint['name'], body),
                          'predict with %s' % endpoint['name'])
