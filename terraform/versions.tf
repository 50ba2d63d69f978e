# Versions the stack is known to work with.
#
# terraform-aws-modules/eks v21.19 and vpc v6.6 need Terraform >= 1.5.7 and the AWS
# provider >= 6.28. The helm provider stays on 2.x: gpu_operator.tf uses the v2 nested
# `kubernetes {}` block, which v3 replaced with an attribute. cloudinit, null, tls and
# time are pulled in by the modules; they are pinned here so every study week resolves
# the same majors.
terraform {
  required_version = ">= 1.5.7"

  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = ">= 6.28"
    }
    helm = {
      source  = "hashicorp/helm"
      version = "~> 2.17"
    }
    cloudinit = {
      source  = "hashicorp/cloudinit"
      version = "~> 2.3"
    }
    null = {
      source  = "hashicorp/null"
      version = "~> 3.2"
    }
    tls = {
      source  = "hashicorp/tls"
      version = "~> 4.0"
    }
    time = {
      source  = "hashicorp/time"
      version = "~> 0.13"
    }
  }
}

provider "aws" {
  region = var.TargetRegion
}
