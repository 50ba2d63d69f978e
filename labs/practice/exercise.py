"""Blind exercises: pick faults, inject them unnamed, check a learner's fix, grade an answer.

Everything here stands on the scenario contract (baseline, recovery checks, `detect`,
`diagnose`, the doctor's finding id and the area), handed in as a catalogue by the tasks, so
it works on any backend. Until the reveal (an answer, giving up, or the fixed lab) no text
this module prints names a fault: `_Hider` replaces the names in whatever a check or a
debugging step says.
"""

from __future__ import annotations

import getpass
import json
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import mean

from labs.errors import LabError
from labs.lab import Lab
from labs.practice.grading import GRADE_WORDS, RIGHT, choices, judge, read, understood
from labs.practice.history import HIDDEN, area_grades, clock
from labs.practice.record import (
    ABANDONED,
    FIXED,
    GAVE_UP,
    OPEN,
    STARTING,
    UNFINISHED,
    Exercise,
    Record,
    seconds_between,
)
from labs.run.contract import AREAS, CheckResult, Scenario
from labs.run.engine import (
    check_hand_fix,
    debugging_path,
    describe_scenario,
    fixed_by_hand,
    inject_blind,
    revert_scenarios,
)
from labs.state import LabPaths, utc_now

Out = Callable[[str], None]
Confirm = Callable[[str], bool]
# Scenarios of the learner's last exercises that a new pick avoids while others remain.
RECENT_EXERCISES = 3


class PracticeError(LabError):
    """A practice command cannot go on; the message says what to do instead."""


# --- picking ----------------------------------------------------------------------------------


def can_coexist(first: Scenario, second: Scenario) -> bool:
    """Two faults can be in together when one takes a node's GPU away (it acts through its own
    pinned probe) and the other is a wrong pod spec (it replaces the lab's probe): each one's
    symptoms, recovery checks and fix then stay its own."""
    return first.area == "node" and second.area == "workload"


def _ranked(
    pool: Sequence[Scenario], history: Sequence[Exercise], rng: random.Random
) -> list[Scenario]:
    """Not seen in the last exercises first, then the worst-scored (or untried) area, then the
    one seen longest ago; the seed breaks ties."""
    scores = {area: mean(g.grade for g in graded) for area, graded in area_grades(history).items()}
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
    rehearsal: bool = True,
) -> list[Scenario]:
    """The faults of a new exercise: the ones named, or one (or two that can coexist) picked
    (only among the faults the lab can hold: `rehearsal` False leaves out rehearsal-only ones)."""
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
    pool = [
        s
        for s in catalogue.values()
        if (area is None or s.area == area) and (rehearsal or not s.needs.rehearsal_only)
    ]
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


def learner(who: str | None = None) -> str:
    """Whose exercise a practice command acts on: --who, or the user's login name."""
    return who or getpass.getuser()


def _flags(lab: str, who: str) -> str:
    """What a printed follow-up command needs to run as printed: the lab, and the learner when
    the one typing it would not be taken for them."""
    return f"--lab {lab}" + ("" if who == learner() else f" --who {who}")


