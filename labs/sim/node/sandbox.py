"""A pod's sandbox as containerd's CRI plugin creates it: refused when its runtime handler is
not one of the node's containerd runtimes, and the Event kubelet writes for each refusal.

The handler comes from the pod's RuntimeClass (`handler`), or is containerd's default for a
pod that names none. A node's containerd knows exactly two runtimes: the one nodeadm writes
into /etc/containerd/config.toml as `default_runtime_name` (its config template declares that
runtime only: `nvidia` on the AL2023 NVIDIA AMI, runc elsewhere; awslabs/amazon-eks-ami
nodeadm/internal/containerd/config2.template.toml and runtime_config_nvidia.go), and `runc`,
which containerd's CRI plugin has built in (internal/cri/config/config_unix.go:91-97@v2.2.4).
The nodes run containerd 2.2.4 (`containerRuntimeVersion`), so the refusal is worded as
its RunPodSandbox words it, not as containerd 1.7's `failed to get sandbox runtime: ...`.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field

from labs.sim.node.hardware import DEFAULT_RUNTIME_ANNOTATION

# containerd's built-in runtime (internal/cri/config/config_unix.go:91-97@v2.2.4).
BUILTIN_HANDLER = "runc"
# kubelet v1.35.4: pkg/kubelet/events/event.go:81, and
# pkg/kubelet/kuberuntime/kuberuntime_manager.go:1563 (`"Failed to create pod sandbox: %v", err`).
SANDBOX_EVENT = "FailedCreatePodSandBox"
# A pod worker whose sync failed is queued again after backOffPeriod (kubelet.go:222@v1.35.4,
# 10 s) with up to 50% jitter (pod_workers.go:329, workerBackOffPeriodJitterFactor 0.5).
RETRY_SECONDS, RETRY_JITTER = 10.0, 0.5
# client-go v0.35.4 tools/record/events_cache.go:40-41 and :183: from the 10th distinct
# message about one object within 10 minutes, one Event collects them, its message prefixed.
AGGREGATE_AFTER, AGGREGATE_WINDOW = 10, 600.0
COMBINED = "(combined from similar events): "


def node_handlers(node: dict) -> set[str]:
    """The runtime handlers the node's containerd is configured with."""
    annotations = node["metadata"].get("annotations") or {}
    return {annotations.get(DEFAULT_RUNTIME_ANNOTATION, BUILTIN_HANDLER), BUILTIN_HANDLER}


def sandbox_error(handler: str, node: dict) -> str | None:
    """What kubelet's RunPodSandbox call returns for `handler` ("" for containerd's default),
    as the Event's `%v` prints it; None when containerd has that runtime.

    internal/cri/server/sandbox_run.go:59 and :112-114@v2.2.4 (a random 64-hex sandbox id,
    `unable to get OCI runtime for sandbox %q: %w`), internal/cri/config/config.go:716@v2.2.4
    (`no runtime for %q is configured`), sent as gRPC code Unknown
    (internal/cri/instrument/instrumented_service.go:83@v2.2.4, errgrpc.ToGRPC).
    """
    if not handler or handler in node_handlers(node):
        return None
    cause = f'unable to get OCI runtime for sandbox "{secrets.token_hex(32)}": ' + (
        f'no runtime for "{handler}" is configured'
    )
    return f"rpc error: code = Unknown desc = {cause}"


@dataclass
class SandboxFailures:
    """One pod's failed sandbox attempts as kubelet's event recorder words them: each its own
    Event until the 10th in 10 minutes, then one Event that collects the rest."""

    distinct: list[float] = field(default_factory=list)  # monotonic times of distinct Events

    def message(self, error: str, now: float) -> tuple[str, bool]:
        """The Event message for this attempt, and whether it goes to the combined Event."""
        self.distinct = [t for t in self.distinct if now - t <= AGGREGATE_WINDOW] + [now]
        text = f"Failed to create pod sandbox: {error}"
        if len(self.distinct) < AGGREGATE_AFTER:
            return text, False
        self.distinct.pop(0)
        return COMBINED + text, True
