"""The three patch formats a Kubernetes API server accepts, applied to plain dict objects.

- "merge": JSON merge patch (RFC 7386): maps merge, `null` deletes, lists are replaced.
- "strategic": merge patch, except that the lists Kubernetes declares with a merge key
  (containers by name, volumeMounts by mountPath, ports by containerPort, ...) merge element
  by element, so `kubectl apply` keeps fields it did not send (resources.limits). Lists
  without a `patchMergeKey` in the API types (tolerations, args, ...) are replaced whole.
  `$patch: delete|replace` is honoured; `$setElementOrder/...`, `$retainKeys` and
  `$deleteFromPrimitiveList/...` directives are ignored.
- "json": JSON patch (RFC 6902), delegated to the `jsonpatch` library.
"""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch

PATCH_TYPES = ("merge", "strategic", "json")

# Field name -> merge key, as declared by `patchMergeKey` in the Kubernetes API types we serve.
# Tolerations have none (a strategic patch replaces the list), and one volume may be mounted at
# several paths, so mounts merge by mountPath.
_MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "imagePullSecrets": "name",
    "conditions": "type",
}


class PatchError(ValueError):
    """A patch that is malformed (`invalid_input`) or cannot be applied to the object."""

    def __init__(self, message: str, invalid_input: bool = False) -> None:
        super().__init__(message)
        self.invalid_input = invalid_input


def apply_patch(obj: dict, patch: Any, patch_type: str) -> dict:
    """Return a patched deep copy of `obj`; `obj` itself is left unchanged."""
    if patch_type == "json":
        return _json_patch(obj, patch)
    if patch_type not in PATCH_TYPES:
        raise PatchError(
            f"unknown patch type {patch_type!r}: use one of {', '.join(PATCH_TYPES)}", True
        )
    if not isinstance(patch, dict):
        raise PatchError(
            f"a {patch_type} patch must be a JSON object, got {type(patch).__name__}", True
        )
    strategic = patch_type == "strategic"
    return _merge_map(copy.deepcopy(obj), patch, strategic)


def _json_patch(obj: dict, patch: Any) -> dict:
    if not isinstance(patch, list):
        raise PatchError("a json patch must be a JSON array of operations", True)
    try:
        return jsonpatch.apply_patch(obj, patch, in_place=False)
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as error:
        raise PatchError(f"the json patch cannot be applied: {error}") from error


def _merge_map(target: dict, patch: dict, strategic: bool) -> dict:
    if strategic and patch.get("$patch") == "replace":
        return {key: value for key, value in patch.items() if key != "$patch"}
    for key, value in patch.items():
        if strategic and key.startswith("$"):
            continue
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict):
            if strategic and value.get("$patch") == "delete":
                target.pop(key, None)
                continue
            current = target.get(key)
            base = current if isinstance(current, dict) else {}
            target[key] = _merge_map(base, value, strategic)
        elif strategic and isinstance(value, list) and key in _MERGE_KEYS | {"ports": ""}:
            target[key] = _merge_keyed_list(target.get(key), value, key)
        else:
            target[key] = copy.deepcopy(_strip_directives(value) if strategic else value)
    return target


def _merge_key_for(field: str, items: list) -> str:
    if field != "ports":
        return _MERGE_KEYS[field]
    has_container_port = any(isinstance(item, dict) and "containerPort" in item for item in items)
    return "containerPort" if has_container_port else "port"


def _merge_keyed_list(current: Any, patch_items: list, field: str) -> list:
    merge_key = _merge_key_for(field, patch_items + (current if isinstance(current, list) else []))
    if not all(isinstance(item, dict) for item in patch_items):
        return copy.deepcopy(patch_items)
    if any(item.get("$patch") == "replace" for item in patch_items):
        return [_strip_directives(item) for item in patch_items if item.get("$patch") != "replace"]
    result = copy.deepcopy(current) if isinstance(current, list) else []
    for item in patch_items:
        key_value = item.get(merge_key)
        position = next(
            (
                index
                for index, existing in enumerate(result)
                if isinstance(existing, dict) and existing.get(merge_key) == key_value
            ),
            None,
        )
        if item.get("$patch") == "delete":
            if position is not None:
                del result[position]
        elif position is None:
            result.append(_strip_directives(item))
        else:
            result[position] = _merge_map(result[position], item, strategic=True)
    return result


def _strip_directives(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            key: _strip_directives(item)
            for key, item in value.items()
            if not key.startswith("$") and item is not None
        }
    if isinstance(value, list):
        return [_strip_directives(item) for item in value]
    return copy.deepcopy(value)
