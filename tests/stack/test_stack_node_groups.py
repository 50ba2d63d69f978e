"""The system and GPU managed node groups (DOMAIN.md section 2) as eks v21 will read them."""

from __future__ import annotations

import pytest
import yaml
from stack_spec import (
    EKS_V21_NESTED_KEYS,
    EKS_V21_NODE_GROUP_KEYS,
    GPU_LABELS,
    GPU_NODE_GROUP_KEYS_RELIED_ON,
    GPU_TAINT,
    IMDS_OPTIONS,
    ROOT_DEVICE,
    SSM_CORE_POLICY_ARN,
    SYSTEM_MAX_PODS,
    SYSTEM_NODE_GROUP_KEYS_RELIED_ON,
    node_groups,
    resolve,
    stack,
)

from labs.aws import stack as contract

GROUPS = ("system", "gpu")
TAINT_EFFECTS = {"NO_SCHEDULE": "NoSchedule", "NO_EXECUTE": "NoExecute"}


def gpu() -> dict:
    return node_groups()["gpu"]


def system() -> dict:
    return node_groups()["system"]


def test_stack_has_exactly_a_system_and_a_gpu_node_group():
    assert set(node_groups()) == set(GROUPS)


@pytest.mark.parametrize("group", GROUPS)
def test_node_group_keys_are_all_declared_by_eks_v21(group):
    unknown = set(node_groups()[group]) - EKS_V21_NODE_GROUP_KEYS
    assert not unknown, f"eks v21 silently drops these {group} node-group keys: {unknown}"


@pytest.mark.parametrize("group", GROUPS)
def test_nested_node_group_keys_are_all_declared_by_eks_v21(group):
    settings = node_groups()[group]
    nested = {
        "metadata_options": [resolve(settings.get("metadata_options", {}))],
        "node_repair_config": [settings.get("node_repair_config", {})],
        "taints": list(settings.get("taints", {}).values()),
        "block_device_mappings": list(settings.get("block_device_mappings", {}).values()),
    }
    nested["ebs"] = [mapping.get("ebs", {}) for mapping in nested["block_device_mappings"]]
    for kind, objects in nested.items():
        for value in objects:
            unknown = set(value) - EKS_V21_NESTED_KEYS[kind]
            assert not unknown, f"eks v21 silently drops {kind} keys {unknown} in {group}"


def test_gpu_node_group_sets_every_key_the_lab_relies_on():
    assert GPU_NODE_GROUP_KEYS_RELIED_ON <= set(gpu())


def test_system_node_group_sets_every_key_the_lab_relies_on():
    assert SYSTEM_NODE_GROUP_KEYS_RELIED_ON <= set(system())


def test_node_groups_are_named_after_cluster_base_name_as_labs_stack_expects():
    base = "${var.ClusterBaseName}"
    assert resolve(system()["name"]) == contract.system_node_group_name(base)
    assert resolve(gpu()["name"]) == contract.gpu_node_group_name(base)


@pytest.mark.parametrize("group", GROUPS)
def test_node_group_names_are_exact_not_prefixes(group):
    assert node_groups()[group]["use_name_prefix"] is False


def test_gpu_node_group_uses_single_subnet_from_gpu_az_index():
    subnets = [resolve(subnet) for subnet in gpu()["subnet_ids"]]
    assert subnets == ["${module.vpc.private_subnets[var.gpu_az_index]}"]


def test_system_node_group_spans_all_private_subnets():
    assert system()["subnet_ids"] == "${module.vpc.private_subnets}"


def root_volume(settings: dict) -> dict:
    (mapping,) = settings["block_device_mappings"].values()
    assert mapping["device_name"] == ROOT_DEVICE
    return mapping["ebs"]


def assert_disk_not_silently_dropped(settings: dict) -> None:
    assert "disk_size" not in settings, "v21 drops disk_size with its custom launch template"
    assert settings.get("use_custom_launch_template", True) is True


def test_gpu_root_volume_is_100_gib_via_block_device_mappings():
    volume = root_volume(gpu())
    assert volume["volume_size"] == "${var.gpu_node_disk_size}"
    assert stack()["variable"]["gpu_node_disk_size"]["default"] == 100
    assert volume["volume_type"] == "gp3"
    assert_disk_not_silently_dropped(gpu())


