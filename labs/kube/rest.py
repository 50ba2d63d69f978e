"""The lab's requests to the Kubernetes API, by path, through a kubernetes ApiClient.

The generated `CoreV1Api` and its siblings take about a second to import (thousands of
validated methods); every command that reads or changes the cluster would pay that on each
run. These helpers build each request the way those classes do, with the client's own
credentials (a bearer token or an exec plugin such as `aws eks get-token`, refreshed as
needed) and TLS settings; failures are the lab's own errors (`labs.kube.resources`' KubeApiError
family, typed by status, and KubeUnreachable), so no command ends in urllib3's retry chain.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from labs.kube.resources import KubeUnreachable, NotFound, api_error

DEFAULT_TIMEOUT = 15.0  # seconds for one request (connect and read)
MERGE_PATCH = "application/merge-patch+json"


def _cause(error: Exception) -> str:
    """What urllib3's retry chain comes down to: refused, timed out, reset."""
    reason = getattr(error, "reason", None) or error
    text = str(reason)
    if "Connection refused" in text:
        return "connection refused: nothing listens there"
    if "timed out" in text.lower():
        return "no answer in time (the server may be stopped or overloaded)"
    return f"{type(reason).__name__}: {text.split(': ', 1)[-1][:200]}"


def send(
    client: Any,
    method: str,
    path: str,
    query: Mapping[str, object] | None = None,
    body: Any = None,
    content_type: str | None = None,
    timeout: float | tuple[float, float] | None = DEFAULT_TIMEOUT,
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
        status, reason = int(response.status), str(response.reason)
        context = f"the Kubernetes API at {server} answered {status} {reason} to {method} {path}"
        raise api_error(status, bytes(response.data or b""), context, reason)
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
    except NotFound:
        return False
    return True
