"""The package layers hold: dependencies point one way, and one module knows the rehearsal.

tasks -> scenarios -> labs; inside labs only the rehearsal backend (and labs/sim itself)
imports labs.sim, and nothing outside labs/backends decides by the backend's kind.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LABS = ROOT / "labs"


def imported_modules(path: Path) -> set[str]:
    """Every module a file imports, lazily or not."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def python_files(folder: Path) -> list[Path]:
    return sorted(folder.rglob("*.py"))


def test_nothing_under_labs_imports_scenarios():
    offenders = [
        str(path.relative_to(ROOT))
        for path in python_files(LABS)
        if any(m == "scenarios" or m.startswith("scenarios.") for m in imported_modules(path))
    ]
    assert offenders == []


def test_only_the_rehearsal_backend_imports_labs_sim():
    allowed = {LABS / "backends" / "rehearsal.py"}
    offenders = [
        str(path.relative_to(ROOT))
        for path in [*python_files(LABS), ROOT / "tasks.py"]
        if LABS / "sim" not in path.parents and path not in allowed
        and any(m == "labs.sim" or m.startswith("labs.sim.") for m in imported_modules(path))
    ]  # fmt: skip
    assert offenders == []


def test_no_backend_kind_branches_outside_the_seam():
    branch = re.compile(r"backend *[=!]= *(SIM|AWS)|\.backend == |backend\.name *[=!]= *[\"']")
    offenders = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in [*python_files(LABS), ROOT / "tasks.py"]
        if LABS / "backends" not in path.parents
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if branch.search(line)
    ]
    assert offenders == []


def test_the_probe_manifest_lives_with_the_code_that_applies_it():
    from labs.kube import probes

    assert probes.PROBE_MANIFEST.parent.parent == Path(probes.__file__).parent
    assert probes.load_probe()["spec"]["containers"][0]["resources"]["limits"] == {
        "nvidia.com/gpu": "1"
    }
