"""The monitoring release on the nodes: the prometheus-operator's work, and, on the modelled
kubelet, the release's pods played by the real programs (`controlplane.monitoring`).

`PrometheusOperator` is what the operator does while the release has its Service: every
PrometheusRule's groups become a rule file in the ConfigMap the Prometheus pod mounts (each
`for:` divided by the world's speed), one whose rules do not parse skipped, as the operator
skips it, so it keeps no other out; the configuration goes gzipped into a Secret; and the
operator's admission webhook answers at the Service's cluster IP, its configuration trusting it
(`rule_admission`), so the API server refuses such an object in the first place. On real
kubelets the pods run the real programs themselves (`labs.sim.node.container_process`).

`MonitoringRelease` adds what the modelled kubelet cannot run: while the release's
kube-state-metrics pod runs, the real kube-state-metrics answers at that pod's IP and port;
while its Prometheus pod runs, the real Prometheus answers at that pod's, its rules handed
over on every change. A pod that stops running stops its program; a program that exits is
started again after the kubelet's back-off (real seconds, as the operator's), its pod not
Ready meanwhile.
"""

from __future__ import annotations

import base64
import gzip
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from labs.aws.stack import MONITORING_NAMESPACE
from labs.kube.informers import InformedKubeApi
from labs.kube.resources import (
    CONFIG_MAPS,
    PODS,
    PROMETHEUS_RULES,
    SECRETS,
    SERVICES,
    VALIDATING_WEBHOOKS,
    NotFound,
    ResourceType,
)
from labs.sim.controllers.base import Controller
from labs.sim.controllers.kubelet import container_crashed, container_restarted, crash_backoff
from labs.sim.controllers.pod_endpoint import PodNetwork, announce, pod_entries, serving, withdraw
from labs.sim.controlplane import monitoring
from labs.sim.controlplane.monitoring import Prometheus, StateMetrics, scaled_rules
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
# The labels the operator puts on what it makes for a Prometheus.
OPERATOR_LABELS = {
    "managed-by": "prometheus-operator",
    "prometheus-name": "kube-prometheus-stack-prometheus",
}
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


class PrometheusOperator(Controller):
    """The prometheus-operator's work for the release's Prometheus, while the release has the
    operator's Service."""

    watched: tuple[ResourceType, ...] = (SERVICES, VALIDATING_WEBHOOKS, CONFIG_MAPS, SECRETS)

    def __init__(
        self, store: InformedKubeApi, timings: Timings, network: PodNetwork, proxy_url: str
    ) -> None:
        super().__init__(store, timings)
        self._network = network
        self._proxy_url = proxy_url  # how the Prometheus pod reaches the pods it scrapes
        self._check = RuleCheck()
        self._skipped: set[str] = set()  # `<namespace>/<name>@<resourceVersion>` told once
        self._admission: RuleAdmission | None = None
        self._route: Path | None = None  # the operator Service's cluster IP, to the webhook
        self._following_rules = False
        # the rule files of the last pass with the Service: a Prometheus keeps the last it had
        self._rule_files: dict[str, str] = {}

    def reconcile(self) -> float | None:
        if self._serve_admission():
            self._rule_files = self._render_rules()
            self._keep(CONFIG_MAPS, monitoring.RULES_CONFIG_MAP, self._rules_data())
            self._keep(SECRETS, monitoring.CONFIG_SECRET, self._config_data())
        else:
            for rtype, name in (
                (CONFIG_MAPS, monitoring.RULES_CONFIG_MAP),
                (SECRETS, monitoring.CONFIG_SECRET),
            ):
                if self.store.informer(rtype).get(MONITORING_NAMESPACE, name) is not None:
                    self.store.delete(rtype, name, MONITORING_NAMESPACE)
        return None

    def _rules_data(self) -> dict[str, str]:
        return {
            name: scaled_rules(text, self.timings.speed) for name, text in self._rule_files.items()
        }

    def _config_data(self) -> dict[str, str]:
        text = yaml.safe_dump(monitoring.pod_configuration(self._proxy_url), sort_keys=False)
        packed = gzip.compress(text.encode(), mtime=0)  # the same bytes for the same text
        return {monitoring.CONFIG_KEY: base64.b64encode(packed).decode()}

    def _keep(self, rtype: ResourceType, name: str, data: dict[str, str]) -> None:
        """The operator's object `name` holding `data`, written only where it differs."""
        current = self.store.informer(rtype).get(MONITORING_NAMESPACE, name)
        if current is not None and (current.get("data") or {}) == data:
            return
        metadata = {"name": name, "namespace": MONITORING_NAMESPACE, "labels": OPERATOR_LABELS}
        if current is not None:
            metadata["resourceVersion"] = current["metadata"]["resourceVersion"]
        obj = {"apiVersion": rtype.api_version, "kind": rtype.kind, "metadata": metadata}
        obj["data"] = data
        if current is None:
            self.store.create(rtype, obj)
        else:
            self.store.replace(rtype, obj)

    def _render_rules(self) -> dict[str, str]:
        """Every PrometheusRule's groups as a rule file `<namespace>-<name>-<uid>.yaml`, as the
        prometheus-operator renders them (the chart selects the rules of every namespace); one
        that does not parse is skipped, as the operator skips it (Prometheus would refuse every
        file of the reload, keeping everyone's new rules out)."""
        if not self._following_rules:  # the release's CRD exists once its Service does
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

    def _serve_admission(self) -> bool:
        """The operator's webhook and the chart's patch job: while the release has the
        operator's Service, its cluster IP leads to the webhook, whose configuration trusts the
        webhook's CA; without the Service, nothing answers there. Whether the Service is in."""
        try:
            service = self.store.get(SERVICES, OPERATOR_SERVICE, MONITORING_NAMESPACE)
        except NotFound:
            self._stop_admission()
            return False
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
        return True

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
        super().stop(timeout)
        self._stop_admission()


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
