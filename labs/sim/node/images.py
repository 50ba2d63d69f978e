"""The images the rehearsal's registries serve: what the lab's pods and the write-ups use.

The nodes' container runtime pulls only these; any other name fails as containerd fails for it
(a repository nobody serves: "pull access denied", a tag its repository lacks: "not found"), so
a mistyped image goes ErrImagePull and ImagePullBackOff as on EKS. Sizes are about the images'
compressed linux/amd64 sizes (they set how long a pull takes); an image ID is the rehearsal's
own (a digest of its name), not the registry's, which nothing here can ask.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

MB = 1_000_000
# A pull's pace on a g5.xlarge from ECR or a public registry in the same region.
PULL_BYTES_PER_SECOND = 60 * MB


@dataclass(frozen=True)
class Image:
    ref: str
    size: int
    # Already on the node when it boots (the AMI's), so never pulled.
    present: bool = False
    # The image's USER, a uid (None: root), which the kubelet checks `runAsNonRoot` against.
    uid: int | None = None

    @property
    def id(self) -> str:
        return "sha256:" + hashlib.sha256(self.ref.encode()).hexdigest()


# EKS add-ons' images, from the region's ECR (the cluster's add-on versions).
ADDON_REGISTRY = "602401143452.dkr.ecr.ap-northeast-2.amazonaws.com/eks"
VPC_CNI_IMAGE = f"{ADDON_REGISTRY}/amazon-k8s-cni:v1.20.4-eksbuild.1"
KUBE_PROXY_IMAGE = f"{ADDON_REGISTRY}/kube-proxy:v1.35.0-eksbuild.2"
COREDNS_IMAGE = f"{ADDON_REGISTRY}/coredns:v1.12.4-eksbuild.1"


def metrics_server_image(version: str) -> str:
    """The metrics-server add-on's image for the release the rehearsal builds."""
    return f"{ADDON_REGISTRY}/metrics-server:{version}-eksbuild.1"


CATALOGUE = (
    Image(VPC_CNI_IMAGE, 45 * MB),
    Image(KUBE_PROXY_IMAGE, 35 * MB),
    Image(COREDNS_IMAGE, 25 * MB),
    Image("public.ecr.aws/docker/library/busybox:1.37", 2 * MB),
    # what `kubectl debug node/...` runs in the write-ups (labs.kube.on_node.DEBUG_IMAGE)
    Image("public.ecr.aws/amazonlinux/amazonlinux:2023", 52 * MB),
    Image("docker.io/library/busybox:1.36", 2 * MB),
    Image("docker.io/library/busybox:1.37", 2 * MB),
    Image("docker.io/library/ubuntu:22.04", 30 * MB),
    # the lab's TCP check (labs/kube/manifests/tcp-check.yaml)
    Image("docker.io/library/python:3.12.8-slim", 45 * MB),
    Image("nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04", 88 * MB),
    Image("docker.io/nvidia/cuda:11.8-runtime-ubuntu20.04", 1_100 * MB),
    Image("docker.io/nvidia/cuda:11.8-devel-ubuntu20.04", 3_600 * MB),
    Image("docker.io/pytorch/pytorch:2.11.0-cuda13.0-cudnn9-runtime", 3_300 * MB),
    Image("docker.io/pytorch/pytorch:1.12.1-cuda11.3-cudnn8-devel", 6_100 * MB),
    Image("docker.io/tensorflow/tensorflow:2.9.1-gpu", 2_600 * MB),
    # the GPU Operator v25.3.4 chart: the operator, and the operands its values.yaml names
    # for what the lab enables (the device plugin, also GFD's image; the validator; DCGM
    # exporter; NFD; the operator's init container's CUDA image)
    Image("nvcr.io/nvidia/gpu-operator:v25.3.4", 80 * MB),
    Image("nvcr.io/nvidia/k8s-device-plugin:v0.17.4", 130 * MB),
    Image("nvcr.io/nvidia/cloud-native/gpu-operator-validator:v25.3.4", 180 * MB),
    Image("nvcr.io/nvidia/k8s/dcgm-exporter:4.3.1-4.4.0-ubuntu22.04", 450 * MB),
    Image("registry.k8s.io/nfd/node-feature-discovery:v0.17.3", 60 * MB, uid=65534),  # its USER
    Image("nvcr.io/nvidia/cuda:13.0.1-base-ubi9", 90 * MB),
    # the operator's container toolkit: the chart's release, and the AL2 write-up's older pin
    Image("nvcr.io/nvidia/k8s/container-toolkit:v1.17.8-ubuntu20.04", 140 * MB),
    Image("nvcr.io/nvidia/k8s/container-toolkit:v1.14.6-ubi8", 150 * MB),
)


def repository(image: str) -> str:
    """An image's repository name without registry, path or tag: `k8s-device-plugin`."""
    return image.rsplit("/", 1)[-1].split("@", 1)[0].split(":", 1)[0]


def write_catalogue(path: Path, extra: tuple[Image, ...] = ()) -> Path:
    """The catalogue, plus `extra` images, as the runtime reads it (`--images`)."""
    entries = [
        {**asdict(image), "id": image.id, "pull_seconds": image.size / PULL_BYTES_PER_SECOND}
        for image in CATALOGUE + extra
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(entries, indent=1))
    return path
