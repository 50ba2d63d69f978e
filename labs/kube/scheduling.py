"""How the Kubernetes scheduler and the DaemonSet controller match pods to nodes: taints and
tolerations, nodeSelector and required node affinity.

Pure functions on plain objects, shared by the rehearsal's scheduler and DaemonSet
controller (which play these rules) and the doctor (which explains them), so both read a
toleration the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SCHEDULING_EFFECTS = ("NoSchedule", "NoExecute")
POD_AFFINITY_MISMATCH = "node(s) didn't match pod affinity rules"
POD_ANTI_AFFINITY_MISMATCH = "node(s) didn't match pod anti-affinity rules"
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

Obj = Mapping[str, Any]


def selector_matches(
    node_selector: Mapping[str, str], node: Obj, affinity: Obj | None = None
) -> bool:
    """nodeSelector and requiredDuringScheduling node affinity against the node's labels."""
    labels = node["metadata"].get("labels") or {}
    if any(labels.get(key) != value for key, value in node_selector.items()):
        return False
    required = ((affinity or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms") or []
    return not terms or any(_term_matches(term, labels) for term in terms)


def pod_fits_selector(pod_spec: Obj, node: Obj) -> bool:
    """The pod's nodeSelector and required node affinity admit `node`."""
    return selector_matches(pod_spec.get("nodeSelector") or {}, node, pod_spec.get("affinity"))


def daemon_pod_tolerations(spec: Obj) -> list[dict[str, Any]]:
    """A daemon pod's tolerations: the template's plus the ones the DaemonSet controller adds."""
    tolerations = [dict(t) for t in spec.get("tolerations") or []]
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
    tolerations: list[dict[str, Any]], node: Obj, effects: tuple[str, ...] = SCHEDULING_EFFECTS
) -> list[dict[str, Any]]:
    """The node's taints with one of `effects` that no toleration covers."""
    return [
        taint
        for taint in (node.get("spec") or {}).get("taints") or []
        if taint.get("effect") in effects
        and not any(tolerates_taint(t, taint) for t in tolerations)
    ]


def tolerates(tolerations: list[dict[str, Any]], node: Obj) -> bool:
    return not untolerated_taints(tolerations, node)


def tolerates_taint(toleration: Obj, taint: Obj) -> bool:
    """One toleration covers one taint (key, operator Exists/Equal, value, effect)."""
    if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
        return False
    if toleration.get("operator") == "Exists":
        return not toleration.get("key") or toleration["key"] == taint["key"]
    return toleration.get("key") == taint["key"] and toleration.get("value", "") == taint.get(
        "value", ""
    )


def pod_affinity_failure(
    pod: Obj, node: Obj, pods: list[dict[str, Any]], nodes: list[dict[str, Any]]
) -> str | None:
    """The InterPodAffinity filter's reason when `node` breaks the pod's required pod
    (anti-)affinity, else None. A term that no placed pod matches is met by a pod that
    matches it itself (the first pod of a group may go anywhere), as upstream allows."""
    affinity = pod["spec"].get("affinity") or {}
    labels_of = {n["metadata"]["name"]: n["metadata"].get("labels") or {} for n in nodes}
    placed = [
        p
        for p in pods
        if p["spec"].get("nodeName") in labels_of
        and p["metadata"].get("namespace") == pod["metadata"].get("namespace")
        and p["metadata"]["uid"] != pod["metadata"].get("uid")
        and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
    ]
    here = node["metadata"].get("labels") or {}

    def together(term: Obj) -> list[bool]:
        key = term.get("topologyKey", "")
        return [
            key in here and labels_of[p["spec"]["nodeName"]].get(key) == here[key]
            for p in placed
            if _selects(term.get("labelSelector") or {}, p["metadata"].get("labels") or {})
        ]

    own = pod["metadata"].get("labels") or {}
    for term in _required(affinity, "podAffinity"):
        beside = together(term)
        if not any(beside) and (beside or not _selects(term.get("labelSelector") or {}, own)):
            return POD_AFFINITY_MISMATCH
    for term in _required(affinity, "podAntiAffinity"):
        if any(together(term)):
            return POD_ANTI_AFFINITY_MISMATCH
    return None


def _required(affinity: Obj, kind: str) -> list[dict[str, Any]]:
    return list(
        (affinity.get(kind) or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or []
    )


def _selects(selector: Obj, labels: Mapping[str, str]) -> bool:
    wanted = selector.get("matchLabels") or {}
    return all(labels.get(k) == v for k, v in wanted.items()) and _term_matches(selector, labels)


def _term_matches(term: Obj, labels: Mapping[str, str]) -> bool:
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
