"""The end of a rehearsal program's log, however long it has grown: an error that names a
program that ended quotes its last words."""

from __future__ import annotations

import os
from pathlib import Path


def log_tail(log: Path, size: int) -> str:
    """The last `size` bytes of `log` as text; '' when it cannot be read."""
    try:
        with log.open("rb") as file:
            file.seek(max(0, file.seek(0, os.SEEK_END) - size))
            return file.read().decode(errors="replace")
    except OSError:
        return ""
