"""The schemas the Kubernetes manifests are checked against, from package registries.

The TFJob and JobSet CRD files themselves are published in no package
registry (only in their projects' repositories and release assets, which
these tests may not fetch), so each kind is checked against what its own
project publishes on PyPI, generated from the same Go types as its CRD:

- TFJob: `kubeflow-training` 1.9.4, the training operator's Python SDK of
  the v1.9.4 tag, whose models carry every field's JSON name and type
  (`openapi_types`, `attribute_map`); a field it does not list (which the API
  server would prune from the CRD's structural schema) or a wrong type fails.
- JobSet: `kubeflow-trainer-api` 2.3.0, Kubeflow Trainer 2.3's API models,
  which embed JobSet's v1alpha2 types of sigs.k8s.io/jobset v0.12.0 (the
  version Trainer 2.3 pins): their JSON Schema, closed to unknown fields.
- What is Kubernetes' own (pod and job templates, object metadata, the
  NetworkPolicy): `kubernetes-validate` 1.37.0's strict JSON Schemas of the
  Kubernetes OpenAPI (`K8S_VERSION`), unknown fields refused.

The SDKs carry no enums (the CRDs' own `enum`s are not published there), so
values such as `restartPolicy: ExitCode` or `successPolicy.operator: All`
are asserted by the tests that read them.

JobSet's CRDs themselves, of the oldest and newest release supported
(`jobset.SUPPORTED`), are vendored in `tests/k8s_crds` (their README names
source, commit and checksum): `crd_errors` checks a JobSet as the API server
would on create, against a CRD's `openAPIV3Schema` (its defaults applied,
unknown fields refused as `kubectl`'s strict field validation does, its
`enum`s, patterns and required fields, and its CEL rules).
"""
import copy
import functools
import json
import os
import re

import jsonschema
import referencing
import yaml
from kubeflow.training import models as training_models
from kubeflow_trainer_api.models import jobset_v1alpha2_job_set
from kubernetes_validate import utils as kubernetes_validate

K8S_VERSION = '1.36.0'
_SCHEMA_DIR = 'kubernetes-json-schema/v%s-local-strict' % K8S_VERSION
# The Kubernetes types the TFJob SDK refers to -> kubernetes-validate's schema files.
_CORE_FILES = {'V1PodTemplateSpec': 'podtemplatespec-v1.json',
               'V1ObjectMeta': 'objectmeta-meta-v1.json'}


@functools.lru_cache(maxsize=None)
def _core_validator(filename):
    schema = kubernetes_validate.schema_contents('%s/%s' % (_SCHEMA_DIR, filename),
                                                 K8S_VERSION)
    definitions = kubernetes_validate.schema_contents('%s/_definitions.json' % _SCHEMA_DIR,
                                                      K8S_VERSION)
    registry = referencing.Resource.from_contents(schema) @ referencing.Registry()
    registry = referencing.Resource.from_contents(definitions) @ registry
    return jsonschema.Draft202012Validator(schema, registry=registry)


def core_errors(value, filename, path=''):
    """Errors of `value` against a kubernetes-validate strict schema file."""
    return ['%s/%s: %s' % (path, '/'.join(str(p) for p in error.absolute_path),
                           error.message[:300])
            for error in _core_validator(filename).iter_errors(value)]


def tfjob_errors(document):
    """Errors of a TFJob against the v1.9.4 SDK's types (and Kubernetes' for templates)."""
    return _sdk_errors(document, 'KubeflowOrgV1TFJob', 'TFJob')


