"""dcgm-exporter's endpoint: every running exporter pod answers `/metrics` on its port 9400.

For each running pod of the dcgm-exporter DaemonSet the world serves the exporter's page
from a small HTTP server on loopback (`pod_endpoint`), so `kubectl port-forward` to the pod
(or its Service) and Prometheus through the API server's pod proxy reach it, as on EKS.
The page is Prometheus text with dcgm-exporter's field names, help lines and labels; the
figures are the world's GPU model (the idle A10G `nvidia-smi` shows on that node), read at each
scrape: a GPU that fell off the bus (`labs.sim.node.gpu_faults`) reports its Xid in
`DCGM_FI_DEV_XID_ERRORS`, the last Xid the GPU raised.
"""

from __future__ import annotations

from functools import partial

from labs.kube import gpu
from labs.kube.api import KubeApi
from labs.kube.informers import InformedKubeApi
from labs.kube.resources import NODES, NotFound
from labs.sim.controllers.pod_endpoint import Page, PodMetrics, PodNetwork
from labs.sim.node.gpu_faults import lost_xid
from labs.sim.node.hardware import (
    GPU_DRIVER_VERSION,
    GPU_MEMORY_MIB,
    GPU_NAME,
    GPU_TABLE_CELLS,
    gpu_uuid,
)
from labs.sim.timings import Timings

# The port its pods serve (the operator's Service `nvidia-dcgm-exporter`, port `gpu-metrics`).
EXPORTER_PORT = 9400
# (field, help as dcgm-exporter's default counters word it, value on the world's idle A10G)
FIELDS = (
    ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", GPU_TABLE_CELLS["temperature"][:-1]),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", f"{float(GPU_TABLE_CELLS['power'][:-1]):f}"),
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", GPU_TABLE_CELLS["utilization"][:-1]),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).", "0"),
    ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", str(GPU_MEMORY_MIB)),
    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", "0"),
    ("DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.", "0"),
)


def metrics_page(node_name: str, xid: int | None = None) -> str:
    """The exporter's `/metrics` on `node_name`: one GPU, labelled as dcgm-exporter does; `xid`
    is the last Xid the GPU raised (None: none)."""
    labels = (
        f'gpu="0",UUID="{gpu_uuid(node_name)}",pci_bus_id="{GPU_TABLE_CELLS["bus_id"]}",'
        f'device="nvidia0",modelName="{GPU_NAME}",Hostname="{node_name}",'
        f'DCGM_FI_DRIVER_VERSION="{GPU_DRIVER_VERSION}"'
    )
    values = {name: value for name, _help, value in FIELDS}
    values["DCGM_FI_DEV_XID_ERRORS"] = str(xid or 0)
    return "".join(
        f"# HELP {name} {help_text}\n# TYPE {name} gauge\n{name}{{{labels}}} {values[name]}\n"
        for name, help_text, _value in FIELDS
    )


def node_page(store: KubeApi, node_name: str) -> str:
    """The page of the exporter on `node_name` now: its GPU's last Xid read off the node."""
    try:
        xid = lost_xid(store.get(NODES, node_name))
    except NotFound:
        xid = None
    return metrics_page(node_name, xid)


def dcgm_exporter(store: InformedKubeApi, timings: Timings, network: PodNetwork) -> PodMetrics:
    """Each running exporter pod serves its node's page on port 9400."""

    def page_for(pod: dict) -> Page:
        return partial(node_page, store, pod["spec"]["nodeName"])

    return PodMetrics(
        store, timings, network, f"app={gpu.DCGM_EXPORTER_DAEMONSET}", EXPORTER_PORT,
        page_for, "DcgmExporter",
    )  # fmt: skip
