"""The scenario package's catalogue: every module in it is a scenario the tool knows."""

from __future__ import annotations

import pkgutil

import scenarios


def test_every_scenario_module_is_in_the_catalogue_under_its_dashed_name():
    modules = [m.name for m in pkgutil.iter_modules(scenarios.__path__) if m.name[0] != "_"]
    known = scenarios.all_scenarios()
    missing = [m for m in modules if m.replace("_", "-") not in known]
    assert not missing, (
        f"scenarios/{missing[0]}.py is not in scenarios._catalogue(): list it there (under "
        "`runbooks`, or `workloads` for a `_workload` fault) so the tool and mypy see it"
    )
    assert sorted(known) == sorted(m.replace("_", "-") for m in modules)


def test_a_runbook_module_gives_its_scenario_its_docstring_and_its_steps():
    from scenarios import device_plugin_off

    scenario = scenarios.get("device-plugin-off")
    assert scenario.about == device_plugin_off.__doc__
    assert scenario.inject is device_plugin_off.inject
    assert scenario.symptoms is device_plugin_off.symptoms
    assert scenario.by_hand is device_plugin_off.FACTS.by_hand
