"""The AWS backend's real code paths: the real terraform binary, boto3 against moto in
server mode, and the kubernetes client against a rehearsal world's API server.

The fixture stack (`tests/fixtures/stack`) has exactly the variables and outputs of
`terraform/` but only built-in resources. An override file points its cluster endpoint
at the rehearsal world's API server and lets its operator resource install the GPU
Operator into that world, as the helm release would.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from lab_support import FIXTURES, desired_by_aws_cli, invoke_env, run_invoke
from scenario_support import own_world
from tool_support import require_tool, require_venv_tool

import scenarios
from labs.aws import stack
from labs.aws.schedules import due_at
from labs.commands import down, scale, up
from labs.console import Console
from labs.errors import CommandError, InfraError
from labs.lab import Lab
from labs.settings import load_settings
from labs.sim.aws.seed import moto_clients

FIXTURE_STACK = FIXTURES / "stack"
LAB = "awslab"
REGION = "ap-northeast-2"
# The AWS backend sets its GPU time limit on the wall clock, but this moto belongs to a world
# whose clock runs 300x: a week there lasts 34 wall minutes, longer than this module.
TTL = "168h"
DESTROYED_MARKER = "stack-destroyed-by-terraform"
DESTROY_MARKER_RESOURCE = f"""
resource "terraform_data" "says_when_destroyed" {{
  provisioner "local-exec" {{
    when    = destroy
    command = "echo {DESTROYED_MARKER}"
  }}
}}
"""
HELM_STANDIN = """\
import base64, json, sys
from labs.sim.infra import SimInfra

endpoints = json.loads(open(sys.argv[1]).read())
SimInfra(endpoints).apply(json.loads(base64.b64decode(sys.argv[2])))
"""


def require_aws_backend_tools() -> None:
    """What `lab.up` on AWS runs (its preflight checks both): terraform and kubectl on PATH."""
    require_tool("terraform")
    require_tool("kubectl")


def _override(kube_url: str, endpoints_file: Path, standin: Path) -> str:
    variables = ", ".join(f"{name} = var.{name}" for name in sorted(stack.ORCHESTRATOR_VARIABLES))
    encoded = f"${{base64encode(jsonencode({{ {variables} }}))}}"
    return f"""
output "cluster_endpoint" {{
  value = "{kube_url}"
}}

