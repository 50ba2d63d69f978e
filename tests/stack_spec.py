"""What the Terraform stack in `terraform/` must say, and how the stack tests read it.

`terraform init` cannot reach a provider or module registry offline, so the stack is
checked by parsing its HCL (python-hcl2) against the facts below. The key sets of the
upstream modules are pinned here, checked once against terraform-aws-modules/eks
v21.19.0 and vpc v6.6.0 (their `variables.tf`), because a node-group key the module's
object type does not declare is dropped WITHOUT an error (a misspelt `subnets` silently
spreads the GPU group over every AZ), while an unknown module argument at least fails
`terraform validate`.
"""

from __future__ import annotations

import os
import re
from functools import cache
from pathlib import Path
from typing import Any, Final

import hcl2
from hcl2 import SerializationOptions

STACK_DIR: Final = Path(__file__).resolve().parent.parent / "terraform"

# --- upstream module interfaces (eks v21.19.0, vpc v6.6.0) -----------------------------

EKS_V21_NODE_GROUP_KEYS: Final = frozenset(
    """
    ami_id ami_release_version ami_type attach_cluster_primary_security_group
    block_device_mappings bootstrap_extra_args capacity_reservation_specification
    capacity_type cloudinit_post_nodeadm cloudinit_pre_nodeadm
    cluster_primary_security_group_id cpu_options create create_iam_role
    create_iam_role_policy create_launch_template create_placement_group
    create_security_group credit_specification desired_size disable_api_termination
    disk_size ebs_optimized efa_indices enable_bootstrap_user_data enable_efa_only
    enable_efa_support enable_monitoring enclave_options force_update_version
    iam_role_additional_policies iam_role_arn iam_role_attach_cni_policy
    iam_role_description iam_role_name iam_role_path iam_role_permissions_boundary
    iam_role_policy_statements iam_role_tags iam_role_use_name_prefix
    instance_market_options instance_types kernel_id key_name kubernetes_version labels
    launch_template_default_version launch_template_description launch_template_id
    launch_template_name launch_template_tags launch_template_use_name_prefix
    launch_template_version license_specifications maintenance_options max_size
    metadata_options min_size name network_interfaces node_repair_config placement
    post_bootstrap_user_data pre_bootstrap_user_data private_dns_name_options ram_disk_id
    remote_access security_group_description security_group_egress_rules
    security_group_ingress_rules security_group_name security_group_tags
    security_group_use_name_prefix subnet_ids tag_specifications tags taints timeouts
    update_config update_launch_template_default_version use_custom_launch_template
    use_latest_ami_release_version use_name_prefix user_data_template_path
    vpc_security_group_ids
    """.split()
)

# Nested object types inside a node group; unknown nested keys are dropped the same way.
EKS_V21_NESTED_KEYS: Final = {
    "block_device_mappings": frozenset({"device_name", "ebs", "no_device", "virtual_name"}),
    "ebs": frozenset(
        {
            "delete_on_termination",
            "encrypted",
            "iops",
            "kms_key_id",
            "snapshot_id",
            "throughput",
            "volume_initialization_rate",
            "volume_size",
            "volume_type",
        }
    ),
    "metadata_options": frozenset(
        {
            "http_endpoint",
            "http_protocol_ipv6",
            "http_put_response_hop_limit",
            "http_tokens",
            "instance_metadata_tags",
        }
    ),
    "taints": frozenset({"key", "value", "effect"}),
    "node_repair_config": frozenset(
        {
            "enabled",
            "max_parallel_nodes_repaired_count",
            "max_parallel_nodes_repaired_percentage",
            "max_unhealthy_node_threshold_count",
            "max_unhealthy_node_threshold_percentage",
            "node_repair_config_overrides",
        }
    ),
    "addons": frozenset(
        {
            "name",
            "before_compute",
            "most_recent",
            "addon_version",
            "configuration_values",
            "pod_identity_association",
            "preserve",
            "resolve_conflicts_on_create",
            "resolve_conflicts_on_update",
            "service_account_role_arn",
            "timeouts",
            "tags",
        }
    ),
}

