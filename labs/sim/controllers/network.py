"""The pod network between nodes, gated by the security-group rules in moto.

Convention for a connection probe (what an NCCL bootstrap does first): a run-to-completion
pod annotated `sim.eks-gpu-lab/connect-to: "<pod-name>:<port>"` (target in the same
namespace) opens a TCP connection to that pod's IP and port.
- same node, or the rules allow it: log `connected to <ip>:<port>`, Succeeded;
- otherwise, after `connect_timeout`: NCCL's retry lines ending in
  `... Connection timed out ... exceeded error retry count`, Failed.
Between two nodes the connection is allowed when either the auxiliary SG carries an
all-traffic ingress rule from the VPC CIDR, or the module node SG carries a self rule
(the ephemeral 1025-65535/tcp one) covering the port; both SGs are on every node.
A missing target pod or a target not yet Running fails like a refused connection.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from typing import Any

from labs.sim.aws_seed import VPC_CIDR, aux_sg_name, node_sg_name
from labs.sim.controllers.kubelet import Outcome
from labs.sim.store import PODS, NotFound, ObjectStore
from labs.sim.timings import Timings

CONNECT_ANNOTATION = "sim.eks-gpu-lab/connect-to"
NCCL_RETRIES = 34


class SecurityGroups:
    """Answers "may node A reach node B on this TCP port?" from moto's rules."""

    def __init__(self, clients: Callable[[str], Any], cluster: str) -> None:
        self._ec2 = clients("ec2")
        self._names = (node_sg_name(cluster), aux_sg_name(cluster))

    def allows_node_to_node(self, port: int) -> bool:
        groups = self._ec2.describe_security_groups(
            Filters=[{"Name": "group-name", "Values": list(self._names)}]
        )["SecurityGroups"]
        ids = {g["GroupId"] for g in groups}
        rules = self._ec2.describe_security_group_rules(
            Filters=[{"Name": "group-id", "Values": sorted(ids)}]
        )["SecurityGroupRules"]
        return any(_admits(rule, port, ids) for rule in rules if not rule["IsEgress"])


def _admits(rule: dict, port: int, member_of: set[str]) -> bool:
    protocol = rule["IpProtocol"]
    if protocol not in ("-1", "tcp", "6"):
        return False
    if protocol != "-1" and not rule["FromPort"] <= port <= rule["ToPort"]:
        return False
    source_group = (rule.get("ReferencedGroupInfo") or {}).get("GroupId")
    if source_group:
        return source_group in member_of
    cidr = rule.get("CidrIpv4")
    if not cidr:
        return False
    return ipaddress.IPv4Network(VPC_CIDR).subnet_of(ipaddress.IPv4Network(cidr))


class ConnectProbe:
    """The kubelet program for pods carrying CONNECT_ANNOTATION."""

    def __init__(self, store: ObjectStore, groups: SecurityGroups) -> None:
        self._store = store
        self._groups = groups

    def matches(self, pod: dict) -> bool:
        return CONNECT_ANNOTATION in (pod["metadata"].get("annotations") or {})

    def run(self, pod: dict, node: dict, timings: Timings) -> Outcome:
        target = pod["metadata"]["annotations"][CONNECT_ANNOTATION]
        name, _, port_text = target.rpartition(":")
        if not name or not port_text.isdigit():
            return Outcome(
                f"bad {CONNECT_ANNOTATION} value {target!r}: use <pod-name>:<port>\n",
                False,
                timings.container_run,
            )
        port = int(port_text)
        try:
            peer = self._store.get(PODS, name, pod["metadata"]["namespace"])
        except NotFound:
            peer = {}
        ip = (peer.get("status") or {}).get("podIP")
        if not ip:
            return Outcome(
                f"connect to {name}:{port} failed: Connection refused\n",
                False,
                timings.container_run,
            )
        same_node = peer["spec"].get("nodeName") == node["metadata"]["name"]
        if same_node or self._groups.allows_node_to_node(port):
            return Outcome(f"connected to {ip}:{port}\n", True, timings.container_run)
        lines = [
            f"NCCL WARN socketPollConnect: connect to {ip}<{port}> returned Connection timed out, "
            f"retrying ({attempt}/{NCCL_RETRIES}) after sleep for {attempt * 100} msec"
            for attempt in (1, 2, 3)
        ]
        lines.append(
            f"NCCL WARN socketPollConnect: connect to {ip}<{port}> returned Connection timed out, "
            "exceeded error retry count after 34 attempts"
        )
        return Outcome("".join(f"{line}\n" for line in lines), False, timings.connect_timeout)
