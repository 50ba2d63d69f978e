"""The workload and capacity scenarios on one rehearsal world: a pod spec or the GPU count is
wrong, nothing in the cluster is broken.

Each: a full run proves its symptoms, traps and recovery with the scheduler's message in the
1.35 format; the injected fault is seen with the plain kubectl (and aws) commands
`scenario.show` prints, and `scenario.revert --all` brings `lab.status` back; a run killed
right after its injection is undone from the journal alone. Every test leaves the world ready.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from lab_support import ROOT
from scenario_support import (
    SimLab,
    full_run_report,
    killed_run_is_reverted_from_the_journal,
    look_by_hand_then_revert_all,
)

NAMES = (
    "missing-toleration",
    "missing-gpu-limit",
    "mig-on-a10g",
    "runtimeclass-missing",
    "gpus-scaled-to-zero",
)
NOT_HELPFUL = (
    "no new claims to deallocate, "
    "preemption: 0/{n} nodes are available: {n} Preemption is not helpful for scheduling."
)
A10G = "'NVIDIA A10G, 580.126.09, 23028 MiB' (baseline 'NVIDIA A10G, 580.126.09, 23028 MiB')"
# What each run's checks must have seen: the scheduler's whole message (Kubernetes 1.35
# wording, reasons counted and sorted as strings), the API's refusal, what pods printed.
SEEN = {
    "missing-toleration": [
        "gpu-node-agent Pending: 0/4 nodes are available: 2 node(s) didn't match Pod's node "
        "affinity/selector, 2 node(s) had untolerated taint(s). " + NOT_HELPFUL.format(n=4),
        # DefaultTolerationSeconds adds the two NoExecute tolerations, ExtendedResourceToleration
        # the GPU's.
        'gpu-probe tolerations [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", '
        '"effect": "NoExecute", "tolerationSeconds": 300}, {"key": '
        '"node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", '
        '"tolerationSeconds": 300}, {"key": "nvidia.com/gpu", "operator": "Exists", '
        '"effect": "NoSchedule"}]',
        A10G,
    ],
    "missing-gpu-limit": [
        "'sh: 1: nvidia-smi: not found', exit code 127",
        A10G,
        "allocatable nvidia.com/gpu 1; gpu-probe-on-gpu-node requests None",
    ],
    "mig-on-a10g": [
        "gpu-probe Pending: 0/4 nodes are available: 4 Insufficient nvidia.com/mig-1g.5gb. "
        + NOT_HELPFUL.format(n=4),
        '"false NVIDIA-A10G"',
    ],
    "runtimeclass-missing": [
        'FailedCreate: Error creating: pods "gpu-probe-',
        '-" is forbidden: pod rejected: RuntimeClass "nvidia-container-runtime" not found',
        "gpu-probe pods: none; Deployment 0/1 available",
    ],
    "gpus-scaled-to-zero": [
        "gpu-probe Pending: 0/2 nodes are available: 2 Insufficient nvidia.com/gpu. "
        + NOT_HELPFUL.format(n=2),
        "gpu-probe Succeeded; events: FailedScheduling",
        A10G,
    ],
}


@pytest.mark.parametrize("name", NAMES)
def test_full_run_shows_the_fault_its_traps_and_proves_recovery(sim_lab: SimLab, name: str):
    report = full_run_report(sim_lab.lab, name)

    seen = [check["seen"] for check in report["checks"]]
    for fragment in SEEN[name]:
        assert any(fragment in text for text in seen), (fragment, seen)


@pytest.mark.parametrize("name", NAMES)
def test_kubectl_shows_the_injected_fault_and_revert_all_restores_the_status(
    sim_lab: SimLab, name: str, tmp_path: Path
):
    look_by_hand_then_revert_all(sim_lab.lab, name, ROOT, tmp_path)


@pytest.mark.parametrize("name", ["gpus-scaled-to-zero"])
def test_a_run_killed_right_after_injection_is_reverted_from_the_journal(
    sim_lab: SimLab, name: str
):
    killed_run_is_reverted_from_the_journal(sim_lab.lab, name, ROOT)


def test_pods_refused_at_admission_and_replaced_do_not_hold_back_the_recovery() -> None:
    """A Deployment's GPU pods that the kubelet refused at admission (created while the device
    plugin re-registered) are replaced by its ReplicaSet: the workload runs again once one pod
    runs. A bare pod so refused, or one that failed running, is still stuck."""
    from typing import cast

    from labs.kube.view import ClusterView, Snapshot
    from labs.lab import Lab
    from labs.run.contract import Context
    from scenarios._workload import PROBE, SCENARIO_LABEL, fault_tag, runs_again

    name = "runtimeclass-missing"
    owner = [{"kind": "ReplicaSet", "name": f"{PROBE}-899c978f7", "controller": True}]

    def pod(suffix: str, phase: str, reason: str = "", owned: bool = True) -> dict:
        labels = {"app": PROBE, SCENARIO_LABEL: fault_tag(name)}
        meta = {"name": f"{PROBE}-{suffix}", "namespace": "default", "labels": labels}
        if owned:
            meta["ownerReferences"] = owner
        return {"metadata": meta, "status": {"phase": phase, "reason": reason}}

    def verdict(*pods: dict) -> tuple[bool, str]:
        view = cast(ClusterView, Snapshot({"pods": list(pods)}))
        return runs_again(name).condition(Context(cast(Lab, None), view))

    running = pod("x54qq", "Running")
    refused = [pod(s, "Failed", "UnexpectedAdmissionError") for s in ("56tf7", "b8n7v")]
    held, seen = verdict(running, *refused)
    assert held, seen
    assert "refused at admission and replaced: 2" in seen and "56tf7" not in seen
    assert not verdict(running, pod("bare", "Failed", "UnexpectedAdmissionError", owned=False))[0]
    assert not verdict(running, pod("crashed", "Failed", "Error"))[0]
    assert not verdict(*refused)[0]  # nothing ran yet