def exercise_lab(record: Record, who: str) -> str | None:
    """The lab a practice command without --lab means: the one where an exercise is going or
    waits for its answer (the learner's own first); None when there is none. Two such labs
    for one learner (or none of theirs among several) ask which."""
    waiting = record.waiting()
    labs = list(dict.fromkeys(e.lab for e in waiting if e.who == who)) or list(
        dict.fromkeys(e.lab for e in waiting)
    )
    if len(labs) > 1:
        going_on = ", ".join(f"{e.lab} ({e.who}'s exercise {e.id})" for e in waiting)
        raise PracticeError(f"exercises are going on more than one lab: {going_on}; pass --lab")
    return labs[0] if labs else None


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
            f"`invoke practice.giveup {_flags(lab.name, exercise.who)}` reverts it"
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
        mine = going.who == who
        raise PracticeError(
            f"exercise {going.id} is still going on lab {lab.name}: "
            + (
                f"yours; `invoke practice.check --lab {lab.name}` checks your fix, `invoke "
                f"practice.giveup --lab {lab.name}` ends it"
                if mine
                else f"{going.who}'s, started {going.started_at[:16].replace('T', ' ')} UTC. "
                "One exercise at a time per lab: wait until it ends, or practise on a lab of "
                "your own (`invoke lab.up --sim --lab NAME`)"
            )
        )
    chosen = chosen_by(record.of(who))
    exercise = record.begin(who, lab.name, [(s.name, s.area) for s in chosen])
    out(f"exercise {exercise} for {who} on lab {lab.name}: injecting {len(chosen)} fault(s) ...")
    try:
        baselines = inject_blind(lab, chosen, speed, confirm, progress=out)
    except BaseException:
        record.discard(exercise)
        raise
    record.opened(exercise, baselines)
    flag = _flags(lab.name, who)
    out(
        f"{len(chosen)} fault(s) in the lab; the clock runs. Debug with kubectl and the aws CLI "
        f'(eval "$(invoke lab.env --lab {lab.name})"). `invoke practice.hint {flag}` gives the '
        f"next step (counted), `invoke practice.check {flag}` checks your fix, `invoke "
        f'practice.answer "<cause>" {flag}` says what it was, `invoke practice.giveup {flag}` '
        "shows it and reverts."
    )
    return exercise


def _owned(exercise: Exercise, who: str, action: str) -> None:
    """An exercise's hints, answer and give-up are its learner's: a shared lab's other learners
    are refused, with whose it is."""
    if exercise.who != who:
        raise PracticeError(
            f"exercise {exercise.id} on lab {exercise.lab} is {exercise.who}'s, not {who}'s: "
            f"only {exercise.who} can {action} (if that is you, pass --who {exercise.who}); "
            f"`invoke practice.check --lab {exercise.lab}` may be run by anyone"
        )


WITHHELD = "withheld while the cause is in: it would name it"


def _show_results(
    results: Sequence[CheckResult], hide: _Hider, out: Out, withheld: Sequence[str] = ()
) -> None:
    """Each check's result and evidence; `withheld` names checks whose evidence is not shown."""
    for result in results:
        mark = "passed" if result.held else "FAILED"
        seen = WITHHELD if result.name in withheld else result.seen
        out(hide(f"    {mark}: {result.name}"))
        out(hide(f"            {'saw' if result.held else 'last seen'}: {seen}"))


def check(lab: Lab, catalogue: Mapping[str, Scenario], wait: float = 0.0, out: Out = print) -> bool:
    """Check each fault's fix on the lab as the learner left it: the learner's part read at once
    (or watched for `wait` real-cluster seconds), then the tool's own part; True when every
    fault is fixed at its cause (then the exercise ends and the journal is cleared)."""
    exercise = going(lab)
    hide = _hider(exercise)
    fixed = 0
    for number, fault in enumerate(exercise.faults, 1):
        scenario = _known(catalogue, fault.scenario)
        found = check_hand_fix(lab, scenario, fault.baseline or {}, wait)
        out(f"fault {number} of {len(exercise.faults)}:")
        out("  your part:")
        naming = [c.name for c in scenario.recovery if c.names_cause] if found.cause_in else []
        _show_results(found.learner, hide, out, naming)
        failed = [r for r in found.learner if not r.held]
        if failed:
            out(f"  not yet: {len(failed)} check(s) of your part failed")
            if wait <= 0:
                out(f"  a fix still settling? `invoke practice.check --wait 120 --lab {lab.name}` "
                    "watches it for up to 120 real-cluster seconds")  # fmt: skip
            continue
        if found.cause_in:
            out("  a workaround: the symptoms are gone, but the cause is still in the lab")
            continue
        out("  the tool's part (its own probes and pods, set back and run again):")
        _show_results(found.tool, hide, out)
        if found.fixed:
            out("  recovered, and the cause is gone: the right fix")
            fixed += 1
        else:
            out("  your part holds, but the lab's own probes did not run as before: see FAILED")
    if fixed < len(exercise.faults):
        return False
    Record(lab.settings.state_dir).ended(exercise.id, FIXED)
    fixed_by_hand(lab, [fault.scenario for fault in exercise.faults])
    took = clock(seconds_between(exercise.started_at, utc_now()))
    out(f"the lab is recovered: fixed in {took}, {exercise.hints} hint(s)")
    if exercise.answer is None:
        flags = _flags(lab.name, exercise.who)
        out(f'say what it was: `invoke practice.answer "<cause>" {flags}`')
    return True


