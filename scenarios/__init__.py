"""One module per injectable GPU fault, registered by its dashed name.

Every module in this package that sets `name` is a scenario; adding a fault means
adding one module. `register()` adds one at run time (plug-ins, tests).
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from typing import Any

from labs.errors import LabError

# What every scenario must declare (labs.checks.Scenario documents each).
REQUIRED = (
    "name",
    "summary",
    "needs",
    "risk",
    "duration",
    "baseline",
    "inject",
    "revert",
    "symptoms",
    "recovery",
    "diagnose",
    "traps",
)
_DASHED = re.compile(r"[a-z0-9]+(-[a-z0-9]+)*")
_registry: dict[str, Any] = {}
_discovered = False


class UnknownScenario(LabError, LookupError):
    """No scenario has that name; the message lists the ones that exist."""


class InvalidScenario(TypeError):
    """A scenario module does not declare what the engine needs."""


def register(scenario: Any) -> Any:
    """Register a scenario (a module or any object with the REQUIRED attributes)."""
    missing = [attribute for attribute in REQUIRED if not hasattr(scenario, attribute)]
    label = getattr(scenario, "__name__", None) or getattr(scenario, "name", repr(scenario))
    if missing:
        raise InvalidScenario(f"scenario {label} does not declare: {', '.join(missing)}")
    if not _DASHED.fullmatch(scenario.name):
        raise InvalidScenario(
            f"scenario name {scenario.name!r} must be dashed lower case, e.g. device-plugin-off"
        )
    _registry[scenario.name] = scenario
    return scenario


def unregister(name: str) -> None:
    """Forget a scenario registered at run time."""
    _registry.pop(name, None)


def _discover() -> None:
    global _discovered
    if _discovered:
        return
    _discovered = True
    for module_info in pkgutil.iter_modules(__path__):
        if module_info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{module_info.name}")
        if hasattr(module, "name"):
            register(module)


def all_scenarios() -> dict[str, Any]:
    """Every known scenario by name, sorted."""
    _discover()
    return dict(sorted(_registry.items()))


def get(name: str) -> Any:
    """The scenario called `name`; UnknownScenario lists the known names otherwise."""
    known = all_scenarios()
    if name not in known:
        raise UnknownScenario(
            f"no scenario named {name!r}; known scenarios: {', '.join(known) or 'none'}"
        )
    return known[name]
