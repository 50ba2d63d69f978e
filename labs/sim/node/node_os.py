"""A GPU node on the Amazon Linux 2 GPU AMI (glibc 2.26), switched on request in the rehearsal.

EKS 1.35 has no AL2 AMI (they ended on 2025-11-26), so no node group of the lab can boot one; a
rehearsal lab asks its world to switch one running GPU node in place: `PUT /sim/node-os
{"node": NAME, "os": "al2"}` beside the world's AWS endpoint, with the world's token (`"al2023"`
switches it back). The world marks the node with OS_ANNOTATION (not a field of a real Node: the
world writes it for node-side programs in other processes, as it writes the default runtime) and
reports the AL2 node's `osImage`, kernel and containerd in `status.nodeInfo`; the kubelet stays
the lab's. On that node:
- `ldd --version` prints glibc 2.26 (`labs.sim.node.programs`);
- the validator's driver-validation finds the AL2 AMI's `/dev/nvidia-caps` links in place and
  logs a warning for each (benign: it goes on and exits 0; `labs.sim.node.validator`);
- once the operator's container toolkit runs there at a release built against glibc >= 2.27
  (`labs.kube.gpu.toolkit_needs_glibc_227`), every container the NVIDIA runtime's prestart hook
  runs for fails to start (`start_error`), as the kubelet then records it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from labs.kube import gpu
from labs.kube.api import KubeApi
from labs.kube.gpu import NVIDIA_PCI_LABEL
from labs.kube.resources import NODES, PODS, BadRequest
from labs.sim import pace
from labs.sim.node.hardware import AMI_GLIBC, AMI_GLIBC_YEAR, AMI_OS_IMAGE, AMI_OS_RELEASE
from labs.sim.node.nvidia_runtime import injected_gpus

NODE_OS_PATH = "/sim/node-os"
OS_ANNOTATION = "sim.eks-gpu-lab/node-os"
AL2, AL2023 = "al2", "al2023"
# `kubectl get nodes -o wide` of an EKS 1.32 AL2 node (v1.32.1-eks-5d632ec), as recorded:
# OS-IMAGE, KERNEL-VERSION, CONTAINER-RUNTIME.
AL2_OS_IMAGE = "Amazon Linux 2"
AL2_KERNEL = "5.10.235-227.919.amzn2.x86_64"
AL2_CONTAINERD = "containerd://1.7.27"
# /etc/os-release of Amazon Linux 2, where the kubelet reads the node's osImage.
AL2_OS_RELEASE = f"""NAME="Amazon Linux"
VERSION="2"
ID="amzn"
ID_LIKE="centos rhel fedora"
VERSION_ID="2"
PRETTY_NAME="{AL2_OS_IMAGE}"
ANSI_COLOR="0;33"
CPE_NAME="cpe:2.3:o:amazon:amazon_linux:2"
HOME_URL="https://amazonlinux.com/"
"""
# `ldd --version` on amazon-eks-gpu-node-1.32-v20250715 (the AL2 write-up, via a node-shell pod).
AL2_GLIBC, AL2_GLIBC_YEAR = "2.26", "2017"
# What the AL2023 nodes report (labs.sim.controllers.node_lifecycle.build_node), to switch back.
AL2023_KERNEL = "6.12.40-63.114.amzn2023.x86_64"
AL2023_CONTAINERD = "containerd://2.2.4"
# The start failure recorded on a real EKS AL2 node running the operator's toolkit v1.17
# (awslabs/data-on-eks PR #474, Events of nvidia-operator-validator; also NVIDIA/gpu-operator
# #755): containerd's CRI prefix (containerd v2.2.4 internal/cri/server/container_start.go:219,
# "failed to create containerd task: %w"), the shim's and runc's, and the hook's stderr.
TOOLKIT_HOOK_FAILURE = (
    "failed to create containerd task: failed to create shim task: OCI runtime create failed: "
    "runc create failed: unable to start container process: error during container init: error "
    "running hook #0: error running hook: exit status 1, stdout: , stderr: "
    "/usr/local/nvidia/toolkit/nvidia-container-cli.real: /lib64/libc.so.6: version "
    "`GLIBC_2.27' not found (required by /usr/local/nvidia/toolkit/libnvidia-container.so.1): "
    "unknown"
)
# containerd v2.2.4 internal/cri/server/helpers.go:47,51 (errorStartReason, errorStartExitCode):
# what a container that failed to start reports as terminated.
START_ERROR_REASON, START_ERROR_EXIT = "StartError", 128
# The AL2 write-up's driver-validation log: the capability devices the AL2 GPU AMI already
# links under /dev/char (the validator's CreateLinks logs each and goes on).
AL2_CAP_MINORS = (112, 136, 137)
CAPS_MAJOR = 243


def node_os(node: Mapping[str, Any]) -> str:
    """The node's AMI family: `al2` once switched, else `al2023` (every node the lab boots)."""
    return str(((node.get("metadata") or {}).get("annotations") or {}).get(OS_ANNOTATION) or AL2023)


