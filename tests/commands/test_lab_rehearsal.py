"""lab.up / lab.status / lab.env / lab.scale / lab.down on the rehearsal backend, through invoke."""

from __future__ import annotations

import ipaddress
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from lab_support import (
    ROOT,
    in_order,
    invoke_env,
    node_group_instances,
    pid_alive,
    run_invoke,
    sim_pid,
    until,
)

LAB = "t1"


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory: pytest.TempPathFactory):
    """One rehearsal lab brought up through `invoke lab.up --sim --monitoring`, destroyed at
    the end."""
    state_dir = tmp_path_factory.mktemp("labs")
    env = invoke_env(state_dir)
    up = run_invoke("lab.up", "--sim", "--monitoring", "--lab", LAB, env=env)
    try:
        yield state_dir, env, up
    finally:
        run_invoke("lab.down", "--lab", LAB, "--destroy", "--yes", env=env)


def test_lab_up_sim_brings_up_two_schedulable_gpus_and_runs_the_probe(rehearsal):
    _, _, up = rehearsal
    assert up.returncode == 0, up.stdout + up.stderr
    out = up.stdout
    order = [
        "==> preflight (sim backend",
        "==> base infrastructure (GPU nodes 0, operator off)",
        "==> lab kubeconfig",
        "==> GPU Operator",
        "==> wait for the ClusterPolicy to be ready",
        "==> scale GPU node group t1-ng-gpu to 2 (EKS API)",
        "==> wait for 2 Ready GPU node(s) with allocatable nvidia.com/gpu 1",
        "==> wait for the ClusterPolicy to be ready on the GPU nodes",
        "==> GPU probe",
    ]
    assert in_order(out, order), "lab.up phases ran out of order"
    assert "scalingConfig minSize=0 maxSize=2 desiredSize=2" in out
    assert "NVIDIA A10G, 580.126.09, 23028 MiB" in out
    assert "GPU node-minutes so far" in out


def test_lab_status_shows_backend_gpus_operator_and_cost(rehearsal):
    """The real operator may flip its ClusterPolicy to notReady for a moment when a loaded
    machine stalls an operand; status then says why, and the lab settles to ready again."""
    _, env, _ = rehearsal
    seen: list[str] = []

    def settled() -> str | None:
        status = run_invoke("lab.status", "--lab", LAB, env=env)
        assert status.returncode == 0, status.stderr
        seen.append(status.stdout)
        ready = "ClusterPolicy cluster-policy: state ready" in status.stdout
        return status.stdout if ready else None

    try:
        out = until(settled, timeout=120, what="ClusterPolicy state ready in lab.status")
    except AssertionError:
        raise AssertionError(f"never ready; the last status read:\n{seen[-1]}") from None
    assert "the operator says" not in out
    assert "backend sim" in out
    assert "t1-ng-gpu" in out and "min 0 max 2 desired 2" in out
    gpu_lines = [line for line in out.splitlines() if " gpu " in line and "Ready" in line]
    assert len(gpu_lines) == 2 and all(line.endswith("nvidia.com/gpu 1") for line in gpu_lines)
    assert "nvidia-device-plugin-daemonset" in out and "2/2" in out
    assert "injected faults: none" in out
    assert "running cost (estimate, USD/hour)" in out and "GPU nodes (g5.xlarge)" in out
    assert "enable_monitoring=true" in out


def test_lab_status_shows_no_alert_on_a_healthy_lab_with_monitoring(rehearsal):
    """The naive absent() rule fired while the lab had no GPU node; with the GPUs up it stops."""
    _, env, _ = rehearsal

    def shown() -> str:
        return run_invoke("lab.status", "--lab", LAB, env=env).stdout

    until(lambda: "alerts: none pending or firing" in shown(), what="no alert on a healthy lab")


