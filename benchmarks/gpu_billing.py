"""GPU node-minutes billed until the first GPU probe succeeds: the write-up's order vs lab.up's.

Run: `.venv/bin/python benchmarks/gpu_billing.py [--speed 10] [--gpus 2]`. Brings up two
rehearsal labs. The write-up's runbook scales the GPU node group first (and waits for the
nodes), then runs `terraform apply -var enable_gpu_operator=true` and waits for the
operator; lab.up installs the operator while there are no GPU nodes and scales them last.
For each, the GPU instances' billed minutes (launch until the probe pod has succeeded) are
summed in modelled real-world minutes: wall time times the speed, so the world's delays
(labs/sim/timings.py) count as on EKS. Every wall second the orchestrator itself spends
counts `speed` times over, hence the low default speed. The rehearsal's terraform apply
takes no modelled time (a real helm install takes minutes more), so the write-up's
figure is a lower bound.
"""

from __future__ import annotations

import argparse
import io
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from labs.aws import stack  # noqa: E402
from labs.aws.cloud import nodegroup_instances  # noqa: E402
from labs.commands import down, scale, up  # noqa: E402
from labs.console import Console  # noqa: E402
from labs.lab import Lab  # noqa: E402
from labs.settings import LabSettings, load_settings  # noqa: E402


def settings(state_dir: Path, lab: str, speed: float, gpus: int, operator: bool) -> LabSettings:
    """A rehearsal lab's settings; a week-long time limit so it never fires mid-run."""
    return load_settings(
        None,
        {"lab": lab, "state_dir": str(state_dir), "speed": speed, "gpus": gpus,
         "operator": operator, "ttl": "168h"},
    )  # fmt: skip


def write_up_order(state_dir: Path, speed: float, gpus: int, console: Console) -> Lab:
    """Base stack, GPU nodes, then the operator's apply, then wait for it and probe."""
    up.up(settings(state_dir, "writeup", speed, 0, False), True, False, console)
    lab = Lab.open(settings(state_dir, "writeup", speed, gpus, True))
    scale.scale(lab, gpus, console)
    up.apply_changes(lab, {stack.ENABLE_GPU_OPERATOR: True}, console)
    return up.up(lab.settings, True, False, console)  # waits, then the probe


def lab_up_order(state_dir: Path, speed: float, gpus: int, console: Console) -> Lab:
    return up.up(settings(state_dir, "labup", speed, gpus, True), True, False, console)


def gpu_node_minutes(lab: Lab, until: datetime) -> float:
    """Modelled real-world minutes each GPU instance ran before `until`, summed."""
    ec2 = lab.aws_client("ec2")
    ids = nodegroup_instances(ec2, lab.cluster_name, lab.gpu_node_group)
    reservations = ec2.describe_instances(InstanceIds=ids)["Reservations"]
    launches = [i["LaunchTime"] for r in reservations for i in r["Instances"]]
    return sum((until - launched).total_seconds() for launched in launches) * lab.speed / 60


def measure(
    order: Callable[[Path, float, int, Console], Lab], state_dir: Path, speed: float, gpus: int
) -> tuple[float, float]:
    """(GPU node-minutes until the probe succeeded, wall seconds the whole order took)."""
    console = Console(io.StringIO())
    started = time.monotonic()
    lab = order(state_dir, speed, gpus, console)
    probed = datetime.now(UTC)  # lab.up returns once the probe pod has succeeded
    wall = time.monotonic() - started
    try:
        return gpu_node_minutes(lab, probed), wall
    finally:
        down.down(lab.settings, True, lambda _q: True, lambda _lab, _c: [], console)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--speed", type=float, default=10.0)
    parser.add_argument("--gpus", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as state:
        figures = {
            "write-up (GPU nodes, then operator apply, then wait)": measure(
                write_up_order, Path(state), args.speed, args.gpus
            ),
            "lab.up (operator ready first, GPU nodes last)": measure(
                lab_up_order, Path(state), args.speed, args.gpus
            ),
        }
    print(f"rehearsal at speed {args.speed:g}, {args.gpus} GPU nodes; modelled real-world minutes")
    for name, (node_minutes, wall) in figures.items():
        print(f"{name:<54} {node_minutes:6.1f} GPU node-minutes  ({wall:.1f} s wall)")
    write_up, lab_up = (node_minutes for node_minutes, _ in figures.values())
    print(f"{'ratio write-up / lab.up':<54} {write_up / lab_up:6.2f}")


if __name__ == "__main__":
    main()
