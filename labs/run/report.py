"""The record of one scenario run, written as report.md, report.json and timeline.png.

A report must stand on its own a week later: what was injected into which lab on
which backend, what the cluster looked like before, during and after, when each
symptom and recovery step showed up, the debugging path with its evidence, the
traps, and what the run does and does not prove.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from labs.run.alerts import EKS_SCRAPE_AND_EVALUATION
from labs.run.contract import CheckResult, Finding, Trap
from labs.run.doctor_check import DOCTOR_PHASE
from labs.state import StateWriteError, atomic_write_json, atomic_write_text

STATE_COLUMNS = ("baseline", "fault", "recovered")


@dataclass
class RunRecord:
    """Everything a run observed; the engine fills it in as the run goes."""

    scenario: str
    summary: str
    lab: str
    backend: str
    backend_label: str
    proof: dict[str, list[str]]
    speed: float
    started_at: str
    finished_at: str = ""
    journal_id: str | None = None
    kept: bool = False
    baseline: dict[str, Any] = field(default_factory=dict)
    states: dict[str, dict[str, str]] = field(default_factory=dict)
    checks: list[CheckResult] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    traps: list[Trap] = field(default_factory=list)
    differences: list[str] = field(default_factory=list)
    plan: list[str] = field(default_factory=list)  # the injection's infrastructure changes
    timeline: dict[str, Any] = field(default_factory=dict)
    # Each alert seen while the fault was in, the expected ones and the trap rules
    # (`AlertMoment.to_dict`); None: the lab has no monitoring to read.
    alerts: list[dict[str, Any]] | None = None
    # Why `alerts` is None, as the run found it (no monitoring, or a Prometheus that is dead)
    alerts_unrecorded: str = "the lab has no monitoring (`invoke lab.up --monitoring`)"
    reverted_at: float | None = None
    error: str | None = None
    exit_code: int = 0

    @property
    def failed_checks(self) -> list[str]:
        failed = [f"{c.phase}: {c.name}" for c in self.checks if not c.held]
        if self.differences:
            failed.append("recovered state equals baseline")
        return failed

    def to_dict(self) -> dict[str, Any]:
        """The report.json document (the run's fields, grouped the way a reader looks)."""
        return {
            "scenario": self.scenario,
            "summary": self.summary,
            "lab": self.lab,
            "backend": self.backend,
            "backend_label": self.backend_label,
            "speed": self.speed,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "journal_id": self.journal_id,
            "result": {
                "ok": self.exit_code == 0,
                "exit_code": self.exit_code,
                "failed_checks": self.failed_checks,
                "error": self.error,
                "fault_kept": self.kept,
            },
            "plan": self.plan,
            "baseline": self.baseline,
            "states": self.states,
            "checks": [_rounded(asdict(c)) for c in self.checks],
            "reverted_at": None if self.reverted_at is None else round(self.reverted_at, 3),
            "comparison": {"equal": not self.differences, "differences": self.differences},
            "findings": [asdict(f) for f in self.findings],
            "traps": [trap_record(t, self.findings, self.checks) for t in self.traps],
            "alerts": self.alerts,
            "alerts_unrecorded": None if self.alerts is not None else self.alerts_unrecorded,
            "proof": self.proof,
            "timeline": self.timeline,
        }


def _rounded(check: dict[str, Any]) -> dict[str, Any]:
    """A check result with T+ to the millisecond."""
    return {**check, "t": None if check["t"] is None else round(check["t"], 3)}


def trap_record(trap: Trap, findings: list[Finding], checks: list[CheckResult]) -> dict[str, Any]:
    """A trap with its debugging step, and whether this run's checks actually showed it."""
    shown = [f for f in findings if f.trap == trap.name]
    fields = asdict(trap)
    fields.pop("shown_by")
    fields.pop("shown_in")
    by_check = any(c.name == trap.shown_by and c.held for c in checks)
    by_step = bool(trap.shown_in) and any(trap.shown_in in f.saw for f in shown)
    return {
        **fields,
        "step": shown[0].step if shown else None,
        "observed": by_check or by_step,
    }


# --- Markdown ----------------------------------------------------------------------------


def _cell(value: Any) -> str:
    text = "" if value is None else str(value)
    return text.replace("|", "\\|").replace("\n", "<br>")


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]
    return lines + [""]


def _seconds(t: float | None) -> str:
    return "-" if t is None else f"{t:.2f}"


def _result_line(run: RunRecord) -> str:
    if run.error:
        return f"**FAILED** (exit {run.exit_code}): {run.error}"
    if run.exit_code:
        return f"**FAILED** (exit {run.exit_code}): {'; '.join(run.failed_checks)}"
    if run.kept:
        return "**OK, fault kept**: symptoms confirmed; the fault is still in the lab"
    return "**OK**: every symptom, doctor and recovery check held"


def _summary_section(run: RunRecord) -> list[str]:
    columns = [c for c in STATE_COLUMNS if c in run.states]
    if not columns:
        return []
    keys = list(dict.fromkeys(k for c in columns for k in run.states[c]))
    rows = [[key, *(run.states[c].get(key, "") for c in columns)] for key in keys]
    return ["## Summary", "", *_table(["fact", *columns], rows)]


def _timeline_section(run: RunRecord) -> list[str]:
    scaled = run.speed != 1
    header = ["phase", "T+ (s)", *(["real-time (s)"] if scaled else []), "check", "held", "seen"]
    rows = []
    phases = list(dict.fromkeys(c.phase for c in run.checks))
    in_order = sorted(
        run.checks,
        key=lambda c: (phases.index(c.phase), c.t is None, c.t or 0.0),
    )
    for check in in_order:
        real = [_seconds(None if check.t is None else check.t * run.speed)] if scaled else []
        rows.append(
            [check.phase, _seconds(check.t), *real, check.name, "yes" if check.held else "NO",
             check.seen]
        )  # fmt: skip
    origin = "Symptom times count from the injection's end (the fault in place)"
    if any(c.phase == DOCTOR_PHASE for c in run.checks):
        origin += ", the doctor's from when it was first asked (after the symptoms)"
    if run.reverted_at is not None:
        origin += f", recovery times from the revert (T+{run.reverted_at:.2f} s after injection)"
    return ["## Timeline", "", f"{origin}.", "", *_table(header, rows)]


