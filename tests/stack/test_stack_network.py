"""The VPC and the security-group toggles the nccl-sg-block scenario flips."""

from __future__ import annotations

from stack_spec import MODULE_META_ARGUMENTS, VPC_V6_INPUTS_USED, stack

ALL_PROTOCOLS = "-1"


def vpc() -> dict:
    return stack()["module"]["vpc"]


def resources(kind: str) -> dict:
    return stack()["resource"][kind]


def test_vpc_module_arguments_are_all_known_vpc_v6_inputs():
    unknown = set(vpc()) - VPC_V6_INPUTS_USED - MODULE_META_ARGUMENTS
    assert not unknown, f"not checked against vpc v6 variables.tf: {unknown}"


def test_vpc_is_built_from_the_cidr_zone_and_subnet_variables():
    assert vpc()["cidr"] == "${var.VpcBlock}"
    assert vpc()["azs"] == "${var.availability_zones}"
    assert vpc()["public_subnets"] == "${var.public_subnet_blocks}"
    assert vpc()["private_subnets"] == "${var.private_subnet_blocks}"


def test_vpc_has_exactly_one_nat_gateway():
    assert vpc()["enable_nat_gateway"] is True
    assert vpc()["single_nat_gateway"] is True
    assert vpc()["one_nat_gateway_per_az"] is False


def test_vpc_has_dns_support_and_hostnames():
    assert vpc()["enable_dns_support"] is True
    assert vpc()["enable_dns_hostnames"] is True


def test_vpc_maps_public_ips_and_leaves_the_default_nacl_unmanaged():
    assert vpc()["map_public_ip_on_launch"] is True
    assert vpc()["manage_default_network_acl"] is False


def test_subnets_carry_the_load_balancer_role_tags():
    assert vpc()["public_subnet_tags"]["kubernetes.io/role/elb"] == "1"
    assert vpc()["private_subnet_tags"]["kubernetes.io/role/internal-elb"] == "1"


def test_auxiliary_security_group_keeps_its_rules_in_separate_resources():
    (aux,) = resources("aws_security_group").values()
    assert aux["vpc_id"] == "${module.vpc.vpc_id}"
    assert "ingress" not in aux and "egress" not in aux, "inline rules fight separate rules"


def test_aux_sg_allows_all_vpc_traffic_only_when_enable_aux_sg_vpc_allow():
    (rule,) = resources("aws_vpc_security_group_ingress_rule").values()
    assert rule["count"] == "${var.enable_aux_sg_vpc_allow ? 1 : 0}"
    assert rule["security_group_id"] == "${aws_security_group.node_aux.id}"
    assert rule["ip_protocol"] == ALL_PROTOCOLS
    assert rule["cidr_ipv4"] == "${module.vpc.vpc_cidr_block}"


def test_aux_sg_egress_to_anywhere_is_never_toggled():
    (rule,) = resources("aws_vpc_security_group_egress_rule").values()
    assert "count" not in rule and "for_each" not in rule
    assert rule["security_group_id"] == "${aws_security_group.node_aux.id}"
    assert rule["ip_protocol"] == ALL_PROTOCOLS
    assert rule["cidr_ipv4"] == "0.0.0.0/0"
