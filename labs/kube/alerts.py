"""The lab's Prometheus alerts, read the way a person can: through the API server's proxy to the
monitoring release's Prometheus Service (`kubectl get --raw` on ALERTS_PATH).

The same path answers on EKS (kube-prometheus-stack) and in the rehearsal (the real Prometheus
behind the release's pod); without the release there is no Service, and no alerts to read.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from labs.aws.stack import MONITORING_NAMESPACE, PROMETHEUS_PORT, PROMETHEUS_SERVICE
from labs.errors import LabError
from labs.kube import rest

PROXY = (
    f"/api/v1/namespaces/{MONITORING_NAMESPACE}/services/"
    f"{PROMETHEUS_SERVICE}:{PROMETHEUS_PORT}/proxy"
)
ALERTS_PATH = f"{PROXY}/api/v1/alerts"
RULES_PATH = f"{PROXY}/api/v1/rules"
TRAP_LABEL = "trap"
# One answer from Prometheus through the API server; a poll must not hang a run.
TIMEOUT = 5.0


class MonitoringUnavailable(LabError):
    """The release's Prometheus did not answer; the message says what was asked and why."""


@dataclass(frozen=True)
class Alert:
    """An alert Prometheus holds now: `state` pending (its `for:` not yet over) or firing."""

    name: str
    state: str
    active_at: str
    labels: Mapping[str, str] = field(default_factory=dict)
    summary: str = ""


@dataclass(frozen=True)
class AlertRule:
    """One alerting rule Prometheus evaluates: its name, `for:` in seconds, its labels."""

    name: str
    for_seconds: float
    labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def trap(self) -> bool:
        """A rule kept for teaching what misses a fault (label trap="true")."""
        return self.labels.get(TRAP_LABEL) == "true"


def monitoring_installed(client: Any) -> bool:
    """The release's Prometheus Service exists (lab.up --monitoring)."""
    path = rest.SERVICES.path(MONITORING_NAMESPACE)
    query = {"fieldSelector": f"metadata.name={PROMETHEUS_SERVICE}"}
    return bool(rest.get_items(client, path, query=query))


def read_alerts(client: Any) -> list[Alert]:
    """The alerts pending or firing now."""
    data = _ask(client, ALERTS_PATH, {})
    return [
        Alert(
            name=item["labels"].get("alertname", ""),
            state=item.get("state", ""),
            active_at=item.get("activeAt", ""),
            labels=dict(item["labels"]),
            summary=(item.get("annotations") or {}).get("summary", ""),
        )
        for item in data.get("alerts") or []
    ]


def read_rules(client: Any) -> list[AlertRule]:
    """Every alerting rule Prometheus has loaded (as the world runs it: its `for:` scaled)."""
    data = _ask(client, RULES_PATH, {"type": "alert"})
    return [
        AlertRule(rule["name"], float(rule.get("duration") or 0), dict(rule.get("labels") or {}))
        for group in data.get("groups") or []
        for rule in group.get("rules") or []
    ]


def _ask(client: Any, path: str, query: Mapping[str, object]) -> dict[str, Any]:
    try:
        document = json.loads(rest.get(client, path, query, timeout=TIMEOUT))
    except (rest.KubeApiError, OSError, ValueError) as error:
        reason = getattr(error, "reason", None) or error
        raise MonitoringUnavailable(
            f"Prometheus did not answer {path} ({reason}): is the monitoring release running? "
            f"kubectl -n {MONITORING_NAMESPACE} get pods"
        ) from error
    return dict(document.get("data") or {})
