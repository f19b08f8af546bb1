"""The one order of each serving command: deploy, remove, create, predict, list.

`ai_platform`'s serving verbs (AI Platform Prediction's, on Vertex AI's
Model Registry and endpoints: `endpoints`) make one action each
(`actions.ServingAction`) and hand it to `run`; nothing else orders these
steps or builds their requests. Every action either runs or, with
`dry_run`, prints its requests as JSON and changes nothing; a dry run needs
no credentials and no network (`Remove` looks up what it would remove when
it can, and names it by placeholders when it cannot).

`Deploy` (`versions create`), a `plan.ServingPlan` in this order:

1. the plan's notes, then the check: the export loaded from its gs://
   origin and its serving signature called on one instance
   (`serving.check_export`), before any credential; a broken export stops
   here (for a dry run, an export it cannot read is a note);
2. a dry run prints the check and the requests, and stops;
3. the model's endpoint found (an unknown model stops here, before
   anything is uploaded) and a second version of one name refused;
4. the SavedModel uploaded to the Model Registry (an operation, polled);
5. deployed on the endpoint (an operation, polled; the first version takes
   all the traffic);
6. the front told (`Deploy.on_created`).

Any failure or interrupt after the upload started rolls back (`_roll_back`):
the pending operation cancelled, the uploaded model undeployed and deleted;
what was removed, or is left with the command to remove it, is said.
`plan.wait` False (`--async`) returns once the deploy started: its later
failure leaves the uploaded model, which `versions delete` removes.

`Remove` (`models delete M`, `versions delete V --model M`), in this order:

1. the model's endpoint found; one this tool did not create is touched only
   when `model` names it by its full resource name;
2. the versions undeployed, those without traffic first (a default version
   with others beside it is refused for `versions delete`, as AI Platform
   did);
3. their Vertex AI models deleted where this tool created them and nothing
   else deploys them (else kept, and said), and the models it uploaded for
   the model (or the version) that nothing deploys: what a failed `--async`
   deploy, or an unfinished roll back, left;
4. for `models delete`, the endpoint deleted.

A failed step stops with one line naming what was removed and what was not.
"""
import dataclasses
import json
import os
import sys
from typing import Any, List, Optional, Sequence, TextIO, Tuple

from estimator_trainers import google_api
from estimator_trainers import logs as logs_lib
from estimator_trainers.errors import UserInputError
from estimator_trainers.errors import first_line
from estimator_trainers.tools.cloud import actions
from estimator_trainers.tools.cloud import api
from estimator_trainers.tools.cloud import backend as backend_lib
from estimator_trainers.tools.cloud import endpoints
from estimator_trainers.tools.cloud import location
from estimator_trainers.tools.cloud.actions import Json
from estimator_trainers.tools.cloud.backend import Backend
from estimator_trainers.tools.cloud.endpoints import VertexServing
from estimator_trainers.tools.cloud.plan import ServingPlan

# TensorFlow's retries of a gs:// request (its default: 10, minutes of back-off).
GCS_RETRIES_VAR = 'GCS_RETRY_CONFIG_MAX_RETRIES'


