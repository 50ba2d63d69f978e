"""`practice.check --rules FILE`: does the learner's own alert rule catch the hidden fault?

The rules go to the lab's Prometheus as one PrometheusRule (`practice-rules` in the monitoring
namespace, picked up as every PrometheusRule is), the same way on EKS and in a rehearsal. The
check waits until Prometheus has loaded them, then for each rule's `for:` plus a scrape and an
evaluation, says which of the learner's alerts fired, went pending or stayed silent (never the
lab's own alerts: they would name the fault), and removes the rules again.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from labs.aws.stack import MONITORING_NAMESPACE
from labs.guard import check_lab_target
from labs.kube import rest
from labs.kube.alerts import AlertRule, MonitoringUnavailable, monitoring_installed, read_rules
from labs.lab import Lab
from labs.lock import lab_lock
from labs.practice.exercise import PracticeError, going
from labs.run.alerts import ALERT_SLACK, POLL_SECONDS, AlertWatch
from labs.run.watch import wall_seconds

Out = Callable[[str], None]
PRACTICE_RULE = "practice-rules"
# Wall seconds for Prometheus to load a new rule file (the operator's and its own reload).
LOAD_SECONDS = 120.0


def alert_names(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """The file's rule groups and the alerts they define; PracticeError names what is wrong."""
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise PracticeError(f"cannot read the rules file {path}: {error.strerror}") from None
    except yaml.YAMLError as error:
        raise PracticeError(f"{path} is not YAML: {error}") from None
    groups = document.get("groups") if isinstance(document, dict) else None
    if not isinstance(groups, list) or not groups:
        raise PracticeError(
            f"{path} has no `groups:` list: write it as Prometheus rule files are "
            "(monitoring/gpu-alerts.yaml is one)"
        )
    names = [
        rule["alert"]
        for group in groups
        if isinstance(group, dict)
        for rule in group.get("rules") or []
        if isinstance(rule, dict) and rule.get("alert")
    ]
    if not names:
        raise PracticeError(f"{path} defines no alerting rule (`- alert: NAME` with its `expr:`)")
    return groups, names


def check_rules(lab: Lab, path: Path, out: Out = print) -> bool:
    """Load the learner's rules, watch them while the fault is in; True when one fired."""
    groups, names = alert_names(path)
    going(lab)
    if not monitoring_installed(lab.kube):
        raise PracticeError(
            f"lab {lab.name} has no monitoring to run your rules: "
            f"`invoke lab.up --monitoring --lab {lab.name}`"
        )
    check_lab_target(lab, cluster=True, account=False)
    with lab_lock(lab, "practice.check --rules"):
        _put(lab.kube, groups)
        try:
            rules = _loaded(lab, names, path)
            fired = _watch(lab, rules, out)
        finally:
            _remove(lab.kube)
    return fired


def _put(client: Any, groups: list[dict[str, Any]]) -> None:
    _remove(client)  # one a killed check left
    rule = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": PRACTICE_RULE, "labels": {"app.kubernetes.io/part-of": "practice"}},
        "spec": {"groups": groups},
    }
    rest.create(client, rest.PROMETHEUS_RULES.path(MONITORING_NAMESPACE), rule)


def _remove(client: Any) -> None:
    rest.delete(client, rest.PROMETHEUS_RULES.path(MONITORING_NAMESPACE, PRACTICE_RULE))


def _loaded(lab: Lab, names: Sequence[str], path: Path) -> list[AlertRule]:
    """The learner's rules as Prometheus runs them, once it has loaded every one."""
    deadline = time.monotonic() + LOAD_SECONDS
    while time.monotonic() < deadline:
        try:
            rules = [rule for rule in read_rules(lab.kube) if rule.name in names]
        except MonitoringUnavailable:
            rules = []
        if {rule.name for rule in rules} >= set(names):
            return rules
        time.sleep(POLL_SECONDS)
    raise PracticeError(
        f"Prometheus did not load the rules of {path} in {LOAD_SECONDS:.0f} s: an expression "
        f"it cannot parse? Check the file with `promtool check rules {path}`"
    )


def _watch(lab: Lab, rules: list[AlertRule], out: Out) -> bool:
    """Until every rule fired or had its `for:` and a scrape and evaluation more to do so."""
    watch = AlertWatch(lab.kube, rules)
    started = time.monotonic()
    wait = max(rule.for_seconds for rule in rules) + wall_seconds(ALERT_SLACK, lab.speed)
    out(f"your {len(rules)} rule(s) are in the lab's Prometheus; watching up to {wait:.0f} s ...")
    watch.start(started)
    try:
        while time.monotonic() - started < wait and not all(watch.fired(r.name) for r in rules):
            time.sleep(POLL_SECONDS)
    finally:
        watch.stop()
    moments = {m.name: m for m in watch.moments([r.name for r in rules])}
    for rule in rules:
        moment = moments[rule.name]
        if moment.firing_at is not None:
            out(f"  firing:  {rule.name} after {moment.firing_at:.0f} s: it catches the fault")
        elif moment.pending_at is not None:
            out(f"  pending: {rule.name}: its expression matches, its for: did not pass in time")
        else:
            out(f"  silent:  {rule.name}: its expression matched nothing while the fault is in")
    return any(moments[rule.name].firing_at is not None for rule in rules)
