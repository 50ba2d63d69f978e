"""The lab's Kubernetes side: a client from the lab's kubeconfig and a watched view.

`ClusterView` keeps a live copy of a few resource kinds (list, then watch from the
list's resourceVersion, re-listing when the stream breaks), so any check over
several kinds ("both GPU nodes report allocatable 0 *and* the DaemonSet is gone")
is re-evaluated the moment the cluster changes, not on a polling tick. Waits and
scenario symptoms both stand on it.
"""

from __future__ import annotations

import functools
import json
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from labs.errors import LabError
from labs.kube import rest

T = TypeVar("T")
# Where the lab's own workloads (the probe, scenario pods) run.
WORKLOAD_NAMESPACE = "default"
ACCESS_TIMEOUT_SECONDS = 10.0


class WaitTimeout(LabError, TimeoutError):
    """A condition did not hold within its time limit; the message says which and what was seen."""


def api_client(kubeconfig: Path | str, context: str | None = None) -> Any:
    """A kubernetes ApiClient for one kubeconfig (never the user's default one by accident)."""
    from kubernetes import client, config
    from urllib3 import Retry

    if not Path(kubeconfig).exists():
        raise FileNotFoundError(
            f"kubeconfig {kubeconfig} does not exist; run `invoke lab.up` for this lab first"
        )
    configuration = client.Configuration()
    config.load_kube_config(str(kubeconfig), context or None, client_configuration=configuration)
    # A refused connection is tried again (an API server restarting), a read that timed out
    # once more: urllib3's default would wait four timeouts on a stopped server before saying so.
    configuration.retries = Retry(total=3, read=1)
    return client.ApiClient(configuration)


class KubeconfigRefused(LabError):
    """The lab's own kubeconfig is missing, or its cluster refused it (401, or 403 for who it
    is): no read of that cluster can be trusted, and lab.up writes a new one."""


def check_lab_kubeconfig(kubeconfig: Path, lab: str) -> None:
    """KubeconfigRefused naming the file when the lab's kubeconfig is missing."""
    if not kubeconfig.is_file():
        raise KubeconfigRefused(
            f"the lab's kubeconfig ({kubeconfig}) is missing; `invoke lab.up --lab {lab}` "
            "rewrites it"
        )


def lab_api_client(kubeconfig: Path, lab: str) -> Any:
    """An ApiClient for a lab's own cluster, on which a 401 (or a 403 naming the user) means
    the kubeconfig is wrong: every call then raises KubeconfigRefused, not a 401 blob."""
    check_lab_kubeconfig(kubeconfig, lab)
    client = api_client(kubeconfig)
    call_api = client.call_api

    @functools.wraps(call_api)
    def checked(*args: Any, **kwargs: Any) -> Any:
        response = call_api(*args, **kwargs)
        if response.status in (401, 403):
            body = response.read().decode(errors="replace")
            if response.status == 401 or "forbidden: User" in body:
                raise KubeconfigRefused(
                    f"the lab's kubeconfig ({kubeconfig}) was refused: {response.status} "
                    f"{response.reason}: {rest.message_of(body)}; `invoke lab.up --lab {lab}` "
                    "rewrites it"
                )
        return response

    client.call_api = checked
    return client


def check_access(client: Any) -> None:
    """One authenticated read (a namespace), so refused credentials show before a change."""
    rest.get(client, rest.NAMESPACES.path(), {"limit": 1}, timeout=ACCESS_TIMEOUT_SECONDS)


def api_server_url(client: Any) -> str:
    """The API server URL a client talks to (what the guard compares with the lab's)."""
    return str(client.configuration.host).rstrip("/")


class Objects(Protocol):
    """What the GPU facts read from: the objects of named kinds, live (a view) or not."""

    def objects(self, kind: str) -> list[dict[str, Any]]: ...

    def find(self, kind: str, name: str, namespace: str = "") -> dict[str, Any] | None: ...


@dataclass(frozen=True)
class Snapshot:
    """Objects read once (one list call per kind): the facts of a status or a doctor run."""

    kinds: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def objects(self, kind: str) -> list[dict[str, Any]]:
        return list(self.kinds.get(kind, []))

    def find(self, kind: str, name: str, namespace: str = "") -> dict[str, Any] | None:
        return find_in(self.objects(kind), name, namespace)


