"""Typed reads, writes and watches of one API server, by resource type: what the rehearsal's
world (kubelets, device plugins and the operator played as clients of kube-apiserver, the way
kwok's controllers are) and the tools that drive a cluster object by object call.

Every request goes through `labs.kube.rest.send` on a kubernetes ApiClient (its credentials,
TLS and connection pool); the library's typed APIs are not used because each call would build
and validate model objects the callers only read as dicts. What the library lacks is here: a
read-modify-write that retries on Conflict, status written through its subresource, and a
watch whose `close()` ends its connection at once.
"""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from labs.kube import rest
from labs.kube.resources import Conflict, Gone, ResourceType, api_error, resolve

log = logging.getLogger(__name__)
# A world lives hours at most; nothing renews a token as a kubelet would.
TOKEN_SECONDS = 30 * 86400

# Read-modify-write attempts before a Conflict is the caller's (each re-reads the object).
UPDATE_ATTEMPTS = 8
# A watch the server ends after this long is reopened from where it stopped.
WATCH_SECONDS = 240
CONNECT_SECONDS = 5
REQUEST_TIMEOUT = (CONNECT_SECONDS, 30)  # connect, read
_JSON = "application/json"
_CLOSED = object()


class KubeApi:
    """Get, list, create, update, patch, delete and watch objects of one API server."""

    def __init__(self, client: Any) -> None:
        self.client = client  # a kubernetes ApiClient

    # ---- reads -----------------------------------------------------------------------

    def get(self, ref: ResourceType | str, name: str, namespace: str | None = None) -> dict:
        rtype = resolve(ref)
        return self._typed(rtype, self._call("GET", rtype.path(namespace, name)))

    def list(
        self,
        ref: ResourceType | str,
        namespace: str | None = None,
        label_selector: str = "",
        field_selector: str = "",
    ) -> tuple[list[dict], str]:
        """Matching objects sorted by namespace and name, and the list's resourceVersion."""
        rtype = resolve(ref)
        query = {"labelSelector": label_selector, "fieldSelector": field_selector}
        answer = self._call("GET", rtype.path(namespace or None), query=query)
        items = [self._typed(rtype, item) for item in answer.get("items") or []]
        items.sort(key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]))
        return items, answer["metadata"].get("resourceVersion", "")

    # ---- writes ----------------------------------------------------------------------

    def create(self, ref: ResourceType | str, obj: dict, namespace: str | None = None) -> dict:
        rtype = resolve(ref)
        namespace = namespace or obj.get("metadata", {}).get("namespace")
        body = {"apiVersion": rtype.api_version, "kind": rtype.kind, **obj}
        return self._typed(rtype, self._call("POST", rtype.path(namespace), body))

    def replace(self, ref: ResourceType | str, obj: dict, subresource: str | None = None) -> dict:
        rtype = resolve(ref)
        metadata = obj["metadata"]
        path = rtype.path(metadata.get("namespace"), metadata["name"], subresource)
        return self._typed(rtype, self._call("PUT", path, obj))

    def update(
        self,
        ref: ResourceType | str,
        name: str,
        mutate: Callable[[dict], None],
        namespace: str | None = None,
    ) -> dict:
        """Read, let `mutate` edit a copy, write back (status through its subresource);
        on Conflict read again and repeat, as a controller's retry loop does."""
        rtype = resolve(ref)
        for attempt in range(UPDATE_ATTEMPTS):
            current = self._current(rtype, name, namespace, fresh=attempt > 0)
            working = json.loads(json.dumps(current))
            mutate(working)
            try:
                return self._write_changes(rtype, current, working)
            except Conflict:
                if attempt == UPDATE_ATTEMPTS - 1:
                    raise
                time.sleep(0.02 * (attempt + 1))
        raise AssertionError("unreachable")

    def _current(self, rtype: ResourceType, name: str, namespace: str | None, fresh: bool) -> dict:
        """The object an update starts from; `fresh` after a Conflict (a cache may lag)."""
        return self.get(rtype, name, namespace)

    def _write_changes(self, rtype: ResourceType, current: dict, working: dict) -> dict:
        """The status through its subresource, the rest by a PUT, each only if it changed."""
        result = current
        rest_changed = _without_status(working) != _without_status(current)
        if "status" in rtype.subresources and working.get("status") != current.get("status"):
            result = self.replace(rtype, working, "status")
            working["metadata"]["resourceVersion"] = result["metadata"]["resourceVersion"]
        if rest_changed:
            result = self.replace(rtype, working)
        return result

    def patch(
        self,
        ref: ResourceType | str,
        name: str,
        patch: Any,
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> dict:
        """A JSON merge patch."""
        rtype = resolve(ref)
        path = rtype.path(namespace, name, subresource)
        content = "application/merge-patch+json"
        return self._typed(rtype, self._call("PATCH", path, patch, content_type=content))

    def delete(
        self,
        ref: ResourceType | str,
        name: str,
        namespace: str | None = None,
        preconditions: dict | None = None,
        grace_seconds: int | None = None,
    ) -> dict:
        """Delete as kubectl does (dependents in the background); `grace_seconds=0` is how a
        kubelet removes a pod it has stopped."""
        rtype = resolve(ref)
        body: dict[str, Any] = {
            "kind": "DeleteOptions",
            "apiVersion": "v1",
            "propagationPolicy": "Background",
        }
        if preconditions:
            body["preconditions"] = preconditions
        if grace_seconds is not None:
            body["gracePeriodSeconds"] = grace_seconds
        return self._call("DELETE", rtype.path(namespace, name), body)

    # ---- watches ---------------------------------------------------------------------

    def open_stream(self, path: str, query: dict[str, str]) -> Any:
        """The watch's open response (a urllib3 response, read as it streams)."""
        timeout = (CONNECT_SECONDS, WATCH_SECONDS + 30)
        wanted = {k: v for k, v in query.items() if v}
        return rest.send(self.client, "GET", path, wanted, timeout=timeout, stream=True)

    # ---- raw -------------------------------------------------------------------------

    def service_account_token(self, namespace: str, name: str) -> str:
        """A token the API server issues for ServiceAccount `name` (a TokenRequest, as the
        kubelet asks for a pod's projected token), so that account's RBAC is what its holder
        runs under."""
        path = f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token"
        request = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": TOKEN_SECONDS},
        }
        return str(self._call("POST", path, request)["status"]["token"])

    def call(self, method: str, path: str, body: Any = None) -> dict:
        """Any request by path (a CRD, a discovery document)."""
        return self._call(method, path, body)

    def _call(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: dict[str, str] | None = None,
        content_type: str = _JSON,
    ) -> dict:
        wanted = {k: v for k, v in (query or {}).items() if v}
        response = rest.send(self.client, method, path, wanted, body, content_type, REQUEST_TIMEOUT)
        return json.loads(response.data) if response.data else {}

    @staticmethod
    def _typed(rtype: ResourceType, obj: dict) -> dict:
        """List items come without apiVersion and kind; the controllers read them."""
        obj.setdefault("apiVersion", rtype.api_version)
        obj.setdefault("kind", rtype.kind)
        return obj


