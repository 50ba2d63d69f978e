########################
# NVIDIA GPU Operator (helm), installed only when enable_gpu_operator = true:
# base infra first, GPU nodes scaled up through the EKS API, then this.
########################

# helm provider 2.x syntax: nested `kubernetes {}` block (3.x made it an attribute).
# The token comes from `aws eks get-token` at plan/apply time, so it never expires
# in state; this is why the cluster endpoint must be public.
provider "helm" {
  kubernetes {
    host                   = module.eks.cluster_endpoint
    cluster_ca_certificate = base64decode(module.eks.cluster_certificate_authority_data)

    exec {
      api_version = "client.authentication.k8s.io/v1beta1"
      command     = "aws"
      args        = ["eks", "get-token", "--cluster-name", module.eks.cluster_name, "--region", var.TargetRegion]
    }
  }
}

resource "helm_release" "gpu_operator" {
  count = var.enable_gpu_operator ? 1 : 0

  name             = "gpu-operator"
  namespace        = var.gpu_operator_namespace
  create_namespace = true

  repository = "https://helm.ngc.nvidia.com/nvidia"
  chart      = "gpu-operator"
  version    = var.gpu_operator_chart_version # pinned: never whatever is latest today

  timeout = 900
  atomic  = false # keep a failed install in place, so its failure can be studied
  wait    = true

  # driver and toolkit come with the AL2023 NVIDIA AMI; the operator runs the rest.
  values = [file("${path.module}/gpu_operator_values.yaml")]

  # dcgm-exporter's ServiceMonitor only with Prometheus (monitoring.tf): while it is on and
  # the ServiceMonitor CRD is missing, the operator keeps the dcgm-exporter state NotReady.
  set {
    name  = "dcgmExporter.serviceMonitor.enabled"
    value = var.enable_monitoring
  }

  # With monitoring, Prometheus' CRDs come first (an empty list while it is off).
  depends_on = [module.eks, helm_release.kube_prometheus_stack]
}
