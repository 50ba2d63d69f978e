"""What the rehearsal's machines look like: instance shapes, the A10G as nvidia-smi reports it,
and the software of the AL2023 NVIDIA AMI that node-side commands report.

Figures are those of real EKS AL2023 nodes with maxPods 50 (from `kubectl describe node`
on g5.xlarge and t3.medium) and of `nvidia-smi` on the AL2023 NVIDIA AMI; the A10G's
table cells (bus id, power cap, temperature) are those of a g5.xlarge's `nvidia-smi`;
the AMI's glibc and NVIDIA Container Toolkit are those of its release notes (v20260714),
the toolkit's commit that of its v1.19.1 tag.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from labs.kube.gpu import NVIDIA_PCI_LABEL


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
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"

# Each AMI type's containerd default runtime handler: nodeadm makes `nvidia` the default
# wherever /usr/bin/nvidia-container-runtime exists (the NVIDIA AMI); elsewhere runc. Not a
# field of a real Node: the sim writes it as this annotation for its kubelet to read.
DEFAULT_RUNTIMES = {"AL2023_x86_64_NVIDIA": "nvidia", "AL2023_x86_64_STANDARD": "runc"}
DEFAULT_RUNTIME_ANNOTATION = "sim.eks-gpu-lab/default-runtime"
NVIDIA_RUNTIME = "nvidia"
# What images put in a container's environment: the nvidia/cuda base images set these; NVIDIA's
# other images (device plugin, dcgm-exporter, the operator's) NVIDIA_VISIBLE_DEVICES=all, so
# the NVIDIA runtime mounts every GPU into them without a GPU request.
CUDA_IMAGE_ENV = {"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "compute,utility"}
IMAGE_ENV = {
    "nvcr.io/nvidia/cuda:": CUDA_IMAGE_ENV,
    # the validator's image asks for no GPU (gpu-operator v25.3.4 validator/Dockerfile:71-73):
    # only its toolkit-validation container sets NVIDIA_VISIBLE_DEVICES=all in the DaemonSet.
    "nvcr.io/nvidia/cloud-native/gpu-operator-validator:": {
        "NVIDIA_DISABLE_REQUIRE": "true",
        "NVIDIA_VISIBLE_DEVICES": "void",
        "NVIDIA_DRIVER_CAPABILITIES": "utility,compute",
    },
    "nvidia/cuda:": CUDA_IMAGE_ENV,
    "nvcr.io/nvidia/": {"NVIDIA_VISIBLE_DEVICES": "all"},
}
CUDA_VERSION = "13.0"  # what driver 580 reports
GPU_COMPUTE_CAP = "8.6"
# nvidia-smi's table cells for an idle A10G on a g5.xlarge.
GPU_TABLE_CELLS = {
    "bus_id": "00000000:00:1E.0",
    "persistence": "Off",
    "display": "Off",
    "ecc": "0",
    "fan": "0%",
    "temperature": "26C",
    "perf": "P0",
    "power": "60W",
    "power_cap": "300W",
    "utilization": "0%",
    "compute_mode": "Default",
    "mig": "N/A",
}
# The NVIDIA AMI (AL2023) as node-side commands report it.
# /etc/os-release of the AL2023 AMI release the nodes report (`osImage`): what the operator
# reads through its `/host-etc/os-release` mount.
AMI_OS_IMAGE = "Amazon Linux 2023.9.20260714"
AMI_OS_RELEASE = f"""NAME="Amazon Linux"
VERSION="2023"
ID="amzn"
ID_LIKE="fedora"
VERSION_ID="2023"
PLATFORM_ID="platform:al2023"
PRETTY_NAME="{AMI_OS_IMAGE}"
ANSI_COLOR="0;33"
CPE_NAME="cpe:2.3:o:amazon:amazon_linux:2023"
HOME_URL="https://aws.amazon.com/linux/amazon-linux-2023/"
DOCUMENTATION_URL="https://docs.aws.amazon.com/linux/"
SUPPORT_URL="https://aws.amazon.com/premiumsupport/"
BUG_REPORT_URL="https://github.com/amazonlinux/amazon-linux-2023"
VENDOR_NAME="AWS"
VENDOR_URL="https://aws.amazon.com/"
SUPPORT_END="2029-06-30"
"""
AMI_GLIBC = "2.34"
AMI_GLIBC_YEAR = "2021"
TOOLKIT_VERSION = "1.19.1"
TOOLKIT_COMMIT = "09ceee5dde66ba9ce25c7cc69b1ebd5e6e3266fa"


@dataclass(frozen=True)
class PciDevice:
    """One PCI function as sysfs lists it under /sys/bus/pci/devices."""

    address: str
    vendor: str
    device: str
    pci_class: str
    subsystem_vendor: str
    subsystem_device: str

    def attributes(self) -> dict[str, str]:
        return {
            "vendor": f"0x{self.vendor}",
            "device": f"0x{self.device}",
            "class": f"0x{self.pci_class}",
            "subsystem_vendor": f"0x{self.subsystem_vendor}",
            "subsystem_device": f"0x{self.subsystem_device}",
        }


# A Nitro instance's devices as `lspci -nn` lists them on a g5.xlarge: the emulated chipset,
# Amazon's VGA controller, NVMe and ENA, and on g5 the A10G (a 3D controller, class 0302) at the
# bus id nvidia-smi shows. NFD's default labels come from classes 03, 0b40 and 12, so every
# node gets `pci-1d0f.present` and a g5 `pci-10de.present` too.
NITRO_DEVICES = (
    PciDevice("0000:00:00.0", "8086", "1237", "060000", "0000", "0000"),
    PciDevice("0000:00:01.0", "8086", "7000", "060100", "0000", "0000"),
    PciDevice("0000:00:01.3", "8086", "7113", "000000", "0000", "0000"),
    PciDevice("0000:00:03.0", "1d0f", "1111", "030000", "0000", "0000"),
    PciDevice("0000:00:04.0", "1d0f", "8061", "010802", "1d0f", "8061"),
    PciDevice("0000:00:05.0", "1d0f", "ec20", "020000", "1d0f", "ec20"),
)
A10G_DEVICE = PciDevice("0000:00:1e.0", "10de", "2237", "030200", "10de", "152f")


def pci_devices(instance_type: str) -> tuple[PciDevice, ...]:
    """The PCI functions of an instance type's machine."""
    return NITRO_DEVICES + (A10G_DEVICE,) * shape(instance_type).gpus


def shape(instance_type: str) -> InstanceShape:
    """The shape of a supported instance type; ValueError names the supported ones."""
    try:
        return INSTANCE_SHAPES[instance_type]
    except KeyError:
        supported = ", ".join(sorted(INSTANCE_SHAPES))
        raise ValueError(
            f"the rehearsal world has no instance type {instance_type!r}; use one of {supported}"
        ) from None


def gpus_on(node: dict) -> int:
    """GPUs built into the node's machine (whatever the device plugin advertises)."""
    labels = node["metadata"].get("labels") or {}
    machine = INSTANCE_SHAPES.get(labels.get(INSTANCE_TYPE_LABEL, ""))
    return machine.gpus if machine else int(labels.get(NVIDIA_PCI_LABEL) == "true")


def gpu_uuid(node_name: str) -> str:
    """A GPU UUID that stays the same for a node, formatted as nvidia-smi prints it."""
    return "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_DNS, node_name))


def node_name_for_ip(private_ip: str, region: str) -> str:
    """EC2 private DNS name, which EKS uses as the node name."""
    return f"ip-{private_ip.replace('.', '-')}.{region}.compute.internal"
