"""device-plugin-config-missing on a rehearsal world, and the kubelet's init containers and crash
loops it stands on.

The kubelet tests run pods of their own: init containers in order, one that fails crash-loops
with the kubelet's back-off (`Init:CrashLoopBackOff` in `kubectl get pods`, its log with
`-c`, `--previous`, the BackOff Event in `kubectl describe`), fails a restartPolicy Never pod
for good, and a long-running container whose program exits crash-loops its pod. The scenario
tests: a full run proves its symptoms, traps and recovery; kubectl by hand shows the fault and
`scenario.revert --all` restores the status; a run killed after its injection is reverted from
the journal. Every test leaves the shared world ready again.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from lab_support import ROOT
from scenario_support import (
    SimLab,
    full_run_report,
    killed_run_is_reverted_from_the_journal,
    look_by_hand_then_revert_all,
)
from sim_support import wait_for
from tool_support import require_tool

from labs.kube import gpu
from labs.kube.resources import CONFIG_MAPS, NODES, PODS
from labs.kube.view import WORKLOAD_NAMESPACE
from labs.sim.controllers.kubelet import crash_backoff
from labs.sim.node.programs import go_duration
from scenarios import device_plugin_config_missing as scenario

NAME = "device-plugin-config-missing"
PLUGIN_IMAGE = "nvcr.io/nvidia/k8s-device-plugin:v0.17.4"


def kubectl(sim_lab: SimLab, *args: str) -> subprocess.CompletedProcess[str]:
    require_tool("kubectl")
    env = {**os.environ, "KUBECONFIG": str(sim_lab.lab.paths.kubeconfig)}
    return subprocess.run(["kubectl", "-n", WORKLOAD_NAMESPACE, *args], env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip


def gpu_node(sim_lab: SimLab) -> str:
    return sorted(gpu.name_of(n) for n in gpu.gpu_nodes(sim_lab.lab.snapshot("nodes")))[0]


def a_pod(name: str, node: str, init: list[dict], containers: list[dict], **spec) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": WORKLOAD_NAMESPACE},
        "spec": {"nodeName": node, "initContainers": init, "containers": containers, **spec},
    }


def shell(name: str, script: str) -> dict:
    return {"name": name, "image": "busybox:1.36", "command": ["sh", "-c", script]}


def config_manager(name: str, oneshot: bool) -> dict:
    """config-manager as the GPU Operator v25.3.4 renders it, its configs from `configs`."""
    env = {"ONESHOT": str(oneshot).lower(), "KUBECONFIG": "", "NODE_LABEL": scenario.LABEL,
           "CONFIG_FILE_SRCDIR": "/available-configs", "CONFIG_FILE_DST": "/config/config.yaml",
           "DEFAULT_CONFIG": "", "FALLBACK_STRATEGIES": "empty"}  # fmt: skip
    return {
        "name": name,
        "image": PLUGIN_IMAGE,
        "command": ["config-manager"],
        "env": [
            *({"name": k, "value": v} for k, v in env.items()),
            {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        ],
        "volumeMounts": [{"name": "configs", "mountPath": "/available-configs"}],
    }


def with_configs(sim_lab: SimLab, pod: dict, keys: list[str]) -> dict:
    store = sim_lab.world.store
    configmap = {"metadata": {"name": f"{pod['metadata']['name']}-configs"},
                 "data": {key: scenario.TIME_SLICING for key in keys}}  # fmt: skip
    store.create(CONFIG_MAPS, configmap, WORKLOAD_NAMESPACE)
    volume = {"name": "configs", "configMap": {"name": configmap["metadata"]["name"]}}
    pod["spec"]["volumes"] = [volume]
    return pod


def set_label(sim_lab: SimLab, node: str, value: str | None) -> None:
    def apply(current: dict) -> None:
        labels = current["metadata"].setdefault("labels", {})
        if value is None:
            labels.pop(scenario.LABEL, None)
        else:
            labels[scenario.LABEL] = value

    sim_lab.world.store.update(NODES, node, apply)


def status(sim_lab: SimLab, name: str) -> dict:
    return sim_lab.world.store.get(PODS, name, WORKLOAD_NAMESPACE).get("status") or {}


def init_named(pod_status: dict, name: str) -> dict:
    statuses = pod_status.get("initContainerStatuses") or []
    return next((s for s in statuses if s["name"] == name), {})


def remove(sim_lab: SimLab, *names: str) -> None:
    kubectl(sim_lab, "delete", "pod", "--ignore-not-found", "--wait=false", *names)
    kubectl(sim_lab, "delete", "configmap", "--ignore-not-found", *[f"{n}-configs" for n in names])


def test_init_containers_run_in_order_then_the_pod_runs(sim_lab: SimLab):
    node = gpu_node(sim_lab)
    pod = a_pod("init-ok", node, [shell("first", "echo one"), shell("second", "echo two")],
                [shell("main", "echo main")], restartPolicy="Never")  # fmt: skip
    sim_lab.world.store.create(PODS, pod, WORKLOAD_NAMESPACE)
    try:
        wait_for(lambda: status(sim_lab, "init-ok").get("phase") == "Succeeded", timeout=60)
        done = status(sim_lab, "init-ok")
        for name in ("first", "second"):
            entry = init_named(done, name)
            assert entry["state"]["terminated"]["exitCode"] == 0 and entry["ready"], entry
        assert kubectl(sim_lab, "logs", "init-ok", "-c", "second").stdout == "two\n"
        assert kubectl(sim_lab, "logs", "init-ok").stdout == "main\n"
    finally:
        remove(sim_lab, "init-ok")


def test_a_failing_init_container_crash_loops_with_the_kubelets_back_off(sim_lab: SimLab):
    node = gpu_node(sim_lab)
    pod = a_pod("init-loop", node, [shell("first", "echo fine"), shell("broken", "echo no; false")],
                [shell("main", "echo never")])  # fmt: skip
    sim_lab.world.store.create(PODS, pod, WORKLOAD_NAMESPACE)
    try:
        wait_for(lambda: init_named(status(sim_lab, "init-loop"), "broken").get("restartCount", 0)
                 >= 2, timeout=60)  # fmt: skip
        listed = kubectl(sim_lab, "get", "pod", "init-loop", "--no-headers").stdout.split()
        assert listed[2] == "Init:CrashLoopBackOff", listed
        assert int(listed[3]) >= 2, listed  # the init container's restarts are the pod's
        current = status(sim_lab, "init-loop")
        broken = init_named(current, "broken")
        assert broken["lastState"]["terminated"]["exitCode"] == 1
        uid = sim_lab.world.store.get(PODS, "init-loop", WORKLOAD_NAMESPACE)["metadata"]["uid"]
        backoff = go_duration(crash_backoff(broken["restartCount"]))
        assert broken["state"]["waiting"] == {
            "reason": "CrashLoopBackOff",
            "message": f"back-off {backoff} restarting failed container=broken "
            f"pod=init-loop_{WORKLOAD_NAMESPACE}({uid})",
        }
        assert current["phase"] == "Pending"
        initialized = next(c for c in current["conditions"] if c["type"] == "Initialized")
        assert initialized["status"] == "False"
        assert initialized["message"] == "containers with incomplete status: [broken]"
        assert current["containerStatuses"][0]["state"]["waiting"]["reason"] == "PodInitializing"
        assert kubectl(sim_lab, "logs", "init-loop", "-c", "broken").stdout == "no\n"
        assert kubectl(sim_lab, "logs", "init-loop", "-c", "broken", "--previous").stdout == "no\n"
        described = kubectl(sim_lab, "describe", "pod", "init-loop").stdout
        assert "Back-off restarting failed container broken in pod init-loop_" in described
        assert "Exit Code:    1" in described
        first = init_named(current, "first")
        assert first["restartCount"] == 0, "a done init container is not run again"
    finally:
        remove(sim_lab, "init-loop")


def test_a_failing_init_container_fails_a_never_restarted_pod(sim_lab: SimLab):
    pod = a_pod("init-error", gpu_node(sim_lab), [shell("broken", "false")],
                [shell("main", "echo never")], restartPolicy="Never")  # fmt: skip
    sim_lab.world.store.create(PODS, pod, WORKLOAD_NAMESPACE)
    try:
        wait_for(lambda: status(sim_lab, "init-error").get("phase") == "Failed", timeout=60)
        listed = kubectl(sim_lab, "get", "pod", "init-error", "--no-headers").stdout.split()
        assert listed[2] == "Init:Error", listed
    finally:
        remove(sim_lab, "init-error")


def test_config_manager_picks_the_labelled_config_or_fails_naming_it(sim_lab: SimLab):
    node = gpu_node(sim_lab)
    pod = with_configs(sim_lab, a_pod("cm-init", node, [config_manager("cm", oneshot=True)],
                                      [shell("main", "echo started")]), ["a10g"])  # fmt: skip
    set_label(sim_lab, node, "a10g-24gb")
    try:
        sim_lab.world.store.create(PODS, pod, WORKLOAD_NAMESPACE)
        wait_for(lambda: init_named(status(sim_lab, "cm-init"), "cm").get("restartCount", 0) >= 1,
                 timeout=60)  # fmt: skip
        lines = kubectl(sim_lab, "logs", "cm-init", "-c", "cm").stdout.splitlines()
        assert lines[0].startswith("W") and lines[0].endswith(
            "1 client_config.go:659] Neither --kubeconfig nor --master was specified.  "
            "Using the inClusterConfig.  This might not work."
        ), lines
        assert lines[2].endswith(f"main.go:248] Label change detected: {scenario.LABEL}=a10g-24gb")
        assert lines[-1].startswith("E") and lines[-1].endswith(
            "main.go:208] specified config a10g-24gb does not exist"
        ), lines
        set_label(sim_lab, node, "a10g")  # the right label: the next restart gets through
        wait_for(lambda: status(sim_lab, "cm-init").get("phase") == "Running", timeout=60)
        lines = kubectl(sim_lab, "logs", "cm-init", "-c", "cm").stdout.splitlines()
        assert lines[-1].endswith("main.go:319] Successfully updated to config: a10g"), lines
    finally:
        set_label(sim_lab, node, None)
        remove(sim_lab, "cm-init")


def test_a_long_running_program_that_exits_crash_loops_its_pod(sim_lab: SimLab):
    node = gpu_node(sim_lab)
    pod = with_configs(sim_lab, a_pod("cm-sidecar", node, [],
                                      [config_manager("sidecar", oneshot=False)]), [])  # fmt: skip
    try:
        sim_lab.world.store.create(PODS, pod, WORKLOAD_NAMESPACE)

        def listed() -> list[str]:
            row = kubectl(sim_lab, "get", "pod", "cm-sidecar", "--no-headers").stdout.split()
            return row if row[1:3] == ["0/1", "CrashLoopBackOff"] and int(row[3]) >= 1 else []

        # the back-off doubles: the pod is soon seen waiting between two runs
        assert wait_for(listed, timeout=60)
        log = kubectl(sim_lab, "logs", "cm-sidecar").stdout
        assert log.rstrip().endswith("main.go:208] no configuration files available"), log
    finally:
        remove(sim_lab, "cm-sidecar")


def test_a_long_running_program_that_runs_leaves_its_pod_ready(sim_lab: SimLab):
    node = gpu_node(sim_lab)
    pod = with_configs(
        sim_lab, a_pod("cm-ok", node, [], [config_manager("sidecar", oneshot=False)]), ["a10g"]
    )
    try:
        sim_lab.world.store.create(PODS, pod, WORKLOAD_NAMESPACE)
        wait_for(lambda: any(c["type"] == "Ready" and c["status"] == "True"
                             for c in status(sim_lab, "cm-ok").get("conditions") or []),
                 timeout=60)  # fmt: skip
        log = kubectl(sim_lab, "logs", "cm-ok").stdout.splitlines()
        assert log[-2].endswith("main.go:312] Already configured. Skipping update..."), log
        assert log[-1].endswith(f"main.go:246] Waiting for change to '{scenario.LABEL}' label")
    finally:
        remove(sim_lab, "cm-ok")


def test_full_run_shows_the_fault_its_traps_and_proves_recovery(sim_lab: SimLab):
    report = full_run_report(sim_lab.lab, NAME)
    seen = {check["name"]: check["seen"] for check in report["checks"]}
    node = report["baseline"]["node"]
    fault = report["states"]["fault"]["allocatable nvidia.com/gpu"]
    assert f"{node}: 0" in fault and fault.count(": 1") == 1, fault
    logged = seen[f"{scenario.INIT} log: `specified config {scenario.MISSING} does not exist`"]
    assert logged.startswith("E") and logged.endswith(
        f"main.go:208] specified config {scenario.MISSING} does not exist"
    ), logged


def test_kubectl_shows_the_injected_fault_and_revert_all_restores_the_status(
    sim_lab: SimLab, tmp_path: Path
):
    look_by_hand_then_revert_all(sim_lab.lab, NAME, ROOT, tmp_path)


def test_a_run_killed_right_after_injection_is_reverted_from_the_journal(sim_lab: SimLab):
    killed_run_is_reverted_from_the_journal(sim_lab.lab, NAME, ROOT)
    left = sim_lab.lab.snapshot("nodes")
    assert not [n for n in gpu.gpu_nodes(left) if gpu.label_of(n, scenario.LABEL)]