def test_lab_env_prints_exports_that_reach_the_lab(rehearsal):
    state_dir, env, _ = rehearsal
    result = run_invoke("lab.env", "--lab", LAB, env=env)
    assert result.returncode == 0
    exports = dict(
        line.removeprefix("export ").split("=", 1)
        for line in result.stdout.splitlines()
        if line.startswith("export ")
    )
    assert exports["KUBECONFIG"] == str(state_dir / LAB / "kubeconfig")
    endpoints = json.loads((state_dir / LAB / "sim" / "endpoints.json").read_text())
    assert exports["AWS_ENDPOINT_URL"] == endpoints["aws_endpoint_url"]
    assert exports["AWS_ACCESS_KEY_ID"] == endpoints["aws_access_key_id"] != "testing"
    assert exports["AWS_SECRET_ACCESS_KEY"] == endpoints["aws_secret_access_key"]


def lab_shell(env: dict[str, str], command: str) -> subprocess.CompletedProcess[str]:
    """What a person types: eval the lab's exports, then `command` with the project's own
    aws CLI and whatever kubectl lab.env puts first on PATH."""
    bin_dir = Path(sys.executable).parent
    assert (bin_dir / "aws").exists(), f"the aws CLI is not in {bin_dir} (pip install -e '.[test]')"
    script = f'eval "$({bin_dir / "invoke"} lab.env --lab {LAB})" && {command}'
    shell_env = {**env, "PATH": f"{bin_dir}:{env.get('PATH', '')}"}
    return subprocess.run(
        ["bash", "-c", script], cwd=ROOT, env=shell_env, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip


def lab_json(env: dict[str, str], command: str) -> Any:
    result = lab_shell(env, command)
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout)


def test_the_aws_cli_answers_after_evaluating_lab_env(rehearsal):
    _, env, _ = rehearsal
    scaling = lab_json(
        env,
        f"aws eks describe-nodegroup --cluster-name {LAB} --nodegroup-name {LAB}-ng-gpu "
        "--query nodegroup.scalingConfig --output json",
    )
    assert scaling == {"minSize": 0, "maxSize": 2, "desiredSize": 2}


def test_kubectl_after_lab_env_is_the_servers_release_and_debug_does_not_warn(rehearsal):
    _, env, _ = rehearsal
    version = lab_shell(env, "kubectl version -o json")
    assert version.returncode == 0, version.stderr
    assert "WARNING" not in version.stderr, version.stderr
    both = json.loads(version.stdout)
    assert both["clientVersion"]["gitVersion"] == both["serverVersion"]["gitVersion"] == "v1.35.4"
    # kubectl checks the profile before it looks the node up: nothing is created here
    debug = lab_shell(env, "kubectl debug node/no-such-node --image=busybox -- true")
    assert 'nodes "no-such-node" not found' in debug.stderr, debug.stderr
    assert "deprecated" not in debug.stderr, debug.stderr


def test_kubectl_and_the_aws_cli_name_the_same_principal_and_service_range(rehearsal):
    """On EKS with access entries: whoami is the IAM ARN STS answers, and the cluster's
    serviceIpv4Cidr holds the Services' addresses."""
    _, env, _ = rehearsal
    caller = lab_json(env, "aws sts get-caller-identity --output json")
    whoami = lab_json(env, "kubectl auth whoami -o json")["status"]["userInfo"]
    assert whoami["username"] == caller["Arn"] and caller["Arn"].endswith(":user/lab-admin")
    assert whoami["groups"] == ["system:authenticated"]
    entries = lab_json(env, f"aws eks list-access-entries --cluster-name {LAB} --output json")
    assert sorted(entries["accessEntries"]) == [
        caller["Arn"],
        caller["Arn"].replace("admin", "viewer"),
    ]
    policies = lab_json(
        env,
        f"aws eks list-associated-access-policies --cluster-name {LAB} "
        f"--principal-arn {caller['Arn']} --output json",
    )
    assert [p["policyArn"].rsplit("/", 1)[-1] for p in policies["associatedAccessPolicies"]] == [
        "AmazonEKSClusterAdminPolicy"
    ]
    cidr = lab_json(
        env,
        f"aws eks describe-cluster --name {LAB} --query "
        "cluster.kubernetesNetworkConfig.serviceIpv4Cidr --output json",
    )
    service_ip = lab_json(env, "kubectl get service kubernetes -n default -o json")["spec"][
        "clusterIP"
    ]
    assert ipaddress.ip_address(service_ip) in ipaddress.ip_network(cidr)


