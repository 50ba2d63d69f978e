"""Debugging steps and traps that several GPU faults share: the node-internals end of the path.

Whatever took the GPUs away, the last question is the same: is the driver alive, or
did only the kubelet advertising stop? These steps need a shell on the node, which
the tool does not open, so they are marked "real cluster only" and say what a real
node shows.
"""

from __future__ import annotations

from labs.kube.gpu import gpu_nodes, name_of
from labs.kube.view import Objects
from labs.run.contract import Finding, Trap

NVML_TRAP = Trap(
    "NVML error in a debug pod",
    "chroot nvidia-smi tells whether the driver is alive",
    "`Failed to initialize NVML: Unknown Error` on a healthy driver",
    "the debug pod has no /dev/nvidia*: ask a pod with the devices mounted (dcgm-exporter)",
)


def debug_node_command(objects: Objects) -> str:
    """`kubectl debug node/...` on the first GPU node, ready for `chroot /host ...`."""
    nodes = gpu_nodes(objects)
    node = name_of(nodes[0]) if nodes else "<gpu-node>"
    return f"kubectl debug node/{node} -it --image=public.ecr.aws/amazonlinux/amazonlinux:2023 --"


def node_internals(
    objects: Objects, operator_namespace: str, socket_seen: str, step: int = 5
) -> list[Finding]:
    """Socket directory, the NVML trap, and the driver checked from a device-mounted pod.

    `socket_seen` is what the fault leaves in /var/lib/kubelet/device-plugins/; `step` is
    the number these steps take in the scenario's debugging path.
    """
    debug = debug_node_command(objects)
    return [
        Finding(
            f"{step}. Node: device-plugin socket",
            f"{debug} chroot /host ls -la /var/lib/kubelet/device-plugins/",
            socket_seen,
            "no nvidia-gpu.sock means the plugin is not registered with kubelet: nothing "
            "advertises GPUs",
            real_cluster_only=True,
        ),
        Finding(
            f"{step}b. Node: is the driver dead?",
            f"{debug} chroot /host nvidia-smi -L",
            "Failed to initialize NVML: Unknown Error",
            "not a dead driver: the debug pod has no /dev/nvidia* devices",
            real_cluster_only=True,
            trap=NVML_TRAP.name,
        ),
        Finding(
            f"{step}c. Node: driver from a device-mounted pod",
            f"kubectl exec -n {operator_namespace} <nvidia-dcgm-exporter pod> -- nvidia-smi -L",
            "GPU 0: NVIDIA A10G (UUID: GPU-...)",
            "driver and toolkit are alive; only the kubelet advertising is gone",
            real_cluster_only=True,
        ),
    ]
