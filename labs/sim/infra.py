"""The rehearsal world's stand-in for `terraform apply`: the stack's variables, applied through
public APIs (boto3 against moto, the kubernetes client against the API server).

What each variable does here, as in the Terraform stack:
- `enable_gpu_operator`: installs or uninstalls NVIDIA's gpu-operator chart with the real helm
  and `terraform/gpu_operator_values.yaml` (`gpu_operator_release`: the rehearsal's pinned
  release, whatever `gpu_operator_chart_version` says); the world runs the real operator
  behind the chart's pod;
- `enable_aux_sg_vpc_allow`, `node_sg_enable_recommended_rules`: add or remove their
  security-group rules in moto;
- `enable_monitoring`: installs or uninstalls kube-prometheus-stack the way helm would
  (`monitoring_release`: kube-state-metrics and Prometheus with the lab's alert rules, which
  the world runs for real behind their pods);
- `gpu_max_size`: the GPU node group's maxSize; `gpu_desired_size` is create-time only
  (the module ignores later changes), so it changes nothing, exactly as on AWS;
- cluster name, region, AZs, instance type and AZ index are fixed when the world starts: a
  different value is an error naming it.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from labs.aws import stack
from labs.aws.node_network import AUX_VPC_ALLOW_RULE, NODE_SG_RECOMMENDED_RULES, SgRule
from labs.errors import InfraError
from labs.kube import alerts
from labs.sim import gpu_operator_release, monitoring_release
from labs.sim.aws.access import LAB_USER
from labs.sim.aws.auth import CREDENTIAL_KEYS
from labs.sim.aws.seed import (
    AZ_SUFFIXES,
    GPU_INSTANCE_TYPE,
    StackIds,
    add_rule,
    create_gpu_nodegroup,
    find_stack,
    moto_clients,
    node_role_arn,
    remove_rule,
    rule_ids,
)
from labs.sim.controlplane.kubeconfig import kubeconfig_document
from labs.sim.gpu_operator_release import Helm

AUX_RULE_ADDRESS = "aws_vpc_security_group_ingress_rule.node_aux_from_vpc[0]"
GPU_NODE_GROUP_ADDRESS = (
    'module.eks.module.eks_managed_node_group["gpu"].aws_eks_node_group.this[0]'
)


def _node_sg_address(rule: SgRule) -> str:
    return f'module.eks.aws_security_group_rule.node["{rule.key}"]'


class SimInfra:
    """The `Infra` of a running rehearsal world, reached through its endpoints."""

    def __init__(self, endpoints: Mapping[str, Any]) -> None:
        needed = {"aws_endpoint_url", "kube_url", "kube_token", "kube_ca", "region", "cluster_name"}
        missing = (needed | set(CREDENTIAL_KEYS)) - set(endpoints)
        if missing:
            raise InfraError(
                f"rehearsal endpoints lack {sorted(missing)}: is endpoints.json from `labs.sim`?"
            )
        self._endpoints = dict(endpoints)
        self._cluster = endpoints["cluster_name"]
        self._region = endpoints["region"]
        self._aws = moto_clients(endpoints)
        self._kube: Any = None

    # ---- Infra ------------------------------------------------------------------------

    def plan(self, variables: Mapping[str, Any]) -> list[str]:
        return [line for line, _ in self._changes(variables)]

    def apply(self, variables: Mapping[str, Any]) -> dict[str, Any]:
        for _, action in self._changes(variables):
            action()
        return self.outputs()

    def outputs(self) -> dict[str, Any]:
        ids = self._ids()
        return {
            "configure_kubectl": (
                f"aws eks --region {self._region} update-kubeconfig --name {self._cluster}"
            ),
            "cluster_name": self._cluster,
            "cluster_endpoint": self._aws("eks").describe_cluster(name=self._cluster)["cluster"][
                "endpoint"
            ],
            "cluster_security_group_id": ids.cluster_security_group_id,
            "node_security_group_id": ids.node_security_group_id,
            "auxiliary_node_sg_id": ids.auxiliary_node_sg_id,
            "gpu_subnet_az": ids.gpu_subnet_az,
            "gpu_subnet_id": ids.gpu_subnet_id,
            "ami_al2023_standard": ids.ami_al2023_standard,
            "ami_al2023_nvidia": ids.ami_al2023_nvidia,
            "region": self._region,
            "gpu_node_group_name": stack.gpu_node_group_name(self._cluster),
            "system_node_group_name": stack.system_node_group_name(self._cluster),
            "vpc_id": ids.vpc_id,
            "gpu_ttl_scheduler_role_arn": ids.gpu_ttl_scheduler_role_arn,
            "gpu_ttl_schedule_name": stack.gpu_ttl_schedule_name(self._cluster),
        }

    def destroy(self) -> None:
        """Uninstall the charts; the world's process itself is the lifecycle's to stop."""
        helm = self._helm()
        installed = helm.installed()
        if installed is not None:
            helm.uninstall(installed.namespace)
        if alerts.monitoring_installed(self._api()):
            monitoring_release.uninstall(self._api())

    # ---- changes ----------------------------------------------------------------------

    def _changes(self, variables: Mapping[str, Any]) -> list[tuple[str, Any]]:
        ids = self._ids()
        group = self._gpu_group()
        wanted = self._checked(variables, ids, group)
        if group is None:  # deleted out of band: terraform plans it again
            return [self._recreate_gpu_group(ids, wanted), *self._other_changes(ids, wanted)]
        return self._other_changes(ids, wanted, group)

    def _recreate_gpu_group(self, ids: StackIds, wanted: Mapping[str, Any]) -> tuple[str, Any]:
        def create() -> None:
            create_gpu_nodegroup(
                self._aws("eks"), self._cluster, ids.gpu_subnet_id, node_role_arn(self._cluster),
                max_size=wanted[stack.GPU_MAX_SIZE],
            )  # fmt: skip

        return f"+ {GPU_NODE_GROUP_ADDRESS} (create)", create

    def _other_changes(
        self, ids: StackIds, wanted: Mapping[str, Any], group: dict | None = None
    ) -> list[tuple[str, Any]]:
        ec2 = self._aws("ec2")
        changes: list[tuple[str, Any]] = []
        # Prometheus' CRDs before the operator's release (the stack's depends_on).
        changes += self._monitoring_changes(wanted[stack.ENABLE_MONITORING])
        changes += self._operator_changes(
            wanted[stack.ENABLE_GPU_OPERATOR],
            wanted[stack.GPU_OPERATOR_NAMESPACE],
            wanted[stack.ENABLE_MONITORING],
        )
        changes += self._rule_changes(
            ec2,
            ids.auxiliary_node_sg_id,
            [AUX_VPC_ALLOW_RULE],
            wanted[stack.ENABLE_AUX_SG_VPC_ALLOW],
            ids.cluster_security_group_id,
            lambda rule: AUX_RULE_ADDRESS,
        )
        changes += self._rule_changes(
            ec2,
            ids.node_security_group_id,
            list(NODE_SG_RECOMMENDED_RULES),
            wanted[stack.NODE_SG_ENABLE_RECOMMENDED_RULES],
            ids.cluster_security_group_id,
            _node_sg_address,
        )
        if group and group["scalingConfig"]["maxSize"] != wanted[stack.GPU_MAX_SIZE]:
            new = dict(group["scalingConfig"], maxSize=wanted[stack.GPU_MAX_SIZE])
            changes.append(
                (
                    f"~ {GPU_NODE_GROUP_ADDRESS} (update in-place)",
                    lambda: self._aws("eks").update_nodegroup_config(
                        clusterName=self._cluster,
                        nodegroupName=group["nodegroupName"],
                        scalingConfig=new,
                    ),
                )
            )
        return changes

    def _operator_changes(
        self, enabled: bool, namespace: str, monitoring: bool
    ) -> list[tuple[str, Any]]:
        """The chart's release, as terraform plans `helm_release.gpu_operator`: created, moved
        to another namespace or given new values in place, or destroyed."""
        helm = self._helm()
        installed = helm.installed()
        address = gpu_operator_release.ADDRESS
        if not enabled:
            if installed is None:
                return []
            return [(f"- {address} (destroy)", lambda: helm.uninstall(installed.namespace))]
        if installed is None:
            return [(f"+ {address} (create)", lambda: helm.install(namespace, monitoring))]
        if installed.namespace != namespace:

            def move() -> None:
                helm.uninstall(installed.namespace)
                helm.install(namespace, monitoring)

            return [(f"~ {address} (update in-place)", move)]
        if installed.status != "deployed" or helm.service_monitor(namespace) != monitoring:
            return [(f"~ {address} (update in-place)", lambda: helm.install(namespace, monitoring))]
        return []

    def _monitoring_changes(self, enabled: bool) -> list[tuple[str, Any]]:
        installed = alerts.monitoring_installed(self._api())
        address = monitoring_release.ADDRESS
        if enabled and not installed:
            return [(f"+ {address} (create)", lambda: monitoring_release.install(self._api()))]
        if installed and not enabled:
            return [(f"- {address} (destroy)", lambda: monitoring_release.uninstall(self._api()))]
        return []

    def _rule_changes(
        self,
        ec2: Any,
        group_id: str,
        rules: list[SgRule],
        enabled: bool,
        cluster_sg: str,
        address: Any,
    ) -> list[tuple[str, Any]]:
        changes = []
        for rule in rules:
            present = bool(rule_ids(ec2, group_id, rule))
            if enabled and not present:
                changes.append(
                    (
                        f"+ {address(rule)} (create)",
                        lambda rule=rule: add_rule(ec2, group_id, rule, cluster_sg),
                    )
                )
            elif present and not enabled:
                changes.append(
                    (
                        f"- {address(rule)} (destroy)",
                        lambda rule=rule: remove_rule(ec2, group_id, rule),
                    )
                )
        return changes

    def _checked(
        self, variables: Mapping[str, Any], ids: StackIds, group: dict | None
    ) -> dict[str, Any]:
        missing = stack.ORCHESTRATOR_VARIABLES - set(variables)
        if missing:
            raise InfraError(f"variables missing: {sorted(missing)}; pass the lab's full set")
        wanted = dict(variables)
        fixed = {
            stack.CLUSTER_BASE_NAME: self._cluster,
            stack.TARGET_REGION: self._region,
            stack.AVAILABILITY_ZONES: [self._region + suffix for suffix in AZ_SUFFIXES],
            stack.GPU_INSTANCE_TYPE: group["instanceTypes"][0] if group else GPU_INSTANCE_TYPE,
            stack.GPU_AZ_INDEX: ids.private_subnet_ids.index(ids.gpu_subnet_id),
        }
        for name, actual in fixed.items():
            if _plain(wanted[name]) != actual:
                raise InfraError(
                    f"{name}={wanted[name]!r} differs from the running rehearsal world "
                    f"({actual!r}); restart the world with that setting (lab.down --destroy)"
                )
        if not wanted[stack.GPU_DESIRED_SIZE] <= wanted[stack.GPU_MAX_SIZE]:
            raise InfraError(
                f"gpu_desired_size ({wanted[stack.GPU_DESIRED_SIZE]}) must not exceed "
                f"gpu_max_size ({wanted[stack.GPU_MAX_SIZE]})"
            )
        return wanted

    # ---- AWS side ---------------------------------------------------------------------

    def _ids(self) -> StackIds:
        try:
            return find_stack(self._aws, self._cluster, self._region)
        except Exception as error:
            raise InfraError(
                f"cannot read the rehearsal stack at {self._endpoints['aws_endpoint_url']}: "
                f"{error}; is the world running (lab.up --sim)?"
            ) from error

    def _gpu_group(self) -> dict | None:
        """The GPU node group, or None when it is gone (the cluster still there)."""
        from botocore.exceptions import ClientError

        try:
            return self._aws("eks").describe_nodegroup(
                clusterName=self._cluster, nodegroupName=stack.gpu_node_group_name(self._cluster)
            )["nodegroup"]
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") != "ResourceNotFoundException":
                raise
        try:
            self._aws("eks").describe_cluster(name=self._cluster)
        except ClientError as error:
            raise InfraError(
                f"the rehearsal's EKS cluster {self._cluster} is gone and a rehearsal cannot "
                "make a new one: run `invoke lab.down --destroy`, then `invoke lab.up --sim`"
            ) from error
        return None

    # ---- the helm release -------------------------------------------------------------

    def _kubeconfig(self) -> dict:
        """The lab's own credentials (the world's token), as the stack's providers hold them."""
        return kubeconfig_document(
            self._endpoints["kube_url"], self._cluster, self._endpoints["kube_token"],
            base64.b64encode(self._endpoints["kube_ca"].encode()).decode(), LAB_USER,
        )  # fmt: skip

    def _api(self) -> Any:
        if self._kube is None:
            from kubernetes import config

            self._kube = config.new_client_from_config_dict(self._kubeconfig())
        return self._kube

    def _helm(self) -> Helm:
        return Helm(self._kubeconfig())


def _plain(value: Any) -> Any:
    """Sequences compare as lists (settings may hold a tuple where terraform has a list)."""
    return list(value) if isinstance(value, tuple) else value
