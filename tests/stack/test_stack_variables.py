"""Variables: names, defaults, descriptions, and the plan-time checks that reject bad input.

The checks are exercised with the real terraform binary on variables.tf and
input_checks.tf alone (they reference variables only, and terraform_data is built in),
so a bad value is shown to fail `terraform plan` with a message that says what to fix.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from stack_spec import (
    GPU_INSTANCE_FAMILIES,
    STACK_DIR,
    VARIABLE_DEFAULTS,
    offline_terraform_env,
    stack,
)
from tool_support import require_tool

from labs.aws import stack as contract

PLAN_FILES = ("variables.tf", "input_checks.tf")
TERRAFORM_TYPES = {bool: "bool", int: "number", str: "string", list: "${list(string)}"}
SELF_CHECKABLE = {
    "gpu_desired_size",
    "gpu_max_size",
    "gpu_az_index",
    "gpu_instance_type",
    "gpu_operator_chart_version",
    "kube_prometheus_stack_chart_version",
    "TargetRegion",
}


def variables() -> dict[str, dict[str, Any]]:
    return stack()["variable"]


def default(name: str) -> Any:
    return variables()[name]["default"]


# --- names, defaults, descriptions ----------------------------------------------------


def test_variables_are_exactly_the_documented_set():
    assert set(variables()) == set(VARIABLE_DEFAULTS)


def test_orchestrator_variables_are_all_declared():
    assert contract.ORCHESTRATOR_VARIABLES <= set(variables())


@pytest.mark.parametrize("name", sorted(VARIABLE_DEFAULTS))
def test_variable_default(name):
    assert default(name) == VARIABLE_DEFAULTS[name]


@pytest.mark.parametrize("name", sorted(VARIABLE_DEFAULTS))
def test_variable_has_a_description_and_a_type_matching_its_default(name):
    assert variables()[name].get("description", "").strip()
    assert variables()[name]["type"] == TERRAFORM_TYPES[type(VARIABLE_DEFAULTS[name])]


def test_gpu_desired_size_defaults_to_zero():
    assert default("gpu_desired_size") == 0


def test_gpu_max_size_defaults_to_two_for_an_8_vcpu_quota():
    assert default("gpu_max_size") == 2


def test_gpu_operator_is_off_by_default():
    assert default("enable_gpu_operator") is False


def test_security_group_toggles_default_to_open():
    assert default("enable_aux_sg_vpc_allow") is True
    assert default("node_sg_enable_recommended_rules") is True


def test_gpu_operator_chart_defaults_to_pinned_v26_3_1():
    assert default("gpu_operator_chart_version") == "v26.3.1"


@pytest.mark.parametrize("name", sorted(SELF_CHECKABLE))
def test_self_checkable_variable_has_a_validation_block(name):
    assert variables()[name].get("validation")


def test_cross_variable_checks_are_plan_time_preconditions():
    (lifecycle,) = stack()["resource"]["terraform_data"]["input_checks"]["lifecycle"]
    conditions = {check["condition"] for check in lifecycle["precondition"]}
    assert "${var.gpu_max_size >= var.gpu_desired_size}" in conditions
    assert (
        "${var.gpu_az_index >= 0 && var.gpu_az_index < length(var.availability_zones)}"
        in conditions
    )


# --- behaviour under `terraform plan` --------------------------------------------------


@pytest.fixture(scope="module")
def checks_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A working directory holding only the variable declarations and input checks."""
    require_tool("terraform")
    workdir = tmp_path_factory.mktemp("input-checks")
    for name in PLAN_FILES:
        shutil.copy(STACK_DIR / name, workdir / name)
    return workdir


