########################
# Cluster basics
########################

variable "ClusterBaseName" {
  description = "Name of the EKS cluster; also the prefix of its node groups (<name>-ng-1, <name>-ng-gpu), IAM roles and policies."
  type        = string
  default     = "myeks"

  validation {
    condition     = can(regex("^[A-Za-z][A-Za-z0-9-]{0,27}$", var.ClusterBaseName))
    error_message = "ClusterBaseName must start with a letter and hold only letters, digits and hyphens, at most 28 characters (IAM role name prefixes derived from it are limited to 38), for example \"myeks\"."
  }
}

variable "KubernetesVersion" {
  description = "Kubernetes version of the EKS control plane and of the AL2023 AMIs the node groups use."
  type        = string
  default     = "1.35"

  validation {
    condition     = can(regex("^1\\.[0-9]+$", var.KubernetesVersion))
    error_message = "KubernetesVersion must be a minor version such as \"1.35\" (no patch level)."
  }
}

variable "TargetRegion" {
  description = "AWS region the lab is created in."
  type        = string
  default     = "ap-northeast-2"

  validation {
    condition     = can(regex("^[a-z]{2}(-gov|-iso[a-z]*)?-[a-z]+-[0-9]$", var.TargetRegion))
    error_message = "TargetRegion must be an AWS region code such as \"ap-northeast-2\" or \"us-east-1\"."
  }
}

variable "availability_zones" {
  description = "Availability zones of the VPC, in the order the public and private subnet blocks follow."
  type        = list(string)
  default     = ["ap-northeast-2a", "ap-northeast-2b", "ap-northeast-2c"]

  validation {
    condition     = length(var.availability_zones) > 0
    error_message = "availability_zones must name at least one availability zone, for example [\"ap-northeast-2a\"]."
  }
}

########################
# VPC / subnets
########################

variable "VpcBlock" {
  description = "IPv4 CIDR block of the lab VPC."
  type        = string
  default     = "192.168.0.0/16"

  validation {
    condition     = can(cidrnetmask(var.VpcBlock))
    error_message = "VpcBlock must be an IPv4 CIDR block such as \"192.168.0.0/16\"."
  }
}

variable "public_subnet_blocks" {
  description = "CIDR blocks of the public subnets, one per availability zone, in the same order."
  type        = list(string)
  default     = ["192.168.0.0/22", "192.168.4.0/22", "192.168.8.0/22"]

  validation {
    condition     = alltrue([for block in var.public_subnet_blocks : can(cidrnetmask(block))])
    error_message = "Every entry of public_subnet_blocks must be an IPv4 CIDR block such as \"192.168.0.0/22\"."
  }
}

variable "private_subnet_blocks" {
  description = "CIDR blocks of the private subnets (where all nodes run), one per availability zone, in the same order."
  type        = list(string)
  default     = ["192.168.12.0/22", "192.168.16.0/22", "192.168.20.0/22"]

  validation {
    condition     = alltrue([for block in var.private_subnet_blocks : can(cidrnetmask(block))])
    error_message = "Every entry of private_subnet_blocks must be an IPv4 CIDR block such as \"192.168.12.0/22\"."
  }
}

########################
# System node group
########################

variable "WorkerNodeInstanceType" {
  description = "EC2 instance type of the system node group (<name>-ng-1)."
  type        = string
  default     = "t3.medium"
}

variable "WorkerNodeCount" {
  description = "Desired size of the system node group; min is one less, max two more."
  type        = number
  default     = 2

  validation {
    condition     = var.WorkerNodeCount >= 1 && floor(var.WorkerNodeCount) == var.WorkerNodeCount
    error_message = "WorkerNodeCount must be a whole number >= 1: the system nodes run CoreDNS and the GPU Operator controller."
  }
}

variable "WorkerNodeVolumesize" {
  description = "Root volume size of each system node, in GiB (set through block_device_mappings)."
  type        = number
  default     = 30

  validation {
    condition     = var.WorkerNodeVolumesize >= 20
    error_message = "WorkerNodeVolumesize must be at least 20 GiB (the AL2023 AMI root snapshot size)."
  }
}

########################
# GPU node group
########################

variable "gpu_desired_size" {
  description = "GPU node count when the node group is CREATED (cost guard: 0). The module ignores later changes to desired_size; scale an existing group through the EKS API (UpdateNodegroupConfig)."
  type        = number
  default     = 0

  validation {
    condition     = var.gpu_desired_size >= 0 && floor(var.gpu_desired_size) == var.gpu_desired_size
    error_message = "gpu_desired_size must be a whole number >= 0 (0 keeps GPUs off until a session starts)."
  }
}

