########################
# kube-prometheus-stack (helm), installed only when enable_monitoring = true: Prometheus
# with the lab's GPU alert rules, scraping kube-state-metrics, the GPU Operator and
# dcgm-exporter. It lives on the system nodes (the GPU nodes are tainted).
########################

# The release name holds the chart's name, so the chart's fullname is the release name
# itself and the Prometheus Service is "kube-prometheus-stack-prometheus", port 9090
# (chart 88.5.3: "kube-prometheus-stack.fullname" in templates/_helpers.tpl,
# templates/prometheus/service.yaml, prometheus.service.port). The lab reads the alerts
# there, from Prometheus' own /api/v1/alerts (labs/aws/stack.py PROMETHEUS_SERVICE).
resource "helm_release" "kube_prometheus_stack" {
  count = var.enable_monitoring ? 1 : 0

  name             = "kube-prometheus-stack"
  namespace        = "monitoring"
  create_namespace = true

  repository = "https://prometheus-community.github.io/helm-charts"
  chart      = "kube-prometheus-stack"
  version    = var.kube_prometheus_stack_chart_version # pinned: never whatever is latest today

  timeout = 900
  atomic  = false # keep a failed install in place, so its failure can be studied
  wait    = true

  # The chart's settings, then the lab's alert rules (monitoring_rules.tf).
  values = [
    file("${path.module}/monitoring_values.yaml"),
    local.monitoring_rules_values,
  ]

  depends_on = [module.eks]
}
