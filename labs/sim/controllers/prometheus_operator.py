"""The prometheus-operator's work for the monitoring release's Prometheus, which the world
does for it whoever runs the nodes.

While the release has the operator's Service, every PrometheusRule's groups become a rule file
in the ConfigMap the Prometheus pod mounts (each `for:` divided by the world's speed), one whose
rules do not parse skipped, as the operator skips it, so it keeps no other out; the
configuration goes gzipped into a Secret; and the operator's admission webhook answers at the
Service's cluster IP, its configuration trusting it (`rule_admission`), so the API server
refuses such an object in the first place.
"""

from __future__ import annotations

import base64
import gzip
import logging
from pathlib import Path

import yaml

from labs.aws.stack import MONITORING_NAMESPACE
from labs.kube.informers import InformedKubeApi
from labs.kube.resources import (
    CONFIG_MAPS,
    PROMETHEUS_RULES,
    SECRETS,
    SERVICES,
    VALIDATING_WEBHOOKS,
    NotFound,
    ResourceType,
)
from labs.sim.controllers.base import Controller
from labs.sim.controllers.pod_endpoint import PodNetwork, withdraw
from labs.sim.controlplane import monitoring
from labs.sim.controlplane.monitoring import scaled_rules
from labs.sim.controlplane.rule_admission import (
    OPERATOR_SERVICE,
    WEBHOOK_CONFIGURATION,
    RuleAdmission,
    RuleCheck,
    rule_file,
)
from labs.sim.timings import Timings
from labs.state import atomic_write_text

# The labels the operator puts on what it makes for a Prometheus.
OPERATOR_LABELS = {
    "managed-by": "prometheus-operator",
    "prometheus-name": "kube-prometheus-stack-prometheus",
}
log = logging.getLogger(__name__)


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