def _sdk_errors(value, kind, path):
    if kind in _CORE_FILES:
        return core_errors(value, _CORE_FILES[kind], path)
    primitive = {'int': int, 'str': str, 'bool': bool}.get(kind)
    if primitive:
        ok = isinstance(value, primitive) and (primitive is bool or not isinstance(value, bool))
        return [] if ok else ['%s: expected %s, got %r' % (path, kind, value)]
    listed = re.fullmatch(r'list\[(.+)\]', kind)
    if listed:
        if not isinstance(value, list):
            return ['%s: expected a list' % path]
        return [e for i, item in enumerate(value)
                for e in _sdk_errors(item, listed.group(1), '%s/%d' % (path, i))]
    mapped = re.fullmatch(r'dict\(str, (.+)\)', kind)
    if mapped:
        if not isinstance(value, dict):
            return ['%s: expected a mapping' % path]
        return [e for key, item in value.items()
                for e in _sdk_errors(item, mapped.group(1), '%s/%s' % (path, key))]
    model = getattr(training_models, kind)  # an unknown kind fails the test loudly
    if not isinstance(value, dict):
        return ['%s: expected an object (%s)' % (path, kind)]
    fields = {json_name: model.openapi_types[attr]
              for attr, json_name in model.attribute_map.items()}
    errors = ['%s/%s: not a field of %s' % (path, key, kind)
              for key in value if key not in fields]
    return errors + [e for key, item in value.items() if key in fields
                     for e in _sdk_errors(item, fields[key], '%s/%s' % (path, key))]


@functools.lru_cache(maxsize=None)
def _jobset_validator():
    """JobSet's own types, closed to unknown fields; the Kubernetes types they embed
    (the models write a resource quantity as an object) are left to
    kubernetes-validate (`jobset_errors`)."""
    schema = jobset_v1alpha2_job_set.JobsetV1alpha2JobSet.model_json_schema(by_alias=True)
    definitions = schema.get('$defs', {})
    for name in list(definitions):
        if name.startswith('IoK8s'):
            definitions[name] = {}
    for definition in [schema] + list(definitions.values()):
        if 'properties' in definition:
            definition['additionalProperties'] = False
    return jsonschema.Draft202012Validator(schema)


def jobset_errors(document):
    """Errors of a JobSet against JobSet v0.12.0's types (closed), its model's
    own type checks, and its metadata and each job template against
    Kubernetes' strict schemas."""
    errors = ['JobSet/%s: %s' % ('/'.join(str(p) for p in error.absolute_path),
                                 error.message[:300])
              for error in _jobset_validator().iter_errors(document)]
    errors += core_errors(document.get('metadata'), 'objectmeta-meta-v1.json',
                          'JobSet/metadata')
    try:
        jobset_v1alpha2_job_set.JobsetV1alpha2JobSet.from_dict(copy.deepcopy(document))
    except ValueError as e:  # pydantic's ValidationError is a ValueError
        errors.append('JobSet: %s' % str(e)[:500])
    for i, replicated in enumerate(document.get('spec', {}).get('replicatedJobs', [])):
        errors += core_errors(replicated.get('template'), 'jobtemplatespec-batch-v1.json',
                              'JobSet/spec/replicatedJobs/%d/template' % i)
    return errors


CRD_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'k8s_crds')
# The CEL rules (`x-kubernetes-validations`) of the vendored CRDs, as Python
# over the object they sit on; a rule not listed fails `crd_errors` loudly.
# `self == oldSelf` compares with the stored object: updates only, never a create.
_CEL_RULES = {
    'self == oldSelf': lambda value: True,
    "!(has(self.startupPolicy) && self.startupPolicy.startupPolicyOrder == 'InOrder' && "
    'self.replicatedJobs.exists(x, has(x.dependsOn)))': lambda spec: not (
        spec.get('startupPolicy', {}).get('startupPolicyOrder') == 'InOrder'
        and any('dependsOn' in job for job in spec.get('replicatedJobs', []))),
    '!(has(self.replicatedJobs[0].dependsOn))':
        lambda spec: 'dependsOn' not in spec['replicatedJobs'][0],
    'self.templates.all(t, !has(t.metadata.namespace) || size(t.metadata.namespace) == 0)':
        lambda policy: not any(t.get('metadata', {}).get('namespace')
                               for t in policy['templates']),
}