# Module arguments the stack uses, each checked against that module's variables.tf.
EKS_V21_INPUTS_USED: Final = frozenset(
    """
    name kubernetes_version vpc_id subnet_ids endpoint_public_access
    endpoint_private_access enable_cluster_creator_admin_permissions enable_irsa
    enabled_log_types node_security_group_enable_recommended_rules addons
    eks_managed_node_groups tags
    """.split()
)
VPC_V6_INPUTS_USED: Final = frozenset(
    """
    name cidr azs enable_dns_support enable_dns_hostnames public_subnets private_subnets
    enable_nat_gateway single_nat_gateway one_nat_gateway_per_az manage_default_network_acl
    map_public_ip_on_launch igw_tags nat_gateway_tags public_subnet_tags
    private_subnet_tags tags
    """.split()
)
MODULE_META_ARGUMENTS: Final = frozenset({"source", "version", "count", "for_each", "depends_on"})

# --- versions -------------------------------------------------------------------------

TERRAFORM_REQUIRED_VERSION: Final = ">= 1.5.7"
PROVIDER_VERSIONS: Final = {
    "aws": ("hashicorp/aws", ">= 6.28"),  # what eks v21.19 and vpc v6.6 need
    "helm": ("hashicorp/helm", "~> 2.17"),  # v2 nested kubernetes {} block
    "cloudinit": ("hashicorp/cloudinit", "~> 2.3"),
    "null": ("hashicorp/null", "~> 3.2"),
    "tls": ("hashicorp/tls", "~> 4.0"),
    "time": ("hashicorp/time", "~> 0.13"),
}
MODULE_VERSIONS: Final = {
    "vpc": ("terraform-aws-modules/vpc/aws", "~> 6.5"),
    "eks": ("terraform-aws-modules/eks/aws", "~> 21.0"),
}

# --- variables (DOMAIN.md section 2) --------------------------------------------------

VARIABLE_DEFAULTS: Final = {
    "ClusterBaseName": "myeks",
    "KubernetesVersion": "1.35",
    "TargetRegion": "ap-northeast-2",
    "availability_zones": ["ap-northeast-2a", "ap-northeast-2b", "ap-northeast-2c"],
    "VpcBlock": "192.168.0.0/16",
    "public_subnet_blocks": ["192.168.0.0/22", "192.168.4.0/22", "192.168.8.0/22"],
    "private_subnet_blocks": ["192.168.12.0/22", "192.168.16.0/22", "192.168.20.0/22"],
    "WorkerNodeInstanceType": "t3.medium",
    "WorkerNodeCount": 2,
    "WorkerNodeVolumesize": 30,
    "gpu_desired_size": 0,
    "gpu_max_size": 2,
    "gpu_instance_type": "g5.xlarge",
    "gpu_node_disk_size": 100,
    "gpu_az_index": 0,
    "enable_gpu_operator": False,
    "gpu_operator_namespace": "gpu-operator",
    "gpu_operator_chart_version": "v26.3.1",
    "enable_monitoring": False,
    "kube_prometheus_stack_chart_version": "88.5.3",
    "enable_aux_sg_vpc_allow": True,
    "node_sg_enable_recommended_rules": True,
}

# NVIDIA x86_64 families the AL2023 NVIDIA AMI serves (g5g is Arm, g4ad is AMD).
GPU_INSTANCE_FAMILIES: Final = (
    "g4dn", "g5", "g6", "g6e", "p3", "p3dn", "p4d", "p4de", "p5", "p5e", "p5en",
)  # fmt: skip

# --- node groups and cluster ----------------------------------------------------------

NODE_GROUP_KEYS_RELIED_ON: Final = frozenset(
    {
        "name",
        "use_name_prefix",
        "ami_type",
        "instance_types",
        "desired_size",
        "min_size",
        "max_size",
        "subnet_ids",
        "vpc_security_group_ids",
        "block_device_mappings",
        "metadata_options",
        "iam_role_additional_policies",
        "labels",
    }
)
GPU_NODE_GROUP_KEYS_RELIED_ON: Final = NODE_GROUP_KEYS_RELIED_ON | {
    "capacity_type",
    "taints",
    "node_repair_config",
    "tags",
}
SYSTEM_NODE_GROUP_KEYS_RELIED_ON: Final = NODE_GROUP_KEYS_RELIED_ON | {"cloudinit_pre_nodeadm"}

