"""The controllers' IAM policies: valid JSON, the actions each needs, scoped writes."""

from __future__ import annotations

import json
from functools import cache

import pytest
from stack_spec import IAM_POLICY_REQUIRED_ACTIONS, STACK_DIR, stack

POLICY_FILES = sorted(IAM_POLICY_REQUIRED_ACTIONS)


@cache
def policy(file_name: str) -> dict:
    return json.loads((STACK_DIR / "policies" / file_name).read_text())


def as_list(value) -> list:
    return value if isinstance(value, list) else [value]


def statements(file_name: str) -> list[dict]:
    return policy(file_name)["Statement"]


def statements_granting(file_name: str, action: str) -> list[dict]:
    return [s for s in statements(file_name) if action in as_list(s["Action"])]


def test_policy_files_are_exactly_the_three_controller_policies():
    assert sorted(path.name for path in (STACK_DIR / "policies").glob("*.json")) == POLICY_FILES


def test_each_policy_file_backs_an_iam_policy_resource():
    loaded = {body["policy"] for body in stack()["resource"]["aws_iam_policy"].values()}
    expected = {f'${{file("${{path.module}}/policies/{name}")}}' for name in POLICY_FILES}
    assert loaded == expected


@pytest.mark.parametrize("file_name", POLICY_FILES)
def test_policy_is_a_valid_allow_only_policy_document(file_name):
    assert policy(file_name)["Version"] == "2012-10-17"
    for statement in statements(file_name):
        assert statement["Effect"] == "Allow"
        assert statement["Action"] and statement["Resource"]


@pytest.mark.parametrize("file_name", POLICY_FILES)
def test_policy_grants_the_actions_its_controller_needs(file_name):
    granted = {action for s in statements(file_name) for action in as_list(s["Action"])}
    assert IAM_POLICY_REQUIRED_ACTIONS[file_name] <= granted


@pytest.mark.parametrize("file_name", POLICY_FILES)
def test_policy_never_grants_a_whole_service(file_name):
    for statement in statements(file_name):
        for action in as_list(statement["Action"]):
            assert action != "*" and not action.endswith(":*"), action


@pytest.mark.parametrize(
    "action", ["autoscaling:SetDesiredCapacity", "autoscaling:TerminateInstanceInAutoScalingGroup"]
)
def test_cluster_autoscaler_scales_only_autoscaler_enabled_groups(action):
    (statement,) = statements_granting("cluster-autoscaler.json", action)
    condition = statement["Condition"]["StringEquals"]
    assert condition == {"aws:ResourceTag/k8s.io/cluster-autoscaler/enabled": "true"}


def test_external_dns_changes_records_only_in_hosted_zones():
    (statement,) = statements_granting("external-dns.json", "route53:ChangeResourceRecordSets")
    assert as_list(statement["Resource"]) == ["arn:aws:route53:::hostedzone/*"]


def test_load_balancer_controller_creates_only_cluster_tagged_load_balancers():
    (statement,) = statements_granting(
        "aws-load-balancer-controller.json", "elasticloadbalancing:CreateLoadBalancer"
    )
    assert set(statement["Condition"]["Null"]) == {"aws:RequestTag/elbv2.k8s.aws/cluster"}
