"""What moto answers unlike AWS for this stack, put right in this process's moto.

moto invents node-group fields the stack never set (Kubernetes 1.19, release
1.19.8-20210414, a 20 GB disk, an SSH key `eksKeypair`), names an Auto Scaling group it never
creates, and knows no EC2 service quota (only VPC ones). A person checking the lab with the
aws CLI after `eval "$(invoke lab.env)"` would read another cluster. So, once per process:
- a node group created without `version`/`releaseVersion` gets the cluster's version and the
  AMI release the stack's SSM parameter resolves to; without `remoteAccess` it has none
  (EKS adds no SSH key: the stack's nodes are reached through SSM);
- its Auto Scaling group `eks-<uuid>` exists, sized like the group (min/max/desired, kept in
  step by `resize_group`), and goes with the group. It launches no instances of its own: the
  world's node lifecycle launches them and lists each in the group (`list_instance`) as
  Pending, InService and Terminating while its node boots, runs and drains;
- `get-service-quota ec2 L-DB2E81BA` answers the account's G/VT On-Demand vCPU quota.
It also checks each role ARN once: moto's check loads botocore's endpoint data anew for every
cluster and node group (0.2 s each).
"""

from __future__ import annotations

import functools
import threading
from typing import Any

from moto.autoscaling.models import InstanceState, autoscaling_backends
from moto.ec2.models import ec2_backends
from moto.eks import models as eks_models
from moto.eks.models import EKSBackend
from moto.servicequotas.models import ServiceQuotasBackend

# The AL2023 AMI release the stack's SSM parameters resolve to (DOMAIN: v20260714).
AMI_RELEASE = "20260714"
GPU_QUOTA_CODE = "L-DB2E81BA"
GPU_QUOTA_NAME = "Running On-Demand G and VT instances"
GPU_QUOTA_VCPUS = 8.0  # two g5.xlarge (4 vCPU each): what the README's preflight asks for
_installed = threading.Lock()
_original_create = EKSBackend.create_nodegroup
_original_delete = EKSBackend.delete_nodegroup
_original_quota = ServiceQuotasBackend.get_service_quota


def release_version(version: str) -> str:
    """The AMI release EKS reports for a node group of Kubernetes `version`."""
    return f"{version}.0-{AMI_RELEASE}"


def _create_nodegroup(self: EKSBackend, *args: Any, **kwargs: Any) -> Any:
    version = kwargs.get("version") or self.clusters[kwargs["cluster_name"]].version
    kwargs = {**kwargs, "version": version}
    kwargs["release_version"] = kwargs.get("release_version") or release_version(version)
    group = _original_create(self, *args, **kwargs)
    if not kwargs.get("remote_access"):
        group.remote_access = None  # type: ignore[assignment]
    _create_group(self, group)
    return group


def _delete_nodegroup(self: EKSBackend, *args: Any, **kwargs: Any) -> Any:
    group = _original_delete(self, *args, **kwargs)
    autoscaling = autoscaling_backends[self.account_id][self.region_name]
    autoscaling.autoscaling_groups.pop(_group_name(group), None)
    return group


def _group_name(nodegroup: Any) -> str:
    return str(nodegroup.resources["autoScalingGroups"][0]["name"])