def test_the_gpu_auto_scaling_group_lists_the_gpu_nodes_instances(rehearsal):
    _, env, _ = rehearsal
    groups = lab_json(env, "aws autoscaling describe-auto-scaling-groups --output json")
    listed = node_group_instances(groups["AutoScalingGroups"], f"{LAB}-ng-gpu")
    nodes = lab_json(env, "kubectl get nodes -l tier=gpu -o json")["items"]
    in_service = {instance for instance, state in listed.items() if state == "InService"}
    assert in_service == {n["spec"]["providerID"].rsplit("/", 1)[-1] for n in nodes}
    assert len(in_service) == 2
    cluster_updates = lab_json(env, f"aws eks list-updates --name {LAB} --output json")
    assert cluster_updates["updateIds"] == []


def test_the_write_ups_aws_commands_agree_with_the_cluster(rehearsal, tmp_path):
    """The aws commands of the lab's write-ups, replayed as typed, each answer checked against
    what kubectl sees."""
    _, env, _ = rehearsal
    nodes = lab_json(env, "kubectl get nodes -o json")["items"]
    gpu_nodes = [n for n in nodes if n["metadata"]["labels"].get("tier") == "gpu"]
    # the stack's output: `aws eks --region R update-kubeconfig --name C`
    config = tmp_path / "kubeconfig"
    wrote = lab_shell(env, f"aws eks --region $AWS_REGION update-kubeconfig --name {LAB} "
                           f"--kubeconfig {config}")  # fmt: skip
    assert wrote.returncode == 0, wrote.stderr
    theirs = lab_json(env, f"kubectl --kubeconfig {config} get nodes -o json")["items"]
    assert sorted(n["metadata"]["name"] for n in theirs) == sorted(
        n["metadata"]["name"] for n in nodes
    )
    # the helm provider's exec: `aws eks get-token --cluster-name C --region R`
    token = lab_json(env, f"aws eks get-token --cluster-name {LAB} --region $AWS_REGION")
    assert token["status"]["token"].startswith("k8s-aws-v1.")
    # the cost guard's check: `aws eks describe-nodegroup` (desiredSize = GPU nodes)
    group = lab_json(env, f"aws eks describe-nodegroup --cluster-name {LAB} "
                          f"--nodegroup-name {LAB}-ng-gpu --output json")["nodegroup"]  # fmt: skip
    assert group["scalingConfig"]["desiredSize"] == len(gpu_nodes) == 2
    assert group["instanceTypes"] == sorted(
        {n["metadata"]["labels"]["node.kubernetes.io/instance-type"] for n in gpu_nodes}
    )
    # scaling as the write-up does it (to the size it has: nothing moves)
    scale = (f"aws eks update-nodegroup-config --cluster-name {LAB} --nodegroup-name {LAB}-ng-gpu"
             " --scaling-config minSize=0,maxSize=2,desiredSize=2")  # fmt: skip
    update = lab_json(env, scale)
    listed = lab_json(env, f"aws eks list-updates --name {LAB} --nodegroup-name {LAB}-ng-gpu")
    assert update["update"]["id"] in listed["updateIds"]
    until(
        lambda: (
            lab_json(
                env,
                f"aws eks describe-update --name {LAB} --nodegroup-name {LAB}-ng-gpu "
                f"--update-id {update['update']['id']}",
            )["update"]["status"]
            == "Successful"
        ),
        what="the no-op scaling update Successful",
    )
    # the quota the README's preflight reads: room for the group's max of g5.xlarge (4 vCPU)
    quota = lab_json(env, "aws service-quotas get-service-quota --service-code ec2 "
                          "--quota-code L-DB2E81BA")["Quota"]  # fmt: skip
    assert quota["Value"] >= 4 * group["scalingConfig"]["maxSize"]


