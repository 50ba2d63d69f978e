# Names and settings more than one file relies on.
locals {
  # labs/aws/stack.py derives the same names; scaling goes through them (EKS API).
  system_node_group_name = "${var.ClusterBaseName}-ng-1"
  gpu_node_group_name    = "${var.ClusterBaseName}-ng-gpu"

  # The GPU time limit's one-time schedule (created by the tool); the role trusts only it.
  gpu_ttl_schedule_name  = "${var.ClusterBaseName}-gpu-ttl"
  gpu_ttl_schedule_group = "default"
  gpu_ttl_role_name      = "${var.ClusterBaseName}-gpu-ttl-scheduler"

  # The VPC module returns private subnets in availability_zones order, so the index
  # picks ONE subnet in ONE AZ: both GPU nodes share it, and NCCL stays intra-AZ.
  gpu_subnet_id = module.vpc.private_subnets[var.gpu_az_index]
  gpu_subnet_az = var.availability_zones[var.gpu_az_index]

  ssm_core_policy_arn = "arn:aws:iam::aws:policy/AmazonSSMManagedInstanceCore"

  # IMDSv2 only; hop limit 2 so pods (one network hop behind the node) still reach it.
  node_metadata_options = {
    http_endpoint               = "enabled"
    http_tokens                 = "required"
    http_put_response_hop_limit = 2
  }

  common_tags = {
    Environment = "eks-gpu-lab"
    Lab         = var.ClusterBaseName
    Terraform   = "true"
  }
}