def run(action: actions.ServingAction, backend: Optional[Backend] = None,
        out: Optional[TextIO] = None, err: Optional[TextIO] = None,
        environ: Optional[location.Environ] = None) -> int:
    """Carries out a serving `action` in its documented order; returns the exit code.

    Raises:
      UserInputError: a failed check, an unknown model, an existing version.
      google_api.ApiError: a Google API refused a call or an operation failed.
    """
    backend = backend or Backend()
    out, err = out or sys.stdout, err or sys.stderr
    environ = os.environ if environ is None else environ
    if isinstance(action, actions.Deploy):
        return _deploy(action, backend, out, err, environ)
    if isinstance(action, actions.Remove) and action.dry_run:
        _remove_dry_run(action, backend, out, err, environ)
        return 0
    model = action.model if isinstance(action, (actions.Remove, actions.Predict)) else None
    # A predict's body, refused at Vertex AI's size before any credential.
    body = endpoints.predict_body(action.instances) if isinstance(
        action, actions.Predict) else {}
    if action.dry_run:
        offline = _offline(model, action, environ, err)
        out.write(json.dumps({'request': api.request_json(_request(offline, action, body))},
                             indent=2) + '\n')
        return 0
    vertex = backend_lib.connect_serving(backend, model, action.project, action.region_flag,
                                         environ, err)
    if isinstance(action, actions.Remove):
        removed = _remove(vertex, action, err)
        if removed and action.on_removed:
            action.on_removed(removed, err)
    elif isinstance(action, actions.CreateModel):
        created = endpoints.create_model(vertex, action.model, err, action.description,
                                         action.labels, action.access_logging,
                                         action.poll_interval)
        action.on_created(vertex.project, created, err)
    elif isinstance(action, actions.Predict):
        response = endpoints.predict(vertex, endpoints.find_model(vertex, action.model),
                                     action.version, body)
        action.on_predicted(response, out)
    else:
        action.on_listed(vertex.list_endpoints(), vertex.project, vertex.region, out, err)
    return 0


def _offline(model: Optional[str], action: actions.ServingAction, environ: location.Environ,
             err: TextIO) -> VertexServing:
    """The serving client of a dry run that looks nothing up: no credentials, its
    requests built and printed, never sent. `model`'s endpoint resource name
    names its project and region, else `location`'s rule (its note on `err`)."""
    project, region = location.resolve(model, location.SERVING, action.project,
                                       action.region_flag, environ, err)
    return VertexServing(project, region, credentials=api.anonymous_credentials())


def _request(offline: VertexServing, action: actions.ServingAction, body: Json
             ) -> api.Request:
    """The one unsent request of a create, a predict (`body`) or a list."""
    if isinstance(action, actions.CreateModel):
        return offline.create_endpoint_request(endpoints.endpoint_body(
            action.model, action.description, action.labels, action.access_logging))
    if isinstance(action, actions.Predict):
        return offline.predict_request(endpoint_placeholder(offline, action.model), body)
    return offline.list_endpoints_request()


def endpoint_placeholder(vertex: VertexServing, model: str) -> str:
    """`model`'s endpoint as a dry run names it before any lookup: its resource
    name, or `<parent>/endpoints/ENDPOINT_OF_<model>` (a name a lookup takes:
    `endpoints.model_filter`)."""
    if endpoints.parse_endpoint_name(model):
        return model
    endpoints.model_filter(model)
    return '%s/endpoints/ENDPOINT_OF_%s' % (vertex.parent, model)


# ------------------------------------------------------------------- deploy


def _deploy(action: actions.Deploy, backend: Backend, out: TextIO, err: TextIO,
            environ: location.Environ) -> int:
    """`versions create`: `action.plan` checked, then deployed (or its requests printed)."""
    plan = action.plan
    for note in plan.notes:
        err.write('note: %s\n' % note)
    checked = _check_export(plan, err, dry_run=action.dry_run)
    plan = dataclasses.replace(plan, origin=checked.export_dir)
    if action.dry_run:
        offline = _offline(plan.model, action, environ, err)
        _print_deploy_dry_run(out, dataclasses.replace(
            plan, project=offline.project, region=offline.region), offline, checked)
        return 0
    vertex = backend_lib.connect_serving(backend, plan.model, action.project,
                                         action.region_flag, environ, err)
    plan = dataclasses.replace(plan, project=vertex.project, region=vertex.region)
    endpoint = endpoints.find_model(vertex, plan.model)
    for deployed in endpoint.get('deployedModels') or []:
        if deployed.get('displayName') == plan.version:
            raise UserInputError('version %s of model %s already exists (deployed model %s); '
                                 'pick another VERSION' % (plan.version, plan.model,
                                                           deployed.get('id')))
    result = _upload_and_deploy(vertex, plan, endpoint, action.poll_interval, err)
    if action.on_created:
        action.on_created(plan, result, out, err)
    return 0


