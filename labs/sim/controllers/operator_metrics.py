"""The GPU Operator's own metrics endpoint (`:8080/metrics` of its pod, behind the Service
`gpu-operator`), served while the operator pod runs, with the operator's metric names.

What it reports is what the operator wrote: `gpu_operator_reconciliation_status` follows the
ClusterPolicy's `status.state` (1 ready, 0 operands not ready, -1 no ClusterPolicy), and
`gpu_operator_gpu_nodes_total` counts the nodes labelled `nvidia.com/gpu.present=true`.
An operator scaled to 0 serves nothing, so its series go stale, as on a cluster.
"""

from __future__ import annotations

from labs.sim.controllers.gpu_operator import OPERATOR_DEPLOYMENT, OPERATOR_METRICS
from labs.sim.controllers.pod_endpoint import Page, PodMetrics, PodNetwork
from labs.sim.controlplane.informers import InformedKubeApi
from labs.sim.controlplane.resources import CLUSTER_POLICY, NODES
from labs.sim.timings import Timings

# The operator's values (controllers/operator_metrics.go, v26.3).
RECONCILED, NOT_READY, NO_CLUSTER_POLICY = 1, 0, -1
_HELP = {
    "gpu_operator_gpu_nodes_total": "Number of nodes with GPUs",
    "gpu_operator_reconciliation_status": (
        "1 if the reconciliation is currently successful, 0 if the operands are not ready, "
        "-1 if the cluster policy is unavailable, -2 if an error occurred within the operator."
    ),
}


def operator_page(store: InformedKubeApi) -> str:
    """The endpoint's answer now, from the ClusterPolicy and the nodes the operator sees."""
    policies = store.list(CLUSTER_POLICY)[0]
    if not policies:
        status = NO_CLUSTER_POLICY
    else:
        ready = (policies[0].get("status") or {}).get("state") == "ready"
        status = RECONCILED if ready else NOT_READY
    gpu_nodes = len(store.list(NODES, label_selector="nvidia.com/gpu.present=true")[0])
    values = {
        "gpu_operator_gpu_nodes_total": gpu_nodes,
        "gpu_operator_reconciliation_status": status,
    }
    return "".join(
        f"# HELP {name} {_HELP[name]}\n# TYPE {name} gauge\n{name} {value}\n"
        for name, value in values.items()
    )


def operator_metrics(store: InformedKubeApi, timings: Timings, network: PodNetwork) -> PodMetrics:
    """The running operator pod serves `operator_page` on its metrics port."""

    def page_for(_pod: dict) -> Page:
        return lambda: operator_page(store)

    return PodMetrics(
        store, timings, network, f"app={OPERATOR_DEPLOYMENT}", OPERATOR_METRICS.number,
        page_for, "OperatorMetrics",
    )  # fmt: skip
