"""The cost guard that does not depend on the laptop, through `invoke` as a user runs it.

One rehearsal lab (moto and the control plane in its background process) carries the GPU time
limit through its life: the aws CLI shows the schedule lab.up set, a short limit scales the
GPUs to 0 by itself, lab.down deletes it. Beside it live a rehearsal lab whose backend died
and an AWS lab whose credentials are gone, for lab.list and lab.down --all. A failed EKS
scaling update reaching the user is played with botocore's Stubber (moto has no
DescribeUpdate).
"""

from __future__ import annotations

import io
import json
import os
import re
import shlex
import signal
import subprocess
import time
from datetime import datetime, timedelta
from pathlib import Path

import boto3
import pytest
from botocore.stub import ANY, Stubber
from lab_support import ROOT, in_order, invoke_env, pid_alive, run_invoke, sim_pid
from tool_support import require_venv_tool

from labs.aws import stack
from labs.aws.pricing import estimate_hourly_cost
from labs.aws.schedules import EKS_SCALE_TARGET, due_at
from labs.backends import AWS, REHEARSAL
from labs.commands.scale import scale
from labs.console import Console
from labs.errors import LabError
from labs.journal import INJECTED
from labs.lab import Lab
from labs.settings import load_settings
from labs.sim import pace
from labs.sim.aws.auth import CREDENTIAL_KEYS
from labs.state import utc_now

LAB = "g1"
DEAD = "b-dead"  # a rehearsal lab whose background process is gone
NO_CREDENTIALS = "a-aws"  # an AWS lab, opened from a shell without AWS credentials
REGION = "ap-northeast-2"
ACCOUNT = "111122223333"
ENDPOINT = "https://0A1B2C3D.gr7.ap-northeast-2.eks.amazonaws.com"
# The world runs 120x: a short limit of SHORT_TTL world minutes lasts 10 wall seconds, time
# enough for lab.status to show its countdown first.
SPEED = "120"
SHORT_TTL = 20


@pytest.fixture(scope="module")
def guard_lab(tmp_path_factory: pytest.TempPathFactory):
    """`lab.up --sim` with one GPU node and the default 4 h limit; every lab downed at the end."""
    require_venv_tool("aws")
    state_dir = tmp_path_factory.mktemp("labs")
    nowhere = state_dir / "no-such-file"
    env = invoke_env(
        state_dir, AWS_SHARED_CREDENTIALS_FILE=str(nowhere), AWS_CONFIG_FILE=str(nowhere),
        AWS_EC2_METADATA_DISABLED="true", INVOKE_LAB_SPEED=SPEED,
    )  # fmt: skip
    del env["INVOKE_LAB_TTL"]  # this module is about the time limit: the default 4 h
    up = run_invoke("lab.up", "--sim", "--lab", LAB, "--no-operator", "--gpus", "1", env=env)
    try:
        yield state_dir, env, up
    finally:
        run_invoke("lab.down", "--all", "--destroy", "--yes", env=env)
        if (state_dir / LAB / "sim" / "endpoints.json").exists() and pid_alive(
            pid := sim_pid(state_dir, LAB)
        ):
            os.kill(pid, signal.SIGTERM)


def aws_cli(env: dict[str, str], *args: str) -> dict:
    """The project's aws CLI with what `eval "$(invoke lab.env)"` exports, as a person types it."""
    exported = run_invoke("lab.env", "--lab", LAB, env=env).stdout
    exports = dict(
        shlex.split(line.removeprefix("export "))[0].split("=", 1)
        for line in exported.splitlines()
        if line.startswith("export ")
    )
    result = subprocess.run(
        [require_venv_tool("aws"), *args], cwd=ROOT, env={**env, **exports},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout or "{}")


def schedule_names_by_cli(env: dict[str, str]) -> list[str]:
    return [s["Name"] for s in aws_cli(env, "scheduler", "list-schedules")["Schedules"]]


def endpoints(state_dir: Path) -> dict:
    return json.loads((state_dir / LAB / "sim" / "endpoints.json").read_text())


def world_now(state_dir: Path) -> datetime:
    """The running world's clock, as the world serves it."""
    return pace.read_now(endpoints(state_dir))


