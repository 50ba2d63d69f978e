"""Pod-to-node matching rules shared by the scheduler, the DaemonSet controller and kubelet.

Quantities, nodeSelector and required node affinity, taints and tolerations, pod
resource requests, as the Kubernetes scheduler reads them.
"""

from __future__ import annotations

from decimal import Decimal

from labs.sim.api_defaults import quantity
from labs.sim.store import now_rfc3339

SCHEDULING_EFFECTS = ("NoSchedule", "NoExecute")
# What the DaemonSet controller adds to every daemon pod (AddOrUpdateDaemonPodTolerations in
# kubernetes pkg/controller/daemon/util): only these node.kubernetes.io taints, each for one
# effect; any other taint (`maintenance=true:NoExecute`) needs the template's own toleration.
DAEMONSET_TOLERATIONS = tuple(
    {"key": f"node.kubernetes.io/{key}", "operator": "Exists", "effect": effect}
    for key, effect in (
        ("not-ready", "NoExecute"),
        ("unreachable", "NoExecute"),
        ("disk-pressure", "NoSchedule"),
        ("memory-pressure", "NoSchedule"),
        ("pid-pressure", "NoSchedule"),
        ("unschedulable", "NoSchedule"),
    )
)
_HOST_NETWORK_TOLERATION = {
    "key": "node.kubernetes.io/network-unavailable",
    "operator": "Exists",
    "effect": "NoSchedule",
}


def pod_requests(pod: dict) -> dict[str, Decimal]:
    """Summed container requests (limits stand in for missing requests, as the API defaults)."""
    total: dict[str, Decimal] = {}
    for container in pod["spec"].get("containers") or []:
        resources = container.get("resources") or {}
        wanted = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        for name, value in wanted.items():
            total[name] = total.get(name, Decimal(0)) + quantity(value)
    return total


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


def node_is_ready(node: dict) -> bool:
    return _condition_true(node, "Ready")


def selector_matches(node_selector: dict, node: dict, affinity: dict | None = None) -> bool:
    """nodeSelector and requiredDuringScheduling node affinity against the node's labels."""
    labels = node["metadata"].get("labels") or {}
    if any(labels.get(key) != value for key, value in node_selector.items()):
        return False
    required = ((affinity or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms") or []
    return not terms or any(_term_matches(term, labels) for term in terms)


def daemon_pod_tolerations(spec: dict) -> list[dict]:
    """A daemon pod's tolerations: the template's plus the ones the DaemonSet controller adds."""
    tolerations = list(spec.get("tolerations") or [])
    added = [
        *DAEMONSET_TOLERATIONS,
        *([_HOST_NETWORK_TOLERATION] if spec.get("hostNetwork") else []),
    ]
    for toleration in added:
        same = [
            t
            for t in tolerations
            if (t.get("key"), t.get("effect")) == (toleration["key"], toleration["effect"])
        ]
        if not same:
            tolerations.append(dict(toleration))
    return tolerations


def untolerated_taints(
    tolerations: list[dict], node: dict, effects: tuple[str, ...] = SCHEDULING_EFFECTS
) -> list[dict]:
    """The node's taints with one of `effects` that no toleration covers."""
    return [
        taint
        for taint in (node.get("spec") or {}).get("taints") or []
        if taint.get("effect") in effects
        and not any(tolerates_taint(t, taint) for t in tolerations)
    ]


def tolerates(tolerations: list[dict], node: dict) -> bool:
    return not untolerated_taints(tolerations, node)


def tolerates_taint(toleration: dict, taint: dict) -> bool:
    """One toleration covers one taint (key, operator Exists/Equal, value, effect)."""
    if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
        return False
    if toleration.get("operator") == "Exists":
        return not toleration.get("key") or toleration["key"] == taint["key"]
    return toleration.get("key") == taint["key"] and toleration.get("value", "") == taint.get(
        "value", ""
    )


def _term_matches(term: dict, labels: dict) -> bool:
    for expression in term.get("matchExpressions") or []:
        key, operator = expression["key"], expression["operator"]
        values = expression.get("values") or []
        present = key in labels
        if operator == "In" and labels.get(key) not in values:
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True


def _condition_true(obj: dict, kind: str) -> bool:
    return any(
        c.get("type") == kind and c.get("status") == "True"
        for c in (obj.get("status") or {}).get("conditions") or []
    )