resource "terraform_data" "gpu_operator" {{
  provisioner "local-exec" {{
    command = "{sys.executable} {standin} {endpoints_file} {encoded}"
  }}
}}
"""


@pytest.fixture(scope="module")
def aws_world(tmp_path_factory: pytest.TempPathFactory):
    """A world for an AWS-backend lab: moto server + control plane, and the fixture stack."""
    require_aws_backend_tools()
    require_venv_tool("aws")  # the lab kubeconfig's `aws eks get-token`
    root = tmp_path_factory.mktemp("aws")
    world = own_world(root / "world", speed=300, cluster_name=LAB, region=REGION)
    stack_dir = root / "stack"
    shutil.copytree(FIXTURE_STACK, stack_dir)
    standin = root / "helm_standin.py"
    standin.write_text(HELM_STANDIN)
    endpoints_file = root / "world" / "endpoints.json"
    (stack_dir / "destroy_marker.tf").write_text(DESTROY_MARKER_RESOURCE)
    (stack_dir / "lab_override.tf").write_text(
        _override(world.endpoints["kube_url"], endpoints_file, standin)
    )
    patch = pytest.MonkeyPatch()
    patch.setenv("AWS_ENDPOINT_URL", world.endpoints["aws_endpoint_url"])
    patch.setenv("AWS_ACCESS_KEY_ID", world.endpoints["aws_access_key_id"])
    patch.setenv("AWS_SECRET_ACCESS_KEY", world.endpoints["aws_secret_access_key"])
    patch.delenv("AWS_PROFILE", raising=False)
    # the lab kubeconfig authenticates with `aws eks get-token`, from this environment
    patch.setenv("PATH", f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    settings = load_settings(
        None,
        {"lab": LAB, "region": REGION, "state_dir": str(root / "labs"),
         "stack_dir": str(stack_dir), "node_ready_timeout": 60, "operator_ready_timeout": 60,
         "probe_timeout": 60, "ttl": TTL},
    )  # fmt: skip
    try:
        yield world, settings
    finally:
        patch.undo()
        world.stop()


@pytest.fixture
def aws_lab(aws_world):
    """The module's world with its lab up: the tests after lab.up's own build on that lab, and
    one run alone brings it up first (`lab.up` changes nothing a second time)."""
    world, settings = aws_world
    if not settings.paths.state_file.exists():
        up.up(settings, sim=False, dry_run=False, console=_console()[0])
    return world, settings


def _client(world, service: str):
    return moto_clients(world.endpoints)(service)


def _schedules(world) -> list[str]:
    return [s["Name"] for s in _client(world, "scheduler").list_schedules()["Schedules"]]


def _scaling(world) -> dict:
    eks = _client(world, "eks")
    group = eks.describe_nodegroup(clusterName=LAB, nodegroupName=f"{LAB}-ng-gpu")["nodegroup"]
    return group["scalingConfig"]


def _console() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(out), out


def _tfvars(settings) -> dict:
    return json.loads((settings.paths.terraform_dir / "terraform.tfvars.json").read_text())


def test_aws_dry_run_prints_the_plan_and_the_calls_and_changes_nothing(aws_world):
    world, settings = aws_world
    console, out = _console()
    up.up(settings, sim=False, dry_run=True, console=console)
    text = out.getvalue()
    assert "nothing is changed" in text
    assert "account   123456789012" in text, "the read-only preflight runs in a dry run"
    assert "+ create terraform_data.gpu_operator[0]" in text
    assert "'minSize': 0, 'maxSize': 2, 'desiredSize': 2" in text
    assert _scaling(world)["desiredSize"] == 0
    assert not settings.paths.state_file.exists()
    assert not (settings.paths.terraform_dir / "terraform.tfstate").exists()


def test_aws_lab_up_applies_with_terraform_then_scales_through_the_eks_api(aws_world):
    world, settings = aws_world
    console, out = _console()
    lab = up.up(settings, sim=False, dry_run=False, console=console)
    text = out.getvalue()
    assert lab.backend.name == "aws"
    assert _scaling(world) == {"minSize": 0, "maxSize": 2, "desiredSize": 2}
    assert _tfvars(settings)[stack.ENABLE_GPU_OPERATOR] is True
    assert _tfvars(settings)[stack.GPU_DESIRED_SIZE] == 0, "scaling must never use the variable"
    assert "+ create terraform_data.gpu_operator[0]" in text
    assert "NVIDIA A10G, 580.126.09, 23028 MiB" in text
    assert lab.outputs["cluster_endpoint"] == world.endpoints["kube_url"]
    assert lab.record["account_id"] == "123456789012"
    schedule = _client(world, "scheduler").get_schedule(Name=f"{LAB}-gpu-ttl")
    assert schedule["Target"]["RoleArn"] == lab.outputs["gpu_ttl_scheduler_role_arn"]
    left = due_at(schedule) - datetime.now(UTC)
    assert timedelta(hours=167, minutes=50) < left <= timedelta(hours=168), "TTL on the wall clock"


def test_aws_lab_up_twice_does_no_second_apply_or_scale(aws_lab):
    _, settings = aws_lab
    console, out = _console()
    up.up(settings, sim=False, dry_run=False, console=console)
    text = out.getvalue()
    assert text.count("already applied with these variables; skipping") == 2
    assert "(already so; no API call)" in text


def test_aws_lab_scale_carries_min_0_max_2_and_waits(aws_lab):
    world, settings = aws_lab
    console, out = _console()
    scale.scale(Lab.open(settings), 1, console)
    assert _scaling(world) == {"minSize": 0, "maxSize": 2, "desiredSize": 1}
    assert "1 GPU node(s):" in out.getvalue()


def test_nccl_sg_block_applies_the_full_variable_set_with_only_the_toggles_changed(aws_lab):
    _, settings = aws_lab
    lab = Lab.open(settings)
    scenario = scenarios.get("nccl-sg-block")
    toggles = {stack.ENABLE_AUX_SG_VPC_ALLOW, stack.NODE_SG_ENABLE_RECOMMENDED_RULES}
    before = _tfvars(settings)
    assert before[stack.ENABLE_GPU_OPERATOR] is True and all(before[t] is True for t in toggles)

    assert scenario.preview is not None
    assert sorted(scenario.preview(lab)) == [
        "- destroy terraform_data.aux_sg_vpc_allow[0]",
        "- destroy terraform_data.node_sg_recommended_rules[0]",
    ]
    scenario.inject(lab)
    after = _tfvars(settings)
    assert {name for name in before if after[name] != before[name]} == toggles
    assert all(after[t] is False for t in toggles) and after[stack.ENABLE_GPU_OPERATOR] is True
    scenario.revert(lab)
    assert _tfvars(settings) == before


def test_monitoring_from_lab_up_stays_through_a_scenarios_toggles_and_a_plain_lab_up(aws_lab):
    """lab.up --monitoring turns it on; the applies after it (a scenario's inject and revert,
    a lab.up without the flag) run with the setting off and must keep what was applied."""
    _, settings = aws_lab
    console, out = _console()
    up.up(replace(settings, monitoring=True), sim=False, dry_run=False, console=console)
    assert "+ create terraform_data.monitoring[0]" in out.getvalue()
    on = _tfvars(settings)
    assert on[stack.ENABLE_MONITORING] is True

    lab = Lab.open(settings)
    assert lab.settings.monitoring is False
    scenario = scenarios.get("nccl-sg-block")
    scenario.inject(lab)
    assert _tfvars(settings)[stack.ENABLE_MONITORING] is True
    scenario.revert(lab)
    assert _tfvars(settings) == on

    console, out = _console()
    up.up(settings, sim=False, dry_run=False, console=console)
    assert _tfvars(settings) == on
    assert "terraform_data.monitoring" not in out.getvalue()


def test_lab_down_scales_to_zero_even_when_a_revert_fails(aws_lab):
    world, settings = aws_lab
    lab = Lab.open(settings)
    entry = lab.journal.record_injecting("stuck-fault")
    lab.journal.mark(entry, "injected")

    def failing_revert(_lab, _console):
        raise CommandError("the cluster API did not answer")

    console, out = _console()
    with pytest.raises(CommandError, match="could not be reverted: stuck-fault"):
        down.down(
            settings, destroy=False, confirm=lambda _q: False, revert=failing_revert,
            console=console,
        )  # fmt: skip
    assert _scaling(world)["desiredSize"] == 0, "the cost guard must scale down regardless"
    assert "could not revert: the cluster API did not answer" in out.getvalue()
    assert [e["scenario"] for e in lab.journal.outstanding()] == ["stuck-fault"]
    lab.journal.mark(entry, "reverted")


def _aws_env(world, settings) -> dict[str, str]:
    """A user's environment for the AWS lab: its state dir, stack and AWS credentials."""
    return invoke_env(
        settings.state_dir, INVOKE_LAB_REGION=REGION, INVOKE_LAB_STACK_DIR=str(settings.stack_dir),
        AWS_ENDPOINT_URL=world.endpoints["aws_endpoint_url"],
        AWS_ACCESS_KEY_ID=world.endpoints["aws_access_key_id"],
        AWS_SECRET_ACCESS_KEY=world.endpoints["aws_secret_access_key"],
    )  # fmt: skip


