"""Every scenario on a rehearsal lab whose nodes run the real kubelet (`INVOKE_LAB_KUBELETS=real`),
one after the other through the command line as a person runs them: the symptoms, the debugging
path, the doctor's probable cause and the recovery come from kubelet v1.35.4's device manager,
admission and back-offs, the operator's real operand pods, the project's device plugin over the
device-plugin API and the runtime's NVIDIA prestart hook. The lab has monitoring: Prometheus and
kube-state-metrics run as the release's pods on the kubelets, and each scenario's declared alerts
must fire. The scenarios' probes are made again when a kubelet refuses them at admission.
A user without root runs the lab (`WITHOUT_ROOT`), so its nodes run rootless: each node's runtime
and kubelet as root of a user namespace of their own.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from controlplane_support import pids, rehearsals_under
from lab_support import WITHOUT_ROOT, cli_lab, run_invoke, sim_pid, until, whole_lab
from tool_support import require_tool

import scenarios
from labs.aws.stack import MONITORING_NAMESPACE
from labs.kube import gpu, probes, rest
from labs.kube.alerts import ALERTS_PATH, RULES_PATH
from labs.kube.resources import PODS
from labs.kube.view import WORKLOAD_NAMESPACE
from labs.lab import Lab
from labs.settings import REAL_KUBELETS, load_settings
from labs.sim.controlplane.monitoring import RULES_CONFIG_MAP

LAB = "rk1"
SPEED = "300"
GPU_NODES = 2  # what lab.up brings up
# The kubelet refreshes a mounted ConfigMap on its pod's next sync (syncFrequency 1m, jittered).
CONFIG_MAP_REFRESH = 180.0
TARGETS_PATH = ALERTS_PATH.removesuffix("/alerts") + "/targets"
PINNED, HOLDER = "gpu-probe-pinned", "gpu-holder"


@pytest.fixture(scope="module")
def lab_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    with cli_lab(
        tmp_path_factory.mktemp("rk"),
        LAB,
        SPEED,
        ("--yes",),  # no GPU time limit, confirmed: the runs' calendar outlasts even a week's
        WITHOUT_ROOT,
        INVOKE_LAB_KUBELETS=REAL_KUBELETS,
        INVOKE_LAB_MONITORING="true",
        INVOKE_LAB_TTL="off",
    ) as env:
        yield env


def invoke(
    env: dict[str, str], *args: str, timeout: float = 180
) -> subprocess.CompletedProcess[str]:
    """`invoke ARGS` as the lab's user, who has no root (`WITHOUT_ROOT`)."""
    return run_invoke(*args, env=env, timeout=timeout, user=WITHOUT_ROOT)


def kubectl(env: dict[str, str], *args: str) -> str:
    """`kubectl ARGS` with the kubeconfig lab.up wrote for the lab."""
    require_tool("kubectl")
    kubeconfig = Path(env["INVOKE_LAB_STATE_DIR"], LAB, "kubeconfig")
    done = subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), *args],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_the_monitoring_release_runs_as_pods_and_scrapes_every_target(
    lab_env: dict[str, str], tmp_path: Path
) -> None:
    """Prometheus and kube-state-metrics are the release's pods on the kubelets; Prometheus
    scrapes kube-state-metrics, the operator and each GPU node's dcgm-exporter by pod IP; a
    PrometheusRule applied with kubectl reaches it through the operator's ConfigMap, once the
    kubelet refreshes the mounted copy."""
    pods = json.loads(kubectl(lab_env, "-n", MONITORING_NAMESPACE, "get", "pods", "-o", "json"))
    statuses = {p["metadata"]["name"]: p["status"] for p in pods["items"]}
    prometheus = statuses["prometheus-kube-prometheus-stack-prometheus-0"]
    assert prometheus["phase"] == "Running", prometheus
    assert prometheus["containerStatuses"][0]["containerID"].startswith("containerd://")
    targets = json.loads(kubectl(lab_env, "get", "--raw", TARGETS_PATH))["data"]["activeTargets"]
    jobs = sorted(t["labels"]["job"] for t in targets if t["health"] == "up")
    assert jobs == [
        "gpu-operator", "kube-prometheus-stack-kube-state-metrics",
        *["nvidia-dcgm-exporter"] * GPU_NODES,
    ], targets  # fmt: skip
    rules = json.loads(kubectl(lab_env, "-n", MONITORING_NAMESPACE, "get", "configmap",
                               RULES_CONFIG_MAP, "-o", "json"))["data"]  # fmt: skip
    assert any("kube-prometheus-stack-gpu-alerts" in name for name in rules), list(rules)
    mine = tmp_path / "mine.yaml"
    mine.write_text(yaml.safe_dump({
        "apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
        "metadata": {"name": "mine", "namespace": "default"},
        "spec": {"groups": [{"name": "mine", "rules": [
            {"alert": "MyRuleLoads", "expr": "vector(1)", "for": "1m"}]}]},
    }))  # fmt: skip
    kubectl(lab_env, "apply", "-f", str(mine))
    try:
        until(lambda: "MyRuleLoads" in kubectl(lab_env, "get", "--raw", RULES_PATH),
              timeout=CONFIG_MAP_REFRESH, what="my rule loaded by the Prometheus pod")  # fmt: skip
    finally:
        kubectl(lab_env, "delete", "-f", str(mine))