variable "gpu_max_size" {
  description = "Maximum GPU node count. 2 fits an 8 vCPU G/VT On-Demand quota with g5.xlarge (4 vCPU each)."
  type        = number
  default     = 2

  validation {
    condition     = var.gpu_max_size >= 0 && floor(var.gpu_max_size) == var.gpu_max_size
    error_message = "gpu_max_size must be a whole number >= 0; keep max_size * vCPUs per instance within your G/VT On-Demand quota."
  }
}

variable "gpu_instance_type" {
  description = "EC2 instance type of the GPU node group; an NVIDIA x86_64 family the AL2023 NVIDIA AMI supports."
  type        = string
  default     = "g5.xlarge"

  validation {
    condition     = can(regex("^(g4dn|g5|g6|g6e|p3|p3dn|p4d|p4de|p5|p5e|p5en)\\.([0-9]*xlarge|metal)$", var.gpu_instance_type))
    error_message = "gpu_instance_type must be an NVIDIA x86_64 GPU instance type (families g4dn, g5, g6, g6e, p3, p3dn, p4d, p4de, p5, p5e, p5en), for example \"g5.xlarge\"."
  }
}

variable "gpu_node_disk_size" {
  description = "Root volume size of each GPU node, in GiB (set through block_device_mappings; CUDA and operator images are large)."
  type        = number
  default     = 100

  validation {
    condition     = var.gpu_node_disk_size >= 20
    error_message = "gpu_node_disk_size must be at least 20 GiB; 100 GiB is recommended for CUDA and GPU Operator images."
  }
}

variable "gpu_az_index" {
  description = "Index into availability_zones of the single AZ (and private subnet) every GPU node is placed in, so NCCL traffic never crosses AZs."
  type        = number
  default     = 0

  validation {
    condition     = var.gpu_az_index >= 0 && floor(var.gpu_az_index) == var.gpu_az_index
    error_message = "gpu_az_index must be a whole number >= 0 (an index into availability_zones)."
  }
}

########################
# GPU Operator (helm), off by default
########################

variable "enable_gpu_operator" {
  description = "Install the NVIDIA GPU Operator helm release; turn on once GPU nodes are up."
  type        = bool
  default     = false
}

variable "gpu_operator_namespace" {
  description = "Namespace the GPU Operator is installed in (created by the release)."
  type        = string
  default     = "gpu-operator"

  validation {
    condition     = can(regex("^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$", var.gpu_operator_namespace))
    error_message = "gpu_operator_namespace must be a Kubernetes namespace name (lower-case letters, digits, hyphens; at most 63 characters), for example \"gpu-operator\"."
  }
}

variable "gpu_operator_chart_version" {
  description = "Pinned gpu-operator chart version (never latest): v26.3.x supports Kubernetes 1.32-1.35 and driver stream 580, the AMI's."
  type        = string
  default     = "v26.3.1"

  validation {
    condition     = can(regex("^v[0-9]+\\.[0-9]+\\.[0-9]+$", var.gpu_operator_chart_version))
    error_message = "gpu_operator_chart_version must be an exact chart version such as \"v26.3.1\" (a pinned vMAJOR.MINOR.PATCH, never empty or a range)."
  }
}

########################
# Monitoring (helm), off by default
########################

variable "enable_monitoring" {
  description = "Install kube-prometheus-stack (namespace monitoring) with the lab's GPU alert rules (monitoring/gpu-alerts.yaml), and the GPU Operator's dcgm-exporter ServiceMonitor. Costs money: Prometheus', its operator's and kube-state-metrics' pods on the system nodes and node-exporter on every node (CPU and memory the nodes are billed for), and Prometheus' data volume (an emptyDir on the node's root volume: the stack has no EBS CSI driver for a volume of its own)."
  type        = bool
  default     = false
}

variable "kube_prometheus_stack_chart_version" {
  description = "Pinned kube-prometheus-stack chart version (never latest): 88.5.3, whose values monitoring_values.yaml was checked against."
  type        = string
  default     = "88.5.3"

  validation {
    condition     = can(regex("^[0-9]+\\.[0-9]+\\.[0-9]+$", var.kube_prometheus_stack_chart_version))
    error_message = "kube_prometheus_stack_chart_version must be an exact chart version such as \"88.5.3\" (a pinned MAJOR.MINOR.PATCH without a v, never empty or a range)."
  }
}

########################
# Security group toggles (nccl-sg-block scenario)
########################

variable "enable_aux_sg_vpc_allow" {
  description = "Allow all traffic from the VPC CIDR on the auxiliary node security group; false (with node_sg_enable_recommended_rules=false) blocks node-to-node NCCL traffic."
  type        = bool
  default     = true
}

variable "node_sg_enable_recommended_rules" {
  description = "The EKS module's node_security_group_enable_recommended_rules (node-to-node 1025-65535/tcp, webhook ports, egress); false removes them."
  type        = bool
  default     = true
}
