"""`practice.history` as a study group reads it: one learner's table, everyone side by side, the
--lab filter, disputed grades, and the PNG of per-area grades by week. No lab: a record only."""

from __future__ import annotations

import re
import sqlite3
from contextlib import closing
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from lab_support import invoke_env, run_invoke

from labs.practice.history import PNG_NAME, group, history, plot_trends
from labs.practice.record import ABANDONED, FIXED, GAVE_UP, Record
from labs.state import StateWriteError

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
OTHER_LAB = "other"
# Mondays of ISO weeks 10, 11 and 12 of 2024.
WEEK_10, WEEK_11, WEEK_12 = "2024-03-04", "2024-03-11", "2024-03-18"
# The area of each scenario practised here (the record keeps it; no catalogue is read).
AREA_OF = {
    "gpu-node-foreign-taint": "node",
    "device-plugin-off-one-node": "node",
    "operator-down": "operator",
    "device-plugin-off": "operator",
    "missing-toleration": "workload",
    "nccl-sg-block": "network",
}


def exercise(
    record: Record,
    who: str,
    day: str,
    name: str,
    grade: float | None,
    *,
    outcome: str = FIXED,
    diagnose: int | None = None,
    fix: int | None = None,
    hints: int = 0,
    lab: str = "myeks",
    disputed: bool = False,
) -> None:
    """One exercise of `name` started on `day` at 10:00 UTC, answered `diagnose` seconds and
    ended `fix` seconds later. The record stamps everything now, so the past weeks' stamps (and
    the disputed flag, which no command of this test sets) are written into the file by hand."""
    number = record.begin(who, lab, [(name, AREA_OF[name])])
    record.opened(number, [{}])
    for _ in range(hints):
        record.hint_taken(number)
    if grade is not None:
        record.answered(number, name, [grade])
    record.ended(number, outcome)
    start = datetime.fromisoformat(f"{day}T10:00:00+00:00")

    def stamp(seconds: int | None) -> str | None:
        if seconds is None:
            return None
        return (start + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")

    with closing(sqlite3.connect(record.path)) as db, db:
        db.execute(
            "UPDATE exercises SET started_at = ?, answered_at = ?, ended_at = ? WHERE id = ?",
            (stamp(0), stamp(diagnose), stamp(fix if fix is not None else 600), number),
        )
        db.execute("UPDATE faults SET disputed = ? WHERE exercise = ?", (int(disputed), number))


@pytest.fixture
def record(tmp_path: Path) -> Record:
    """ann over three weeks (one grade disputed, one exercise on another lab), bob over two
    (one abandoned without an answer), cy with one exercise still going."""
    made = Record(tmp_path)
    exercise(made, "ann", WEEK_10, "gpu-node-foreign-taint", 0.0, diagnose=120, fix=300, hints=2)
    exercise(made, "ann", WEEK_11, "device-plugin-off-one-node", 1.0, diagnose=60, fix=200)
    exercise(made, "ann", WEEK_11, "gpu-node-foreign-taint", 0.5, diagnose=90, fix=250)
    exercise(made, "ann", WEEK_12, "operator-down", 0.5, outcome=GAVE_UP, diagnose=240, hints=1,
             lab=OTHER_LAB)  # fmt: skip
    exercise(made, "ann", WEEK_12, "missing-toleration", 0.0, diagnose=100, fix=400, hints=1,
             disputed=True)  # fmt: skip
    exercise(made, "bob", WEEK_11, "nccl-sg-block", 1.0, diagnose=30, fix=90)
    exercise(made, "bob", WEEK_12, "device-plugin-off", None, outcome=ABANDONED, hints=3)
    going = made.begin("cy", "myeks", [("runtimeclass-missing", "workload")])
    made.opened(going, [{}])
    return made


def table(text: str) -> dict[str, list[str]]:
    """The side-by-side table as a person reads it: each row's cells by the row's name (cells
    are two or more spaces apart); the learners are the row named ""."""
    lines = [line.strip() for line in text.splitlines() if line.startswith("  ")]
    header, *rows = [re.split(r" {2,}", line) for line in lines]
    return {"": header} | {row[0]: row[1:] for row in rows}


def test_the_group_side_by_side_with_median_times_mean_hints_and_grades_per_area(
    record: Record, tmp_path: Path
):
    png = tmp_path / "group.png"
    text = group(record, png)
    assert text.startswith("practice records of 3 learner(s):"), text
    rows = table(text)
    assert rows[""] == ["ann", "bob", "cy"]
    assert rows["exercises"] == ["5", "2", "1"]
    # ann answered after 2:00, 1:00, 1:30, 4:00, 1:40; fixed after 5:00, 3:20, 4:10, 6:40
    assert rows["diagnose (median)"] == ["1:40", "0:30", "-"]
    assert rows["fix (median)"] == ["4:35", "1:30", "-"]
    assert rows["hints per exercise"] == ["0.8", "1.5", "0"]
    assert rows["node"] == ["0.5 (3)", "-", "-"]
    assert rows["operator"] == ["0.5 (1)", "0 (1)", "-"]  # bob's abandoned exercise: no answer
    assert rows["network"] == ["-", "1 (1)", "-"]
    assert rows["workload"] == ["- (1 disputed)", "-", "-"]  # cy's going exercise waits
    assert rows["capacity"] == ["-", "-", "-"]
    assert "runtimeclass-missing" not in text
    assert text.endswith(f"per-area grades by week of ann, bob: {png}"), text


def test_the_png_draws_each_learners_weekly_grade_per_area_and_leaves_disputed_out(
    record: Record, tmp_path: Path
):
    png = tmp_path / "trend.png"
    learners = {who: record.of(who) for who in record.learners()}
    drawn = plot_trends(learners, png, "the group")
    assert png.read_bytes().startswith(PNG_SIGNATURE) and png.stat().st_size > 10_000
    assert drawn == {
        "ann": {
            "operator": [("2024-W12", 0.5)],
            "node": [("2024-W10", 0.0), ("2024-W11", 0.75)],  # week 11: 1 and 0.5
        },
        "bob": {"operator": [("2024-W12", 0.0)], "network": [("2024-W11", 1.0)]},
    }  # ann's only workload grade is disputed; cy has no grade yet
    nothing = tmp_path / "nothing.png"
    assert plot_trends({"cy": record.of("cy")}, nothing, "cy") == {}
    assert not nothing.exists()


def test_one_learner_shows_disputed_in_the_table_and_leaves_it_out_of_the_trend(
    record: Record, tmp_path: Path
):
    png = tmp_path / "ann.png"
    text = history(record, "ann", png=png)
    rows = [line.split() for line in text.splitlines() if line.startswith("  ")]
    [disputed] = [row for row in rows if "missing-toleration" in row]
    assert disputed[4] == "fixed" and disputed[-1] == "disputed"
    assert "  node      0 1 0.5  (better)" in text
    assert "  operator  0.5  (steady)" in text
    assert "  workload " not in text
    assert "disputed left out" in text
    assert text.endswith(f"per-area grades by week of ann: {png}") and png.exists()


def test_lab_narrows_one_learner_and_the_group_to_that_labs_exercises(
    record: Record, tmp_path: Path
):
    mine = history(record, "ann", lab="myeks")
    assert mine.startswith("practice record of ann on lab myeks:")
    assert "operator-down" not in mine and "  operator " not in mine
    assert "gpu-node-foreign-taint" in mine
    other = group(record, tmp_path / "other.png", lab=OTHER_LAB)
    rows = table(other)
    assert other.startswith(f"practice records of 1 learner(s) on lab {OTHER_LAB}:")
    assert rows[""] == ["ann"] and rows["exercises"] == ["1"]
    assert rows["operator"] == ["0.5 (1)"] and rows["node"] == ["-"]
    assert history(record, "bob", lab=OTHER_LAB) == (
        f"no exercise recorded for bob on lab {OTHER_LAB} yet: `invoke practice.start`"
    )
    assert group(record, tmp_path / "none.png", lab="nosuch") == (
        "no exercise recorded on lab nosuch yet: `invoke practice.start`"
    )
    assert not (tmp_path / "none.png").exists()


@pytest.mark.parametrize("where", ["missing directory", "file as directory"])
def test_a_png_that_cannot_be_written_is_named_with_the_reason(
    record: Record, tmp_path: Path, where: str
):
    directory = tmp_path / "plots"
    if where == "file as directory":
        directory.write_text("a file")
    png = directory / "group.png"
    with pytest.raises(StateWriteError, match=rf"could not write the plot {png}: \w+"):
        group(record, png)
    assert not png.exists() and not (where == "missing directory" and directory.exists())


def test_a_record_from_before_disputes_gets_the_column(tmp_path: Path):
    with closing(sqlite3.connect(tmp_path / "practice.sqlite")) as db, db:
        db.executescript(
            "CREATE TABLE faults (exercise INTEGER NOT NULL, position INTEGER NOT NULL, "
            "scenario TEXT NOT NULL, area TEXT NOT NULL, baseline TEXT, grade REAL, "
            "PRIMARY KEY (exercise, position));"
        )
    record = Record(tmp_path)
    exercise(record, "ann", WEEK_10, "operator-down", 1.0, diagnose=60)
    [fault] = record.of("ann")[0].faults
    assert fault.grade == 1.0 and fault.disputed is False
    assert record.learners() == ["ann"]


def test_the_cli_shows_the_group_and_writes_the_png_where_it_says(record: Record, tmp_path: Path):
    env = invoke_env(tmp_path)
    shown = run_invoke("practice.history", "--all", env=env)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert table(shown.stdout)["exercises"] == ["5", "2", "1"]
    png = tmp_path / PNG_NAME
    assert shown.stdout.rstrip().endswith(f": {png}") and png.read_bytes()[:8] == PNG_SIGNATURE
    narrowed = run_invoke("practice.history", "--all", "--lab", OTHER_LAB, "--png",
                          str(tmp_path / "other.png"), env=env)  # fmt: skip
    assert narrowed.returncode == 0 and table(narrowed.stdout)[""] == ["ann"], narrowed.stderr
    assert (tmp_path / "other.png").read_bytes()[:8] == PNG_SIGNATURE
    lost = tmp_path / "missing" / "x.png"
    failed = run_invoke("practice.history", "--all", "--png", str(lost), env=env)
    assert failed.returncode == 1 and failed.stderr.startswith(
        f"error: could not write the plot {lost}: No such file or directory"
    ), failed.stderr
    both = run_invoke("practice.history", "--all", "--who", "ann", env=env)
    assert both.returncode == 1 and "--all shows every learner; drop --who" in both.stderr
    assert "every learner side by side" in run_invoke("--help", "practice.history", env=env).stdout