@dataclasses.dataclass(frozen=True)
class ExportCheck:
    """What the check before a deploy found (`serving.Checked`): the export
    checked, its signature, its inputs described and the prediction of the
    instance it ran; or why it ran none, or why it was not made (`note`)."""
    export_dir: str
    signature: Optional[str] = None
    inputs: Optional[str] = None
    prediction: Any = None
    note: Optional[str] = None


def _check_export(plan: ServingPlan, err: TextIO, dry_run: bool = False) -> ExportCheck:
    """The check before anything is uploaded (TensorFlow loads here, not before).

    An export Cloud Storage does not give (no network, no access) is one line:
    an error, or for a dry run a note (the check is then not made), after one
    retry instead of TensorFlow's ten (minutes of back-off offline).
    """
    if dry_run and 'tensorflow' not in sys.modules:
        # Read when TensorFlow's gs:// file system is made, at its import.
        os.environ.setdefault(GCS_RETRIES_VAR, '1')
    tf = logs_lib.import_tensorflow()
    from estimator_trainers import serving  # pylint: disable=import-outside-toplevel
    try:
        checked = serving.check_export(plan.origin, plan.signature_name, plan.check_instances)
    except tf.errors.OpError as e:
        problem = '--origin %s: cannot read it (%s)' % (plan.origin, first_line(e))
        if not dry_run:
            raise UserInputError(problem, flag='--origin') from None
        err.write('note: %s; the export is not checked, the requests serve it as given\n'
                  % problem)
        return ExportCheck(plan.origin, note='not checked: %s' % problem)
    if checked.export_dir != plan.origin:
        err.write('note: --origin %s holds exports; serving the newest, %s\n'
                  % (plan.origin, checked.export_dir))
    if checked.note:
        err.write('note: %s\n' % checked.note)
    else:
        err.write('checked %s: signature %s (inputs %s) predicted %s\n' % (
            checked.export_dir, checked.signature, checked.inputs,
            _short(json.dumps(checked.prediction, sort_keys=True))))
    return ExportCheck(checked.export_dir, checked.signature, checked.inputs,
                       checked.prediction, checked.note)


def _short(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit - 3] + '...'


def _upload_and_deploy(vertex: VertexServing, plan: ServingPlan, endpoint: Json,
                       poll_interval: float, err: TextIO) -> actions.Deployed:
    """Steps 4 and 5 of `deploy`; on any failure or interrupt, `_roll_back`."""
    uploaded: Optional[str] = None
    pending: List[Json] = []
    what = 'version %s of model %s' % (plan.version, plan.model)
    try:
        operation = vertex.start(vertex.upload_request(endpoints.upload_body(
            plan, endpoint.get('displayName'))), 'models.upload in %s' % vertex.parent)
        uploaded = endpoints.model_of_operation(operation.get('name'))
        pending.append(operation)
        response = vertex.wait(operation, 'upload %s' % what, err, poll_interval)
        pending.remove(operation)
        uploaded = response.get('model') or uploaded
        if not uploaded:
            raise google_api.ApiError('models.upload in %s: the answer names no model'
                                      % vertex.parent)
        err.write('uploaded %s\n' % uploaded)
        body = endpoints.deploy_body(plan, uploaded, first=not endpoint.get('deployedModels'),
                                     access_logging=endpoints.access_logging(endpoint))
        operation = vertex.start(vertex.deploy_request(endpoint['name'], body),
                                 'deployModel on %s' % endpoint['name'])
        if not plan.wait:
            err.write('note: --async: not waiting for the deploy (operation %s); if it fails, '
                      '`versions delete %s --model %s` removes the uploaded model\n'
                      % (operation.get('name'), plan.version, plan.model))
            return actions.Deployed(uploaded, endpoint['name'], None)
        pending.append(operation)
        response = vertex.wait(operation, 'deploy %s' % what, err, poll_interval)
        pending.remove(operation)
        return actions.Deployed(uploaded, endpoint['name'], dict(body['deployedModel'], **(
            response.get('deployedModel') or {})))
    except BaseException:
        _roll_back(vertex, plan, endpoint['name'], uploaded, pending, poll_interval, err)
        raise


