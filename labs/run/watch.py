"""The watcher that stamps a scenario's checks on a timeline.

It evaluates every pending check on each watch event (not on a polling tick), so each
one gets the moment it first held, measured from one starting instant (the injection
for symptoms, the revert for recovery).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from labs.kube.view import ClusterView
from labs.lab import Lab
from labs.run.contract import Check, CheckResult, Context

# Rehearsal worlds run many times faster than a real cluster, but their control plane keeps
# real time (queues, back-offs, a pod's graceful deletion): a check never gets less than
# this many wall-clock seconds, so a busy machine cannot fail it. Only a failing check
# waits this long.
MIN_TIMEOUT = 60.0
# Checks are also re-evaluated this often (real-cluster seconds) when nothing changes, so a
# "still so 30 s later" check is decided close to its moment; never more than 20 times a
# wall-clock second, never less than once.
RECHECK_EVERY = 5.0


def watch_checks(
    ctx: Context,
    checks: Sequence[Check],
    phase: str,
    started: float,
    time_scale: float,
    report: Callable[[CheckResult], None],
) -> list[CheckResult]:
    """Evaluate `checks` on every change until each held or ran out of time.

    `started` is the time.monotonic() instant T+0; a check's limit is its timeout
    divided by `time_scale` (a rehearsal's speed-up; then never under MIN_TIMEOUT, or the
    lab's own floor where its world keeps more real time: `Backend.check_floor`).
    `report` is called for each result as it is decided (the live story).
    """
    floor = wait_floor(ctx.lab)
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
            elif now - started >= limit(check, time_scale, floor):
                decide(check, False, now)
        return bool(actions) or not pending

    longest = max((limit(c, time_scale, floor) for c in checks), default=0.0)
    tick = min(1.0, max(0.05, RECHECK_EVERY / time_scale))
    while pending or actions:
        if pending:
            remaining = started + longest - time.monotonic()
            ctx.view.wait_for(
                evaluate, timeout=max(remaining, 0.0) + 5.0, what=f"{phase} checks", tick=tick
            )
        while actions:
            actions.pop(0)(ctx)
    return [results[c.name] for c in checks]


def checks_now(ctx: Context, checks: Sequence[Check], phase: str) -> list[CheckResult]:
    """Each check read once on the view as it is (no waiting, no `then`): how the lab stands
    right now, for a learner who asks whether a fix is done."""
    results = []
    for check in checks:
        held, seen = check.condition(ctx)
        results.append(CheckResult(phase, check.name, held, 0.0 if held else None, seen,
                                   time.time() if held else None))  # fmt: skip
    return results


def wait_floor(lab: Lab) -> float:
    """The fewest wall seconds a sped-up wait gets on `lab`: MIN_TIMEOUT, or more where its
    world keeps more real time (`Backend.check_floor`)."""
    return lab.backend.check_floor(lab) or MIN_TIMEOUT


def limit(check: Check, time_scale: float, floor: float = MIN_TIMEOUT) -> float:
    """A check's time limit in wall-clock seconds on this backend."""
    return wall_seconds(check.timeout, time_scale, floor)


def wall_seconds(timeout: float, time_scale: float, floor: float = MIN_TIMEOUT) -> float:
    """A real-world wait in wall-clock seconds on this backend (a rehearsal's `floor`
    included)."""
    if time_scale == 1:
        return timeout
    return max(timeout / time_scale, floor)
