"""Server-side printing: the `meta.k8s.io/v1` Table kubectl asks for on `get`.

kubectl prints the cells verbatim, so the columns and their formats (ages such as "5m10s",
"<none>", "1/1") follow what a real API server sends for each kind. Priority-1 columns show
only with `-o wide`. Kinds without a dedicated layout get NAME, any printer columns the
type declares, and AGE.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from labs.sim.store import ResourceType

Cell = Callable[[dict], object]
Column = tuple[str, str, int, Cell]  # name, type, priority, cell


def human_duration(seconds: float) -> str:
    """kubectl's HumanDuration: 45s, 5m10s, 3h, 2d4h, 400d."""
    seconds = int(seconds)
    if seconds < -1:
        return "<invalid>"
    if seconds < 0:
        return "0s"
    if seconds < 120:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 10:
        return f"{minutes}m{seconds % 60}s" if seconds % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 192:
        return f"{hours // 24}d{hours % 24}h" if hours % 24 else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    return f"{hours // (24 * 365)}y"


def _since(timestamp: str | None) -> str:
    if not timestamp:
        return "<unknown>"
    moment = datetime.strptime(timestamp[:19], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC)
    return human_duration((datetime.now(UTC) - moment).total_seconds())


def _path(obj: dict, dotted: str, default: Any = None) -> Any:
    """The JSON value at `dotted` (Any: whatever the object holds there), else `default`."""
    value: Any = obj
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return default if value is None else value


def _name(obj: dict) -> str:
    return obj["metadata"]["name"]


def _age(obj: dict) -> str:
    return _since(obj["metadata"].get("creationTimestamp"))


def _pairs(mapping: dict | None) -> str:
    return ",".join(f"{key}={value}" for key, value in (mapping or {}).items()) or "<none>"


def _containers(obj: dict) -> list[dict]:
    return _path(obj, "spec.template.spec.containers", []) or []


def _node_status(node: dict) -> str:
    ready = next(
        (c for c in _path(node, "status.conditions", []) if c.get("type") == "Ready"), None
    )
    status = (
        "Unknown" if ready is None else ("Ready" if ready.get("status") == "True" else "NotReady")
    )
    return status + (",SchedulingDisabled" if _path(node, "spec.unschedulable") else "")


def _node_roles(node: dict) -> str:
    prefix = "node-role.kubernetes.io/"
    labels = node["metadata"].get("labels") or {}
    return (
        ",".join(sorted(key[len(prefix) :] for key in labels if key.startswith(prefix))) or "<none>"
    )


def _node_address(kind: str) -> Cell:
    def cell(node: dict) -> str:
        addresses = _path(node, "status.addresses", []) or []
        return next((a["address"] for a in addresses if a.get("type") == kind), "<none>")

    return cell


def _pod_ready(pod: dict) -> str:
    statuses = _path(pod, "status.containerStatuses", []) or []
    ready = sum(1 for status in statuses if status.get("ready"))
    return f"{ready}/{len(_path(pod, 'spec.containers', []) or [])}"


def _pod_status(pod: dict) -> str:
    if pod["metadata"].get("deletionTimestamp"):
        return "Terminating"
    reason = _path(pod, "status.reason") or _path(pod, "status.phase", "Unknown")
    for status in reversed(_path(pod, "status.containerStatuses", []) or []):
        state = status.get("state") or {}
        waiting, terminated = state.get("waiting") or {}, state.get("terminated") or {}
        if waiting.get("reason"):
            reason = waiting["reason"]
        elif terminated.get("reason"):
            reason = terminated["reason"]
        elif terminated:
            reason = f"ExitCode:{terminated.get('exitCode', 0)}"
    return reason


def _pod_restarts(pod: dict) -> int:
    statuses = _path(pod, "status.containerStatuses", []) or []
    return sum(status.get("restartCount", 0) for status in statuses)


def _event_object(event: dict) -> str:
    involved = event.get("involvedObject") or {}
    return f"{str(involved.get('kind', '')).lower()}/{involved.get('name', '')}"


def _event_last_seen(event: dict) -> str:
    timestamp = event.get("lastTimestamp") or event.get("eventTime")
    return _since(timestamp or event["metadata"].get("creationTimestamp"))


def _job_status(job: dict) -> str:
    conditions = {c.get("type"): c.get("status") for c in _path(job, "status.conditions", []) or []}
    for condition in ("Complete", "Failed", "Suspended"):
        if conditions.get(condition) == "True":
            return condition
    return "Running"


def _service_ports(service: dict) -> str:
    ports = _path(service, "spec.ports", []) or []
    return ",".join(f"{p.get('port')}/{p.get('protocol', 'TCP')}" for p in ports) or "<none>"


def _count(path: str) -> Cell:
    return lambda obj: _path(obj, path, 0)


def _entries(*fields: str) -> Cell:
    return lambda obj: sum(len(obj.get(field) or ()) for field in fields)


def _text(path: str, default: str = "<none>") -> Cell:
    return lambda obj: _path(obj, path, default)


def _workload_wide() -> list[Column]:
    return [
        ("Containers", "string", 1, lambda o: ",".join(c["name"] for c in _containers(o))),
        ("Images", "string", 1, lambda o: ",".join(c.get("image", "") for c in _containers(o))),
        ("Selector", "string", 1, lambda o: _pairs(_path(o, "spec.selector.matchLabels"))),
    ]


