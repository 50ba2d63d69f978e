"""Blind exercises: pick faults, inject them unnamed, check a learner's fix, grade an answer.

Everything here stands on the scenario contract (baseline, recovery checks, `detect`,
`diagnose`, the doctor's finding id and the area), handed in as a catalogue by the tasks, so
it works on any backend. Until the reveal (an answer, giving up, or the fixed lab) no text
this module prints names a fault: `_Hider` replaces the names in whatever a check or a
debugging step says.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import mean

from labs.console import columns
from labs.errors import LabError
from labs.lab import Lab
from labs.practice.record import (
    ABANDONED,
    ENDED,
    FIXED,
    GAVE_UP,
    OPEN,
    STARTING,
    UNFINISHED,
    Exercise,
    Record,
    seconds_between,
)
from labs.run.contract import AREAS, Scenario
from labs.run.engine import (
    debugging_path,
    describe_scenario,
    fixed_by_hand,
    inject_blind,
    recovery_now,
    revert_scenarios,
)
from labs.state import utc_now

Out = Callable[[str], None]
Confirm = Callable[[str], bool]
RIGHT, RIGHT_LAYER, WRONG = 1.0, 0.5, 0.0
GRADE_WORDS = {RIGHT: "right", RIGHT_LAYER: "the right layer, not the cause", WRONG: "wrong"}
# Scenarios of the learner's last exercises that a new pick avoids while others remain.
RECENT_EXERCISES = 3
HIDDEN = "(hidden)"


class PracticeError(LabError):
    """A practice command cannot go on; the message says what to do instead."""


# --- picking ----------------------------------------------------------------------------------


def can_coexist(first: Scenario, second: Scenario) -> bool:
    """Two faults can be in together when one takes a node's GPU away (it acts through its own
    pinned probe) and the other is a wrong pod spec (it replaces the lab's probe): each one's
    symptoms, recovery checks and fix then stay its own."""
    return first.area == "node" and second.area == "workload"


def _area_grades(history: Sequence[Exercise]) -> dict[str, list[float]]:
    """Each area's grades over the learner's ended exercises, oldest first (no answer: wrong)."""
    grades: dict[str, list[float]] = {}
    for exercise in history:
        if exercise.outcome in ENDED:
            for fault in exercise.faults:
                grades.setdefault(fault.area, []).append(fault.grade or WRONG)
    return grades


def _ranked(
    pool: Sequence[Scenario], history: Sequence[Exercise], rng: random.Random
) -> list[Scenario]:
    """Not seen in the last exercises first, then the worst-scored (or untried) area, then the
    one seen longest ago; the seed breaks ties."""
    scores = {area: mean(grades) for area, grades in _area_grades(history).items()}
    recent = {f.scenario for e in history[-RECENT_EXERCISES:] for f in e.faults}
    last_seen = {f.scenario: e.started_at for e in history for f in e.faults}
    keyed = [
        (s.name in recent, scores.get(s.area, -1.0), last_seen.get(s.name, ""), rng.random(), s)
        for s in pool
    ]
    return [entry[-1] for entry in sorted(keyed, key=lambda entry: entry[:-1])]


def choose(
    catalogue: Mapping[str, Scenario],
    history: Sequence[Exercise],
    area: str | None = None,
    names: Sequence[str] = (),
    faults: int | None = None,
    seed: int | None = None,
) -> list[Scenario]:
    """The faults of a new exercise: the ones named, or one (or two that can coexist) picked."""
    wanted = len(names) if names and faults is None else (faults or 1)
    if wanted not in (1, 2) or (names and len(names) != wanted):
        raise PracticeError(
            f"--faults is 1 or 2, and --scenario names that many (got --faults {faults}, "
            f"--scenario {','.join(names) or 'none'})"
        )
    if names:
        chosen = [_known(catalogue, name) for name in names]
        if wanted == 2 and not can_coexist(*chosen):
            raise PracticeError(_pair_rule())
        return chosen
    if area is not None and area not in AREAS:
        raise PracticeError(f"no area {area!r}; the areas are {', '.join(AREAS)}")
    pool = [s for s in catalogue.values() if area is None or s.area == area]
    ranked = _ranked(pool, history, random.Random(seed))
    if wanted == 1 and ranked:
        return ranked[:1]
    pairs = [[a, b] for a in ranked for b in ranked if can_coexist(a, b)]
    if not pairs:
        raise PracticeError(
            f"no fault to pick{f' in area {area}' if area else ''}: "
            + (_pair_rule() if wanted == 2 else "see `invoke scenario.list`")
        )
    return pairs[0]


def _pair_rule() -> str:
    return (
        "two faults at once are one of area node and one of area workload, in that order "
        "(they can coexist); see `invoke scenario.list` and drop --area"
    )


def _known(catalogue: Mapping[str, Scenario], name: str) -> Scenario:
    if name not in catalogue:
        raise PracticeError(f"no scenario named {name!r}; known: {', '.join(catalogue)}")
    return catalogue[name]


# --- the exercise -----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Hider:
    """Replaces the names of an exercise's faults in any text shown before the reveal."""

    names: tuple[str, ...]

    def __call__(self, text: str) -> str:
        for name in self.names:
            text = text.replace(name, HIDDEN)
        return text


def _hider(exercise: Exercise) -> _Hider:
    return _Hider(tuple(fault.scenario for fault in exercise.faults))


def settle(lab: Lab) -> None:
    """An unfinished exercise whose hidden faults the journal no longer lists (reverted by
    `scenario.revert`, `lab.down`, or never injected by a killed start) is abandoned."""
    record = Record(lab.settings.state_dir)
    exercise = record.unfinished(lab.name)
    if exercise is not None and not lab.journal.hidden_outstanding():
        record.ended(exercise.id, ABANDONED)


def going(lab: Lab) -> Exercise:
    """The exercise going on the lab; PracticeError when there is none (or it never started)."""
    settle(lab)
    exercise = Record(lab.settings.state_dir).unfinished(lab.name)
    if exercise is None:
        raise PracticeError(
            f"no exercise is going on lab {lab.name}: start one with "
            f"`invoke practice.start --lab {lab.name}`"
        )
    if exercise.outcome == STARTING:
        raise PracticeError(
            f"exercise {exercise.id} on lab {lab.name} was stopped while it started; "
            f"`invoke practice.giveup --lab {lab.name}` reverts it"
        )
    return exercise


def start(
    lab: Lab,
    who: str,
    chosen_by: Callable[[Sequence[Exercise]], list[Scenario]],
    speed: float | None = None,
    confirm: Confirm | None = None,
    out: Out = print,
) -> int:
    """Pick faults with `chosen_by` (given the learner's history), record, inject them blind;
    returns the exercise id. An error before the faults are in leaves no exercise behind."""
    settle(lab)
    record = Record(lab.settings.state_dir)
    going = record.unfinished(lab.name)
    if going is not None:
        raise PracticeError(
            f"exercise {going.id} is still going on lab {lab.name}: `invoke practice.check`, "
            f"or `invoke practice.giveup --lab {lab.name}`"
        )
    chosen = chosen_by(record.of(who))
    exercise = record.begin(who, lab.name, [(s.name, s.area) for s in chosen])
    out(f"exercise {exercise} for {who} on lab {lab.name}: injecting {len(chosen)} fault(s) ...")
    try:
        baselines = inject_blind(lab, chosen, speed, confirm)
    except BaseException:
        record.discard(exercise)
        raise
    record.opened(exercise, baselines)
    out(
        f"{len(chosen)} fault(s) in the lab; the clock runs. Debug with kubectl and the aws CLI "
        f'(eval "$(invoke lab.env --lab {lab.name})"). `invoke practice.hint` gives the next '
        "step (counted), `invoke practice.check` checks your fix, `invoke practice.answer "
        '"<cause>"` says what it was, `invoke practice.giveup` shows it and reverts.'
    )
    return exercise


def check(lab: Lab, catalogue: Mapping[str, Scenario], wait: float, out: Out = print) -> bool:
    """Run every fault's recovery checks on the lab as the learner left it; True when each is
    fixed at its cause (then the exercise ends and the journal is cleared)."""
    exercise = going(lab)
    hide = _hider(exercise)
    fixed = 0
    for number, fault in enumerate(exercise.faults, 1):
        scenario = _known(catalogue, fault.scenario)
        results, cause_in = recovery_now(lab, scenario, fault.baseline or {}, wait)
        failed = [r for r in results if not r.held]
        out(f"fault {number} of {len(exercise.faults)}:")
        for result in results:
            mark = "passed" if result.held else "FAILED"
            out(hide(f"  {mark}: {result.name}"))
            out(hide(f"          {'saw' if result.held else 'last seen'}: {result.seen}"))
        if failed:
            out(f"  not recovered: {len(failed)} check(s) failed")
        elif cause_in:
            out("  a workaround: the symptoms are gone, but the cause is still in the lab")
        else:
            out("  recovered, and the cause is gone: the right fix")
            fixed += 1
    if fixed < len(exercise.faults):
        return False
    Record(lab.settings.state_dir).ended(exercise.id, FIXED)
    fixed_by_hand(lab, [fault.scenario for fault in exercise.faults])
    took = _clock(seconds_between(exercise.started_at, utc_now()))
    out(f"the lab is recovered: fixed in {took}, {exercise.hints} hint(s)")
    if exercise.answer is None:
        out(f'say what it was: `invoke practice.answer "<cause>" --lab {lab.name}`')
    return True


def hint(lab: Lab, catalogue: Mapping[str, Scenario]) -> str:
    """The next step of the debugging path (what to look at), counted; never the cause."""
    exercise = going(lab)
    hide = _hider(exercise)
    steps = [
        finding
        for fault in exercise.faults
        for finding in debugging_path(lab, _known(catalogue, fault.scenario))
    ]
    taken = Record(lab.settings.state_dir).hint_taken(exercise.id)
    if taken > len(steps):
        return f"hint {taken}: that was the whole path; `invoke practice.answer` or giveup"
    step = steps[taken - 1]
    return hide(f"hint {taken} of {len(steps)}: {step.step}\n  look: {step.look}")


def doctor_ran(state_dir: Path, lab_name: str) -> None:
    """`lab.doctor` during an exercise counts as a hint."""
    record = Record(state_dir)
    exercise = record.unfinished(lab_name)
    if exercise is not None:
        record.hint_taken(exercise.id)


def grade(text: str, scenario: Scenario, catalogue: Mapping[str, Scenario]) -> float:
    """Right when the words of the cause (the doctor's finding id, or the scenario's name) are
    all in `text`; the right layer when they name another cause of the same area, or the
    area itself; wrong otherwise."""
    words = set(re.findall(r"[a-z0-9]+", text.lower()))

    def names(s: Scenario) -> bool:
        causes = [cause for cause in (s.doctor_finding, s.name) if cause]
        return any(set(cause.split("-")) <= words for cause in causes)

    if names(scenario):
        return RIGHT
    same_area = [s for s in catalogue.values() if s.area == scenario.area]
    return RIGHT_LAYER if scenario.area in words or any(map(names, same_area)) else WRONG


def answer(lab: Lab, catalogue: Mapping[str, Scenario], text: str, out: Out = print) -> None:
    """Grade the learner's answer against each fault's cause, then show each runbook."""
    record = Record(lab.settings.state_dir)
    exercise = record.latest(lab.name)
    if exercise is None or exercise.answer is not None or exercise.outcome not in (OPEN, FIXED):
        raise PracticeError(
            f"no exercise on lab {lab.name} waits for an answer: start one with "
            f"`invoke practice.start --lab {lab.name}`"
        )
    scenarios = [_known(catalogue, fault.scenario) for fault in exercise.faults]
    grades = [grade(text, scenario, catalogue) for scenario in scenarios]
    record.answered(exercise.id, text, grades)
    took = _clock(seconds_between(exercise.started_at, utc_now()))
    out(f"answered after {took}, {exercise.hints} hint(s)")
    for number, (scenario, mark) in enumerate(zip(scenarios, grades, strict=True), 1):
        cause = scenario.doctor_finding or scenario.name
        out(f"fault {number}: {GRADE_WORDS[mark]}: it is {scenario.name} (cause {cause}, "
            f"area {scenario.area})")  # fmt: skip
    for scenario in scenarios:
        out("")
        out(describe_scenario(scenario))


def giveup(lab: Lab, catalogue: Mapping[str, Scenario], out: Out = print) -> None:
    """Reveal the faults, revert them and record the exercise as given up."""
    record = Record(lab.settings.state_dir)
    exercise = record.unfinished(lab.name)
    if exercise is None:
        raise PracticeError(f"no exercise is going on lab {lab.name}; nothing to give up")
    for fault in exercise.faults:
        scenario = _known(catalogue, fault.scenario)
        out(f"it was {scenario.name} (area {scenario.area}): {scenario.summary}")
    record.ended(exercise.id, GAVE_UP)
    revert_scenarios(lab, catalogue, [fault.scenario for fault in exercise.faults])
    out(f"reverted; exercise {exercise.id} recorded as given up. `invoke scenario.show NAME` "
        "shows the runbook")  # fmt: skip


# --- the record -------------------------------------------------------------------------------


def _clock(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes}:{rest:02d}"


def _grade_text(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def history(record: Record, who: str) -> str:
    """The learner's exercises as a table, then each area's grades over time with a trend."""
    exercises = record.of(who)
    if not exercises:
        return f"no exercise recorded for {who} yet: `invoke practice.start`"
    header = ("#", "started (UTC)", "faults", "outcome", "diagnose", "fix", "hints", "grade")
    rows = [header]
    for e in exercises:
        hidden = e.outcome in UNFINISHED
        names = ", ".join(HIDDEN if hidden else f.scenario for f in e.faults)
        fix = seconds_between(e.started_at, e.ended_at) if e.outcome == FIXED else None
        rows.append((
            str(e.id), e.started_at[:16].replace("T", " "), names, e.outcome,
            _clock(seconds_between(e.started_at, e.answered_at)), _clock(fix), str(e.hints),
            "/".join(_grade_text(f.grade) for f in e.faults),
        ))  # fmt: skip
    lines = [f"practice record of {who}:", *(f"  {line}" for line in columns(rows))]
    lines += ["", "per area (grades oldest to newest; 1 right, 0.5 right layer, 0 wrong or none):"]
    for area, grades in sorted(_area_grades(exercises).items(), key=lambda i: AREAS.index(i[0])):
        trend = (
            "steady" if grades[-1] == grades[0] else "better" if grades[-1] > grades[0] else "worse"
        )
        lines.append(f"  {area:<9} {' '.join(map(_grade_text, grades))}  ({trend})")
    return "\n".join(lines)