def glibc(node: Mapping[str, Any]) -> tuple[str, str]:
    """(version, copyright year) of the node's C library, as `ldd --version` prints them."""
    return (AL2_GLIBC, AL2_GLIBC_YEAR) if node_os(node) == AL2 else (AMI_GLIBC, AMI_GLIBC_YEAR)


def machine_files(family: str) -> tuple[str, str]:
    """(/etc/os-release, containerd's release) of an AMI family, as a real node's kubelet and
    container runtime read and report them."""
    if family == AL2:
        return AL2_OS_RELEASE, AL2_CONTAINERD.removeprefix("containerd://")
    return AMI_OS_RELEASE, AL2023_CONTAINERD.removeprefix("containerd://")


def control(store: KubeApi, on_switch: Callable[[str, str], None]) -> pace.Control:
    """The world's handler for NODE_OS_PATH: PUT switches a GPU node's AMI family (idempotent),
    GET lists the nodes on AL2. `on_switch(node, family)` switches what runs the node (a real
    kubelet's machine files) after its Node is marked."""

    def switch_node(body: Any) -> None:
        node, family = _request(body)
        store.update(NODES, node, lambda current: _switch(current, family))
        on_switch(node, family)

    def on_al2() -> dict:
        nodes = store.list(NODES)[0]
        return {AL2: sorted(n["metadata"]["name"] for n in nodes if node_os(n) == AL2)}

    return pace.put_or_get(NODE_OS_PATH, switch_node, on_al2)


def _request(body: Any) -> tuple[str, str]:
    node = body.get("node") if isinstance(body, dict) else None
    family = body.get("os") if isinstance(body, dict) else None
    if not isinstance(node, str) or not node or family not in (AL2, AL2023):
        wanted = '{"node": NAME, "os": "al2"|"al2023"}'
        raise BadRequest(f"{NODE_OS_PATH} wants {wanted}, got {body!r}")
    return node, str(family)


def _switch(node: dict, family: str) -> None:
    labels = node["metadata"].get("labels") or {}
    if labels.get(NVIDIA_PCI_LABEL) != "true":
        raise BadRequest(f"node {node['metadata']['name']} is no GPU node")
    annotations = node["metadata"].setdefault("annotations", {})
    info = node.setdefault("status", {}).setdefault("nodeInfo", {})
    if family == AL2:
        annotations[OS_ANNOTATION] = AL2
        info.update(osImage=AL2_OS_IMAGE, kernelVersion=AL2_KERNEL,
                    containerRuntimeVersion=AL2_CONTAINERD)  # fmt: skip
    else:
        annotations.pop(OS_ANNOTATION, None)
        info.update(osImage=AMI_OS_IMAGE, kernelVersion=AL2023_KERNEL,
                    containerRuntimeVersion=AL2023_CONTAINERD)  # fmt: skip


def switch(world: Mapping[str, Any], node: str, family: str) -> dict[str, Any]:
    """Ask the running world (its endpoints) to put `node` on AMI family `family`."""
    return pace.call(world, NODE_OS_PATH, "PUT", {"node": node, "os": family})


def installed_toolkit(store: KubeApi, node: Mapping[str, Any]) -> str | None:
    """The release of the operator's container toolkit installed on the node (its DaemonSet's
    pod running there: it installs into /usr/local/nvidia and points containerd's `nvidia`
    runtime at it, and undoes both when it stops), None while none runs."""
    name = node["metadata"]["name"]
    pods = store.list(PODS, label_selector=f"app={gpu.TOOLKIT_DAEMONSET}",
                      field_selector=f"spec.nodeName={name}")[0]  # fmt: skip
    for pod in pods:
        running = (pod.get("status") or {}).get("phase") == "Running"
        if running and not pod["metadata"].get("deletionTimestamp"):
            image = str((pod["spec"].get("containers") or [{}])[0].get("image", ""))
            return image.rsplit(":", 1)[-1] if ":" in image else None
    return None


def start_error(store: KubeApi, pod: dict, container: dict, node: dict) -> str | None:
    """Why containerd cannot start the container on this node, None when it can: on AL2 with a
    toolkit built against glibc >= 2.27 installed, the NVIDIA runtime's prestart hook fails
    for every container it injects into (NVIDIA_VISIBLE_DEVICES set and not void, or GPUs
    allocated: `labs.sim.node.nvidia_runtime`)."""
    if node_os(node) != AL2 or injected_gpus(pod, node, container) is None:
        return None
    toolkit = installed_toolkit(store, node)
    if toolkit is None or not gpu.toolkit_needs_glibc_227(toolkit):
        return None
    return TOOLKIT_HOOK_FAILURE


def existing_cap_links(node: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(link, target) of the /dev/char links to capability devices the node's AMI already made:
    on AL2 the write-up's, which the validator's driver-validation finds in place (`Could not
    create symlink ... file exists`, a warning: it goes on); none on AL2023."""
    if node_os(node) != AL2:
        return []
    return [(f"/host-dev-char/{CAPS_MAJOR}:{minor}", f"/dev/nvidia-caps/nvidia-cap{minor}")
            for minor in AL2_CAP_MINORS]  # fmt: skip