class KubeWatch:
    """("ADDED" | "MODIFIED" | "DELETED", object) events of one type, reopened when the server
    ends a watch; `close()` shuts the connection so a blocked `next()` returns at once.

    It begins with the current objects as `listed` ADDED events; when the server has
    compacted past where it stopped, it lists again and reports ("RELISTED", the list: its
    "items" and the "metadata.resourceVersion" it was read at).
    """

    RELISTED = "RELISTED"

    def __init__(
        self, api: KubeApi, rtype: ResourceType, namespace: str | None, field_selector: str = ""
    ) -> None:
        self._api = api
        self._rtype = rtype
        self._namespace, self._field_selector = namespace, field_selector
        self._path = rtype.path(namespace)
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._closed = threading.Event()
        self._response: Any = None
        self._lock = threading.Lock()
        items, version = api.list(rtype, namespace, field_selector=field_selector)
        self.listed = len(items)
        for item in items:
            self._queue.put(("ADDED", item))
        self._thread = threading.Thread(
            target=self._run, args=(version,), name=f"watch-{rtype.plural}", daemon=True
        )
        self._thread.start()

    def next(self, timeout: float | None = None) -> tuple[str, dict] | None:
        if self._closed.is_set():
            return None
        try:
            item = self._queue.get(timeout=timeout)
        except queue.Empty:
            return None
        return None if item is _CLOSED else item

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            response = self._response
        if response is not None:
            # The stream may have ended on its own a moment ago: its socket is then closed.
            with contextlib.suppress(OSError):
                response.shutdown()
        self._queue.put(_CLOSED)

    def __iter__(self) -> Iterator[tuple[str, dict]]:
        while (event := self.next()) is not None:
            yield event

    def _run(self, version: str) -> None:
        while not self._closed.is_set():
            try:
                version = self._follow(version)
            except Gone:
                items, version = self._api.list(
                    self._rtype, self._namespace, field_selector=self._field_selector
                )
                listing = {"items": items, "metadata": {"resourceVersion": version}}
                self._queue.put((self.RELISTED, listing))
            except Exception as error:  # the server restarts or stops: try again soon
                if self._closed.is_set():
                    return
                log.debug("watch %s: %s", self._path, error)
                self._closed.wait(1.0)

    def _follow(self, version: str) -> str:
        query = {
            "watch": "1",
            "resourceVersion": version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(WATCH_SECONDS),
            "fieldSelector": self._field_selector,
        }
        response = self._api.open_stream(self._path, query)
        with self._lock:
            self._response = response
        if self._closed.is_set():
            response.shutdown()
        try:
            for line in _lines(response):
                event = json.loads(line)
                obj = event.get("object") or {}
                version = (obj.get("metadata") or {}).get("resourceVersion", version)
                if event["type"] == "ERROR":
                    raise api_error(obj.get("code", 500), json.dumps(obj))
                if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                    self._queue.put((event["type"], KubeApi._typed(self._rtype, obj)))
        finally:
            response.release_conn()
        return version


def _without_status(obj: dict) -> dict:
    return {k: v for k, v in obj.items() if k != "status"}


def _lines(response: Any) -> Iterator[bytes]:
    pending = b""
    for chunk in response.stream(64 * 1024, decode_content=True):
        pending += chunk
        *complete, pending = pending.split(b"\n")
        yield from (line for line in complete if line.strip())
