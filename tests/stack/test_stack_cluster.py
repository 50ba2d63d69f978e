"""The EKS cluster itself: v21 defaults the lab overrides, addons, logs, AMI look-ups."""

from __future__ import annotations

import pytest
from stack_spec import (
    ADDONS,
    ADDONS_BEFORE_COMPUTE,
    AMI_SSM_PARAMETER,
    CONTROL_PLANE_LOG_TYPES,
    EKS_V21_INPUTS_USED,
    EKS_V21_NESTED_KEYS,
    MODULE_META_ARGUMENTS,
    stack,
)


def eks() -> dict:
    return stack()["module"]["eks"]


def test_eks_module_arguments_are_all_known_eks_v21_inputs():
    unknown = set(eks()) - EKS_V21_INPUTS_USED - MODULE_META_ARGUMENTS
    assert not unknown, f"not checked against eks v21 variables.tf: {unknown}"


def test_cluster_is_named_after_cluster_base_name_at_the_kubernetes_version_variable():
    assert eks()["name"] == "${var.ClusterBaseName}"
    assert eks()["kubernetes_version"] == "${var.KubernetesVersion}"


def test_cluster_lives_in_the_private_subnets_of_the_lab_vpc():
    assert eks()["vpc_id"] == "${module.vpc.vpc_id}"
    assert eks()["subnet_ids"] == "${module.vpc.private_subnets}"


def test_cluster_endpoint_is_public_for_helm_exec_auth_and_private_for_nodes():
    assert eks()["endpoint_public_access"] is True
    assert eks()["endpoint_private_access"] is True


def test_cluster_creator_gets_admin_access():
    assert eks()["enable_cluster_creator_admin_permissions"] is True


def test_irsa_is_enabled():
    assert eks()["enable_irsa"] is True


def test_control_plane_logs_api_and_scheduler_only():
    assert tuple(eks()["enabled_log_types"]) == CONTROL_PLANE_LOG_TYPES


def test_node_security_group_recommended_rules_follow_their_toggle():
    rules = eks()["node_security_group_enable_recommended_rules"]
    assert rules == "${var.node_sg_enable_recommended_rules}"


def test_addons_are_the_lab_set_each_most_recent():
    addons = eks()["addons"]
    assert set(addons) == ADDONS
    assert all(settings.get("most_recent") is True for settings in addons.values())


@pytest.mark.parametrize("addon", sorted(ADDONS))
def test_addon_keys_are_declared_by_eks_v21(addon):
    assert set(eks()["addons"][addon]) <= EKS_V21_NESTED_KEYS["addons"]


def test_only_vpc_cni_is_installed_before_compute():
    before = {name for name, settings in eks()["addons"].items() if settings.get("before_compute")}
    assert before == ADDONS_BEFORE_COMPUTE


@pytest.mark.parametrize(
    ("data_source", "flavour"),
    [("eks_ami_al2023_standard", "standard"), ("eks_ami_al2023_nvidia", "nvidia")],
)
def test_ami_ids_come_from_the_eks_optimized_ssm_parameters(data_source, flavour):
    parameter = stack()["data"]["aws_ssm_parameter"][data_source]["name"]
    assert parameter == AMI_SSM_PARAMETER.format(flavour=flavour)
