"""The `scale` subresource (autoscaling/v1 Scale) of Deployments, which `kubectl scale` uses.

A Scale is a view: `spec.replicas` is the Deployment's `spec.replicas`, `status.replicas`
its `status.replicas`, `status.selector` its label selector as a string. Writing one (PUT
or any patch type) changes only the Deployment's `spec.replicas`, atomically, honouring a
resourceVersion the writer names.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from labs.sim.api_patch import PatchError, apply_patch
from labs.sim.store import (
    BadRequest,
    Invalid,
    ObjectStore,
    ResourceType,
    check_resource_version,
)

SCALE_GROUP_VERSION = ("autoscaling", "v1")
_META_FIELDS = ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")


def scale_of(obj: dict) -> dict:
    """The Scale view of a scalable object."""
    spec = obj.get("spec") or {}
    labels = (spec.get("selector") or {}).get("matchLabels") or {}
    group, version = SCALE_GROUP_VERSION
    return {
        "kind": "Scale",
        "apiVersion": f"{group}/{version}",
        "metadata": {key: obj["metadata"][key] for key in _META_FIELDS if key in obj["metadata"]},
        "spec": {"replicas": spec.get("replicas", 1)},
        "status": {
            "replicas": (obj.get("status") or {}).get("replicas", 0),
            "selector": ",".join(f"{key}={value}" for key, value in sorted(labels.items())),
        },
    }


def read_scale(store: ObjectStore, rtype: ResourceType, name: str, namespace: str | None) -> dict:
    return scale_of(store.get(rtype, name, namespace))


def replace_scale(
    store: ObjectStore, rtype: ResourceType, name: str, namespace: str | None, body: Any
) -> dict:
    """PUT: `body` is the whole Scale the client wants."""
    return _write(store, rtype, name, namespace, lambda _current: body)


def patch_scale(
    store: ObjectStore,
    rtype: ResourceType,
    name: str,
    namespace: str | None,
    patch: Any,
    patch_type: str,
) -> dict:
    """PATCH: `patch` (merge, strategic or json) applies to the current Scale."""

    def patched(current: dict) -> Any:
        try:
            return apply_patch(current, patch, patch_type)
        except PatchError as error:
            raise (BadRequest if error.invalid_input else Invalid)(str(error)) from error

    return _write(store, rtype, name, namespace, patched)


def _write(
    store: ObjectStore,
    rtype: ResourceType,
    name: str,
    namespace: str | None,
    wanted_from: Callable[[dict], Any],
) -> dict:
    def change(obj: dict) -> None:
        wanted = wanted_from(scale_of(obj))
        if not isinstance(wanted, dict):
            raise BadRequest(f"a Scale must be a JSON object, got {type(wanted).__name__}")
        metadata = wanted.get("metadata") or {}
        if metadata.get("name", name) != name:
            raise BadRequest(
                f"the name of the Scale ({metadata['name']}) does not match the name on the URL "
                f"({name})"
            )
        check_resource_version(rtype, obj, metadata.get("resourceVersion"))
        replicas = (wanted.get("spec") or {}).get("replicas", 0)
        if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
            raise Invalid(
                f'Scale.autoscaling "{name}" is invalid: spec.replicas: Invalid value: '
                f"{replicas!r}: must be greater than or equal to 0"
            )
        obj.setdefault("spec", {})["replicas"] = replicas

    return scale_of(store.update(rtype, name, change, namespace))
