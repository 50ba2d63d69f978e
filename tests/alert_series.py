"""What kube-state-metrics, the GPU Operator and dcgm-exporter report on a two-GPU-node lab, as
promtool input series: healthy, and while each scenario's fault is in.

The names and labels are theirs (KSM run with its node label allowlist naming
`nvidia.com/gpu.present`); the values follow each scenario's runbook: which node offers 0 GPUs,
which pod waits or failed.
The fault holds for the whole window, so the rules' `for:` periods have passed at its end.
"""

from __future__ import annotations

from typing import Any

GPU_NODES = ("gpu-a", "gpu-b")
SYSTEM_NODES = ("sys-a", "sys-b")
SAMPLES = 15  # one a minute after the first: 0m .. 15m
WINDOW = f"{SAMPLES}m"


def node_label(node: str) -> str:
    present = ', label_nvidia_com_gpu_present="true"' if node in GPU_NODES else ""
    return f'kube_node_labels{{node="{node}"{present}}}'


def allocatable(node: str) -> str:
    return (
        f'kube_node_status_allocatable{{node="{node}", resource="nvidia_com_gpu", unit="integer"}}'
    )


def requests(pod: str, resource: str = "nvidia_com_gpu") -> str:
    return (
        f'kube_pod_container_resource_requests{{namespace="default", pod="{pod}", '
        f'container="cuda", resource="{resource}", unit="integer"}}'
    )


def phase(pod: str, name: str) -> str:
    return f'kube_pod_status_phase{{namespace="default", pod="{pod}", phase="{name}"}}'


def unschedulable(pod: str) -> str:
    return f'kube_pod_status_unschedulable{{namespace="default", pod="{pod}"}}'


def unavailable(daemonset: str) -> str:
    return (
        'kube_daemonset_status_number_unavailable{namespace="gpu-operator", '
        f'daemonset="{daemonset}"}}'
    )


def xid(node: str) -> str:
    return f'DCGM_FI_DEV_XID_ERRORS{{gpu="0", Hostname="{node}", modelName="NVIDIA A10G"}}'


OPERATOR_AVAILABLE = (
    'kube_deployment_status_replicas_available{namespace="gpu-operator", deployment="gpu-operator"}'
)
RECONCILED = "gpu_operator_reconciliation_status"
REFUSED = (
    'kube_deployment_status_condition{namespace="default", deployment="gpu-probe", '
    'condition="ReplicaFailure", status="true"}'
)
OPERANDS = ("nvidia-device-plugin-daemonset", "gpu-feature-discovery", "nvidia-dcgm-exporter")


def healthy() -> dict[str, float]:
    """Each series and its value on a ready lab whose probe ran."""
    series = {node_label(node): 1.0 for node in (*GPU_NODES, *SYSTEM_NODES)}
    series |= {allocatable(node): 1.0 for node in GPU_NODES}
    series |= {xid(node): 0.0 for node in GPU_NODES}
    series |= {unavailable(name): 0.0 for name in OPERANDS}
    series |= {OPERATOR_AVAILABLE: 1.0, RECONCILED: 1.0}
    series |= {requests("gpu-probe"): 1.0, phase("gpu-probe", "Succeeded"): 1.0}
    return series


def waiting(pod: str, resource: str | None = "nvidia_com_gpu") -> dict[str, float | None]:
    """`pod` Pending and unschedulable, asking for one `resource` (None: for none)."""
    changes: dict[str, float | None] = {phase(pod, "Succeeded"): None, requests(pod): None}
    changes |= {phase(pod, "Pending"): 1.0, unschedulable(pod): 1.0}
    if resource:
        changes[requests(pod, resource)] = 1.0
    return changes


GPU_NODES_GONE: dict[str, float | None] = {
    key: None for node in GPU_NODES for key in (node_label(node), allocatable(node), xid(node))
}

