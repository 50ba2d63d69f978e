"""The lab's Prometheus alerts, read the way a person can: through the API server's proxy to the
monitoring release's Prometheus Service (`kubectl get --raw` on ALERTS_PATH).

The same path answers on EKS (kube-prometheus-stack) and in the rehearsal (the real Prometheus
behind the release's pod); without the release there is no Service, and no alerts to read.
Beside the alerts: each rule group as Prometheus runs it (its file, each rule's state, health
and last evaluation), the series an expression reads (Prometheus' own parser) and whether
they are there, so a check can say why a rule stayed silent instead of guessing.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from labs.aws.stack import MONITORING_NAMESPACE, PROMETHEUS_PORT, PROMETHEUS_SERVICE
from labs.errors import LabError
from labs.kube import rest
from labs.kube.resources import SERVICES, KubeApiError

PROXY = (
    f"/api/v1/namespaces/{MONITORING_NAMESPACE}/services/"
    f"{PROMETHEUS_SERVICE}:{PROMETHEUS_PORT}/proxy"
)
ALERTS_PATH = f"{PROXY}/api/v1/alerts"
RULES_PATH = f"{PROXY}/api/v1/rules"
PARSE_PATH = f"{PROXY}/api/v1/parse_query"
QUERY_PATH = f"{PROXY}/api/v1/query"
RUNTIME_PATH = f"{PROXY}/api/v1/status/runtimeinfo"
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


@dataclass(frozen=True)
class RuleState:
    """An alerting rule as Prometheus evaluates it now: `state` inactive, pending or firing;
    `health` ok, err (`last_error` says why) or unknown (not evaluated yet)."""

    name: str
    query: str
    for_seconds: float
    state: str
    health: str
    last_error: str
    last_evaluation: datetime | None
    active_at: datetime | None  # when its oldest alert went pending


@dataclass(frozen=True)
class RuleGroup:
    """A rule group Prometheus has loaded, the file it came from and its alerting rules."""

    name: str
    file: str
    rules: tuple[RuleState, ...]


def monitoring_installed(client: Any) -> bool:
    """The release's Prometheus Service exists (lab.up --monitoring)."""
    path = SERVICES.path(MONITORING_NAMESPACE)
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


def read_groups(client: Any) -> list[RuleGroup]:
    """Every rule group Prometheus has loaded (recording ones too, their rules left out)."""
    data = _ask(client, RULES_PATH, {})
    return [
        RuleGroup(
            str(group.get("name", "")),
            str(group.get("file", "")),
            tuple(_rule_state(r) for r in group.get("rules") or [] if r.get("type") == "alerting"),
        )
        for group in data.get("groups") or []
    ]


def _rule_state(rule: Mapping[str, Any]) -> RuleState:
    actives = [_instant(a.get("activeAt")) for a in rule.get("alerts") or []]
    return RuleState(
        name=str(rule.get("name", "")),
        query=str(rule.get("query", "")),
        for_seconds=float(rule.get("duration") or 0),
        state=str(rule.get("state", "")),
        health=str(rule.get("health", "")),
        last_error=str(rule.get("lastError") or ""),
        last_evaluation=_instant(rule.get("lastEvaluation")),
        active_at=min((a for a in actives if a is not None), default=None),
    )


def _instant(text: object) -> datetime | None:
    """An RFC 3339 time of Prometheus' API; None for its zero time (never) or none."""
    if not isinstance(text, str) or not text or text.startswith("0001-"):
        return None
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


def selectors(client: Any, expression: str) -> list[str]:
    """The series selectors `expression` reads, as Prometheus' parser finds them
    (/api/v1/parse_query), each written back as `{name="value", ...}` (ranges and offsets left
    out: they ask whether the series are there now)."""
    tree = _ask(client, PARSE_PATH, {"query": expression})
    found = []
    for node in _nodes(tree):
        if node.get("type") in ("vectorSelector", "matrixSelector"):
            matchers = ", ".join(
                f"{m['name']}{m['type']}{json.dumps(m['value'], ensure_ascii=False)}"
                for m in node.get("matchers") or []
            )
            found.append(f"{{{matchers}}}")
    return list(dict.fromkeys(found))


def _nodes(node: object) -> Iterator[dict[str, Any]]:
    """Every node of a parse_query tree, depth first."""
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _nodes(value)
    elif isinstance(node, list):
        for value in node:
            yield from _nodes(value)


def present(client: Any, selector: str) -> bool:
    """Prometheus holds a series that `selector` picks, now (an instant query)."""
    data = _ask(client, QUERY_PATH, {"query": f"count({selector})"})
    return bool(data.get("result"))


def reload_failed(client: Any) -> bool:
    """Prometheus' last reload of its configuration and rule files failed (it then keeps
    the rules it had, and its log names the file it refused)."""
    return _ask(client, RUNTIME_PATH, {}).get("reloadConfigSuccess") is False


def _ask(client: Any, path: str, query: Mapping[str, object]) -> dict[str, Any]:
    try:
        document = json.loads(rest.get(client, path, query, timeout=TIMEOUT))
    except (KubeApiError, OSError, ValueError) as error:
        reason = getattr(error, "reason", None) or error
        raise MonitoringUnavailable(
            f"Prometheus did not answer {path} ({reason}): is the monitoring release running? "
            f"kubectl -n {MONITORING_NAMESPACE} get pods"
        ) from error
    return dict(document.get("data") or {})
