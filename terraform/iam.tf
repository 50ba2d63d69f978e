########################
# Customer-managed policies for the controllers that run on the system nodes
# (attached to the system node group's role). The JSON files follow the policies the
# controllers' projects document.
########################

resource "aws_iam_policy" "aws_load_balancer_controller" {
  name        = "${var.ClusterBaseName}AWSLoadBalancerControllerPolicy"
  description = "AWS Load Balancer Controller: manage ELBs, target groups and their security groups"
  policy      = file("${path.module}/policies/aws-load-balancer-controller.json")
  tags        = local.common_tags
}

resource "aws_iam_policy" "external_dns" {
  name        = "${var.ClusterBaseName}ExternalDNSPolicy"
  description = "ExternalDNS: list hosted zones and change Route 53 records"
  policy      = file("${path.module}/policies/external-dns.json")
  tags        = local.common_tags
}

resource "aws_iam_policy" "cluster_autoscaler" {
  name        = "${var.ClusterBaseName}ClusterAutoscalerPolicy"
  description = "Cluster Autoscaler: read node groups, scale only autoscaler-enabled Auto Scaling groups"
  policy      = file("${path.module}/policies/cluster-autoscaler.json")
  tags        = local.common_tags
}
