"""The monitoring release's pods on the modelled kubelet, played by the real programs
(`controlplane.monitoring`), beside the prometheus-operator's work (`prometheus_operator`).

While the release's kube-state-metrics pod runs, the real kube-state-metrics answers at that
pod's IP and port; while its Prometheus pod runs, the real Prometheus answers at that pod's, its
rules handed over on every change. A pod that stops running stops its program; a program that
exits is started again after the kubelet's back-off (real seconds, as the operator's), its pod
not Ready meanwhile. On real kubelets the pods run the programs themselves.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from labs.aws.stack import MONITORING_NAMESPACE
from labs.kube.informers import InformedKubeApi
from labs.kube.resources import PODS, NotFound
from labs.sim.controllers.kubelet import container_crashed, container_restarted, crash_backoff
from labs.sim.controllers.pod_endpoint import PodNetwork, announce, pod_entries, serving, withdraw
from labs.sim.controllers.prometheus_operator import PrometheusOperator
from labs.sim.controlplane.monitoring import Prometheus, StateMetrics
from labs.sim.controlplane.run import ControlPlane
from labs.sim.timings import Timings

NAME_LABEL = "app.kubernetes.io/name"
log = logging.getLogger(__name__)


@dataclass
class _Played:
    """A release pod and the program answering at its address; a program that ended is started
    again at `restart_at` (the kubelet's back-off), its pod meanwhile not Ready."""

    uid: str
    program: StateMetrics | Prometheus
    entries: list[Path] = field(default_factory=list)
    restarts: int = 0
    restart_at: float | None = None

    def stop(self) -> None:
        withdraw(self.entries)
        self.program.stop()


class MonitoringRelease(PrometheusOperator):
    """The operator's work, and the release's pods played by the real programs on this host."""

    watched = (PODS, *PrometheusOperator.watched)

    def __init__(
        self,
        store: InformedKubeApi,
        timings: Timings,
        plane: ControlPlane,
        network: PodNetwork,
        proxy_url: str,
        home: Path,
    ) -> None:
        super().__init__(store, timings, network, proxy_url)
        self._plane = plane
        self._home = home
        self._played: dict[str, _Played] = {}  # app.kubernetes.io/name -> what plays it
        self._loaded: tuple[dict[str, str], float] | None = None  # Prometheus' rules, speed

    def reconcile(self) -> float | None:
        super().reconcile()
        pods = self.store.list(PODS, MONITORING_NAMESPACE)[0]
        due = [
            self._play(pods, "kube-state-metrics", self._start_state_metrics),
            self._play(pods, "prometheus", self._start_prometheus),
        ]
        played = self._played.get("prometheus")
        if played is not None and isinstance(played.program, Prometheus):
            wanted = (self._rule_files, self.timings.speed)
            if wanted != self._loaded and played.restart_at is None:
                played.program.reload(*wanted)
                self._loaded = wanted
        return min((d for d in due if d is not None), default=None)

    def _play(
        self, pods: list[dict], app: str, start: Callable[[], StateMetrics | Prometheus]
    ) -> float | None:
        """The program behind the running pod labelled `app`, started or stopped to match (the
        pod it crashed in stays its own); seconds until a crashed one starts again."""
        played = self._played.get(app)

        def ours(pod: dict) -> bool:
            mine = played is not None and pod["metadata"]["uid"] == played.uid
            return _labels(pod).get(NAME_LABEL) == app and (
                serving(pod) or (mine and not pod["metadata"].get("deletionTimestamp"))
            )

        pod = next((p for p in pods if ours(p)), None)
        if played is not None and (pod is None or pod["metadata"]["uid"] != played.uid):
            self._played.pop(app).stop()
            played = None
        if pod is None:
            return None
        if played is not None:
            return self._keep_running(pod, played, start)
        program = start()
        played = self._played[app] = _Played(pod["metadata"]["uid"], program)
        played.entries = pod_entries(pod, _port(pod), self._network)
        announce(played.entries, program.address)
        return None

    def _keep_running(
        self, pod: dict, played: _Played, start: Callable[[], StateMetrics | Prometheus]
    ) -> float | None:
        """As the kubelet does with a container that exits (restartPolicy Always): its pod not
        Ready in CrashLoopBackOff, then the program started again after the back-off."""
        code = played.program.exit_code()
        if code is None:
            return None
        now = time.monotonic()
        if played.restart_at is None:
            log.warning("%s exited with %s; starting it again", played.program.program, code)
            withdraw(played.entries)
            played.restart_at = now + crash_backoff(played.restarts)
            self._update(pod, container_crashed(code if code >= 0 else 128 - code))
        if now < played.restart_at:
            return played.restart_at - now
        played.program.stop()
        played.program = start()
        played.restarts += 1
        played.restart_at = None
        announce(played.entries, played.program.address)
        self._update(pod, container_restarted())
        return None

    def _update(self, pod: dict, mutate: Callable[[dict], None]) -> None:
        try:
            self.store.update(PODS, pod["metadata"]["name"], mutate, MONITORING_NAMESPACE)
        except NotFound:
            pass

    def _start_state_metrics(self) -> StateMetrics:
        program = StateMetrics(self._home, self._plane)
        program.start(on_exit=self.wake)
        return program

    def _start_prometheus(self) -> Prometheus:
        program = Prometheus(self._home, self._plane, proxy_url=self._proxy_url)
        self._loaded = (self._rule_files, self.timings.speed)
        program.start(*self._loaded, on_exit=self.wake)
        return program

    def stop(self, timeout: float = 5.0) -> None:
        """The loop first, then every program: none outlives the world."""
        super().stop(timeout)
        for played in self._played.values():
            played.stop()
        self._played.clear()


def _labels(pod: dict) -> dict[str, str]:
    return pod["metadata"].get("labels") or {}


def _port(pod: dict) -> int:
    return int(pod["spec"]["containers"][0]["ports"][0]["containerPort"])
