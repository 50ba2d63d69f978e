"""The GPU time limit's IAM role: EventBridge Scheduler may assume it, and it may do nothing
but scale the lab's GPU node group (the policy templates and the HCL that renders them)."""

from __future__ import annotations

import json
import re
import string

from stack_spec import STACK_DIR, resolve, stack

from labs.aws import stack as contract

POLICY = STACK_DIR / "policies" / "gpu-ttl-scheduler.json.tftpl"
TRUST = STACK_DIR / "policies" / "gpu-ttl-scheduler-trust.json.tftpl"
GPU_GROUP_ARN = "arn:aws:eks:ap-northeast-2:111122223333:nodegroup/myeks/myeks-ng-gpu/0a1b"
SCHEDULE_ARN = "arn:aws:scheduler:ap-northeast-2:111122223333:schedule/default/myeks-gpu-ttl"
PLACEHOLDER = re.compile(r"\$\{(\w+)\}")


def rendered(path, **values) -> dict:
    """The template filled in as templatefile() fills it: it must then be a JSON policy."""
    return json.loads(string.Template(path.read_text()).substitute(values))


def as_list(value) -> list:
    return value if isinstance(value, list) else [value]


def templatefile_vars(expression: str) -> set[str]:
    """The names a `templatefile(path, { name = ... })` call passes to its template."""
    return set(re.findall(r"[{,]\s*(\w+)\s*=", expression.split(".tftpl", 1)[1]))


def test_the_role_may_only_update_the_gpu_node_group():
    policy = rendered(POLICY, nodegroup_arn=GPU_GROUP_ARN)
    assert policy["Version"] == "2012-10-17"
    (statement,) = policy["Statement"]
    assert statement["Effect"] == "Allow"
    assert as_list(statement["Action"]) == ["eks:UpdateNodegroupConfig"]
    assert as_list(statement["Resource"]) == [GPU_GROUP_ARN]
    assert not {"NotAction", "NotResource", "Condition"} & set(statement)


def test_the_policy_is_rendered_with_the_gpu_node_groups_arn():
    body = stack()["resource"]["aws_iam_role_policy"]["gpu_ttl_scheduler"]
    assert body["role"] == "${aws_iam_role.gpu_ttl_scheduler.id}"
    assert "/policies/gpu-ttl-scheduler.json.tftpl" in body["policy"]
    assert (
        'nodegroup_arn = module.eks.eks_managed_node_groups["gpu"].node_group_arn'
        in (body["policy"])
    )
    assert templatefile_vars(body["policy"]) == set(PLACEHOLDER.findall(POLICY.read_text()))


def test_no_other_permission_reaches_the_role():
    resources = stack()["resource"]
    role = resources["aws_iam_role"]["gpu_ttl_scheduler"]
    assert not {"managed_policy_arns", "inline_policy", "permissions_boundary"} & set(role)
    policies = resources["aws_iam_role_policy"].values()
    assert [p["role"] for p in policies] == ["${aws_iam_role.gpu_ttl_scheduler.id}"]
    attachments = resources.get("aws_iam_role_policy_attachment", {}).values()
    assert not [a for a in attachments if "gpu_ttl_scheduler" in str(a.get("role"))]


def test_only_the_labs_schedule_in_its_account_can_assume_the_role():
    trust = rendered(TRUST, account_id="111122223333", schedule_arn=SCHEDULE_ARN)
    (statement,) = trust["Statement"]
    assert statement["Effect"] == "Allow"
    assert statement["Principal"] == {"Service": "scheduler.amazonaws.com"}
    assert as_list(statement["Action"]) == ["sts:AssumeRole"]
    assert statement["Condition"] == {
        "StringEquals": {"aws:SourceAccount": "111122223333", "aws:SourceArn": SCHEDULE_ARN}
    }
    role = stack()["resource"]["aws_iam_role"]["gpu_ttl_scheduler"]
    expression = role["assume_role_policy"]
    assert templatefile_vars(expression) == set(PLACEHOLDER.findall(TRUST.read_text()))
    assert "schedule/${local.gpu_ttl_schedule_group}/${local.gpu_ttl_schedule_name}" in expression


def test_names_and_outputs_match_what_the_tool_uses():
    base = "${var.ClusterBaseName}"
    assert resolve("${local.gpu_ttl_schedule_name}") == contract.gpu_ttl_schedule_name(base)
    assert resolve("${local.gpu_ttl_role_name}") == contract.gpu_ttl_role_name(base)
    assert resolve("${local.gpu_ttl_schedule_group}") == contract.GPU_TTL_SCHEDULE_GROUP
    role = stack()["resource"]["aws_iam_role"]["gpu_ttl_scheduler"]
    assert role["name"] == "${local.gpu_ttl_role_name}"
    outputs = stack()["output"]
    assert outputs["gpu_ttl_scheduler_role_arn"]["value"] == "${aws_iam_role.gpu_ttl_scheduler.arn}"
    assert outputs["gpu_ttl_schedule_name"]["value"] == "${local.gpu_ttl_schedule_name}"
