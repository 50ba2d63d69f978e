"""The contract between the orchestrator and the Terraform stack in `terraform/`.

Variable and output names are defined once here, so the Terraform adapter, the
rehearsal backend and the tests all agree with `terraform/variables.tf` and
`terraform/outputs.tf` (a test checks both directions).
"""

from __future__ import annotations

import string
from pathlib import Path
from typing import Final

# The EKS stack this checkout ships (the AWS backend applies it from the lab's own dir).
STACK_DIR: Final = Path(__file__).resolve().parents[2] / "terraform"

# IAM policy documents the stack renders with templatefile() (the rehearsal seeds the same).
POLICIES_DIR: Final = STACK_DIR / "policies"
GPU_TTL_POLICY: Final = "gpu-ttl-scheduler.json.tftpl"
GPU_TTL_TRUST_POLICY: Final = "gpu-ttl-scheduler-trust.json.tftpl"
# The GPU time limit's schedule lives in the account's default schedule group.
GPU_TTL_SCHEDULE_GROUP: Final = "default"

# The lab's ONE Prometheus rules file. The stack reads it where a checkout keeps it, beside
# the stack's own directory (`${path.module}/../monitoring/gpu-alerts.yaml`); the AWS backend
# places it the same way beside each lab's copy of the stack (labs/aws/terraform.py).
GPU_ALERT_RULES_PATH: Final = "monitoring/gpu-alerts.yaml"
GPU_ALERT_RULES: Final = STACK_DIR.parent / GPU_ALERT_RULES_PATH
# Files the stack reads from beside its directory: path relative to the stack's parent -> file.
STACK_COMPANIONS: Final = {GPU_ALERT_RULES_PATH: GPU_ALERT_RULES}
# Where enable_monitoring's Prometheus answers: kube-prometheus-stack names its Service
# "<fullname>-prometheus", and the release name "kube-prometheus-stack" holds the chart's name,
# so the fullname is the release name (chart 88.5.3's _helpers.tpl and prometheus/service.yaml).
MONITORING_NAMESPACE: Final = "monitoring"
PROMETHEUS_SERVICE: Final = "kube-prometheus-stack-prometheus"
PROMETHEUS_PORT: Final = 9090
# The gpu-operator chart value the stack sets from enable_monitoring (not in the values file):
# the ClusterPolicy's dcgm-exporter ServiceMonitor, which needs Prometheus' CRDs.
DCGM_SERVICE_MONITOR_VALUE: Final = "dcgmExporter.serviceMonitor.enabled"

# Input variables the orchestrator sets on every apply (the lab's full variable set).
CLUSTER_BASE_NAME: Final = "ClusterBaseName"
TARGET_REGION: Final = "TargetRegion"
AVAILABILITY_ZONES: Final = "availability_zones"
GPU_INSTANCE_TYPE: Final = "gpu_instance_type"
GPU_MAX_SIZE: Final = "gpu_max_size"
GPU_DESIRED_SIZE: Final = "gpu_desired_size"
GPU_AZ_INDEX: Final = "gpu_az_index"
ENABLE_GPU_OPERATOR: Final = "enable_gpu_operator"
# kube-prometheus-stack with the lab's GPU alert rules (the chart version stays terraform's pin).
ENABLE_MONITORING: Final = "enable_monitoring"
GPU_OPERATOR_NAMESPACE: Final = "gpu_operator_namespace"
GPU_OPERATOR_CHART_VERSION: Final = "gpu_operator_chart_version"
ENABLE_AUX_SG_VPC_ALLOW: Final = "enable_aux_sg_vpc_allow"
NODE_SG_ENABLE_RECOMMENDED_RULES: Final = "node_sg_enable_recommended_rules"
# The switches scenarios and lab.up flip (lab.status shows them): the operator, monitoring,
# the SG rules.
STACK_TOGGLES: Final = (
    ENABLE_GPU_OPERATOR,
    ENABLE_MONITORING,
    ENABLE_AUX_SG_VPC_ALLOW,
    NODE_SG_ENABLE_RECOMMENDED_RULES,
)

ORCHESTRATOR_VARIABLES: Final = frozenset(
    {
        CLUSTER_BASE_NAME,
        TARGET_REGION,
        AVAILABILITY_ZONES,
        GPU_INSTANCE_TYPE,
        GPU_MAX_SIZE,
        GPU_DESIRED_SIZE,
        GPU_AZ_INDEX,
        ENABLE_GPU_OPERATOR,
        ENABLE_MONITORING,
        GPU_OPERATOR_NAMESPACE,
        GPU_OPERATOR_CHART_VERSION,
        ENABLE_AUX_SG_VPC_ALLOW,
        NODE_SG_ENABLE_RECOMMENDED_RULES,
    }
)

# Outputs of the stack (and of the rehearsal backend's stand-in for it).
STACK_OUTPUTS: Final = frozenset(
    {
        "configure_kubectl",
        "cluster_name",
        "cluster_endpoint",
        "cluster_security_group_id",
        "node_security_group_id",
        "auxiliary_node_sg_id",
        "gpu_subnet_az",
        "gpu_subnet_id",
        "ami_al2023_standard",
        "ami_al2023_nvidia",
        "region",
        "gpu_node_group_name",
        "system_node_group_name",
        "vpc_id",
        "gpu_ttl_scheduler_role_arn",
        "gpu_ttl_schedule_name",
    }
)


# Tags on the GPU node group that tell a Cluster Autoscaler, while the group is at 0, which
# labels and taints a new node would carry (`k8s.io/cluster-autoscaler/node-template/...`).
NODE_TEMPLATE_TAG_PREFIX: Final = "k8s.io/cluster-autoscaler/node-template/"


def gpu_node_group_name(cluster_base_name: str) -> str:
    """The GPU managed node group's name, as the stack names it."""
    return f"{cluster_base_name}-ng-gpu"


def system_node_group_name(cluster_base_name: str) -> str:
    """The system managed node group's name, as the stack names it."""
    return f"{cluster_base_name}-ng-1"


def gpu_ttl_schedule_name(cluster_base_name: str) -> str:
    """The GPU time limit's one-time schedule (default group); the stack's role trusts only it."""
    return f"{cluster_base_name}-gpu-ttl"


def gpu_ttl_role_name(cluster_base_name: str) -> str:
    """The role that schedule acts as, as the stack names it."""
    return f"{cluster_base_name}-gpu-ttl-scheduler"


def render_policy(file_name: str, **values: str) -> str:
    """A policy template under `terraform/policies/` filled in as templatefile() would.

    The templates use only plain `${name}` placeholders, which string.Template reads alike.
    """
    return string.Template((POLICIES_DIR / file_name).read_text(encoding="utf-8")).substitute(
        values
    )
