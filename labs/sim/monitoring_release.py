"""The rehearsal's `helm install kube-prometheus-stack` (the stack's `enable_monitoring`): the
release's objects (`data/kube-prometheus-stack.yaml`) and the lab's alert rules as the chart's
PrometheusRule, created through the API server. The world's `MonitoringRelease` runs the real
programs behind the pods and hands the PrometheusRules to Prometheus.

Like `helm uninstall`, removing the release deletes its objects and keeps the namespace and
the CRD.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import yaml

from labs.aws import stack
from labs.errors import InfraError
from labs.kube import alerts, rest
from labs.kube.resources import KubeApiError
from labs.sim.controlplane import build, monitoring
from labs.sim.controlplane.kube_seed import DATA, collection

RELEASE = "kube-prometheus-stack"
MANIFESTS = DATA / "kube-prometheus-stack.yaml"
ADDRESS = "helm_release.kube_prometheus_stack[0]"
# Kept by an uninstall (helm keeps a namespace it created and the CRDs of a chart).
CLUSTER_SCOPED = ("Namespace", "CustomResourceDefinition")
CRD_TIMEOUT = 30.0
# Wall seconds for the release to come up (helm's own timeout in monitoring.tf is 900).
READY_TIMEOUT = 300.0
RELEASE_LABELS = {
    "app.kubernetes.io/managed-by": "Helm",
    "app.kubernetes.io/instance": RELEASE,
    "release": RELEASE,
}


def release_objects(rules: Path = stack.GPU_ALERT_RULES) -> list[dict[str, Any]]:
    """What the release creates, in creation order, each with the release's labels: the chart's
    objects, then its PrometheusRule holding the groups of `rules` (additionalPrometheusRulesMap
    entry "gpu-alerts", which the chart names `<fullname>-gpu-alerts`)."""
    objects: list[dict[str, Any]] = yaml.safe_load(MANIFESTS.read_text())
    groups = yaml.safe_load(rules.read_text(encoding="utf-8"))["groups"]
    objects.append(
        {
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "PrometheusRule",
            "metadata": {
                "name": f"{RELEASE}-{rules.stem}",
                "namespace": stack.MONITORING_NAMESPACE,
            },
            "spec": {"groups": groups},
        }
    )
    for obj in objects:
        if obj["kind"] not in CLUSTER_SCOPED:
            obj["metadata"].setdefault("labels", {}).update(RELEASE_LABELS)
        if obj["kind"] in ("Deployment", "StatefulSet"):
            for container in obj["spec"]["template"]["spec"]["containers"]:
                container["image"] = image(container["name"])
        if obj["kind"] == "StatefulSet":
            _as_the_operator_renders(obj["spec"]["template"]["spec"])
    return objects


def _as_the_operator_renders(pod: dict[str, Any]) -> None:
    """The Prometheus pod as the prometheus-operator renders its StatefulSet: the arguments,
    and the operator's Secret (its configuration) and ConfigMap (the rule files) mounted where
    they are read, beside an emptyDir for the unpacked configuration and one for the data."""
    volumes: tuple[tuple[str, dict[str, Any], str, bool], ...] = (  # name, source, at, ro
        (
            "config",
            {"secret": {"secretName": monitoring.CONFIG_SECRET}},
            monitoring.CONFIG_DIR,
            True,
        ),
        ("config-out", {"emptyDir": {}}, monitoring.CONFIG_OUT, False),
        (
            monitoring.RULES_CONFIG_MAP,
            {"configMap": {"name": monitoring.RULES_CONFIG_MAP}},
            monitoring.RULES_DIR,
            True,
        ),
        (f"{monitoring.PROMETHEUS_NAME}-db", {"emptyDir": {}}, monitoring.DATA_DIR, False),
    )
    pod["volumes"] = [{"name": name, **source} for name, source, _, _ in volumes]
    container = pod["containers"][0]
    container["args"] = [
        f"--config.file={monitoring.CONFIG_FILE}",
        f"--storage.tsdb.path={monitoring.DATA_DIR}",
        "--storage.tsdb.retention.time=10d",
        "--web.enable-lifecycle",
        f"--web.listen-address=:{monitoring.PORT}",
    ]
    container["volumeMounts"] = [
        {"name": name, "mountPath": path, "readOnly": read_only}
        for name, _, path, read_only in volumes
    ]


def image(container: str) -> str:
    """The image of the program the world runs behind `container`, at the version it runs
    (Prometheus' Go module v0.3XX.Y is release v3.XX.Y)."""
    if container == "prometheus":
        _, minor, patch = build.PROMETHEUS_PROGRAM.version().lstrip("v").split(".")
        return f"quay.io/prometheus/prometheus:v3.{int(minor) - 300}.{patch}"
    version = build.KUBE_STATE_METRICS_PROGRAM.version()
    return f"registry.k8s.io/kube-state-metrics/kube-state-metrics:{version}"


def install(api: Any) -> None:
    """Create the release's objects (the PrometheusRule once the API server serves its type),
    then wait as helm's `wait` does: until Prometheus answers with the rules loaded."""
    for obj in release_objects():
        if obj["kind"] == "PrometheusRule":
            _wait_served(api, collection(obj))
        try:
            rest.create(api, collection(obj), obj)
        except KubeApiError as error:
            if not (error.status == 409 and obj["kind"] in CLUSTER_SCOPED):
                raise
    _wait_evaluating(api)


def _wait_evaluating(api: Any) -> None:
    deadline = time.monotonic() + READY_TIMEOUT
    seen = "no answer yet"
    while time.monotonic() < deadline:
        try:
            if alerts.read_rules(api):
                return
            seen = "answering, no rule loaded yet"
        except alerts.MonitoringUnavailable as error:
            seen = str(error)
        time.sleep(0.2)
    raise InfraError(
        f"the monitoring release's Prometheus did not evaluate the lab's rules within "
        f"{READY_TIMEOUT:.0f} s ({seen}); its programs' logs are in the lab's sim/monitoring/logs"
    )


def uninstall(api: Any) -> None:
    """Delete what the release created; its namespace and CRD stay, as helm leaves them."""
    for obj in reversed(release_objects()):
        if obj["kind"] not in CLUSTER_SCOPED:
            rest.delete(api, f"{collection(obj)}/{obj['metadata']['name']}")


def _wait_served(api: Any, path: str) -> None:
    """Until a new CRD's type answers (its establishing takes a moment)."""
    deadline = time.monotonic() + CRD_TIMEOUT
    while True:
        try:
            rest.get_items(api, path)
            return
        except KubeApiError as error:
            if error.status != 404 or time.monotonic() > deadline:
                raise
        time.sleep(0.1)
