"""Debugging steps and traps that several GPU faults share: the node-internals end of the path.

Whatever took the GPUs away, the last question is the same: is the driver alive, or
did only the kubelet advertising stop? These steps need a shell on the node, which
the tool does not open, so they are marked "real cluster only" and say what a real
node shows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from labs.checks import Finding, Trap
from labs.gpu_facts import debug_node_command

if TYPE_CHECKING:
    from labs.cluster import ClusterView

NVML_TRAP = Trap(
    "NVML error in a debug pod",
    "chroot nvidia-smi tells whether the driver is alive",
    "`Failed to initialize NVML: Unknown Error` on a healthy driver",
    "the debug pod has no /dev/nvidia*: ask a pod with the devices mounted (dcgm-exporter)",
)


def node_internals(view: ClusterView, operator_namespace: str, socket_seen: str) -> list[Finding]:
    """Socket directory, the NVML trap, and the driver checked from a device-mounted pod.

    `socket_seen` is what the fault leaves in /var/lib/kubelet/device-plugins/.
    """
    debug = debug_node_command(view)
    return [
        Finding(
            "5. Node: device-plugin socket",
            f"{debug} chroot /host ls -la /var/lib/kubelet/device-plugins/",
            socket_seen,
            "no nvidia-gpu.sock means the plugin is not registered with kubelet: nothing "
            "advertises GPUs",
            real_cluster_only=True,
        ),
        Finding(
            "5b. Node: is the driver dead?",
            f"{debug} chroot /host nvidia-smi -L",
            "Failed to initialize NVML: Unknown Error",
            "not a dead driver: the debug pod has no /dev/nvidia* devices",
            real_cluster_only=True,
            trap=NVML_TRAP.name,
        ),
        Finding(
            "5c. Node: driver from a device-mounted pod",
            f"kubectl exec -n {operator_namespace} <nvidia-dcgm-exporter pod> -- nvidia-smi -L",
            "GPU 0: NVIDIA A10G (UUID: GPU-...)",
            "driver and toolkit are alive; only the kubelet advertising is gone",
            real_cluster_only=True,
        ),
    ]
