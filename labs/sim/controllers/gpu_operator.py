"""The GPU Operator's pod, played by NVIDIA's own controller (`controlplane.gpu_operator`).

While a pod of the chart's Deployment `gpu-operator` runs, the real operator runs as that pod:
its container's args and environment, its ServiceAccount's token (so the chart's RBAC is what
it reconciles under), its output as the pod's log (`kubectl logs -n gpu-operator
deploy/gpu-operator`), its metrics at the pod's IP and port 8080 (where the Service the
operator creates, and Prometheus, reach it). When the pod goes (scaled to 0, deleted) the
process gets SIGTERM and nothing reconciles; the next pod starts a new process, which waits
for the leader lease its predecessor held, as on a cluster. A process that exits on its own is
started again after the kubelet's back-off (10 s, doubling up to 5 minutes).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from labs.kube import gpu
from labs.kube.informers import InformedKubeApi
from labs.kube.resources import PODS
from labs.sim.controllers.base import Controller
from labs.sim.controllers.kubelet import crash_backoff
from labs.sim.controllers.pod_endpoint import PodNetwork, announce, pod_entries, serving, withdraw
from labs.sim.controlplane.gpu_operator import OperatorProcess, OperatorRelease, release
from labs.sim.controlplane.run import ControlPlane
from labs.sim.node.container_logs import ContainerLogs
from labs.sim.timings import Timings

log = logging.getLogger(__name__)

# The port the chart's container declares for the operator's metrics.
METRICS_PORT = 8080


@dataclass
class _Running:
    """The pod the operator runs as, its process, and where its metrics are announced."""

    uid: str
    process: OperatorProcess
    entries: list[Path]
    restarts: int = 0
    restart_at: float | None = None


class GpuOperatorPod(Controller):
    watched = (PODS,)

    def __init__(
        self,
        store: InformedKubeApi,
        timings: Timings,
        plane: ControlPlane,
        logs: ContainerLogs,
        network: PodNetwork,
        home: Path,
    ) -> None:
        super().__init__(store, timings)
        self._plane = plane
        self._logs = logs
        self._network = network
        self._home = home
        self._release: OperatorRelease | None = None
        self._running: _Running | None = None

    def reconcile(self) -> float | None:
        pods = self.store.list(PODS, label_selector=gpu.OPERATOR_POD_SELECTOR)[0]
        pod = next((p for p in pods if serving(p)), None)
        running = self._running
        if running is not None and (pod is None or pod["metadata"]["uid"] != running.uid):
            self._stop()
            running = None
        if pod is None:
            return None
        if running is None:
            self._start(pod)
            return None
        return self._restart_if_exited(pod, running)

    def _start(self, pod: dict, restarts: int = 0) -> None:
        if self._release is None:
            self._release = release(lambda line: log.info("%s", line))
        account = pod["spec"].get("serviceAccountName") or "default"
        token = self.store.service_account_token(pod["metadata"]["namespace"], account)
        process = OperatorProcess(
            self._home, self._plane.api_url, self._plane.ca_pem, self._output(pod)
        )
        process.start(self._release, pod, token)
        entries = pod_entries(pod, METRICS_PORT, self._network)
        announce(entries, process.metrics_address)
        self._running = _Running(pod["metadata"]["uid"], process, entries, restarts)

    def _restart_if_exited(self, pod: dict, running: _Running) -> float | None:
        code = running.process.exit_code()
        if code is None:
            return None
        now = time.monotonic()
        if running.restart_at is None:
            backoff = crash_backoff(running.restarts)
            log.warning("the GPU Operator exited with %s; starting it again in %.0f s", code,
                        backoff)  # fmt: skip
            running.restart_at = now + backoff
        if now < running.restart_at:
            return running.restart_at - now
        self._stop()
        self._start(pod, running.restarts + 1)
        return None

    def _output(self, pod: dict) -> Callable[[str], None]:
        """The process's output, line by line, into the pod's log (zap writes to stderr)."""
        return lambda line: self._logs.append(pod, line, stream="stderr")

    def _stop(self) -> None:
        running, self._running = self._running, None
        if running is not None:
            withdraw(running.entries)
            running.process.stop()

    def stop(self, timeout: float = 5.0) -> None:
        """The loop first, then the process: it never outlives the world."""
        super().stop(timeout)
        self._stop()
