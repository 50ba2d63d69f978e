########################
# Server-side GPU time limit: a one-time EventBridge Scheduler schedule (created by the
# tool at lab.up / lab.scale, not here) scales the GPU node group to 0 when the lab's
# TTL runs out, even if the laptop that started the session is asleep. The schedule
# calls the EKS API through the scheduler's universal target, as this role.
########################

data "aws_caller_identity" "current" {}

resource "aws_iam_role" "gpu_ttl_scheduler" {
  name        = local.gpu_ttl_role_name
  description = "EventBridge Scheduler: scale the lab's GPU node group to 0 when its time limit runs out"
  # Only the lab's own schedule, in this account, may act as this role (confused deputy).
  assume_role_policy = templatefile("${path.module}/policies/gpu-ttl-scheduler-trust.json.tftpl", {
    account_id   = data.aws_caller_identity.current.account_id
    schedule_arn = "arn:aws:scheduler:${var.TargetRegion}:${data.aws_caller_identity.current.account_id}:schedule/${local.gpu_ttl_schedule_group}/${local.gpu_ttl_schedule_name}"
  })
  tags = local.common_tags
}

# The universal target makes exactly one call with a fixed input and reads nothing, so
# the role may call UpdateNodegroupConfig on the GPU node group and nothing else.
resource "aws_iam_role_policy" "gpu_ttl_scheduler" {
  name = "scale-gpu-node-group"
  role = aws_iam_role.gpu_ttl_scheduler.id
  policy = templatefile("${path.module}/policies/gpu-ttl-scheduler.json.tftpl", {
    nodegroup_arn = module.eks.eks_managed_node_groups["gpu"].node_group_arn
  })
}
