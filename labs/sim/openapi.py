"""The OpenAPI v3 documents the emulator serves: schemas for `kubectl explain`, patch
operations for `kubectl apply`.

`kubectl apply` (strict validation) looks for a patch operation with a `fieldValidation`
parameter for the object's kind before it trusts the server to validate; `kubectl explain`
walks `components.schemas` from the schema carrying the kind's
`x-kubernetes-group-version-kind`. Built-in kinds get their schemas from the same field
table that decodes protobuf bodies (`api_protobuf.message_fields`: types, no
descriptions); a custom kind from the schema file its `ResourceType` names (for the
ClusterPolicy, its CRD's schema). The patch operations declare no request body, so
kubectl never builds OpenAPI-driven strategic merge patches (custom resources get JSON
merge patches, built-in kinds the patches of kubectl's own types, as with a real server).
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from functools import cache
from importlib import resources
from typing import Any

from labs.sim.api_discovery import KUBERNETES_VERSION
from labs.sim.api_protobuf import INT_OR_STRING, QUANTITY, RAW_JSON, TIMES, message_fields
from labs.sim.api_protobuf import message_for as proto_message
from labs.sim.store import ResourceType

_SCALARS: dict[str, dict[str, str]] = {
    "string": {"type": "string"},
    "bool": {"type": "boolean"},
    "int32": {"type": "integer", "format": "int32"},
    "int64": {"type": "integer", "format": "int64"},
    "bytes": {"type": "string", "format": "byte"},
}
# Messages whose JSON form is not an object.
_SPECIAL: dict[str, dict[str, Any]] = {
    QUANTITY: {"type": "string"},
    INT_OR_STRING: {
        "type": "string",
        "format": "int-or-string",
        "x-kubernetes-int-or-string": True,
    },
    **{name: {"type": "string", "format": "date-time"} for name in TIMES},
    **{name: {"type": "object", "x-kubernetes-preserve-unknown-fields": True} for name in RAW_JSON},
}
_FREE_FORM = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}


def schema_name(message: str) -> str:
    """OpenAPI's name for a proto message: k8s.io.api.core.v1.Pod -> io.k8s.api.core.v1.Pod."""
    return "io.k8s." + message.removeprefix("k8s.io.")


def _ref(message: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{schema_name(message)}"}


def _field_schema(kind: str, label: str) -> dict[str, Any]:
    if label == "map":
        _, value = kind.split(":", 1)
        return {"type": "object", "additionalProperties": _field_schema(value, "optional")}
    single = _SCALARS[kind] if kind in _SCALARS else _ref(kind)
    return {"type": "array", "items": single} if label == "repeated" else dict(single)


def _properties(message: str) -> dict[str, Any]:
    properties: dict[str, Any] = {}
    for _, name, kind, label in message_fields()[message].values():
        if label == "inline":
            properties.update(_properties(kind))
        else:
            properties[name] = _field_schema(kind, label)
    return properties


def _message_schema(message: str) -> dict[str, Any]:
    if message in _SPECIAL:
        return dict(_SPECIAL[message])
    return {"type": "object", "properties": _properties(message)}


def _referenced(message: str) -> set[str]:
    """The message and every message its schema refers to."""
    seen: set[str] = set()
    todo = [message]
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        if current in _SPECIAL:
            continue
        for _, _, kind, _ in message_fields()[current].values():
            target = kind.split(":", 1)[-1]
            if target not in _SCALARS:
                todo.append(target)
    return seen


@cache
def _custom_schema(file_name: str) -> dict[str, Any]:
    text = resources.files("labs.sim").joinpath(f"data/{file_name}").read_text()
    return json.loads(text)


def kind_schemas(rtype: ResourceType) -> dict[str, dict[str, Any]]:
    """components.schemas entries for one kind: its own schema first, then what it refers to."""
    gvk = [{"group": rtype.group, "version": rtype.version, "kind": rtype.kind}]
    message = proto_message(rtype.api_version, rtype.kind)
    if message not in message_fields():
        schema = _custom_schema(rtype.schema) if rtype.schema else dict(_FREE_FORM)
        own_name = ".".join(reversed(rtype.group.split("."))) + f".{rtype.version}.{rtype.kind}"
        return {own_name: {**schema, "x-kubernetes-group-version-kind": gvk}}
    own = _message_schema(message)
    own["properties"] = {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        **own["properties"],
    }
    own["x-kubernetes-group-version-kind"] = gvk
    schemas = {schema_name(message): own}
    for other in sorted(_referenced(message) - {message}):
        schemas[schema_name(other)] = _message_schema(other)
    return schemas


def _path_prefix(rtype: ResourceType) -> str:
    return f"api/{rtype.version}" if not rtype.group else f"apis/{rtype.group}/{rtype.version}"


def _patch_path(rtype: ResourceType) -> tuple[str, dict[str, Any]]:
    scope = "namespaces/{namespace}/" if rtype.namespaced else ""
    gvk = {"group": rtype.group, "version": rtype.version, "kind": rtype.kind}
    path = f"/{_path_prefix(rtype)}/{scope}{rtype.plural}/{{name}}"
    return path, {
        "patch": {
            "operationId": f"patch{rtype.kind}",
            "x-kubernetes-action": "patch",
            "x-kubernetes-group-version-kind": gvk,
            "parameters": [
                {"name": "fieldValidation", "in": "query", "schema": {"type": "string"}},
                {"name": "fieldManager", "in": "query", "schema": {"type": "string"}},
            ],
            "responses": {"200": {"description": "OK"}},
        }
    }


def document(types: tuple[ResourceType, ...]) -> dict[str, Any]:
    """`GET /openapi/v3/{prefix}` for one group version (all `types` share it)."""
    paths: dict[str, Any] = {}
    schemas: dict[str, Any] = {}
    for rtype in types:
        if "patch" in rtype.verbs:
            path, operations = _patch_path(rtype)
            paths[path] = operations
        schemas.update(kind_schemas(rtype))
    version = KUBERNETES_VERSION["gitVersion"]
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": version},
        "paths": paths,
        "components": {"schemas": dict(sorted(schemas.items()))},
    }


@cache
def served(types: frozenset[ResourceType]) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """For a set of served types: `GET /openapi/v3` (each document's URL with the content
    hash kubectl caches by) and prefix ("api/v1", "apis/apps/v1") -> that document."""
    by_prefix: dict[str, list[ResourceType]] = defaultdict(list)
    for rtype in sorted(types, key=lambda item: (item.group, item.version, item.plural)):
        by_prefix[_path_prefix(rtype)].append(rtype)
    docs = {prefix: document(tuple(members)) for prefix, members in sorted(by_prefix.items())}
    paths = {}
    for prefix, doc in docs.items():
        digest = hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]
        paths[prefix] = {"serverRelativeURL": f"/openapi/v3/{prefix}?hash={digest.upper()}"}
    return {"paths": paths}, docs
