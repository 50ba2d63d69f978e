"""The doctor's report as a person reads it, and as the stable `--json` document.

JSON schema `eks-gpu-lab/doctor/v1` (README): keys are only ever added, never renamed;
`findings` come in report order (each root cause, then what it explains), and
`probable_cause` repeats the first root that is above info.
"""

from __future__ import annotations

import json
from typing import Any

from labs.doctor.model import REPORT_STAGES, DoctorFinding, Ranked, Report

SCHEMA = "eks-gpu-lab/doctor/v1"


def _key(finding: DoctorFinding | None) -> dict[str, str] | None:
    return None if finding is None else {"name": finding.name, "subject": finding.subject}


def as_document(report: Report) -> dict[str, Any]:
    """The report as plain data (what `--json` prints)."""
    return {
        "schema": SCHEMA,
        "target": report.target,
        "status": report.status,
        "exit_code": report.exit_code,
        "error": report.error,
        "probable_cause": _key(report.probable_cause),
        "findings": [
            {**r.finding.as_dict(), "explained_by": _key(r.explained_by)} for r in report.ranked
        ],
        "checked": [
            {"stage": c.stage, "check": c.check, "looked_at": c.looked_at} for c in report.checked
        ],
        "not_checked": [{"stage": s.stage, "what": s.what, "why": s.why} for s in report.skipped],
        "seconds": round(report.seconds, 3),
    }


def as_json(report: Report) -> str:
    return json.dumps(as_document(report), indent=2)


def _finding_lines(ranked: Ranked) -> list[str]:
    """A root in full (evidence, meaning, fix); what it explains with its evidence only."""
    finding = ranked.finding
    indent = "  " + "    " * ranked.depth
    head = f"{finding.name} [{finding.severity}, {finding.confidence} confidence]"
    if ranked.explained_by is not None:
        head = f"<- {head}"
    lines = [f"{indent}{head} {finding.subject}", f"{indent}   {finding.summary}"]
    lines += [f"{indent}   evidence: {e.object} {e.field} = {e.value}" for e in finding.evidence]
    if ranked.explained_by is None:
        lines += [f"{indent}   means: {finding.meaning}", f"{indent}   fix:   {finding.fix}"]
    return lines


def as_text(report: Report) -> str:
    """What `invoke lab.doctor` prints: target, verdict, findings, then what was checked."""
    target = report.target
    lines = [f"lab.doctor: {target.get('name')} ({target.get('description')}), read-only"]
    if report.error is not None:
        return "\n".join([*lines, f"could not check: {report.error}"])
    counts = ", ".join(
        f"{k} {target[k]}" for k in ("nodes", "pods", "clusterpolicy") if k in target
    )
    lines.append(f"read: {counts}")
    cause = report.probable_cause
    problems = [r for r in report.ranked if r.finding.problem]
    if cause is None:
        lines.append("no problem found")
    else:
        lines.append(f"probable cause: {cause.name} ({cause.subject})")
    if problems:
        lines += ["", "findings (each root cause, then <- what it explains):"]
        for ranked in problems:
            lines += _finding_lines(ranked)
    notes = [r for r in report.ranked if not r.finding.problem]
    if notes:
        lines += ["", "notes (info):"]
        for ranked in notes:
            lines += _finding_lines(ranked)
    lines += ["", "checked, top-down:"]
    for stage in REPORT_STAGES:
        for checked in (c for c in report.checked if c.stage == stage):
            lines.append(f"  {stage:<14} {checked.looked_at}")
        for skipped in (s for s in report.skipped if s.stage == stage):
            lines.append(f"  {stage:<14} NOT CHECKED: {skipped.what}: {skipped.why}")
    lines.append(f"({report.seconds:.2f} s)")
    return "\n".join(lines)
