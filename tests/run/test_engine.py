"""The scenario engine against a held-still API server, with a tiny scenario written as one module.

The scenario flips a ConfigMap's `mode` from "on" to "off" (inject) and back (revert). It
lives in a file the test writes and registers at run time, which is all a new scenario
needs: a module that fills in one `Scenario`. The lab runs at speed 1, so the checks'
time limits are the ones declared.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import scenarios
from labs.backends import REHEARSAL
from labs.guard import GuardError
from labs.journal import INJECTED, KEPT, REVERTED
from labs.kube.resources import CONFIG_MAPS
from labs.lab import Lab
from labs.run import doctor_check
from labs.run.contract import Check, Context, Needs, Scenario
from labs.run.engine import (
    EXIT_CHECK_FAILED,
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    ScenarioError,
    describe_scenario,
    inject_scenario,
    revert_scenarios,
    run_scenario,
)
from labs.settings import load_settings

TOGGLE_SCENARIO = '''
"""Flip the lab-toggle ConfigMap off and on again."""

from typing import Any

from kubernetes import client

from labs.kube.resources import CONFIG_MAPS
from labs.kube.view import ClusterView, Objects, WatchedKind
from labs.lab import Lab
from labs.run.contract import Cause, Check, Context, Finding, Needs, Scenario, Trap


def _mode(view: Objects) -> str:
    found = view.find("configmaps", "lab-toggle")
    return str((found or {}).get("data", {}).get("mode", "absent"))


def _set(lab: Lab, mode: str) -> None:
    client.CoreV1Api(lab.kube).patch_namespaced_config_map(
        "lab-toggle", "default", {"data": {"mode": mode}}
    )


def watch(lab: Lab) -> list[WatchedKind]:
    return [WatchedKind("configmaps", lab.kube, CONFIG_MAPS, "default")]


def state(ctx: Context) -> dict[str, str]:
    return {"mode": _mode(ctx.view)}


def baseline(lab: Lab, view: ClusterView) -> dict[str, Any]:
    """Read the mode."""
    return {"mode": _mode(view)}


def inject(lab: Lab) -> None:
    """Set mode=off."""
    _set(lab, "off")


def revert(lab: Lab) -> None:
    """Set mode=on."""
    _set(lab, "on")


def diagnose(ctx: Context) -> list[Finding]:
    """Read the ConfigMap."""
    return [Finding("1. ConfigMap", "kubectl get cm lab-toggle", _mode(ctx.view), "it is off",
                    trap="looks harmless")]


SCENARIO = Scenario(
    name="configmap-toggle",
    summary="ConfigMap lab-toggle mode=off",
    area="workload",
    about=__doc__ or "",
    needs=Needs(),
    risk="none",
    duration="seconds",
    baseline=baseline,
    inject=inject,
    revert=revert,
    symptoms=[Check("mode is off", lambda ctx: (_mode(ctx.view) == "off", _mode(ctx.view)), 30)],
    recovery=[Check("mode is back as baseline",
                    lambda ctx: (_mode(ctx.view) == ctx.baseline["mode"], _mode(ctx.view)), 30)],
    diagnose=diagnose,
    traps=[Trap("looks harmless", "nothing changes", "mode is off", "read the data",
                "mode is off")],
    doctor_finding=None,  # a ConfigMap's switch is nothing the doctor reads
    cause=Cause("ConfigMap lab-toggle is switched off", names=(("lab-toggle", "toggle"), ("off",))),
    detect=lambda lab, view: _mode(view) == "off",
    state=state,
    gauges={"mode": _mode},
    watch=watch,
)
'''
NAME = "configmap-toggle"


def load_scenario(path: Path) -> Scenario:
    spec = importlib.util.spec_from_file_location("configmap_toggle", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return scenarios.register(module.SCENARIO, module.__name__)


@pytest.fixture
def toggle(tmp_path: Path) -> Iterator[Scenario]:
    """The tiny scenario, written as a module file and registered at run time."""
    path = tmp_path / "configmap_toggle.py"
    path.write_text(TOGGLE_SCENARIO)
    yield load_scenario(path)
    scenarios.unregister(NAME)


def variant(scenario: Scenario, **changes: Any) -> Scenario:
    """The same scenario with some parts replaced, registered under the same name."""
    return scenarios.register(dataclasses.replace(scenario, **changes))


def catalogue() -> dict[str, Scenario]:
    return scenarios.all_scenarios()


@pytest.fixture
def lab(still, tmp_path: Path) -> Lab:
    """A lab record pointing at the plane (real-time speed), with lab-toggle mode=on."""
    flags = {"lab": "tiny", "state_dir": str(tmp_path / "state"), "speed": 1}
    settings = load_settings(None, flags)
    lab = Lab.create(settings, REHEARSAL)
    lab.update(outputs={"cluster_endpoint": still.url})
    shutil.copyfile(still.kubeconfig, lab.paths.kubeconfig)
    still.put(CONFIG_MAPS, {"metadata": {"name": "lab-toggle"}, "data": {"mode": "on"}}, "default")
    return lab


def mode(still) -> str:
    return still.api.get(CONFIG_MAPS, "lab-toggle", "default")["data"]["mode"]


def journal_states(lab: Lab) -> list[str]:
    return [entry["state"] for entry in lab.journal.entries()]


def test_a_scenario_written_as_one_module_runs_end_to_end(toggle, lab, still):
    lines: list[str] = []
    result = run_scenario(lab, scenarios.get(NAME), out=lines.append)

    assert result.ok and result.exit_code == 0 and result.failed_checks == []
    assert mode(still) == "on"
    assert journal_states(lab) == [REVERTED]
    assert any("symptom: mode is off" in line and "T+" in line for line in lines)
    assert "alerts: not recorded: lab tiny has no monitoring (invoke lab.up --monitoring)" in lines
    report = json.loads((result.report_dir / "report.json").read_text())
    assert report["alerts"] is None
    markdown = (result.report_dir / "report.md").read_text()
    assert "Not recorded: the lab has no monitoring" in markdown
    assert report["states"] == {
        "baseline": {"mode": "on"},
        "fault": {"mode": "off"},
        "recovered": {"mode": "on"},
    }
    assert [c["name"] for c in report["checks"] if c["held"]] == [
        "mode is off",
        "mode is back as baseline",
    ]
    assert report["traps"][0]["name"] == "looks harmless" and report["traps"][0]["observed"]
    assert (result.report_dir / "report.md").read_text().startswith("# Scenario run: " + NAME)
    assert result.report_dir.parent == lab.paths.runs_dir


def test_recovery_that_never_comes_fails_and_names_the_check(toggle, lab, still):
    never = Check("mode reads 'restored'", lambda ctx: (False, "mode on, no 'restored'"), 0.5)
    result = run_scenario(lab, variant(toggle, recovery=[never]), out=lambda _line: None)

    assert result.exit_code == EXIT_CHECK_FAILED
    assert result.failed_checks == ["recovery: mode reads 'restored'"]
    # The revert itself was applied, and the journal says exactly that.
    assert mode(still) == "on" and journal_states(lab) == [REVERTED]
    report = (result.report_dir / "report.md").read_text()
    assert "FAILED" in report and "mode reads 'restored'" in report


def test_a_doctor_that_names_another_cause_fails_the_run_quoting_what_it_said(
    toggle, lab, still, monkeypatch
):
    """A ConfigMap's switch is nothing the doctor reads (on this bare plane it cannot even read
    the lab): the run says what the doctor said instead, fails, and still reverts."""
    monkeypatch.setattr(doctor_check, "SETTLE", 1.0)
    lines: list[str] = []
    claimed = variant(toggle, doctor_finding="component-disabled")
    result = run_scenario(lab, claimed, out=lines.append)

    assert result.exit_code == EXIT_CHECK_FAILED
    assert result.failed_checks == ["doctor: lab.doctor's probable cause is component-disabled"]
    said = lines[lines.index("  NOT SEEN   doctor: lab.doctor's probable cause is "
                             "component-disabled") + 1]  # fmt: skip
    assert said.strip().startswith("last seen: lab.doctor"), lines
    assert "component-disabled" not in said
    assert mode(still) == "on" and journal_states(lab) == [REVERTED]


def test_symptom_time_limits_count_from_when_a_slow_inject_is_done(toggle, lab, still):
    def slow_inject(lab: Lab) -> None:  # as one that waits for a rollout before its fault
        time.sleep(3.5)
        toggle.inject(lab)

    def off(ctx: Context) -> tuple[bool, str]:
        found = ctx.view.find("configmaps", "lab-toggle") or {}
        return found.get("data", {}).get("mode") == "off", str(found.get("data"))

    def still_off(ctx: Context) -> tuple[bool, str]:
        since = ctx.seconds_since("off") or 0.0
        return off(ctx)[0] and since >= 0.3, f"off for {since:.1f} s"

    checks = [Check("mode is off", off, 3.0, then=lambda ctx: ctx.mark("off")),
              Check("mode still off 0.3 s later", still_off, 3.0)]  # fmt: skip
    result = run_scenario(lab, variant(toggle, inject=slow_inject, symptoms=checks),
                          out=lambda _line: None)  # fmt: skip

    assert result.ok, result.failed_checks
    report = json.loads((result.report_dir / "report.json").read_text())
    assert all(c["t"] < 3.0 for c in report["checks"] if c["phase"] == "symptom"), report


def test_an_error_after_injection_reverts_first_then_reports(toggle, lab, still):
    def broken(_ctx: Any) -> tuple[bool, str]:
        raise RuntimeError("the check itself broke")

    broken_toggle = variant(toggle, symptoms=[Check("mode is off", broken, 30)])
    result = run_scenario(lab, broken_toggle, out=lambda _line: None)

    assert result.exit_code == EXIT_ERROR
    assert "the check itself broke" in (result.error or "")
    assert mode(still) == "on" and journal_states(lab) == [REVERTED]
    report = json.loads((result.report_dir / "report.json").read_text())
    assert report["result"]["error"] == result.error


def test_ctrl_c_after_injection_reverts(toggle, lab, still):
    def interrupted(_ctx: Any) -> tuple[bool, str]:
        raise KeyboardInterrupt

    stopped = variant(toggle, symptoms=[Check("mode is off", interrupted, 30)])
    result = run_scenario(lab, stopped, out=lambda _line: None)

    assert result.exit_code == EXIT_INTERRUPTED
    assert mode(still) == "on" and journal_states(lab) == [REVERTED]


def test_a_failed_revert_leaves_the_journal_saying_injected(toggle, lab, still):
    def stuck(_lab: Any) -> None:
        raise ConnectionError("API unreachable")

    never = Check("never", lambda ctx: (False, "-"), 0.2)
    stuck_toggle = variant(toggle, revert=stuck, symptoms=[never])
    result = run_scenario(lab, stuck_toggle, out=lambda _line: None)

    assert result.exit_code == EXIT_ERROR
    assert f"invoke scenario.revert --name {NAME} --lab tiny" in (result.error or "")
    assert mode(still) == "off" and journal_states(lab) == [INJECTED]


def test_keep_fault_leaves_it_and_revert_undoes_it_later(toggle, lab, still):
    result = run_scenario(lab, toggle, keep_fault=True, out=lambda _line: None)

    assert result.ok
    assert mode(still) == "off" and journal_states(lab) == [KEPT]
    assert revert_scenarios(lab, catalogue(), None, out=lambda _line: None) == [NAME]
    assert mode(still) == "on" and journal_states(lab) == [REVERTED]


def test_revert_after_a_crash_needs_only_the_journal(toggle, lab, still):
    # What a run killed right after the injection leaves behind.
    entry = lab.journal.record_injecting(NAME, None)
    toggle.inject(lab)
    lab.journal.mark(entry, INJECTED)

    assert revert_scenarios(lab, catalogue(), None, out=lambda _line: None) == [NAME]
    assert mode(still) == "on" and journal_states(lab) == [REVERTED]
    # Idempotent: nothing is left to do.
    lines: list[str] = []
    assert revert_scenarios(lab, catalogue(), None, out=lines.append) == []
    assert "nothing to revert" in lines[0]


def test_inject_for_practice_leaves_the_fault_kept(toggle, lab, still):
    lines: list[str] = []
    entry = inject_scenario(lab, toggle, out=lines.append)

    assert mode(still) == "off"
    assert lab.journal.entries()[0]["id"] == entry and journal_states(lab) == [KEPT]
    assert any(f"invoke scenario.revert --name {NAME} --lab tiny" in line for line in lines)


def test_nothing_is_injected_when_the_guard_refuses(toggle, lab, still):
    lab.update(outputs={"cluster_endpoint": "https://ABCDEF.gr7.ap-northeast-2.eks.amazonaws.com"})

    with pytest.raises(GuardError, match="refusing"):
        run_scenario(lab, toggle, out=lambda _line: None)

    assert mode(still) == "on" and lab.journal.entries() == []


def test_missing_gpu_nodes_name_the_scale_command(toggle, lab):
    expected = r"has 0 Ready GPU node\(s\).*invoke lab\.scale 2 --lab tiny"
    with pytest.raises(ScenarioError, match=expected):
        run_scenario(lab, variant(toggle, needs=Needs(gpu_nodes=2)), out=lambda _line: None)
    assert lab.journal.entries() == []


def test_missing_operator_names_lab_up(toggle, lab):
    expected = r"GPU Operator is not installed.*invoke lab\.up --lab tiny"
    with pytest.raises(ScenarioError, match=expected):
        run_scenario(lab, variant(toggle, needs=Needs(operator=True)), out=lambda _line: None)


def test_a_rehearsal_only_fault_is_refused_with_its_reason_on_a_lab_that_is_not_one(
    toggle, lab, still, monkeypatch
):
    """A lab whose backend plays nothing (EKS) is refused before the baseline or the journal."""
    monkeypatch.setattr(type(lab.backend), "simulated", False)
    why = "no API raises it on a real GPU"
    only_here = variant(toggle, needs=Needs(rehearsal_only=why))
    expected = rf"runs only on a rehearsal lab .* lab 'tiny' is not one: {why}\. Nothing was"

    with pytest.raises(ScenarioError, match=expected):
        run_scenario(lab, only_here, out=lambda _line: None)
    with pytest.raises(ScenarioError, match=expected):
        inject_scenario(lab, only_here, out=lambda _line: None)

    assert mode(still) == "on" and lab.journal.entries() == []
    assert "a rehearsal lab" in describe_scenario(only_here)


def test_unknown_scenario_lists_the_known_ones(lab):
    with pytest.raises(scenarios.UnknownScenario, match="known scenarios: .*device-plugin-off"):
        scenarios.get("no-such-fault")


def test_a_journal_naming_an_unknown_scenario_is_reported_not_skipped(lab):
    lab.journal.record_injecting("no-such-fault", None)

    with pytest.raises(ScenarioError, match="'no-such-fault', which this version does not know"):
        revert_scenarios(lab, catalogue(), None, out=lambda _line: None)
    assert journal_states(lab) == ["injecting"]


def test_a_scenario_that_is_not_a_scenario_is_refused_at_registration():
    with pytest.raises(scenarios.InvalidScenario, match="not a labs.run.contract.Scenario"):
        scenarios.register(SimpleNamespace(name="half-done", summary="x"), "half_done.py")
    with pytest.raises(ValueError, match="dashed lower case"):
        dataclasses.replace(scenarios.get("device-plugin-off"), name="Not_Dashed")
    with pytest.raises(ValueError, match="'device-plugin-of' is not a doctor finding; known: "):
        dataclasses.replace(scenarios.get("device-plugin-off"), doctor_finding="device-plugin-of")


def test_list_and_describe_show_the_reference_scenario():
    assert "device-plugin-off" in scenarios.all_scenarios()

    runbook = describe_scenario(scenarios.get("device-plugin-off"))
    assert "2 Ready GPU node(s), the GPU Operator installed and running" in runbook
    assert "spec.devicePlugin.enabled=false" in runbook
    assert "status.state stays ready" in runbook
    assert "gpu-probe output identical to baseline" in runbook
