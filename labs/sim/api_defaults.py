"""Shape stored objects the way a real API server returns them.

Two things clients depend on:
- resource quantities are strings ("1", "500m"): the kubernetes client (37+) rejects
  `nvidia.com/gpu: 1` as a number;
- fields Go always serializes (no `omitempty`) are present with their zero values when
  their parent is: the client rejects, for example, a DaemonSet status without
  `numberMisscheduled` or a node's `nodeInfo` without `bootID`.
Only the parents named below are filled, and only when the writer gave that parent.
"""

from __future__ import annotations

from typing import Any

_QUANTITY_MAPS = frozenset({"limits", "requests", "capacity", "allocatable", "hard", "used"})

_CONDITION = {"type": "", "status": ""}
_CONTAINER_STATUS = {"name": "", "image": "", "imageID": "", "ready": False, "restartCount": 0}

# kind -> (path to a parent, where "[]" walks every list element; the zero-valued fields)
_ZERO_FIELDS: dict[str, list[tuple[str, dict]]] = {
    "Node": [
        (
            "status.nodeInfo",
            dict.fromkeys(
                (
                    "machineID",
                    "systemUUID",
                    "bootID",
                    "kernelVersion",
                    "osImage",
                    "containerRuntimeVersion",
                    "kubeletVersion",
                    "kubeProxyVersion",
                    "operatingSystem",
                    "architecture",
                ),
                "",
            ),
        ),
        ("status.conditions[]", _CONDITION),
        ("status.addresses[]", {"type": "", "address": ""}),
        ("spec.taints[]", {"key": "", "effect": ""}),
    ],
    "Pod": [
        ("status.conditions[]", _CONDITION),
        ("status.containerStatuses[]", _CONTAINER_STATUS),
        ("status.initContainerStatuses[]", _CONTAINER_STATUS),
        ("status.containerStatuses[].state.terminated", {"exitCode": 0}),
        ("status.containerStatuses[].lastState.terminated", {"exitCode": 0}),
    ],
    "DaemonSet": [
        (
            "status",
            dict.fromkeys(
                (
                    "currentNumberScheduled",
                    "desiredNumberScheduled",
                    "numberMisscheduled",
                    "numberReady",
                ),
                0,
            ),
        ),
        ("status.conditions[]", _CONDITION),
    ],
    "Deployment": [("status.conditions[]", _CONDITION)],
    "Job": [("status.conditions[]", _CONDITION)],
}


def _parents(obj: Any, path: list[str]) -> list[dict]:
    if not path:
        return [obj] if isinstance(obj, dict) else []
    head, rest = path[0], path[1:]
    if not isinstance(obj, dict):
        return []
    if head.endswith("[]"):
        items = obj.get(head[:-2])
        if not isinstance(items, list):
            return []
        return [parent for item in items for parent in _parents(item, rest)]
    return _parents(obj.get(head), rest) if head in obj else []


def _quantity(value: object) -> object:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return value
    if float(value).is_integer():
        return str(int(value))
    return f"{round(value * 1000)}m"


def normalize_quantities(obj: Any) -> Any:
    """Write resource quantities as strings, in place; returns `obj`."""
    if isinstance(obj, dict):
        for key, value in obj.items():
            if key in _QUANTITY_MAPS and isinstance(value, dict):
                obj[key] = {name: _quantity(amount) for name, amount in value.items()}
            else:
                normalize_quantities(value)
    elif isinstance(obj, list):
        for item in obj:
            normalize_quantities(item)
    return obj


def as_served(kind: str, obj: dict) -> dict:
    """Normalize quantities and fill always-serialized zero fields of `obj` in place."""
    normalize_quantities(obj)
    for path, zeros in _ZERO_FIELDS.get(kind, ()):
        for parent in _parents(obj, path.split(".")):
            for key, zero in zeros.items():
                parent.setdefault(key, zero)
    return obj
