"""The NVIDIA device plugin's registration with kubelet, as seen in Node status.

A GPU node (NFD's `pci-10de.present` label) advertises `nvidia.com/gpu` "1" in capacity
and allocatable once a Ready device-plugin pod runs on it (after the registration delay).
When the plugin goes, allocatable drops to "0" at once and capacity follows after
kubelet's endpointStopGracePeriod (`capacity_grace`); the key itself never disappears.
That lag is kubelet's, kept on purpose (labs.kube.gpu.CAPACITY_GRACE cites the source).
A node where no plugin ever registered has no key, like the system nodes.

A GPU that fell off the bus (`labs.sim.node.gpu_faults`) is played as k8s-device-plugin v0.17.4
(the GPU Operator v25.3.4 chart's `devicePlugin.version`) meets it: the running plugin's health
check logs the Xid and marks the device unhealthy, so allocatable drops to "0" while capacity
stays (its pod stays Ready: nothing in it failed). A plugin started after the loss (its pod
restarted) cannot get a handle for the device, exits 1 and is restarted with kubelet's back-off
(CrashLoopBackOff): it has no device to serve, so restarting it gives nothing back.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

from labs.kube.gpu import DEVICE_PLUGIN_DAEMONSET, GPU_RESOURCE, NVIDIA_PCI_LABEL
from labs.kube.informers import InformedKubeApi
from labs.kube.resources import NODES, PODS, NotFound
from labs.sim.controllers.base import Controller
from labs.sim.controllers.placement import pod_ready
from labs.sim.node.container_logs import ContainerLogs
from labs.sim.node.gpu_faults import lost_xid
from labs.sim.node.hardware import gpu_uuid
from labs.sim.timings import Timings

# k8s-device-plugin v0.17.4: the health check on an Xid (internal/rm/health.go:186), then
# ListAndWatch sending the device unhealthy (internal/plugin/server.go:276).
XID_LINES = (
    ("health.go:186", "XidCriticalError: Xid={xid} on Device={uuid}; marking device as unhealthy."),
    ("server.go:276", "'nvidia.com/gpu' device marked unhealthy: {uuid}"),
)
# A plugin started with the GPU lost: go-nvlib v0.7.4's VisitDevices cannot get the device's
# handle (vendor/github.com/NVIDIA/go-nvlib/pkg/nvlib/device/device.go:420-422; NVML's
# nvmlErrorString for NVML_ERROR_GPU_IS_LOST is "GPU is lost"), wrapped on its way up by
# internal/rm/device_map.go:76 and :63, internal/rm/nvml_manager.go:52,
# internal/plugin/factory.go:70, cmd/nvidia-device-plugin/plugin-manager.go:72, main.go:359 and
# :263, and logged by main.go:173 before it exits 1 (FAIL_ON_INIT_ERROR, the operator's default).
START_FAILURE = (
    "main.go:173",
    "error starting plugins: error getting plugins: unable to create plugins: failed to "
    "construct resource managers: error building device map: error building device map from "
    "config.resources: error building GPU device map: error getting device handle for index "
    "'0': GPU is lost",
)


class DevicePlugin(Controller):
    watched = (PODS, NODES)

    def __init__(self, store: InformedKubeApi, timings: Timings, logs: ContainerLogs) -> None:
        super().__init__(store, timings)
        self._logs = logs
        self._ready_since: dict[str, float] = {}  # node -> when its plugin pod was seen Ready
        self._gone_since: dict[str, float] = {}  # node -> when its registered plugin went away
        self._registered: set[str] = set()  # plugin pods that registered a healthy GPU
        self._told: set[str] = set()  # plugin pods that logged their GPU's Xid
        self._crashing: dict[str, tuple[float, int]] = {}  # pod uid -> (next start, restarts)

    def reconcile(self) -> float | None:
        now = time.monotonic()
        plugin_pods = self.store.list(PODS, label_selector=f"app={DEVICE_PLUGIN_DAEMONSET}")[0]
        gpu_nodes = self.store.list(NODES, label_selector=f"{NVIDIA_PCI_LABEL}=true")[0]
        waits = self._lost_gpus(plugin_pods, gpu_nodes, now)
        serving = {p["spec"].get("nodeName") for p in plugin_pods if pod_ready(p)}
        for node in gpu_nodes:
            name = node["metadata"]["name"]
            capacity = (node.get("status") or {}).get("capacity") or {}
            if name in serving and lost_xid(node) is not None:
                self._advertise(name, capacity.get(GPU_RESOURCE, "1"), "0")  # unhealthy
                continue
            if name in serving:
                self._gone_since.pop(name, None)
                since = self._ready_since.setdefault(name, now)
                registered_at = since + self.timings.device_plugin_register
                if now >= registered_at:
                    self._advertise(name, "1", "1")
                    self._registered |= {
                        p["metadata"]["uid"]
                        for p in plugin_pods
                        if p["spec"].get("nodeName") == name and pod_ready(p)
                    }
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

    def _lost_gpus(self, plugin_pods: list[dict], gpu_nodes: list[dict], now: float) -> list[float]:
        """The plugin pods on nodes whose GPU fell off the bus: one that registered the GPU
        logs the Xid once; one started since crashes and is restarted after the back-off.
        Returns the waits until the next restarts."""
        from labs.sim.controllers.kubelet import crash_backoff  # it imports this module

        lost = {n["metadata"]["name"]: xid for n in gpu_nodes if (xid := lost_xid(n)) is not None}
        live = {p["metadata"]["uid"] for p in plugin_pods}
        self._registered &= live
        self._told &= live
        self._crashing = {uid: plan for uid, plan in self._crashing.items() if uid in live}
        waits = []
        for pod in plugin_pods:
            uid, node = pod["metadata"]["uid"], pod["spec"].get("nodeName")
            if node not in lost or not _started(pod):
                continue
            if uid in self._registered:
                if uid not in self._told:
                    self._told.add(uid)
                    uuid = gpu_uuid(node)
                    self._log(pod, "I", [(at, line.format(xid=lost[node], uuid=uuid))
                                         for at, line in XID_LINES])  # fmt: skip
                continue
            start_at, restarts = self._crashing.get(uid, (now, -1))
            if now < start_at:
                waits.append(start_at - now)
                continue
            self._log(pod, "E", [START_FAILURE])
            self._crash(pod, restarts + 1)
            backoff = crash_backoff(restarts + 1) / self.timings.speed
            self._crashing[uid] = (now + backoff, restarts + 1)
            waits.append(backoff)
        return waits

    def _log(self, pod: dict, severity: str, lines: list[tuple[str, str]]) -> None:
        """klog's lines (`I0723 04:12:09.118123       1 health.go:186] ...`) in the plugin's log."""
        stamp = datetime.now(UTC).strftime("%m%d %H:%M:%S.%f")
        text = "".join(f"{severity}{stamp}       1 {at}] {line}\n" for at, line in lines)
        self._logs.append(pod, text, stream="stderr")

    def _crash(self, pod: dict, restarts: int) -> None:
        """The plugin's process exited 1: CrashLoopBackOff, `restarts` runs before this one."""
        from labs.sim.controllers.kubelet import container_crashed  # it imports this module

        def apply(current: dict) -> None:
            container_crashed(1)(current)
            for status in current["status"].get("containerStatuses") or []:
                status["restartCount"] = restarts

        try:
            self.store.update(PODS, pod["metadata"]["name"], apply, pod["metadata"]["namespace"])
        except NotFound:
            pass

    def _advertise(self, node: str, capacity: str, allocatable: str) -> None:
        def apply(current: dict) -> None:
            status = current.setdefault("status", {})
            status.setdefault("capacity", {})[GPU_RESOURCE] = capacity
            status.setdefault("allocatable", {})[GPU_RESOURCE] = allocatable

        try:
            self.store.update(NODES, node, apply)
        except NotFound:
            pass


def _started(pod: dict) -> bool:
    """Its containers run, or wait to be started again after a crash."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return bool(statuses) and not any(
        (s.get("state") or {}).get("waiting", {}).get("reason") == "ContainerCreating"
        for s in statuses
    )
