"""The monitoring release's pods, played by the real programs (`controlplane.monitoring`).

While the release's kube-state-metrics pod runs, the real kube-state-metrics answers at that
pod's IP and port; while its Prometheus pod runs, the real Prometheus answers at that pod's
(so the Service `kube-prometheus-stack-prometheus` reaches it, through the API server's proxy
too). As the prometheus-operator does, it hands Prometheus every PrometheusRule's groups as a
rule file: a PrometheusRule created, edited or deleted, or a new pace of the world, reloads
them; one whose rules do not parse is skipped, as the operator skips it, so it keeps no other
out. While the release has the operator's Service, the operator's admission webhook answers at
its cluster IP and the webhook's configuration trusts it (`rule_admission`), so the API server
refuses such an object in the first place. A pod that stops running stops its program; a
program that exits is started again after the kubelet's back-off (real seconds, as the
operator's), its pod not Ready meanwhile.
"""

from __future__ import annotations

import base64
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from labs.aws.stack import MONITORING_NAMESPACE
from labs.kube.informers import InformedKubeApi
from labs.kube.resources import (
    PODS,
    PROMETHEUS_RULES,
    SERVICES,
    VALIDATING_WEBHOOKS,
    NotFound,
)
from labs.sim.controllers.base import Controller
from labs.sim.controllers.kubelet import container_crashed, container_restarted, crash_backoff
from labs.sim.controllers.pod_endpoint import PodNetwork, announce, pod_entries, serving, withdraw
from labs.sim.controlplane.monitoring import Prometheus, StateMetrics
from labs.sim.controlplane.rule_admission import (
    OPERATOR_SERVICE,
    WEBHOOK_CONFIGURATION,
    RuleAdmission,
    RuleCheck,
    rule_file,
)
from labs.sim.controlplane.run import ControlPlane
from labs.sim.timings import Timings
from labs.state import atomic_write_text

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
        self._check = RuleCheck()
        self._skipped: set[str] = set()  # `<namespace>/<name>@<resourceVersion>` told once
        self._admission: RuleAdmission | None = None
        self._route: Path | None = None  # the operator Service's cluster IP, to the webhook
        self._following_admission = False

    def reconcile(self) -> float | None:
        self._serve_admission()
        pods = self.store.list(PODS, MONITORING_NAMESPACE)[0]
        due = [
            self._play(pods, "kube-state-metrics", self._start_state_metrics),
            self._play(pods, "prometheus", self._start_prometheus),
        ]
        played = self._played.get("prometheus")
        if played is not None and isinstance(played.program, Prometheus):
            wanted = (self._rule_files(), self.timings.speed)
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
        self._loaded = (self._rule_files(), self.timings.speed)
        program.start(*self._loaded, on_exit=self.wake)
        return program

    def _rule_files(self) -> dict[str, str]:
        """Every PrometheusRule's groups as a rule file `<namespace>-<name>-<uid>.yaml`, as the
        prometheus-operator renders them (the chart selects the rules of every namespace); one
        that does not parse is skipped, as the operator skips it (Prometheus would refuse every
        file of the reload, keeping everyone's new rules out)."""
        if not self._following_rules:  # the release's CRD exists once its Prometheus runs
            self.store.informer(PROMETHEUS_RULES).subscribe(self.wake)
            self._following_rules = True
        files = {}
        for rule in self.store.list(PROMETHEUS_RULES)[0]:
            meta = rule["metadata"]
            text = rule_file((rule.get("spec") or {}).get("groups") or [])
            errors = self._check.errors(text)
            if errors:
                self._skip(meta, errors)
                continue
            files[f"{meta['namespace']}-{meta['name']}-{meta['uid']}.yaml"] = text
        return files

    def _skip(self, meta: dict, errors: list[str]) -> None:
        """Say once per version what the operator says of a rule object it skips."""
        key = f"{meta['namespace']}/{meta['name']}@{meta.get('resourceVersion')}"
        if key not in self._skipped:
            self._skipped.add(key)
            log.warning("skipping prometheusrule %s: invalid rule: %s", key, "; ".join(errors))

    def _serve_admission(self) -> None:
        """The operator's webhook and the chart's patch job: while the release has the
        operator's Service, its cluster IP leads to the webhook, whose configuration trusts the
        webhook's CA; without the Service, nothing answers there."""
        if not self._following_admission:
            for rtype in (SERVICES, VALIDATING_WEBHOOKS):
                self.store.informer(rtype).subscribe(self.wake)
            self._following_admission = True
        try:
            service = self.store.get(SERVICES, OPERATOR_SERVICE, MONITORING_NAMESPACE)
        except NotFound:
            self._stop_admission()
            return
        if self._admission is None:
            self._admission = RuleAdmission(self._check)
            self._admission.start()
        ports = service["spec"].get("ports") or []
        address = self._admission.address
        for port in ports[:1]:
            route = self._network.routes / f"{service['spec']['clusterIP']}_{port['port']}"
            if self._route != route or not route.exists():
                atomic_write_text(route, f"{address}\n")
                self._route = route
        self._trust(base64.b64encode(self._admission.ca_pem.encode()).decode())

    def _trust(self, bundle: str) -> None:
        """The configuration's caBundle set to the webhook's CA, as the patch job sets it."""
        try:
            config = self.store.get(VALIDATING_WEBHOOKS, WEBHOOK_CONFIGURATION)
        except NotFound:
            return
        if all(w.get("clientConfig", {}).get("caBundle") == bundle for w in config["webhooks"]):
            return

        def patched(config: dict) -> None:
            for webhook in config["webhooks"]:
                webhook.setdefault("clientConfig", {})["caBundle"] = bundle

        self.store.update(VALIDATING_WEBHOOKS, WEBHOOK_CONFIGURATION, patched)

    def _stop_admission(self) -> None:
        """The release is gone (or the world stops): nothing answers at the Service's IP."""
        if self._route is not None:
            withdraw([self._route])
            self._route = None
        if self._admission is not None:
            self._admission.stop()
        self._admission = None

    def stop(self, timeout: float = 5.0) -> None:
        """The loop first, then every program: none outlives the world."""
        super().stop(timeout)
        for played in self._played.values():
            played.stop()
        self._played.clear()
        self._stop_admission()


def _labels(pod: dict) -> dict[str, str]:
    return pod["metadata"].get("labels") or {}


def _port(pod: dict) -> int:
    return int(pod["spec"]["containers"][0]["ports"][0]["containerPort"])
