"""Run the real kube-state-metrics and Prometheus of the monitoring release for one rehearsal lab.

Each talks to the API server as its release's ServiceAccount, with a token the API server
issued for it (so the chart's RBAC applies). Prometheus
finds its targets as kube-prometheus-stack's ServiceMonitors make it: the EndpointSlices of a
Service's port, read from the API server, then a scrape of each pod IP through the lab's pod
network (the node endpoint's proxy). It evaluates the lab's alert rules with every `for:`
divided by the world's speed (at speed 20 a rule's 10 minutes hold for 30 s, as the world's
10 minutes do), and never under MIN_FOR_SECONDS.
"""

from __future__ import annotations

import base64
import re
import shutil
import signal
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import yaml

from labs.aws.stack import MONITORING_NAMESPACE
from labs.kube.api import KubeApi
from labs.sim.controlplane import build
from labs.sim.controlplane.kubeconfig import kubeconfig_document, write_kubeconfig
from labs.sim.controlplane.run import BesidePlane, ControlPlane, free_port
from labs.sim.controlplane.tls import LOOPBACK

STATE_METRICS_ACCOUNT = "kube-prometheus-stack-kube-state-metrics"
PROMETHEUS_ACCOUNT = "kube-prometheus-stack-prometheus"
# How often Prometheus scrapes and evaluates (kube-prometheus-stack: 30 s): the world's minutes
# pass in seconds, so it looks every second.
INTERVAL = "1s"
# (job: the Service's name, its port's name, honor_labels) as the ServiceMonitors give them:
# kube-state-metrics' own namespace/pod labels name the objects it reports, so they win.
SCRAPED = (
    (STATE_METRICS_ACCOUNT, "http", True),
    ("gpu-operator", "gpu-operator-metrics", False),
    ("nvidia-dcgm-exporter", "gpu-metrics", False),
)
_DURATION = re.compile(r"(\d+)(ms|s|m|h|d|w|y)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
Say = Callable[[str], None]
# The shortest `for:` the rehearsal plays (wall seconds): the world's own steps take seconds
# of real time on a busy machine (a node draining, an operand rolling out one node at a time
# through its init containers), which at a high speed would be many minutes of the world and
# fire rules no real cluster would: device-plugin-off's validator rollout (a minute or two on
# EKS, well inside `for: 5m`) held a DaemonSet unavailable for 7 s of a loaded CI machine.
MIN_FOR_SECONDS = 15.0
# What the prometheus-operator makes for the release's Prometheus (named after it): the
# configuration, gzipped in a Secret, and every PrometheusRule's rule file in a ConfigMap, each
# mounted into the Prometheus pod where its arguments and configuration read them.
PROMETHEUS_NAME = "prometheus-kube-prometheus-stack-prometheus"
CONFIG_SECRET = PROMETHEUS_NAME
CONFIG_KEY = "prometheus.yaml.gz"
RULES_CONFIG_MAP = f"{PROMETHEUS_NAME}-rulefiles-0"
CONFIG_DIR = "/etc/prometheus/config"
CONFIG_OUT = "/etc/prometheus/config_out"
CONFIG_FILE = f"{CONFIG_OUT}/prometheus.env.yaml"
RULES_DIR = f"/etc/prometheus/rules/{RULES_CONFIG_MAP}"
DATA_DIR = "/prometheus"
PORT = 9090


def seconds(duration: str) -> float:
    """A Prometheus duration ("5m", "1h30m") in seconds; ValueError names a malformed one."""
    parts = _DURATION.findall(duration)
    if not parts or "".join(n + u for n, u in parts) != duration:
        raise ValueError(f"{duration!r} is not a Prometheus duration (like 5m or 1h30m)")
    return sum(int(number) * _UNIT_SECONDS[unit] for number, unit in parts)


def scaled_rules(text: str, speed: float) -> str:
    """A rule file with every `for:` divided by `speed`, never under MIN_FOR_SECONDS (whole
    milliseconds). A malformed one stays as written: Prometheus refuses the file with its own
    error and keeps the rules it had, as it would on a cluster."""
    document = yaml.safe_load(text) or {}
    for group in document.get("groups") or []:
        for rule in group.get("rules") or []:
            try:
                held = max(seconds(str(rule["for"])) / speed, MIN_FOR_SECONDS)
            except (KeyError, ValueError):
                continue
            rule["for"] = f"{round(held * 1000)}ms"
    return yaml.safe_dump(document, sort_keys=False)


def service_account_kubeconfig(plane: ControlPlane, name: str) -> Path:
    """A kubeconfig with a token the API server issues for the ServiceAccount `name` of the
    monitoring namespace, so the chart's RBAC is what the program runs under."""
    token = KubeApi(plane.credentials("admin").api_client(1)).service_account_token(
        MONITORING_NAMESPACE, name
    )
    ca_data = base64.b64encode(plane.ca_pem.encode()).decode()
    document = kubeconfig_document(plane.api_url, "lab", token, ca_data, name)
    return write_kubeconfig(plane.home / f"{name}.kubeconfig", document)


@dataclass
class StateMetrics(BesidePlane):
    """One kube-state-metrics process: the objects the rules read, with the GPU node label."""

    program: ClassVar[str] = build.KUBE_STATE_METRICS

    def start(self, say: Say = print, on_exit: Callable[[], None] | None = None) -> None:
        """Build (or find) the program, start it and wait until /healthz answers."""
        binary = build.pinned_binary(build.KUBE_STATE_METRICS_PROGRAM, say)
        kubeconfig = service_account_kubeconfig(self.plane, STATE_METRICS_ACCOUNT)
        args = [
            f"--kubeconfig={kubeconfig}",
            f"--host={LOOPBACK}",
            f"--port={self.port}",
            f"--telemetry-host={LOOPBACK}",
            f"--telemetry-port={free_port()}",
            "--resources=daemonsets,deployments,nodes,pods",
            "--metric-labels-allowlist=nodes=[nvidia.com/gpu.present]",
        ]
        url = f"http://{self.address}/healthz"
        self._served.start([str(binary), *args], url, ssl.create_default_context(), on_exit=on_exit)


@dataclass
class Prometheus(BesidePlane):
    """One Prometheus process: its configuration, its rule files and its data under `home`."""

    # The pod network's proxy (`NodeEndpoint.proxy_url`): the way to the pods it scrapes.
    proxy_url: str = field(kw_only=True)
    program: ClassVar[str] = build.PROMETHEUS

    def start(
        self,
        rule_files: Mapping[str, str],
        speed: float,
        say: Say = print,
        on_exit: Callable[[], None] | None = None,
    ) -> None:
        """Write the configuration and the rules, start it, wait until /-/ready answers."""
        binary = build.pinned_binary(build.PROMETHEUS_PROGRAM, say)
        shutil.rmtree(self.home / "data", ignore_errors=True)  # a fresh lab, fresh series
        self.home.mkdir(parents=True, exist_ok=True)
        kubeconfig = service_account_kubeconfig(self.plane, PROMETHEUS_ACCOUNT)
        config = self.home / "prometheus.yaml"
        config.write_text(yaml.safe_dump(_configuration(kubeconfig, self.proxy_url)))
        self._write_rules(rule_files, speed)
        args = [
            f"--config.file={config}",
            f"--storage.tsdb.path={self.home / 'data'}",
            "--storage.tsdb.retention.time=1d",
            f"--web.listen-address={self.address}",
            "--log.level=warn",
        ]
        url = f"http://{self.address}/-/ready"
        self._served.start([str(binary), *args], url, ssl.create_default_context(), on_exit=on_exit)

    def reload(self, rule_files: Mapping[str, str], speed: float) -> None:
        """New rules (or a new speed for the old ones): rewrite them and tell it (SIGHUP)."""
        self._write_rules(rule_files, speed)
        process = self._served.process
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGHUP)

    def _write_rules(self, rule_files: Mapping[str, str], speed: float) -> None:
        rules = self.home / "rules"
        shutil.rmtree(rules, ignore_errors=True)
        rules.mkdir(parents=True)
        for name, text in rule_files.items():
            (rules / name).write_text(scaled_rules(text, speed))