def hint(lab: Lab, catalogue: Mapping[str, Scenario], who: str) -> str:
    """The next step of the debugging path (what to look at), counted; never the cause."""
    exercise = going(lab)
    _owned(exercise, who, "take its hints")
    hide = _hider(exercise)
    steps = [
        finding
        for fault in exercise.faults
        for finding in debugging_path(lab, _known(catalogue, fault.scenario))
    ]
    taken = Record(lab.settings.state_dir).hint_taken(exercise.id)
    if taken > len(steps):
        flags = _flags(lab.name, who)
        return (
            f'hint {taken}: that was the whole path; `invoke practice.answer "<cause>" {flags}`, '
            f"or `invoke practice.giveup {flags}`"
        )
    step = steps[taken - 1]
    return hide(f"hint {taken} of {len(steps)}: {step.step}\n  look: {step.look}")


def doctor_ran(state_dir: Path, lab_name: str | None = None, server: str | None = None) -> None:
    """`lab.doctor` during an exercise counts as a hint: on the lab by name, or through any
    kubeconfig whose API server is the lab's (its own, the read-only viewer's, a copy)."""
    record = Record(state_dir)
    for exercise in record.waiting():
        on_it = exercise.lab == lab_name or (
            server is not None and server.rstrip("/") in _api_servers(state_dir, exercise.lab)
        )
        if on_it and exercise.outcome in UNFINISHED:
            record.hint_taken(exercise.id)


def _api_servers(state_dir: Path, lab_name: str) -> set[str]:
    """The URLs a kubeconfig of the lab names as its server, from the lab's record."""
    try:  # only read: a damaged record is the lab's own commands' to report
        recorded = json.loads(LabPaths.for_lab(state_dir, lab_name).state_file.read_text())
    except (OSError, ValueError):
        return set()
    found = [(recorded.get("outputs") or {}).get("cluster_endpoint"), recorded.get("sim_kube_url")]
    return {str(url).rstrip("/") for url in found if url}


def _awaiting(record: Record, lab: Lab) -> Exercise:
    """The exercise on the lab that waits for its answer (going, or fixed and not answered)."""
    exercise = record.latest(lab.name)
    if exercise is None or exercise.answer is not None or exercise.outcome not in (OPEN, FIXED):
        raise PracticeError(
            f"no exercise on lab {lab.name} waits for an answer: start one with "
            f"`invoke practice.start --lab {lab.name}`"
        )
    return exercise


def list_choices(lab: Lab, catalogue: Mapping[str, Scenario], who: str, out: Out = print) -> None:
    """Every cause of the catalogue in plain words, numbered in this exercise's own order;
    grades nothing (the answer is then a number)."""
    exercise = _awaiting(Record(lab.settings.state_dir), lab)
    _owned(exercise, who, "list its choices")
    out(f"the causes, in the order of exercise {exercise.id} (answer with a number: "
        f"`invoke practice.answer N {_flags(lab.name, who)}`):")  # fmt: skip
    for number, scenario in enumerate(choices(catalogue, exercise.id), 1):
        out(f"  {number:>2}. {scenario.cause.plain}")


def _chosen(text: str, catalogue: Mapping[str, Scenario], exercise: Exercise) -> str:
    """A number from the exercise's choices as the name of its cause; any other text as is."""
    if not text.strip().isdigit():
        return text
    order = choices(catalogue, exercise.id)
    number = int(text)
    if not 1 <= number <= len(order):
        raise PracticeError(
            f"there is no choice {number}: the choices are 1 to {len(order)}; `invoke "
            f"practice.choices {_flags(exercise.lab, exercise.who)}` lists them"
        )
    return order[number - 1].name


