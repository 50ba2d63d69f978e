"""The lab's alert rules under promtool, Prometheus' own checker and rule test runner: each
rule fires on its fault and stays quiet beside it, and each scenario fires what it declares."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml
from alert_series import FAULTS, firing_test
from lab_support import ROOT

import scenarios
from labs.run.engine import describe_scenario
from labs.sim.controlplane.build import PROMTOOL_PROGRAM, pinned_binary

RULES = ROOT / "monitoring" / "gpu-alerts.yaml"
RULE_TESTS = ROOT / "monitoring" / "tests" / "rules.test.yaml"
NAIVE = "GpuAllocatableAbsentNaive"


@pytest.fixture(scope="module")
def promtool() -> str:
    """promtool from the Prometheus release `go/prometheus` pins (built on first use)."""
    return str(pinned_binary(PROMTOOL_PROGRAM, print))


def run(promtool: str, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool, *map(str, args)], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def rule_names() -> list[str]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule["alert"] for group in groups for rule in group["rules"]]


def test_promtool_accepts_the_rules(promtool: str) -> None:
    checked = run(promtool, "check", "rules", RULES)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(rule_names())} rules found" in checked.stdout


def test_each_rule_fires_on_its_fault_and_stays_quiet_beside_it(promtool: str) -> None:
    tested = run(promtool, "test", "rules", RULE_TESTS)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout
    cases = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    fired = {c["alertname"] for t in cases for c in t["alert_rule_test"] if c.get("exp_alerts")}
    assert fired == set(rule_names()), "every rule has a case where it fires"


def test_a_broken_expectation_fails_promtool(promtool: str, tmp_path: Path) -> None:
    suite = yaml.safe_load(RULE_TESTS.read_text())
    suite["rule_files"] = [str(RULES)]
    suite["tests"] = [firing_test("device-plugin-off", [NAIVE])]
    broken = tmp_path / "broken.test.yaml"
    broken.write_text(yaml.safe_dump(suite))
    tested = run(promtool, "test", "rules", broken)
    assert tested.returncode == 1, tested.stdout
    assert 'alertname="GpuAllocatableZeroOnGpuNode"' in tested.stdout + tested.stderr


@pytest.mark.parametrize("name", list(scenarios.all_scenarios()))
def test_a_scenario_fires_the_alerts_it_declares_and_no_other(
    promtool: str, tmp_path: Path, name: str
) -> None:
    declared = list(scenarios.get(name).alerts)
    assert set(declared) <= set(rule_names()), f"{name} declares an alert no rule defines"
    assert name in FAULTS, f"add {name}'s series to tests/alert_series.py"
    suite = {"rule_files": [str(RULES)], "evaluation_interval": "1m",
             "tests": [firing_test(name, declared)]}  # fmt: skip
    path = tmp_path / f"{name}.test.yaml"
    path.write_text(yaml.safe_dump(suite, sort_keys=False))
    tested = run(promtool, "test", "rules", path)
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_scenario_show_names_the_alerts_and_the_naive_rule_misses_the_device_plugin_off() -> None:
    shown = describe_scenario(scenarios.get("device-plugin-off"))
    line = "alerts that fire (monitoring/gpu-alerts.yaml): "
    assert f"{line}GpuAllocatableZeroOnGpuNode, GpuPodUnschedulable\n" in shown
    assert f"{line}none\n" in describe_scenario(scenarios.get("missing-toleration"))
    assert NAIVE in scenarios.get("gpus-scaled-to-zero").alerts  # it sees only no node at all