def _roll_back(vertex: VertexServing, plan: ServingPlan, endpoint_name: str,
               model_name: Optional[str], pending: Sequence[Json], poll_interval: float,
               err: TextIO) -> None:
    """Leaves nothing of a failed deploy: cancels its pending operations,
    undeploys and deletes the uploaded model; says what was removed and what
    is left (with the command that removes it)."""
    removed: List[str] = []
    left: List[str] = []
    try:
        for operation in pending:
            try:
                vertex.cancel_operation(operation['name'])
                vertex.wait(vertex.get_operation(operation['name']),
                            'cancel %s' % operation['name'], err, poll_interval, timeout=600)
            except google_api.ApiError:
                pass  # cancelled (its error says so), or it ended first: what exists is below
        if model_name:
            endpoint = vertex.get_endpoint(endpoint_name)
            for deployed in endpoint.get('deployedModels') or []:
                if _model_id(deployed.get('model')) == _model_id(model_name):
                    step = _undeploy_step(vertex, endpoint, deployed)
                    _run_step(vertex, step, poll_interval, err)
                    removed.append(step.done)
            try:
                _run_step(vertex, Step('delete the uploaded model %s' % model_name,
                                       vertex.delete_model_request(model_name),
                                       'delete %s' % model_name, 'deleted %s' % model_name),
                          poll_interval, err)
                removed.append('deleted %s' % model_name)
            except google_api.ApiError as e:
                if e.status != 404:  # 404: the upload never made it
                    raise
    except (google_api.ApiError, KeyboardInterrupt) as e:
        left.append('%s (%s)' % (model_name, 'interrupted' if isinstance(e, KeyboardInterrupt)
                                 else e))
    err.write('note: rolled back the failed deploy: %s\n'
              % ('; '.join(removed) or 'nothing had been created'))
    if left:
        err.write('warning: left behind: %s; `versions delete %s --model %s` removes it\n'
                  % ('; '.join(left), plan.version, plan.model))
    err.flush()


def _model_id(name: Optional[str]) -> str:
    """`projects/P/locations/R/models/ID[@version]` -> ID (projects go by number or id)."""
    return (name or '').rsplit('/models/', 1)[-1].split('@')[0]


def _print_deploy_dry_run(out: TextIO, plan: ServingPlan, offline: VertexServing,
                          checked: ExportCheck) -> None:
    """The check's result and the requests of a deploy, as JSON."""
    parsed = endpoints.parse_endpoint_name(plan.model)
    endpoint_name = endpoint_placeholder(offline, plan.model)
    model_name = '%s/models/UPLOADED_MODEL_ID' % offline.parent
    requests = []
    if not parsed:
        requests.append(dict(step='find model %s: the endpoint displayed as %s' % (
            plan.model, plan.model), **api.request_json(offline.list_endpoints_request(
                endpoints.model_filter(plan.model)))))
    requests.append(dict(
        step='upload the SavedModel to the Model Registry (an operation, polled)',
        **api.request_json(offline.upload_request(endpoints.upload_body(plan)))))
    requests.append(dict(
        step='deploy it on the endpoint (an operation, polled); the first version takes all '
             'the traffic ("0": the model being deployed), a later one none',
        **api.request_json(offline.deploy_request(endpoint_name, endpoints.deploy_body(
            plan, model_name, first=True)))))
    check = {'export': checked.export_dir, 'signature': checked.signature,
             'inputs': checked.inputs}
    check.update({'note': checked.note} if checked.note else
                 {'prediction': checked.prediction})
    out.write(json.dumps({'check': check, 'requests': requests}, indent=2) + '\n')


# ------------------------------------------------------------------- remove


@dataclasses.dataclass(frozen=True)
class Step:
    """One removal: what it does, its unsent request, how its operation is
    named, and how it is said once done."""
    description: str
    request: api.Request
    what: str
    done: str


