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
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


def utc_now() -> str:
    """The current UTC time as ISO 8601 with a Z, to the second (for records and journals)."""
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def atomic_write_text(path: Path, text: str) -> None:
    """Write `text` to `path` so readers see the old file or the new one, never a mix."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_json(path: Path, data: Any) -> None:
    """Atomically write `data` as indented, key-sorted JSON."""
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def read_json(path: Path, default: Any = None) -> Any:
    """Read a JSON file, or return `default` when it does not exist."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return default


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