NAME: Column = ("Name", "string", 0, _name)
AGE: Column = ("Age", "string", 0, _age)

_LAYOUTS: dict[str, list[Column]] = {
    "Node": [
        NAME,
        ("Status", "string", 0, _node_status),
        ("Roles", "string", 0, _node_roles),
        AGE,
        ("Version", "string", 0, _text("status.nodeInfo.kubeletVersion", "")),
        ("Internal-IP", "string", 1, _node_address("InternalIP")),
        ("External-IP", "string", 1, _node_address("ExternalIP")),
        ("OS-Image", "string", 1, _text("status.nodeInfo.osImage", "<unknown>")),
        ("Kernel-Version", "string", 1, _text("status.nodeInfo.kernelVersion", "<unknown>")),
        ("Container-Runtime", "string", 1, _text("status.nodeInfo.containerRuntimeVersion", "")),
    ],
    "Pod": [
        NAME,
        ("Ready", "string", 0, _pod_ready),
        ("Status", "string", 0, _pod_status),
        ("Restarts", "string", 0, _pod_restarts),
        AGE,
        ("IP", "string", 1, _text("status.podIP")),
        ("Node", "string", 1, _text("spec.nodeName")),
        ("Nominated Node", "string", 1, _text("status.nominatedNodeName")),
        ("Readiness Gates", "string", 1, lambda pod: "<none>"),
    ],
    "DaemonSet": [
        NAME,
        ("Desired", "integer", 0, _count("status.desiredNumberScheduled")),
        ("Current", "integer", 0, _count("status.currentNumberScheduled")),
        ("Ready", "integer", 0, _count("status.numberReady")),
        ("Up-to-date", "integer", 0, _count("status.updatedNumberScheduled")),
        ("Available", "integer", 0, _count("status.numberAvailable")),
        (
            "Node Selector",
            "string",
            0,
            lambda o: _pairs(_path(o, "spec.template.spec.nodeSelector")),
        ),
        AGE,
        *_workload_wide(),
    ],
    "Deployment": [
        NAME,
        (
            "Ready",
            "string",
            0,
            lambda o: f"{_path(o, 'status.readyReplicas', 0)}/{_path(o, 'spec.replicas', 1)}",
        ),
        ("Up-to-date", "integer", 0, _count("status.updatedReplicas")),
        ("Available", "integer", 0, _count("status.availableReplicas")),
        AGE,
        *_workload_wide(),
    ],
    "Event": [
        ("Last Seen", "string", 0, _event_last_seen),
        ("Type", "string", 0, _text("type", "")),
        ("Reason", "string", 0, _text("reason", "")),
        ("Object", "string", 0, _event_object),
        ("Message", "string", 0, _text("message", "")),
        ("Source", "string", 1, _text("source.component", "")),
        ("Count", "integer", 1, _count("count")),
        ("Name", "string", 1, _name),
    ],
    "Namespace": [NAME, ("Status", "string", 0, _text("status.phase", "Active")), AGE],
    "Service": [
        NAME,
        ("Type", "string", 0, _text("spec.type", "ClusterIP")),
        ("Cluster-IP", "string", 0, _text("spec.clusterIP")),
        ("External-IP", "string", 0, lambda service: "<none>"),
        ("Port(s)", "string", 0, _service_ports),
        AGE,
    ],
    "ReplicaSet": [
        NAME,
        ("Desired", "integer", 0, _count("spec.replicas")),
        ("Current", "integer", 0, _count("status.replicas")),
        ("Ready", "integer", 0, _count("status.readyReplicas")),
        AGE,
        *_workload_wide(),
    ],
    "ConfigMap": [NAME, ("Data", "integer", 0, _entries("data", "binaryData")), AGE],
    "Secret": [
        NAME,
        ("Type", "string", 0, _text("type", "Opaque")),
        ("Data", "integer", 0, _entries("data")),
        AGE,
    ],
    "ServiceAccount": [NAME, ("Secrets", "integer", 0, _entries("secrets")), AGE],
    "Job": [
        NAME,
        ("Status", "string", 0, _job_status),
        (
            "Completions",
            "string",
            0,
            lambda o: f"{_path(o, 'status.succeeded', 0)}/{_path(o, 'spec.completions', 1)}",
        ),
        AGE,
    ],
    "RuntimeClass": [NAME, ("Handler", "string", 0, _text("handler", "")), AGE],
}


def columns_for(rtype: ResourceType) -> list[Column]:
    """The layout for a kind; custom types get their declared printer columns."""
    if rtype.kind in _LAYOUTS and not rtype.printer_columns:
        return _LAYOUTS[rtype.kind]
    declared = [(title, "string", 0, _text(path, "")) for title, path in rtype.printer_columns]
    return [NAME, *declared, AGE]


def table(
    rtype: ResourceType, objects: list[dict], resource_version: str, include_object: bool = True
) -> dict:
    """A Table for `objects`; rows carry the full object unless includeObject=None was asked."""
    columns = columns_for(rtype)
    rows = []
    for obj in objects:
        row: dict = {"cells": [cell(obj) for _, _, _, cell in columns]}
        if include_object:
            row["object"] = obj
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version},
        "columnDefinitions": [
            {
                "name": title,
                "type": kind,
                "format": "name" if title == "Name" else "",
                "description": title,
                "priority": priority,
            }
            for title, kind, priority, _ in columns
        ],
        "rows": rows,
    }
