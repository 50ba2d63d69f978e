"""The lab's alert rules live in a rehearsal: the real Prometheus behind the monitoring release,
scraping the real kube-state-metrics, the operator's and dcgm-exporter's endpoints, read with
curl and kubectl through the API server as on EKS, and in `invoke lab.status`."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import yaml
from guard_support import CliLab, cli_lab
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


def kubectl_done(lab: SimLab, *args: str) -> subprocess.CompletedProcess[str]:
    """`kubectl ARGS` with the lab's kubeconfig, whatever its exit code."""
    require_tool("kubectl")
    return subprocess.run(
        ["kubectl", "--kubeconfig", str(lab.lab.paths.kubeconfig), *args],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def kubectl(lab: SimLab, *args: str) -> str:
    done = kubectl_done(lab, *args)
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
        lab.backend.set_speed(lab, 10.0)
        until(lambda: rule_durations(sim_lab)["GpuPodUnschedulable"] == 30.0,
              what="for: 5m held for 30 s at speed 10")  # fmt: skip
    finally:
        lab.backend.set_speed(lab, speed)
        kubectl(sim_lab, "delete", "-f", str(mine))
    until(lambda: "MyRuleFires" not in (durations := rule_durations(sim_lab))
          and durations["GpuPodUnschedulable"] == MIN_FOR_SECONDS,
          what="my rule gone, the floor back at the tests' pace")  # fmt: skip


GPUS = 'kube_node_status_allocatable{resource="nvidia_com_gpu"}'
BAD_EXPR = f"sum({GPUS} =="  # an unclosed parenthesis
# promtool's words, and the operator's (rulefmt): the column is the end of the expression
PARSE_ERROR = f"could not parse expression: 1:{len(BAD_EXPR) + 1}: parse error: unclosed left"
ADMISSION = "kube-prometheus-stack-admission"


def rule_file(path: Path, *rules: tuple[str, str]) -> Path:
    """A Prometheus rule file of one group: each (alert, expr) with `for: 2m`."""
    group = {"name": path.stem, "rules": [{"alert": a, "expr": e, "for": "2m"} for a, e in rules]}
    path.write_text(yaml.safe_dump({"groups": [group]}))
    return path


def rule_object(path: Path, name: str, namespace: str, expr: str) -> Path:
    """A PrometheusRule manifest of one alert reading `expr`, as a person would apply."""
    path.write_text(yaml.safe_dump({
        "apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"groups": [{"name": name, "rules": [
            {"alert": "".join(w.title() for w in name.split("-")), "expr": expr, "for": "1m"}]}]},
    }))  # fmt: skip
    return path


