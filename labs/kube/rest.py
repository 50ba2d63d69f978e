"""The lab's requests to the Kubernetes API, by path, through a kubernetes ApiClient.

The generated `CoreV1Api` and its siblings take about a second to import (thousands of
validated methods); every command that reads or changes the cluster would pay that on each
run. These helpers build each request the way those classes do, with the client's own
credentials (a bearer token or an exec plugin such as `aws eks get-token`, refreshed as
needed) and TLS settings; failures are the lab's own errors (KubeApiError with the status,
KubeUnreachable), so no command ends in urllib3's retry chain.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from labs.errors import LabError

DEFAULT_TIMEOUT = 15.0  # seconds for one request (connect and read)
MERGE_PATCH = "application/merge-patch+json"
# A typed client's list-call keywords, as the API's query parameters.
_QUERY_NAMES = {
    "watch": "watch",
    "resource_version": "resourceVersion",
    "timeout_seconds": "timeoutSeconds",
    "label_selector": "labelSelector",
    "field_selector": "fieldSelector",
    "allow_watch_bookmarks": "allowWatchBookmarks",
    "limit": "limit",
}


class KubeUnreachable(LabError, ConnectionError):
    """The API server did not answer (nothing listens, a stopped process, a dead network): a
    sentence naming the server and the request, where urllib3 would print its retry chain."""


class KubeApiError(LabError):
    """The API server answered with an error status (callers test `.status`, as with the
    client's ApiException); when nobody handles it, a sentence with the server's own message."""

    def __init__(self, response: Any, server: str, method: str, path: str) -> None:
        self.status, self.reason = int(response.status), str(response.reason)
        self.body = bytes(response.data or b"").decode(errors="replace")
        super().__init__(
            f"the Kubernetes API at {server} answered {self.status} {self.reason} to "
            f"{method} {path}: {message_of(self.body)}"
        )


def message_of(body: str) -> str:
    """A Status body's message (or the start of whatever else came back)."""
    try:
        return str(json.loads(body).get("message"))
    except (ValueError, AttributeError):
        return body.strip()[:200]


def _cause(error: Exception) -> str:
    """What urllib3's retry chain comes down to: refused, timed out, reset."""
    reason = getattr(error, "reason", None) or error
    text = str(reason)
    if "Connection refused" in text:
        return "connection refused: nothing listens there"
    if "timed out" in text.lower():
        return "no answer in time (the server may be stopped or overloaded)"
    return f"{type(reason).__name__}: {text.split(': ', 1)[-1][:200]}"


@dataclass(frozen=True)
class Resource:
    """One kind's REST collection: `/api/v1` + `pods`, namespaced or not."""

    prefix: str
    plural: str
    namespaced: bool = True

    def path(self, namespace: str | None = None, name: str | None = None, sub: str = "") -> str:
        """The collection (in `namespace`, or across all), one object, or its subresource."""
        parts = [self.prefix]
        if self.namespaced and namespace:
            parts += ["namespaces", namespace]
        parts += [p for p in (self.plural, name, sub) if p]
        return "/".join(parts)


NAMESPACES = Resource("/api/v1", "namespaces", namespaced=False)
NODES = Resource("/api/v1", "nodes", namespaced=False)
PODS = Resource("/api/v1", "pods")
EVENTS = Resource("/api/v1", "events")
SERVICES = Resource("/api/v1", "services")
CONFIG_MAPS = Resource("/api/v1", "configmaps")
SERVICE_ACCOUNTS = Resource("/api/v1", "serviceaccounts")
DAEMON_SETS = Resource("/apis/apps/v1", "daemonsets")
DEPLOYMENTS = Resource("/apis/apps/v1", "deployments")
REPLICA_SETS = Resource("/apis/apps/v1", "replicasets")
RUNTIME_CLASSES = Resource("/apis/node.k8s.io/v1", "runtimeclasses", namespaced=False)
CLUSTER_POLICIES = Resource("/apis/nvidia.com/v1", "clusterpolicies", namespaced=False)
PROMETHEUS_RULES = Resource("/apis/monitoring.coreos.com/v1", "prometheusrules")


def send(
    client: Any,
    method: str,
    path: str,
    query: Mapping[str, object] | None = None,
    body: Any = None,
    content_type: str | None = None,
    timeout: float | None = DEFAULT_TIMEOUT,
    stream: bool = False,
) -> Any:
    """The response to one request, its body read (unless `stream`: a watch reads it as it
    comes); KubeApiError unless 2xx, KubeUnreachable when no answer came. `timeout` None waits
    as long as the server streams."""
    from urllib3.exceptions import HTTPError

    headers = {"Accept": "application/json, */*"}
    if content_type:
        headers["Content-Type"] = content_type
    method, url, headers, body, post = client.param_serialize(
        method=method,
        resource_path=path,
        query_params=[(k, v) for k, v in (query or {}).items() if v is not None],
        header_params=headers,
        body=body,
        auth_settings=["BearerToken"],
    )
    server = str(client.configuration.host).rstrip("/")
    try:
        response = client.call_api(method, url, headers, body, post, _request_timeout=timeout)
        if stream and 200 <= response.status < 300:
            return response.response
        response.read()
    except HTTPError as error:
        raise KubeUnreachable(
            f"the Kubernetes API at {server} did not answer {method} {path}: {_cause(error)}"
        ) from None
    if not 200 <= response.status < 300:
        raise KubeApiError(response, server, method, path)
    return response


def get(
    client: Any,
    path: str,
    query: Mapping[str, object] | None = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> bytes:
    """The body of `GET path?query`."""
    return bytes(send(client, "GET", path, query, timeout=timeout).data)


def read(client: Any, path: str, query: Mapping[str, object] | None = None) -> dict[str, Any]:
    """One object (or list) as the API serves it."""
    return dict(json.loads(get(client, path, query)))


def get_items(
    client: Any,
    path: str,
    timeout: float = DEFAULT_TIMEOUT,
    query: Mapping[str, object] | None = None,
) -> list[dict[str, Any]]:
    """The items of a list (`/api/v1/pods`, a selector in `query`), as the API serves them."""
    return list(json.loads(get(client, path, query, timeout)).get("items", []))


def create(client: Any, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
    """POST an object to its collection; the object as created."""
    return dict(json.loads(send(client, "POST", path, body=dict(body)).data))


def patch(
    client: Any, path: str, body: Mapping[str, Any], content_type: str = MERGE_PATCH
) -> dict[str, Any]:
    """A merge patch (like `kubectl patch --type=merge`); the object as patched."""
    answer = send(client, "PATCH", path, body=dict(body), content_type=content_type)
    return dict(json.loads(answer.data))


def delete(client: Any, path: str, grace_seconds: int | None = None) -> bool:
    """Delete one object (dependents in the background); False when it was already gone
    (404), so a revert or a clean-up can run twice."""
    options: dict[str, Any] = {
        "kind": "DeleteOptions",
        "apiVersion": "v1",
        "propagationPolicy": "Background",
    }
    if grace_seconds is not None:
        options["gracePeriodSeconds"] = grace_seconds
    try:
        send(client, "DELETE", path, body=options)
    except KubeApiError as error:
        if error.status != 404:
            raise
        return False
    return True


def lister(client: Any, path: str) -> Callable[..., Any]:
    """A list call for `path` that takes a typed client's list keywords (`watch`,
    `resource_version`, `label_selector`, ...) and answers the raw response, as those calls do
    with `_preload_content=False`: what a ClusterView and `kubernetes.watch` consume."""

    def call(**kwargs: Any) -> Any:
        kwargs.pop("_preload_content", None)
        timeout = kwargs.pop("_request_timeout", DEFAULT_TIMEOUT)
        query = {_QUERY_NAMES[k]: _query_value(v) for k, v in kwargs.items()}
        watching = bool(kwargs.get("watch"))
        return send(client, "GET", path, query, timeout=None if watching else timeout,
                    stream=watching)  # fmt: skip

    return call


def _query_value(value: object) -> object:
    return str(value).lower() if isinstance(value, bool) else value