def test_a_user_without_root_runs_the_lab_on_rootless_nodes(lab_env: dict[str, str]) -> None:
    """lab.up ran as a user without root: the rehearsal process is that user's (uid 1000 of its
    user namespace, root here), and every node's kubelet runs as root of a user namespace of
    the node's own, neither this process's nor the rehearsal's."""
    backend = sim_pid(Path(lab_env["INVOKE_LAB_STATE_DIR"]), LAB)
    assert Path(f"/proc/{backend}/uid_map").read_text().split() == ["1000", "0", "1"]
    home = lab_env["INVOKE_LAB_STATE_DIR"]
    kubelets = pids(lambda argv: Path(argv[0]).name == "kubelet" and any(home in a for a in argv))
    nodes = [
        n["metadata"]["name"]
        for n in json.loads(kubectl(lab_env, "get", "nodes", "-o", "json"))["items"]
    ]
    assert len(kubelets) == len(nodes) > GPU_NODES, (kubelets, nodes)
    spaces = {os.readlink(f"/proc/{pid}/ns/user") for pid in kubelets}
    outside = {os.readlink("/proc/self/ns/user"), os.readlink(f"/proc/{backend}/ns/user")}
    assert len(spaces) == len(kubelets) and not spaces & outside, (spaces, outside)


@pytest.mark.parametrize("name", list(scenarios.all_scenarios()))
def test_the_scenario_runs_and_recovers_on_real_kubelets(lab_env: dict[str, str], name: str):
    run = invoke(lab_env, "scenario.run", name, "--lab", LAB, "--yes", timeout=420)
    if run.returncode != 0:  # leave the next scenario a clean lab
        invoke(lab_env, "scenario.revert", "--all", "--lab", LAB)
    assert run.returncode == 0, f"{name}: {run.stdout[-4000:]}{run.stderr[-2000:]}"
    assert "result: OK" in run.stdout
    assert "recovered state equals the baseline" in run.stdout
    # the doctor, read while the fault was in, named the scenario's declared finding
    finding = scenarios.get(name).doctor_finding
    assert f"doctor: lab.doctor's probable cause is {finding}" in run.stdout, run.stdout[-4000:]


def test_the_tcp_check_resolves_the_server_to_the_ip_its_kubelet_reports(
    lab_env: dict[str, str],
) -> None:
    """The write-up's network control, applied with kubectl: each client prints the server's
    address as `kubectl get pod -o wide` shows it (the runtime gave it), and connects."""
    manifests = probes.PROBE_MANIFEST.parent
    kubectl(lab_env, "create", "configmap", "tcp-check",
            f"--from-file={manifests / 'tcp_check.py'}")  # fmt: skip
    kubectl(lab_env, "apply", "-f", str(manifests / "tcp-check.yaml"))
    clients = ("tcp-check-same-node", "tcp-check-cross-node")
    try:
        for client in clients:
            kubectl(lab_env, "wait", "--for=jsonpath={.status.phase}=Succeeded", f"pod/{client}",
                    "--timeout=180s")  # fmt: skip
        server_ip = kubectl(lab_env, "get", "pod", "tcp-check-server", "-o",
                            "jsonpath={.status.podIP}")  # fmt: skip
        for client in clients:
            said = kubectl(lab_env, "logs", client)
            assert f"resolved tcp-check-server.tcp-check to {server_ip}\n" in said, said
            assert f"connected to tcp-check-server.tcp-check:40000 ({server_ip})" in said, said
    finally:
        kubectl(lab_env, "delete", "-f", str(manifests / "tcp-check.yaml"), "--wait=true")
        kubectl(lab_env, "delete", "configmap", "tcp-check")


