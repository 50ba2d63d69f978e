"""One module per injectable GPU fault, registered by its dashed name.

Every module in this package that defines `SCENARIO` (a `labs.run.contract.Scenario`) is
a scenario; adding a fault means adding one module. `_`-prefixed modules hold what
several scenarios share and are skipped. `register()` adds one at run time (tests).
"""

from __future__ import annotations

import importlib
import pkgutil

from labs.errors import LabError
from labs.run.contract import AREAS, Area, Scenario

_registry: dict[str, Scenario] = {}
_discovered = False


class UnknownScenario(LabError, LookupError):
    """No scenario has that name; the message lists the ones that exist."""


class InvalidScenario(TypeError):
    """A scenario module does not declare what the engine needs."""


def register(scenario: object, origin: str = "") -> Scenario:
    """Register a scenario; InvalidScenario when it is not a `Scenario`."""
    if not isinstance(scenario, Scenario):
        where = f" in {origin}" if origin else ""
        raise InvalidScenario(
            f"SCENARIO{where} is a {type(scenario).__name__}, not a labs.run.contract.Scenario"
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
        if hasattr(module, "SCENARIO"):
            register(module.SCENARIO, module.__name__)


def all_scenarios() -> dict[str, Scenario]:
    """Every known scenario by name, sorted."""
    _discover()
    return dict(sorted(_registry.items()))


def by_area() -> dict[Area, list[Scenario]]:
    """Every known scenario grouped by where its fault lives, in `AREAS` order (an area with
    no scenario is left out), each group sorted by name."""
    known = all_scenarios().values()
    groups = {area: [s for s in known if s.area == area] for area in AREAS}
    return {area: group for area, group in groups.items() if group}


def get(name: str) -> Scenario:
    """The scenario called `name`; UnknownScenario lists the known names otherwise."""
    known = all_scenarios()
    if name not in known:
        raise UnknownScenario(
            f"no scenario named {name!r}; known scenarios: {', '.join(known) or 'none'}"
        )
    return known[name]
