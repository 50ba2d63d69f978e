"""device-plugin-off on the rehearsal world: the full run, a crash after injection, no recovery."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from lab_support import ROOT
from scenario_support import (
    GPU_NODES,
    READY_TIMEOUT,
    SCENARIO_SPEED,
    SimLab,
    assert_alerts_as_declared,
    assert_findings_observed,
    lab_ready,
    look_by_hand_then_revert_all,
    quiet,
    read_until,
    wait_ready,
)

import scenarios
from labs.journal import INJECTED, REVERTED
from labs.kube import gpu as gpu_facts
from labs.run.contract import Scenario
from labs.run.engine import EXIT_CHECK_FAILED, revert_scenarios, run_scenario

NAME = "device-plugin-off"
PROBE_LINE = "NVIDIA A10G, 580.126.09, 23028 MiB"
UNSCHEDULABLE = "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."


def checks_by_name(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in report["checks"]}


def test_full_run_shows_the_fault_and_proves_recovery(sim_lab):
    lines: list[str] = []
    result = run_scenario(sim_lab.lab, scenarios.get(NAME), out=lines.append)

    assert result.ok, result.failed_checks
    report = json.loads((result.report_dir / "report.json").read_text())
    assert_findings_observed(report, NAME)
    fault, recovered = report["states"]["fault"], report["states"]["recovered"]
    # The DaemonSet is deleted, not scaled; allocatable keeps its key at "0" on both GPU nodes.
    assert fault["device-plugin DaemonSet"] == "NotFound"
    gpu_nodes = report["baseline"]["gpu_nodes"]
    assert len(gpu_nodes) == GPU_NODES
    assert fault["allocatable nvidia.com/gpu"] == ", ".join(f"{n}: 0" for n in gpu_nodes)
    assert fault["ClusterPolicy status.state"] == "ready"
    assert recovered == report["states"]["baseline"]
    checks = checks_by_name(report)
    pending = checks["gpu-probe Pending: FailedScheduling, Insufficient nvidia.com/gpu"]
    assert UNSCHEDULABLE in pending["seen"]
    # status.state ready is called out as a trap, at the step that shows it.
    trap = next(t for t in report["traps"] if t["name"] == "status.state stays ready")
    assert trap["observed"] and trap["step"] == "4b. ClusterPolicy status"
    # Recovery: a new DaemonSet object, the same pod that waited, the baseline's output.
    new_uid = checks["device-plugin DaemonSet re-created with a new uid"]
    assert new_uid["held"] and report["baseline"]["daemonset_uid"] != new_uid["seen"].split()[1]
    assert report["baseline"]["probe_output"] == PROBE_LINE
    assert checks["gpu-probe output identical to baseline"]["held"]
    story = checks["the pending gpu-probe ran: FailedScheduling, then Scheduled, Succeeded"]
    assert "FailedScheduling" in story["seen"] and "Scheduled" in story["seen"]
    # The terminal told the story live, with a T+ per symptom.
    assert any("T+" in line and "device-plugin DaemonSet deleted" in line for line in lines)
    markdown = (result.report_dir / "report.md").read_text()
    assert "rehearsal" in markdown and "anything about AWS or EKS" in markdown
    # The live Prometheus: the == 0 rule fired with its T+, the naive absent() rule stayed silent.
    assert_alerts_as_declared(report, NAME)
    assert "| GpuAllocatableAbsentNaive (trap) | no | - | silent |" in markdown
    fired = next(a for a in report["alerts"] if a["name"] == "GpuAllocatableZeroOnGpuNode")
    assert f"| GpuAllocatableZeroOnGpuNode | yes | {fired['pending_at']:.2f} |" in markdown
    marks = [m["label"] for m in report["timeline"]["marks"] if m["kind"] == "alert"]
    assert "alert GpuAllocatableZeroOnGpuNode firing" in marks, report["timeline"]["marks"]
    assert (result.report_dir / "timeline.png").read_bytes().startswith(b"\x89PNG")
    assert [e["state"] for e in sim_lab.lab.journal.entries()] == [REVERTED]


CHILD = """
import sys, time
import scenarios
from labs.run.engine import run_scenario
from labs.lab import Lab
from labs.settings import load_settings