@contextmanager
def _kubernetes_damaged(world, kubeconfig: Path, damage: str) -> Iterator[str]:
    """The lab's Kubernetes side as a careless week leaves it; what lab.down must then name.
    Put back afterwards (the kubeconfig, the API server's process)."""
    good = kubeconfig.read_text()
    document = yaml.safe_load(good)
    apiserver = world.control_plane.pids["kube-apiserver"]
    if damage == "refused":  # an access entry removed, an expired profile: 401
        document["users"][0]["user"] = {"token": "k8s-aws-v1.not-a-token"}
        kubeconfig.write_text(yaml.safe_dump(document))
        named = "was refused: 401 Unauthorized"
    elif damage == "deleted":
        kubeconfig.unlink()
        named = f"the lab's kubeconfig ({kubeconfig}) is missing"
    elif damage == "nothing listens":
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            url = f"https://127.0.0.1:{probe.getsockname()[1]}"
        document["clusters"][0]["cluster"]["server"] = url
        kubeconfig.write_text(yaml.safe_dump(document))
        named = f"refusing to read the cluster at {url}"
    else:  # the API server stopped (SIGSTOP): it takes connections and never answers
        os.kill(apiserver, signal.SIGSTOP)
        named = "no answer in time (the server may be stopped or overloaded)"
    try:
        yield named
    finally:
        os.kill(apiserver, signal.SIGCONT)
        kubeconfig.write_text(good)


