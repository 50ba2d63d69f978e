"""The scenario tasks and `invoke demo` through the real command line, on the rehearsal backend."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
from kubernetes import client as k8s
from kubernetes import config
from lab_support import (
    cli_lab,
    healthy_status,
    invoke_env,
    kill_when,
    one_real_kubelet_lab,
    run_invoke,
    until,
)

import scenarios
from labs.settings import REAL_KUBELETS

LAB = "sc1"
# The lab's speed, also the pace the tests practise at after `scenario.inject` (a person's
# real time would make every wait after it last as long as on EKS).
PROGRAM_SPEED = "120"
DEVICE_PLUGIN = "nvidia-device-plugin-daemonset"


def _journal(state_dir: Path, lab: str) -> list[dict]:
    path = state_dir / lab / "journal.json"
    return json.loads(path.read_text())["entries"] if path.exists() else []


def test_demo_runs_the_whole_story_and_leaves_a_report(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """`invoke demo` as a person runs it: on real kubelets, the default (in a state directory
    shallow enough for a node's unix sockets, as a person's `.labs` is)."""
    tmp_path = tmp_path_factory.mktemp("demo")
    env = invoke_env(tmp_path, INVOKE_LAB_SPEED="120", INVOKE_LAB_KUBELETS=REAL_KUBELETS)
    with one_real_kubelet_lab():
        result = run_invoke("demo", env=env, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr
    assert "report:" in result.stdout and "lab 'demo' is gone" in result.stdout
    [report] = (tmp_path / "demo" / "runs").glob("*-device-plugin-off/report.json")
    data = json.loads(report.read_text())
    fault = data["states"]["fault"]
    assert fault["device-plugin DaemonSet"] == "NotFound"
    assert fault["allocatable nvidia.com/gpu"].count(": 0") == 2
    seen = " ".join(check["seen"] for check in data["checks"])
    assert "0/4 nodes are available: 4 Insufficient nvidia.com/gpu." in seen
    traps = {trap["name"]: trap for trap in data["traps"]}
    assert traps["status.state stays ready"]["observed"] is True
    held = {check["name"]: check["held"] for check in data["checks"]}
    assert held["device-plugin DaemonSet re-created with a new uid"] is True
    assert held["gpu-probe output identical to baseline"] is True
    assert data["comparison"]["equal"] is True
    assert held["alert GpuAllocatableZeroOnGpuNode firing"] is True
    assert "alert: alert GpuAllocatableZeroOnGpuNode firing" in result.stdout
    assert (report.parent / "report.md").exists() and (report.parent / "timeline.png").exists()
    assert not (tmp_path / "demo" / "state.json").exists(), "the demo lab was not torn down"


def test_scenario_list_show_and_unknown_names(tmp_path: Path):
    env = invoke_env(tmp_path)
    listing = run_invoke("scenario.list", env=env)
    assert listing.returncode == 0 and "needs:" in listing.stdout and "risk:" in listing.stdout
    groups: dict[str, list[str]] = {}
    for line in listing.stdout.splitlines():
        if not line.startswith(" "):
            heading = groups.setdefault(line.split(":")[0], [])
        elif not line.strip().startswith(("needs:", "rehearsal only:")):
            heading.append(line.split()[0])
    assert groups == {area: [s.name for s in group] for area, group in scenarios.by_area().items()}
    assert list(groups) == [a for a in ("operator", "node", "network", "workload", "capacity")
                            if a in groups] and len(groups) >= 4  # fmt: skip
    rehearsal_only = [s.name for s in scenarios.all_scenarios().values() if s.needs.rehearsal_only]
    assert listing.stdout.count("\n" + " " * 32 + "rehearsal only: ") == len(rehearsal_only)
    show = run_invoke("scenario.show", "device-plugin-off", env=env)
    assert show.returncode == 0 and "devicePlugin" in show.stdout
    assert "by hand with kubectl" in show.stdout and "$ kubectl patch clusterpolicy" in show.stdout
    assert "capacity still says 1 for 5 minutes" in show.stdout, "kubelet's lag, in the runbook"
    risk = run_invoke("scenario.show", "nccl-sg-block", env=env).stdout
    assert "egress_all" in next(line for line in risk.splitlines() if "risk:" in line), risk
    unknown = run_invoke("scenario.run", "no-such-fault", "--lab", LAB, env=env)
    assert unknown.returncode == 1
    assert "no scenario named 'no-such-fault'" in unknown.stderr
    assert "device-plugin-off" in unknown.stderr


@pytest.fixture(scope="module")
def cli(tmp_path_factory: pytest.TempPathFactory):
    """One rehearsal lab driven only through `invoke`: its state directory and the env."""
    state_dir = tmp_path_factory.mktemp("labs")
    with cli_lab(state_dir, LAB, PROGRAM_SPEED) as env:
        yield state_dir, env


def _device_plugin_enabled(state_dir: Path) -> bool:
    api = config.new_client_from_config(config_file=str(state_dir / LAB / "kubeconfig"))
    policy = k8s.CustomObjectsApi(api).get_cluster_custom_object(
        "nvidia.com", "v1", "clusterpolicies", "cluster-policy"
    )
    return bool(policy["spec"]["devicePlugin"]["enabled"])


def _device_plugin_ready(state_dir: Path) -> bool:
    api = config.new_client_from_config(config_file=str(state_dir / LAB / "kubeconfig"))
    names = [
        ds.metadata.name
        for ds in k8s.AppsV1Api(api).list_namespaced_daemon_set("gpu-operator").items
        if (ds.status.number_ready or 0) == 2
    ]
    return DEVICE_PLUGIN in names


def test_inject_shows_in_status_blocks_a_second_fault_and_revert_undoes_it(cli):
    state_dir, env = cli
    inject = run_invoke(
        "scenario.inject", "device-plugin-off", "--lab", LAB, "--speed", PROGRAM_SPEED, env=env
    )
    assert inject.returncode == 0, inject.stdout + inject.stderr
    assert not _device_plugin_enabled(state_dir)
    status = run_invoke("lab.status", "--lab", LAB, env=env)
    assert "injected faults: device-plugin-off" in status.stdout
    second = run_invoke("scenario.run", "device-plugin-off", "--lab", LAB, env=env)
    assert second.returncode == 1 and "still has device-plugin-off injected" in second.stderr
    revert = run_invoke("scenario.revert", "--name", "device-plugin-off", "--lab", LAB, env=env)
    assert revert.returncode == 0, revert.stdout + revert.stderr
    assert "reverted: device-plugin-off" in revert.stdout
    assert _device_plugin_enabled(state_dir)
    assert [e["state"] for e in _journal(state_dir, LAB)][-1] == "reverted"
    again = run_invoke("scenario.revert", "--all", "--lab", LAB, env=env)
    assert again.returncode == 0 and "nothing was injected" in again.stdout
    until(lambda: _device_plugin_ready(state_dir), what="the device plugin to be back")


def test_a_killed_run_is_reverted_from_the_journal(cli):
    state_dir, env = cli
    before = len(_journal(state_dir, LAB))
    status = kill_when(
        ["scenario.run", "device-plugin-off", "--lab", LAB],
        env,
        lambda: any(e["state"] == "injected" for e in _journal(state_dir, LAB)[before:]),
        what="the run to record its injection",
    )
    assert status == -signal.SIGKILL
    until(lambda: not _device_plugin_enabled(state_dir), what="the fault to be in place")
    revert = run_invoke("scenario.revert", "--all", "--lab", LAB, env=env)
    assert revert.returncode == 0, revert.stdout + revert.stderr
    assert _device_plugin_enabled(state_dir)
    assert _journal(state_dir, LAB)[-1]["state"] == "reverted"
    until(lambda: _device_plugin_ready(state_dir), what="the world to recover")


def test_every_scenario_back_to_back_leaves_the_lab_as_it_was(cli):
    state_dir, env = cli
    before = until(lambda: healthy_status(env, LAB), what="a healthy lab before the runs")
    names = list(scenarios.all_scenarios())
    assert {"operator-down", "device-plugin-off-one-node", "gpu-node-foreign-taint"} <= set(names)
    for name in names:
        run = run_invoke("scenario.run", name, "--lab", LAB, "--yes", env=env, timeout=300)
        assert run.returncode == 0, f"{name}: {run.stdout[-3000:]}{run.stderr}"
        assert "result: OK" in run.stdout and "recovered state equals the baseline" in run.stdout
        finding = scenarios.get(name).doctor_finding
        assert f"doctor: lab.doctor's probable cause is {finding}" in run.stdout, run.stdout
        steps = ("baseline: ", "inject: ", "revert: ", "clean up: ")
        said = [line.split(" (journal entry")[0] for line in run.stdout.splitlines()
                if line.startswith(steps)]  # fmt: skip
        assert said and all(line.endswith((".", ")")) for line in said), said
    after = until(lambda: healthy_status(env, LAB), what="a healthy lab after the runs")
    assert after == before
    reports = sorted(p.parent.name for p in (state_dir / LAB / "runs").glob("*/report.json"))
    assert all(any(r.endswith(f"-{name}") for r in reports) for name in names)


def test_lab_down_reverts_a_fault_left_for_practice(cli):
    state_dir, env = cli
    inject = run_invoke(
        "scenario.inject", "device-plugin-off", "--lab", LAB, "--speed", PROGRAM_SPEED, env=env
    )
    assert inject.returncode == 0, inject.stdout + inject.stderr
    down = run_invoke("lab.down", "--lab", LAB, env=env)
    assert down.returncode == 0, down.stdout + down.stderr
    assert "revert injected faults (journal)" in down.stdout
    assert _device_plugin_enabled(state_dir)
    assert _journal(state_dir, LAB)[-1]["state"] == "reverted"