def _findings_section(run: RunRecord) -> list[str]:
    if not run.findings:
        return []
    lines = ["## Debugging path", ""]
    for finding in run.findings:
        tags = []
        if finding.real_cluster_only:
            tags.append("real cluster only: not observed by this run")
        if finding.trap:
            tags.append(f"trap: {finding.trap}")
        suffix = f" _({'; '.join(tags)})_" if tags else ""
        lines += [
            f"- **{finding.step}**{suffix}",
            f"   - look: `{finding.look}`",
            f"   - saw: {finding.saw}",
            f"   - means: {finding.means}",
        ]
    return lines + [""]


def _traps_section(run: RunRecord) -> list[str]:
    if not run.traps:
        return []
    rows = []
    for trap in run.traps:
        record = trap_record(trap, run.findings, run.checks)
        where = "not reached"
        if record["step"]:
            where = record["step"] if record["observed"] else f"{record['step']} (real cluster)"
        rows.append([trap.name, trap.expected, trap.actual, trap.why, where])
    header = ["trap", "you would expect", "what happens", "why it matters", "shown at"]
    return ["## Traps", "", *_table(header, rows)]


def _on_eks(alert: dict[str, Any], speed: float) -> str:
    """When a person on EKS sees an alert that fired here fire: its `for:` after the condition
    holds, plus kube-prometheus-stack's scrape and evaluation."""
    lasts = alert.get("for_seconds")
    if alert["firing_at"] is None or lasts is None:
        return "-"
    low = lasts * speed
    return f"{low:.0f}-{low + EKS_SCRAPE_AND_EVALUATION:.0f} s after its condition holds"


def _alerts_section(run: RunRecord) -> list[str]:
    lines = ["## Alerts", ""]
    if run.alerts is None:
        return [*lines, f"Not recorded: {run.alerts_unrecorded}.", ""]
    header = ["alert", "expected", "pending at T+ (s)", "firing at T+ (s)", "on EKS", "summary"]
    rows = []
    for alert in run.alerts:
        name = alert["name"] + (" (trap)" if alert["trap"] else "")
        name += " (already before the injection)" if alert["before"] else ""
        pending, firing = alert["pending_at"], alert["firing_at"]
        shown = "silent" if firing is None and pending is None else _seconds(firing)
        expected = "yes" if alert["expected"] else "no"
        rows.append([name, expected, _seconds(pending), shown, _on_eks(alert, run.speed),
                     alert["summary"]])  # fmt: skip
    about = (
        "As Prometheus' /api/v1/alerts showed them, polled from the injection until the alerts "
        "the scenario expects fired; T+ in wall-clock seconds."
    )
    if run.speed != 1:
        about += (
            f" The rehearsal ran {run.speed:g}x: each rule's `for:` was divided by that, but its "
            f"Prometheus scrapes and evaluates every wall second ({run.speed:g} s of the "
            "world's), so T+ times the speed overstates an alert by up to two such intervals. "
            "'On EKS' is what a person there sees: the rule's `for:` after its condition holds, "
            "plus up to 30 s of scraping and 30 s of evaluation."
        )
    return [*lines, about, "", *_table(header, rows)]


def render_markdown(run: RunRecord, plot_name: str | None = "timeline.png") -> str:
    """The human report."""
    lines = [
        f"# Scenario run: {run.scenario}",
        "",
        run.summary,
        "",
        f"- result: {_result_line(run)}",
        f"- lab: `{run.lab}`, backend: {run.backend_label}",
        f"- started {run.started_at}, finished {run.finished_at}",
        f"- journal entry: `{run.journal_id or 'none (nothing injected)'}`",
        "",
    ]
    if run.plan:
        lines += ["## Infrastructure plan of the injection", "", "```", *run.plan, "```", ""]
    lines += _summary_section(run)
    if run.differences:
        lines += ["Recovered state differs from the baseline:", ""]
        lines += [f"- {d}" for d in run.differences] + [""]
    lines += _timeline_section(run)
    if plot_name:
        lines += [f"![timeline]({plot_name})", ""]
    else:
        lines += ["No timeline.png: the run stopped before it sampled or checked anything.", ""]
    lines += _alerts_section(run)
    lines += _findings_section(run)
    lines += _traps_section(run)
    if run.baseline:
        lines += ["## Baseline facts", "", "```json", json.dumps(run.baseline, indent=2), "```", ""]
    lines += ["## What this run proves", ""] + [f"- {p}" for p in run.proof["proves"]] + [""]
    lines += ["## What it does not prove", ""] + [f"- {p}" for p in run.proof["does_not_prove"]]
    return "\n".join(lines) + "\n"


def write_report(run: RunRecord, run_dir: Path) -> Path:
    """Write report.md, report.json and timeline.png into `run_dir`; return report.md's path."""
    from labs.run.plot import plot_timeline

    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise StateWriteError(f"could not create {run_dir}: {error.strerror or error}") from error
    plotted = plot_timeline(run.timeline, run_dir / "timeline.png", run.scenario, run.speed)
    atomic_write_json(run_dir / "report.json", run.to_dict())
    report = run_dir / "report.md"
    atomic_write_text(report, render_markdown(run, "timeline.png" if plotted else None))
    return report