def pod_configuration(proxy_url: str) -> dict[str, Any]:
    """The configuration the operator writes for the Prometheus pod: its targets found as its
    ServiceAccount (in-cluster), its rules where the operator's ConfigMap is mounted."""
    return _configuration(None, proxy_url, f"{RULES_DIR}/*.yaml")


def _configuration(
    kubeconfig: Path | None, proxy_url: str, rules: str = "rules/*"
) -> dict[str, Any]:
    return {
        "global": {"scrape_interval": INTERVAL, "evaluation_interval": INTERVAL},
        "rule_files": [rules],
        "scrape_configs": [
            _service_monitor(service, port, honor, kubeconfig, proxy_url)
            for service, port, honor in SCRAPED
        ],
    }


def _service_monitor(
    service: str, port: str, honor_labels: bool, kubeconfig: Path | None, proxy_url: str
) -> dict[str, Any]:
    """The scrape job a ServiceMonitor for `service`'s port `port` becomes (in-cluster without
    a kubeconfig)."""
    discovery: dict[str, Any] = {"role": "endpointslice"}
    if kubeconfig is not None:
        discovery["kubeconfig_file"] = str(kubeconfig)

    def copy(meta: str, label: str) -> dict[str, Any]:
        return {"source_labels": [f"__meta_kubernetes_{meta}"], "target_label": label}

    return {
        "job_name": f"serviceMonitor/{service}/0",
        "honor_labels": honor_labels,
        "proxy_url": proxy_url,
        "kubernetes_sd_configs": [discovery],
        "relabel_configs": [
            {
                "source_labels": [
                    "__meta_kubernetes_service_name",
                    "__meta_kubernetes_endpointslice_port_name",
                ],
                "regex": f"{service};{port}",
                "action": "keep",
            },
            copy("namespace", "namespace"),
            copy("pod_name", "pod"),
            copy("service_name", "service"),
            copy("service_name", "job"),
        ],
    }
