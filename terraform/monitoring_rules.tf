# The alert rules the kube-prometheus-stack release carries (monitoring.tf): the groups of
# the lab's ONE rules file, monitoring/gpu-alerts.yaml, read where it lies beside this
# stack. A checkout has it there; the AWS backend places it the same way beside each lab's
# copy of the stack (labs/aws/terraform.py, `companions`). file() reads it even while
# monitoring is off. This file references files only, so the tests evaluate it with
# nothing but the terraform binary.
locals {
  gpu_alert_rules_file = "${path.module}/../monitoring/gpu-alerts.yaml"

  # One PrometheusRule, "kube-prometheus-stack-gpu-alerts" (the chart names each entry
  # "<fullname>-<key>"), holding exactly the file's groups.
  monitoring_rules_values = yamlencode({
    additionalPrometheusRulesMap = {
      "gpu-alerts" = {
        groups = yamldecode(file(local.gpu_alert_rules_file)).groups
      }
    }
  })
}