ROOT_DEVICE: Final = "/dev/xvda"  # the AL2023 AMIs' root device
SYSTEM_MAX_PODS: Final = 50
IMDS_OPTIONS: Final = {
    "http_endpoint": "enabled",
    "http_tokens": "required",
    "http_put_response_hop_limit": 2,
}
SSM_CORE_POLICY_ARN: Final = "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore"
GPU_LABELS: Final = {"tier": "gpu", "nvidia.com/gpu": "true"}
GPU_TAINT: Final = {"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}

ADDONS: Final = frozenset(
    {
        "vpc-cni",
        "kube-proxy",
        "coredns",
        "metrics-server",
        "external-dns",
        "eks-pod-identity-agent",
        "eks-node-monitoring-agent",
        "cert-manager",
    }
)
ADDONS_BEFORE_COMPUTE: Final = frozenset({"vpc-cni"})
CONTROL_PLANE_LOG_TYPES: Final = ("api", "scheduler")
AMI_SSM_PARAMETER: Final = (
    "/aws/service/eks/optimized-ami/${{var.KubernetesVersion}}"
    "/amazon-linux-2023/x86_64/{flavour}/recommended/image_id"
)

# --- GPU Operator ---------------------------------------------------------------------

GPU_OPERATOR_REPOSITORY: Final = "https://helm.ngc.nvidia.com/nvidia"
GPU_OPERATOR_CHART: Final = "gpu-operator"
GPU_OPERATOR_TIMEOUT_SECONDS: Final = 900
# Chart values the lab sets, by dotted path.
GPU_OPERATOR_VALUES: Final = {
    "driver.enabled": False,
    "toolkit.enabled": False,
    "devicePlugin.enabled": True,
    "nfd.enabled": True,
    "dcgmExporter.enabled": True,
}
# Leaf value paths the values file may set, each checked against gpu-operator chart
# v26.3.1's values.yaml, with the type of the chart's default (helm ignores unknown keys).
GPU_OPERATOR_CHART_PATHS: Final = {
    "driver.enabled": bool,
    "toolkit.enabled": bool,
    "devicePlugin.enabled": bool,
    "nfd.enabled": bool,
    "dcgmExporter.enabled": bool,
    "validator.plugin.env": list,
    "operator.tolerations": list,
    "dcgmExporter.serviceMonitor.enabled": bool,  # set from enable_monitoring (gpu_operator.tf)
}
GPU_TOLERATION: Final = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}

# --- kube-prometheus-stack (enable_monitoring) ----------------------------------------

KUBE_PROMETHEUS_STACK_REPOSITORY: Final = "https://prometheus-community.github.io/helm-charts"
KUBE_PROMETHEUS_STACK_CHART: Final = "kube-prometheus-stack"
KUBE_PROMETHEUS_STACK_VERSION: Final = "88.5.3"
# Value paths the lab sets, each checked against kube-prometheus-stack 88.5.3's
# charts/kube-prometheus-stack/values.yaml (and `kube-state-metrics.*` against its subchart
# kube-state-metrics 8.4.0's values.yaml), with the type of the chart's default: helm
# ignores a misspelt key without a word.
KUBE_PROMETHEUS_STACK_CHART_PATHS: Final = {
    "additionalPrometheusRulesMap": dict,
    "alertmanager.enabled": bool,
    "grafana.enabled": bool,
    "kube-state-metrics.metricLabelsAllowlist": list,
    "prometheus.prometheusSpec.serviceMonitorSelectorNilUsesHelmValues": bool,
    "prometheus.prometheusSpec.ruleSelectorNilUsesHelmValues": bool,
}
# Values that would rename or move the Prometheus Service (same chart and file): the lab
# must leave them at the chart's defaults for PROMETHEUS_SERVICE and PROMETHEUS_PORT to hold.
KUBE_PROMETHEUS_STACK_NAMING_PATHS: Final = frozenset(
    {"nameOverride", "fullnameOverride", "namespaceOverride", "prometheus.service.port"}
)
# The chart's own facts (templates/_helpers.tpl "kube-prometheus-stack.fullname": a release
# name holding the chart's name is the fullname, cut at 26 characters;
# templates/prometheus/service.yaml: "<fullname>-prometheus"; values.yaml
# prometheus.service.port: 9090).
KUBE_PROMETHEUS_STACK_FULLNAME_MAX: Final = 26
KUBE_PROMETHEUS_STACK_PROMETHEUS_PORT: Final = 9090

# --- IAM ------------------------------------------------------------------------------

