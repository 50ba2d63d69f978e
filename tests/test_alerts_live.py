"""The lab's alert rules live in a rehearsal: the real Prometheus behind the monitoring release,
scraping the real kube-state-metrics, the operator's and dcgm-exporter's endpoints, read with
curl and kubectl through the API server as on EKS, and in `invoke lab.status`."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import yaml
from guard_support import cli_lab
from lab_support import invoke_env, run_invoke, until
from scenario_support import YES, SimLab, quiet
from tool_support import require_tool

import scenarios
from labs.aws.stack import MONITORING_NAMESPACE
from labs.kube.alerts import ALERTS_PATH, RULES_PATH
from labs.run.engine import inject_scenario, revert_scenarios
from labs.sim.controlplane.monitoring import MIN_FOR_SECONDS
from labs.sim.world import MONITORING_DIR

FAULT = "device-plugin-off"
CAUGHT = "GpuAllocatableZeroOnGpuNode"
NAIVE = "GpuAllocatableAbsentNaive"
TARGETS_PATH = ALERTS_PATH.removesuffix("/alerts") + "/targets"


def curl(lab_kubeconfig: Path, path: str, tmp_path: Path) -> dict[str, Any]:
    """`curl` of the API server at `path` with the lab kubeconfig's CA and token."""
    require_tool("curl")
    config = yaml.safe_load(lab_kubeconfig.read_text())
    cluster, user = config["clusters"][0]["cluster"], config["users"][0]["user"]
    ca = tmp_path / "ca.crt"
    ca.write_bytes(base64.b64decode(cluster["certificate-authority-data"]))
    answer = subprocess.run(
        ["curl", "-sS", "--fail-with-body", "--cacert", str(ca),
         "-H", f"Authorization: Bearer {user['token']}", f"{cluster['server']}{path}"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert answer.returncode == 0, answer.stdout + answer.stderr
    return dict(json.loads(answer.stdout))


def firing(answer: dict[str, Any]) -> list[str]:
    return sorted(
        a["labels"]["alertname"] for a in answer["data"]["alerts"] if a["state"] == "firing"
    )


def kubectl(lab: SimLab, *args: str) -> str:
    require_tool("kubectl")
    done = subprocess.run(
        ["kubectl", "--kubeconfig", str(lab.lab.paths.kubeconfig), *args],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_curl_lists_the_firing_alert_while_the_fault_is_in_and_lab_status_shows_it(
    sim_lab: SimLab, tmp_path: Path
) -> None:
    lab = sim_lab.lab
    env = invoke_env(lab.settings.state_dir)
    quiet_status = until(
        lambda: (
            (s := run_invoke("lab.status", "--lab", lab.name, env=env).stdout)
            and "alerts: none pending or firing" in s
            and s
        ),
        what="lab.status of a healthy monitored lab saying no alert fires",
    )
    assert "enable_monitoring=true" in quiet_status
    inject_scenario(lab, scenarios.get(FAULT), out=quiet, speed=lab.speed, confirm=YES)
    try:
        answer = until(lambda: (a := curl(lab.paths.kubeconfig, ALERTS_PATH, tmp_path))
                       and CAUGHT in firing(a) and a, what=f"{CAUGHT} firing")  # fmt: skip
        assert NAIVE not in firing(answer), "the naive absent() rule misses device-plugin-off"
        node = next(a["labels"]["node"] for a in answer["data"]["alerts"]
                    if a["labels"]["alertname"] == CAUGHT)  # fmt: skip
        assert node.endswith(".compute.internal")
        raw = json.loads(kubectl(sim_lab, "get", "--raw", ALERTS_PATH))
        assert CAUGHT in firing(raw)
        shown = run_invoke("lab.status", "--lab", lab.name, env=env).stdout
        assert f"firing   {CAUGHT}" in shown, shown
        assert f"GPU node {node} offers 0 nvidia.com/gpu" in shown, shown
    finally:
        assert revert_scenarios(lab, scenarios.all_scenarios(), None, out=quiet) == [FAULT]
    until(lambda: CAUGHT not in firing(curl(lab.paths.kubeconfig, ALERTS_PATH, tmp_path)),
          what=f"{CAUGHT} resolved after the revert")  # fmt: skip


def rule_durations(lab: SimLab) -> dict[str, float]:
    rules = json.loads(kubectl(lab, "get", "--raw", f"{RULES_PATH}?type=alert"))
    return {r["name"]: r["duration"] for g in rules["data"]["groups"] for r in g["rules"]}


def test_a_prometheusrule_applied_with_kubectl_is_evaluated_and_the_pace_retimes_every_for(
    sim_lab: SimLab, tmp_path: Path
) -> None:
    """What a person applies on EKS (a PrometheusRule) is what the rehearsal's Prometheus runs;
    each rule's `for:` is its real duration divided by the world's speed, never under a floor."""
    lab = sim_lab.lab
    speed = lab.speed  # the world's pace now (600)
    shown = kubectl(sim_lab, "-n", MONITORING_NAMESPACE, "get", "prometheusrules")
    assert "kube-prometheus-stack-gpu-alerts" in shown, shown
    mine = tmp_path / "mine.yaml"
    mine.write_text(yaml.safe_dump({
        "apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
        "metadata": {"name": "mine", "namespace": "default"},
        "spec": {"groups": [{"name": "mine", "rules": [
            {"alert": "MyRuleFires", "expr": "vector(1)", "for": "1m"}]}]},
    }))  # fmt: skip
    kubectl(sim_lab, "apply", "-f", str(mine))
    try:
        until(lambda: "MyRuleFires" in firing(json.loads(kubectl(
            sim_lab, "get", "--raw", ALERTS_PATH))), what="my rule firing")  # fmt: skip
        assert rule_durations(sim_lab)["GpuPodUnschedulable"] == MIN_FOR_SECONDS  # 0.5 s at 600x
        lab.backend.set_speed(lab, 60.0)
        until(lambda: rule_durations(sim_lab)["GpuPodUnschedulable"] == 5.0,
              what="for: 5m held for 5 s at speed 60")  # fmt: skip
    finally:
        lab.backend.set_speed(lab, speed)
        kubectl(sim_lab, "delete", "-f", str(mine))
    until(lambda: "MyRuleFires" not in (durations := rule_durations(sim_lab))
          and durations["GpuPodUnschedulable"] == MIN_FOR_SECONDS,
          what="my rule gone, the floor back at the tests' pace")  # fmt: skip


def test_practice_check_rules_says_whether_a_learners_rule_catches_the_hidden_fault(
    world_lab: SimLab, tmp_path: Path
) -> None:
    user = cli_lab(world_lab, tmp_path)
    gpus = 'kube_node_status_allocatable{resource="nvidia_com_gpu"}'
    rules = {"zero": ("LearnerZero", f"{gpus} == 0"), "naive": ("LearnerAbsent", f"absent({gpus})")}
    for key, (alert, expr) in rules.items():
        (tmp_path / f"{key}.yaml").write_text(
            yaml.safe_dump(
                {"groups": [{"name": key, "rules": [{"alert": alert, "expr": expr, "for": "2m"}]}]}
            )
        )
    (tmp_path / "empty.yaml").write_text("groups: []\n")
    start = user.invoke("practice.start", "--scenario", FAULT, "--speed", str(user.lab.speed),
                        "--yes")  # fmt: skip
    assert start.returncode == 0, start.stdout + start.stderr
    try:
        caught = user.invoke("practice.check", "--rules", str(tmp_path / "zero.yaml"))
        assert caught.returncode == 0, caught.stdout + caught.stderr
        assert "firing:  LearnerZero after" in caught.stdout, caught.stdout
        missed = user.invoke("practice.check", "--rules", str(tmp_path / "naive.yaml"))
        assert missed.returncode == 1, missed.stdout + missed.stderr
        assert "silent:  LearnerAbsent: its expression matched nothing" in missed.stdout
        assert FAULT not in caught.stdout + missed.stdout, "the hidden fault was named"
        bad = user.invoke("practice.check", "--rules", str(tmp_path / "empty.yaml"))
        assert bad.returncode != 0 and "has no `groups:` list" in bad.stderr, bad.stderr
        left = kubectl(world_lab, "get", "prometheusrules", "-A")
        assert "practice-rules" not in left, "a check leaves no rule behind"
    finally:
        assert user.invoke("practice.giveup").returncode == 0


def test_the_rehearsal_scrapes_what_the_chart_would(sim_lab: SimLab) -> None:
    """kube-state-metrics, the operator's metrics port and each dcgm-exporter pod, found through
    their Services' EndpointSlices and scraped at the pod IPs, all up."""
    wanted = [
        ("gpu-operator", "up"),
        ("kube-prometheus-stack-kube-state-metrics", "up"),
        ("nvidia-dcgm-exporter", "up"),
        ("nvidia-dcgm-exporter", "up"),
    ]

    def health() -> list[tuple[str, str]]:
        targets = json.loads(kubectl(sim_lab, "get", "--raw", TARGETS_PATH))
        return sorted((t["labels"]["job"], t["health"]) for t in targets["data"]["activeTargets"])

    until(lambda: health() == wanted, what=f"targets {wanted}")


def test_a_killed_prometheus_is_not_ready_said_by_status_and_started_again(
    sim_lab: SimLab,
) -> None:
    """As the kubelet has it: the pod 0/1 in CrashLoopBackOff with the killed run in lastState,
    lab.status naming Prometheus as what could not be read, then the program started again
    after the back-off and the pod Ready with one restart."""
    lab = sim_lab.lab
    config = sim_lab.world.kubeconfig_path.parent / MONITORING_DIR / "prometheus.yaml"
    [pid] = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()
             and f"--config.file={config}".encode() in _argv(p)]  # fmt: skip
    os.kill(pid, signal.SIGKILL)

    def container() -> dict[str, Any]:
        pod = json.loads(kubectl(sim_lab, "-n", MONITORING_NAMESPACE, "get", "pod", "-o", "json",
                                 "prometheus-kube-prometheus-stack-prometheus-0"))  # fmt: skip
        return dict(pod["status"]["containerStatuses"][0])

    crashed = until(lambda: (c := container()) and not c["ready"] and c, what="pod not Ready")
    assert crashed["state"] == {"waiting": {"reason": "CrashLoopBackOff"}}
    assert crashed["lastState"]["terminated"]["exitCode"] == 137
    status = run_invoke("lab.status", "--lab", lab.name, env=invoke_env(lab.settings.state_dir))
    assert "could not read Prometheus' alerts because Prometheus did not answer" in status.stdout

    back = until(lambda: (c := container()) and c["ready"] and c, timeout=120,
                 what="Prometheus started again")  # fmt: skip
    assert back["restartCount"] == 1 and "running" in back["state"]
    until(lambda: "data" in curl_free(sim_lab), what="Prometheus answering again")


def _argv(proc: Path) -> bytes:
    try:
        return (proc / "cmdline").read_bytes()
    except OSError:
        return b""


def curl_free(lab: SimLab) -> dict[str, Any]:
    """Prometheus' alerts through the API server's proxy, {} while it does not answer."""
    done = subprocess.run(
        ["kubectl", "--kubeconfig", str(lab.lab.paths.kubeconfig), "get", "--raw", ALERTS_PATH],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    return dict(json.loads(done.stdout)) if done.returncode == 0 else {}
