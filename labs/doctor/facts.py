"""One read of the cluster for the doctor: one list call per kind, nothing per node.

Every check works on this read, so a run costs seven list calls plus the log tails of the
few pods a finding points at, and a big cluster costs no more round trips than a small one.
A kind the API does not serve (no ClusterPolicy CRD) is read as absent; one the doctor may
not read (401/403) or cannot reach stops the run: checks on half the facts would mislead.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from labs.doctor.model import Evidence
from labs.errors import LabError
from labs.kube import gpu, rest
from labs.kube.resources import (
    CLUSTER_POLICIES,
    DAEMON_SETS,
    DEPLOYMENTS,
    EVENTS,
    NODES,
    PODS,
    REPLICA_SETS,
    RUNTIME_CLASSES,
    KubeApiError,
)
from labs.kube.view import api_server_url, find_in

if TYPE_CHECKING:
    from labs.doctor.cloud import CloudFacts
    from labs.lab import Lab

Obj = dict[str, Any]
LIST_TIMEOUT = 15.0  # seconds for one list call
OPTIONAL = ("clusterpolicies", "runtimeclasses")  # 404: the API does not serve them here
SYSTEM_NAMESPACES = frozenset({"kube-system", "kube-public", "kube-node-lease"})


def subject(kind: str, obj: Obj) -> str:
    """`kind/namespace/name` (`kind/name` when cluster-scoped): what a finding is about.

    The kind is passed in: list items from a real API server carry no `kind` field.
    """
    meta = obj["metadata"]
    where = f"{meta['namespace']}/" if meta.get("namespace") else ""
    return f"{kind}/{where}{meta['name']}"


def node_subject(name: str) -> str:
    return f"node/{name}"


def event_evidence(event: Obj) -> Evidence:
    """An Event as evidence: what it is about, its reason, its message."""
    involved = event.get("involvedObject") or {}
    where = f"{involved['namespace']}/" if involved.get("namespace") else ""
    about = f"{str(involved.get('kind', 'object')).lower()}/{where}{involved.get('name', '')}"
    return Evidence(about, f"event {event.get('reason')}", str(event.get("message", "")))


class CannotCheck(LabError):
    """The doctor could not read what it needs (unreachable, forbidden, bad input)."""


@dataclass(frozen=True)
class Facts:
    """The cluster as read once; `objects`/`find` let the shared GPU facts (`labs.kube.gpu`)
    read it like a live view (`daemonsets`/`deployments` span every namespace)."""

    kinds: dict[str, list[Obj]]
    operator_namespace: str
    served: frozenset[str] = field(default_factory=frozenset)
    cloud: CloudFacts | None = None  # the lab's AWS side, where the doctor may read it

    def objects(self, kind: str) -> list[Obj]:
        if kind == "operator_pods":
            return self.in_namespace("pods", self.operator_namespace)
        if kind == "operator_events":
            return self.in_namespace("events", self.operator_namespace)
        return list(self.kinds.get(kind, []))

    def find(self, kind: str, name: str, namespace: str = "") -> Obj | None:
        return find_in(self.objects(kind), name, namespace)

    def in_namespace(self, kind: str, namespace: str) -> list[Obj]:
        return [o for o in self.kinds.get(kind, []) if o["metadata"].get("namespace") == namespace]

    @cached_property
    def gpu_nodes(self) -> list[Obj]:
        return gpu.gpu_nodes(self)

    @cached_property
    def policy(self) -> Obj | None:
        """The ClusterPolicy (the operator reconciles one; any name)."""
        policies = self.kinds.get("clusterpolicies") or []
        return gpu.cluster_policy(self) or (policies[0] if policies else None)

    def events_of(self, obj: Obj) -> list[Obj]:
        """Events about `obj` (by uid), oldest first, as `kubectl describe` lists them."""
        return gpu.pod_events(self, obj)

    def pods_on(self, node: str) -> list[Obj]:
        return [
            p for p in self.kinds.get("pods", []) if (p.get("spec") or {}).get("nodeName") == node
        ]

    def pods_of(self, daemonset: Obj) -> list[Obj]:
        """The pods a DaemonSet owns."""
        uid = daemonset["metadata"].get("uid")
        name = gpu.name_of(daemonset)
        return [
            p
            for p in self.in_namespace("pods", str(daemonset["metadata"].get("namespace")))
            if any(
                r.get("kind") == "DaemonSet" and (r.get("uid") == uid or r.get("name") == name)
                for r in p["metadata"].get("ownerReferences") or []
            )
        ]


# Where each kind is listed, every namespace at once.
PATHS = {
    "nodes": NODES.path(),
    "pods": PODS.path(),
    "events": EVENTS.path(),
    "daemonsets": DAEMON_SETS.path(),
    "deployments": DEPLOYMENTS.path(),
    "replicasets": REPLICA_SETS.path(),
    "clusterpolicies": CLUSTER_POLICIES.path(),
    "runtimeclasses": RUNTIME_CLASSES.path(),
}


def read_facts(lab: Lab) -> Facts:
    """List every kind once; CannotCheck names the kind and why when one cannot be read."""
    client = lab.kube
    kinds: dict[str, list[Obj]] = {}
    for kind, path in PATHS.items():
        listed = _read(client, path, kind)
        if listed is not None:
            kinds[kind] = listed
    namespace = _operator_namespace(kinds, lab.operator_namespace)
    return Facts(kinds, namespace, frozenset(kinds))


def _read(client: Any, path: str, kind: str) -> list[Obj] | None:
    server = api_server_url(client)
    try:
        return rest.get_items(client, path, LIST_TIMEOUT)
    except OSError as error:  # KubeUnreachable names the server and what happened
        raise CannotCheck(str(error)) from None
    except KubeApiError as error:
        if error.status == 404 and kind in OPTIONAL:
            return None
        why = f"{error.status} {error.reason}".strip()
        hint = (
            "the doctor needs get/list on it (a read-only ClusterRole such as `view` plus "
            "nodes, runtimeclasses and clusterpolicies.nvidia.com)"
            if error.status in (401, 403)
            else "the API server refused the read"
        )
        raise CannotCheck(f"could not list {kind} from {server} ({why}): {hint}") from None


def _operator_namespace(kinds: dict[str, list[Obj]], default: str) -> str:
    """Where the operator runs: what its ClusterPolicy reports, else its Deployment's."""
    for policy in kinds.get("clusterpolicies", []):
        namespace = (policy.get("status") or {}).get("namespace")
        if namespace:
            return str(namespace)
    for deployment in kinds.get("deployments", []):
        if gpu.name_of(deployment) == gpu.OPERATOR_DEPLOYMENT:
            return str(deployment["metadata"].get("namespace"))
    return default
