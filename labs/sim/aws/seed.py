"""The AWS side of the rehearsal: moto seeded like a fresh `terraform apply` with defaults.

`seed_stack` creates, through boto3 against a moto server, what the Terraform stack
creates (VPC 192.168.0.0/16, 3 public + 3 private /22 subnets, the EKS cluster, the
system and GPU managed node groups, the module node security group with the
recommended rules, the auxiliary node security group, the two AL2023 AMIs), plus what AWS
and EKS add themselves: the default and cluster security groups' rules, the service CIDR.
`find_stack` reads the same facts back by name and tag, so a second process (the
sim Infra, the orchestrator) sees exactly what a terraform output would tell it.

Security-group rules carry a `Name` tag holding the rule's key in the stack, so the
two toggles (`node_sg_enable_recommended_rules`, `enable_aux_sg_vpc_allow`) add and
remove exactly their rules.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from labs.aws import stack
from labs.aws.node_network import (
    AUX_EGRESS_RULE,
    AUX_VPC_ALLOW_RULE,
    NODE_SG_ALWAYS_RULES,
    NODE_SG_RECOMMENDED_RULES,
    SgRule,
)
from labs.aws.stack import NODE_TEMPLATE_TAG_PREFIX, gpu_node_group_name, system_node_group_name
from labs.kube.gpu import GPU_NODE_LABELS
from labs.sim.aws.auth import CREDENTIAL_KEYS
from labs.sim.controlplane.pki import SERVICE_CIDR

ACCOUNT_ID = "123456789012"
KUBERNETES_VERSION = "1.35"
VPC_CIDR = "192.168.0.0/16"
PUBLIC_SUBNET_CIDRS = ("192.168.0.0/22", "192.168.4.0/22", "192.168.8.0/22")
PRIVATE_SUBNET_CIDRS = ("192.168.12.0/22", "192.168.16.0/22", "192.168.20.0/22")
AZ_SUFFIXES = ("a", "b", "c")
AMI_NAMES = {
    "standard": "amazon-eks-node-al2023-x86_64-standard-1.35-v20260714",
    "nvidia": "amazon-eks-node-al2023-x86_64-nvidia-1.35-v20260714",
}
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}
# The stack's node-template tags for that label and taint (terraform/eks.tf).
GPU_NODE_TEMPLATE_TAGS = {
    **{f"{NODE_TEMPLATE_TAG_PREFIX}label/{key}": value for key, value in GPU_NODE_LABELS.items()},
    f"{NODE_TEMPLATE_TAG_PREFIX}taint/{GPU_TAINT['key']}": f"{GPU_TAINT['value']}:NoSchedule",
}
GPU_INSTANCE_TYPE = "g5.xlarge"
# Root volumes in GiB: the stack's WorkerNodeVolumesize and gpu_node_disk_size defaults.
SYSTEM_DISK_GIB, GPU_DISK_GIB = 30, 100
# Marks the private subnet the GPU node group lives in (the stack's var.gpu_az_index), so the
# stack's ids read back even while the node group itself is gone.
GPU_SUBNET_TAG = "sim.eks-gpu-lab/gpu-subnet"


@dataclass(frozen=True)
class StackIds:
    """The ids a terraform output would report for the seeded stack."""

    cluster_name: str
    region: str
    vpc_id: str
    public_subnet_ids: tuple[str, ...]
    private_subnet_ids: tuple[str, ...]
    gpu_subnet_id: str
    gpu_subnet_az: str
    cluster_security_group_id: str
    node_security_group_id: str
    auxiliary_node_sg_id: str
    ami_al2023_standard: str
    ami_al2023_nvidia: str
    gpu_ttl_scheduler_role_arn: str


def node_sg_name(cluster: str) -> str:
    return f"{cluster}-node"


def aux_sg_name(cluster: str) -> str:
    return f"{cluster}-node-aux-sg"


def cluster_sg_name(cluster: str) -> str:
    return f"eks-cluster-sg-{cluster}"


def seed_stack(
    clients: Callable[[str], Any],
    cluster: str,
    region: str,
    kube_url: str,
    ca_data: str,
    gpu_az_index: int = 0,
) -> StackIds:
    """Create the stack in moto; `clients(service)` returns a boto3 client for the moto server."""
    ec2, eks = clients("ec2"), clients("eks")
    if not 0 <= gpu_az_index < len(AZ_SUFFIXES):
        raise ValueError(f"gpu_az_index must be 0..{len(AZ_SUFFIXES) - 1}, got {gpu_az_index}")
    azs = [region + suffix for suffix in AZ_SUFFIXES]
    vpc_id = ec2.create_vpc(CidrBlock=VPC_CIDR, TagSpecifications=_name_tags("vpc", cluster))[
        "Vpc"
    ]["VpcId"]
    for cidr, az in zip(PUBLIC_SUBNET_CIDRS, azs, strict=True):
        _subnet(ec2, vpc_id, cidr, az, f"{cluster}-public-{az}")
    private = [
        _subnet(ec2, vpc_id, cidr, az, f"{cluster}-private-{az}")
        for cidr, az in zip(PRIVATE_SUBNET_CIDRS, azs, strict=True)
    ]
    cluster_sg = _security_group(ec2, vpc_id, cluster_sg_name(cluster), "EKS cluster SG")
    node_sg = _security_group(ec2, vpc_id, node_sg_name(cluster), "EKS node shared SG")
    aux_sg = _security_group(ec2, vpc_id, aux_sg_name(cluster), "Auxiliary node SG")
    for group in (node_sg, aux_sg):  # moto adds egress-all to new groups; the stack manages it
        _revoke_untagged(ec2, group)
    # AWS gives a VPC's default group, and EKS its cluster group, all traffic from members
    # (moto gives each only its egress-all)
    default_sg = ec2.describe_security_groups(
        Filters=[
            {"Name": "vpc-id", "Values": [vpc_id]},
            {"Name": "group-name", "Values": ["default"]},
        ]
    )["SecurityGroups"][0]["GroupId"]
    for group in (default_sg, cluster_sg):
        ec2.authorize_security_group_ingress(
            GroupId=group,
            IpPermissions=[{"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": group}]}],
        )
    for rule in (*NODE_SG_ALWAYS_RULES, *NODE_SG_RECOMMENDED_RULES):
        add_rule(ec2, node_sg, rule, cluster_sg)
    add_rule(ec2, aux_sg, AUX_EGRESS_RULE, cluster_sg)
    add_rule(ec2, aux_sg, AUX_VPC_ALLOW_RULE, cluster_sg)
    for name in AMI_NAMES.values():
        ec2.register_image(Name=name, Description=name, Architecture="x86_64")

    eks.create_cluster(
        name=cluster,
        version=KUBERNETES_VERSION,
        roleArn=f"arn:aws:iam::{ACCOUNT_ID}:role/{cluster}-cluster",
        # what EKS picks for a VPC outside 10.0.0.0/8, and what the API server is given
        kubernetesNetworkConfig={"serviceIpv4Cidr": SERVICE_CIDR, "ipFamily": "ipv4"},
        resourcesVpcConfig={
            "subnetIds": private,
            "securityGroupIds": [cluster_sg],
            "endpointPublicAccess": True,
            "endpointPrivateAccess": True,
        },
    )
    _point_cluster_at(cluster, region, kube_url, ca_data, cluster_sg)
    node_role = node_role_arn(cluster)
    eks.create_nodegroup(
        clusterName=cluster,
        nodegroupName=system_node_group_name(cluster),
        scalingConfig={"minSize": 1, "maxSize": 4, "desiredSize": 2},
        subnets=private,
        nodeRole=node_role,
        instanceTypes=["t3.medium"],
        diskSize=SYSTEM_DISK_GIB,
        amiType="AL2023_x86_64_STANDARD",
        capacityType="ON_DEMAND",
    )
    ec2.create_tags(Resources=[private[gpu_az_index]], Tags=[{"Key": GPU_SUBNET_TAG, "Value": ""}])
    gpu_group = create_gpu_nodegroup(eks, cluster, private[gpu_az_index], node_role, max_size=2)
    _gpu_ttl_role(clients("iam"), cluster, region, gpu_group["nodegroupArn"])
    return find_stack(clients, cluster, region)


def create_gpu_nodegroup(
    eks: Any, cluster: str, subnet_id: str, node_role: str, max_size: int
) -> dict[str, Any]:
    """The stack's GPU node group: one subnet, g5.xlarge, the GPU labels and taint, the
    node-template tags, at 0."""
    group: dict[str, Any] = eks.create_nodegroup(
        clusterName=cluster,
        nodegroupName=gpu_node_group_name(cluster),
        scalingConfig={"minSize": 0, "maxSize": max_size, "desiredSize": 0},
        subnets=[subnet_id],
        nodeRole=node_role,
        instanceTypes=[GPU_INSTANCE_TYPE],
        diskSize=GPU_DISK_GIB,
        amiType="AL2023_x86_64_NVIDIA",
        capacityType="ON_DEMAND",
        labels=dict(GPU_NODE_LABELS),
        taints=[dict(GPU_TAINT)],
        tags=dict(GPU_NODE_TEMPLATE_TAGS),
    )["nodegroup"]
    return group


def node_role_arn(cluster: str) -> str:
    return f"arn:aws:iam::{ACCOUNT_ID}:role/{cluster}-node"


def _gpu_ttl_role(iam: Any, cluster: str, region: str, nodegroup_arn: str) -> None:
    """The stack's scheduler role, from the same policy templates terraform renders."""
    name = stack.gpu_ttl_role_name(cluster)
    schedule = f"{stack.GPU_TTL_SCHEDULE_GROUP}/{stack.gpu_ttl_schedule_name(cluster)}"
    schedule_arn = f"arn:aws:scheduler:{region}:{ACCOUNT_ID}:schedule/{schedule}"
    trust = stack.render_policy(
        stack.GPU_TTL_TRUST_POLICY, account_id=ACCOUNT_ID, schedule_arn=schedule_arn
    )
    iam.create_role(RoleName=name, AssumeRolePolicyDocument=trust)
    iam.put_role_policy(
        RoleName=name,
        PolicyName="scale-gpu-node-group",
        PolicyDocument=stack.render_policy(stack.GPU_TTL_POLICY, nodegroup_arn=nodegroup_arn),
    )


