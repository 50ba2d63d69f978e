"""The practice record as people read it: one learner's exercises with each area's trend, the
whole study group side by side, and a PNG of each learner's per-area grades by ISO week.

A grade is 1 right, 0.5 the right layer, 0 wrong (or no answer, once the exercise ended); a
disputed grade is no zero: it counts in no mean, trend or plot. The faults of an exercise still
going stay hidden, and its grades wait until it ends.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path
from statistics import mean, median

from labs.console import columns
from labs.practice.record import ENDED, FIXED, UNFINISHED, Exercise, Fault, Record, seconds_between
from labs.run.contract import AREAS
from labs.state import StateWriteError

HIDDEN = "(hidden)"
DISPUTED = "disputed"
NO_ANSWER = 0.0  # an ended exercise without an answer counts as a wrong one
# Where `practice.history --all` draws the group's grades unless --png names another file.
PNG_NAME = "practice-history.png"
GRADES_LEGEND = "1 right, 0.5 right layer, 0 wrong or none; disputed left out"
# Each area's line in every learner's subplot, in the order of AREAS.
AREA_COLOURS: dict[str, str] = dict(
    zip(AREAS, ("tab:purple", "tab:blue", "tab:green", "tab:orange", "tab:red"), strict=True)
)
# Points drawn per learner (the subplot) and area (its line): (ISO week, mean grade that week).
Drawn = dict[str, dict[str, list[tuple[str, float]]]]


@dataclass(frozen=True)
class Graded:
    """One grade that counts: when its exercise started, and the grade."""

    started_at: str
    grade: float


def clock(seconds: float | None) -> str:
    """A span as minutes:seconds, as a learner times an exercise ("-": not there yet)."""
    if seconds is None:
        return "-"
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes}:{rest:02d}"


def grade_text(value: float | None) -> str:
    """A grade as the tables print it ("-": none yet)."""
    return "-" if value is None else f"{value:g}"


def _fault_grade(fault: Fault) -> str:
    return DISPUTED if fault.disputed else grade_text(fault.grade)


def area_grades(exercises: Sequence[Exercise]) -> dict[str, list[Graded]]:
    """Each area's counted grades over the ended exercises, oldest first; the pick ranks areas
    by the same grades this view shows."""
    grades: dict[str, list[Graded]] = {}
    for exercise in exercises:
        if exercise.outcome in ENDED:
            for fault in exercise.faults:
                if not fault.disputed:
                    grade = NO_ANSWER if fault.grade is None else fault.grade
                    grades.setdefault(fault.area, []).append(Graded(exercise.started_at, grade))
    return grades


def _on_lab(lab: str | None) -> str:
    return f" on lab {lab}" if lab else ""


def _on(exercises: Iterable[Exercise], lab: str | None) -> list[Exercise]:
    """The exercises on `lab` (every one when None)."""
    return [e for e in exercises if lab is None or e.lab == lab]


def _in_area_order(grades: Mapping[str, list[Graded]]) -> list[tuple[str, list[Graded]]]:
    return sorted(grades.items(), key=lambda item: AREAS.index(item[0]))


def history(record: Record, who: str, lab: str | None = None, png: Path | None = None) -> str:
    """The learner's exercises as a table, then each area's grades over time with a trend; with
    `png`, also their per-area grades by week drawn to that file."""
    exercises = _on(record.of(who), lab)
    if not exercises:
        return f"no exercise recorded for {who}{_on_lab(lab)} yet: `invoke practice.start`"
    header = ("#", "started (UTC)", "faults", "outcome", "diagnose", "fix", "hints", "grade")
    rows = [header]
    for e in exercises:
        hidden = e.outcome in UNFINISHED
        names = ", ".join(HIDDEN if hidden else f.scenario for f in e.faults)
        fix = seconds_between(e.started_at, e.ended_at) if e.outcome == FIXED else None
        rows.append((
            str(e.id), e.started_at[:16].replace("T", " "), names, e.outcome,
            clock(seconds_between(e.started_at, e.answered_at)), clock(fix), str(e.hints),
            "/".join(map(_fault_grade, e.faults)),
        ))  # fmt: skip
    lines = [f"practice record of {who}{_on_lab(lab)}:", *(f"  {line}" for line in columns(rows))]
    lines += ["", f"per area (grades oldest to newest; {GRADES_LEGEND}):"]
    for area, graded in _in_area_order(area_grades(exercises)):
        grades = [g.grade for g in graded]
        trend = (
            "steady" if grades[-1] == grades[0] else "better" if grades[-1] > grades[0] else "worse"
        )
        lines.append(f"  {area:<9} {' '.join(map(grade_text, grades))}  ({trend})")
    if png is not None:
        lines += ["", _drawn_to(plot_trends({who: exercises}, png, _title(lab)), png)]
    return "\n".join(lines)


def _median_clock(spans: Iterable[float | None]) -> str:
    known = [span for span in spans if span is not None]
    return clock(median(known)) if known else "-"


def _area_cell(graded: list[Graded], disputed: int) -> str:
    """`mean (how many)` of one learner's area, and how many were disputed ("-": none)."""
    counts = [str(len(graded))] if graded else []
    counts += [f"{disputed} {DISPUTED}"] if disputed else []
    if not counts:
        return "-"
    shown = f"{round(mean(g.grade for g in graded), 2):g}" if graded else "-"
    return f"{shown} ({', '.join(counts)})"


