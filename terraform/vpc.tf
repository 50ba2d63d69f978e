########################
# VPC: 3 public + 3 private /22 subnets, one NAT gateway; every node runs in a
# private subnet.
########################

module "vpc" {
  #checkov:skip=CKV_TF_1:a Terraform registry module, pinned by a version constraint (registry versions are immutable)
  source  = "terraform-aws-modules/vpc/aws"
  version = "~> 6.5"

  name = "${var.ClusterBaseName}-VPC"
  cidr = var.VpcBlock
  azs  = var.availability_zones

  enable_dns_support   = true
  enable_dns_hostnames = true

  public_subnets  = var.public_subnet_blocks
  private_subnets = var.private_subnet_blocks

  enable_nat_gateway     = true
  single_nat_gateway     = true
  one_nat_gateway_per_az = false

  manage_default_network_acl = false
  map_public_ip_on_launch    = true

  igw_tags = {
    Name = "${var.ClusterBaseName}-IGW"
  }

  nat_gateway_tags = {
    Name = "${var.ClusterBaseName}-NAT"
  }

  public_subnet_tags = {
    Name                     = "${var.ClusterBaseName}-PublicSubnet"
    "kubernetes.io/role/elb" = "1"
  }

  private_subnet_tags = {
    Name                              = "${var.ClusterBaseName}-PrivateSubnet"
    "kubernetes.io/role/internal-elb" = "1"
  }

  tags = local.common_tags
}