def _remove(vertex: VertexServing, action: actions.Remove, err: TextIO) -> List[str]:
    """`Remove`'s steps, in order; returns what was removed."""
    steps, kept = _removal_steps(vertex, _endpoint_to_remove(vertex, action), action.version)
    for note in kept:
        err.write('note: keeping %s\n' % note)
    removed: List[str] = []
    for i, step in enumerate(steps):
        try:
            _run_step(vertex, step, action.poll_interval, err)
        except google_api.ApiError as e:
            raise google_api.ApiError('%s; removed: %s; not removed: %s' % (
                e, '; '.join(removed) or 'nothing', '; '.join(
                    s.description for s in steps[i:])), e.status) from None
        removed.append(step.done)
    return removed


def _endpoint_to_remove(vertex: VertexServing, action: actions.Remove) -> Json:
    """The model's endpoint; one this tool did not create only when named exactly."""
    model, version = action.model, action.version
    endpoint = endpoints.find_model(vertex, model)
    exact = endpoints.parse_endpoint_name(model) is not None
    if not exact and not endpoints.created_here(endpoint):
        raise UserInputError(
            'model %s is Vertex AI endpoint %s, which this tool did not create; to remove '
            'from it anyway, name it exactly: --model %s' % (model, endpoint['name'],
                                                            endpoint['name'])
            if version is not None else
            'model %s is Vertex AI endpoint %s, which this tool did not create; to delete it '
            'anyway, name it exactly: models delete %s' % (model, endpoint['name'],
                                                           endpoint['name']))
    return endpoint


def _remove_dry_run(action: actions.Remove, backend: Backend, out: TextIO, err: TextIO,
                    environ: location.Environ) -> None:
    """`Remove`'s requests, removing nothing: with credentials its lookups (reads)
    are made and the exact requests printed; without credentials, or when Vertex
    AI cannot be reached, the requests are printed with placeholders for what the
    lookups find, and one line says why."""
    try:
        credentials, adc_project = backend.credentials()
    except UserInputError:
        why = backend_lib.NO_CREDENTIALS
        vertex = _offline(action.model, action, environ, err)
    else:
        vertex = backend.serving(*location.resolve(
            action.model, location.SERVING, action.project, action.region_flag, environ, err,
            adc_project), credentials)
        try:
            steps, kept = _removal_steps(vertex, _endpoint_to_remove(vertex, action),
                                         action.version)
        except api.Unreachable as e:
            why = str(e)
        else:
            out.write(json.dumps({'remove': [dict(step=s.description,
                                                  **api.request_json(s.request))
                                             for s in steps], 'keep': kept}, indent=2) + '\n')
            return
    err.write('note: not looked up (%s): the requests name what the lookups find by '
              'placeholders\n' % why)
    out.write(json.dumps({'remove': _placeholder_steps(vertex, action), 'keep': []},
                         indent=2) + '\n')


def _placeholder_steps(vertex: VertexServing, action: actions.Remove) -> List[Json]:
    """`Remove`'s requests with placeholders for what its lookups would find."""
    model, version = action.model, action.version
    endpoint = endpoint_placeholder(vertex, model)
    deployed = 'DEPLOYED_MODEL_OF_%s' % version if version else 'DEPLOYED_MODEL_ID'
    steps = [] if endpoints.parse_endpoint_name(model) else [
        dict(step='find model %s: the endpoint displayed as %s' % (model, model),
             **api.request_json(vertex.list_endpoints_request(endpoints.model_filter(model))))]
    steps.append(dict(step='undeploy %s: each of its deployed models the lookup finds' % (
        'version %s' % version if version else 'every version'), **api.request_json(
            vertex.undeploy_request(endpoint, endpoints.undeploy_body(deployed)))))
    steps.append(dict(step='delete the Vertex AI model this tool uploaded for each, unless '
                           'deployed elsewhere', **api.request_json(vertex.delete_model_request(
                               '%s/models/MODEL_ID' % vertex.parent))))
    if version is None:
        steps.append(dict(step='delete endpoint %s (model %s)' % (endpoint, model),
                          **api.request_json(vertex.delete_endpoint_request(endpoint))))
    return steps


