"""Shape stored objects the way a real API server returns them.

Two things clients depend on:
- resource quantities are strings ("1", "500m"): the kubernetes client (37+) rejects
  `nvidia.com/gpu: 1` as a number;
- fields Go always serializes (no `omitempty`) are present with their zero values when
  their parent is: the client rejects, for example, a DaemonSet status without
  `numberMisscheduled` or a node's `nodeInfo` without `bootID`.
Only the parents named below are filled, and only when the writer gave that parent.

`invalid_quantities` finds the quantities a real API server would refuse, so one bad pod
is turned away at the door instead of stalling the scheduler later.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from kubernetes.utils import parse_quantity

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
# kind -> top-level fields the API server defaults when the writer leaves them out.
_DEFAULTS: dict[str, dict[str, str]] = {"Secret": {"type": "Opaque"}}
# EKS gives a cluster in a 192.168.0.0/16 VPC the service range 10.100.0.0/16.
SERVICE_CIDR = ipaddress.ip_network("10.100.0.0/16")


def _new_service(service: dict) -> None:
    """A ClusterIP from the service range (derived from the uid) and the spec's defaults."""
    spec = service.setdefault("spec", {})
    spec.setdefault("type", "ClusterIP")
    if not spec.get("clusterIP") and spec["type"] != "ExternalName":
        offset = 10 + int(service["metadata"]["uid"].replace("-", "")[:8], 16) % 65000
        spec["clusterIP"] = str(SERVICE_CIDR.network_address + offset)
        spec["clusterIPs"] = [spec["clusterIP"]]
    spec.setdefault("sessionAffinity", "None")
    spec.setdefault("ipFamilies", ["IPv4"])
    spec.setdefault("ipFamilyPolicy", "SingleStack")
    spec.setdefault("internalTrafficPolicy", "Cluster")
    for port in spec.get("ports") or []:
        port.setdefault("protocol", "TCP")
        port.setdefault("targetPort", port.get("port"))


# kind -> what the API server assigns to a new object of that kind (uid already set).
ON_CREATE: dict[str, Callable[[dict], None]] = {"Service": _new_service}


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


_QUANTITY_SYNTAX = r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
QUANTITY_FORMAT = f"quantities must match the regular expression '{_QUANTITY_SYNTAX}'"


def quantity(value: object) -> Decimal:
    """A Kubernetes quantity ("100m", "70Mi", "1e3", 2) as a number of base units.

    ValueError names the value when it is not one (the kubernetes client's parser alone
    would take "NaN" or " 1").
    """
    text = str(value)
    if isinstance(value, bool) or not re.fullmatch(_QUANTITY_SYNTAX, text):
        raise ValueError(f"not a Kubernetes quantity: {value!r} (examples: 100m, 70Mi, 1)")
    try:
        return parse_quantity(text)
    except ValueError:
        raise ValueError(
            f"not a Kubernetes quantity: {value!r} (examples: 100m, 70Mi, 1)"
        ) from None


def invalid_quantities(obj: Any, path: str = "") -> list[tuple[str, object, str]]:
    """(field path as Kubernetes prints it, value, why) for every quantity that does not parse
    or is negative, e.g. ("spec.containers[0].resources.limits[nvidia.com/gpu]", "lots", ...)."""
    found: list[tuple[str, object, str]] = []
    if isinstance(obj, dict):
        for key, value in obj.items():
            where = f"{path}.{key}" if path else str(key)
            if key in _QUANTITY_MAPS and isinstance(value, dict):
                for name, amount in value.items():
                    problem = _quantity_problem(amount)
                    if problem:
                        found.append((f"{where}[{name}]", amount, problem))
            else:
                found += invalid_quantities(value, where)
    elif isinstance(obj, list):
        for index, item in enumerate(obj):
            found += invalid_quantities(item, f"{path}[{index}]")
    return found


def _quantity_problem(amount: object) -> str | None:
    if not isinstance(amount, str | int | float):
        return QUANTITY_FORMAT
    try:
        parsed = quantity(amount)
    except ValueError:
        return QUANTITY_FORMAT
    return "must be greater than or equal to 0" if parsed < 0 else None


def as_served(kind: str, obj: dict) -> dict:
    """Normalize quantities, default fields and fill always-serialized zero fields in place."""
    normalize_quantities(obj)
    for key, value in _DEFAULTS.get(kind, {}).items():
        obj.setdefault(key, value)
    for path, zeros in _ZERO_FIELDS.get(kind, ()):
        for parent in _parents(obj, path.split(".")):
            for key, zero in zeros.items():
                parent.setdefault(key, zero)
    return obj