settings = load_settings(None, {"lab": sys.argv[1], "state_dir": sys.argv[2], "speed": sys.argv[3]})

def out(line):
    print(line, flush=True)
    if "symptom:" in line:  # the fault is in and being watched: hang here until killed
        print("WATCHING", flush=True)
        time.sleep(600)

run_scenario(Lab.open(settings), scenarios.get("device-plugin-off"), out=out)
"""


@pytest.fixture
def child(sim_lab) -> Iterator[subprocess.Popen]:
    lab = sim_lab.lab
    args = [lab.name, str(lab.settings.state_dir), str(SCENARIO_SPEED)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(
        [sys.executable, "-c", CHILD, *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    yield process
    if process.poll() is None:
        process.kill()
    process.wait(timeout=30)


def test_kubectl_shows_the_injected_fault_and_revert_all_restores_the_status(sim_lab, tmp_path):
    look_by_hand_then_revert_all(sim_lab.lab, NAME, ROOT, tmp_path)


def test_a_run_killed_after_injection_is_reverted_from_the_journal(sim_lab, child):
    lab = sim_lab.lab
    read_until(child.stdout, "WATCHING", timeout=90)
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    assert [e["state"] for e in lab.journal.entries()] == [INJECTED]
    policy = sim_lab.world.store.get("clusterpolicies.nvidia.com", "cluster-policy")
    assert policy["spec"]["devicePlugin"]["enabled"] is False

    assert revert_scenarios(lab, scenarios.all_scenarios(), None, out=quiet) == [NAME]

    policy = sim_lab.world.store.get("clusterpolicies.nvidia.com", "cluster-policy")
    assert policy["spec"]["devicePlugin"]["enabled"] is True
    with lab.view() as view:
        view.wait_for(lab_ready, READY_TIMEOUT, "the lab to recover after the revert")
    assert [e["state"] for e in lab.journal.entries()] == [REVERTED]


@pytest.fixture
def operator_dies_while_diagnosing(sim_lab: SimLab) -> Iterator[Scenario]:
    """device-plugin-off, but the operator's Deployment is scaled to 0 during the diagnosis."""
    original = scenarios.get(NAME)

    def set_operator_replicas(lab: Any, replicas: int) -> None:
        client.AppsV1Api(lab.kube).patch_namespaced_deployment(
            gpu_facts.OPERATOR_DEPLOYMENT, lab.operator_namespace, {"spec": {"replicas": replicas}}
        )

    def diagnose(ctx: Any) -> list[Any]:
        findings = original.diagnose(ctx)
        set_operator_replicas(ctx.lab, 0)
        ctx.view.wait_for(
            lambda v: not (gpu_facts.operator_deployment(v) or {})["status"].get("readyReplicas"),
            READY_TIMEOUT,
            "the operator to be down",
        )
        return findings

    yield dataclasses.replace(original, diagnose=diagnose)
    set_operator_replicas(sim_lab.lab, 1)
    wait_ready(sim_lab.lab)


def test_recovery_that_never_comes_fails_naming_the_check(sim_lab, operator_dies_while_diagnosing):
    lab = sim_lab.lab
    result = run_scenario(lab, operator_dies_while_diagnosing, out=quiet)

    assert result.exit_code == EXIT_CHECK_FAILED
    assert "recovery: device-plugin DaemonSet re-created with a new uid" in result.failed_checks
    assert "recovered state equals baseline" in result.failed_checks
    # The revert was applied (the journal says so, truthfully); the operator never acted on it.
    assert [e["state"] for e in lab.journal.entries()] == [REVERTED]
    policy = sim_lab.world.store.get("clusterpolicies.nvidia.com", "cluster-policy")
    assert policy["spec"]["devicePlugin"]["enabled"] is True
    report = json.loads((result.report_dir / "report.json").read_text())
    assert report["states"]["recovered"]["device-plugin DaemonSet"] == "NotFound"
    assert not report["result"]["ok"]