def _create_group(backend: EKSBackend, nodegroup: Any) -> None:
    """The node group's Auto Scaling group, as EKS creates it (tags, subnets, sizes)."""
    name = _group_name(nodegroup)
    ec2 = ec2_backends[backend.account_id][backend.region_name]
    data = {"InstanceType": nodegroup.instance_types[0]}
    ec2.create_launch_template(name, f"EKS node group {nodegroup.nodegroup_name}", data, {})
    tags = {"eks:cluster-name": nodegroup.cluster_name,
            "eks:nodegroup-name": nodegroup.nodegroup_name,
            f"kubernetes.io/cluster/{nodegroup.cluster_name}": "owned",
            "k8s.io/cluster-autoscaler/enabled": "true",
            f"k8s.io/cluster-autoscaler/{nodegroup.cluster_name}": "owned"}  # fmt: skip
    autoscaling = autoscaling_backends[backend.account_id][backend.region_name]
    # EKS refuses subnets EC2 does not have; moto's EKS does not, its Auto Scaling does
    subnets = [s for s in ec2.describe_subnets() if s.id in nodegroup.subnets]
    autoscaling.create_auto_scaling_group(
        name=name, desired_capacity=0, max_size=0, min_size=0, launch_config_name="",
        availability_zones=sorted({s.availability_zone for s in subnets})
        or [f"{backend.region_name}a"],
        launch_template={"LaunchTemplateName": name},
        vpc_zone_identifier=",".join(s.id for s in subnets) or None,
        default_cooldown=None,
        health_check_period=None, health_check_type="EC2", load_balancers=[],
        target_group_arns=[], placement_group=None, termination_policies=[],
        tags=[{"ResourceId": name, "ResourceType": "auto-scaling-group", "Key": key,
               "Value": value, "PropagateAtLaunch": "true"} for key, value in tags.items()],
    )  # fmt: skip
    resize_group(backend, nodegroup.cluster_name, nodegroup.nodegroup_name)


def resize_group(backend: EKSBackend, cluster: str, nodegroup: str) -> None:
    """Give the node group's Auto Scaling group the group's scaling config. Set in place, not
    through moto's capacity calls, which would launch instances of their own."""
    group = backend.clusters[cluster].nodegroups[nodegroup]
    scaling = group.scaling_config
    autoscaling = autoscaling_backends[backend.account_id][backend.region_name]
    found = autoscaling.autoscaling_groups.get(_group_name(group))
    if found is not None:
        found.min_size, found.max_size = int(scaling["minSize"]), int(scaling["maxSize"])
        found.desired_capacity = int(scaling["desiredSize"])


def list_instance(
    account: str, region: str, instance_id: str, state: str | None, group_name: str = ""
) -> None:
    """List `instance_id` in lifecycle `state` (Pending, InService, Terminating) in the Auto
    Scaling group `group_name`, or in the one that lists it already; None: no longer (it is
    terminated). An instance of a group that is gone is in none."""
    groups = autoscaling_backends[account][region].autoscaling_groups
    group = groups.get(group_name) or next(
        (
            g
            for g in groups.values()
            if any(s.instance_id == instance_id for s in g.instance_states)
        ),
        None,
    )
    if group is None:
        return
    kept = [listed for listed in group.instance_states if listed.instance_id != instance_id]
    if state is not None:
        instance = ec2_backends[account][region].get_instance(instance_id)
        kept.append(InstanceState(instance, lifecycle_state=state, autoscaling_group=group))
    group.instance_states = kept  # one assignment: a describe in flight sees old or new


def _get_service_quota(
    self: ServiceQuotasBackend, service_code: str, quota_code: str
) -> dict[str, Any]:
    if (service_code, quota_code) != ("ec2", GPU_QUOTA_CODE):
        return _original_quota(self, service_code, quota_code)
    return {
        "ServiceCode": "ec2",
        "ServiceName": "Amazon Elastic Compute Cloud (Amazon EC2)",
        "QuotaArn": f"arn:aws:servicequotas:{self.region_name}:{self.account_id}:ec2/{quota_code}",
        "QuotaCode": quota_code,
        "QuotaName": GPU_QUOTA_NAME,
        "Value": GPU_QUOTA_VCPUS,
        "Unit": "None",
        "Adjustable": True,
        "GlobalQuota": False,
    }


def install() -> None:
    """Put the answers above in place in this process's moto (once; idempotent)."""
    if _installed.acquire(blocking=False):
        EKSBackend.create_nodegroup = _create_nodegroup  # type: ignore[method-assign]
        EKSBackend.delete_nodegroup = _delete_nodegroup  # type: ignore[method-assign]
        ServiceQuotasBackend.get_service_quota = _get_service_quota  # type: ignore[method-assign]
        # a valid ARN stays valid; an invalid one raises every time (nothing is cached then)
        eks_models.validate_role_arn = functools.cache(eks_models.validate_role_arn)