def find_stack(clients: Callable[[str], Any], cluster: str, region: str) -> StackIds:
    """Read the seeded stack's ids back from moto by name and tag."""
    ec2 = clients("ec2")
    vpcs = ec2.describe_vpcs(Filters=[{"Name": "tag:Name", "Values": [cluster]}])["Vpcs"]
    if not vpcs:
        raise LookupError(f"no VPC tagged Name={cluster} in the rehearsal world")
    vpc_id = vpcs[0]["VpcId"]
    subnets = ec2.describe_subnets(Filters=[{"Name": "vpc-id", "Values": [vpc_id]}])["Subnets"]
    by_cidr = {s["CidrBlock"]: s for s in subnets}
    gpu_subnet = next(s for s in subnets if tag_value(s, GPU_SUBNET_TAG) is not None)
    groups = ec2.describe_security_groups(Filters=[{"Name": "vpc-id", "Values": [vpc_id]}])
    sg_by_name = {g["GroupName"]: g["GroupId"] for g in groups["SecurityGroups"]}
    images = ec2.describe_images(Filters=[{"Name": "name", "Values": list(AMI_NAMES.values())}])
    ami_by_name = {i["Name"]: i["ImageId"] for i in images["Images"]}
    return StackIds(
        cluster_name=cluster,
        region=region,
        vpc_id=vpc_id,
        public_subnet_ids=tuple(by_cidr[c]["SubnetId"] for c in PUBLIC_SUBNET_CIDRS),
        private_subnet_ids=tuple(by_cidr[c]["SubnetId"] for c in PRIVATE_SUBNET_CIDRS),
        gpu_subnet_id=gpu_subnet["SubnetId"],
        gpu_subnet_az=gpu_subnet["AvailabilityZone"],
        cluster_security_group_id=sg_by_name[cluster_sg_name(cluster)],
        node_security_group_id=sg_by_name[node_sg_name(cluster)],
        auxiliary_node_sg_id=sg_by_name[aux_sg_name(cluster)],
        ami_al2023_standard=ami_by_name[AMI_NAMES["standard"]],
        ami_al2023_nvidia=ami_by_name[AMI_NAMES["nvidia"]],
        gpu_ttl_scheduler_role_arn=clients("iam").get_role(
            RoleName=stack.gpu_ttl_role_name(cluster)
        )["Role"]["Arn"],
    )


