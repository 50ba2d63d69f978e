"""toolkit-glibc-al2 on one rehearsal world: a GPU node on Amazon Linux 2 given toolkit 1.17.

A full run proves the symptoms (the node on AL2, the toolkit pod 1/1, the validator's
toolkit-validation refused with GLIBC_2.27 and StartError 128 in CrashLoopBackOff, the benign
symlink warnings, the write-up's CUDA_DRIVER_SKIP_DUPLICATE_LINKS changing nothing, the AL2023
node unaffected, the ClusterPolicy notReady) and the recovery; the plain kubectl look steps show
the fault; `ldd --version` on the node says 2.26; a run killed after its injection is undone
from the journal. Every test leaves the world ready.
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

NAME = "toolkit-glibc-al2"
GLIBC = (
    "/usr/local/nvidia/toolkit/nvidia-container-cli.real: /lib64/libc.so.6: version "
    "`GLIBC_2.27' not found (required by /usr/local/nvidia/toolkit/libnvidia-container.so.1)"
)


def test_full_run_shows_the_refused_start_and_recovers(sim_lab: SimLab):
    report = full_run_report(sim_lab.lab, NAME)

    seen = {check["name"]: check["seen"] for check in report["checks"] if check["held"]}
    assert any(GLIBC in text and "Error: failed to create containerd task" in text
               for text in seen.values()), seen  # fmt: skip
    assert any("last terminated StartError exit code 128" in t for t in seen.values()), seen
    assert any(
        re.search(
            r"Could not create symlink: symlink /dev/nvidia-caps/nvidia-cap(\d+) "
            r"/host-dev-char/243:\1: file exists",
            t,
        )
        for t in seen.values()
    ), seen
    assert any(t.startswith("CUDA_DRIVER_SKIP_DUPLICATE_LINKS=true; new pod ") and "with it" in t
               and GLIBC in t for t in seen.values()), seen  # fmt: skip
    fault = report["states"]["fault"]
    assert fault["GPU nodes on Amazon Linux 2"] == report["baseline"]["node"]
    assert fault["ClusterPolicy status.state"] == "notReady"
    recovered = report["states"]["recovered"]
    assert recovered["GPU nodes on Amazon Linux 2"] == "none"
    assert recovered["ClusterPolicy status.state"] == "ready"
    times = {c["phase"] + ": " + c["name"]: c["t"] for c in report["checks"]}
    print(f"{NAME} T+ (s): {times}")


def test_kubectl_shows_the_injected_fault_and_revert_all_restores_the_status(
    sim_lab: SimLab, tmp_path: Path
):
    look_by_hand_then_revert_all(sim_lab.lab, NAME, ROOT, tmp_path)


def test_a_run_killed_right_after_injection_is_reverted_from_the_journal(sim_lab: SimLab):
    killed_run_is_reverted_from_the_journal(sim_lab.lab, NAME, ROOT)
