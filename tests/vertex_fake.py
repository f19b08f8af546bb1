"""A stateful stand-in for Vertex AI's endpoints and models, behind googleapiclient.

`FakeVertex` is an httplib2-compatible transport (as googleapiclient's
`HttpMock` is) that keeps endpoints, models, deployed models and
long-running operations in memory, so the serving commands run through the
real `aiplatform v1` service objects and a test asserts what exists
afterwards ("nothing is left half-deployed"), not only what was sent.

- Every request body is checked against the bundled discovery document's
  request schema of the method it calls; a mismatch is answered 400 and
  kept in `schema_errors`.
- Operations finish after `polls` gets (`done: false` before), so callers
  must poll them; their effects (a model uploaded, a model deployed) happen
  only when they finish; `:cancel` ends one with CANCELLED and no effect.
- Failures are injected per method: `fail[method] = (status, message)`
  answers the call with an HTTP error; `fail_operation[method] = message`
  lets it start and ends its operation with that error.
- Resource names carry the project number, as Vertex AI's answers do;
  requests may name the project by id or number.
"""
import collections
import json
import re
import urllib.parse

import httplib2

from estimator_trainers.tools.cloud import schema

Request = collections.namedtuple('Request', 'method path query body')
PROJECT_NUMBER = '123456789'
_METHODS = (
    # (HTTP method, path pattern after v1/, discovery method)
    ('GET', r'(?P<parent>projects/[^/]+/locations/[^/]+)/endpoints', 'endpoints.list'),
    ('POST', r'(?P<parent>projects/[^/]+/locations/[^/]+)/endpoints', 'endpoints.create'),
    ('POST', r'(?P<name>projects/[^/]+/locations/[^/]+/endpoints/[^/:]+):deployModel',
     'endpoints.deployModel'),
    ('POST', r'(?P<name>projects/[^/]+/locations/[^/]+/endpoints/[^/:]+):undeployModel',
     'endpoints.undeployModel'),
    ('POST', r'(?P<name>projects/[^/]+/locations/[^/]+/endpoints/[^/:]+):predict',
     'endpoints.predict'),
    ('POST', r'(?P<name>projects/[^/]+/locations/[^/]+(/(models|endpoints)/[^/]+)?'
             r'/operations/[^/:]+):cancel', 'operations.cancel'),
    ('GET', r'(?P<name>projects/[^/]+/locations/[^/]+(/(models|endpoints)/[^/]+)?'
            r'/operations/[^/:]+)', 'operations.get'),
    ('GET', r'(?P<name>projects/[^/]+/locations/[^/]+/endpoints/[^/:]+)', 'endpoints.get'),
    ('PATCH', r'(?P<name>projects/[^/]+/locations/[^/]+/endpoints/[^/:]+)', 'endpoints.patch'),
    ('DELETE', r'(?P<name>projects/[^/]+/locations/[^/]+/endpoints/[^/:]+)',
     'endpoints.delete'),
    ('POST', r'(?P<parent>projects/[^/]+/locations/[^/]+)/models:upload', 'models.upload'),
    ('GET', r'(?P<parent>projects/[^/]+/locations/[^/]+)/models', 'models.list'),
    ('GET', r'(?P<name>projects/[^/]+/locations/[^/]+/models/[^/:]+)', 'models.get'),
    ('DELETE', r'(?P<name>projects/[^/]+/locations/[^/]+/models/[^/:]+)', 'models.delete'),
)


