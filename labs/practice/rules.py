"""`practice.check --rules FILE`: does the learner's own alert rule catch the hidden fault?

The rules go to the lab's Prometheus as the learner's own PrometheusRule (`practice-rules-<who>`
in the monitoring namespace: learners sharing a cluster never replace or remove each other's),
picked up as every PrometheusRule is, the same way on EKS and in a rehearsal. A file that does
not parse is refused when it is applied (the operator's admission webhook; its words are
shown). Then the check follows Prometheus' own account of each rule (the rules endpoint: state,
health, last error, last evaluation) and decides each as soon as it can: firing; an evaluation
error; or silent once Prometheus has evaluated it past its `for:` without a match, saying
whether the series it reads are there at all (a query for its selectors). It returns when
every rule is decided, never shows the lab's own alerts (they would name the fault), names any
other rule object Prometheus has not loaded instead of blaming the learner's file, and removes
the learner's rules again.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Callable, Iterable
from datetime import datetime
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from labs.aws.stack import MONITORING_NAMESPACE
from labs.guard import check_lab_target
from labs.kube import rest
from labs.kube.alerts import (
    MonitoringUnavailable,
    RuleGroup,
    RuleState,
    monitoring_installed,
    present,
    read_groups,
    reload_failed,
    selectors,
)
from labs.kube.resources import PROMETHEUS_RULES, KubeApiError
from labs.lab import Lab
from labs.lock import lab_lock
from labs.practice.exercise import PracticeError, going
from labs.run.alerts import ALERT_SLACK, POLL_SECONDS
from labs.run.watch import wall_seconds

Out = Callable[[str], None]
# Each learner's PrometheusRule is `practice-rules-<who>` (`rule_object`).
PRACTICE_RULE = "practice-rules"
WHO_ANNOTATION = "eks-gpu-lab/practice-who"
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


def rule_object(who: str) -> str:
    """The learner's PrometheusRule: `practice-rules-<who>`, `who` made a DNS label (with a short
    hash of it when that changed it, so two learners' names never meet in one object)."""
    slug = re.sub(r"[^a-z0-9]+", "-", who.lower()).strip("-")[:40].rstrip("-")
    if slug != who or not slug:
        digest = hashlib.sha256(who.encode()).hexdigest()[:6]
        slug = f"{slug}-{digest}" if slug else digest
    return f"{PRACTICE_RULE}-{slug}"


def check_rules(lab: Lab, path: Path, out: Out = print) -> bool:
    """Load the learner's rules, decide each while the fault is in; True when one fired."""
    groups, names = alert_names(path)
    exercise = going(lab)
    if not monitoring_installed(lab.kube):
        raise PracticeError(
            f"lab {lab.name} has no monitoring to run your rules: "
            f"`invoke lab.up --monitoring --lab {lab.name}`"
        )
    check_lab_target(lab, cluster=True, account=False)
    name = rule_object(exercise.who)
    with lab_lock(lab, "practice.check --rules"):
        mine = _put(lab.kube, name, exercise.who, groups, path)
        try:
            started = time.monotonic()
            _loaded(lab.kube, mine, groups, path)
            out(
                f"your {len(names)} rule(s) are in the lab's Prometheus as PrometheusRule "
                f"{MONITORING_NAMESPACE}/{name} (loaded in {time.monotonic() - started:.0f} s)"
            )
            for line in _others_not_loaded(lab.kube, mine):
                out(line)
            return _watch(lab, mine, names, out)
        finally:
            _remove(lab.kube, name)


def _put(
    client: Any, name: str, who: str, groups: list[dict[str, Any]], path: Path
) -> dict[str, Any]:
    """Create the learner's PrometheusRule (after the one a killed check of theirs left); a
    refusal (the operator's webhook: rules that do not parse) is a PracticeError in its words."""
    _remove(client, name)
    rule = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": name,
            "labels": {"app.kubernetes.io/part-of": "practice"},
            "annotations": {WHO_ANNOTATION: who},
        },
        "spec": {"groups": groups},
    }
    try:
        return rest.create(client, PROMETHEUS_RULES.path(MONITORING_NAMESPACE), rule)
    except KubeApiError as error:
        if error.status != 422:
            raise
        raise PracticeError(_refusal(error, path)) from None


