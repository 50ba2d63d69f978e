"""What a scenario declares, and the watcher that stamps its checks on a timeline.

A check is a named condition over the live cluster view plus a time limit. The
watcher evaluates every pending check on each watch event (not on a polling tick),
so each one gets the moment it first held, measured from one starting instant
(the injection for symptoms, the revert for recovery).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from labs.cluster import ClusterView
    from labs.lab import Lab

# A condition answers (holds, what was seen): the second part is the evidence when it
# holds, and the "last seen" explanation when it never did.
Verdict = tuple[bool, str]

# Rehearsal worlds run many times faster than a real cluster; a check never gets less
# than this many wall-clock seconds, so a busy test machine cannot fail it.
MIN_TIMEOUT = 10.0


@dataclass
class Context:
    """What a condition or action may look at: the lab, the live view and the baseline."""

    lab: Lab
    view: ClusterView
    baseline: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Check:
    """A named condition with a time limit in real-cluster seconds.

    `then` runs once, right after the check first holds (e.g. "now apply the probe again").
    """

    name: str
    condition: Callable[[Context], Verdict]
    timeout: float
    then: Callable[[Context], None] | None = None


@dataclass(frozen=True)
class CheckResult:
    """When a check held (seconds after its phase began), or why it did not."""

    phase: str
    name: str
    held: bool
    t: float | None
    seen: str
    wall_time: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "phase": self.phase,
            "name": self.name,
            "held": self.held,
            "t": None if self.t is None else round(self.t, 3),
            "seen": self.seen,
            "wall_time": self.wall_time,
        }


@dataclass(frozen=True)
class Needs:
    """What a scenario needs from the lab before it may run."""

    gpu_nodes: int = 0
    operator: bool = False

    def __str__(self) -> str:
        parts = [f"{self.gpu_nodes} Ready GPU node(s)"] if self.gpu_nodes else []
        parts += ["the GPU Operator installed and running"] if self.operator else []
        return ", ".join(parts) or "nothing beyond a reachable cluster"


@dataclass(frozen=True)
class Finding:
    """One step of the debugging path: what to look at, what it showed, what it means.

    `real_cluster_only` marks steps the tool cannot observe for you (node internals):
    `saw` then says what a real cluster shows. `trap` names the trap this step exposes.
    """

    step: str
    look: str
    saw: str
    means: str
    real_cluster_only: bool = False
    trap: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "look": self.look,
            "saw": self.saw,
            "means": self.means,
            "real_cluster_only": self.real_cluster_only,
            "trap": self.trap,
        }


@dataclass(frozen=True)
class Trap:
    """A belief the fault makes look true: what one expects, what happens, why it matters."""

    name: str
    expected: str
    actual: str
    why: str
    # The symptom check whose holding shows the trap in a run ("" when no backend check can).
    shown_by: str = ""

    def to_dict(self) -> dict[str, str]:
        return {
            "name": self.name,
            "expected": self.expected,
            "actual": self.actual,
            "why": self.why,
        }


class Scenario(Protocol):
    """The contract of a scenario module (see scenarios/device_plugin_off.py).

    Optional extras: `state(ctx) -> dict[str, str]` (the summary table rows, compared
    between baseline and recovery), `gauges` (name -> view sampler for the timeline
    plot) and `watch(lab) -> list[WatchedKind]` (kinds the checks read; default: the
    lab's standard view).
    """

    name: str
    summary: str
    needs: Needs
    risk: str
    duration: str
    symptoms: list[Check]
    recovery: list[Check]
    traps: list[Trap]

    def baseline(self, lab: Lab, view: ClusterView) -> dict[str, Any]: ...

    def inject(self, lab: Lab) -> None: ...

    def revert(self, lab: Lab) -> None: ...

    def diagnose(self, lab: Lab, view: ClusterView) -> list[Finding]: ...


def watch_checks(
    ctx: Context,
    checks: list[Check],
    phase: str,
    started: float,
    time_scale: float,
    report: Callable[[CheckResult], None],
) -> list[CheckResult]:
    """Evaluate `checks` on every change until each held or ran out of time.

    `started` is the time.monotonic() instant T+0; a check's limit is its timeout
    divided by `time_scale` (a rehearsal's speed-up; then never under MIN_TIMEOUT).
    `report` is called for each result as it is decided (the live story).
    """
    pending = list(checks)
    results: dict[str, CheckResult] = {}
    last_seen: dict[str, str] = {}
    actions: list[Callable[[Context], None]] = []

    def decide(check: Check, held: bool, now: float) -> None:
        elapsed = now - started
        result = CheckResult(
            phase=phase,
            name=check.name,
            held=held,
            t=elapsed if held else None,
            seen=last_seen.get(check.name, "nothing seen yet"),
            wall_time=time.time() if held else None,
        )
        results[check.name] = result
        pending.remove(check)
        report(result)
        if held and check.then is not None:
            actions.append(check.then)

    def evaluate(_view: ClusterView) -> bool:
        now = time.monotonic()
        for check in list(pending):
            held, seen = check.condition(ctx)
            last_seen[check.name] = seen
            if held:
                decide(check, True, now)
            elif now - started >= limit(check, time_scale):
                decide(check, False, now)
        return bool(actions) or not pending

    longest = max((limit(c, time_scale) for c in checks), default=0.0)
    while pending or actions:
        if pending:
            remaining = started + longest - time.monotonic()
            ctx.view.wait_for(evaluate, timeout=max(remaining, 0.0) + 5.0, what=f"{phase} checks")
        while actions:
            actions.pop(0)(ctx)
    return [results[c.name] for c in checks]


def limit(check: Check, time_scale: float) -> float:
    """A check's time limit in wall-clock seconds on this backend."""
    if time_scale == 1:
        return check.timeout
    return max(check.timeout / time_scale, MIN_TIMEOUT)