# policy file (under terraform/policies/) -> actions its controller cannot work without
IAM_POLICY_REQUIRED_ACTIONS: Final = {
    "aws-load-balancer-controller.json": frozenset(
        {
            "iam:CreateServiceLinkedRole",
            "ec2:DescribeSubnets",
            "ec2:DescribeSecurityGroups",
            "ec2:CreateSecurityGroup",
            "ec2:AuthorizeSecurityGroupIngress",
            "elasticloadbalancing:CreateLoadBalancer",
            "elasticloadbalancing:CreateTargetGroup",
            "elasticloadbalancing:CreateListener",
            "elasticloadbalancing:RegisterTargets",
            "elasticloadbalancing:DeregisterTargets",
            "elasticloadbalancing:DeleteLoadBalancer",
            "elasticloadbalancing:AddTags",
        }
    ),
    "external-dns.json": frozenset(
        {
            "route53:ChangeResourceRecordSets",
            "route53:ListHostedZones",
            "route53:ListResourceRecordSets",
            "route53:ListTagsForResources",
        }
    ),
    "cluster-autoscaler.json": frozenset(
        {
            "autoscaling:DescribeAutoScalingGroups",
            "autoscaling:DescribeAutoScalingInstances",
            "autoscaling:SetDesiredCapacity",
            "autoscaling:TerminateInstanceInAutoScalingGroup",
            "ec2:DescribeLaunchTemplateVersions",
            "ec2:DescribeInstanceTypes",
            "eks:DescribeNodegroup",
        }
    ),
}

# --- reading the stack ----------------------------------------------------------------

_HCL_OPTIONS: Final = SerializationOptions(
    strip_string_quotes=True,
    explicit_blocks=False,
    with_comments=False,
    preserve_heredocs=False,
)
_LOCAL_REFERENCE: Final = re.compile(r"^\$\{local\.(\w+)\}$")
_LABEL_DEPTH: Final = {"resource": 2, "data": 2}  # type and name; other blocks have one label


def load_hcl(path: Path) -> dict[str, Any]:
    """One HCL file (.tf or .tfvars) as plain Python values; expressions stay `${...}` strings."""
    try:
        with path.open() as handle:
            return hcl2.load(handle, serialization_options=_HCL_OPTIONS)
    except Exception as error:  # lark raises many types; all mean the same thing here
        message = f"{path} is not valid HCL ({error}); `terraform fmt` shows where"
        raise ValueError(message) from error


def offline_terraform_env() -> dict[str, str]:
    """Environment for running the terraform binary in tests: no network, no stray TF_VAR_*."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("TF_VAR_")}
    quiet = {"CHECKPOINT_DISABLE": "1", "TF_IN_AUTOMATION": "1", "TF_CLI_CONFIG_FILE": os.devnull}
    return env | quiet


@cache
def stack() -> dict[str, Any]:
    """Every .tf file of the stack merged by block type, with labels as nested keys.

    `stack()["module"]["eks"]`, `stack()["resource"]["helm_release"]["gpu_operator"]`,
    `stack()["variable"]["gpu_max_size"]`, `stack()["locals"]["gpu_subnet_id"]`;
    `terraform` and `provider` blocks stay lists (they may repeat).
    """
    merged: dict[str, Any] = {"terraform": [], "provider": []}
    for path in sorted(STACK_DIR.glob("*.tf")):
        document = load_hcl(path)
        for block_type, blocks in document.items():
            if isinstance(merged.get(block_type), list):
                merged[block_type].extend(blocks)
                continue
            target = merged.setdefault(block_type, {})
            for block in blocks:
                _merge_labels(target, block, _LABEL_DEPTH.get(block_type, 1), path.name)
    return merged


def _merge_labels(target: dict[str, Any], block: dict[str, Any], depth: int, where: str) -> None:
    for label, body in block.items():
        if depth > 1:
            _merge_labels(target.setdefault(label, {}), body, depth - 1, f"{where} {label}")
        elif label in target:
            raise AssertionError(f"{where}: {label} is declared twice in the stack")
        else:
            target[label] = body


def resolve(value: Any) -> Any:
    """The value behind a bare `local.NAME` reference (recursively); other values as is."""
    match = _LOCAL_REFERENCE.match(value) if isinstance(value, str) else None
    if match is None:
        return value
    return resolve(stack()["locals"][match.group(1)])


def node_groups() -> dict[str, dict[str, Any]]:
    """The eks module's managed node groups by map key ("system", "gpu")."""
    return stack()["module"]["eks"]["eks_managed_node_groups"]


def leaf_paths(tree: dict, prefix: str = "") -> dict[str, object]:
    """Dotted paths of a values tree, down to its leaves (or to an empty map)."""
    leaves: dict[str, object] = {}
    for key, value in tree.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            leaves |= leaf_paths(value, f"{path}.")
        else:
            leaves[path] = value
    return leaves
