"""Run the doctor: read the cluster once, run every check in flowchart order, read the logs the
findings point at, and rank what was found.

Read-only by construction: the only calls are list calls, log reads and AWS describe calls.
A cluster that cannot be read (unreachable, forbidden, a lab that is not running) gives a
report that says so and exits 2, never a half-checked "healthy".
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from labs.doctor import cloud, internals, nodes, operator, pods
from labs.doctor.facts import CannotCheck, Facts, read_facts
from labs.doctor.logs import TAIL_LINES, api_reader, read_pointed_logs
from labs.doctor.model import Checked, DoctorFinding, Report, Skipped
from labs.errors import LabError
from labs.kube import gpu

if TYPE_CHECKING:
    from labs.lab import Lab

Focus = tuple[str, str] | None


@dataclass(frozen=True)
class DoctorCheck:
    """One step of the flowchart: a function over the facts and what it compares."""

    name: str
    stage: str
    what: str
    run: Callable[[Facts, Focus], list[DoctorFinding]]


def _step(
    stage: str, check: Callable[..., list[DoctorFinding]], per_pod: bool = False
) -> DoctorCheck:
    """A step named after its function and described by its docstring; `per_pod` checks
    also take `--pod`."""
    what = (inspect.getdoc(check) or "").split("\n\n")[0].replace("\n", " ")
    run = check if per_pod else lambda facts, _focus: check(facts)
    return DoctorCheck(check.__name__.replace("_", "-"), stage, what, run)


CHECKS = (
    _step("pods", pods.pending_pods, per_pod=True),
    _step("pods", pods.failing_pods, per_pod=True),
    _step("pods", pods.pods_without_gpu_limit, per_pod=True),
    _step("pods", pods.missing_runtime_classes),
    _step("nodes", nodes.gpu_node_count),
    _step("nodes", nodes.advertising),
    _step("nodes", nodes.readiness),
    _step("nodes", nodes.deploy_labels),
    _step("nodes", nodes.taints),
    _step("nodes", nodes.operator_labels),
    _step("operands", operator.operands_present),
    _step("operands", operator.operands_ready),
    _step("operator", operator.operator_installed),
    _step("operator", operator.operator_health),
    _step("operator", operator.policy_toggles),
    _step("operator", operator.policy_status),
    _step("node-internals", internals.toolkit_vs_os),
    _step("node-internals", internals.sandbox_events),
    _step("network", cloud.security_groups),
)


def examine(lab: Lab, focus: Focus = None) -> Report:
    """Walk the flowchart on `lab` (a lab, or an existing cluster); raises CannotCheck."""
    started = time.monotonic()
    if why := lab.backend.unreachable(lab):
        raise CannotCheck(f"{why}; `invoke lab.up --lab {lab.name}` starts it again")
    facts = read_facts(lab)
    if focus is not None and facts.find("pods", focus[1], focus[0]) is None:
        raise CannotCheck(
            f"pod {focus[0]}/{focus[1]} not found; list pods with `kubectl get pods -A`"
        )
    aws, why_not = cloud.read_cloud(lab)
    facts = replace(facts, cloud=aws)
    report = Report(_target(lab) | _counts(facts))
    findings = _run_checks(facts, focus, why_not, report)
    proven, read, unread = read_pointed_logs(facts, findings, api_reader(lab))
    report.findings = findings + proven
    report.checked.append(Checked("logs", "log-tails", _logs_line(read)))
    report.skipped += [Skipped("logs", source, "could not be read") for source in unread]
    report.skipped += _limits(facts, focus)
    report.seconds = time.monotonic() - started
    return report


def _run_checks(facts: Facts, focus: Focus, why_not: str, report: Report) -> list[DoctorFinding]:
    """Every check in flowchart order; the network's only where AWS could be read."""
    findings: list[DoctorFinding] = []
    for check in CHECKS:
        if check.stage == "network" and facts.cloud is None:
            report.skipped.append(Skipped(check.stage, check.what, why_not))
            continue
        findings += check.run(facts, focus)
        report.checked.append(Checked(check.stage, check.name, check.what))
    return findings


def _limits(facts: Facts, focus: Focus) -> list[Skipped]:
    """What the doctor leaves alone on purpose: node internals, Pending pods past the limit."""
    note = internals.EXEC_NOTE.format(ns=facts.operator_namespace)
    skipped = [Skipped("node-internals", "validation files, nvidia-smi", note)]
    waiting = len(pods.unscheduled(facts, focus))
    if waiting > pods.MAX_PODS:
        more = f"{waiting - pods.MAX_PODS} more Pending pod(s)"
        skipped.append(Skipped("pods", more, f"only the oldest {pods.MAX_PODS} are triaged"))
    return skipped


def _logs_line(read: list[str]) -> str:
    if not read:
        return "no finding pointed at a pod, so no log was read"
    return f"last {TAIL_LINES} lines of {', '.join(read)}"


def _target(lab: Lab) -> dict[str, str]:
    return {"name": lab.name, "backend": lab.backend.name, "description": lab.backend.describe(lab)}


def _counts(facts: Facts) -> dict[str, str]:
    policy = facts.policy
    return {
        "nodes": f"{len(facts.objects('nodes'))} ({len(facts.gpu_nodes)} GPU)",
        "pods": str(len(facts.objects("pods"))),
        "operator_namespace": facts.operator_namespace,
        "clusterpolicy": f"{gpu.name_of(policy)} {gpu.policy_state(policy)}" if policy else "none",
    }


def parse_focus(text: str | None) -> Focus:
    """`--pod NS/NAME` as (namespace, name); CannotCheck names the expected form."""
    if not text:
        return None
    namespace, _, name = text.partition("/")
    if not namespace or not name or "/" in name:
        raise CannotCheck(f"--pod {text!r} is not NAMESPACE/NAME, e.g. --pod default/gpu-probe")
    return namespace, name


def doctor(open_target: Callable[[], Lab], pod: str | None = None) -> Report:
    """The whole run as `lab.doctor` does it: any reason it could not check becomes a report
    with status could-not-check (exit 2) and the reason, never an exception."""
    from urllib3.exceptions import HTTPError

    started = time.monotonic()
    target = {"name": "?", "backend": "?", "description": "?"}
    try:
        focus = parse_focus(pod)
        lab = open_target()
        target = _target(lab)
        return examine(lab, focus)
    except (LabError, HTTPError, OSError) as error:
        return Report(target, error=str(error), seconds=time.monotonic() - started)