def _refusal(error: KubeApiError, path: Path) -> str:
    """The API server's refusal of the learner's rules: its message, then each cause."""
    causes = [c.get("message") for c in error.causes]
    return "\n".join(
        [
            f"the lab's API server refused your rules ({path}) when they were applied: "
            f"{error.message}",
            *(f"  {cause}" for cause in causes if cause),
            f"fix them and check again (`promtool check rules {path}` finds the same)",
        ]
    )


def _remove(client: Any, name: str) -> None:
    """Delete the learner's own PrometheusRule (no one else's)."""
    rest.delete(client, PROMETHEUS_RULES.path(MONITORING_NAMESPACE, name))


def _files(obj: dict[str, Any]) -> set[str]:
    """The rule file names the operator gives an object's groups: `<namespace>-<name>-<uid>`
    (and `<namespace>-<name>`, as older operators did)."""
    meta = obj["metadata"]
    stem = f"{meta['namespace']}-{meta['name']}"
    return {f"{stem}-{meta.get('uid')}.yaml", f"{stem}.yaml"}


def _group_names(obj: dict[str, Any]) -> list[str]:
    groups = (obj.get("spec") or {}).get("groups") or []
    return [str(g.get("name")) for g in groups if isinstance(g, dict)]


def _from(group: RuleGroup, obj: dict[str, Any]) -> bool:
    """Prometheus loaded `group` from `obj`'s rule file."""
    return PurePosixPath(group.file).name in _files(obj)


def _missing(obj: dict[str, Any], groups: Iterable[RuleGroup]) -> list[str]:
    """The groups of `obj` Prometheus has not loaded from its file."""
    loaded = {g.name for g in groups if _from(g, obj)}
    return [name for name in _group_names(obj) if name not in loaded]


def _loaded(client: Any, mine: dict[str, Any], groups: list[dict[str, Any]], path: Path) -> None:
    """Until Prometheus has loaded every group of the learner's object; else a PracticeError
    naming what it has not loaded (theirs, and any other object) and why, if it can tell."""
    deadline = time.monotonic() + LOAD_SECONDS
    while time.monotonic() < deadline:
        try:
            if not _missing(mine, read_groups(client)):
                return
        except MonitoringUnavailable:
            pass
        time.sleep(POLL_SECONDS)
    raise PracticeError(_not_loaded(client, mine, path))


def _not_loaded(client: Any, mine: dict[str, Any], path: Path) -> str:
    meta = mine["metadata"]
    lines = [
        f"Prometheus did not load your rules (PrometheusRule {meta['namespace']}/{meta['name']}, "
        f"from {path}) in {LOAD_SECONDS:.0f} s."
    ]
    try:
        others = _unloaded(client, lambda obj: obj["metadata"]["uid"] != meta["uid"])
        failed = reload_failed(client)
    except (MonitoringUnavailable, KubeApiError) as error:
        return "\n".join([*lines, f"Nor can it say why: {error}"])
    if others:
        named = "; ".join(f"{ns}/{name} (groups {', '.join(g)})" for ns, name, g in others)
        lines.append(f"Nor these rule objects in the cluster: {named}.")
    if failed:
        lines.append(
            "Prometheus' last reload failed: one rule file it refuses keeps every new rule out "
            f"(its log names the file: `kubectl -n {MONITORING_NAMESPACE} logs "
            "prometheus-kube-prometheus-stack-prometheus-0 -c prometheus`)."
        )
    elif not others:
        lines.append(
            f"An expression it cannot parse? `promtool check rules {path}` says (a cluster "
            "without the operator's admission webhook takes such a file; the operator skips it)."
        )
    return "\n".join(lines)


def _unloaded(
    client: Any, wanted: Callable[[dict[str, Any]], bool]
) -> list[tuple[str, str, list[str]]]:
    """(namespace, name, groups not loaded) of each PrometheusRule that `wanted` picks whose
    groups Prometheus has not all loaded."""
    groups = read_groups(client)
    objects = rest.get_items(client, PROMETHEUS_RULES.path())
    return [
        (o["metadata"]["namespace"], o["metadata"]["name"], missing)
        for o in objects
        if wanted(o) and (missing := _missing(o, groups))
    ]