def plan(workdir: Path, **values: Any) -> tuple[bool, str]:
    """Plan with `values` over the defaults; (succeeded, output with whitespace collapsed)."""
    var_file = workdir / "test.tfvars.json"
    var_file.write_text(json.dumps(values))
    terraform = require_tool("terraform")
    result = subprocess.run(
        [terraform, "plan", "-input=false", "-no-color", "-lock=false", f"-var-file={var_file}"],
        cwd=workdir,
        env=offline_terraform_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    return result.returncode == 0, " ".join((result.stdout + result.stderr).split())


def assert_rejected(workdir: Path, expected_message: str, **values: Any) -> None:
    succeeded, output = plan(workdir, **values)
    assert not succeeded, f"plan accepted {values}"
    assert expected_message in output, output


def test_plan_accepts_the_defaults(checks_dir):
    succeeded, output = plan(checks_dir)
    assert succeeded, output


def test_plan_rejects_gpu_max_size_below_gpu_desired_size(checks_dir):
    assert_rejected(
        checks_dir,
        "gpu_max_size (1) must be >= gpu_desired_size (2)",
        gpu_desired_size=2,
        gpu_max_size=1,
    )


def test_plan_rejects_gpu_az_index_past_the_last_availability_zone(checks_dir):
    assert_rejected(checks_dir, "gpu_az_index (3) is out of range", gpu_az_index=3)


@pytest.mark.parametrize("name", ["gpu_desired_size", "gpu_max_size", "gpu_az_index"])
def test_plan_rejects_a_negative_gpu_size_or_index(checks_dir, name):
    assert_rejected(checks_dir, f"{name} must be a whole number >= 0", **{name: -1})


def test_plan_rejects_a_system_node_count_below_one(checks_dir):
    assert_rejected(checks_dir, "WorkerNodeCount must be a whole number >= 1", WorkerNodeCount=0)


@pytest.mark.parametrize("family", GPU_INSTANCE_FAMILIES)
def test_plan_accepts_every_known_nvidia_gpu_family(checks_dir, family):
    succeeded, output = plan(checks_dir, gpu_instance_type=f"{family}.xlarge")
    assert succeeded, output


@pytest.mark.parametrize("instance_type", ["t3.medium", "g5g.xlarge", "g4ad.xlarge", "g5"])
def test_plan_rejects_instance_types_outside_the_nvidia_gpu_families(checks_dir, instance_type):
    assert_rejected(
        checks_dir,
        "gpu_instance_type must be an NVIDIA x86_64 GPU instance type",
        gpu_instance_type=instance_type,
    )


@pytest.mark.parametrize("version", ["", "26.3.1", "v26.3", "latest", ">= v26.3.1"])
def test_plan_rejects_a_chart_version_that_is_not_an_exact_pin(checks_dir, version):
    assert_rejected(
        checks_dir,
        "gpu_operator_chart_version must be an exact chart version",
        gpu_operator_chart_version=version,
    )


@pytest.mark.parametrize("version", ["", "v88.5.3", "88.5", "latest", "~> 88.5"])
def test_plan_rejects_a_kube_prometheus_stack_version_that_is_not_an_exact_pin(checks_dir, version):
    assert_rejected(
        checks_dir,
        "kube_prometheus_stack_chart_version must be an exact chart version",
        kube_prometheus_stack_chart_version=version,
    )


def test_plan_accepts_monitoring_on_with_its_pinned_chart(checks_dir):
    succeeded, output = plan(
        checks_dir, enable_monitoring=True, kube_prometheus_stack_chart_version="88.5.3"
    )
    assert succeeded, output


@pytest.mark.parametrize("region", ["ap-northeast", "AP-NORTHEAST-2", "seoul"])
def test_plan_rejects_a_malformed_region(checks_dir, region):
    assert_rejected(checks_dir, "TargetRegion must be an AWS region code", TargetRegion=region)


def test_plan_rejects_availability_zones_outside_the_target_region(checks_dir):
    assert_rejected(
        checks_dir,
        "Every availability zone must be in TargetRegion (ap-northeast-2)",
        availability_zones=["us-east-1a", "us-east-1b", "us-east-1c"],
    )


def test_plan_rejects_subnet_blocks_that_do_not_match_the_zones(checks_dir):
    assert_rejected(
        checks_dir,
        "must each have one block per availability zone",
        public_subnet_blocks=["192.168.0.0/22", "192.168.4.0/22"],
    )


def test_plan_rejects_a_vpc_block_that_is_not_a_cidr(checks_dir):
    assert_rejected(checks_dir, "VpcBlock must be an IPv4 CIDR block", VpcBlock="192.168.0.0")
