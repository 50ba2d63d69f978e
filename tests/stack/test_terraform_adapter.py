"""The Terraform adapter against the real `terraform` binary and a provider-free stack.

`tests/fixtures/stack` declares the same variables and outputs as `terraform/` but
builds only `terraform_data` resources, so init, plan, apply and destroy run for real
and offline.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import hcl2
import pytest
from hcl2 import SerializationOptions
from lab_support import FIXTURES, ROOT
from tool_support import require_tool

from labs.aws import stack
from labs.aws.terraform import VARIABLES_FILE, TerraformInfra
from labs.errors import InfraError
from labs.settings import AVAILABILITY_ZONES_VARIABLE, load_settings

FIXTURE_STACK = FIXTURES / "stack"
REAL_STACK = ROOT / "terraform"


@pytest.fixture(autouse=True)
def offline_terraform(monkeypatch, tmp_path):
    """Terraform in automation mode, with any attempt to reach a registry failing fast."""
    cli_config = tmp_path / "terraformrc"
    cli_config.write_text("")
    monkeypatch.setenv("TF_CLI_CONFIG_FILE", str(cli_config))
    monkeypatch.setenv("TF_IN_AUTOMATION", "1")
    monkeypatch.setenv("CHECKPOINT_DISABLE", "1")
    for proxy in ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy"):
        monkeypatch.setenv(proxy, "http://127.0.0.1:9")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)


@pytest.fixture
def terraform() -> str:
    """The terraform binary on PATH (a README prerequisite): missing, the test fails."""
    return require_tool("terraform")


@pytest.fixture
def infra(terraform, tmp_path) -> TerraformInfra:
    return TerraformInfra(tmp_path / "labs" / "myeks" / "terraform", FIXTURE_STACK)


@pytest.fixture
def variables() -> dict:
    return load_settings().stack_variables(operator_enabled=False)


def _declared(stack_dir: Path, kind: str) -> dict[str, dict]:
    options = SerializationOptions(strip_string_quotes=True, explicit_blocks=False)
    declared: dict[str, dict] = {}
    for path in sorted(stack_dir.glob("*.tf")):
        with path.open(encoding="utf-8") as handle:
            for block in hcl2.load(handle, serialization_options=options).get(kind, []):
                declared.update(block)
    return declared


def test_fixture_has_the_contracts_outputs_and_accepts_the_lab_variables():
    variables = _declared(FIXTURE_STACK, "variable")
    assert set(_declared(FIXTURE_STACK, "output")) == stack.STACK_OUTPUTS
    lab_variables = load_settings().stack_variables(operator_enabled=True)
    assert set(lab_variables) <= set(variables)
    unset = set(variables) - set(lab_variables)
    assert unset and all("default" in variables[name] for name in unset)


def test_fixture_declares_exactly_the_real_stacks_variables_and_outputs():
    real, fixture = _declared(REAL_STACK, "variable"), _declared(FIXTURE_STACK, "variable")
    assert {name: spec.get("type") for name, spec in fixture.items()} == {
        name: spec.get("type") for name, spec in real.items()
    }
    assert set(_declared(FIXTURE_STACK, "output")) == set(_declared(REAL_STACK, "output"))


def test_init_runs_offline_in_the_labs_own_directory_and_is_idempotent(infra):
    infra.init()
    infra.init()
    copied = {path.name for path in infra.working_dir.glob("*.tf")}
    assert copied == {path.name for path in FIXTURE_STACK.glob("*.tf")}
    assert not (FIXTURE_STACK / ".terraform").exists()
    assert not (FIXTURE_STACK / "terraform.tfstate").exists()


def test_outputs_are_empty_before_the_first_apply(infra, variables):
    assert infra.outputs() == {}
    assert "+ create terraform_data.cluster" in infra.plan(variables)
    assert infra.outputs() == {}


def test_apply_returns_plain_outputs_and_a_second_apply_plans_nothing(infra, variables):
    outputs = infra.apply(variables)

    assert set(outputs) == stack.STACK_OUTPUTS
    assert outputs["cluster_name"] == "myeks"
    assert outputs["gpu_node_group_name"] == stack.gpu_node_group_name("myeks")
    assert outputs["cluster_endpoint"] == "https://myeks.eks.ap-northeast-2.amazonaws.com"
    assert outputs["gpu_subnet_az"] == "ap-northeast-2a"
    assert infra.outputs() == outputs
    assert infra.plan(variables) == []
    assert infra.apply(variables) == outputs


def test_plan_lists_toggle_changes_without_applying_them(infra, variables):
    infra.apply(variables)

    operator_on = infra.plan({**variables, stack.ENABLE_GPU_OPERATOR: True})
    assert operator_on == ["+ create terraform_data.gpu_operator[0]"]
    blocked = infra.plan(
        load_settings().stack_variables(operator_enabled=False, cross_node_traffic=False)
    )
    assert sorted(blocked) == [
        "- destroy terraform_data.aux_sg_vpc_allow[0]",
        "- destroy terraform_data.node_sg_recommended_rules[0]",
    ]
    assert infra.plan(variables) == []


def test_plan_names_updated_attributes_replacements_and_output_changes(infra, variables):
    infra.apply(variables)

    assert infra.plan({**variables, stack.GPU_MAX_SIZE: 3}) == [
        "~ update terraform_data.gpu_node_group (input, output)"
    ]
    renamed = infra.plan({**variables, stack.GPU_INSTANCE_TYPE: "g6.xlarge"})
    assert "-/+ replace terraform_data.gpu_node_group" in renamed
    moved = infra.plan({**variables, stack.GPU_AZ_INDEX: 1})
    assert "~ update output gpu_subnet_az" in moved


def test_the_lab_directory_works_with_terraform_by_hand(terraform, infra):
    settings = load_settings({"lab": "study", "region": "us-east-1"})
    infra.apply(settings.stack_variables(operator_enabled=True))

    remembered = json.loads((infra.working_dir / VARIABLES_FILE).read_text())
    assert remembered[stack.CLUSTER_BASE_NAME] == "study"
    assert remembered[AVAILABILITY_ZONES_VARIABLE] == ["us-east-1a", "us-east-1b", "us-east-1c"]
    by_hand = subprocess.run(
        [terraform, "plan", "-detailed-exitcode", "-input=false", "-no-color"],
        cwd=infra.working_dir,
        capture_output=True,
        text=True,
        check=False,
    )
    assert by_hand.returncode == 0, by_hand.stdout + by_hand.stderr


def test_a_failing_apply_raises_with_terraforms_message_and_keeps_the_lab(infra, variables):
    before = infra.apply(variables)

    with pytest.raises(InfraError) as failure:
        infra.apply({**variables, stack.GPU_DESIRED_SIZE: 3})

    message = str(failure.value)
    assert "terraform apply failed" in message
    assert "gpu_max_size (2) must be >= gpu_desired_size (3)" in message
    assert "CLI configuration" not in message
    assert infra.outputs() == before
    remembered = json.loads((infra.working_dir / VARIABLES_FILE).read_text())
    assert remembered[stack.GPU_DESIRED_SIZE] == 0


def test_destroy_removes_everything_and_is_safe_to_repeat(infra, variables):
    infra.destroy()
    infra.apply(variables)

    infra.destroy()
    infra.destroy()

    assert infra.outputs() == {}
    assert "+ create terraform_data.cluster" in infra.plan(variables)


@pytest.mark.usefixtures("terraform")
def test_labs_side_by_side_keep_separate_state(tmp_path):
    first = TerraformInfra(tmp_path / "first", FIXTURE_STACK)
    second = TerraformInfra(tmp_path / "second", FIXTURE_STACK)
    first.apply(load_settings({"lab": "first"}).stack_variables(operator_enabled=False))
    second.apply(load_settings({"lab": "second"}).stack_variables(operator_enabled=False))

    first.destroy()

    assert first.outputs() == {}
    assert second.outputs()["cluster_name"] == "second"


@pytest.mark.usefixtures("terraform")
def test_edits_to_the_stack_reach_the_lab_and_removed_files_leave_it(tmp_path, variables):
    stack_dir = tmp_path / "stack"
    shutil.copytree(FIXTURE_STACK, stack_dir)
    infra = TerraformInfra(tmp_path / "lab", stack_dir)
    infra.apply(variables)
    extra = stack_dir / "extra.tf"

    extra.write_text('resource "terraform_data" "extra" {}\n')
    assert infra.plan(variables) == ["+ create terraform_data.extra"]
    extra.unlink()
    assert infra.plan(variables) == []
    assert not (infra.working_dir / "extra.tf").exists()


READS_A_COMPANION = """
output "rules" {
  value = file("${path.module}/../monitoring/rules.yaml")
}
"""


@pytest.mark.usefixtures("terraform")
def test_companions_lie_beside_the_labs_copy_as_beside_the_stack_and_follow_edits(
    tmp_path, variables
):
    stack_dir = tmp_path / "stack"
    shutil.copytree(FIXTURE_STACK, stack_dir)
    (stack_dir / "reads.tf").write_text(READS_A_COMPANION)
    rules = tmp_path / "rules.yaml"
    rules.write_text("groups: []\n")
    infra = TerraformInfra(
        tmp_path / "labs" / "myeks" / "terraform",
        stack_dir,
        companions={"monitoring/rules.yaml": rules},
    )

    assert infra.apply(variables)["rules"] == "groups: []\n"
    rules.write_text("groups: [{name: gpu}]\n")
    assert infra.apply(variables)["rules"] == "groups: [{name: gpu}]\n"
    assert (tmp_path / "labs" / "myeks" / "monitoring" / "rules.yaml").is_file()


def test_a_missing_companion_is_named(tmp_path, variables):
    infra = TerraformInfra(
        tmp_path / "lab" / "terraform",
        FIXTURE_STACK,
        companions={"monitoring/rules.yaml": tmp_path / "gone.yaml"},
    )

    with pytest.raises(InfraError, match=r"gone\.yaml is missing: the stack reads it as"):
        infra.apply(variables)


def test_missing_terraform_binary_is_named_with_how_to_install(variables, tmp_path):
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    infra_without_binary = TerraformInfra(tmp_path / "labs" / "myeks" / "terraform", FIXTURE_STACK)

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PATH", str(empty))
        with pytest.raises(InfraError, match=r"'terraform' was not found on PATH.*[Ii]nstall"):
            infra_without_binary.apply(variables)


def test_a_missing_stack_directory_is_reported(tmp_path, variables):
    infra = TerraformInfra(tmp_path / "lab", tmp_path / "no-such-stack")

    with pytest.raises(InfraError, match="no-such-stack does not exist"):
        infra.apply(variables)


def test_streamed_output_is_shown_live_and_failures_point_at_it(infra, variables, capfd):
    streaming = TerraformInfra(infra.working_dir, FIXTURE_STACK, stream_output=True)

    outputs = streaming.apply(variables)
    assert outputs["cluster_name"] == "myeks"
    assert "Apply complete!" in capfd.readouterr().out
    with pytest.raises(InfraError, match="see Terraform's output above"):
        streaming.apply({**variables, stack.GPU_DESIRED_SIZE: 3})
    assert "must be >= gpu_desired_size" in capfd.readouterr().err
