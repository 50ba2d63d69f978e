"""validator-gpu-busy on one rehearsal world: the validator's workload check with every GPU held.

A full run proves the rejected workload pod, the validator's wait and give-up as its source
logs them, the ClusterPolicy notReady, its traps and the recovery; the injected fault is seen
with the plain kubectl commands `scenario.show` prints and `scenario.revert --all` brings
`lab.status` back; a run killed right after its injection is undone from the journal alone.
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

NAME = "validator-gpu-busy"
# validator/main.go v25.3.4 :1195 and :1203, in logrus's text format
WAITING = re.compile(r'level=info msg="pod nvidia-device-plugin-validator-\w{5} is curently in '
                     r'Failed phase"')  # fmt: skip
GAVE_UP = re.compile(r'msg="Error: error validating plugin installation: gave up waiting for '
                     r'pod nvidia-device-plugin-validator-\w{5} to be available"')  # fmt: skip


def test_full_run_shows_the_rejected_workload_the_give_up_and_proves_recovery(sim_lab: SimLab):
    report = full_run_report(sim_lab.lab, NAME)

    seen = {check["name"]: check["seen"] for check in report["checks"]}
    rejected = next(text for name, text in seen.items() if "UnexpectedAdmissionError" in name)
    assert re.search(
        r"nvidia-device-plugin-validator-\w{5} on \S+ Failed, UnexpectedAdmissionError: Pod was "
        r"rejected: Allocate failed due to requested number of devices unavailable for "
        r"nvidia.com/gpu. Requested: 1, Available: 0, which is unexpected",
        rejected,
    ), rejected
    assert any(WAITING.search(text) for text in seen.values()), seen
    assert any(GAVE_UP.search(text) for text in seen.values()), seen
    policy = next(text for name, text in seen.items() if name.startswith("ClusterPolicy status"))
    assert "'notReady'" in policy and "state-operator-validation" in policy, policy
    fault = report["states"]["fault"]
    assert "notReady" in fault["ClusterPolicy status.state"]
    assert fault["pods holding a GPU"].count("gpu-holder-") == 2, fault
    assert fault["allocatable nvidia.com/gpu"].count(": 1") == 2, fault  # the GPUs are there
    recovered = report["states"]["recovered"]
    assert recovered["pods holding a GPU"].count("gpu-holder-") == 0
    left = [p["metadata"]["name"] for p in sim_lab.lab.snapshot("pods").objects("pods")]
    assert not [name for name in left if name.startswith("gpu-holder")], left


def test_kubectl_by_hand_shows_the_fault_and_revert_all_restores(sim_lab: SimLab, tmp_path: Path):
    look_by_hand_then_revert_all(sim_lab.lab, NAME, ROOT, tmp_path / "kube-cache")


def test_a_killed_run_is_reverted_from_the_journal(sim_lab: SimLab):
    killed_run_is_reverted_from_the_journal(sim_lab.lab, NAME, ROOT)
