"""`python -m labs.sim.controlplane`: build (or find) the control plane's programs (the kubelet
among them), the node endpoint, the nodes' container runtime and device plugin, metrics-server,
promtool, Prometheus, kube-state-metrics, helm, Node Feature Discovery and the NVIDIA GPU
Operator (its program, chart and operand manifests) ahead of use.

The README's set-up runs it so the first build's quarter of an hour show as progress there, not as
a silent wait inside the first rehearsal or test.
"""

from __future__ import annotations

import sys

from labs.sim.controlplane.build import (
    HELM_PROGRAM,
    KUBE_STATE_METRICS_PROGRAM,
    METRICS_SERVER_PROGRAM,
    NFD_PROGRAMS,
    PROMETHEUS_PROGRAM,
    PROMTOOL_PROGRAM,
    ControlPlaneUnavailable,
    binaries,
    device_plugin_binary,
    node_endpoint_binary,
    node_runtime_binary,
    pinned_binary,
)
from labs.sim.controlplane.gpu_operator import release


def say(line: str) -> None:
    print(line, flush=True)


def main() -> int:
    try:
        print(f"control plane programs: {binaries(say)}", flush=True)
        print(f"node endpoint: {node_endpoint_binary(say)}", flush=True)
        print(f"nodes' container runtime: {node_runtime_binary(say)}", flush=True)
        print(f"GPU device plugin: {device_plugin_binary(say)}", flush=True)
        for program in (
            METRICS_SERVER_PROGRAM,
            PROMTOOL_PROGRAM,
            PROMETHEUS_PROGRAM,
            KUBE_STATE_METRICS_PROGRAM,
            HELM_PROGRAM,
            *NFD_PROGRAMS,
        ):
            print(f"{program.name}: {pinned_binary(program, say)}", flush=True)
        operator = release(say)
        print(f"gpu-operator {operator.version}: {operator.binary.parent}", flush=True)
    except ControlPlaneUnavailable as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
