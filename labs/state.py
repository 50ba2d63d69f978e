"""Files a lab keeps on disk, written atomically so a crash never leaves half a file.

Layout, one directory per lab under the state root (default `.labs/`):
  <root>/<lab>/state.json       backend, variables, outputs, what lab.up finished
  <root>/<lab>/kubeconfig       the lab's own kubeconfig (never ~/.kube/config)
  <root>/<lab>/journal.json     the fault journal
  <root>/<lab>/terraform/       terraform working dir and state (AWS backend)
  <root>/<lab>/sim/             the rehearsal process's endpoints.json and logs
  <root>/<lab>/runs/            one folder per scenario run
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from labs.errors import LabError

# Names what is wrong with a file's parsed content; None when it is usable.
Problem = Callable[[Any], str | None]


class StateWriteError(LabError):
    """A lab file could not be written; the message names the file and the OS error."""


class DamagedFile(LabError):
    """A lab file did not parse or held the wrong shape; it was moved aside, never deleted."""

    def __init__(self, path: Path, problem: str, kept: Path | None) -> None:
        where = f"kept it as {kept}" if kept else "could not move it aside"
        super().__init__(f"{path} is damaged ({problem}); {where}")
        self.path, self.problem, self.kept = path, problem, kept


def utc_now() -> str:
    """The current UTC time as ISO 8601 with a Z, to the second (for records and journals)."""
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def warn(message: str) -> None:
    """Tell the user at once, on stderr, whichever command and layer found the problem."""
    print(f"warning: {message}", file=sys.stderr, flush=True)


def atomic_write_text(path: Path, text: str) -> None:
    """Write `text` to `path` (mode 0600) so readers see the old file or the new one, never a mix.

    A failure raises StateWriteError naming the file and the OS error.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as error:
        raise StateWriteError(f"could not write {path}: {error.strerror or error}") from error
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException as error:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(error, OSError):
            raise StateWriteError(f"could not write {path}: {error.strerror or error}") from error
        raise


def atomic_write_json(path: Path, data: Any) -> None:
    """Atomically write `data` as indented, key-sorted JSON."""
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def load_json(path: Path, problem: Problem | None = None) -> Any:
    """A JSON file's content, or None when it does not exist.

    A file that does not parse, or whose content `problem` rejects, is moved aside
    (`quarantine`), the user is warned, and DamagedFile says what was kept.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as error:
        raise quarantine(path, f"unreadable: {error}") from None
    try:
        data = json.loads(text)
    except ValueError as error:
        raise quarantine(path, f"not JSON: {error}" if text.strip() else "empty") from None
    why = problem(data) if problem else None
    if why:
        raise quarantine(path, why)
    return data


def quarantine(path: Path, problem: str) -> DamagedFile:
    """Move a damaged file to `<name>.broken-<UTC time>` so it is kept but no longer read."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    kept = path.with_name(f"{path.name}.broken-{stamp}")
    try:
        os.replace(path, kept)
    except OSError:
        damage = DamagedFile(path, problem, None)
    else:
        damage = DamagedFile(path, problem, kept)
    warn(str(damage))
    return damage


@dataclass(frozen=True)
class LabPaths:
    """Where one lab's files live."""

    root: Path

    @classmethod
    def for_lab(cls, state_root: Path | str, lab: str) -> LabPaths:
        return cls(Path(state_root).resolve() / lab)

    @property
    def state_file(self) -> Path:
        return self.root / "state.json"

    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubeconfig"

    @property
    def journal(self) -> Path:
        return self.root / "journal.json"

    @property
    def terraform_dir(self) -> Path:
        return self.root / "terraform"

    @property
    def sim_dir(self) -> Path:
        return self.root / "sim"

    @property
    def runs_dir(self) -> Path:
        return self.root / "runs"

    def exists(self) -> bool:
        return self.state_file.exists()