def test_system_root_volume_is_30_gib_via_block_device_mappings():
    volume = root_volume(system())
    assert volume["volume_size"] == "${var.WorkerNodeVolumesize}"
    assert stack()["variable"]["WorkerNodeVolumesize"]["default"] == 30
    assert volume["volume_type"] == "gp3"
    assert_disk_not_silently_dropped(system())


def test_gpu_node_group_runs_al2023_nvidia_on_demand():
    assert gpu()["ami_type"] == "AL2023_x86_64_NVIDIA"
    assert gpu()["capacity_type"] == "ON_DEMAND"
    assert gpu()["instance_types"] == ["${var.gpu_instance_type}"]


def test_gpu_node_group_scales_from_gpu_desired_size_between_zero_and_gpu_max_size():
    assert gpu()["desired_size"] == "${var.gpu_desired_size}"
    assert gpu()["min_size"] == 0
    assert gpu()["max_size"] == "${var.gpu_max_size}"


def test_gpu_nodes_are_labelled_tier_gpu_and_nvidia_gpu_true():
    assert gpu()["labels"] == GPU_LABELS


def test_gpu_nodes_are_tainted_nvidia_gpu_true_no_schedule():
    assert list(gpu()["taints"].values()) == [GPU_TAINT]


def test_cluster_autoscaler_node_template_tags_match_gpu_labels_and_taint():
    prefix = contract.NODE_TEMPLATE_TAG_PREFIX
    expected = {f"{prefix}label/{key}": value for key, value in gpu()["labels"].items()}
    for taint in gpu()["taints"].values():
        effect = TAINT_EFFECTS[taint["effect"]]
        expected[f"{prefix}taint/{taint['key']}"] = f"{taint['value']}:{effect}"
    template_tags = {key: value for key, value in gpu()["tags"].items() if key.startswith(prefix)}
    assert template_tags == expected


def test_gpu_node_auto_repair_is_off():
    assert gpu()["node_repair_config"] == {"enabled": False}


@pytest.mark.parametrize("group", GROUPS)
def test_node_group_requires_imdsv2_with_hop_limit_2(group):
    assert resolve(node_groups()[group]["metadata_options"]) == IMDS_OPTIONS


@pytest.mark.parametrize("group", GROUPS)
def test_node_group_can_be_reached_through_ssm(group):
    policies = node_groups()[group]["iam_role_additional_policies"].values()
    assert SSM_CORE_POLICY_ARN in [resolve(arn) for arn in policies]


@pytest.mark.parametrize("group", GROUPS)
def test_node_group_uses_the_shared_auxiliary_security_group(group):
    groups = node_groups()[group]["vpc_security_group_ids"]
    assert groups == ["${aws_security_group.node_aux.id}"]


def test_system_node_group_carries_the_three_controller_policies():
    attached = set(system()["iam_role_additional_policies"].values())
    policies = stack()["resource"]["aws_iam_policy"]
    assert {f"${{aws_iam_policy.{name}.arn}}" for name in policies} <= attached
    assert len(policies) == 3


def test_system_node_group_is_worker_node_count_t3_medium_al2023_standard():
    assert system()["ami_type"] == "AL2023_x86_64_STANDARD"
    assert system()["instance_types"] == ["${var.WorkerNodeInstanceType}"]
    assert system()["desired_size"] == "${var.WorkerNodeCount}"
    assert system()["min_size"] == "${var.WorkerNodeCount - 1}"
    assert system()["max_size"] == "${var.WorkerNodeCount + 2}"
    assert stack()["variable"]["WorkerNodeInstanceType"]["default"] == "t3.medium"


def test_system_nodes_allow_50_pods_through_nodeadm_node_config():
    parts = system()["cloudinit_pre_nodeadm"]
    (node_config,) = [part for part in parts if part["content_type"] == "application/node.eks.aws"]
    document = yaml.safe_load(node_config["content"])
    assert document["apiVersion"] == "node.eks.aws/v1alpha1"
    assert document["kind"] == "NodeConfig"
    assert document["spec"]["kubelet"]["config"]["maxPods"] == SYSTEM_MAX_PODS