class FakeVertex:
    """Vertex AI endpoints and models in memory, as an httplib2 transport."""

    def __init__(self, project='my-project', predictions=None, polls=1):
        """
        Args:
          predictions: `instances -> predictions` of `:predict` (default: the
            instances' count as `{"value": i}` rows).
          polls: gets an operation answers `done: false` before it finishes.
        """
        self.project = project
        self.endpoints = {}  # name -> endpoint resource
        self.models = {}  # name -> model resource
        self.operations = {}  # name -> [operation, effect, polls left]
        self.requests = []
        self.schema_errors = []
        self.fail = {}
        self.fail_operation = {}
        self.polls = polls
        self.predictions = predictions or (lambda instances: [
            {'value': i} for i in range(len(instances))])
        self._ids = iter(range(1000, 10**6))

    # The transport.

    def request(self, uri, method='GET', body=None, headers=None, redirections=1,
                connection_type=None):  # pylint: disable=unused-argument
        parsed = urllib.parse.urlsplit(uri)
        path = urllib.parse.unquote(parsed.path)
        assert path.startswith('/v1/'), uri
        path = path[len('/v1/'):]
        query = dict(urllib.parse.parse_qsl(parsed.query))
        data = json.loads(body) if body else None
        self.requests.append(Request(method, path, query, data))
        for http_method, pattern, name in _METHODS:
            match = re.fullmatch(pattern, path)
            if http_method == method and match:
                break
        else:
            return self._answer(404, {'error': {'code': 404, 'message': 'no route %s %s'
                                                % (method, path)}})
        discovery = schema.discovery_document('aiplatform', 'v1')
        node = discovery['resources']['projects']['resources']['locations']['resources']
        resource, verb = name.split('.')
        request_ref = node[resource]['methods'][verb].get('request')
        if request_ref:
            try:
                schema.check('aiplatform', 'v1', request_ref['$ref'], data)
            except schema.SchemaError as e:
                self.schema_errors.append('%s: %s' % (name, e))
                return self._error(400, 'invalid body: %s' % e)
        if name in self.fail:
            return self._error(*self.fail[name])
        try:
            return self._answer(200, getattr(self, '_' + name.replace('.', '_'))(
                data=data, query=query, **match.groupdict()))
        except _Refused as e:
            return self._error(e.status, str(e))

    @staticmethod
    def _answer(status, content):
        return httplib2.Response({'status': str(status)}), json.dumps(content).encode()

    def _error(self, status, message):
        return self._answer(status, {'error': {'code': status, 'message': message}})

    # Names.

    def _canonical(self, name):
        """Resource names with the project number, as Vertex AI writes them."""
        return re.sub(r'^projects/[^/]+/', 'projects/%s/' % PROJECT_NUMBER, name)

    def _parent(self, parent):
        return self._canonical(parent)

    def _new_id(self):
        return str(next(self._ids))

    # Operations.

    def _start(self, under, method, effect):
        name = '%s/operations/%s' % (under, self._new_id())
        if method in self.fail_operation:
            message = self.fail_operation[method]

            def effect(message=message):
                raise _Refused(9, message)
        metadata = {'genericMetadata': {}}
        if method == 'endpoints.deployModel':
            metadata['deploymentStage'] = 'STARTING_MODEL_SERVER'
        self.operations[name] = [{'name': name, 'done': False, 'metadata': metadata}, effect,
                                 self.polls]
        return self.operations[name][0]

    def _operations_get(self, name, data, query):  # pylint: disable=unused-argument
        entry = self.operations.get(self._canonical(name))
        if entry is None:
            raise _Refused(404, 'no operation %s' % name)
        operation, effect, left = entry
        if operation['done']:
            return operation
        if left > 0:
            entry[2] -= 1
            return operation
        try:
            operation.update(done=True, response=effect())
        except _Refused as e:
            operation.update(done=True, error={'code': e.status, 'message': str(e)})
        return operation

    def _operations_cancel(self, name, data, query):  # pylint: disable=unused-argument
        entry = self.operations[self._canonical(name)]
        if not entry[0]['done']:
            entry[0].update(done=True, error={'code': 1, 'message': 'CANCELLED'})
        return {}

    def finish_all(self):
        """Polls every pending operation to its end (what Vertex AI does meanwhile)."""
        for name in list(self.operations):
            while not self.operations[name][0]['done']:
                self._operations_get(name, None, None)

    # Endpoints.

    def _endpoints_list(self, parent, data, query):  # pylint: disable=unused-argument
        found = list(self.endpoints.values())
        wanted = re.fullmatch(r'display_name="(.*)"', query.get('filter', ''))
        if query.get('filter') and not wanted:
            raise _Refused(400, 'filter %r not understood by the fake' % query['filter'])
        if wanted:
            found = [e for e in found if e['displayName'] == wanted.group(1)]
        return {'endpoints': found} if found else {}

    def _endpoints_create(self, parent, data, query):  # pylint: disable=unused-argument
        name = '%s/endpoints/%s' % (self._parent(parent), self._new_id())

        def effect():
            endpoint = dict(data, name=name, createTime='2026-11-27T08:00:00Z')
            self.endpoints[name] = endpoint
            return dict(endpoint, **{'@type': 'type.googleapis.com/'
                                              'google.cloud.aiplatform.v1.Endpoint'})
        return self._start(name, 'endpoints.create', effect)

    def _endpoint(self, name):
        endpoint = self.endpoints.get(self._canonical(name))
        if endpoint is None:
            raise _Refused(404, 'Endpoint %s not found' % name)
        return endpoint

    def _endpoints_get(self, name, data, query):  # pylint: disable=unused-argument
        return self._endpoint(name)

    def _endpoints_patch(self, name, data, query):
        endpoint = self._endpoint(name)
        assert query.get('updateMask') == 'traffic_split', query
        split = data.get('trafficSplit') or {}
        ids = {d['id'] for d in endpoint.get('deployedModels', [])}
        if sum(split.values()) != 100 or not set(split) <= ids:
            raise _Refused(400, 'traffic split %s must add up to 100 over %s' % (split, ids))
        endpoint['trafficSplit'] = dict(split)
        return endpoint

    def _endpoints_delete(self, name, data, query):  # pylint: disable=unused-argument
        endpoint = self._endpoint(name)
        if endpoint.get('deployedModels'):
            raise _Refused(400, 'Endpoint %s has deployed models' % name)
        name = endpoint['name']

        def effect():
            del self.endpoints[name]
            return {}
        return self._start(re.sub(r'/endpoints/.*', '', name), 'endpoints.delete', effect)

    # pylint: disable-next=invalid-name,unused-argument
    def _endpoints_deployModel(self, name, data, query):
        endpoint = self._endpoint(name)
        deployed = dict(data['deployedModel'])
        model = self.models.get(self._canonical(deployed['model']))
        if model is None:
            raise _Refused(404, 'Model %s not found' % deployed['model'])

        def effect():
            deployed.update(id=self._new_id(), model=model['name'],
                            createTime='2026-11-27T08:10:00Z')
            endpoint.setdefault('deployedModels', []).append(deployed)
            split = data.get('trafficSplit')
            if split:
                endpoint['trafficSplit'] = {deployed['id'] if k == '0' else k: v
                                            for k, v in split.items()}
            model.setdefault('deployedModels', []).append(
                {'endpoint': endpoint['name'], 'deployedModelId': deployed['id']})
            return {'deployedModel': dict(deployed)}
        return self._start(endpoint['name'], 'endpoints.deployModel', effect)

    # pylint: disable-next=invalid-name,unused-argument
    def _endpoints_undeployModel(self, name, data, query):
        endpoint = self._endpoint(name)
        target = data['deployedModelId']
        deployed = [d for d in endpoint.get('deployedModels', []) if d['id'] == target]
        if not deployed:
            raise _Refused(404, 'DeployedModel %s not found' % target)
        split = data.get('trafficSplit') or endpoint.get('trafficSplit') or {}
        others = [d for d in endpoint['deployedModels'] if d['id'] != target]
        if others and split.get(target):
            raise _Refused(400, 'DeployedModel %s has traffic; give a traffic split' % target)

        def effect():
            endpoint['deployedModels'] = others
            endpoint['trafficSplit'] = {k: v for k, v in split.items() if k != target} \
                if others else {}
            model = self.models.get(deployed[0]['model'])
            if model is not None:
                model['deployedModels'] = [r for r in model.get('deployedModels', [])
                                           if r['deployedModelId'] != target]
            return {}
        return self._start(endpoint['name'], 'endpoints.undeployModel', effect)

    def _endpoints_predict(self, name, data, query):  # pylint: disable=unused-argument
        endpoint = self._endpoint(name)
        split = endpoint.get('trafficSplit') or {}
        serving = [d for d in endpoint.get('deployedModels', []) if split.get(d['id'])]
        if not serving:
            raise _Refused(400, 'Endpoint %s has no deployed model taking traffic' % name)
        chosen = max(serving, key=lambda d: split[d['id']])
        return {'predictions': self.predictions(data['instances']),
                'deployedModelId': chosen['id'], 'model': chosen['model']}

    # Models.

    def _models_upload(self, parent, data, query):  # pylint: disable=unused-argument
        name = '%s/models/%s' % (self._parent(parent), self._new_id())

        def effect():
            self.models[name] = dict(data['model'], name=name, versionId='1',
                                     createTime='2026-11-27T08:05:00Z')
            return {'model': name}
        return self._start(name, 'models.upload', effect)

    def _models_list(self, parent, data, query):  # pylint: disable=unused-argument
        wanted = re.fullmatch(r'labels\.([a-z_-]+)="(.*)"', query.get('filter', ''))
        if not wanted:
            raise _Refused(400, 'filter %r not understood by the fake' % query.get('filter'))
        found = [m for m in self.models.values()
                 if (m.get('labels') or {}).get(wanted.group(1)) == wanted.group(2)]
        return {'models': found} if found else {}

    def _models_get(self, name, data, query):  # pylint: disable=unused-argument
        model = self.models.get(self._canonical(name))
        if model is None:
            raise _Refused(404, 'Model %s not found' % name)
        return model

    def _models_delete(self, name, data, query):  # pylint: disable=unused-argument
        model = self._models_get(name, data, query)
        if model.get('deployedModels'):
            raise _Refused(400, 'Model %s is deployed on %s' % (
                name, model['deployedModels'][0]['endpoint']))
        name = model['name']

        def effect():
            del self.models[name]
            return {}
        return self._start(re.sub(r'/models/.*', '', name), 'models.delete', effect)

    # Set-up for tests.

    def add_endpoint(self, display_name, labels=None, region='us-central1'):
        """An endpoint made elsewhere (the console), without this tool's label."""
        name = 'projects/%s/locations/%s/endpoints/%s' % (PROJECT_NUMBER, region,
                                                          self._new_id())
        self.endpoints[name] = {'name': name, 'displayName': display_name,
                                'labels': dict(labels or {})}
        return self.endpoints[name]

    def calls(self):
        """`METHOD path` of every request, operation polls left out."""
        return ['%s %s' % (r.method, r.path) for r in self.requests
                if '/operations/' not in r.path]


class _Refused(Exception):
    def __init__(self, status, message):
        super().__init__(message)
        self.status = status