def _removal_steps(vertex: VertexServing, endpoint: Json, version: Optional[str]
                   ) -> Tuple[List[Step], List[str]]:
    """The steps of `Remove` and what it keeps (with why)."""
    leftovers = endpoints.undeployed_versions(vertex, endpoint, version)
    targets = _targets(endpoint, version, bool(leftovers))
    steps: List[Step] = []
    kept: List[str] = []
    current = endpoint
    for target in targets:
        steps.append(_undeploy_step(vertex, current, target))
        current = dict(current, trafficSplit=endpoints.split_without(current, target),
                       deployedModels=[d for d in current.get('deployedModels') or []
                                       if d is not target])
    for target in targets:
        model = _model_or_none(vertex, target.get('model'))
        if model is None:
            continue
        elsewhere = [r for r in model.get('deployedModels') or []
                     if r.get('deployedModelId') != target['id']]
        if not endpoints.created_here(model):
            kept.append('%s, the Vertex AI model of version %s: this tool did not create it'
                        % (model['name'], target.get('displayName')))
        elif elsewhere:
            kept.append('%s, the Vertex AI model of version %s: also deployed on %s' % (
                model['name'], target.get('displayName'), elsewhere[0].get('endpoint')))
        else:
            steps.append(_delete_model_step(vertex, model, target.get('displayName')))
    for model in leftovers:
        steps.append(_delete_model_step(vertex, model, model.get('displayName', '').split(
            '/', 1)[-1] + ', not deployed'))
    if version is None:
        steps.append(Step('delete endpoint %s (model %s)' % (
            endpoint['name'], endpoint.get('displayName', endpoint['name'])),
                          vertex.delete_endpoint_request(endpoint['name']),
                          'delete endpoint %s' % endpoint['name'],
                          'deleted endpoint %s' % endpoint['name']))
    return steps, kept


def _targets(endpoint: Json, version: Optional[str], leftovers: bool) -> List[Json]:
    """The deployed models to undeploy: `version`'s (none when its deploy failed
    and only its uploaded model is left), else all, those without traffic first.

    Raises:
      UserInputError: `version` is the default beside other versions.
    """
    deployed = endpoint.get('deployedModels') or []
    if version is None:
        return sorted(deployed, key=lambda d: endpoints.traffic(endpoint, d))
    if leftovers and not any(version in (d.get('displayName'), d.get('id')) for d in deployed):
        return []
    target = endpoints.find_version(endpoint, version)
    if endpoints.traffic(endpoint, target) and len(deployed) > 1:
        name = endpoint.get('displayName', endpoint['name'])
        others = [d.get('displayName') or d['id'] for d in deployed if d is not target]
        raise UserInputError(
            'version %s is the default of model %s (it takes %d%% of the traffic); make '
            'another the default first (versions set-default %s --model %s), or delete '
            'the model' % (version, name, endpoints.traffic(endpoint, target), others[0],
                           name))
    return [target]


def _delete_model_step(vertex: VertexServing, model: Json, version: Optional[str]) -> Step:
    return Step('delete Vertex AI model %s (version %s)' % (model['name'], version),
                vertex.delete_model_request(model['name']), 'delete %s' % model['name'],
                'deleted Vertex AI model %s' % model['name'])


def _model_or_none(vertex: VertexServing, name: Optional[str]) -> Optional[Json]:
    """The Vertex AI model `name` (a deployed model's), or None when it is gone."""
    if not name:
        return None
    try:
        return vertex.get_model(name)
    except google_api.ApiError as e:
        if e.status == 404:
            return None
        raise


def _undeploy_step(vertex: VertexServing, endpoint: Json, deployed: Json) -> Step:
    body = endpoints.undeploy_body(deployed['id'], endpoints.split_without(endpoint, deployed))
    what = 'version %s (deployed model %s, %s)' % (
        deployed.get('displayName'), deployed['id'], endpoints.machines_of(deployed)[1])
    return Step('undeploy ' + what, vertex.undeploy_request(endpoint['name'], body),
                'undeploy %s' % (deployed.get('displayName') or deployed['id']),
                'undeployed ' + what)


def _run_step(vertex: VertexServing, step: Step, poll_interval: float, err: TextIO) -> None:
    operation = vertex.start(step.request, step.description)
    vertex.wait(operation, step.what, err, poll_interval)
