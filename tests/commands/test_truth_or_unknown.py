"""The cost guard states only what it read (issue 24), on one shared rehearsal world: a full
state directory, a half-applied infrastructure change, numbers that would break the clock,
a lab kubeconfig that is wrong or gone, and replayed credentials.

Each test drives `invoke` (or the venv's aws CLI) on its own lab record and reads the outcome
off the backend: desiredSize through the aws CLI, the fault through its own `detect`.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from guard_support import (
    NOSPACE,
    CliLab,
    cli_lab,
    fault_in,
    fill,
    gpu_scaling,
    restore_gpus,
    small_tmpfs,
)
from lab_support import run_invoke
from scenario_support import GPU_NODES, SimLab, by_hand_env, wait_ready
from tool_support import require_venv_tool

from labs.aws import stack
from labs.aws.node_network import node_rules
from labs.journal import INJECTED, REVERTED
from labs.sim.aws.seed import moto_clients

FAULT = "device-plugin-off"


@pytest.fixture
def user(world_lab: SimLab, tmp_path: Path) -> CliLab:
    wait_ready(world_lab.lab)
    return cli_lab(world_lab, tmp_path)


def desired_by_aws_cli(ready: SimLab, cache: Path) -> int:
    """The GPU node group's desiredSize as `aws eks describe-nodegroup` (this venv's) reads it."""
    lab = ready.lab
    command = [
        require_venv_tool("aws"), "eks", "describe-nodegroup", "--cluster-name", lab.cluster_name,
        "--nodegroup-name", stack.gpu_node_group_name(lab.cluster_name),
        "--query", "nodegroup.scalingConfig.desiredSize", "--output", "text",
    ]  # fmt: skip
    read = subprocess.run(command, env=by_hand_env(lab, cache), capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert read.returncode == 0, read.stderr
    return int(read.stdout)


# --- 1. a full state directory ------------------------------------------------------------------


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    with small_tmpfs(tmp_path / "tmpfs") as mount:
        yield mount


@pytest.fixture
def full_user(world_lab: SimLab, full_disk: Path) -> CliLab:
    """A lab record on a full tmpfs whose GPU time limit is recorded (so scale 0 must write)."""
    wait_ready(world_lab.lab)
    user = cli_lab(world_lab, full_disk)
    user.lab.update(gpu_ttl_at=(datetime.now(UTC) + timedelta(hours=1)).isoformat())
    fill(full_disk)
    return user


@pytest.mark.parametrize(
    "command",
    [("lab.scale", "0"), ("lab.down",), ("lab.down", "--destroy", "--yes"), ("lab.down", "--all")],
    ids=["scale-0", "down", "down-destroy", "down-all"],
)
def test_the_cost_guard_on_a_full_state_dir_scales_first_and_names_what_it_could_not_record(
    world_lab: SimLab, full_user: CliLab, tmp_path: Path, command: tuple[str, ...]
):
    lab_flag = () if "--all" in command else ("--lab", full_user.lab.name)
    try:
        result = run_invoke(*command, *lab_flag, env=full_user.env)

        assert desired_by_aws_cli(world_lab, tmp_path / "cache") == 0
        assert result.returncode == 1, result.stdout + result.stderr
        assert "Traceback" not in result.stderr
        assert f"could not write {full_user.lab.paths.state_file}: {NOSPACE}" in result.stderr
        lock = full_user.state_dir / f".{full_user.lab.name}.lock"
        assert f"could not write {lock} ({NOSPACE})" in result.stderr
    finally:
        restore_gpus(world_lab)


def test_scenario_run_on_a_full_state_dir_names_it_and_injects_nothing(
    world_lab: SimLab, full_user: CliLab
):
    run = full_user.invoke("scenario.run", FAULT)

    assert run.returncode == 1, run.stdout + run.stderr
    assert f"cannot write in {full_user.root} ({NOSPACE})" in run.stderr
    assert "Traceback" not in run.stderr
    assert not fault_in(world_lab.lab, FAULT)


# --- 3. a half-applied infrastructure change ----------------------------------------------------


def test_a_revert_re_applies_what_a_killed_apply_left_half_done(world_lab: SimLab, user: CliLab):
    """What `kill -9` of scenario.run nccl-sg-block mid-apply leaves: the rules gone in EC2, the
    record still saying both toggles are on, the journal saying injected."""
    user.lab.mark_phase("infra")  # lab.up applied the stack
    entry = user.lab.journal.record_injecting("nccl-sg-block")
    user.lab.journal.mark(entry, INJECTED)
    assert user.lab.variables[stack.NODE_SG_ENABLE_RECOMMENDED_RULES] is True
    rules = node_rules(user.lab)
    ec2 = moto_clients(world_lab.world.endpoints)("ec2")
    ec2.revoke_security_group_ingress(GroupId=rules.node_sg, SecurityGroupRuleIds=[rules.self_rule])
    ec2.revoke_security_group_ingress(GroupId=rules.aux_sg, SecurityGroupRuleIds=[rules.vpc_rule])
    assert fault_in(user.lab, "nccl-sg-block")

    revert = user.invoke("scenario.revert", "--all")

    assert revert.returncode == 0, revert.stdout + revert.stderr
    assert "already applied with these variables; skipping" not in revert.stdout
    assert "reverted: nccl-sg-block" in revert.stdout
    assert not fault_in(user.lab, "nccl-sg-block"), "the rules were not put back"
    assert [e["state"] for e in user.lab.journal.entries()] == [REVERTED]


# --- 5. numbers that would break the clock ------------------------------------------------------


def test_a_speed_out_of_range_is_refused_before_the_fault_goes_in(world_lab: SimLab, user: CliLab):
    inject = user.invoke("scenario.inject", FAULT, "--speed", "1e308", "--yes")

    assert inject.returncode == 1, inject.stdout + inject.stderr
    assert "--speed '1e308' is outside 0.01..10000 times real time" in inject.stderr
    assert not fault_in(world_lab.lab, FAULT)
    assert user.lab.journal.outstanding() == []
    status = user.invoke("lab.status")  # the pace endpoint and the clock still answer
    assert status.returncode == 0, status.stdout + status.stderr


# --- 6. the lab's kubeconfig wrong or gone ------------------------------------------------------


def test_a_refused_kubeconfig_is_named_and_changes_nothing(world_lab: SimLab, user: CliLab):
    kubeconfig = user.lab.paths.kubeconfig
    document = yaml.safe_load(kubeconfig.read_text())
    document["users"][0]["user"]["token"] = "edited-by-hand"
    kubeconfig.write_text(yaml.safe_dump(document))
    refused = f"the lab's kubeconfig ({kubeconfig}) was refused: 401"
    rewrite = f"`invoke lab.up --lab {user.lab.name}` rewrites it"

    status = user.invoke("lab.status")
    try:
        scale = user.invoke("lab.scale", "1")
        assert gpu_scaling(world_lab)["desiredSize"] == GPU_NODES, "lab.scale changed the group"
    finally:
        restore_gpus(world_lab)
    run = user.invoke("scenario.run", FAULT)
    listed = run_invoke("lab.list", env=user.env)

    for result in (status, scale, run):
        assert result.returncode == 1, result.stdout + result.stderr
        assert refused in result.stdout + result.stderr and rewrite in result.stdout + result.stderr
        assert "Traceback" not in result.stderr
    assert not fault_in(world_lab.lab, FAULT)
    row = next(line.split() for line in listed.stdout.splitlines() if line.startswith("myeks"))
    assert row[2] == "no" and f"! myeks: {refused}" in listed.stdout


def test_a_missing_kubeconfig_is_named_by_status_and_env(user: CliLab):
    kubeconfig = user.lab.paths.kubeconfig
    kubeconfig.unlink()
    missing = f"the lab's kubeconfig ({kubeconfig}) is missing; `invoke lab.up --lab myeks`"

    status = user.invoke("lab.status")
    env = user.invoke("lab.env")

    for result in (status, env):
        assert result.returncode == 1, result.stdout + result.stderr
        assert missing in result.stdout + result.stderr
    assert "export KUBECONFIG" not in env.stdout


# --- 7. replayed credentials --------------------------------------------------------------------

# The venv's aws CLI with its clock moved by argv[1] hours (what a wrong laptop clock, or a
# replayed request, sends).
SKEWED_AWS = """
import datetime, sys
import botocore.auth
real = botocore.auth.get_current_datetime
offset = datetime.timedelta(hours=float(sys.argv.pop(1)))
botocore.auth.get_current_datetime = lambda *a, **k: real(*a, **k) + offset
from awscli.clidriver import main
sys.exit(main())
"""


def skewed_aws(ready: SimLab, cache: Path, hours: float, *args: str) -> subprocess.CompletedProcess:
    require_venv_tool("aws")
    return subprocess.run([sys.executable, "-c", SKEWED_AWS, str(hours), *args],
                          env=by_hand_env(ready.lab, cache), capture_output=True, text=True,
                          timeout=60)  # fmt: skip


def kube_status(ready: SimLab, token: str) -> int:
    """The HTTP status the lab's API server answers a node list with `token`."""
    import ssl

    endpoints = ready.world.endpoints
    request = urllib.request.Request(f"{endpoints['kube_url']}/api/v1/nodes",
                                     headers={"Authorization": f"Bearer {token}"})  # fmt: skip
    tls = ssl.create_default_context(cadata=endpoints["kube_ca"])
    try:
        with urllib.request.urlopen(request, timeout=30, context=tls) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return error.code


@pytest.mark.parametrize(("hours", "status"), [(0, 200), (-24, 401), (-0.5, 401)])
def test_eks_tokens_older_than_15_minutes_are_refused(
    world_lab: SimLab, tmp_path: Path, hours: float, status: int
):
    token = skewed_aws(world_lab, tmp_path / "cache", hours, "eks", "get-token", "--cluster-name",
                       world_lab.lab.cluster_name)  # fmt: skip
    assert token.returncode == 0, token.stderr

    assert kube_status(world_lab, json.loads(token.stdout)["status"]["token"]) == status


@pytest.mark.parametrize("hours", [-24, 24, -0.1])
def test_sigv4_requests_more_than_5_minutes_off_are_refused(
    world_lab: SimLab, tmp_path: Path, hours: float
):
    args = ("eks", "list-nodegroups", "--cluster-name", world_lab.lab.cluster_name)
    skewed = skewed_aws(world_lab, tmp_path / "cache", hours, *args)
    now = skewed_aws(world_lab, tmp_path / "cache", 0, *args)

    assert now.returncode == 0, now.stderr
    assert skewed.returncode != 0
    assert "InvalidSignatureException" in skewed.stderr and "Signature" in skewed.stderr
    assert "5 min." in skewed.stderr
