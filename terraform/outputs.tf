# Output names are the contract in labs/aws/stack.py (STACK_OUTPUTS); the rehearsal
# backend returns the same set.

output "region" {
  description = "AWS region the lab runs in."
  value       = var.TargetRegion
}

output "configure_kubectl" {
  description = "Command that writes a kubeconfig entry for the cluster."
  value       = "aws eks --region ${var.TargetRegion} update-kubeconfig --name ${module.eks.cluster_name}"
}

output "cluster_name" {
  description = "Name of the EKS cluster."
  value       = module.eks.cluster_name
}

output "cluster_endpoint" {
  description = "Endpoint of the EKS API server."
  value       = module.eks.cluster_endpoint
}

output "cluster_security_group_id" {
  description = "Security group the EKS module created for the cluster."
  value       = module.eks.cluster_security_group_id
}

output "node_security_group_id" {
  description = "Node security group of the EKS module (recommended rules toggled by node_sg_enable_recommended_rules)."
  value       = module.eks.node_security_group_id
}

output "auxiliary_node_sg_id" {
  description = "Auxiliary node security group shared by both node groups (VPC ingress toggled by enable_aux_sg_vpc_allow)."
  value       = aws_security_group.node_aux.id
}

output "vpc_id" {
  description = "ID of the lab VPC."
  value       = module.vpc.vpc_id
}

output "system_node_group_name" {
  description = "Name of the system managed node group."
  value       = local.system_node_group_name
}

output "gpu_node_group_name" {
  description = "Name of the GPU managed node group (scale it through the EKS API)."
  value       = local.gpu_node_group_name
}

output "gpu_subnet_az" {
  description = "The single availability zone every GPU node runs in."
  value       = local.gpu_subnet_az
}

output "gpu_subnet_id" {
  description = "The single private subnet every GPU node runs in."
  value       = local.gpu_subnet_id
}

output "ami_al2023_standard" {
  description = "Current EKS-optimized AL2023 x86_64 standard AMI for this Kubernetes version (system nodes)."
  value       = nonsensitive(data.aws_ssm_parameter.eks_ami_al2023_standard.value)
}

output "ami_al2023_nvidia" {
  description = "Current EKS-optimized AL2023 x86_64 NVIDIA AMI for this Kubernetes version (GPU nodes)."
  value       = nonsensitive(data.aws_ssm_parameter.eks_ami_al2023_nvidia.value)
}

output "gpu_ttl_scheduler_role_arn" {
  description = "Role the GPU time limit's schedule acts as: it may only scale the GPU node group (UpdateNodegroupConfig)."
  value       = aws_iam_role.gpu_ttl_scheduler.arn
}

output "gpu_ttl_schedule_name" {
  description = "Name of the one-time EventBridge Scheduler schedule (default group) that scales GPU nodes to 0 when the lab's TTL runs out; the role trusts only it."
  value       = local.gpu_ttl_schedule_name
}
