"""dcgm-exporter's endpoint: every running exporter pod answers `/metrics` on its port 9400.

For each running pod of the dcgm-exporter DaemonSet the world serves the exporter's page
from a small HTTP server on loopback and writes the node endpoint's ports-dir entry for the
pod's port to it, so `kubectl port-forward` to the pod (or its Service) reaches it, as on
EKS. The page is Prometheus text with dcgm-exporter's field names, help lines and labels;
the figures are the world's GPU model (the idle A10G `nvidia-smi` shows on that node). A
server stops when its pod stops running, and all of them with the world.
"""

from __future__ import annotations

import threading
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from labs.sim.controllers.base import Controller
from labs.sim.controllers.gpu_operator import DCGM_EXPORTER_METRICS, OPERANDS
from labs.sim.controlplane.informers import InformedKubeApi
from labs.sim.controlplane.resources import PODS
from labs.sim.controlplane.tls import LOOPBACK
from labs.sim.node.hardware import (
    GPU_DRIVER_VERSION,
    GPU_MEMORY_MIB,
    GPU_NAME,
    GPU_TABLE_CELLS,
    gpu_uuid,
)
from labs.sim.timings import Timings

EXPORTER = next(o for o in OPERANDS if o.step == "state-dcgm-exporter")
# (field, help as dcgm-exporter's default counters word it, value on the world's idle A10G)
FIELDS = (
    ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", GPU_TABLE_CELLS["temperature"][:-1]),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", f"{float(GPU_TABLE_CELLS['power'][:-1]):f}"),
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", GPU_TABLE_CELLS["utilization"][:-1]),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).", "0"),
    ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", str(GPU_MEMORY_MIB)),
    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", "0"),
    ("DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.", "0"),
)


def metrics_page(node_name: str) -> str:
    """The exporter's `/metrics` on `node_name`: one GPU, labelled as dcgm-exporter does."""
    labels = (
        f'gpu="0",UUID="{gpu_uuid(node_name)}",pci_bus_id="{GPU_TABLE_CELLS["bus_id"]}",'
        f'device="nvidia0",modelName="{GPU_NAME}",Hostname="{node_name}",'
        f'DCGM_FI_DRIVER_VERSION="{GPU_DRIVER_VERSION}"'
    )
    return "".join(
        f"# HELP {name} {help_text}\n# TYPE {name} gauge\n{name}{{{labels}}} {value}\n"
        for name, help_text, value in FIELDS
    )


class _Page(BaseHTTPRequestHandler):
    def __init__(self, page: bytes, *args: Any) -> None:
        self._page = page
        super().__init__(*args)

    def do_GET(self) -> None:  # noqa: N802 - the name http.server calls
        found = self.path.split("?")[0] == "/metrics"
        body = self._page if found else b"404 page not found\n"
        self.send_response(200 if found else 404)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        """Quiet: the world's servers do not write to its terminal."""


class _Exporter:
    """One pod's server on loopback and its ports-dir entry."""

    def __init__(self, page: str, entry: Path) -> None:
        self._server = ThreadingHTTPServer((LOOPBACK, 0), partial(_Page, page.encode()))
        self._thread = threading.Thread(
            target=self._server.serve_forever, name=f"dcgm-exporter-{entry.parent.name}"
        )
        self._thread.start()
        self._entry = entry
        entry.parent.mkdir(parents=True, exist_ok=True)
        entry.write_text(f"{LOOPBACK}:{self._server.server_address[1]}\n")

    def stop(self) -> None:
        self._entry.unlink(missing_ok=True)
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


class DcgmExporter(Controller):
    watched = (PODS,)

    def __init__(self, store: InformedKubeApi, timings: Timings, ports: Path) -> None:
        super().__init__(store, timings)
        self._ports = ports
        self._exporters: dict[str, _Exporter] = {}  # pod uid -> its server

    def reconcile(self) -> float | None:
        pods = self.store.list(PODS, label_selector=f"app={EXPORTER.daemonset}")[0]
        running = {p["metadata"]["uid"]: p for p in pods if _serving(p)}
        for uid in set(self._exporters) - set(running):
            self._exporters.pop(uid).stop()
        for uid, pod in running.items():
            if uid not in self._exporters:
                meta = pod["metadata"]
                pod_dir = self._ports / f"{meta['namespace']}_{meta['name']}"
                entry = pod_dir / str(DCGM_EXPORTER_METRICS.number)
                self._exporters[uid] = _Exporter(metrics_page(pod["spec"]["nodeName"]), entry)
        return None

    def stop(self, timeout: float = 5.0) -> None:
        """The loop first, then every server: none is left once the world has stopped."""
        super().stop(timeout)
        for exporter in self._exporters.values():
            exporter.stop()
        self._exporters.clear()


def _serving(pod: dict) -> bool:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    running = bool(statuses) and all("running" in s.get("state", {}) for s in statuses)
    return running and not pod["metadata"].get("deletionTimestamp")