@pytest.mark.parametrize("damage", ["refused", "deleted", "nothing listens", "stopped"])
def test_aws_lab_down_reaches_zero_gpus_whatever_kubernetes_says(aws_lab, damage):
    """The GPU node group is an AWS resource: lab.down scales it to 0 through the EKS API
    whatever the lab's Kubernetes says, names what it could not read there, and exits 1."""
    world, settings = aws_lab
    scale.scale(Lab.open(settings), 2, _console()[0])
    env = _aws_env(world, settings)

    with _kubernetes_damaged(world, settings.paths.kubeconfig, damage) as named:
        ran = run_invoke("lab.down", "--lab", LAB, env=env, timeout=600)

    assert ran.returncode == 1, ran.stdout + ran.stderr
    assert "Traceback" not in ran.stdout + ran.stderr
    assert desired_by_aws_cli(env, LAB) == 0
    assert f"GPU node group {LAB}-ng-gpu reads desiredSize 0 (the EKS API took it)" in ran.stderr
    assert "could not watch the GPU nodes leave through Kubernetes" in ran.stderr
    assert named in ran.stderr


def test_aws_lab_down_scales_to_zero_and_is_safe_twice(aws_lab):
    world, settings = aws_lab
    for _ in range(2):
        console, out = _console()
        down.down(
            settings, destroy=False, confirm=lambda _q: False,
            revert=lambda lab, c: [], console=console,
        )  # fmt: skip
        assert _scaling(world) == {"minSize": 0, "maxSize": 2, "desiredSize": 0}
        assert "no GPU bills" in out.getvalue()
        assert _schedules(world) == [], "scaled to 0, the GPU time limit must be gone"
    assert Lab.open(settings).outputs, "lab.down without --destroy keeps the lab"


def test_lab_down_destroy_completes_with_the_gpu_node_group_deleted_out_of_band(aws_lab):
    """The cost guard from the cloud's truth: the group is gone, the rest is still destroyed."""
    world, settings = aws_lab
    moto_clients(world.endpoints)("eks").delete_nodegroup(
        clusterName=LAB, nodegroupName=f"{LAB}-ng-gpu"
    )
    env = _aws_env(world, settings)

    ran = run_invoke("lab.down", "--lab", LAB, "--destroy", "--yes", env=env)

    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert f"GPU node group {LAB}-ng-gpu of cluster {LAB}: not found" in ran.stdout
    assert DESTROYED_MARKER in ran.stdout, "terraform destroy did not run"
    assert f"lab {LAB!r} is gone" in ran.stdout
    assert not settings.paths.state_file.exists()


def test_destroy_of_a_half_built_lab_still_runs_terraform_destroy(tmp_path: Path):
    """A first apply that fails half-way leaves resources; --destroy must not orphan them."""
    from moto.server import ThreadedMotoServer

    require_aws_backend_tools()
    stack_dir = tmp_path / "stack"
    shutil.copytree(FIXTURE_STACK, stack_dir)
    marker = tmp_path / "destroyed"
    (stack_dir / "half_built.tf").write_text(f"""
resource "terraform_data" "created_first" {{
  input = "{marker}"
  provisioner "local-exec" {{
    when    = destroy
    command = "touch ${{self.input}}"
  }}
}}

resource "terraform_data" "fails" {{
  depends_on = [terraform_data.created_first]
  provisioner "local-exec" {{
    command = "exit 3"
  }}
}}
""")
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    patch = pytest.MonkeyPatch()
    patch.setenv("AWS_ENDPOINT_URL", f"http://{host}:{port}")
    patch.setenv("AWS_ACCESS_KEY_ID", "testing")
    patch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    patch.setenv("PATH", f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    settings = load_settings(
        None, {"lab": "half", "state_dir": str(tmp_path / "labs"), "stack_dir": str(stack_dir)}
    )
    try:
        console, _ = _console()
        with pytest.raises(InfraError):
            up.up(settings, sim=False, dry_run=False, console=console)
        assert not marker.exists()
        down.down(
            settings, destroy=True, confirm=lambda _q: True, revert=lambda lab, c: [],
            console=console,
        )  # fmt: skip
        assert marker.exists(), "terraform destroy did not run on the half-built lab"
        assert not settings.paths.state_file.exists()
    finally:
        patch.undo()
        server.stop()
