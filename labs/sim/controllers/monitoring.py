"""The monitoring release's pods, played by the real programs (`controlplane.monitoring`).

While the release's kube-state-metrics pod runs, the real kube-state-metrics answers at that
pod's IP and port; while its Prometheus pod runs, the real Prometheus answers at that pod's
(so the Service `kube-prometheus-stack-prometheus` reaches it, through the API server's proxy
too). As the prometheus-operator does, it hands Prometheus every PrometheusRule's groups as a
rule file: a PrometheusRule created, edited or deleted, or a new pace of the world, reloads
them. A pod that stops running stops its program.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from labs.aws.stack import MONITORING_NAMESPACE
from labs.sim.controllers.base import Controller
from labs.sim.controllers.pod_endpoint import PodNetwork, announce, pod_entries, serving, withdraw
from labs.sim.controlplane.informers import InformedKubeApi
from labs.sim.controlplane.monitoring import Prometheus, StateMetrics
from labs.sim.controlplane.resources import PODS, PROMETHEUS_RULES
from labs.sim.controlplane.run import ControlPlane
from labs.sim.timings import Timings

NAME_LABEL = "app.kubernetes.io/name"


@dataclass
class _Played:
    """A release pod and the program answering at its address."""

    uid: str
    program: StateMetrics | Prometheus
    entries: list[Path] = field(default_factory=list)

    def stop(self) -> None:
        withdraw(self.entries)
        self.program.stop()


class MonitoringRelease(Controller):
    watched = (PODS,)

    def __init__(
        self,
        store: InformedKubeApi,
        timings: Timings,
        plane: ControlPlane,
        network: PodNetwork,
        proxy_url: str,
        home: Path,
    ) -> None:
        super().__init__(store, timings)
        self._plane = plane
        self._network = network
        self._proxy_url = proxy_url
        self._home = home
        self._played: dict[str, _Played] = {}  # app.kubernetes.io/name -> what plays it
        self._loaded: tuple[dict[str, str], float] | None = None  # Prometheus' rules, speed
        self._following_rules = False

    def reconcile(self) -> float | None:
        pods = self.store.list(PODS, MONITORING_NAMESPACE)[0]
        self._play(pods, "kube-state-metrics", self._start_state_metrics)
        self._play(pods, "prometheus", self._start_prometheus)
        played = self._played.get("prometheus")
        if played is not None and isinstance(played.program, Prometheus):
            wanted = (self._rule_files(), self.timings.speed)
            if wanted != self._loaded:
                played.program.reload(*wanted)
                self._loaded = wanted
        return None

    def _play(
        self, pods: list[dict], app: str, start: Callable[[], StateMetrics | Prometheus]
    ) -> None:
        """The program behind the running pod labelled `app`, started or stopped to match."""
        pod = next((p for p in pods if serving(p) and _labels(p).get(NAME_LABEL) == app), None)
        played = self._played.get(app)
        if played is not None and (pod is None or pod["metadata"]["uid"] != played.uid):
            self._played.pop(app).stop()
            played = None
        if pod is None or played is not None:
            return
        program = start()
        played = self._played[app] = _Played(pod["metadata"]["uid"], program)
        played.entries = pod_entries(pod, _port(pod), self._network)
        announce(played.entries, program.address)

    def _start_state_metrics(self) -> StateMetrics:
        program = StateMetrics(self._home, self._plane)
        program.start()
        return program

    def _start_prometheus(self) -> Prometheus:
        program = Prometheus(self._home, self._plane, proxy_url=self._proxy_url)
        self._loaded = (self._rule_files(), self.timings.speed)
        program.start(*self._loaded)
        return program

    def _rule_files(self) -> dict[str, str]:
        """Every PrometheusRule's groups as a rule file `<namespace>-<name>.yaml`, as the
        prometheus-operator renders them (the chart selects the rules of every namespace)."""
        if not self._following_rules:  # the release's CRD exists once its Prometheus runs
            self.store.informer(PROMETHEUS_RULES).subscribe(self.wake)
            self._following_rules = True
        return {
            f"{rule['metadata']['namespace']}-{rule['metadata']['name']}.yaml": yaml.safe_dump(
                {"groups": (rule.get("spec") or {}).get("groups") or []}, sort_keys=False
            )
            for rule in self.store.list(PROMETHEUS_RULES)[0]
        }

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
