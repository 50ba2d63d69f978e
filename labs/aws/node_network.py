"""The two security-group rules that let GPU nodes reach each other, read from EC2.

The node SG's ephemeral self rule (tcp 1025-65535 from the SG itself) and the auxiliary SG's
all-traffic rule from the VPC CIDR: either lets NCCL (and its rendezvous on 29500) cross
from one GPU node to another. Rules are recognised by what they allow, not by tags, so the
reading holds on any stack built from the same module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from labs.lab import Lab

EPHEMERAL = (1025, 65535)
# Where a rule admits traffic from (to, for egress): its own group, the cluster's security
# group, the VPC's CIDR, or anywhere.
Source = Literal["self", "cluster", "vpc", "anywhere"]


@dataclass(frozen=True)
class SgRule:
    """One security-group rule as the stack writes it, named by its key in the stack."""

    key: str
    protocol: str
    from_port: int
    to_port: int
    source: Source
    egress: bool = False


# The EKS module's node security group rules: always, and the recommended ones that
# `node_sg_enable_recommended_rules` adds; the auxiliary group's, one of them toggled by
# `enable_aux_sg_vpc_allow`.
NODE_SG_ALWAYS_RULES = (
    SgRule("ingress_cluster_443", "tcp", 443, 443, "cluster"),
    SgRule("ingress_cluster_kubelet", "tcp", 10250, 10250, "cluster"),
    SgRule("ingress_self_coredns_tcp", "tcp", 53, 53, "self"),
    SgRule("ingress_self_coredns_udp", "udp", 53, 53, "self"),
)
NODE_SG_RECOMMENDED_RULES = (
    SgRule("ingress_nodes_ephemeral", "tcp", *EPHEMERAL, "self"),
    *(
        SgRule(f"ingress_cluster_{port}_webhook", "tcp", port, port, "cluster")
        for port in (4443, 6443, 8443, 9443, 10251)
    ),
    SgRule("egress_all", "-1", -1, -1, "anywhere", egress=True),
)
AUX_VPC_ALLOW_RULE = SgRule("node_aux_from_vpc", "-1", -1, -1, "vpc")
AUX_EGRESS_RULE = SgRule("node_aux_to_anywhere", "-1", -1, -1, "anywhere", egress=True)


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


def revoke_toggled_copies(lab: Lab) -> list[str]:
    """Revoke the rules of the two toggles found in the groups while the stack's toggles are
    off (so the stack did not write them: a learner's fix by hand), a moment before an apply
    writes them as the stack's own: EC2 refuses a duplicate (InvalidPermission.Duplicate),
    which would stop the apply. Returns the rules revoked, as `every_rule` writes them."""
    outputs = lab.outputs
    node_sg, aux_sg = outputs["node_security_group_id"], outputs["auxiliary_node_sg_id"]
    ec2 = lab.aws_client("ec2")
    peers = {
        "self": node_sg,
        "cluster": outputs["cluster_security_group_id"],
        "vpc": ec2.describe_vpcs(VpcIds=[outputs["vpc_id"]])["Vpcs"][0]["CidrBlock"],
        "anywhere": "0.0.0.0/0",
    }
    toggled = [(node_sg, rule) for rule in NODE_SG_RECOMMENDED_RULES] + [
        (aux_sg, AUX_VPC_ALLOW_RULE)
    ]
    found = ec2.describe_security_group_rules(
        Filters=[{"Name": "group-id", "Values": [node_sg, aux_sg]}]
    )["SecurityGroupRules"]
    revoked = []
    for rule in found:
        if any(_is(rule, group, wanted, peers[wanted.source]) for group, wanted in toggled):
            revoke = ec2.revoke_security_group_egress if rule["IsEgress"] else (
                ec2.revoke_security_group_ingress)  # fmt: skip
            revoke(GroupId=rule["GroupId"], SecurityGroupRuleIds=[rule["SecurityGroupRuleId"]])
            revoked.append(_rule_line(rule))
    return revoked


def _is(found: dict[str, Any], group: str, rule: SgRule, peer: str) -> bool:
    """Does the rule EC2 returned allow what `rule` allows, in `group`, from (to) `peer`?"""
    protocol = {"6": "tcp", "17": "udp"}.get(found["IpProtocol"], found["IpProtocol"])
    return (
        found["GroupId"] == group
        and found["IsEgress"] == rule.egress
        and protocol == rule.protocol
        and (found.get("FromPort", -1), found.get("ToPort", -1))
        == ((-1, -1) if rule.protocol == "-1" else (rule.from_port, rule.to_port))
        and peer in (found.get("CidrIpv4"), (found.get("ReferencedGroupInfo") or {}).get("GroupId"))
    )


def every_rule(lab: Lab) -> list[str]:
    """Every rule of the node and auxiliary security groups, one line each, ids left out (a rule
    added again by hand is the same rule): what a whole fix must bring back."""
    outputs = lab.outputs
    groups = [outputs["node_security_group_id"], outputs["auxiliary_node_sg_id"]]
    rules = lab.aws_client("ec2").describe_security_group_rules(
        Filters=[{"Name": "group-id", "Values": groups}]
    )["SecurityGroupRules"]
    return sorted({_rule_line(rule) for rule in rules})


def _rule_line(rule: dict[str, Any]) -> str:
    """`sg-1 ingress tcp 1025-65535 from sg-1`, as `aws ec2 describe-security-group-rules`
    would let a person write it again."""
    protocol = {"-1": "all", "6": "tcp", "17": "udp"}.get(rule["IpProtocol"], rule["IpProtocol"])
    ports = "" if rule.get("FromPort", -1) == -1 else f" {rule['FromPort']}-{rule['ToPort']}"
    peer = (
        rule.get("CidrIpv4")
        or rule.get("CidrIpv6")
        or rule.get("PrefixListId")
        or (rule.get("ReferencedGroupInfo") or {}).get("GroupId")
    )
    way, towards = ("egress", "to") if rule["IsEgress"] else ("ingress", "from")
    return f"{rule['GroupId']} {way} {protocol}{ports} {towards} {peer}"


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
