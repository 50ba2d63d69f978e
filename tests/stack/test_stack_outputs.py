"""Stack outputs: exactly the contract in labs/aws/stack.py, each explained and wired right."""

from __future__ import annotations

import pytest
from stack_spec import resolve, stack

from labs.aws import stack as contract


def outputs() -> dict:
    return stack()["output"]


def value(name: str):
    return outputs()[name]["value"]


def test_outputs_are_exactly_the_stack_contract():
    assert set(outputs()) == contract.STACK_OUTPUTS


@pytest.mark.parametrize("name", sorted(contract.STACK_OUTPUTS))
def test_output_has_a_description(name):
    assert outputs()[name].get("description", "").strip()


def test_gpu_subnet_outputs_name_the_single_gpu_subnet_and_its_zone():
    assert resolve(value("gpu_subnet_id")) == "${module.vpc.private_subnets[var.gpu_az_index]}"
    assert resolve(value("gpu_subnet_az")) == "${var.availability_zones[var.gpu_az_index]}"


def test_node_group_name_outputs_match_labs_stack_names():
    base = "${var.ClusterBaseName}"
    assert resolve(value("system_node_group_name")) == contract.system_node_group_name(base)
    assert resolve(value("gpu_node_group_name")) == contract.gpu_node_group_name(base)


@pytest.mark.parametrize(
    ("output", "data_source"),
    [
        ("ami_al2023_standard", "eks_ami_al2023_standard"),
        ("ami_al2023_nvidia", "eks_ami_al2023_nvidia"),
    ],
)
def test_ami_outputs_expose_the_ssm_parameter_values(output, data_source):
    assert value(output) == f"${{nonsensitive(data.aws_ssm_parameter.{data_source}.value)}}"


def test_cluster_outputs_come_from_the_eks_module():
    for name in ("cluster_name", "cluster_endpoint", "cluster_security_group_id"):
        assert value(name) == f"${{module.eks.{name}}}"
    assert value("node_security_group_id") == "${module.eks.node_security_group_id}"


def test_network_outputs_name_the_vpc_region_and_auxiliary_group():
    assert value("vpc_id") == "${module.vpc.vpc_id}"
    assert value("region") == "${var.TargetRegion}"
    assert value("auxiliary_node_sg_id") == "${aws_security_group.node_aux.id}"


def test_configure_kubectl_names_the_region_and_the_cluster():
    assert value("configure_kubectl") == (
        "aws eks --region ${var.TargetRegion} update-kubeconfig --name ${module.eks.cluster_name}"
    )
