"""Plain GETs through a kubernetes ApiClient, without the generated API classes.

The generated `CoreV1Api` and its siblings take seconds to import (thousands of validated
methods); a read-only tool that needs a few GETs would pay that on every run. `get` builds
the request the way they do, with the client's own credentials (a bearer token or an exec
plugin such as `aws eks get-token`, refreshed as needed) and TLS settings.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

DEFAULT_TIMEOUT = 15.0  # seconds for one request (connect and read)


def get(
    client: Any,
    path: str,
    query: Mapping[str, object] | None = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> bytes:
    """The body of `GET path?query`; ApiException (with status and reason) unless 2xx."""
    from kubernetes.client.exceptions import ApiException

    method, url, headers, body, post = client.param_serialize(
        method="GET",
        resource_path=path,
        query_params=[(k, v) for k, v in (query or {}).items() if v is not None],
        header_params={"Accept": "application/json, */*"},
        auth_settings=["BearerToken"],
    )
    response = client.call_api(method, url, headers, body, post, _request_timeout=timeout)
    response.read()
    if not 200 <= response.status < 300:
        raise ApiException(http_resp=response)
    return bytes(response.data)


def get_items(client: Any, path: str, timeout: float = DEFAULT_TIMEOUT) -> list[dict[str, Any]]:
    """The items of a list (`/api/v1/pods`), as the API serves them (no model classes)."""
    return list(json.loads(get(client, path, timeout=timeout)).get("items", []))
