"""Crash-safe record of the faults injected into a lab.

A fault is written as `injecting` *before* the mutation and as `reverted` only after
the revert succeeded, so whatever happens in between (an exception, Ctrl-C, SIGKILL)
the journal names every fault that may still be in the lab, and `scenario.revert --all`
or `lab.down` can undo it. Read-modify-write cycles hold an exclusive file lock, so a
second process (a learner's `scenario.revert` while a run is going) cannot lose an entry.

A journal that does not parse is moved aside (and the user told so); the fresh one
written in its place remembers the loss (`lost`), so commands look for faults in the
cluster itself until a revert from the cluster's truth has cleared it.
"""

from __future__ import annotations

import fcntl
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from labs.state import DamagedFile, StateWriteError, atomic_write_json, load_json, utc_now

INJECTING = "injecting"
INJECTED = "injected"
KEPT = "kept"
REVERTED = "reverted"
OUTSTANDING_STATES = frozenset({INJECTING, INJECTED, KEPT})
_ENTRY_FIELDS = ("id", "scenario", "state")
# What every surface a learner reads shows in place of a fault injected for practice.
HIDDEN_FAULT = "a hidden practice fault"


def _problem(document: Any) -> str | None:
    """What makes a parsed journal unusable, or None."""
    if not isinstance(document, dict):
        return f"a {type(document).__name__}, not an object with 'entries'"
    entries = document.get("entries")
    if not isinstance(entries, list):
        return "no 'entries' list"
    for number, entry in enumerate(entries, 1):
        if not isinstance(entry, dict) or not all(
            isinstance(entry.get(key), str) for key in _ENTRY_FIELDS
        ):
            return f"entry {number} lacks {', '.join(_ENTRY_FIELDS)}"
        if entry["state"] not in OUTSTANDING_STATES | {REVERTED}:
            return f"entry {number} has the unknown state {entry['state']!r}"
    return None


class Journal:
    """The fault journal of one lab (a JSON file beside a lock file)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _document(self) -> dict[str, Any]:
        try:
            document = load_json(self.path, _problem)
        except DamagedFile as damage:
            lost = {"kept": str(damage.kept or ""), "problem": damage.problem, "at": utc_now()}
            fresh = {"entries": [], "lost": [lost]}
            try:  # remember the loss; if even that fails, a missing journal says as much
                atomic_write_json(self.path, fresh)
            except StateWriteError:
                pass
            return fresh
        return document if document is not None else {"entries": [], "missing": True}

    @contextmanager
    def _locked(self) -> Iterator[dict[str, Any]]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_suffix(".lock"), "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            document = self._document()
            document.pop("missing", None)
            yield document
            atomic_write_json(self.path, document)

    def entries(self) -> list[dict[str, Any]]:
        """Every entry, oldest first."""
        return list(self._document()["entries"])

    def outstanding(self) -> list[dict[str, Any]]:
        """Entries whose fault may still be in the lab (not yet reverted)."""
        return [e for e in self.entries() if e["state"] in OUTSTANDING_STATES]

    def shown(self) -> list[str]:
        """The outstanding faults as a learner may see them: a practice fault stays unnamed."""
        return [HIDDEN_FAULT if e.get("hidden") else e["scenario"] for e in self.outstanding()]

    def hidden_outstanding(self) -> list[str]:
        """The names of the outstanding faults injected for practice (hidden from the learner)."""
        return [e["scenario"] for e in self.outstanding() if e.get("hidden")]

    def incomplete(self) -> str | None:
        """Why the journal may miss an injected fault (missing, or damaged once), else None."""
        document = self._document()
        if document.get("missing"):
            return f"the journal {self.path} is missing"
        if document.get("lost"):
            kept = ", ".join(item["kept"] or "not kept" for item in document["lost"])
            return f"the journal {self.path} was damaged ({kept})"
        return None

    def start(self) -> None:
        """Write an empty journal for a new lab, so a journal missing later stands out."""
        if not self.path.exists():
            atomic_write_json(self.path, {"entries": []})

    def cleared(self) -> None:
        """The cluster was searched and every fault found reverted: the journal is whole again."""
        with self._locked() as document:
            document.pop("lost", None)

    def record_injecting(
        self, scenario: str, run_dir: str | None = None, hidden: bool = False
    ) -> str:
        """Record that `scenario` is about to be injected; returns the entry id. A `hidden`
        fault (practice) is named here only, never on what a learner reads (`shown`)."""
        entry_id = uuid.uuid4().hex[:12]
        with self._locked() as document:
            document["entries"].append(
                {
                    "id": entry_id,
                    "scenario": scenario,
                    "state": INJECTING,
                    "pid": os.getpid(),
                    "run_dir": run_dir,
                    "injecting_at": utc_now(),
                    **({"hidden": True} if hidden else {}),
                }
            )
        return entry_id

    def mark(self, entry_id: str, state: str) -> None:
        """Move an entry to `state` (injected, kept or reverted), stamping the time."""
        if state not in OUTSTANDING_STATES | {REVERTED}:
            raise ValueError(f"unknown journal state {state!r}")
        with self._locked() as document:
            for entry in document["entries"]:
                if entry["id"] == entry_id:
                    entry["state"] = state
                    entry[f"{state}_at"] = utc_now()
                    return
        raise KeyError(f"no journal entry {entry_id!r} in {self.path}")
