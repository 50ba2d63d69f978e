"""Flowchart step 6, the network, where the doctor may read the lab's AWS side.

Pod-to-pod traffic between two GPU nodes (NCCL's bootstrap and sockets, torch's rendezvous
on 29500) needs one of two rules: the module node security group's ephemeral self rule
(tcp 1025-65535 from itself), or the auxiliary group's all-traffic rule from the VPC CIDR.
Only describe calls are made. An existing cluster reached through a kubeconfig gives the
doctor no AWS access, so this step is skipped there, and says so.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from labs.doctor.catalog import kind
from labs.doctor.model import DoctorFinding, Evidence
from labs.errors import LabError

if TYPE_CHECKING:
    from labs.doctor.facts import Facts
    from labs.lab import Lab

EPHEMERAL = (1025, 65535)


@dataclass(frozen=True)
class CloudFacts:
    """What the doctor read from AWS: the GPU node group's scaling and the node SGs' rules."""

    cluster: str
    gpu_group: dict[str, Any] | None
    node_sg: str
    aux_sg: str
    vpc_cidr: str
    ingress: dict[str, list[dict[str, Any]]]  # security group id -> its ingress rules


def read_cloud(lab: Lab) -> tuple[CloudFacts | None, str]:
    """The lab's AWS facts, or None and why they could not be read."""
    from botocore.exceptions import BotoCoreError, ClientError

    outputs = lab.outputs
    wanted = ("node_security_group_id", "auxiliary_node_sg_id", "vpc_id")
    if not all(outputs.get(key) for key in wanted):
        return None, "no AWS access from here (not a lab with stack outputs)"
    try:
        return _read(lab, outputs), ""
    except (LabError, ClientError, BotoCoreError) as error:
        return None, f"could not read AWS ({type(error).__name__}: {error})"


def _read(lab: Lab, outputs: dict[str, Any]) -> CloudFacts:
    from labs.aws.cloud import describe_gpu_nodegroup

    ec2 = lab.aws_client("ec2")
    node_sg, aux_sg = outputs["node_security_group_id"], outputs["auxiliary_node_sg_id"]
    vpc = ec2.describe_vpcs(VpcIds=[outputs["vpc_id"]])["Vpcs"][0]
    rules = ec2.describe_security_group_rules(
        Filters=[{"Name": "group-id", "Values": [node_sg, aux_sg]}]
    )["SecurityGroupRules"]
    ingress: dict[str, list[dict[str, Any]]] = {node_sg: [], aux_sg: []}
    for rule in rules:
        if not rule.get("IsEgress"):
            ingress.setdefault(rule["GroupId"], []).append(rule)
    group = describe_gpu_nodegroup(lab.aws_client("eks"), lab.cluster_name, lab.gpu_node_group)
    return CloudFacts(lab.cluster_name, group, node_sg, aux_sg, vpc["CidrBlock"], ingress)


def rule_text(rule: dict[str, Any]) -> str:
    """`tcp 1025-65535 from sg-x` / `all from 192.168.0.0/16`, as the console lists a rule."""
    protocol = "all" if rule["IpProtocol"] == "-1" else rule["IpProtocol"]
    ports = "" if rule["IpProtocol"] == "-1" else f" {rule['FromPort']}-{rule['ToPort']}"
    source = (rule.get("ReferencedGroupInfo") or {}).get("GroupId") or rule.get("CidrIpv4")
    return f"{protocol}{ports} from {source}"


def _self_rule(cloud: CloudFacts) -> bool:
    """The node SG lets its members reach each other on every ephemeral tcp port."""
    return any(
        (rule.get("ReferencedGroupInfo") or {}).get("GroupId") == cloud.node_sg
        and (
            rule["IpProtocol"] == "-1"
            or (
                rule["IpProtocol"] in ("tcp", "6")
                and rule["FromPort"] <= EPHEMERAL[0]
                and rule["ToPort"] >= EPHEMERAL[1]
            )
        )
        for rule in cloud.ingress.get(cloud.node_sg, [])
    )


def _vpc_rule(cloud: CloudFacts) -> bool:
    """The auxiliary SG admits all traffic from a CIDR covering the whole VPC."""
    vpc = ipaddress.IPv4Network(cloud.vpc_cidr)
    return any(
        rule["IpProtocol"] == "-1"
        and bool(rule.get("CidrIpv4"))
        and vpc.subnet_of(ipaddress.IPv4Network(rule["CidrIpv4"]))
        for rule in cloud.ingress.get(cloud.aux_sg, [])
    )


def security_groups(facts: Facts) -> list[DoctorFinding]:
    """Neither the ephemeral self rule nor the VPC rule: cross-node pod traffic is dropped."""
    cloud = facts.cloud
    if cloud is None or _self_rule(cloud) or _vpc_rule(cloud):
        return []
    evidence = [
        Evidence(
            f"securitygroup/{group}",
            "ingress rules",
            "; ".join(rule_text(r) for r in cloud.ingress.get(group, [])) or "none",
        )
        for group in (cloud.node_sg, cloud.aux_sg)
    ]
    return [
        kind("sg-blocks-nccl").found(
            f"securitygroup/{cloud.node_sg}",
            "no node-to-node rule for ephemeral ports (NCCL between GPU nodes is blocked)",
            evidence,
            vpc=cloud.vpc_cidr,
        )
    ]
