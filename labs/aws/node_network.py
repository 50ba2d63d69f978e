"""The two security-group rules that let GPU nodes reach each other, read from EC2.

The node SG's ephemeral self rule (tcp 1025-65535 from the SG itself) and the auxiliary SG's
all-traffic rule from the VPC CIDR: either lets NCCL (and its rendezvous on 29500) cross
from one GPU node to another. Rules are recognised by what they allow, not by tags, so the
reading holds on any stack built from the same module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from labs.lab import Lab

EPHEMERAL = (1025, 65535)


@dataclass(frozen=True)
class NodeRules:
    """Rule ids (None when absent) of the two node-to-node rules, and where they live."""

    node_sg: str
    aux_sg: str
    self_rule: str | None
    vpc_rule: str | None

    @property
    def open(self) -> bool:
        return bool(self.self_rule or self.vpc_rule)

    def describe(self) -> str:
        return (
            f"{self.node_sg} ephemeral self rule: {self.self_rule or 'absent'}; "
            f"{self.aux_sg} all traffic from the VPC: {self.vpc_rule or 'absent'}"
        )


def node_rules(lab: Lab) -> NodeRules:
    """Read both rules (`aws ec2 describe-security-group-rules` on the two SGs)."""
    outputs = lab.outputs
    node_sg, aux_sg = outputs["node_security_group_id"], outputs["auxiliary_node_sg_id"]
    ec2 = lab.aws_client("ec2")
    cidr = ec2.describe_vpcs(VpcIds=[outputs["vpc_id"]])["Vpcs"][0]["CidrBlock"]
    rules = ec2.describe_security_group_rules(
        Filters=[{"Name": "group-id", "Values": [node_sg, aux_sg]}]
    )["SecurityGroupRules"]
    ingress = [r for r in rules if not r["IsEgress"]]
    self_rule = next(
        (
            r["SecurityGroupRuleId"]
            for r in ingress
            if r["GroupId"] == node_sg
            and r["IpProtocol"] in ("tcp", "6")
            and (r["FromPort"], r["ToPort"]) == EPHEMERAL
            and (r.get("ReferencedGroupInfo") or {}).get("GroupId") == node_sg
        ),
        None,
    )
    vpc_rule = next(
        (
            r["SecurityGroupRuleId"]
            for r in ingress
            if r["GroupId"] == aux_sg and r["IpProtocol"] == "-1" and r.get("CidrIpv4") == cidr
        ),
        None,
    )
    return NodeRules(node_sg, aux_sg, self_rule, vpc_rule)
