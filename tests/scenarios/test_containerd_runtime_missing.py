"""containerd-runtime-missing: the ClusterPolicy names a runtime the nodes' containerd lacks.

On the shared rehearsal world (the real GPU Operator renders the operands, the world's kubelet
answers from each node's containerd runtimes): a full run shows the sandbox refusals as
containerd 2.2.4 words them, its traps, the alerts and the recovery; kubectl by hand shows the
fault and `scenario.revert --all` restores the status; a run killed after its injection is
undone from the journal. Without a lab: what a node's containerd has, and how kubelet's
Events read after many refusals.
"""

from __future__ import annotations

import re
from pathlib import Path

from lab_support import ROOT
from scenario_support import (
    SimLab,
    full_run_report,
    killed_run_is_reverted_from_the_journal,
    look_by_hand_then_revert_all,
)

from labs.sim.node.hardware import DEFAULT_RUNTIME_ANNOTATION
from labs.sim.node.sandbox import SandboxFailures, sandbox_error
from scenarios.containerd_runtime_missing import BEFORE, HANDLER

NAME = "containerd-runtime-missing"
# kubelet v1.35.4's Event around containerd 2.2.4's RunPodSandbox error, with its random id.
REFUSAL = re.compile(
    r"Failed to create pod sandbox: rpc error: code = Unknown desc = unable to get OCI runtime "
    rf'for sandbox "[0-9a-f]{{64}}": no runtime for "{HANDLER}" is configured'
)


def node_of(ami_default: str) -> dict:
    return {"metadata": {"annotations": {DEFAULT_RUNTIME_ANNOTATION: ami_default}}}


def test_a_gpu_node_has_nvidia_and_runc_a_system_node_only_runc():
    gpu_node, system_node = node_of("nvidia"), node_of("runc")
    assert sandbox_error("nvidia", gpu_node) is None
    assert sandbox_error("runc", gpu_node) is None
    assert sandbox_error("", system_node) is None  # no RuntimeClass: containerd's default
    refused = sandbox_error("nvidia", system_node)
    assert refused is not None
    assert re.fullmatch(
        r'rpc error: code = Unknown desc = unable to get OCI runtime for sandbox "[0-9a-f]{64}": '
        r'no runtime for "nvidia" is configured',
        refused,
    )
    again = sandbox_error("nvidia", system_node)
    assert again != refused, "each attempt is a new sandbox with a new id"


def test_from_the_tenth_refusal_in_ten_minutes_one_event_collects_the_rest():
    failures = SandboxFailures()
    said = [failures.message(f"error {n}", now=12.0 * n) for n in range(12)]
    assert [combined for _, combined in said] == [False] * 9 + [True] * 3
    assert said[0] == ("Failed to create pod sandbox: error 0", False)
    assert said[11][0] == "(combined from similar events): Failed to create pod sandbox: error 11"
    late = failures.message("error late", now=12.0 * 11 + 601)
    assert late == ("Failed to create pod sandbox: error late", False), "a quiet 10 minutes resets"


def test_full_run_shows_the_refused_sandboxes_the_traps_and_proves_recovery(sim_lab: SimLab):
    report = full_run_report(sim_lab.lab, NAME)

    seen = {check["name"]: check["seen"] for check in report["checks"]}
    refused = next(text for name, text in seen.items() if name.startswith("an operand pod Pending"))
    assert REFUSAL.search(refused), refused
    restarted = seen["the stuck pod, deleted, comes back and fails the same way (trap)"]
    assert REFUSAL.search(restarted.split("its successor", 1)[1]), restarted
    fault = report["states"]["fault"]
    assert fault["ClusterPolicy spec.operator.runtimeClass"] == HANDLER
    assert fault["ClusterPolicy status.state"] == "notReady"
    assert f"{HANDLER} ({HANDLER})" in fault["RuntimeClasses"]
    assert sorted(re.findall(r": (\d)", fault["allocatable nvidia.com/gpu"])) == ["0", "1"]
    baseline = report["states"]["baseline"]
    assert baseline["ClusterPolicy spec.operator.runtimeClass"] == "nvidia"
    assert HANDLER not in baseline["RuntimeClasses"]
    assert sim_lab.lab.record[BEFORE] == "nvidia", "the replaced value is noted for the revert"


def test_kubectl_shows_the_injected_fault_and_revert_all_restores_the_status(
    sim_lab: SimLab, tmp_path: Path
):
    look_by_hand_then_revert_all(sim_lab.lab, NAME, ROOT, tmp_path)


def test_a_run_killed_right_after_injection_is_reverted_from_the_journal(sim_lab: SimLab):
    killed_run_is_reverted_from_the_journal(sim_lab.lab, NAME, ROOT)
