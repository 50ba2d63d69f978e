"""How long things take in the real lab, in one table, scaled by one speed factor.

Every delay the rehearsal world plays is a real-world duration (seconds, as observed on
EKS with g5.xlarge nodes and GPU Operator v26.3.1) divided by `speed`: speed 1 is real
time, speed 60 turns a 5.5-minute node boot into 5.5 seconds.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_SPEED = 60.0

# Real-world seconds.
REAL_WORLD_SECONDS: dict[str, float] = {
    # EKS managed node group: instance launch until the node is Ready.
    "node_boot": 330.0,
    # Scale-down: drain and terminate until the Node object is gone.
    "node_terminate": 60.0,
    # How often the node lifecycle controller reads the node group's desiredSize.
    "nodegroup_poll": 10.0,
    # GPU Operator: from a ClusterPolicy change to the DaemonSets matching it (< 10 s).
    "operator_reconcile": 4.0,
    # Operator pod start after `helm install` (image pull, leader election).
    "operator_start": 20.0,
    # Operand pods: the first node's pod is Ready this long after the ClusterPolicy change
    # the operator acts on (its reconcile delay included), the other nodes' pods later.
    "operand_first_ready": 10.0,
    "operand_all_ready": 40.0,
    # Ordinary container: Scheduled -> Started (image already on the node).
    "container_start": 2.0,
    # Ordinary container: Started -> Ready (no readiness probe).
    "container_ready": 1.0,
    # Run-to-completion container (nvidia-smi and friends): Started -> Succeeded.
    "container_run": 1.0,
    # Device plugin registers with kubelet once its pod is Ready.
    "device_plugin_register": 1.0,
    # kubelet keeps a gone plugin's capacity for endpointStopGracePeriod (allocatable 0 at once).
    "capacity_grace": 300.0,
    # Scheduler: unschedulable pods are retried at least this often (podMaxInUnschedulablePods).
    "unschedulable_retry": 300.0,
    # Scheduler: first retry of a pod that failed (podInitialBackoffSeconds).
    "scheduler_backoff": 1.0,
    # NCCL bootstrap gives up on a blocked peer after its socket retries.
    "connect_timeout": 60.0,
}


@dataclass(frozen=True)
class Timings:
    """The delays of one world, in wall-clock seconds (already divided by speed)."""

    speed: float
    node_boot: float
    node_terminate: float
    nodegroup_poll: float
    operator_reconcile: float
    operator_start: float
    operand_first_ready: float
    operand_all_ready: float
    container_start: float
    container_ready: float
    container_run: float
    device_plugin_register: float
    capacity_grace: float
    unschedulable_retry: float
    scheduler_backoff: float
    connect_timeout: float


def scaled(speed: float = DEFAULT_SPEED) -> Timings:
    """The table above divided by `speed` (> 0); raises ValueError naming the bad value."""
    if not speed > 0:
        raise ValueError(f"speed must be a positive number (1 = real time), got {speed!r}")
    values = {name: seconds / speed for name, seconds in REAL_WORLD_SECONDS.items()}
    return Timings(speed=speed, **values)
