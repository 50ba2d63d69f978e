"""operator-down, device-plugin-off-one-node and gpu-node-foreign-taint on one rehearsal world.

Each scenario: a full run proves its symptoms, traps and recovery; an injected fault is seen
with the plain kubectl commands `scenario.show` prints, and `scenario.revert --all` brings
`lab.status` back to what it was; a run killed right after its injection is undone from the
journal alone. Every test leaves the shared world ready again.
"""

from __future__ import annotations

import difflib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from scenario_support import (
    READY_TIMEOUT,
    SCENARIO_SPEED,
    SimLab,
    another_lab_record,
    quiet,
    read_until,
    wait_ready,
)
from tool_support import require_tool

import scenarios
from labs import status as lab_status
from labs.journal import INJECTED, REVERTED
from labs.kube import changes, gpu
from labs.run.contract import Step
from labs.run.engine import (
    ScenarioError,
    describe_scenario,
    inject_scenario,
    revert_scenarios,
    run_scenario,
)

REPO = Path(__file__).resolve().parent.parent
NAMES = ("operator-down", "device-plugin-off-one-node", "gpu-node-foreign-taint")
PINNED_PENDING = {
    "device-plugin-off-one-node": "0/4 nodes are available: 1 Insufficient nvidia.com/gpu, "
    "3 node(s) didn't match Pod's node affinity/selector.",
    "gpu-node-foreign-taint": "0/4 nodes are available: 1 node(s) had untolerated taint(s), "
    "3 node(s) didn't match Pod's node affinity/selector.",
}


@pytest.fixture
def sim_lab(world_lab: SimLab, tmp_path: Path) -> SimLab:
    """A fresh lab record (empty journal, no runs) on the shared, ready world."""
    fresh = another_lab_record(world_lab, tmp_path / "state")
    wait_ready(fresh.lab)
    return fresh


def status_text(lab: Any) -> str:
    """What `invoke lab.status` prints for the lab."""
    return lab_status.render(lab_status.gather(lab))


def status_returns_to(lab: Any, before: str) -> None:
    """Wait (bounded) until `lab.status` reads as `before`; fail showing the difference."""
    deadline = time.monotonic() + READY_TIMEOUT
    while (after := status_text(lab)) != before:
        if time.monotonic() > deadline:
            diff = difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="")
            pytest.fail("lab.status differs from before:\n" + "\n".join(diff))
        time.sleep(0.1)


def shown_steps(name: str) -> list[Step]:
    """The `$ command` / `shows:` pairs of the look section `scenario.show NAME` prints."""
    lines = describe_scenario(scenarios.get(name)).splitlines()
    look = lines[lines.index("  look (while the fault is in):") + 1 : lines.index("  revert:")]
    commands = [line.strip().removeprefix("$ ") for line in look if line.strip().startswith("$ ")]
    shows = [line.strip().removeprefix("shows: ") for line in look if "shows: " in line]
    assert len(commands) == len(shows) > 3, look
    return [Step(command, shown) for command, shown in zip(commands, shows, strict=True)]


@pytest.mark.parametrize("name", NAMES)
def test_full_run_shows_the_fault_its_traps_and_proves_recovery(sim_lab: SimLab, name: str):
    result = run_scenario(sim_lab.lab, scenarios.get(name), out=quiet)

    assert result.ok, result.failed_checks
    report = json.loads((result.report_dir / "report.json").read_text())
    assert report["states"]["recovered"] == report["states"]["baseline"]
    assert all(trap["observed"] for trap in report["traps"]), report["traps"]
    seen = {check["name"]: check["seen"] for check in report["checks"]}
    if name in PINNED_PENDING:
        assert any(text.startswith(f"gpu-probe-pinned Pending: {PINNED_PENDING[name]}")
                   for text in seen.values()), seen  # fmt: skip
        fault = report["states"]["fault"]["allocatable nvidia.com/gpu"]
        node = report["baseline"]["node"]
        assert f"{node}: 0" in fault and fault.count(": 1") == 1
    else:
        assert (
            "spec.replicas 0, 0/0 available, 0 pod(s)" in report["states"]["fault"]["gpu-operator"]
        )
        pending = "the pending edit took effect: gpu-feature-discovery env matches the spec again"
        assert seen[pending] == "gpu-feature-discovery env {}"
    assert [e["state"] for e in sim_lab.lab.journal.entries()] == [REVERTED]


@pytest.mark.parametrize("name", NAMES)
def test_kubectl_shows_the_injected_fault_and_revert_all_restores_the_status(
    sim_lab: SimLab, name: str, tmp_path: Path
):
    lab = sim_lab.lab
    require_tool("kubectl")  # the steps run plain `kubectl` from PATH, as a person would
    before = status_text(lab)
    inject_scenario(lab, scenarios.get(name), out=quiet)
    env = {**os.environ, "KUBECONFIG": str(lab.paths.kubeconfig), "KUBECACHEDIR": str(tmp_path)}

    for step in shown_steps(name):
        run = subprocess.run(["bash", "-c", step.command], cwd=REPO, env=env,
                             capture_output=True, text=True, timeout=60)  # fmt: skip
        assert step.shows in run.stdout + run.stderr, (step.command, run.stdout, run.stderr)

    assert f"injected faults: {name}" in status_text(lab)
    assert revert_scenarios(lab, scenarios.all_scenarios(), None, out=quiet) == [name]
    wait_ready(lab)
    status_returns_to(lab, before)


CHILD = """
import sys, time
import scenarios
from labs.run.engine import run_scenario
from labs.lab import Lab
from labs.settings import load_settings

settings = load_settings(None, {"lab": sys.argv[1], "state_dir": sys.argv[2], "speed": sys.argv[3]})

def out(line):
    print(line, flush=True)
    if "symptom:" in line:  # the fault is in: hang here until killed
        print("INJECTED", flush=True)
        time.sleep(600)

run_scenario(Lab.open(settings), scenarios.get(sys.argv[4]), out=out)
"""


@pytest.mark.parametrize("name", NAMES)
def test_a_run_killed_right_after_injection_is_reverted_from_the_journal(
    sim_lab: SimLab, name: str
):
    lab = sim_lab.lab
    before = status_text(lab)
    args = [lab.name, str(lab.settings.state_dir), str(SCENARIO_SPEED), name]
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, *args], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        read_until(child.stdout, "INJECTED", timeout=90)
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=30)
    assert [e["state"] for e in lab.journal.entries()] == [INJECTED]

    assert revert_scenarios(lab, scenarios.all_scenarios(), None, out=quiet) == [name]
    wait_ready(lab)
    status_returns_to(lab, before)
    assert [e["state"] for e in lab.journal.entries()] == [REVERTED]


def test_a_lab_already_tainted_is_refused_before_anything_is_injected(sim_lab: SimLab):
    lab = sim_lab.lab
    node = sorted(gpu.name_of(n) for n in gpu.gpu_nodes(lab.snapshot("nodes")))[0]
    changes.taint_node(lab, node, "maintenance", "true", "NoExecute")
    try:
        with pytest.raises(ScenarioError, match="already carries maintenance:NoExecute"):
            run_scenario(lab, scenarios.get("gpu-node-foreign-taint"), out=quiet)
        assert lab.journal.entries() == []
    finally:
        assert changes.untaint_nodes(lab, "maintenance", "NoExecute") == [node]
    wait_ready(lab)
