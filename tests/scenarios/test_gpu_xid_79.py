"""gpu-xid-79 on one rehearsal world: a GPU fallen off the bus, and its node replaced.

A full run proves the symptoms (the device plugin's Xid line, capacity 1 with allocatable 0,
the node monitoring agent's condition, dcgm-exporter's XID metric, everything else green) and a
recovery on a new node; the plain kubectl look steps show the fault (nvidia-smi in a pod with
the GPU says it is lost); restarting the device plugin, the wrong fix, gives nothing back; a
run killed after its injection is undone from the journal. Every test leaves the world ready.
"""

from __future__ import annotations

import time
from pathlib import Path

from lab_support import ROOT
from scenario_support import (
    SimLab,
    full_run_report,
    killed_run_is_reverted_from_the_journal,
    look_by_hand_then_revert_all,
    quiet,
    wait_ready,
)

import scenarios
from labs.kube import gpu, rest
from labs.kube.logs import pod_log
from labs.kube.resources import PODS
from labs.run.engine import inject_scenario, revert_scenarios

NAME = "gpu-xid-79"
XID_LINE = "XidCriticalError: Xid=79 on Device=GPU-"
RESTARTED = "error getting device handle for index '0': GPU is lost"


def plugin_on(lab, node: str) -> dict | None:
    pods = rest.get_items(lab.kube, PODS.path(lab.operator_namespace),
                          query={"labelSelector": f"app={gpu.DEVICE_PLUGIN_DAEMONSET}",
                                 "fieldSelector": f"spec.nodeName={node}"})  # fmt: skip
    return pods[0] if pods else None


def test_full_run_shows_the_lost_gpu_and_recovers_on_a_new_node(sim_lab: SimLab):
    report = full_run_report(sim_lab.lab, NAME)

    seen = {check["name"]: check["seen"] for check in report["checks"] if check["held"]}
    node = report["baseline"]["node"]
    assert any(XID_LINE in text for text in seen.values()), seen
    assert any("NvidiaXID79Error: detected XID-79 on the instance" in t for t in seen.values())
    assert any(t.startswith("DCGM_FI_DEV_XID_ERRORS{UUID=GPU-") and t.endswith(" 79")
               for t in seen.values()), seen  # fmt: skip
    fault = report["states"]["fault"]
    assert fault["GPU nodes advertising nvidia.com/gpu 1"] == "1 of 2"
    assert fault["GPU nodes with AcceleratedHardwareReady=False"] == "1"
    assert fault["ClusterPolicy status.state"] == "ready"
    names = [gpu.name_of(n) for n in gpu.gpu_nodes(sim_lab.lab.snapshot("nodes"))]
    assert node not in names and len(names) == 2, "the node was replaced by a new one"
    times = {c["phase"] + ": " + c["name"]: c["t"] for c in report["checks"]}
    print(f"{NAME} T+ (s): {times}")


def test_kubectl_shows_the_injected_fault_and_revert_all_restores_the_status(
    sim_lab: SimLab, tmp_path: Path
):
    look_by_hand_then_revert_all(sim_lab.lab, NAME, ROOT, tmp_path)


def test_restarting_the_device_plugin_gives_nothing_back(sim_lab: SimLab):
    """The wrong fix: the new plugin cannot get a handle for the lost GPU and crash-loops;
    the node still offers no GPU and still reports the Xid."""
    lab = sim_lab.lab
    inject_scenario(lab, scenarios.get(NAME), out=quiet, speed=lab.speed, confirm=lambda _q: True)
    try:
        node = sorted(gpu.name_of(n) for n in gpu.gpu_nodes(lab.snapshot("nodes")))[0]
        old = plugin_on(lab, node)
        assert old is not None
        assert XID_LINE in pod_log(lab, lab.operator_namespace, old["metadata"]["name"])
        rest.delete(lab.kube, PODS.path(lab.operator_namespace, old["metadata"]["name"]))
        deadline, new = time.monotonic() + 60, None
        while time.monotonic() < deadline:
            new = plugin_on(lab, node)
            statuses = gpu.container_statuses(new) if new else []
            waiting = [(s.get("state") or {}).get("waiting", {}).get("reason") for s in statuses]
            if (
                new
                and new["metadata"]["uid"] != old["metadata"]["uid"]
                and ("CrashLoopBackOff" in waiting)
            ):
                break
            time.sleep(0.5)
        else:
            raise AssertionError(f"the restarted plugin did not crash-loop: {new}")
        log = pod_log(lab, lab.operator_namespace, new["metadata"]["name"])
        assert RESTARTED in log and XID_LINE not in log, log
        found = lab.snapshot("nodes").find("nodes", node) or {}
        assert gpu.gpu_quantity(found) == "0", found.get("status")
        assert scenarios.get(NAME).detect(lab, lab.snapshot("nodes"))
    finally:
        assert revert_scenarios(lab, scenarios.all_scenarios(), None, out=quiet) == [NAME]
    wait_ready(lab)


def test_a_run_killed_right_after_injection_is_reverted_from_the_journal(sim_lab: SimLab):
    killed_run_is_reverted_from_the_journal(sim_lab.lab, NAME, ROOT)
