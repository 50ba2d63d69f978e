"""The lab's alert rules under promtool, Prometheus' own checker and rule test runner: each
rule fires on its fault and stays quiet beside it, each scenario fires what it declares, and
real kube-state-metrics, watching a real API server, gives the series the rules expect."""

from __future__ import annotations

import subprocess
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from alert_series import FAULTS, firing_test, held, scenario_series
from lab_support import ROOT, until
from still_support import StillPlane

import scenarios
from labs.aws.stack import GPU_ALERT_RULES
from labs.kube.resources import NODES, PODS
from labs.run.engine import describe_scenario
from labs.sim.controlplane.build import KUBE_STATE_METRICS_PROGRAM, PROMTOOL_PROGRAM, pinned_binary
from labs.sim.controlplane.monitoring import scaled_rules, seconds
from labs.sim.controlplane.run import free_port
from labs.sim.controlplane.tls import LOOPBACK

RULES = GPU_ALERT_RULES
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


def verdict(
    promtool: str, group: dict[str, Any], tmp_path: Path
) -> subprocess.CompletedProcess[str]:
    """`promtool test rules` on one test group against the lab's rules."""
    suite = {"rule_files": [str(RULES)], "evaluation_interval": "1m", "tests": [group]}
    path = tmp_path / f"{group['name']}.test.yaml"
    path.write_text(yaml.safe_dump(suite, sort_keys=False))
    return run(promtool, "test", "rules", path)


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
    wrong = firing_test("broken", scenario_series("device-plugin-off"), [NAIVE])
    tested = verdict(promtool, wrong, tmp_path)
    assert tested.returncode == 1, tested.stdout
    assert 'alertname="GpuAllocatableZeroOnGpuNode"' in tested.stdout + tested.stderr


@pytest.mark.parametrize("name", list(scenarios.all_scenarios()))
def test_a_scenario_fires_the_alerts_it_declares_and_no_other(
    promtool: str, tmp_path: Path, name: str
) -> None:
    declared = list(scenarios.get(name).alerts)
    assert set(declared) <= set(rule_names()), f"{name} declares an alert no rule defines"
    assert name in FAULTS, f"add {name}'s series to tests/alert_series.py"
    tested = verdict(promtool, firing_test(name, scenario_series(name), declared), tmp_path)
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_scenario_show_names_the_alerts_and_the_naive_rule_misses_the_device_plugin_off() -> None:
    shown = describe_scenario(scenarios.get("device-plugin-off"))
    line = "alerts that fire (monitoring/gpu-alerts.yaml): "
    assert f"{line}GpuAllocatableZeroOnGpuNode, GpuPodUnschedulable\n" in shown
    assert f"{line}none\n" in describe_scenario(scenarios.get("missing-toleration"))
    assert NAIVE in scenarios.get("gpus-scaled-to-zero").alerts  # it sees only no node at all


@pytest.fixture
def state_metrics(still: StillPlane, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """Real kube-state-metrics (the release `go/kube-state-metrics` pins) watching the held-still
    plane, with the node label the rules join on allowed; its /metrics URL and its log."""
    binary = pinned_binary(KUBE_STATE_METRICS_PROGRAM, print)
    port, log = free_port(), tmp_path / "kube-state-metrics.log"
    args = [f"--kubeconfig={still.kubeconfig}", f"--host={LOOPBACK}", f"--port={port}",
            f"--telemetry-host={LOOPBACK}", f"--telemetry-port={free_port()}",
            "--resources=nodes,pods,deployments,daemonsets",
            "--metric-labels-allowlist=nodes=[nvidia.com/gpu.present]"]  # fmt: skip
    with log.open("w") as out:
        program = subprocess.Popen([str(binary), *args], stdout=out, stderr=subprocess.STDOUT)
    try:
        yield f"http://{LOOPBACK}:{port}/metrics", log
    finally:
        program.terminate()
        program.wait(timeout=30)


def scrape(url: str) -> list[str]:
    """Each sample line (`name{labels} value`) of one scrape; [] while it does not answer."""
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            text = answer.read().decode()
    except OSError:
        return []
    return [line for line in text.splitlines() if line and not line.startswith("#")]


def gpu_node(name: str, gpus: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"nvidia.com/gpu.present": "true"}},
        "status": {"capacity": {"cpu": "4", "nvidia.com/gpu": "1"},
                   "allocatable": {"cpu": "4", "nvidia.com/gpu": gpus}},
    }  # fmt: skip