def tag_value(resource: dict, key: str) -> str | None:
    """The value of an EC2 resource's tag `key`, or None."""
    return next((t["Value"] for t in resource.get("Tags") or [] if t["Key"] == key), None)


def rule_ids(ec2: Any, group_id: str, rule: SgRule) -> list[str]:
    """Ids of the rules in `group_id` tagged with `rule.key` (empty when absent)."""
    found = ec2.describe_security_group_rules(Filters=[{"Name": "group-id", "Values": [group_id]}])[
        "SecurityGroupRules"
    ]
    return [
        r["SecurityGroupRuleId"]
        for r in found
        if {"Key": "Name", "Value": rule.key} in r.get("Tags", [])
    ]


def add_rule(ec2: Any, group_id: str, rule: SgRule, cluster_sg_id: str) -> None:
    """Authorize `rule` on `group_id` unless it is already there."""
    if rule_ids(ec2, group_id, rule):
        return
    permission: dict[str, Any] = {"IpProtocol": rule.protocol}
    if rule.protocol != "-1":
        permission |= {"FromPort": rule.from_port, "ToPort": rule.to_port}
    if rule.source == "self":
        permission["UserIdGroupPairs"] = [{"GroupId": group_id}]
    elif rule.source == "cluster":
        permission["UserIdGroupPairs"] = [{"GroupId": cluster_sg_id}]
    else:
        cidr = VPC_CIDR if rule.source == "vpc" else "0.0.0.0/0"
        permission["IpRanges"] = [{"CidrIp": cidr}]
    tags = [{"ResourceType": "security-group-rule", "Tags": [{"Key": "Name", "Value": rule.key}]}]
    authorize = (
        ec2.authorize_security_group_egress if rule.egress else ec2.authorize_security_group_ingress
    )
    try:
        authorize(GroupId=group_id, IpPermissions=[permission], TagSpecifications=tags)
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") != "InvalidPermission.Duplicate":
            raise
        _adopt(ec2, group_id, rule, permission)


