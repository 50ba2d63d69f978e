"""What each node's kubelet would answer at /metrics/resource, written where the node endpoint
serves it from: `<directory>/<node InternalIP>.prom`, Prometheus text as kubelet 1.35 writes it.

metrics-server scrapes those files through the node endpoint, so `kubectl top` shows these
figures. They are plausible, not measured: a node uses a share of its machine for the system
(more memory on a bigger one) plus what its running containers use, and a container uses a
share of what it requests (a small floor when it requests nothing). CPU counters grow with
real time, whatever the world's pace: metrics-server divides them by real seconds.
"""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from pathlib import Path

from kubernetes.utils import parse_quantity as quantity

from labs.kube.informers import InformedKubeApi
from labs.kube.resources import NODES, PODS
from labs.sim.controllers.base import Controller
from labs.sim.controllers.kubelet import internal_ip
from labs.sim.timings import Timings

# How often the files are rewritten: the cAdvisor housekeeping a kubelet's figures come from;
# after a change, the next write waits at least WRITE_GAP since the last.
WRITE_EVERY = 5.0
WRITE_GAP = 1.0
# The system's share of a node: CPU (cores per core) and working-set memory (of capacity).
SYSTEM_CPU_SHARE = 0.03
SYSTEM_MEMORY_SHARE = 0.12
# A container's use of what it requests, and the floor for one that requests nothing.
REQUEST_SHARE = (0.2, 0.6)  # at most 60% of its request, at least 20% (varies by container)
IDLE_CPU_CORES = 0.002
IDLE_MEMORY_BYTES = 12 * 2**20

_HELP = {
    "container_cpu_usage_seconds_total": (
        "counter",
        "Cumulative cpu time consumed by the container in core-seconds",
    ),
    "container_memory_working_set_bytes": (
        "gauge",
        "Current working set of the container in bytes",
    ),
    "container_start_time_seconds": (
        "gauge",
        "Start time of the container since unix epoch in seconds",
    ),
    "node_cpu_usage_seconds_total": (
        "counter",
        "Cumulative cpu time consumed by the node in core-seconds",
    ),
    "node_memory_working_set_bytes": ("gauge", "Current working set of the node in bytes"),
    "pod_cpu_usage_seconds_total": (
        "counter",
        "Cumulative cpu time consumed by the pod in core-seconds",
    ),
    "pod_memory_working_set_bytes": ("gauge", "Current working set of the pod in bytes"),
    "resource_scrape_error": (
        "gauge",
        "1 if there was an error while getting container metrics, 0 otherwise",
    ),
}


@dataclass(frozen=True)
class Usage:
    """One container's steady use: CPU cores and working-set bytes."""

    cores: float
    memory: float


def container_usage(pod: dict, container: dict) -> Usage:
    """A share of the container's requests, the same every time for the same pod."""
    seed = hashlib.sha256(f"{pod['metadata']['uid']}/{container['name']}".encode()).digest()
    low, high = REQUEST_SHARE
    share = low + (high - low) * seed[0] / 255
    requests = (container.get("resources") or {}).get("requests") or {}
    cpu = float(quantity(requests.get("cpu", "0"))) * share
    memory = float(quantity(requests.get("memory", "0"))) * share
    return Usage(max(cpu, IDLE_CPU_CORES), float(int(max(memory, IDLE_MEMORY_BYTES))))


def go_float(value: float) -> str:
    """A float as Go's strconv.FormatFloat(v, 'g', -1, 64) writes it (Prometheus's text)."""
    shortest = Decimal(repr(float(value)))
    exponent = shortest.adjusted()
    if -4 <= exponent < 6:
        text = format(shortest, "f")
        return text.rstrip("0").rstrip(".") if "." in text else text
    digits = "".join(map(str, shortest.normalize().as_tuple().digits))
    mantissa = digits[0] + (f".{digits[1:]}" if len(digits) > 1 else "")
    return f"{mantissa}e{'+' if exponent >= 0 else '-'}{abs(exponent):02d}"


Series = dict[str, list[str]]


