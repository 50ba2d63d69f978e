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


def test_the_commands_sit_on_top_of_labs():
    """labs/commands is what tasks.py (and a scenario reusing a step) call; no other part of
    labs reaches up into it."""
    commands = LABS / "commands"
    offenders = [
        str(path.relative_to(ROOT))
        for path in python_files(LABS)
        if commands not in path.parents
        and any(m.split(".")[:2] == ["labs", "commands"] for m in imported_modules(path))
    ]  # fmt: skip
    assert offenders == []


def module_level_imports(path: Path) -> set[str]:
    """The labs modules a file imports when it is imported: its top-level statements, not an
    import inside a function or under `if TYPE_CHECKING:`."""
    names: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {name for name in names if name == "labs" or name.startswith("labs.")}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_no_import_circle_among_labs_modules():
    graph = {module_name(p): module_level_imports(p) for p in python_files(LABS)}
    graph = {name: {m for m in imports if m in graph} for name, imports in graph.items()}
    circles = []
    for start in graph:  # a depth-first walk from each module back to itself
        stack, seen = [(start, [start])], set()
        while stack:
            name, path = stack.pop()
            for nxt in graph[name]:
                if nxt == start:
                    circles.append(" -> ".join([*path, start]))
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, [*path, nxt]))
    assert circles == []