def find_in(objects: list[dict[str, Any]], name: str, namespace: str) -> dict[str, Any] | None:
    """The object called `name` (in `namespace` when one is given), or None."""
    for obj in objects:
        meta = obj["metadata"]
        if meta["name"] == name and (not namespace or meta.get("namespace") == namespace):
            return obj
    return None


@dataclass(frozen=True)
class WatchedKind:
    """One kind to keep in the view: a list function (`rest.lister`, or a typed client's) and
    its arguments."""

    name: str
    list_call: Callable[..., Any]
    kwargs: dict[str, Any] = field(default_factory=dict)


def standard_kinds(
    client: Any, operator_namespace: str, workload_namespace: str = WORKLOAD_NAMESPACE
) -> list[WatchedKind]:
    """The kinds a GPU lab watches: nodes, workload pods and events, operator DaemonSets,
    the operator Deployment, pods and events, and ClusterPolicies."""

    def kind(name: str, resource: rest.Resource, namespace: str | None = None) -> WatchedKind:
        return WatchedKind(name, rest.lister(client, resource.path(namespace)))

    return [
        kind("nodes", rest.NODES),
        kind("pods", rest.PODS, workload_namespace),
        kind("events", rest.EVENTS, workload_namespace),
        kind("daemonsets", rest.DAEMON_SETS, operator_namespace),
        kind("deployments", rest.DEPLOYMENTS, operator_namespace),
        kind("operator_pods", rest.PODS, operator_namespace),
        kind("operator_events", rest.EVENTS, operator_namespace),
        kind("clusterpolicies", rest.CLUSTER_POLICIES),
    ]


