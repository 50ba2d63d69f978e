# Plan-time checks across variables. A bad combination otherwise fails 15-20 minutes
# into node-group creation. This file references variables only, so the checks run
# (and are tested) with nothing but the built-in terraform_data resource.
resource "terraform_data" "input_checks" {
  lifecycle {
    precondition {
      condition     = var.gpu_max_size >= var.gpu_desired_size
      error_message = "gpu_max_size (${var.gpu_max_size}) must be >= gpu_desired_size (${var.gpu_desired_size}): lower gpu_desired_size or raise gpu_max_size."
    }

    precondition {
      condition     = var.gpu_az_index >= 0 && var.gpu_az_index < length(var.availability_zones)
      error_message = "gpu_az_index (${var.gpu_az_index}) is out of range: availability_zones has ${length(var.availability_zones)} entries, so use 0..${length(var.availability_zones) - 1}."
    }

    precondition {
      condition     = length(var.public_subnet_blocks) == length(var.availability_zones) && length(var.private_subnet_blocks) == length(var.availability_zones)
      error_message = "public_subnet_blocks (${length(var.public_subnet_blocks)}) and private_subnet_blocks (${length(var.private_subnet_blocks)}) must each have one block per availability zone (${length(var.availability_zones)})."
    }

    precondition {
      condition     = alltrue([for zone in var.availability_zones : startswith(zone, var.TargetRegion)])
      error_message = "Every availability zone must be in TargetRegion (${var.TargetRegion}), for example \"${var.TargetRegion}a\"."
    }
  }
}
