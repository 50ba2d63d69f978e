"""The NVIDIA device plugin's registration with kubelet, as seen in Node status.

A GPU node (NFD's `pci-10de.present` label) advertises `nvidia.com/gpu` "1" in capacity
and allocatable once a Ready device-plugin pod runs on it (after the registration delay).
When the plugin goes, allocatable drops to "0" at once and capacity follows after
kubelet's endpointStopGracePeriod (`capacity_grace`); the key itself never disappears.
That lag is kubelet's, kept on purpose (labs.kube.gpu.CAPACITY_GRACE cites the source).
A node where no plugin ever registered has no key, like the system nodes.
"""

from __future__ import annotations

import time

from labs.sim.controllers.base import Controller
from labs.sim.controllers.placement import pod_ready
from labs.sim.controlplane.informers import InformedKubeApi
from labs.sim.controlplane.resources import NODES, PODS, NotFound
from labs.sim.node.hardware import GPU_RESOURCE, NVIDIA_PCI_LABEL
from labs.sim.timings import Timings

DEVICE_PLUGIN_APP = "nvidia-device-plugin-daemonset"


class DevicePlugin(Controller):
    watched = (PODS, NODES)

    def __init__(self, store: InformedKubeApi, timings: Timings) -> None:
        super().__init__(store, timings)
        self._ready_since: dict[str, float] = {}  # node -> when its plugin pod was seen Ready
        self._gone_since: dict[str, float] = {}  # node -> when its registered plugin went away

    def reconcile(self) -> float | None:
        now = time.monotonic()
        plugin_pods = self.store.list(PODS, label_selector=f"app={DEVICE_PLUGIN_APP}")[0]
        serving = {p["spec"].get("nodeName") for p in plugin_pods if pod_ready(p)}
        gpu_nodes = self.store.list(NODES, label_selector=f"{NVIDIA_PCI_LABEL}=true")[0]
        waits = []
        for node in gpu_nodes:
            name = node["metadata"]["name"]
            capacity = (node.get("status") or {}).get("capacity") or {}
            if name in serving:
                self._gone_since.pop(name, None)
                since = self._ready_since.setdefault(name, now)
                registered_at = since + self.timings.device_plugin_register
                if now >= registered_at:
                    self._advertise(name, "1", "1")
                else:
                    waits.append(registered_at - now)
                continue
            self._ready_since.pop(name, None)
            if GPU_RESOURCE not in capacity:
                continue
            gone = self._gone_since.setdefault(name, now)
            expires = gone + self.timings.capacity_grace
            if now >= expires:
                self._advertise(name, "0", "0")
            else:
                self._advertise(name, capacity[GPU_RESOURCE], "0")
                waits.append(expires - now)
        return min(waits, default=None)

    def _advertise(self, node: str, capacity: str, allocatable: str) -> None:
        def apply(current: dict) -> None:
            status = current.setdefault("status", {})
            status.setdefault("capacity", {})[GPU_RESOURCE] = capacity
            status.setdefault("allocatable", {})[GPU_RESOURCE] = allocatable

        try:
            self.store.update(NODES, node, apply)
        except NotFound:
            pass