def waiting_gpu_pod(name: str) -> dict[str, Any]:
    gpu = {"nvidia.com/gpu": "1"}
    container = {"name": "cuda", "image": "nvcr.io/nvidia/cuda:12.9.1-base-ubuntu24.04",
                 "resources": {"limits": gpu, "requests": gpu}}  # fmt: skip
    message = "0/3 nodes are available: 2 Insufficient nvidia.com/gpu, 1 ..."
    unschedulable = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                     "message": message}  # fmt: skip
    return {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": [container]},
        "status": {"phase": "Pending", "conditions": [unschedulable]},
    }


def alerts_on(
    promtool: str, samples: list[str], expected: list[str], tmp_path: Path
) -> subprocess.CompletedProcess[str]:
    """promtool's verdict on these scraped samples held for the window: exactly `expected`
    fire."""
    series = [held(*line.rsplit(" ", 1)) for line in samples]
    return verdict(promtool, firing_test("scraped", series, expected), tmp_path)


GPU_B = 'kube_node_status_allocatable{node="gpu-b",resource="nvidia_com_gpu",unit="integer"}'
UNSCHEDULABLE = 'kube_pod_status_unschedulable{namespace="default",pod="gpu-probe"'


def scraped_when(url: str, ready: Callable[[list[str]], bool]) -> list[str]:
    """One scrape's samples once `ready` holds of them; [] before."""
    lines = scrape(url)
    return lines if lines and ready(lines) else []


def waits(lines: list[str]) -> bool:
    return any(line.startswith(UNSCHEDULABLE) for line in lines)


def test_real_kube_state_metrics_gives_the_series_the_rules_read(
    still: StillPlane, state_metrics: tuple[str, Path], promtool: str, tmp_path: Path
) -> None:
    url, log = state_metrics
    for name in ("gpu-a", "gpu-b"):
        still.put(NODES, gpu_node(name, "0"))  # the device plugin is off: the key stays, at 0
    still.put(NODES, {"metadata": {"name": "sys-a"}, "status": {"allocatable": {"cpu": "4"}}})
    still.put(PODS, waiting_gpu_pod("gpu-probe"), "default")
    faulty = until(
        lambda: scraped_when(url, lambda lines: f"{GPU_B} 0" in lines and waits(lines)),
        what=f"kube-state-metrics to report the GPU nodes at 0 and the waiting pod ({log})",
    )
    assert 'kube_node_labels{node="gpu-a",label_nvidia_com_gpu_present="true"} 1' in faulty
    declared = sorted(scenarios.get("device-plugin-off").alerts)
    verdict = alerts_on(promtool, faulty, declared, tmp_path)
    assert verdict.returncode == 0, verdict.stdout + verdict.stderr

    for name in ("gpu-a", "gpu-b"):  # the plugin back: each node offers its GPU, the pod ran
        gpus = {"status": {"allocatable": {"nvidia.com/gpu": "1"}}}
        still.api.patch(NODES, name, gpus, subresource="status")
    ran = {"phase": "Succeeded", "conditions": [{"type": "PodScheduled", "status": "True"}]}
    still.api.patch(PODS, "gpu-probe", {"status": ran}, "default", subresource="status")
    healthy = until(
        lambda: scraped_when(url, lambda lines: f"{GPU_B} 1" in lines and not waits(lines)),
        what=f"kube-state-metrics to report the GPUs back and the pod scheduled ({log})",
    )
    verdict = alerts_on(promtool, healthy, [], tmp_path)
    assert verdict.returncode == 0, verdict.stdout + verdict.stderr


def test_the_rehearsal_runs_the_rules_with_each_for_divided_by_its_speed(
    promtool: str, tmp_path: Path
) -> None:
    """The world's minutes pass in seconds, so do the rules' `for:` (never under the floor of
    the world's own delays); the file stays valid."""
    scaled = tmp_path / "scaled.yaml"
    scaled.write_text(scaled_rules(RULES.read_text(), 10.0))
    checked = run(promtool, "check", "rules", scaled)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    durations = {rule["alert"]: rule.get("for") for group in yaml.safe_load(scaled.read_text())
                 ["groups"] for rule in group["rules"]}  # fmt: skip
    assert durations["GpuAllocatableZeroOnGpuNode"] == "15000ms"  # 2m: 12 s, under the floor
    assert durations["GpuPodUnschedulable"] == "30000ms"  # 5m
    assert durations["GpuClusterPolicyNotReady"] == "60000ms"  # 10m
    assert durations["GpuPodFailed"] is None  # no for: fires on the first evaluation
    assert seconds("1h30m") == 5400


def test_a_malformed_duration_is_named_and_left_for_prometheus_to_refuse() -> None:
    with pytest.raises(ValueError, match="'5 minutes' is not a Prometheus duration"):
        seconds("5 minutes")
    rules = {"groups": [{"name": "g", "rules": [{"alert": "A", "expr": "up", "for": "5 minutes"}]}]}
    assert yaml.safe_load(scaled_rules(yaml.safe_dump(rules), 60.0)) == rules
