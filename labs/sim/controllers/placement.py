"""What the world's kubelet and controllers read off pods: requests, conditions, startup.

The scheduling itself (selectors, affinity, taints) is kube-scheduler's and the
controllers' now; these are the few facts the node side still needs.
"""

from __future__ import annotations

from decimal import Decimal

from kubernetes.utils import parse_quantity as quantity

from labs.kube.resources import now_rfc3339


def pod_requests(pod: dict) -> dict[str, Decimal]:
    """What the pod holds: its containers' requests summed, or an init container's when that
    is more (init containers run one at a time: Kubernetes docs, Init Containers, "Resource
    sharing within containers"); limits stand in for missing requests, as the API defaults."""
    total: dict[str, Decimal] = {}
    for container in pod["spec"].get("containers") or []:
        for name, value in _container_requests(container).items():
            total[name] = total.get(name, Decimal(0)) + value
    for container in pod["spec"].get("initContainers") or []:
        for name, value in _container_requests(container).items():
            total[name] = max(total.get(name, Decimal(0)), value)
    return total


def _container_requests(container: dict) -> dict[str, Decimal]:
    resources = container.get("resources") or {}
    wanted = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
    return {name: quantity(value) for name, value in wanted.items()}


def set_pod_condition(
    pod: dict, kind: str, status: str, reason: str | None = None, message: str | None = None
) -> None:
    """Set one pod condition the way kubelet and the scheduler do: the transition time moves
    only when the status changes; reason and message follow the latest call."""
    conditions = pod.setdefault("status", {}).setdefault("conditions", [])
    existing = next((c for c in conditions if c["type"] == kind), None)
    if existing is None:
        existing = {"type": kind, "status": status, "lastProbeTime": None}
        existing["lastTransitionTime"] = now_rfc3339()
        conditions.append(existing)
    elif existing["status"] != status:
        existing.update(status=status, lastTransitionTime=now_rfc3339())
    if reason:
        existing.update(reason=reason, message=message)
    else:
        existing.pop("reason", None)
        existing.pop("message", None)


def pod_is_terminal(pod: dict) -> bool:
    return pod.get("status", {}).get("phase") in ("Succeeded", "Failed")


def pod_ready(pod: dict) -> bool:
    return _condition_true(pod, "Ready")


def _condition_true(obj: dict, kind: str) -> bool:
    return any(
        c.get("type") == kind and c.get("status") == "True"
        for c in (obj.get("status") or {}).get("conditions") or []
    )


# Real-world seconds from container start to Ready, on a pod (or its template).
STARTUP_ANNOTATION = "sim.eks-gpu-lab/startup-seconds"
