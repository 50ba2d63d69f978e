########################
# EKS-optimized AL2023 AMIs (reported as outputs; the node groups pick the AMI by
# ami_type, and these show which image that currently is).
########################

data "aws_ssm_parameter" "eks_ami_al2023_standard" {
  name = "/aws/service/eks/optimized-ami/${var.KubernetesVersion}/amazon-linux-2023/x86_64/standard/recommended/image_id"
}

data "aws_ssm_parameter" "eks_ami_al2023_nvidia" {
  name = "/aws/service/eks/optimized-ami/${var.KubernetesVersion}/amazon-linux-2023/x86_64/nvidia/recommended/image_id"
}

########################
# EKS cluster and its two managed node groups
########################

module "eks" {
  #checkov:skip=CKV_TF_1:a Terraform registry module, pinned by a version constraint (registry versions are immutable)
  source  = "terraform-aws-modules/eks/aws"
  version = "~> 21.0"

  name               = var.ClusterBaseName
  kubernetes_version = var.KubernetesVersion

  vpc_id     = module.vpc.vpc_id
  subnet_ids = module.vpc.private_subnets

  # v21 defaults differ from what the lab needs, so these are explicit: the helm
  # provider's exec auth runs from outside the VPC, and the caller must be admin.
  endpoint_public_access                   = true
  endpoint_private_access                  = true
  enable_cluster_creator_admin_permissions = true
  enable_irsa                              = true

  enabled_log_types = ["api", "scheduler"]

  # The recommended rules carry the node-to-node 1025-65535/tcp self rule NCCL uses
  # and the cluster->node webhook ports; the nccl-sg-block scenario turns them off.
  node_security_group_enable_recommended_rules = var.node_sg_enable_recommended_rules

  # v21 installs no addon unless listed; vpc-cni must exist before nodes join.
  addons = {
    vpc-cni = {
      most_recent    = true
      before_compute = true
    }
    kube-proxy = {
      most_recent = true
    }
    coredns = {
      most_recent = true
    }
    metrics-server = {
      most_recent = true
    }
    external-dns = {
      most_recent = true
    }
    # Sets node conditions such as AcceleratedHardwareReady (an Xid on a GPU) that the
    # doctor and the gpu-xid-79 scenario read.
    eks-node-monitoring-agent = {
      most_recent = true
    }
    eks-pod-identity-agent = {
      most_recent = true
    }
    cert-manager = {
      most_recent = true
    }
  }

  # Keys the v21 node-group object type does not declare are DROPPED without a word
  # (e.g. `subnets` instead of `subnet_ids`); tests/stack_spec.py pins the valid keys.
  eks_managed_node_groups = {
    system = {
      name            = local.system_node_group_name
      use_name_prefix = false

      ami_type       = "AL2023_x86_64_STANDARD"
      instance_types = [var.WorkerNodeInstanceType]

      desired_size = var.WorkerNodeCount
      min_size     = var.WorkerNodeCount - 1
      max_size     = var.WorkerNodeCount + 2

      subnet_ids             = module.vpc.private_subnets
      vpc_security_group_ids = [aws_security_group.node_aux.id]

      # v21 defaults use_custom_launch_template = true and then drops disk_size, so
      # the root volume is sized through the launch template instead.
      block_device_mappings = {
        xvda = {
          device_name = "/dev/xvda"
          ebs = {
            volume_size           = var.WorkerNodeVolumesize
            volume_type           = "gp3"
            encrypted             = true
            delete_on_termination = true
          }
        }
      }

      metadata_options = local.node_metadata_options

      iam_role_name            = local.system_node_group_name
      iam_role_use_name_prefix = false
      iam_role_additional_policies = {
        aws_load_balancer_controller = aws_iam_policy.aws_load_balancer_controller.arn
        external_dns                 = aws_iam_policy.external_dns.arn
        cluster_autoscaler           = aws_iam_policy.cluster_autoscaler.arn
        ssm_core                     = local.ssm_core_policy_arn
      }

      labels = {
        tier = "system"
      }

      cloudinit_pre_nodeadm = [
        {
          content_type = "application/node.eks.aws"
          content      = <<-EOT
            ---
            apiVersion: node.eks.aws/v1alpha1
            kind: NodeConfig
            spec:
              kubelet:
                config:
                  maxPods: 50
          EOT
        },
        {
          content_type = "text/x-shellscript"
          content      = <<-EOT
            #!/bin/bash
            dnf install -y tree bind-utils tcpdump nvme-cli links sysstat ipset htop
          EOT
        }
      ]
    }

    gpu = {
      name            = local.gpu_node_group_name
      use_name_prefix = false

      # The NVIDIA AMI ships driver 580 and the container toolkit; the GPU Operator
      # adds the device plugin, NFD, DCGM exporter and validator.
      ami_type       = "AL2023_x86_64_NVIDIA"
      capacity_type  = "ON_DEMAND"
      instance_types = [var.gpu_instance_type]

      # Cost guard: created at 0 nodes. desired_size only counts at creation (the
      # module ignores later changes); sessions scale through the EKS API.
      desired_size = var.gpu_desired_size
      min_size     = 0
      max_size     = var.gpu_max_size

      # ONE private subnet, so every GPU node lands in the same AZ.
      subnet_ids             = [local.gpu_subnet_id]
      vpc_security_group_ids = [aws_security_group.node_aux.id]

      block_device_mappings = {
        xvda = {
          device_name = "/dev/xvda"
          ebs = {
            volume_size           = var.gpu_node_disk_size
            volume_type           = "gp3"
            encrypted             = true
            delete_on_termination = true
          }
        }
      }

      metadata_options = local.node_metadata_options

      # A repair replacing a node mid-scenario would falsify the lab.
      node_repair_config = {
        enabled = false
      }

      iam_role_name            = local.gpu_node_group_name
      iam_role_use_name_prefix = false
      iam_role_additional_policies = {
        ssm_core = local.ssm_core_policy_arn
      }

      labels = {
        tier             = "gpu"
        "nvidia.com/gpu" = "true"
      }

      taints = {
        gpu = {
          key    = "nvidia.com/gpu"
          value  = "true"
          effect = "NO_SCHEDULE"
        }
      }

      cloudinit_pre_nodeadm = [
        {
          content_type = "text/x-shellscript"
          content      = <<-EOT
            #!/bin/bash
            dnf install -y tree bind-utils tcpdump nvme-cli links sysstat ipset htop pciutils
          EOT
        }
      ]

      # Node-template hints so a Cluster Autoscaler scaling from 0 knows the label and
      # taint new GPU nodes will carry.
      # (The module adds its own `tags` to these.)
      tags = {
        "k8s.io/cluster-autoscaler/node-template/label/tier"           = "gpu"
        "k8s.io/cluster-autoscaler/node-template/label/nvidia.com/gpu" = "true"
        "k8s.io/cluster-autoscaler/node-template/taint/nvidia.com/gpu" = "true:NoSchedule"
      }
    }
  }

  tags = local.common_tags
}
