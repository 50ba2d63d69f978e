"""One module per injectable GPU fault, registered by its dashed name.

A scenario module is a runbook (`labs.run.contract.Runbook`): its steps by name and its
`FACTS`; a workload fault's module builds its `SCENARIO` with `_workload`. `_catalogue`
lists them all, so mypy checks every module against the contract; `_`-prefixed modules hold
what several scenarios share. `register()` adds one at run time (tests).
"""

from __future__ import annotations

from labs.errors import LabError
from labs.run.contract import AREAS, Area, Runbook, Scenario

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


def _catalogue() -> list[Scenario]:
    """Every scenario of this package; imported on first use, as most commands need none.
    `runbooks` is typed so that mypy checks each module there against the contract."""
    from scenarios import (
        containerd_runtime_missing,
        device_plugin_config_missing,
        device_plugin_off,
        device_plugin_off_one_node,
        gpu_node_foreign_taint,
        gpu_xid_79,
        gpus_scaled_to_zero,
        mig_on_a10g,
        missing_gpu_limit,
        missing_toleration,
        nccl_sg_block,
        operator_down,
        runtimeclass_missing,
        toolkit_glibc_al2,
        validator_gpu_busy,
    )

    runbooks: list[Runbook] = [
        containerd_runtime_missing,
        device_plugin_config_missing,
        device_plugin_off,
        device_plugin_off_one_node,
        gpu_node_foreign_taint,
        gpu_xid_79,
        gpus_scaled_to_zero,
        nccl_sg_block,
        operator_down,
        toolkit_glibc_al2,
        validator_gpu_busy,
    ]
    workloads = [
        mig_on_a10g.SCENARIO,
        missing_gpu_limit.SCENARIO,
        missing_toleration.SCENARIO,
        runtimeclass_missing.SCENARIO,
    ]
    return [Scenario.of(m) for m in runbooks] + workloads


def _discover() -> None:
    global _discovered
    if _discovered:
        return
    _discovered = True
    for scenario in _catalogue():
        register(scenario)


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
