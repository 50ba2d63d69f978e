"""An HTTP endpoint a pod serves, played on loopback: its `/metrics` page, reachable the ways a
cluster reaches a pod's port.

The world writes where the server listens into two places the node endpoint reads:
- `ports/<namespace>_<pod>/<port>`: `kubectl port-forward` to the pod (or its Service);
- `routes/<pod IP>_<port>`: the pod's address in the lab's network, where the node endpoint's
  proxy takes a scrape of the pod IP (Prometheus' way in) and the API server's proxy to the
  pod or its Service.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from labs.kube.informers import InformedKubeApi
from labs.kube.resources import PODS
from labs.sim.controllers.base import Controller
from labs.sim.controlplane.tls import LOOPBACK
from labs.sim.timings import Timings

Page = Callable[[], str]  # the Prometheus text the endpoint answers now


@dataclass(frozen=True)
class PodNetwork:
    """The node endpoint's two directories: pods by name, addresses by IP."""

    ports: Path
    routes: Path


class _Handler(BaseHTTPRequestHandler):
    def __init__(self, page: Page, *args: Any) -> None:
        self._page = page
        super().__init__(*args)

    def do_GET(self) -> None:  # noqa: N802 - the name http.server calls
        found = self.path.split("?")[0] == "/metrics"
        body = self._page().encode() if found else b"404 page not found\n"
        self.send_response(200 if found else 404)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        """Quiet: the world's servers do not write to its terminal."""


class _PageServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """A scraper that hung up before the page was written (its timeout, a test that read
        enough) is nothing to report; anything else is printed as the base class does."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def page_server(page: Page, address: tuple[str, int]) -> ThreadingHTTPServer:
    """An HTTP server at `address` answering `/metrics` with `page()`, read at each scrape."""
    return _PageServer(address, partial(_Handler, page))


def pod_entries(pod: dict, port: int, network: PodNetwork) -> list[Path]:
    """Where the node endpoint looks for `pod`'s `port`: by pod name and by pod IP."""
    meta = pod["metadata"]
    entries = [network.ports / f"{meta['namespace']}_{meta['name']}" / str(port)]
    pod_ip = (pod.get("status") or {}).get("podIP")
    if pod_ip:
        entries.append(network.routes / f"{pod_ip}_{port}")
    return entries


def announce(entries: Sequence[Path], address: str) -> None:
    """Make `address` ("host:port") what the node endpoint reaches at each entry."""
    for entry in entries:
        entry.parent.mkdir(parents=True, exist_ok=True)
        entry.write_text(f"{address}\n")


def withdraw(entries: Sequence[Path]) -> None:
    for entry in entries:
        entry.unlink(missing_ok=True)


class PodEndpoint:
    """One pod's server on loopback, announced at `entries` until it stops."""

    def __init__(self, page: Page, entries: Sequence[Path], name: str) -> None:
        self._server = page_server(page, (LOOPBACK, 0))
        self._thread = threading.Thread(target=self._server.serve_forever, name=name)
        self._thread.start()
        self._entries = list(entries)
        announce(self._entries, f"{LOOPBACK}:{self._server.server_address[1]}")

    def stop(self) -> None:
        withdraw(self._entries)
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


class PodMetrics(Controller):
    """Every running pod that `selector` picks serves `page_for(pod)` on `port` while it runs;
    a server stops when its pod stops running, and all of them with the world."""

    watched = (PODS,)

    def __init__(
        self,
        store: InformedKubeApi,
        timings: Timings,
        network: PodNetwork,
        selector: str,
        port: int,
        page_for: Callable[[dict], Page],
        name: str,
    ) -> None:
        super().__init__(store, timings)
        self._name = name
        self._network = network
        self._selector = selector
        self._port = port
        self._page_for = page_for
        self._endpoints: dict[str, PodEndpoint] = {}  # pod uid -> its server

    @property
    def name(self) -> str:
        return self._name

    def reconcile(self) -> float | None:
        pods = self.store.list(PODS, label_selector=self._selector)[0]
        running = {p["metadata"]["uid"]: p for p in pods if serving(p)}
        for uid in set(self._endpoints) - set(running):
            self._endpoints.pop(uid).stop()
        for uid, pod in running.items():
            if uid not in self._endpoints:
                entries = pod_entries(pod, self._port, self._network)
                name = f"{pod['metadata']['name']}:{self._port}"
                self._endpoints[uid] = PodEndpoint(self._page_for(pod), entries, name)
        return None

    def stop(self, timeout: float = 5.0) -> None:
        """The loop first, then every server: none is left once the world has stopped."""
        super().stop(timeout)
        for endpoint in self._endpoints.values():
            endpoint.stop()
        self._endpoints.clear()


def serving(pod: dict) -> bool:
    """Its containers run and it is not being deleted: what it serves answers."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    running = bool(statuses) and all("running" in s.get("state", {}) for s in statuses)
    return running and not pod["metadata"].get("deletionTimestamp")
