"""The Kubernetes resource types the lab and the rehearsal's world read and write, and the API
errors they tell apart: one table and one error family for every caller of the API server.

An error carries the HTTP status, the Status reason and the server's own message, so a command
prints a sentence and a controller catches `NotFound` or `Conflict` by type.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from labs.errors import LabError


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

    def path(
        self, namespace: str | None = None, name: str | None = None, sub: str | None = None
    ) -> str:
        """The collection (in `namespace`, or across all), one object, or its subresource."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        return "/".join([base, self.plural, *(p for p in (name, sub) if p)])


NODES = ResourceType("", "v1", "nodes", "Node", False, ("status",))
NAMESPACES = ResourceType("", "v1", "namespaces", "Namespace", False)
PODS = ResourceType("", "v1", "pods", "Pod", True, ("status", "log", "exec", "attach"))
EVENTS = ResourceType("", "v1", "events", "Event", True)
SERVICES = ResourceType("", "v1", "services", "Service", True, ("status",))
CONFIG_MAPS = ResourceType("", "v1", "configmaps", "ConfigMap", True)
SECRETS = ResourceType("", "v1", "secrets", "Secret", True)
SERVICE_ACCOUNTS = ResourceType("", "v1", "serviceaccounts", "ServiceAccount", True)
DAEMON_SETS = ResourceType("apps", "v1", "daemonsets", "DaemonSet", True, ("status",))
DEPLOYMENTS = ResourceType("apps", "v1", "deployments", "Deployment", True, ("status", "scale"))
REPLICA_SETS = ResourceType("apps", "v1", "replicasets", "ReplicaSet", True, ("status", "scale"))
RUNTIME_CLASSES = ResourceType("node.k8s.io", "v1", "runtimeclasses", "RuntimeClass", False)
CLUSTER_POLICIES = ResourceType(
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


class KubeApiError(LabError):
    """The API server answered with an error: its HTTP status (`code`, also `status`), Status
    reason and message; `causes` are the Status details' {reason, message, field}."""

    code = 500
    reason = "InternalError"

    def __init__(self, message: str, causes: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.causes = causes or []

    @property
    def status(self) -> int:
        return self.code


class KubeUnreachable(KubeApiError, ConnectionError):
    """The API server did not answer (nothing listens, a stopped process, a dead network): a
    sentence naming the server and the request, where urllib3 would print its retry chain.
    A caller that retries any failed request catches it as a KubeApiError."""

    code, reason = 503, "ServiceUnavailable"


class NotFound(KubeApiError):
    code, reason = 404, "NotFound"


class AlreadyExists(KubeApiError):
    code, reason = 409, "AlreadyExists"


class Conflict(KubeApiError):
    code, reason = 409, "Conflict"


class Invalid(KubeApiError):
    code, reason = 422, "Invalid"


class BadRequest(KubeApiError):
    code, reason = 400, "BadRequest"


class Unauthorized(KubeApiError):
    code, reason = 401, "Unauthorized"


class Forbidden(KubeApiError):
    """Refused for who is asking, or by an admission plugin (`pods "x" is forbidden: ...`)."""

    code, reason = 403, "Forbidden"


class MethodNotAllowed(KubeApiError):
    code, reason = 405, "MethodNotAllowed"


class Gone(KubeApiError):
    """A watch asked for history older than the API server keeps (etcd compacted it)."""

    code, reason = 410, "Expired"


_BY_STATUS: dict[int, type[KubeApiError]] = {
    error.code: error
    for error in (BadRequest, Unauthorized, Forbidden, NotFound, MethodNotAllowed, Gone, Invalid)
}


def message_of(body: str | bytes) -> str:
    """A Status body's message (or the start of whatever else came back)."""
    text = body.decode(errors="replace") if isinstance(body, bytes) else body
    try:
        return str(json.loads(text).get("message"))
    except (ValueError, AttributeError):
        return text.strip()[:200]


def api_error(status: int, body: str | bytes, context: str = "", reason: str = "") -> KubeApiError:
    """The error for an answer with `status`: its type by status (and Status reason for 409),
    its message the server's, after `context` (who asked what) when given; `reason` is the
    HTTP reason phrase, kept for a status no subclass names."""
    text = body.decode(errors="replace") if isinstance(body, bytes) else body
    try:
        answer = json.loads(text)
        if not isinstance(answer, dict):
            raise ValueError(text)
    except ValueError:
        answer = {"message": text.strip()[:200]}
    message = str(answer.get("message") or f"HTTP {status}")
    if status == 409:
        conflict = answer.get("reason") == "AlreadyExists"
        kind: type[KubeApiError] = AlreadyExists if conflict else Conflict
    else:
        kind = _BY_STATUS.get(status, KubeApiError)
    error = kind(f"{context}: {message}" if context else message)
    error.message = message
    if kind is KubeApiError:
        error.code, error.reason = status, reason or str(answer.get("reason") or "")
    error.causes = (answer.get("details") or {}).get("causes") or []
    return error


def now_rfc3339() -> str:
    """Current UTC time in the second-precision RFC 3339 form Kubernetes uses."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


_KNOWN = {
    t.ref: t
    for t in (NODES, NAMESPACES, PODS, EVENTS, SERVICES, CONFIG_MAPS, SECRETS, SERVICE_ACCOUNTS,
              DAEMON_SETS, DEPLOYMENTS, REPLICA_SETS, RUNTIME_CLASSES, CLUSTER_POLICIES, LEASES,
              CRDS)
}  # fmt: skip


def resolve(ref: str | ResourceType) -> ResourceType:
    """A type by its constant or its `plural.group` name ("pods", "clusterpolicies.nvidia.com")."""
    if isinstance(ref, ResourceType):
        return ref
    try:
        return _KNOWN[ref]
    except KeyError:
        raise NotFound(f'the world knows no resource type "{ref}"') from None