def answer(
    lab: Lab, catalogue: Mapping[str, Scenario], text: str, who: str, out: Out = print
) -> None:
    """Grade the learner's answer (free text, an id, or a number `list_choices` gave) against each
    fault's cause by what it means; a grade that is not right says what was understood and
    what the cause was. Then each runbook."""
    record = Record(lab.settings.state_dir)
    exercise = _awaiting(record, lab)
    _owned(exercise, who, "answer it")
    if not text.strip():
        raise PracticeError(
            f'say what you think the cause is: `invoke practice.answer "<cause>" --lab '
            f"{lab.name}`, or list the causes with `invoke practice.choices --lab {lab.name}` "
            "and answer with a number"
        )
    reading = read(_chosen(text, catalogue, exercise), catalogue)
    scenarios = [_known(catalogue, fault.scenario) for fault in exercise.faults]
    grades = [judge(reading, scenario, catalogue) for scenario in scenarios]
    record.answered(exercise.id, text, grades)
    took = clock(seconds_between(exercise.started_at, utc_now()))
    out(f"answered after {took}, {exercise.hints} hint(s)")
    for number, (scenario, mark) in enumerate(zip(scenarios, grades, strict=True), 1):
        cause = scenario.doctor_finding or scenario.name
        out(f"fault {number}: {GRADE_WORDS[mark]}: it is {scenario.name} (cause {cause}, "
            f"area {scenario.area})")  # fmt: skip
        if mark != RIGHT:
            out(f"  {understood(reading, catalogue)}")
            out(f"  the cause: {scenario.cause.plain}")
    if any(mark != RIGHT for mark in grades):
        out(f"graded unfairly? `invoke practice.dispute {_flags(lab.name, who)}` (once) leaves "
            "this grade out of your per-area means")  # fmt: skip
    for scenario in scenarios:
        out("")
        out(describe_scenario(scenario))


def dispute(lab: Lab, who: str, out: Out = print) -> None:
    """The learner disputes the grade of the latest answered exercise on the lab, once: it is
    kept as disputed, not as a zero, and counts in no per-area mean."""
    record = Record(lab.settings.state_dir)
    exercise = record.latest_answered(lab.name)
    if exercise is None:
        raise PracticeError(
            f"no answered exercise on lab {lab.name} to dispute: a grade can be disputed once "
            f'`invoke practice.answer "<cause>" --lab {lab.name}` gave it'
        )
    _owned(exercise, who, "dispute its grade")
    given = "/".join(f"{fault.grade:g}" for fault in exercise.faults if fault.grade is not None)
    if any(fault.disputed for fault in exercise.faults):
        raise PracticeError(
            f"the grade of exercise {exercise.id} ({given}) is disputed already; a grade is "
            "disputed once (`invoke practice.history` shows it as disputed)"
        )
    if all(fault.grade == RIGHT for fault in exercise.faults):
        raise PracticeError(f"exercise {exercise.id} was graded right: nothing to dispute")
    record.dispute(exercise.id)
    out(f"the grade of exercise {exercise.id} ({given}) is recorded as disputed: it counts in no "
        "per-area mean, and `invoke practice.history` shows it as disputed")  # fmt: skip


def giveup(lab: Lab, catalogue: Mapping[str, Scenario], who: str, out: Out = print) -> None:
    """Reveal the faults, revert them and record the exercise as given up."""
    record = Record(lab.settings.state_dir)
    exercise = record.unfinished(lab.name)
    if exercise is None:
        raise PracticeError(f"no exercise is going on lab {lab.name}; nothing to give up")
    _owned(exercise, who, "give it up")
    for fault in exercise.faults:
        scenario = _known(catalogue, fault.scenario)
        out(f"it was {scenario.name} (area {scenario.area}): {scenario.summary}")
    record.ended(exercise.id, GAVE_UP)
    revert_scenarios(lab, catalogue, [fault.scenario for fault in exercise.faults])
    out(f"reverted; exercise {exercise.id} recorded as given up. `invoke scenario.show NAME` "
        "shows the runbook")  # fmt: skip