def moto(state_dir: Path, service: str):
    """boto3 on the lab's moto server with the lab's own keys, for checks that need no aws CLI."""
    known = endpoints(state_dir)
    return boto3.client(
        service, region_name=REGION, endpoint_url=known["aws_endpoint_url"],
        **{key: known[key] for key in CREDENTIAL_KEYS},
    )  # fmt: skip


def schedule_names(state_dir: Path) -> list[str]:
    return [s["Name"] for s in moto(state_dir, "scheduler").list_schedules()["Schedules"]]


def gpu_scaling(state_dir: Path) -> dict:
    group = moto(state_dir, "eks").describe_nodegroup(clusterName=LAB, nodegroupName="g1-ng-gpu")
    return group["nodegroup"]["scalingConfig"]


def status(env: dict[str, str]) -> str:
    result = run_invoke("lab.status", "--lab", LAB, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def time_limit_line(env: dict[str, str]) -> str:
    return next(line for line in status(env).splitlines() if line.startswith("GPU time limit:"))


def test_lab_up_sets_the_time_limit_before_asking_for_gpus(guard_lab):
    _, _, up = guard_lab
    assert up.returncode == 0, up.stdout + up.stderr
    order = [
        "GPU time limit set: AWS scales g1-ng-gpu to 0 at",
        "scalingConfig minSize=0 maxSize=2 desiredSize=1",
        "==> follow EKS update",
        "    Successful",
        "==> wait for 1 Ready GPU node(s)",
    ]
    assert in_order(up.stdout, order), up.stdout


def test_the_aws_cli_shows_the_schedule_that_scales_gpus_to_0_a_ttl_ahead(guard_lab):
    state_dir, env, _ = guard_lab
    assert schedule_names_by_cli(env) == [stack.gpu_ttl_schedule_name(LAB)]

    schedule = aws_cli(env, "scheduler", "get-schedule", "--name", "g1-gpu-ttl")

    target = schedule["Target"]
    assert target["Arn"] == EKS_SCALE_TARGET
    assert json.loads(target["Input"]) == {
        "clusterName": LAB,
        "nodegroupName": "g1-ng-gpu",
        "scalingConfig": {"minSize": 0, "maxSize": 2, "desiredSize": 0},
    }
    assert target["RoleArn"].endswith(":role/g1-gpu-ttl-scheduler")
    assert schedule["ActionAfterCompletion"] == "DELETE"
    assert schedule["ScheduleExpressionTimezone"] == "UTC"
    # set on the world's clock, which lab.up's 120x run did not move faster than the wall's:
    # 4 hours of the evening from when lab.up set it
    now = world_now(state_dir)
    assert now + timedelta(hours=4) - timedelta(minutes=5) < due_at(schedule)
    assert due_at(schedule) <= now + timedelta(hours=4)


def test_the_aws_cli_reads_the_stacks_node_group_its_asg_quota_and_updates(guard_lab):
    """What a person checks by hand after `eval "$(invoke lab.env)"` is the stack's, as EKS
    reports it, not moto's defaults."""
    _, env, _ = guard_lab
    nodegroup = ("--cluster-name", LAB, "--nodegroup-name", "g1-ng-gpu")
    group = aws_cli(env, "eks", "describe-nodegroup", *nodegroup)["nodegroup"]
    assert (group["version"], group["diskSize"]) == ("1.35", 100)
    assert group["releaseVersion"].startswith("1.35.") and "remoteAccess" not in group

    [asg] = group["resources"]["autoScalingGroups"]
    found = aws_cli(env, "autoscaling", "describe-auto-scaling-groups",
                    "--auto-scaling-group-names", asg["name"])["AutoScalingGroups"]  # fmt: skip
    assert [(g["MinSize"], g["MaxSize"], g["DesiredCapacity"]) for g in found] == [(0, 2, 1)]

    quota = aws_cli(env, "service-quotas", "get-service-quota", "--service-code", "ec2",
                    "--quota-code", "L-DB2E81BA")["Quota"]  # fmt: skip
    assert quota["QuotaName"] == "Running On-Demand G and VT instances" and quota["Value"] >= 8

    updates = aws_cli(env, "eks", "list-updates", "--name", LAB, "--nodegroup-name", "g1-ng-gpu")
    assert updates["updateIds"], updates
    update_id = updates["updateIds"][-1]
    update = aws_cli(env, "eks", "describe-update", "--name", LAB, "--nodegroup-name",
                     "g1-ng-gpu", "--update-id", update_id)["update"]  # fmt: skip
    assert update["status"] == "Successful"


def test_lab_status_counts_down_and_shows_what_the_gpus_cost_so_far(guard_lab):
    _, env, _ = guard_lab
    out = status(env)
    assert re.search(r"^GPU time limit: [123]h\d\dm left \(GPU nodes to 0 at ", out, re.M), out
    assert re.search(r"^GPU node-minutes since the GPUs came up: [\d.]+ \(1 x ", out, re.M), out
    toggles = ("stack toggles (last applied): enable_gpu_operator=false  enable_monitoring=false  "
               "enable_aux_sg_vpc_allow=true  node_sg_enable_recommended_rules=true")  # fmt: skip
    assert toggles in out.splitlines(), out


def node_minutes(env: dict[str, str]) -> float:
    out = status(env)
    found = re.search(r"^GPU node-minutes since the GPUs came up: ([\d.]+) ", out, re.M)
    assert found, out
    return float(found.group(1))


def test_after_lab_up_the_world_runs_at_a_persons_pace(guard_lab):
    _, env, _ = guard_lab
    out = status(env)
    assert "rehearsal, 1x speed now (a person's pace; programs run it at 120x)" in out, out
    line = time_limit_line(env)
    assert re.match(r"GPU time limit: 3h\d\dm left ", line) and "wall" not in line, line


def test_gpu_node_minutes_never_run_backwards_when_the_pace_drops(guard_lab):
    """Minutes already run stay run: a slower world only adds them more slowly."""
    state_dir, env, _ = guard_lab
    pace.write_speed(endpoints(state_dir), float(SPEED))  # as a program run does
    fast = node_minutes(env)
    pace.write_speed(endpoints(state_dir), 1.0)  # as scenario.inject leaves it for a person

    assert node_minutes(env) >= fast


def test_ttl_off_without_a_confirmation_changes_nothing(guard_lab):
    state_dir, env, _ = guard_lab
    scheduler = moto(state_dir, "scheduler")
    before = scheduler.get_schedule(Name="g1-gpu-ttl")["ScheduleExpression"]

    refused = run_invoke("lab.scale", "2", "--lab", LAB, "--ttl", "off", env=env)

    assert refused.returncode == 1
    assert "--ttl off needs a confirmation" in refused.stderr
    assert gpu_scaling(state_dir)["desiredSize"] == 1
    assert scheduler.get_schedule(Name="g1-gpu-ttl")["ScheduleExpression"] == before


def test_a_short_time_limit_scales_the_gpus_to_0_by_itself(guard_lab):
    state_dir, env, _ = guard_lab
    pace.write_speed(endpoints(state_dir), float(SPEED))  # a person's hours in wall seconds
    moved = run_invoke("lab.extend", "--lab", LAB, "--ttl", f"{SHORT_TTL}m", env=env)
    assert moved.returncode == 0, moved.stdout + moved.stderr
    assert "GPU time limit moved" in moved.stdout

    countdown = re.fullmatch(r"GPU time limit: (\d+)m left .*", time_limit_line(env))
    assert countdown and 0 < int(countdown.group(1)) < SHORT_TTL, countdown

    deadline = time.monotonic() + 60
    while schedule_names(state_dir) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert schedule_names(state_dir) == [], "fired, then deleted (ActionAfterCompletion DELETE)"
    assert gpu_scaling(state_dir) == {"minSize": 0, "maxSize": 2, "desiredSize": 0}
    line = time_limit_line(env)
    assert line.startswith("GPU time limit: expired at "), line
    assert "the schedule scaled the GPU nodes to 0" in line


def test_lab_extend_without_gpus_says_there_is_nothing_to_limit(guard_lab):
    _, env, _ = guard_lab
    result = run_invoke("lab.extend", "--lab", LAB, env=env)
    assert result.returncode == 1
    assert "no GPU node runs in lab 'g1'" in result.stderr and "lab.scale N" in result.stderr


def test_lab_scale_sets_it_again_and_lab_down_deletes_it(guard_lab):
    state_dir, env, _ = guard_lab
    scaled = run_invoke("lab.scale", "1", "--lab", LAB, env=env)
    assert scaled.returncode == 0, scaled.stdout + scaled.stderr
    assert "GPU time limit set" in scaled.stdout, "a fired schedule is gone: set, not moved"
    assert schedule_names(state_dir) == ["g1-gpu-ttl"]

    down = run_invoke("lab.down", "--lab", LAB, env=env)

    assert down.returncode == 0, down.stdout + down.stderr
    assert "GPU time limit removed (schedule g1-gpu-ttl deleted)" in down.stdout
    assert schedule_names_by_cli(env) == []
    assert time_limit_line(env) == "GPU time limit: none (no GPU session)"


def test_lab_scale_keeps_a_later_limit_unless_ttl_is_given(guard_lab):
    _, env, _ = guard_lab
    for args in (("lab.scale", "1"), ("lab.extend", "--ttl", "168h")):
        done = run_invoke(*args, "--lab", LAB, env=env)
        assert done.returncode == 0, done.stdout + done.stderr

    kept = run_invoke("lab.scale", "1", "--lab", LAB, env=env)
    assert kept.returncode == 0, kept.stdout + kept.stderr
    assert "GPU time limit kept: AWS scales g1-ng-gpu to 0 at" in kept.stdout, kept.stdout
    assert re.match(r"GPU time limit: 167h\d\dm left", time_limit_line(env))

    moved = run_invoke("lab.scale", "1", "--lab", LAB, "--ttl", "2h", env=env)
    assert moved.returncode == 0, moved.stdout + moved.stderr
    assert "GPU time limit moved" in moved.stdout
    assert re.match(r"GPU time limit: 1h\d\dm left", time_limit_line(env))
    assert run_invoke("lab.down", "--lab", LAB, env=env).returncode == 0


@pytest.fixture(scope="module")
def three_labs(guard_lab):
    """Beside g1: a rehearsal lab whose process died with a fault injected, and an AWS lab."""
    state_dir, env, _ = guard_lab
    dead = Lab.create(load_settings(None, {"lab": DEAD, "state_dir": str(state_dir)}), REHEARSAL)
    dead.update(phases={"infra": utc_now()}, outputs={"cluster_name": DEAD})
    entry = dead.journal.record_injecting("device-plugin-off")
    dead.journal.mark(entry, INJECTED)
    gone = subprocess.Popen(["true"])
    gone.wait()
    (dead.paths.sim_dir).mkdir(parents=True)
    (dead.paths.sim_dir / "endpoints.json").write_text(
        json.dumps({"pid": gone.pid, "kube_url": "http://127.0.0.1:9", "region": REGION})
    )
    aws = Lab.create(load_settings(None, {"lab": NO_CREDENTIALS, "state_dir": str(state_dir)}), AWS)
    aws.update(
        phases={"infra": utc_now()}, account_id=ACCOUNT,
        outputs={"cluster_name": NO_CREDENTIALS, "cluster_endpoint": ENDPOINT},
    )  # fmt: skip
    return state_dir, env


def test_lab_list_shows_every_lab_even_when_one_cannot_be_reached(three_labs):
    result = run_invoke("lab.list", env=three_labs[1])

    assert result.returncode == 0, result.stdout + result.stderr
    rows = {line.split()[0]: line.split() for line in result.stdout.splitlines()[1:4]}
    idle = estimate_hourly_cost(REGION, gpu_nodes=0, system_nodes=2).total_hourly
    assert rows[LAB] == [LAB, "sim", "yes", "0", f"{idle:.3f}*", "none", "none"]
    assert rows[DEAD] == [DEAD, "sim", "no", "-", "-", "-", "device-plugin-off"]
    assert rows[NO_CREDENTIALS][:4] == [NO_CREDENTIALS, "aws", "no", "-"]
    dead_endpoints = three_labs[0] / DEAD / "sim" / "endpoints.json"
    assert re.search(
        rf"^! {DEAD}: the rehearsal backend of lab '{DEAD}' does not answer: its process "
        rf"\(pid \d+, from {re.escape(str(dead_endpoints))}\) is not running$",
        result.stdout, re.M,
    )  # fmt: skip
    assert f"! {NO_CREDENTIALS}: no AWS credentials found" in result.stdout


def test_lab_down_all_goes_on_past_a_failing_lab_and_names_it(three_labs):
    state_dir, env = three_labs
    scaled = run_invoke("lab.scale", "1", "--lab", LAB, "--ttl", "off", "--yes", env=env)
    assert scaled.returncode == 0, scaled.stdout + scaled.stderr
    assert "GPU time limit: off (confirmed)" in scaled.stdout and schedule_names(state_dir) == []

    result = run_invoke("lab.down", "--all", env=env)

    assert result.returncode == 1
    out = result.stdout
    assert out.index(f"=== lab {NO_CREDENTIALS}") < out.index(f"=== lab {DEAD}")
    assert f"lab {NO_CREDENTIALS} failed: no AWS credentials found" in out
    assert f"lab '{DEAD}' does not answer: its process (pid" in out
    assert f"No process of its backend runs (none found by their state directory {state_dir}" in out
    assert f"lab.down --all: 2 of 3 done ({DEAD}, {LAB})" in out
    assert f"1 lab(s) failed: {NO_CREDENTIALS}: no AWS credentials found" in result.stderr
    assert gpu_scaling(state_dir)["desiredSize"] == 0


def test_a_failed_scaling_update_reaches_the_user_with_eks_own_error(tmp_path, monkeypatch):
    """EKS refuses to launch the GPUs: lab.scale stops with AWS's error, not a node timeout."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    for name in ("AWS_ENDPOINT_URL", "AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    settings = load_settings(None, {"lab": "s1", "state_dir": str(tmp_path), "region": REGION})
    lab = Lab.create(settings, AWS)
    lab.update(
        phases={"infra": utc_now()}, account_id=ACCOUNT, variables={stack.GPU_MAX_SIZE: 2},
        outputs={"cluster_name": "s1", "cluster_endpoint": ENDPOINT,
                 "gpu_ttl_scheduler_role_arn": f"arn:aws:iam::{ACCOUNT}:role/s1-gpu-ttl-scheduler",
                 "gpu_ttl_schedule_name": "s1-gpu-ttl"},
    )  # fmt: skip
    failure = {
        "errorCode": "AsgInstanceLaunchFailures",
        "errorMessage": "Could not launch On-Demand Instances. VcpuLimitExceeded - You have "
        "requested more vCPU capacity than your current vCPU limit of 0 allows",
        "resourceIds": ["eks-s1-ng-gpu-asg"],
    }
    sts, eks, scheduler = (lab.aws_client(s) for s in ("sts", "eks", "scheduler"))
    out = io.StringIO()
    with Stubber(sts) as identity, Stubber(eks) as api, Stubber(scheduler) as schedules:
        identity.add_response(
            "get_caller_identity",
            {"Account": ACCOUNT, "Arn": f"arn:aws:iam::{ACCOUNT}:user/me", "UserId": "ME"},
        )
        api.add_response(
            "describe_cluster",
            {"cluster": {"name": "s1", "arn": f"arn:aws:eks:{REGION}:{ACCOUNT}:cluster/s1",
                         "endpoint": ENDPOINT}},
        )  # fmt: skip
        schedules.add_response(
            "create_schedule", {"ScheduleArn": "arn:aws:scheduler:::s"},
            {**dict.fromkeys(("Name", "GroupName", "Description", "ScheduleExpression",
                              "ScheduleExpressionTimezone", "FlexibleTimeWindow",
                              "ActionAfterCompletion", "State"), ANY), "Target": ANY},
        )  # fmt: skip
        api.add_response(
            "describe_nodegroup",
            {"nodegroup": {"nodegroupName": "s1-ng-gpu", "status": "ACTIVE",
                           "scalingConfig": {"minSize": 0, "maxSize": 2, "desiredSize": 0}}},
        )  # fmt: skip
        api.add_response(
            "update_nodegroup_config", {"update": {"id": "u-9", "status": "InProgress"}}
        )
        api.add_response(
            "describe_update",
            {"update": {"id": "u-9", "status": "Failed", "errors": [failure]}},
            {"name": "s1", "updateId": "u-9", "nodegroupName": "s1-ng-gpu"},
        )

        with pytest.raises(LabError) as raised:  # the task prints a LabError as `error: ...`
            scale(lab, 1, Console(out))

        api.assert_no_pending_responses()
    message = str(raised.value)
    assert message.startswith("EKS update u-9 of node group s1-ng-gpu Failed: ")
    assert "AsgInstanceLaunchFailures: Could not launch On-Demand Instances. VcpuLimitExceeded" in (
        message
    )
    assert "==> follow EKS update u-9 of s1-ng-gpu" in out.getvalue()
    assert "wait for 1 Ready GPU node" not in out.getvalue(), "no node-wait timeout"
