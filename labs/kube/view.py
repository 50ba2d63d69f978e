"""The lab's Kubernetes side: a client from the lab's kubeconfig and a watched view.

`ClusterView` keeps a live copy of a few resource kinds (list, then watch from the
list's resourceVersion, re-listing when the stream breaks), so any check over
several kinds ("both GPU nodes report allocatable 0 *and* the DaemonSet is gone")
is re-evaluated the moment the cluster changes, not on a polling tick. Waits and
scenario symptoms both stand on it.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from labs.errors import LabError
from labs.kube import rest
from labs.kube.api import KubeApi
from labs.kube.informers import Informer
from labs.kube.resources import (
    CLUSTER_POLICIES,
    DAEMON_SETS,
    DEPLOYMENTS,
    EVENTS,
    NAMESPACES,
    NODES,
    PODS,
    KubeApiError,
    ResourceType,
    message_of,
)

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
                    f"{response.reason}: {message_of(body)}; `invoke lab.up --lab {lab}` "
                    "rewrites it"
                )
        return response

    client.call_api = checked
    return client


def check_access(client: Any) -> None:
    """One authenticated read (a namespace), so refused credentials show before a change."""
    rest.get(client, NAMESPACES.path(), {"limit": 1}, timeout=ACCESS_TIMEOUT_SECONDS)


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
    """One kind to keep in a view: a resource type read through `client` (a kubernetes
    ApiClient), in one namespace (None: all) and, when given, matching a field selector."""

    name: str
    client: Any
    resource: ResourceType
    namespace: str | None = None
    field_selector: str = ""

    def list_once(self) -> list[dict[str, Any]]:
        """The kind's objects now, one list call (what a snapshot reads)."""
        query = {"fieldSelector": self.field_selector} if self.field_selector else None
        return rest.get_items(self.client, self.resource.path(self.namespace), query=query)

    def informer(self) -> Informer:
        """A watch-fed cache of the kind, listed before this returns."""
        api = KubeApi(self.client)
        return Informer(api, self.resource, self.namespace, self.field_selector)


def standard_kinds(
    client: Any, operator_namespace: str, workload_namespace: str = WORKLOAD_NAMESPACE
) -> list[WatchedKind]:
    """The kinds a GPU lab watches: nodes, workload pods and events, operator DaemonSets,
    the operator Deployment, pods and events, and ClusterPolicies."""

    def kind(name: str, resource: ResourceType, namespace: str | None = None) -> WatchedKind:
        return WatchedKind(name, client, resource, namespace)

    return [
        kind("nodes", NODES),
        kind("pods", PODS, workload_namespace),
        kind("events", EVENTS, workload_namespace),
        kind("daemonsets", DAEMON_SETS, operator_namespace),
        kind("deployments", DEPLOYMENTS, operator_namespace),
        kind("operator_pods", PODS, operator_namespace),
        kind("operator_events", EVENTS, operator_namespace),
        kind("clusterpolicies", CLUSTER_POLICIES),
    ]


class ClusterView:
    """A live, watch-fed copy of selected kinds, with waits that wake on every change."""

    def __init__(self, kinds: Iterable[WatchedKind], relist_pause: float = 0.5) -> None:
        self._kinds = list(kinds)
        self._relist_pause = relist_pause
        self._changed = threading.Condition()
        self._generation = 0  # bumped on every change, so a waiter knows what it has seen
        self._listeners: list[Callable[[ClusterView], None]] = []
        self._informers: dict[str, Informer] = {}

    def __enter__(self) -> ClusterView:
        self.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def start(self, sync_timeout: float = 30.0) -> None:
        """List every kind once (a refused or unanswered list is tried again until
        `sync_timeout`), then follow each one's watch."""
        deadline = time.monotonic() + sync_timeout
        for kind in self._kinds:
            informer = self._first_listing(kind, deadline, sync_timeout)
            informer.subscribe(self._one_changed)
            self._informers[kind.name] = informer

    def _first_listing(self, kind: WatchedKind, deadline: float, sync_timeout: float) -> Informer:
        while True:
            try:
                return kind.informer()
            except (KubeApiError, OSError) as error:  # KubeUnreachable is both
                left = deadline - time.monotonic()
                if left <= 0:
                    self.stop()
                    raise WaitTimeout(
                        f"could not list {kind.name} from the cluster within "
                        f"{sync_timeout:.0f} s ({error})"
                    ) from None
                time.sleep(min(self._relist_pause, left))

    def stop(self) -> None:
        """End every kind's watch (each closes its connection at once)."""
        informers, self._informers = self._informers, {}
        for informer in informers.values():
            informer.unsubscribe(self._one_changed)
            informer.stop()

    def on_change(self, listener: Callable[[ClusterView], None]) -> None:
        """Call `listener(view)` after every change (used to sample timelines)."""
        self._listeners.append(listener)

    def objects(self, kind: str) -> list[dict[str, Any]]:
        """The objects of one watched kind now (none once the view has stopped). They are the
        cache's own: read them, never change them."""
        if kind not in self._informers and kind not in (k.name for k in self._kinds):
            raise KeyError(f"{kind} is not watched by this view")
        informer = self._informers.get(kind)
        return informer.items(None) if informer is not None else []

    def find(self, kind: str, name: str, namespace: str = "") -> dict[str, Any] | None:
        """One object by name, or None when it does not exist."""
        return find_in(self.objects(kind), name, namespace)

    def _one_changed(self) -> None:
        """An informer applied a change: wake the waiters, then tell the listeners."""
        with self._changed:
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
