"""What the rehearsal's machines look like: instance shapes and the A10G as nvidia-smi reports it.

Figures are those of real EKS AL2023 nodes with maxPods 50 (from `kubectl describe node`
on g5.xlarge and t3.medium) and of `nvidia-smi` on the AL2023 NVIDIA AMI.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass


@dataclass(frozen=True)
class InstanceShape:
    cpu: str
    memory: str
    allocatable_cpu: str
    allocatable_memory: str
    gpus: int


INSTANCE_SHAPES = {
    "t3.medium": InstanceShape("2", "3943372Ki", "1930m", "3388364Ki", 0),
    "g5.xlarge": InstanceShape("4", "16069232Ki", "3920m", "15147936Ki", 1),
}
MAX_PODS = "50"

GPU_NAME = "NVIDIA A10G"
GPU_PRODUCT_LABEL = "NVIDIA-A10G"
GPU_DRIVER_VERSION = "580.126.09"
GPU_MEMORY_MIB = 23028
NVIDIA_PCI_LABEL = "feature.node.kubernetes.io/pci-10de.present"


def shape(instance_type: str) -> InstanceShape:
    """The shape of a supported instance type; ValueError names the supported ones."""
    try:
        return INSTANCE_SHAPES[instance_type]
    except KeyError:
        supported = ", ".join(sorted(INSTANCE_SHAPES))
        raise ValueError(
            f"the rehearsal world has no instance type {instance_type!r}; use one of {supported}"
        ) from None


def gpu_uuid(node_name: str) -> str:
    """A GPU UUID that stays the same for a node, formatted as nvidia-smi prints it."""
    return "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_DNS, node_name))


def node_name_for_ip(private_ip: str, region: str) -> str:
    """EC2 private DNS name, which EKS uses as the node name."""
    return f"ip-{private_ip.replace('.', '-')}.{region}.compute.internal"