def _disputed(exercises: Sequence[Exercise]) -> Counter[str]:
    """How many grades each area had disputed, over the ended exercises."""
    return Counter(f.area for e in exercises if e.outcome in ENDED for f in e.faults if f.disputed)


def group(record: Record, png: Path, lab: str | None = None) -> str:
    """Every learner of the record side by side (times, hints, per-area grades), and each one's
    per-area grades by week drawn to `png`: one command shows the study group where it stands."""
    everyone = {who: _on(record.of(who), lab) for who in record.learners()}
    learners = {who: exercises for who, exercises in everyone.items() if exercises}
    if not learners:
        return f"no exercise recorded{_on_lab(lab)} yet: `invoke practice.start`"
    rows: list[tuple[str, ...]] = [
        ("", *learners),
        ("exercises", *(str(len(e)) for e in learners.values())),
        ("diagnose (median)", *(
            _median_clock(seconds_between(x.started_at, x.answered_at) for x in e)
            for e in learners.values()
        )),
        ("fix (median)", *(
            _median_clock(seconds_between(x.started_at, x.ended_at) for x in e
                          if x.outcome == FIXED)
            for e in learners.values()
        )),
        ("hints per exercise", *(
            f"{round(mean(x.hints for x in e), 1):g}" for e in learners.values()
        )),
    ]  # fmt: skip
    grades = {who: area_grades(e) for who, e in learners.items()}
    disputed = {who: _disputed(e) for who, e in learners.items()}
    rows += [
        (area, *(_area_cell(grades[who].get(area, []), disputed[who][area]) for who in learners))
        for area in AREAS
    ]
    lines = [
        f"practice records of {len(learners)} learner(s){_on_lab(lab)}:",
        *(f"  {line}" for line in columns(rows)),
        "",
        "diagnose: start to answer; fix: start to the fixed lab (medians, minutes:seconds);",
        f"per area: mean grade (how many counted; {GRADES_LEGEND})",
        "",
        _drawn_to(plot_trends(learners, png, _title(lab)), png),
    ]
    return "\n".join(lines)


def _title(lab: str | None) -> str:
    return f"practice grades by week{_on_lab(lab)}"


def _drawn_to(drawn: Drawn, png: Path) -> str:
    if not drawn:
        return "no grade counts yet: no PNG written"
    return f"per-area grades by week of {', '.join(drawn)}: {png}"


def _week(started_at: str) -> date:
    """The Monday of the ISO week an exercise started in: every exercise of a week is one point."""
    year, week, _ = datetime.fromisoformat(started_at).isocalendar()
    return date.fromisocalendar(year, week, 1)


def _week_label(monday: date) -> str:
    year, week, _ = monday.isocalendar()
    return f"{year}-W{week:02d}"


def _weekly(graded: list[Graded]) -> dict[date, float]:
    """The mean counted grade of each week, by its Monday, oldest first."""
    weeks: dict[date, list[float]] = {}
    for g in graded:
        weeks.setdefault(_week(g.started_at), []).append(g.grade)
    return {monday: mean(grades) for monday, grades in sorted(weeks.items())}


def plot_trends(learners: Mapping[str, Sequence[Exercise]], path: Path, title: str) -> Drawn:
    """Write a PNG of each learner's per-area grades by ISO week (a subplot per learner, a line
    per area) to `path`; returns the points drawn, read back from the figure. Nothing to draw
    (no grade counts yet): an empty result and no file.

    StateWriteError names the file when it cannot be written (its directory is missing or
    read-only): a wrong --png is not created in some other place.
    """
    trends = {
        who: {area: _weekly(graded) for area, graded in _in_area_order(area_grades(exercises))}
        for who, exercises in learners.items()
    }
    trends = {who: areas for who, areas in trends.items() if areas}
    if not trends:
        return {}
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    weeks = sorted({monday for areas in trends.values() for w in areas.values() for monday in w})
    figure, axes = plt.subplots(
        len(trends), 1, sharex=True, sharey=True, figsize=(10, 2.2 * len(trends) + 1),
        squeeze=False,
    )  # fmt: skip
    for axis, (who, areas) in zip(axes[:, 0], trends.items(), strict=True):
        for area, weekly in areas.items():
            axis.plot(list(weekly), list(weekly.values()), marker="o", linewidth=2,
                      label=area, color=AREA_COLOURS[area])  # fmt: skip
        axis.set_title(who, loc="left", fontsize=9)
        axis.set_yticks([0.0, 0.5, 1.0], ["0 wrong", "0.5 layer", "1 right"])
        axis.set_ylim(-0.1, 1.1)
        axis.grid(alpha=0.3)
        axis.legend(loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
    axes[-1, 0].set_xticks(weeks, [_week_label(monday) for monday in weeks])
    axes[-1, 0].set_xlabel("ISO week the exercise started (mean grade of the week)")
    figure.suptitle(title, fontsize=11)
    figure.tight_layout()
    drawn: Drawn = {
        axis.get_title(loc="left"): {
            str(line.get_label()): [
                (_week_label(x), float(y))
                for x, y in zip(line.get_xdata(), line.get_ydata(), strict=True)
            ]
            for line in axis.get_lines()
        }
        for axis in axes[:, 0]
    }
    try:
        figure.savefig(path, format="png", dpi=110)
    except OSError as error:  # name the file and the reason, not PIL's traceback
        raise StateWriteError(
            f"could not write the plot {path}: {error.strerror or error}; --png names another "
            "file (its directory must exist and be writable)"
        ) from error
    finally:
        plt.close(figure)
    return drawn