def _adopt(ec2: Any, group_id: str, rule: SgRule, permission: dict[str, Any]) -> None:
    """The same permission was added by hand (a learner's fix): it becomes the lab's rule, so a
    revert after a hand fix is done rather than stuck on InvalidPermission.Duplicate."""
    source = (permission.get("UserIdGroupPairs") or permission["IpRanges"])[0]
    for found in ec2.describe_security_group_rules(
        Filters=[{"Name": "group-id", "Values": [group_id]}]
    )["SecurityGroupRules"]:
        same = (
            found["IsEgress"] == rule.egress
            and found["IpProtocol"] == permission["IpProtocol"]
            and found.get("FromPort", -1) == permission.get("FromPort", -1)
            and found.get("ToPort", -1) == permission.get("ToPort", -1)
            and (found.get("ReferencedGroupInfo") or {}).get("GroupId", found.get("CidrIpv4"))
            == source.get("GroupId", source.get("CidrIp"))
        )
        if same:
            ec2.create_tags(
                Resources=[found["SecurityGroupRuleId"]], Tags=[{"Key": "Name", "Value": rule.key}]
            )
            return


def remove_rule(ec2: Any, group_id: str, rule: SgRule) -> None:
    """Revoke `rule` from `group_id` if it is there."""
    ids = rule_ids(ec2, group_id, rule)
    if not ids:
        return
    revoke = ec2.revoke_security_group_egress if rule.egress else ec2.revoke_security_group_ingress
    revoke(GroupId=group_id, SecurityGroupRuleIds=ids)


def _name_tags(resource_type: str, name: str) -> list[dict[str, Any]]:
    return [{"ResourceType": resource_type, "Tags": [{"Key": "Name", "Value": name}]}]


def _subnet(ec2: Any, vpc_id: str, cidr: str, az: str, name: str) -> str:
    return ec2.create_subnet(
        VpcId=vpc_id,
        CidrBlock=cidr,
        AvailabilityZone=az,
        TagSpecifications=_name_tags("subnet", name),
    )["Subnet"]["SubnetId"]


def _security_group(ec2: Any, vpc_id: str, name: str, description: str) -> str:
    return ec2.create_security_group(
        GroupName=name,
        Description=description,
        VpcId=vpc_id,
        TagSpecifications=_name_tags("security-group", name),
    )["GroupId"]


def _revoke_untagged(ec2: Any, group_id: str) -> None:
    found = ec2.describe_security_group_rules(Filters=[{"Name": "group-id", "Values": [group_id]}])[
        "SecurityGroupRules"
    ]
    for r in found:
        if not r.get("Tags"):
            revoke = (
                ec2.revoke_security_group_egress
                if r["IsEgress"]
                else ec2.revoke_security_group_ingress
            )
            revoke(GroupId=group_id, SecurityGroupRuleIds=[r["SecurityGroupRuleId"]])


def _point_cluster_at(
    cluster: str, region: str, kube_url: str, ca_data: str, cluster_sg_id: str
) -> None:
    """Make the EKS cluster's endpoint and CA the lab's API server's (EKS assigns them; moto
    has no API for either)."""
    from moto.eks.models import eks_backends

    record = eks_backends[ACCOUNT_ID][region].clusters[cluster]
    record.endpoint = kube_url
    record.certificate_authority = {"data": ca_data}
    record.resources_vpc_config["clusterSecurityGroupId"] = cluster_sg_id


def moto_clients(endpoints: Mapping[str, Any]) -> Callable[[str], Any]:
    """A factory of boto3 clients for a world's moto server (its keys, its region, own session)."""
    import boto3

    from labs.aws.cloud import botocore_session

    endpoint_url = endpoints["aws_endpoint_url"]
    session = boto3.session.Session(
        region_name=endpoints["region"],
        botocore_session=botocore_session(),
        **{key: endpoints[key] for key in CREDENTIAL_KEYS},
    )
    cache: dict[str, Any] = {}
    lock = threading.Lock()

    def client(service: str) -> Any:
        with lock:
            if service not in cache:
                cache[service] = session.client(service, endpoint_url=endpoint_url)
            return cache[service]

    return client
