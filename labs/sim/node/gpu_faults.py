"""A GPU that fell off the bus (Xid 79): the hardware fault the rehearsal world plays on request.

No API makes a real GPU raise an Xid, so a rehearsal lab asks its world for one: `PUT
/sim/gpu-faults {"node": NAME, "xid": 79}` beside the world's AWS endpoint, with the world's
token, as its pace is set (`labs.sim.pace`). The world marks that node's GPU lost with the
annotation LOST_ANNOTATION (not a field of a real Node: the world writes it, as it writes
`DEFAULT_RUNTIME_ANNOTATION`, for node-side programs in other processes such as `nvidia-smi`
through `kubectl exec`) and sets the condition EKS's node monitoring agent sets for it. The
mark lives on the Node, so it goes with it: the instance that replaces it boots with a good GPU.
What each component then shows is played where it lives: the device plugin's log and
allocatable (`labs.sim.controllers.device_plugin`), dcgm-exporter's `DCGM_FI_DEV_XID_ERRORS`
(`labs.sim.controllers.dcgm_exporter`), `nvidia-smi` (`labs.sim.node.programs`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from labs.kube.api import KubeApi
from labs.kube.gpu import NVIDIA_PCI_LABEL
from labs.kube.resources import NODES, BadRequest, now_rfc3339
from labs.sim import pace

GPU_FAULTS_PATH = "/sim/gpu-faults"
LOST_ANNOTATION = "sim.eks-gpu-lab/gpu-lost-xid"
# The EKS node monitoring agent's condition for a well-known XID, from DCGM's XID policy:
# aws/eks-node-monitoring-agent v1.7.0, monitors/nvidia/dcgm/dcgm_policies.go:134-141
# (79 is in WellKnownXidCodes, :98), the reason template pkg/reasons/reasons.yaml:354-355.
HARDWARE_CONDITION = "AcceleratedHardwareReady"
# What the agent (the stack's eks-node-monitoring-agent add-on) reports on a healthy GPU node:
# v1.7.0, cmd/eks-node-monitoring-agent/main.go:311-313.
HEALTHY_REASON = "NvidiaGPUIsReady"
HEALTHY_MESSAGE = "Monitoring for the Nvidia GPU system is active"


def xid_reason(xid: int) -> str:
    """The agent's condition reason for `xid` (`NvidiaXID%dError`)."""
    return f"NvidiaXID{xid}Error"


def xid_message(xid: int) -> str:
    """The agent's condition message for a well-known `xid`."""
    return f"detected XID-{xid} on the instance, review kernel logs for additional information."


def lost_xid(node: Mapping[str, Any]) -> int | None:
    """The Xid the node's GPU fell off the bus with, None while it is on the bus."""
    value = ((node.get("metadata") or {}).get("annotations") or {}).get(LOST_ANNOTATION)
    return int(value) if value and str(value).isdigit() else None


def control(store: KubeApi) -> pace.Control:
    """The world's handler for GPU_FAULTS_PATH: PUT marks a GPU node's GPU lost with an Xid
    (idempotent), GET lists the nodes whose GPU is lost."""

    def lose(body: Any) -> None:
        node, xid = _request(body)
        store.update(NODES, node, lambda current: _lose(current, xid))

    def lost() -> dict:
        marks = {n["metadata"]["name"]: lost_xid(n) for n in store.list(NODES)[0]}
        return {"lost": {name: xid for name, xid in marks.items() if xid is not None}}

    return pace.put_or_get(GPU_FAULTS_PATH, lose, lost)


def _request(body: Any) -> tuple[str, int]:
    node = body.get("node") if isinstance(body, dict) else None
    xid = body.get("xid") if isinstance(body, dict) else None
    if not isinstance(node, str) or not node or not isinstance(xid, int) or xid <= 0:
        raise BadRequest(f'{GPU_FAULTS_PATH} wants {{"node": NAME, "xid": N > 0}}, got {body!r}')
    return node, xid


def _lose(node: dict, xid: int) -> None:
    labels = node["metadata"].get("labels") or {}
    if labels.get(NVIDIA_PCI_LABEL) != "true":
        raise BadRequest(f"node {node['metadata']['name']} has no NVIDIA GPU to lose")
    node["metadata"].setdefault("annotations", {})[LOST_ANNOTATION] = str(xid)
    stamp = now_rfc3339()
    condition = {
        "type": HARDWARE_CONDITION,
        "status": "False",
        "reason": xid_reason(xid),
        "message": xid_message(xid),
        "lastHeartbeatTime": stamp,
        "lastTransitionTime": stamp,
    }
    conditions = node.setdefault("status", {}).setdefault("conditions", [])
    conditions[:] = [c for c in conditions if c.get("type") != HARDWARE_CONDITION] + [condition]


def lose_gpu(world: Mapping[str, Any], node: str, xid: int) -> dict[str, Any]:
    """Ask the running world (its endpoints) to make `node`'s GPU fall off the bus with `xid`;
    returns the nodes whose GPU is lost."""
    return pace.call(world, GPU_FAULTS_PATH, "PUT", {"node": node, "xid": xid})
