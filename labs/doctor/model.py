"""What the doctor reports: findings with their evidence, and how they explain each other.

A finding is one fact the doctor read (a node advertising 0 GPUs, a ClusterPolicy toggle
switched off) with what it means and how to fix it. Causes name the findings they explain
(`Link`), so the report can say which one is the root: the probable cause is the most
severe finding nothing else explains, the highest up the flowchart among equals.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

# The flowchart's stages, top-down, as a person walks them.
STAGES = (
    "pods",
    "nodes",
    "operands",
    "operator",
    "node-internals",
    "network",
)
# Where the checked and skipped lines sit: log tails are read after the operator's step.
REPORT_STAGES = (*STAGES[:4], "logs", *STAGES[4:])
SEVERITIES = ("error", "warning", "info")
CONFIDENCES = ("high", "medium", "low")


@dataclass(frozen=True)
class Evidence:
    """What was read: the object, the field (or event, log line) and the value seen."""

    object: str
    field: str
    value: str

    def as_dict(self) -> dict[str, str]:
        return {"object": self.object, "field": self.field, "value": self.value}


@dataclass(frozen=True)
class Link:
    """The findings a cause explains: by name, and narrowed to one subject or one tag."""

    name: str
    subject: str = "*"
    tag: str = ""

    def matches(self, finding: DoctorFinding) -> bool:
        return (
            finding.name == self.name
            and self.subject in ("*", finding.subject)
            and (not self.tag or self.tag in finding.tags)
        )


@dataclass(frozen=True)
class LogRequest:
    """A container whose log tail a finding asks the doctor to read; `group` says which known
    lines to look for ("device-plugin", "operand", "workload")."""

    namespace: str
    pod: str
    container: str
    group: str

    @property
    def source(self) -> str:
        return f"log/{self.namespace}/{self.pod}[{self.container}]"


@dataclass(frozen=True)
class DoctorFinding:
    """One finding: `name` says what kind (stable, see the catalogue), `subject` on what."""

    name: str
    stage: str
    severity: str
    confidence: str
    subject: str
    summary: str
    evidence: tuple[Evidence, ...]
    meaning: str
    fix: str
    explains: tuple[Link, ...] = ()
    tags: frozenset[str] = frozenset()
    read_logs: tuple[LogRequest, ...] = ()

    @property
    def key(self) -> tuple[str, str]:
        return self.name, self.subject

    @property
    def problem(self) -> bool:
        """Above info: something to fix."""
        return self.severity != "info"

    def merged(self, other: DoctorFinding) -> DoctorFinding:
        """The same finding seen twice (on an object and in a log): one, with both evidences."""
        confidence = min(self.confidence, other.confidence, key=CONFIDENCES.index)
        severity = min(self.severity, other.severity, key=SEVERITIES.index)
        evidence = self.evidence + tuple(e for e in other.evidence if e not in self.evidence)
        return replace(
            self,
            confidence=confidence,
            severity=severity,
            evidence=evidence,
            explains=self.explains + tuple(x for x in other.explains if x not in self.explains),
            tags=self.tags | other.tags,
            read_logs=self.read_logs + other.read_logs,
        )

    def as_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "subject": self.subject,
            "stage": self.stage,
            "severity": self.severity,
            "confidence": self.confidence,
            "summary": self.summary,
            "evidence": [e.as_dict() for e in self.evidence],
            "meaning": self.meaning,
            "fix": self.fix,
        }


@dataclass(frozen=True)
class Checked:
    """One check that ran and what it looked at."""

    stage: str
    check: str
    looked_at: str


@dataclass(frozen=True)
class Skipped:
    """Something the doctor did not check, and why."""

    stage: str
    what: str
    why: str


@dataclass(frozen=True)
class Ranked:
    """A finding in report order, with the finding that explains it (None for a root)."""

    finding: DoctorFinding
    explained_by: DoctorFinding | None
    depth: int = 0  # how many causes up to its root


def _merge(findings: Iterable[DoctorFinding]) -> list[DoctorFinding]:
    by_key: dict[tuple[str, str], DoctorFinding] = {}
    for finding in findings:
        seen = by_key.get(finding.key)
        by_key[finding.key] = finding if seen is None else seen.merged(finding)
    return list(by_key.values())


def _rank_key(finding: DoctorFinding) -> tuple[int, int, str, str]:
    return (
        SEVERITIES.index(finding.severity),
        STAGES.index(finding.stage),
        finding.name,
        finding.subject,
    )


def _explainer(finding: DoctorFinding, findings: Sequence[DoctorFinding]) -> DoctorFinding | None:
    """The cause of `finding` among the others: the deepest in the flowchart, then by rank."""
    causes = [
        other
        for other in findings
        if other is not finding and any(link.matches(finding) for link in other.explains)
    ]
    if not causes:
        return None
    return min(causes, key=lambda c: (-STAGES.index(c.stage), _rank_key(c)))


def rank(findings: Iterable[DoctorFinding]) -> list[Ranked]:
    """Roots first (most severe, then highest up the flowchart), each followed by what it
    explains; a loop of explanations is cut at its first member in rank order, which becomes
    a root, so no finding is ever lost."""
    merged = sorted(_merge(findings), key=_rank_key)
    parent = {f.key: _explainer(f, merged) for f in merged}
    for finding in merged:
        seen: set[tuple[str, str]] = set()
        cause = parent[finding.key]
        while cause is not None and cause.key != finding.key and cause.key not in seen:
            seen.add(cause.key)
            cause = parent[cause.key]
        if cause is not None and cause.key == finding.key:  # `finding` is in a loop
            parent[finding.key] = None
    ordered: list[Ranked] = []

    def place(finding: DoctorFinding, depth: int) -> None:
        ordered.append(Ranked(finding, parent[finding.key], depth))
        for child in merged:
            if parent[child.key] is finding:
                place(child, depth + 1)

    for root in (f for f in merged if parent[f.key] is None):
        place(root, 0)
    return ordered


@dataclass
class Report:
    """One doctor run: the target, what was checked or skipped, the findings, the verdict."""

    target: dict[str, str]
    checked: list[Checked] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    findings: list[DoctorFinding] = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0

    @property
    def ranked(self) -> list[Ranked]:
        return rank(self.findings)

    @property
    def probable_cause(self) -> DoctorFinding | None:
        roots = [r.finding for r in self.ranked if r.explained_by is None and r.finding.problem]
        return roots[0] if roots else None

    @property
    def status(self) -> str:
        if self.error is not None:
            return "could-not-check"
        return "problems" if any(f.problem for f in self.findings) else "healthy"

    @property
    def exit_code(self) -> int:
        return {"healthy": 0, "problems": 1, "could-not-check": 2}[self.status]
