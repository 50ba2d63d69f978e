"""Where the tests find the README's prerequisite tools; a missing one fails the test, by name.

`terraform` and `kubectl` come from PATH, as the README's quick start says; the `aws` CLI
is the one the `test` extra installs into this virtual environment, next to its python.
Never a skip: a test that needs a tool proves nothing without it.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest


def require_tool(name: str) -> str:
    """The path of `name` found on PATH; fails the calling test when it is not there."""
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} not found on PATH: install it (README prerequisites)", pytrace=False)
    return found


def require_venv_tool(name: str) -> str:
    """The path of the console script `name` in this venv (beside sys.executable), or fail."""
    path = Path(sys.executable).parent / name
    if not (path.is_file() and os.access(path, os.X_OK)):
        pytest.fail(
            f"{name} not found at {path}: install the test extra into this venv, "
            f"`{Path(sys.executable).parent / 'pip'} install -e '.[test]'` (README quick start)",
            pytrace=False,
        )
    return str(path)
