########################
# Auxiliary node security group, shared by the system and GPU node groups.
# The VPC-wide ingress rule is a toggle (nccl-sg-block scenario); the egress rule is
# not: with node_sg_enable_recommended_rules=false the module's node SG has no egress
# at all, and this rule keeps nodes reaching the EKS API, ECR and NGC.
########################

resource "aws_security_group" "node_aux" {
  #checkov:skip=CKV2_AWS_5:attached to both node groups through the eks module (vpc_security_group_ids), which checkov does not read without downloading it
  name        = "${var.ClusterBaseName}-node-aux-sg"
  description = "Auxiliary security group shared by the system and GPU node groups"
  vpc_id      = module.vpc.vpc_id

  tags = merge(local.common_tags, {
    Name = "${var.ClusterBaseName}-node-aux-sg"
  })
}

resource "aws_vpc_security_group_ingress_rule" "node_aux_from_vpc" {
  count = var.enable_aux_sg_vpc_allow ? 1 : 0

  security_group_id = aws_security_group.node_aux.id
  description       = "All traffic from inside the VPC (toggle: enable_aux_sg_vpc_allow)"
  ip_protocol       = "-1"
  cidr_ipv4         = module.vpc.vpc_cidr_block
}

resource "aws_vpc_security_group_egress_rule" "node_aux_to_anywhere" {
  security_group_id = aws_security_group.node_aux.id
  description       = "Egress to anywhere; never toggled (safety net for the SG scenario)"
  ip_protocol       = "-1"
  cidr_ipv4         = "0.0.0.0/0"
}
