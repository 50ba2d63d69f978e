"""GPU feature discovery's node labels: what its pod reads off the GPU through NVML, which
cannot run here.

Once a GFD pod (the operator's `gpu-feature-discovery` DaemonSet) is Ready on a node, the
node carries the labels GFD derives from that node's A10G; they stay when GFD goes, as the
labels of a real GFD do until something removes them. The operator reads one of them
(`nvidia.com/mig.capable`) to decide whether the node gets a MIG manager.
"""

from __future__ import annotations

from labs.kube import gpu
from labs.kube.resources import NODES, PODS, NotFound
from labs.sim.controllers.base import Controller
from labs.sim.controllers.placement import pod_ready
from labs.sim.node.hardware import GPU_DRIVER_VERSION, GPU_MEMORY_MIB, GPU_PRODUCT_LABEL

GFD_LABELS = {
    "nvidia.com/gpu.product": GPU_PRODUCT_LABEL,
    "nvidia.com/gpu.count": "1",
    "nvidia.com/gpu.memory": str(GPU_MEMORY_MIB),
    "nvidia.com/gpu.family": "ampere",
    "nvidia.com/mig.capable": "false",
    "nvidia.com/cuda.driver.major": GPU_DRIVER_VERSION.split(".")[0],
}


class FeatureDiscovery(Controller):
    watched = (PODS,)

    def reconcile(self) -> float | None:
        pods = self.store.list(PODS, label_selector=f"app={gpu.GFD_DAEMONSET}")[0]
        for node in {p["spec"].get("nodeName") for p in pods if pod_ready(p)} - {None}:
            self._label(str(node))
        return None

    def _label(self, node: str) -> None:
        def apply(current: dict) -> None:
            current["metadata"].setdefault("labels", {}).update(GFD_LABELS)

        try:  # read from the informer; written only when a label differs
            self.store.update(NODES, node, apply)
        except NotFound:
            pass
