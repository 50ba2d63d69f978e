"""Crash-safe record of the faults injected into a lab.

A fault is written as `injecting` *before* the mutation and as `reverted` only after
the revert succeeded, so whatever happens in between (an exception, Ctrl-C, SIGKILL)
the journal names every fault that may still be in the lab, and `scenario.revert --all`
or `lab.down` can undo it. Read-modify-write cycles hold an exclusive file lock, so a
second process (a learner's `scenario.revert` while a run is going) cannot lose an entry.
"""

from __future__ import annotations

import fcntl
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from labs.state import atomic_write_json, read_json, utc_now

INJECTING = "injecting"
INJECTED = "injected"
KEPT = "kept"
REVERTED = "reverted"
OUTSTANDING_STATES = frozenset({INJECTING, INJECTED, KEPT})


class Journal:
    """The fault journal of one lab (a JSON file beside a lock file)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @contextmanager
    def _locked(self) -> Iterator[list[dict[str, Any]]]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_suffix(".lock"), "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            entries = self.entries()
            yield entries
            atomic_write_json(self.path, {"entries": entries})

    def entries(self) -> list[dict[str, Any]]:
        """Every entry, oldest first."""
        return list(read_json(self.path, {"entries": []})["entries"])

    def outstanding(self) -> list[dict[str, Any]]:
        """Entries whose fault may still be in the lab (not yet reverted)."""
        return [e for e in self.entries() if e["state"] in OUTSTANDING_STATES]

    def record_injecting(self, scenario: str, run_dir: str | None = None) -> str:
        """Record that `scenario` is about to be injected; returns the entry id."""
        entry_id = uuid.uuid4().hex[:12]
        with self._locked() as entries:
            entries.append(
                {
                    "id": entry_id,
                    "scenario": scenario,
                    "state": INJECTING,
                    "pid": os.getpid(),
                    "run_dir": run_dir,
                    "injecting_at": utc_now(),
                }
            )
        return entry_id

    def mark(self, entry_id: str, state: str) -> None:
        """Move an entry to `state` (injected, kept or reverted), stamping the time."""
        if state not in OUTSTANDING_STATES | {REVERTED}:
            raise ValueError(f"unknown journal state {state!r}")
        with self._locked() as entries:
            for entry in entries:
                if entry["id"] == entry_id:
                    entry["state"] = state
                    entry[f"{state}_at"] = utc_now()
                    return
        raise KeyError(f"no journal entry {entry_id!r} in {self.path}")