def _key(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata", {})
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


class _Informer(threading.Thread):
    """List, then watch from the list's resourceVersion, and again from the last version seen
    each time the server ends the watch (bookmarks keep that version fresh); re-list only when
    the watch fails (410 Gone included), as client-go's reflector does."""

    def __init__(
        self,
        kind: WatchedKind,
        apply: Callable[[Callable[[], None]], None],
        relist_pause: float,
    ) -> None:
        super().__init__(name=f"informer-{kind.name}", daemon=True)
        self.kind = kind
        self.objects: dict[str, dict[str, Any]] = {}
        self.synced = threading.Event()
        self.error: str | None = None
        self._apply = apply
        self._relist_pause = relist_pause
        self._stopping = threading.Event()
        self._watch: Any = None

    def stop(self) -> None:
        self._stopping.set()
        self.interrupt()

    def interrupt(self) -> None:
        """Break a blocking read of the watch stream by shutting its socket down."""
        response = getattr(self._watch, "_resp", None)
        if response is None:
            return
        try:
            getattr(response, "shutdown", response.close)()
        except Exception:  # noqa: BLE001 - shutting a dying socket may raise anything
            pass

    def run(self) -> None:
        version = ""
        while not self._stopping.is_set():
            try:
                version = self._stream(version or self._relist())
            except Exception as exc:  # noqa: BLE001 - keep the view alive, report the cause
                if self._stopping.is_set():
                    return
                self.error = f"{self.kind.name}: {exc}"
                version = ""
                self._stopping.wait(self._relist_pause)

    def _relist(self) -> str:
        response = self.kind.list_call(**self.kind.kwargs, _preload_content=False)
        body = json.loads(response.data)
        fresh = {_key(item): item for item in body.get("items", [])}

        def replace_all() -> None:
            self.objects = fresh

        self._apply(replace_all)
        self.error = None
        self.synced.set()
        return str(body.get("metadata", {}).get("resourceVersion", ""))

    def _stream(self, version: str) -> str:
        """Follow the watch until the server ends it; the last resourceVersion it reported."""
        from kubernetes import watch

        if self._stopping.is_set():
            return version
        self._watch = watch.Watch()
        for event in self._watch.stream(
            self.kind.list_call,
            **self.kind.kwargs,
            resource_version=version,
            timeout_seconds=30,
            allow_watch_bookmarks=True,
            deserialize=False,
        ):
            if self._stopping.is_set():
                break
            metadata = (event.get("object") or {}).get("metadata") or {}
            version = metadata.get("resourceVersion") or version
            if event.get("type") != "BOOKMARK":
                self._apply(functools.partial(self._record, event))
        return version

    def _record(self, event: dict[str, Any]) -> None:
        obj = event.get("object") or {}
        if event.get("type") == "DELETED":
            self.objects.pop(_key(obj), None)
        elif event.get("type") in ("ADDED", "MODIFIED"):
            self.objects[_key(obj)] = obj


class ClusterView:
    """A live, watch-fed copy of selected kinds, with waits that wake on every change."""

    def __init__(self, kinds: Iterable[WatchedKind], relist_pause: float = 0.5) -> None:
        self._changed = threading.Condition()
        self._generation = 0  # bumped on every change, so a waiter knows what it has seen
        self._listeners: list[Callable[[ClusterView], None]] = []
        self._informers = {kind.name: _Informer(kind, self._apply, relist_pause) for kind in kinds}

    def __enter__(self) -> ClusterView:
        self.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def start(self, sync_timeout: float = 30.0) -> None:
        """Start watching and wait until every kind has been listed once."""
        for informer in self._informers.values():
            informer.start()
        deadline = time.monotonic() + sync_timeout
        for informer in self._informers.values():
            if not informer.synced.wait(max(0.0, deadline - time.monotonic())):
                self.stop()
                raise WaitTimeout(
                    f"could not list {informer.kind.name} from the cluster within "
                    f"{sync_timeout:.0f} s ({informer.error or 'no answer'})"
                )

    def stop(self, timeout: float = 5.0) -> None:
        """Stop every informer; a stream that was just opening is interrupted again."""
        for informer in self._informers.values():
            informer.stop()
        deadline = time.monotonic() + timeout
        for informer in self._informers.values():
            while informer.is_alive() and time.monotonic() < deadline:
                informer.interrupt()
                informer.join(timeout=0.05)

    def on_change(self, listener: Callable[[ClusterView], None]) -> None:
        """Call `listener(view)` after every change (used to sample timelines)."""
        self._listeners.append(listener)

    def objects(self, kind: str) -> list[dict[str, Any]]:
        """A snapshot of the objects of one watched kind."""
        with self._changed:
            return list(self._informers[kind].objects.values())

    def find(self, kind: str, name: str, namespace: str = "") -> dict[str, Any] | None:
        """One object by name, or None when it does not exist."""
        return find_in(self.objects(kind), name, namespace)

    def _apply(self, mutation: Callable[[], None]) -> None:
        """Change the cache under the view's lock, wake the waiters, then tell listeners."""
        with self._changed:
            mutation()
            self._generation += 1
            self._changed.notify_all()
        for listener in list(self._listeners):
            listener(self)

    def wait_for(
        self,
        check: Callable[[ClusterView], T | None],
        timeout: float,
        what: str,
        describe: Callable[[ClusterView], str] | None = None,
        on_wait: Callable[[float], None] | None = None,
        tick: float = 1.0,
        steady: float = 0.0,
    ) -> T:
        """Return the first truthy `check(view)`, re-checked on every change, or raise WaitTimeout.

        `check` runs outside the view's lock (it may read logs over HTTP), so a slow check
        never stalls the informers; a change that lands while it runs is not missed.
        `on_wait(elapsed)` is called about every `tick` seconds while waiting (progress line).
        `steady` seconds: the check must keep holding that long, so that a controller still
        acting on what it saw a moment ago cannot undo it right after the wait.
        """
        start = time.monotonic()
        deadline = start + timeout
        held_since: float | None = None
        while True:
            with self._changed:
                seen = self._generation
            result = check(self)
            now = time.monotonic()
            if not result:
                held_since = None
            elif now - (held_since := held_since or now) >= steady:
                return result
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                last = f"; last seen: {describe(self)}" if describe else ""
                raise WaitTimeout(f"{what}: not true after {timeout:.0f} s{last}")
            with self._changed:
                if self._generation == seen:
                    self._changed.wait(min(remaining, tick))
            if on_wait is not None:
                on_wait(time.monotonic() - start)


def list_objects(list_call: Callable[..., Any], **kwargs: Any) -> list[dict[str, Any]]:
    """One list call's items as plain dicts, the shape the API serves (no model classes)."""
    response = list_call(**kwargs, _preload_content=False)
    return list(json.loads(response.data).get("items", []))
