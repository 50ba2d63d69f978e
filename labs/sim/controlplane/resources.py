"""The resource types the world reads and writes, and the API errors it tells apart.

One vocabulary for the world's controllers: they name types by these constants and catch these
errors (`labs.sim.controlplane.kube_api` turns the API server's answers into them).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime


@dataclass(frozen=True)
class ResourceType:
    """One REST resource of the API server (a Kubernetes APIResource)."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    subresources: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def ref(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def singular(self) -> str:
        return self.kind.lower()


NODES = ResourceType("", "v1", "nodes", "Node", False, ("status",))
NAMESPACES = ResourceType("", "v1", "namespaces", "Namespace", False)
PODS = ResourceType("", "v1", "pods", "Pod", True, ("status", "log", "exec", "attach"))
EVENTS = ResourceType("", "v1", "events", "Event", True)
SERVICES = ResourceType("", "v1", "services", "Service", True, ("status",))
CONFIGMAPS = ResourceType("", "v1", "configmaps", "ConfigMap", True)
SERVICEACCOUNTS = ResourceType("", "v1", "serviceaccounts", "ServiceAccount", True)
DAEMONSETS = ResourceType("apps", "v1", "daemonsets", "DaemonSet", True, ("status",))
DEPLOYMENTS = ResourceType("apps", "v1", "deployments", "Deployment", True, ("status", "scale"))
REPLICASETS = ResourceType("apps", "v1", "replicasets", "ReplicaSet", True, ("status", "scale"))
RUNTIMECLASSES = ResourceType("node.k8s.io", "v1", "runtimeclasses", "RuntimeClass", False)
CLUSTER_POLICY = ResourceType(
    "nvidia.com", "v1", "clusterpolicies", "ClusterPolicy", False, subresources=("status",)
)
PROMETHEUS_RULES = ResourceType(
    "monitoring.coreos.com", "v1", "prometheusrules", "PrometheusRule", True
)
LEASES = ResourceType("coordination.k8s.io", "v1", "leases", "Lease", True)
VALIDATING_WEBHOOKS = ResourceType(
    "admissionregistration.k8s.io",
    "v1",
    "validatingwebhookconfigurations",
    "ValidatingWebhookConfiguration",
    False,
)
CRDS = ResourceType(
    "apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", False
)


class StoreError(Exception):
    """An API error with the HTTP code, Status reason and kubectl-style message."""

    code = 500
    reason = "InternalError"

    def __init__(self, message: str, causes: list[dict] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.causes = causes or []  # Status details.causes: {reason, message, field}


class NotFound(StoreError):
    code, reason = 404, "NotFound"


class AlreadyExists(StoreError):
    code, reason = 409, "AlreadyExists"


class Conflict(StoreError):
    code, reason = 409, "Conflict"


class Invalid(StoreError):
    code, reason = 422, "Invalid"


class BadRequest(StoreError):
    code, reason = 400, "BadRequest"


class Forbidden(StoreError):
    """An admission plugin refused the object (`pods "x" is forbidden: ...`)."""

    code, reason = 403, "Forbidden"


class MethodNotAllowed(StoreError):
    code, reason = 405, "MethodNotAllowed"


class Gone(StoreError):
    """A watch asked for history older than the API server keeps (etcd compacted it)."""

    code, reason = 410, "Expired"


def now_rfc3339() -> str:
    """Current UTC time in the second-precision RFC 3339 form Kubernetes uses."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


_KNOWN = {
    t.ref: t
    for t in (NODES, NAMESPACES, PODS, EVENTS, SERVICES, CONFIGMAPS, SERVICEACCOUNTS, DAEMONSETS,
              DEPLOYMENTS, REPLICASETS, RUNTIMECLASSES, CLUSTER_POLICY, LEASES, CRDS)
}  # fmt: skip


def resolve(ref: str | ResourceType) -> ResourceType:
    """A type by its constant or its `plural.group` name ("pods", "clusterpolicies.nvidia.com")."""
    if isinstance(ref, ResourceType):
        return ref
    try:
        return _KNOWN[ref]
    except KeyError:
        raise NotFound(f'the world knows no resource type "{ref}"') from None