def timed(user: CliLab, *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    done = user.invoke(*args)
    return done, time.monotonic() - started


def test_practice_check_rules_says_whether_a_learners_rule_catches_the_hidden_fault(
    world_lab: SimLab, tmp_path: Path
) -> None:
    """Each rule is decided as soon as Prometheus' account allows: firing, or silent once it
    was evaluated past its `for:` (with why: nothing matched, or the series it reads are not in
    Prometheus), so the check ends well before its old full wait (`for:` plus 90 s, never
    under 30 s in a rehearsal). The learner's rules live in their own object, and only theirs
    is removed."""
    user = cli_lab(world_lab, tmp_path)
    zero = rule_file(tmp_path / "zero.yaml", ("LearnerZero", f"{GPUS} == 0"))
    naive = rule_file(tmp_path / "naive.yaml", ("LearnerAbsent", f"absent({GPUS})"))
    typo = rule_file(tmp_path / "typo.yaml", ("LearnerTypo", "kube_node_allocatable_gpu == 0"))
    both = rule_file(tmp_path / "both.yaml", ("BothZero", f"{GPUS} == 0"),
                     ("BothAbsent", f"absent({GPUS})"))  # fmt: skip
    (tmp_path / "empty.yaml").write_text("groups: []\n")
    # another learner's rules on the same cluster: never replaced nor removed by this check
    theirs = rule_object(tmp_path / "theirs.yaml", "practice-rules-someone-else",
                         MONITORING_NAMESPACE, "vector(0) > 1")  # fmt: skip
    kubectl(world_lab, "apply", "-f", str(theirs))
    start = user.invoke("practice.start", "--scenario", FAULT, "--speed", str(user.lab.speed),
                        "--yes")  # fmt: skip
    assert start.returncode == 0, start.stdout + start.stderr
    try:
        caught, caught_s = timed(user, "practice.check", "--rules", str(zero))
        print(f"\npractice.check --rules zero.yaml: {caught_s:.1f} s wall\n{caught.stdout}")
        assert caught.returncode == 0, caught.stdout + caught.stderr
        assert "firing:  LearnerZero after" in caught.stdout, caught.stdout
        assert f"as PrometheusRule {MONITORING_NAMESPACE}/practice-rules-" in caught.stdout
        assert "decided in" in caught.stdout, caught.stdout

        missed, missed_s = timed(user, "practice.check", "--rules", str(naive))
        print(f"practice.check --rules naive.yaml: {missed_s:.1f} s wall\n{missed.stdout}")
        assert missed.returncode == 1, missed.stdout + missed.stderr
        held = max(120 / user.lab.speed, MIN_FOR_SECONDS)  # `for: 2m` as the world runs it
        assert (
            "silent:  LearnerAbsent: its expression matched nothing while the fault is in "
            f"(evaluated past its for: of {held:g} s, the series it reads are there)"
        ) in missed.stdout, missed.stdout

        absent, absent_s = timed(user, "practice.check", "--rules", str(typo))
        print(f"practice.check --rules typo.yaml: {absent_s:.1f} s wall\n{absent.stdout}")
        assert absent.returncode == 1, absent.stdout + absent.stderr
        assert (
            'silent:  LearnerTypo: the series it reads ({__name__="kube_node_allocatable_gpu"}) '
            "are not in Prometheus"
        ) in absent.stdout, absent.stdout

        mixed, mixed_s = timed(user, "practice.check", "--rules", str(both))
        print(f"practice.check --rules both.yaml: {mixed_s:.1f} s wall\n{mixed.stdout}")
        assert mixed.returncode == 0, mixed.stdout + mixed.stderr
        assert "firing:  BothZero after" in mixed.stdout, mixed.stdout
        assert "silent:  BothAbsent: its expression matched nothing" in mixed.stdout

        texts = caught.stdout + missed.stdout + absent.stdout + mixed.stdout
        assert FAULT not in texts, "the hidden fault was named"
        bad = user.invoke("practice.check", "--rules", str(tmp_path / "empty.yaml"))
        assert bad.returncode != 0 and "has no `groups:` list" in bad.stderr, bad.stderr
        left = kubectl(world_lab, "-n", MONITORING_NAMESPACE, "get", "prometheusrules", "-o",
                       "name")  # fmt: skip
        practice = sorted(line for line in left.split() if "practice-rules" in line)
        assert practice == ["prometheusrule.monitoring.coreos.com/practice-rules-someone-else"], (
            "a check leaves no rule of its own behind, and the other learner's in place"
        )
    finally:
        assert user.invoke("practice.giveup").returncode == 0
        kubectl(world_lab, "delete", "--ignore-not-found", "-f", str(theirs))


def test_a_prometheusrule_that_does_not_parse_is_refused_and_one_already_in_is_named(
    world_lab: SimLab, tmp_path: Path
) -> None:
    """As on EKS with the chart's admission webhook: `kubectl apply` of a PrometheusRule whose
    rules do not parse is refused with the parse error, and so is a learner's file. One that
    got in without the webhook (deleted here, as a cluster without it has none) is skipped, as
    the operator skips it: a learner's good rules still load and fire, and `--rules` names the
    object Prometheus could not load instead of blaming the learner's file."""
    user = cli_lab(world_lab, tmp_path)
    bad = rule_object(tmp_path / "bad.yaml", "someone-elses-bad-rules", "default", BAD_EXPR)
    refused = kubectl_done(world_lab, "apply", "-f", str(bad))
    print(f"\nkubectl apply -f bad.yaml (exit {refused.returncode}):\n{refused.stderr}")
    assert refused.returncode != 0, refused.stdout
    assert PARSE_ERROR in refused.stderr, refused.stderr
    assert "someone-elses-bad-rules" not in kubectl(world_lab, "get", "prometheusrules", "-A")

    webhook = json.loads(kubectl(world_lab, "get", "validatingwebhookconfiguration", ADMISSION,
                                 "-o", "json"))  # fmt: skip
    saved = tmp_path / "admission.json"
    saved.write_text(json.dumps({
        "apiVersion": webhook["apiVersion"], "kind": webhook["kind"],
        "metadata": {k: webhook["metadata"][k] for k in ("name", "labels")},
        "webhooks": webhook["webhooks"],
    }))  # fmt: skip
    mine = rule_file(tmp_path / "mine.yaml", ("LearnerBroken", BAD_EXPR))
    zero = rule_file(tmp_path / "zero.yaml", ("LearnerZero", f"{GPUS} == 0"))
    start = user.invoke("practice.start", "--scenario", FAULT, "--speed", str(user.lab.speed),
                        "--yes")  # fmt: skip
    assert start.returncode == 0, start.stdout + start.stderr
    try:
        own = user.invoke("practice.check", "--rules", str(mine))
        print(f"practice.check --rules mine.yaml (exit {own.returncode}):\n{own.stderr}")
        assert own.returncode != 0, own.stdout
        assert "refused your rules" in own.stderr and PARSE_ERROR in own.stderr, own.stderr

        kubectl(world_lab, "delete", "validatingwebhookconfiguration", ADMISSION)
        kubectl(world_lab, "apply", "-f", str(bad))  # nothing refuses it now
        kubectl(world_lab, "create", "-f", str(saved))
        good, good_s = timed(user, "practice.check", "--rules", str(zero))
        print(f"practice.check --rules zero.yaml, a bad object in: {good_s:.1f} s wall\n"
              f"{good.stdout}")  # fmt: skip
        assert good.returncode == 0, good.stdout + good.stderr
        assert "firing:  LearnerZero after" in good.stdout, good.stdout
        assert (
            "note: Prometheus has not loaded PrometheusRule default/someone-elses-bad-rules "
            "(groups someone-elses-bad-rules)"
        ) in good.stdout, good.stdout
    finally:
        assert user.invoke("practice.giveup").returncode == 0
        kubectl(world_lab, "delete", "--ignore-not-found", "-f", str(bad))
        if kubectl_done(world_lab, "get", "validatingwebhookconfiguration", ADMISSION).returncode:
            kubectl(world_lab, "create", "-f", str(saved))
    until(lambda: kubectl_done(world_lab, "apply", "-f", str(bad)).returncode != 0,
          what="the webhook refusing again once its configuration is back")  # fmt: skip


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
