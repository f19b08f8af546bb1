"""Checks request bodies against the API's bundled discovery document.

google-api-python-client ships the discovery documents of `aiplatform v1`
and `ml v1`; their `schemas` name every field of a request body with its
type. A body built from a config is checked here before it is printed or
sent, so that a misspelt field or an int64 sent as a number never reaches
the service (which would reject it, or worse, ignore it).
"""
import functools
import json
from typing import Any, Dict, Mapping, NoReturn

from googleapiclient import discovery_cache


class SchemaError(ValueError):
    """A body that does not match the discovery schema; names the field path."""


@functools.lru_cache(maxsize=None)
def discovery_document(api: str, version: str) -> Dict[str, Any]:
    """The bundled discovery document of `api` `version`, parsed."""
    text = discovery_cache.get_static_doc(api, version)
    if text is None:
        raise LookupError('no bundled discovery document for %s %s' % (api, version))
    document: Dict[str, Any] = json.loads(text)
    return document


def request_schema(api: str, version: str, method_path: str) -> str:
    """The request schema name of a method, e.g. `projects.jobs.create`."""
    node = discovery_document(api, version)
    *resources, method = method_path.split('.')
    for name in resources:
        node = node['resources'][name]
    ref: str = node['methods'][method]['request']['$ref']
    return ref


def check(api: str, version: str, schema_name: str, body: Any) -> None:
    """Raises `SchemaError` unless `body` fits schema `schema_name` recursively.

    Checked: every field exists in the schema and is not output-only; JSON
    types (int64/uint64 as decimal strings, int32 as integers); enum values.
    """
    schemas = discovery_document(api, version)['schemas']
    _check_value(schemas, {'$ref': schema_name}, body, schema_name)


def _check_value(schemas: Mapping[str, Any], spec: Mapping[str, Any], value: Any,
                 path: str) -> None:
    if '$ref' in spec:
        schema = schemas[spec['$ref']]
        if schema.get('type', 'object') == 'object':
            return _check_object(schemas, schema, value, path)
        spec = schema
    kind = spec.get('type')
    fmt = spec.get('format')
    if kind == 'string':
        if not isinstance(value, str):
            _fail(path, 'expected a string, got %r' % (value,))
        if fmt in ('int64', 'uint64'):
            try:
                int(value)
            except ValueError:
                _fail(path, 'expected an %s as a decimal string, got %r' % (fmt, value))
        if 'enum' in spec and value not in spec['enum']:
            _fail(path, '%r is not one of %s' % (value, ', '.join(spec['enum'])))
    elif kind == 'integer':
        if isinstance(value, bool) or not isinstance(value, int):
            _fail(path, 'expected an integer, got %r' % (value,))
        if fmt == 'int32' and not -2**31 <= value < 2**31:
            _fail(path, '%d is out of int32 range' % value)
    elif kind == 'number':
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            _fail(path, 'expected a number, got %r' % (value,))
    elif kind == 'boolean':
        if not isinstance(value, bool):
            _fail(path, 'expected true or false, got %r' % (value,))
    elif kind == 'array':
        if not isinstance(value, list):
            _fail(path, 'expected a list, got %r' % (value,))
        for i, item in enumerate(value):
            _check_value(schemas, spec['items'], item, '%s[%d]' % (path, i))
    elif kind == 'object':
        _check_object(schemas, spec, value, path)
    elif kind != 'any':
        _fail(path, 'schema type %r is not understood' % kind)


def _check_object(schemas: Mapping[str, Any], schema: Mapping[str, Any], value: Any,
                  path: str) -> None:
    if not isinstance(value, dict):
        _fail(path, 'expected an object, got %r' % (value,))
    properties = schema.get('properties')
    extra = schema.get('additionalProperties')
    for key, item in value.items():
        field_path = '%s.%s' % (path, key)
        if properties is not None and key in properties:
            prop = properties[key]
            if prop.get('readOnly'):
                _fail(field_path, 'is output only')
            _check_value(schemas, prop, item, field_path)
        elif extra is not None:
            _check_value(schemas, extra, item, field_path)
        else:
            _fail(field_path, 'unknown field')


def _fail(path: str, message: str) -> NoReturn:
    raise SchemaError('%s: %s' % (path, message))