@functools.lru_cache(maxsize=None)
def jobset_crd_schema(version):
    """The `openAPIV3Schema` of JobSet `version`'s vendored CRD (v1alpha2)."""
    with open(os.path.join(CRD_DIR, 'jobset-%s.yaml' % version), 'rb') as f:
        crd = yaml.load(f, Loader=yaml.CSafeLoader)  # 0.8 MB: libyaml's parser
    served, = [v for v in crd['spec']['versions'] if v['name'] == 'v1alpha2']
    return served['schema']['openAPIV3Schema']


@functools.lru_cache(maxsize=None)
def _crd_validator(version):
    """A validator of the CRD's schema closed to unknown fields where the CRD
    does not keep them (`x-kubernetes-preserve-unknown-fields`)."""
    schema = copy.deepcopy(jobset_crd_schema(version))

    def close(node):
        if isinstance(node, dict):
            if ('properties' in node and 'additionalProperties' not in node
                    and not node.get('x-kubernetes-preserve-unknown-fields')):
                node['additionalProperties'] = False
            for value in node.values():
                close(value)
        elif isinstance(node, list):
            for value in node:
                close(value)

    close(schema)
    return jsonschema.Draft4Validator(schema)  # OpenAPI 3.0's schemas are draft 4's


def crd_defaulted(document, schema):
    """`document` with the schema's `default`s filled in where absent, as the
    API server does before it validates (e.g. `groupName: default`, v0.12)."""
    value = copy.deepcopy(document)

    def fill(node, value):
        if isinstance(value, dict):
            for key, prop in node.get('properties', {}).items():
                if key not in value and 'default' in prop:
                    value[key] = copy.deepcopy(prop['default'])
                if key in value:
                    fill(prop, value[key])
            extra = node.get('additionalProperties')
            if isinstance(extra, dict):
                for key in value:
                    fill(extra, value[key])
        elif isinstance(value, list) and isinstance(node.get('items'), dict):
            for item in value:
                fill(node['items'], item)

    fill(schema, value)
    return value


def _cel_errors(node, value, path):
    errors = []
    for rule in node.get('x-kubernetes-validations', []):
        check = _CEL_RULES.get(rule['rule'])
        if check is None:
            errors.append('%s: CEL rule not reproduced here: %s' % (path, rule['rule']))
        elif not check(value):
            errors.append('%s: %s' % (path, rule['message']))
    if isinstance(value, dict):
        for key, prop in node.get('properties', {}).items():
            if key in value:
                errors += _cel_errors(prop, value[key], '%s/%s' % (path, key))
    elif isinstance(value, list) and isinstance(node.get('items'), dict):
        for i, item in enumerate(value):
            errors += _cel_errors(node['items'], item, '%s/%d' % (path, i))
    return errors


def crd_errors(document, version):
    """Errors of a JobSet against JobSet `version`'s vendored CRD, as the API
    server finds them on create: its defaults applied, then its schema
    (unknown fields refused) and its CEL rules."""
    schema = jobset_crd_schema(version)
    value = crd_defaulted(document, schema)
    errors = ['JobSet %s/%s: %s' % (version, '/'.join(str(p) for p in error.absolute_path),
                                     error.message[:300])
              for error in _crd_validator(version).iter_errors(value)]
    return errors + _cel_errors(schema, value, 'JobSet %s' % version)


def manifest_errors(documents):
    """Errors of every object of a manifest, each against its kind's schema."""
    errors = []
    for document in documents:
        kind = document.get('kind')
        if kind == 'TFJob':
            errors += tfjob_errors(document)
        elif kind == 'JobSet':
            errors += jobset_errors(document)
        else:
            try:
                kubernetes_validate.validate(document, K8S_VERSION, strict=True)
            except kubernetes_validate.ValidationError as e:
                errors.append('%s: %s' % (kind, e.message[:300]))
    return errors


def dumps(documents):
    """For assertion messages."""
    return json.dumps(documents, indent=1)[:3000]
