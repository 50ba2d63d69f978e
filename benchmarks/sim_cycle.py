"""How long one cycle of a world on the modelled kubelet takes: world start, GPU scale-up to
operator-ready, scale-down.

Run: `.venv/bin/python benchmarks/sim_cycle.py [--speed 60]`. Prints wall-clock seconds per
phase and the real-world time the same phase stands for (seconds x speed).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from labs.aws import stack  # noqa: E402
from labs.kube.resources import CLUSTER_POLICIES, NODES  # noqa: E402
from labs.settings import MODELLED_KUBELETS, LabSettings  # noqa: E402
from labs.sim.aws.seed import moto_clients  # noqa: E402
from labs.sim.infra import SimInfra  # noqa: E402
from labs.sim.timings import DEFAULT_SPEED  # noqa: E402
from labs.sim.world import World, start_world  # noqa: E402

GPU_NODES = "node.kubernetes.io/instance-type=g5.xlarge"


def until(check: Callable[[], bool], timeout: float = 600.0) -> float:
    """Seconds until `check()` holds (raises after `timeout`)."""
    started = time.monotonic()
    while not check():
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"condition not met within {timeout}s")
        time.sleep(0.01)
    return time.monotonic() - started


def operator_ready_with_gpus(world: World, count: int) -> bool:
    nodes = world.store.list(NODES, label_selector=GPU_NODES)[0]
    gpus = [n["status"]["allocatable"].get("nvidia.com/gpu") for n in nodes]
    policies = world.store.list(CLUSTER_POLICIES)[0]
    state = policies[0].get("status", {}).get("state") if policies else None
    return gpus == ["1"] * count and state == "ready"


def scale(world: World, desired: int) -> None:
    eks = moto_clients(world.endpoints)("eks")
    eks.update_nodegroup_config(
        clusterName=world.endpoints["cluster_name"],
        nodegroupName=stack.gpu_node_group_name(world.endpoints["cluster_name"]),
        scalingConfig={"minSize": 0, "maxSize": 2, "desiredSize": desired},
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--speed", type=float, default=DEFAULT_SPEED)
    args = parser.parse_args()
    variables = LabSettings().stack_variables(operator_enabled=True)
    with tempfile.TemporaryDirectory() as state:
        started = time.monotonic()
        world = start_world(Path(state), speed=args.speed, kubelets=MODELLED_KUBELETS)
        phases = [("world start (moto + control plane, seeded)", time.monotonic() - started)]
        try:
            started = time.monotonic()
            scale(world, 2)
            SimInfra(world.endpoints).apply(variables)
            until(lambda: operator_ready_with_gpus(world, 2))
            phases.append(("scale-up to 2 GPUs + operator ready", time.monotonic() - started))
            started = time.monotonic()
            scale(world, 0)
            until(lambda: not world.store.list(NODES, label_selector=GPU_NODES)[0])
            phases.append(("scale-down to 0 GPU nodes", time.monotonic() - started))
        finally:
            started = time.monotonic()
            world.stop()
            phases.append(("world stop", time.monotonic() - started))
    print(f"speed {args.speed:g}")
    for name, seconds in phases:
        played = "scale" in name  # only the world's own delays are scaled by speed
        equivalent = f"   (stands for {seconds * args.speed / 60:.1f} min)" if played else ""
        print(f"{name:<40} {seconds:7.2f} s{equivalent}")


if __name__ == "__main__":
    main()