def _others_not_loaded(client: Any, mine: dict[str, Any]) -> list[str]:
    """A note for each other PrometheusRule, no newer than the learner's (so Prometheus had it
    when it loaded theirs), that it has not loaded: someone's rules that do not parse."""
    meta = mine["metadata"]

    def older(obj: dict[str, Any]) -> bool:
        other = obj["metadata"]
        return other["uid"] != meta["uid"] and other.get("creationTimestamp", "") <= meta.get(
            "creationTimestamp", ""
        )

    try:
        unloaded = _unloaded(client, older)
    except (MonitoringUnavailable, KubeApiError):
        return []
    return [
        f"  note: Prometheus has not loaded PrometheusRule {ns}/{name} (groups "
        f"{', '.join(groups)}): the operator skips a rule object that does not parse (`kubectl "
        f"-n {ns} get prometheusrule {name} -o yaml`, then `promtool check rules` on its "
        "groups); it takes nothing from your rules"
        for ns, name, groups in unloaded
    ]


def _watch(lab: Lab, mine: dict[str, Any], names: list[str], out: Out) -> bool:
    """Decide each rule as soon as Prometheus' account of it allows (see `_decide`); at most its
    `for:` plus a scrape and an evaluation after the rules were loaded. True when one fired."""
    started = time.monotonic()
    first: dict[str, datetime] = {}  # each rule's first evaluation seen
    pending: set[str] = set()
    decided: dict[str, str] = {}
    fired: set[str] = set()
    rules: dict[str, RuleState] = {}
    limit: float | None = None
    problem = "Prometheus has not evaluated it yet"
    while True:
        elapsed = time.monotonic() - started
        try:
            groups = read_groups(lab.kube)
            rules = {r.name: r for g in groups if _from(g, mine) for r in g.rules}
        except MonitoringUnavailable as error:
            problem = str(error)
        if limit is None and rules:
            slack = wall_seconds(ALERT_SLACK, lab.speed)
            limit = max(r.for_seconds for r in rules.values()) + slack
            out(
                f"deciding each as soon as it fires or Prometheus has evaluated it past its "
                f"for: (at most {limit:.0f} s) ..."
            )
        for name in names:
            rule = rules.get(name)
            if name not in decided and rule is not None:
                line = _decide(lab.kube, rule, elapsed, first, pending)
                if line is not None:
                    decided[name] = line
                    out(line)
                    if rule.state == "firing":
                        fired.add(name)
        over = elapsed > (limit if limit is not None else LOAD_SECONDS)
        if len(decided) == len(names) or over:
            break
        time.sleep(POLL_SECONDS)
    for name in names:
        if name not in decided:
            if name in pending:
                out(f"  pending: {name}: its expression matches, its for: did not pass in time")
            else:
                out(f"  unknown: {name}: no verdict in {elapsed:.0f} s ({problem})")
    out(f"decided in {time.monotonic() - started:.0f} s after your rules were loaded")
    return bool(fired)


def _decide(
    client: Any, rule: RuleState, elapsed: float, first: dict[str, datetime], pending: set[str]
) -> str | None:
    """The rule's verdict line, or None while Prometheus' account leaves it open: firing; an
    evaluation error; pending at times but never for its whole `for:`; or silent once it has
    been evaluated past its `for:` (counted on Prometheus' clock from the first evaluation seen)
    without a match, with what the series it reads say."""
    if rule.state == "firing":
        return f"  firing:  {rule.name} after {elapsed:.0f} s: it catches the fault"
    if rule.health == "err":
        return f"  error:   {rule.name}: Prometheus cannot evaluate it: {rule.last_error}"
    if rule.last_evaluation is None:
        return None
    since = first.setdefault(rule.name, rule.last_evaluation)
    if rule.state == "pending":
        pending.add(rule.name)
        return None
    if (rule.last_evaluation - since).total_seconds() < rule.for_seconds:
        return None
    if rule.name in pending:
        return (
            f"  pending: {rule.name}: its expression matched at times, never for its whole "
            f"for: ({rule.for_seconds:g} s as Prometheus runs it)"
        )
    return f"  silent:  {rule.name}: {_why_silent(client, rule)}"


def _why_silent(client: Any, rule: RuleState) -> str:
    """Whether the series the rule reads are in Prometheus at all (a query per selector)."""
    try:
        missing = [s for s in selectors(client, rule.query) if not present(client, s)]
    except MonitoringUnavailable:
        return "its expression matched nothing while the fault is in"
    if missing:
        return f"the series it reads ({', '.join(missing)}) are not in Prometheus"
    return (
        f"its expression matched nothing while the fault is in (evaluated past its for: of "
        f"{rule.for_seconds:g} s, the series it reads are there)"
    )