def test_lab_up_twice_does_no_second_apply_or_scale(rehearsal):
    _, env, _ = rehearsal
    again = run_invoke("lab.up", "--sim", "--lab", LAB, env=env)
    assert again.returncode == 0, again.stdout + again.stderr
    assert again.stdout.count("already applied with these variables; skipping") == 2
    assert "rebuilding" not in again.stdout
    assert "desiredSize=2 (already so; no API call)" in again.stdout


def test_lab_scale_rejects_more_than_the_max_and_changes_nothing(rehearsal):
    _, env, _ = rehearsal
    result = run_invoke("lab.scale", "3", "--lab", LAB, env=env)
    assert result.returncode == 1
    assert "use 0 to 2" in result.stderr
    status = run_invoke("lab.status", "--lab", LAB, env=env)
    assert "min 0 max 2 desired 2" in status.stdout


def test_a_lab_remembers_its_backend_without_sim(rehearsal):
    state_dir, env, _ = rehearsal
    again = run_invoke("lab.up", "--lab", LAB, env=env)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "==> preflight (sim backend" in again.stdout
    assert json.loads((state_dir / LAB / "state.json").read_text())["backend"] == "sim"
    status = run_invoke("lab.status", "--lab", LAB, env=env)
    assert "backend sim" in status.stdout


def test_lab_up_dry_run_on_a_new_rehearsal_lab_creates_nothing(tmp_path: Path):
    result = run_invoke("lab.up", "--sim", "--lab", "d1", "--dry-run", env=invoke_env(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "would start the rehearsal backend" in result.stdout
    assert "'desiredSize': 2" in result.stdout
    assert not (tmp_path / "d1").exists()


def test_a_killed_backend_is_rebuilt_by_lab_up_and_lab_down_destroy_stops_it(tmp_path: Path):
    env = invoke_env(tmp_path)
    first = run_invoke("lab.up", "--sim", "--lab", "t3", "--gpus", "1", env=env)
    assert first.returncode == 0, first.stdout + first.stderr
    killed = sim_pid(tmp_path, "t3")
    os.kill(killed, signal.SIGKILL)
    # SIGKILL is delivered at once but a busy machine takes a moment to tear the process down
    until(lambda: not pid_alive(killed), 10, "the killed rehearsal process to be gone")
    try:
        stopped = run_invoke("lab.scale", "0", "--lab", "t3", env=env)
        assert stopped.returncode == 1 and "Traceback" not in stopped.stderr
        assert "not running" in stopped.stderr or "cannot reach the lab" in stopped.stderr
        again = run_invoke("lab.up", "--lab", "t3", "--gpus", "1", env=env)
        assert again.returncode == 0, again.stdout + again.stderr
        assert "restarted with an empty world: rebuilding the lab" in again.stdout
        assert "NVIDIA A10G, 580.126.09, 23028 MiB" in again.stdout
        pid = sim_pid(tmp_path, "t3")
    finally:
        down = run_invoke("lab.down", "--lab", "t3", "--destroy", "--yes", env=env)
    assert down.returncode == 0, down.stdout + down.stderr
    assert "wait until no GPU node remains" in down.stdout
    until(lambda: not pid_alive(pid), 10, "the rehearsal process to end after lab.down --destroy")
    second = run_invoke("lab.down", "--lab", "t3", "--destroy", "--yes", env=env)
    assert second.returncode == 0
    assert "does not exist" in second.stdout
    status = run_invoke("lab.status", "--lab", "t3", env=env)
    assert status.returncode == 1 and "no lab named 't3'" in status.stderr