# --- the tool's probe against a kubelet that refuses it at admission ---------------------------
# The scheduler reads nodes through its own watch: just after a device plugin went, it can still
# bind a GPU pod to that node, whose kubelet then fails it (UnexpectedAdmissionError). That
# binding cannot be forced from outside, so these tests bind the probe themselves (spec.nodeName,
# as a stale scheduler would) to a node whose one GPU another pod holds: the refusal is the
# kubelet's device manager's.


@pytest.fixture
def held_node(lab_env: dict[str, str]) -> Iterator[tuple[Lab, str]]:
    """The lab, and a GPU node whose GPU a sleeping pod holds; the pods go afterwards."""
    until(lambda: whole_lab(lab_env, LAB, GPU_NODES), timeout=300,
          what="a healthy lab with both GPU nodes")  # fmt: skip
    settings = load_settings(None, {"lab": LAB, "state_dir": lab_env["INVOKE_LAB_STATE_DIR"]})
    lab = Lab.open(settings)
    node = gpu.name_of(gpu.gpu_nodes(lab.snapshot("nodes"))[0])
    holder = probes.load_probe(name=HOLDER, node=node)
    holder["spec"]["containers"][0]["command"] = ["sleep", "infinity"]
    rest.create(lab.kube, PODS.path(WORKLOAD_NAMESPACE), holder)
    try:
        until(lambda: gpu.pod_phase(lab.snapshot("pods"), HOLDER) == "Running", timeout=120,
              what=f"{HOLDER} Running on {node}")  # fmt: skip
        yield lab, node
    finally:
        kubectl(lab_env, "delete", "pod", HOLDER, PINNED, "--ignore-not-found", "--wait=true")


def bound_by_a_stale_scheduler(monkeypatch: pytest.MonkeyPatch, node: str, times: int) -> list[str]:
    """The first `times` probes made are bound straight to `node`; returns those bound."""
    load, bound = probes.load_probe, []

    def load_probe(*args: Any, **kwargs: Any) -> dict[str, Any]:
        pod = load(*args, **kwargs)
        if len(bound) < times:
            pod["spec"]["nodeName"] = node
            bound.append(pod["metadata"]["name"])
        return pod

    monkeypatch.setattr(probes, "load_probe", load_probe)
    return bound


def test_a_probe_refused_at_admission_is_made_again_and_waits_for_the_scheduler(
    held_node: tuple[Lab, str], monkeypatch: pytest.MonkeyPatch
):
    lab, node = held_node
    bound = bound_by_a_stale_scheduler(monkeypatch, node, times=1)

    uid = probes.recreate_admitted(lab, 120, name=PINNED, node=node)

    assert bound == [PINNED]
    objects = lab.snapshot("pods", "events")
    assert (gpu.pod(objects, PINNED) or {})["metadata"]["uid"] == uid  # the refused one replaced
    phase, events = gpu.pod_story(objects, PINNED)
    assert phase == "Pending", (phase, gpu.event_reasons(events))
    assert gpu.INSUFFICIENT_GPU in (gpu.scheduling_failure(events) or ""), events


def test_a_probe_refused_every_time_says_what_the_kubelet_said(
    held_node: tuple[Lab, str], monkeypatch: pytest.MonkeyPatch
):
    lab, node = held_node
    bound = bound_by_a_stale_scheduler(monkeypatch, node, times=probes.ADMISSION_ATTEMPTS)

    with pytest.raises(probes.ProbeError) as refused:
        probes.recreate_admitted(lab, 120, name=PINNED, node=node)

    assert bound == [PINNED] * probes.ADMISSION_ATTEMPTS
    message = str(refused.value)
    assert f"refused probe pod {PINNED} at admission {probes.ADMISSION_ATTEMPTS} times" in message
    assert "Requested: 1, Available: 0" in message, message
    found = gpu.pod(lab.snapshot("pods"), PINNED) or {}
    assert found["status"]["reason"] == gpu.ADMISSION_REJECTED, found.get("status")


# --- last: the lab killed -------------------------------------------------------------------


def test_kill_9_of_the_lab_leaves_no_program_running(lab_env: dict[str, str]):
    """Last in this module (it ends the lab): `kill -9` of the rehearsal process ends every
    program the lab started, Prometheus in its container's own root among them."""
    state_dir = Path(lab_env["INVOKE_LAB_STATE_DIR"])
    running = rehearsals_under(state_dir)
    assert any("prometheus --config.file" in line for line in running), running
    os.kill(sim_pid(state_dir, LAB), signal.SIGKILL)
    until(lambda: not rehearsals_under(state_dir), timeout=60,
          what="every program of the killed lab to end")  # fmt: skip
