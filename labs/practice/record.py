"""Each learner's practice record: one SQLite file in the state directory (stdlib sqlite3).

An exercise row is written before anything is injected and finished when the lab is
recovered, the learner gives up, or its faults were reverted some other way (abandoned), so
a killed command never leaves a record that claims more than happened. One row per fault
holds what it was, its baseline (for `practice.check` in a later command), the answer's
grade for it and whether that grade is disputed (then it counts in no mean).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from labs.errors import LabError
from labs.state import utc_now

FILE_NAME = "practice.sqlite"
STARTING, OPEN, FIXED, GAVE_UP, ABANDONED = "starting", "open", "fixed", "gave up", "abandoned"
UNFINISHED = (STARTING, OPEN)
ENDED = (FIXED, GAVE_UP, ABANDONED)
TUPLE = "__tuple__"
# The exercises table's columns, in the order `Exercise` takes them.
COLUMNS = (
    "id",
    "who",
    "lab",
    "started_at",
    "outcome",
    "hints",
    "answer",
    "answered_at",
    "ended_at",
)
SCHEMA = """
CREATE TABLE IF NOT EXISTS exercises (
    id INTEGER PRIMARY KEY,
    who TEXT NOT NULL,
    lab TEXT NOT NULL,
    started_at TEXT NOT NULL,
    outcome TEXT NOT NULL,
    hints INTEGER NOT NULL DEFAULT 0,
    answer TEXT,
    answered_at TEXT,
    ended_at TEXT
);
CREATE TABLE IF NOT EXISTS faults (
    exercise INTEGER NOT NULL REFERENCES exercises(id),
    position INTEGER NOT NULL,
    scenario TEXT NOT NULL,
    area TEXT NOT NULL,
    baseline TEXT,
    grade REAL,
    disputed INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (exercise, position)
);
"""


class RecordError(LabError):
    """The practice record cannot be read or written; the message names the file."""


@dataclass(frozen=True)
class Fault:
    """One fault of an exercise: which scenario, its area, baseline and grade (None: none yet);
    a disputed grade is no zero: it is left out of every mean."""

    scenario: str
    area: str
    baseline: dict[str, Any] | None
    grade: float | None
    disputed: bool = False


@dataclass(frozen=True)
class Exercise:
    """One exercise as recorded."""

    id: int
    who: str
    lab: str
    started_at: str
    outcome: str
    hints: int
    answer: str | None
    answered_at: str | None
    ended_at: str | None
    faults: tuple[Fault, ...]


def _tagged(value: Any) -> Any:
    """`value` for JSON with its tuples kept apart from its lists: a baseline's checks compare
    tuples (DaemonSet counts), and a tuple never equals the list JSON would give back."""
    if isinstance(value, tuple):
        return {TUPLE: [_tagged(item) for item in value]}
    if isinstance(value, list):
        return [_tagged(item) for item in value]
    if isinstance(value, dict):
        return {key: _tagged(item) for key, item in value.items()}
    return value


def _untagged(value: Any) -> Any:
    """The value `_tagged` wrote, tuples again."""
    if isinstance(value, dict):
        if list(value) == [TUPLE]:
            return tuple(_untagged(item) for item in value[TUPLE])
        return {key: _untagged(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_untagged(item) for item in value]
    return value


def seconds_between(start: str, end: str | None) -> float | None:
    """Seconds from one recorded UTC stamp to another (None when the second is missing)."""
    if end is None:
        return None
    return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()


def _add_disputed(db: sqlite3.Connection) -> None:
    """A record written before grades could be disputed gets the column, every grade undisputed
    (CREATE TABLE IF NOT EXISTS leaves an older table as it was)."""
    names = {row[1] for row in db.execute("PRAGMA table_info(faults)")}
    if "disputed" not in names:
        db.execute("ALTER TABLE faults ADD COLUMN disputed INTEGER NOT NULL DEFAULT 0")


class Record:
    """The practice record of every learner under one state directory."""

    def __init__(self, state_dir: Path) -> None:
        self.path = Path(state_dir) / FILE_NAME

    @contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        """One transaction: committed on success, rolled back on any error."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with closing(sqlite3.connect(self.path, timeout=30)) as db, db:
                db.executescript(SCHEMA)
                _add_disputed(db)
                yield db
        except sqlite3.Error as error:
            raise RecordError(
                f"the practice record {self.path} cannot be used ({error}); move it aside to "
                "start a fresh one"
            ) from error

    def begin(self, who: str, lab: str, faults: list[tuple[str, str]]) -> int:
        """Record an exercise about to be injected (scenario, area per fault); returns its id."""
        with self._db() as db:
            cursor = db.execute(
                "INSERT INTO exercises (who, lab, started_at, outcome) VALUES (?, ?, ?, ?)",
                (who, lab, utc_now(), STARTING),
            )
            exercise = int(cursor.lastrowid or 0)
            db.executemany(
                "INSERT INTO faults (exercise, position, scenario, area) VALUES (?, ?, ?, ?)",
                [(exercise, n, name, area) for n, (name, area) in enumerate(faults)],
            )
        return exercise

    def opened(self, exercise: int, baselines: list[dict[str, Any]]) -> None:
        """The faults are in: keep their baselines and start the clock from now."""
        with self._db() as db:
            db.executemany(
                "UPDATE faults SET baseline = ? WHERE exercise = ? AND position = ?",
                [(json.dumps(_tagged(b)), exercise, n) for n, b in enumerate(baselines)],
            )
            db.execute(
                "UPDATE exercises SET outcome = ?, started_at = ? WHERE id = ?",
                (OPEN, utc_now(), exercise),
            )

    def discard(self, exercise: int) -> None:
        """Forget an exercise whose faults never went in (the start failed and reverted)."""
        with self._db() as db:
            db.execute("DELETE FROM faults WHERE exercise = ?", (exercise,))
            db.execute("DELETE FROM exercises WHERE id = ?", (exercise,))

    def hint_taken(self, exercise: int) -> int:
        """Count one more hint; returns how many were taken."""
        with self._db() as db:
            db.execute("UPDATE exercises SET hints = hints + 1 WHERE id = ?", (exercise,))
            row = db.execute("SELECT hints FROM exercises WHERE id = ?", (exercise,)).fetchone()
        return int(row[0])

    def answered(self, exercise: int, answer: str, grades: list[float]) -> None:
        """The learner's answer, the time it was given, and each fault's grade."""
        with self._db() as db:
            db.execute(
                "UPDATE exercises SET answer = ?, answered_at = ? WHERE id = ?",
                (answer, utc_now(), exercise),
            )
            db.executemany(
                "UPDATE faults SET grade = ? WHERE exercise = ? AND position = ?",
                [(grade, exercise, n) for n, grade in enumerate(grades)],
            )

    def ended(self, exercise: int, outcome: str) -> None:
        """Finish an unfinished exercise with `outcome` (fixed, gave up, abandoned)."""
        with self._db() as db:
            db.execute(
                f"UPDATE exercises SET outcome = ?, ended_at = ? WHERE id = ? "
                f"AND outcome IN {UNFINISHED}",
                (outcome, utc_now(), exercise),
            )

    def unfinished(self, lab: str) -> Exercise | None:
        """The exercise still going on `lab`, if any."""
        found = self._exercises(f"lab = ? AND outcome IN {UNFINISHED}", (lab,))
        return found[-1] if found else None

    def waiting(self) -> list[Exercise]:
        """Each lab's newest exercise when it is still going, or recovered and waiting for its
        answer (what `practice.answer` grades), oldest first."""
        return self._exercises(
            f"id IN (SELECT MAX(id) FROM exercises GROUP BY lab) AND (outcome IN {UNFINISHED} "
            "OR (outcome = ? AND answer IS NULL))",
            (FIXED,),
        )

    def latest(self, lab: str) -> Exercise | None:
        """The newest exercise on `lab`, going or not."""
        found = self._exercises("lab = ?", (lab,))
        return found[-1] if found else None

    def latest_answered(self, lab: str) -> Exercise | None:
        """The newest exercise on `lab` with an answer: the grade a dispute is about."""
        found = self._exercises("lab = ? AND answer IS NOT NULL", (lab,))
        return found[-1] if found else None

    def dispute(self, exercise: int) -> None:
        """The learner disputes the grade of every fault of `exercise`: kept as given, it then
        counts in no mean."""
        with self._db() as db:
            db.execute("UPDATE faults SET disputed = 1 WHERE exercise = ?", (exercise,))

    def of(self, who: str) -> list[Exercise]:
        """Every exercise of `who`, oldest first."""
        return self._exercises("who = ?", (who,))

    def learners(self) -> list[str]:
        """Everyone with an exercise recorded, by name (none when nothing is recorded)."""
        if not self.path.exists():  # nothing recorded yet: reading creates no file
            return []
        with self._db() as db:
            rows = db.execute("SELECT DISTINCT who FROM exercises ORDER BY who").fetchall()
        return [str(row[0]) for row in rows]

    def _exercises(self, where: str, args: tuple[Any, ...]) -> list[Exercise]:
        if not self.path.exists():  # nothing recorded yet: reading creates no file
            return []
        with self._db() as db:
            rows = db.execute(
                f"SELECT {', '.join(COLUMNS)} FROM exercises WHERE {where} ORDER BY id", args
            ).fetchall()
            faults = {row[0]: self._faults(db, row[0]) for row in rows}
        return [
            Exercise(**dict(zip(COLUMNS, row, strict=True)), faults=faults[row[0]]) for row in rows
        ]

    @staticmethod
    def _faults(db: sqlite3.Connection, exercise: int) -> tuple[Fault, ...]:
        rows = db.execute(
            "SELECT scenario, area, baseline, grade, disputed FROM faults WHERE exercise = ? "
            "ORDER BY position",
            (exercise,),
        ).fetchall()
        return tuple(
            Fault(name, area, _untagged(json.loads(base)) if base else None, grade, bool(disputed))
            for name, area, base, grade, disputed in rows
        )