class ResourceMetrics(Controller):
    """Rewrites every node's file every few seconds, and after a change it watches, but at most
    once a second (a busy world changes pods many times a second); a gone node's file goes
    with it."""

    watched = (NODES, PODS)

    def __init__(self, store: InformedKubeApi, timings: Timings, directory: Path) -> None:
        super().__init__(store, timings)
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        # CPU counters (core-seconds, when last advanced) by node name and by container
        self._counters: dict[str, tuple[float, float]] = {}
        self._next_write = 0.0

    def reconcile(self) -> float | None:
        now = time.time()
        if now < self._next_write:
            return self._next_write - now
        self._next_write = now + WRITE_GAP
        pods = [p for p in self.store.list(PODS)[0] if _running(p)]
        written: set[str] = set()
        seen: set[str] = set()
        for node in self.store.list(NODES)[0]:
            name = node["metadata"]["name"]
            here = [p for p in pods if p["spec"].get("nodeName") == name]
            file = f"{internal_ip(node)}.prom"
            _write_atomically(self.directory / file, self._node_text(node, here, now, seen))
            written.add(file)
        for stale in set(os.listdir(self.directory)) - written:
            (self.directory / stale).unlink(missing_ok=True)
        self._counters = {key: value for key, value in self._counters.items() if key in seen}
        return WRITE_EVERY

    def _advance(self, key: str, cores: float, now: float, since: float, seen: set[str]) -> float:
        """The CPU counter of `key` moved on to `now` at `cores` (counted from `since` when
        new): it only ever grows, as a kubelet's does."""
        total, last = self._counters.get(key, (0.0, since))
        total += cores * max(now - last, 0.0)
        self._counters[key] = (total, now)
        seen.add(key)
        return total

    def _node_text(self, node: dict, pods: list[dict], now: float, seen: set[str]) -> str:
        stamp = int(now * 1000)
        capacity = (node.get("status") or {}).get("capacity") or {}
        cores = float(quantity(capacity.get("cpu", "0"))) * SYSTEM_CPU_SHARE
        memory = float(int(float(quantity(capacity.get("memory", "0"))) * SYSTEM_MEMORY_SHARE))
        series: Series = {name: [] for name in _HELP}
        for pod in pods:
            used = self._pod_series(pod, now, seen, series)
            cores, memory = cores + used.cores, memory + used.memory
        created = _epoch(node["metadata"].get("creationTimestamp")) or now
        node_cpu = self._advance(node["metadata"]["name"], cores, now, created, seen)
        series["node_cpu_usage_seconds_total"].append(f" {go_float(node_cpu)} {stamp}")
        series["node_memory_working_set_bytes"].append(f" {go_float(memory)} {stamp}")
        series["resource_scrape_error"].append(" 0")
        return "".join(_family(name, lines) for name, lines in series.items() if lines)

    def _pod_series(self, pod: dict, now: float, seen: set[str], series: Series) -> Usage:
        """Add one running pod's lines; returns what it uses in all."""
        meta, stamp = pod["metadata"], int(now * 1000)
        pod_labels = f'namespace="{meta["namespace"]}",pod="{meta["name"]}"'
        cores = memory = cpu_total = 0.0
        for container in pod["spec"].get("containers") or []:
            usage, started = container_usage(pod, container), _started(pod, container["name"])
            key = f"{meta['uid']}/{container['name']}"
            cpu = self._advance(key, usage.cores, now, started, seen)
            labels = f'{{container="{container["name"]}",{pod_labels}}}'
            series["container_cpu_usage_seconds_total"].append(f"{labels} {go_float(cpu)} {stamp}")
            series["container_memory_working_set_bytes"].append(
                f"{labels} {go_float(usage.memory)} {stamp}"
            )
            series["container_start_time_seconds"].append(f"{labels} {go_float(started)}")
            cores, memory, cpu_total = cores + usage.cores, memory + usage.memory, cpu_total + cpu
        series["pod_cpu_usage_seconds_total"].append(
            f"{{{pod_labels}}} {go_float(cpu_total)} {stamp}"
        )
        series["pod_memory_working_set_bytes"].append(
            f"{{{pod_labels}}} {go_float(memory)} {stamp}"
        )
        return Usage(cores, memory)


def _family(name: str, lines: list[str]) -> str:
    kind, text = _HELP[name]
    samples = "".join(f"{name}{line}\n" for line in sorted(lines))
    return f"# HELP {name} [STABLE] {text}\n# TYPE {name} {kind}\n{samples}"


def _running(pod: dict) -> bool:
    status = pod.get("status") or {}
    containers = status.get("containerStatuses") or []
    return status.get("phase") == "Running" and any("running" in c["state"] for c in containers)


def _started(pod: dict, container: str) -> float:
    """When the container started (unix seconds), from its status."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status["name"] == container:
            started = _epoch((status["state"].get("running") or {}).get("startedAt"))
            if started:
                return started
    return time.time()


def _epoch(stamp: str | None) -> float | None:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() if stamp else None


def _write_atomically(path: Path, text: str) -> None:
    """Replace the file whole: the node endpoint never serves half of one."""
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(text)
    partial.replace(path)