# Each scenario's changes to the healthy series: a value, or None for a series that is gone.
FAULTS: dict[str, dict[str, float | None]] = {
    "device-plugin-off": {
        allocatable("gpu-a"): 0.0,
        allocatable("gpu-b"): 0.0,
        unavailable("nvidia-device-plugin-daemonset"): None,  # the DaemonSet is deleted
        **waiting("gpu-probe"),
    },
    "device-plugin-off-one-node": {allocatable("gpu-a"): 0.0, **waiting("gpu-probe")},
    "gpu-node-foreign-taint": {allocatable("gpu-a"): 0.0, **waiting("gpu-probe")},
    # the plugin pod (and GFD's, which runs the same config-manager-init) is Init:CrashLoopBackOff
    # on gpu-a; the operator counts the unavailable pods: notReady
    "device-plugin-config-missing": {
        allocatable("gpu-a"): 0.0,
        unavailable("nvidia-device-plugin-daemonset"): 1.0,
        unavailable("gpu-feature-discovery"): 1.0,
        RECONCILED: 0.0,
        **waiting("gpu-probe"),
    },
    # the plugin marks the lost GPU unhealthy (allocatable 0); dcgm-exporter keeps its last Xid
    "gpu-xid-79": {allocatable("gpu-a"): 0.0, xid("gpu-a"): 79.0},
    "gpus-scaled-to-zero": {**GPU_NODES_GONE, **waiting("gpu-probe")},
    "mig-on-a10g": waiting("gpu-probe", "nvidia_com_mig_1g_5gb"),
    "missing-gpu-limit": {
        requests("gpu-probe"): None,
        phase("gpu-probe", "Succeeded"): None,
        phase("gpu-probe", "Failed"): 1.0,  # exit 127 on a system node: no nvidia-smi
        phase("gpu-probe-on-gpu-node", "Succeeded"): 1.0,
    },
    "missing-toleration": waiting("gpu-node-agent", resource=None),
    "runtimeclass-missing": {
        requests("gpu-probe"): None,
        phase("gpu-probe", "Succeeded"): None,  # the probe's Deployment has no pod at all
        REFUSED: 1.0,
    },
    "nccl-sg-block": {
        key: value
        for rank in ("nccl-allreduce-0", "nccl-allreduce-1")
        for key, value in ((requests(rank), 1.0), (phase(rank, "Failed"), 1.0))
    },
    "operator-down": {OPERATOR_AVAILABLE: 0.0, RECONCILED: None},  # its metrics went with its pod
    # one pod per operand never gets a sandbox on gpu-a; the operator says notReady (0)
    "containerd-runtime-missing": {
        allocatable("gpu-a"): 0.0,
        **{unavailable(name): 1.0 for name in OPERANDS},
        RECONCILED: 0.0,
        requests("gpu-probe"): None,  # the baseline's probe is deleted before the injection
        phase("gpu-probe", "Succeeded"): None,
    },
    # a gpu-holder Running on each GPU node; the validator's workload pod asks for its GPU in an
    # init container (not in kube_pod_container_resource_requests) and is Failed, its
    # validator pods not available on either node
    "validator-gpu-busy": {
        **{requests(f"gpu-holder-{node}"): 1.0 for node in GPU_NODES},
        **{phase(f"gpu-holder-{node}", "Running"): 1.0 for node in GPU_NODES},
        unavailable("nvidia-operator-validator"): 2.0,
        RECONCILED: 0.0,
        requests("gpu-probe"): None,
        phase("gpu-probe", "Succeeded"): None,
    },
    # one GPU node on AL2: its validator pod loops on toolkit-validation's refused start, so
    # the validator DaemonSet has one pod unavailable; the device plugin there still runs
    "toolkit-glibc-al2": {
        unavailable("nvidia-operator-validator"): 1.0,
        RECONCILED: 0.0,
    },
}


def held(series: str, value: str) -> dict[str, str]:
    """A promtool input series: `value` from the window's start to its end."""
    return {"series": series, "values": f"{value}x{SAMPLES}"}


def scenario_series(name: str) -> list[dict[str, str]]:
    """The lab under `name`'s fault for the whole window, as promtool input series."""
    series = {**healthy(), **FAULTS[name]}
    return [held(key, f"{value:g}") for key, value in series.items() if value is not None]


def firing_test(name: str, input_series: list[dict[str, str]], alerts: list[str]) -> dict[str, Any]:
    """A promtool test group: `input_series` for the window, then exactly `alerts` firing
    (`ALERTS` grouped by name; none for an empty list)."""
    return {
        "name": name,
        "interval": "1m",
        "input_series": input_series,
        "promql_expr_test": [
            {
                "expr": 'group by (alertname) (ALERTS{alertstate="firing"})',
                "eval_time": WINDOW,
                "exp_samples": [
                    {"labels": f'{{alertname="{alert}"}}', "value": 1} for alert in sorted(alerts)
                ],
            }
        ],
    }
