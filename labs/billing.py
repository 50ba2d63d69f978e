"""What the GPU session running now has cost: node-minutes since the GPUs were asked for.

lab.up prints it at the end and lab.status shows it, so nobody has to work out what an
evening of GPUs came to. A rehearsal bills nothing; its figure is what AWS would bill.
Minutes are read on the backend's clock (wall time on AWS, the world's clock on a
rehearsal, which keeps each stretch at the pace it ran), so a pace change never rewrites
the minutes already run.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from labs.aws.pricing import gpu_node_minutes_cost
from labs.lab import Lab

# Lab record key: when the GPU node group was last scaled above 0 (the lab's clock, ISO).
SCALED_AT = "gpu_scaled_at"


@dataclass(frozen=True)
class GpuSession:
    nodes: int
    minutes: float  # real-cluster minutes since the scale-up
    node_minutes: float
    cost: float  # USD, on-demand estimate


def gpu_session(lab: Lab, nodes: int) -> GpuSession | None:
    """The session of `nodes` GPU nodes since the last scale-up; None when none was recorded."""
    started = lab.record.get(SCALED_AT)
    if not started:
        return None
    elapsed = (lab.backend.now(lab) - datetime.fromisoformat(started)).total_seconds()
    minutes = max(0.0, elapsed / 60)
    node_minutes = minutes * nodes
    cost = gpu_node_minutes_cost(lab.region, lab.settings.gpu_instance_type, node_minutes)
    return GpuSession(nodes, minutes, node_minutes, cost)


def describe_session(session: GpuSession, lab: Lab) -> str:
    """`N (k x m min), billed ~$X (estimate, ...)`, saying so when nothing really bills."""
    where = "billed"
    if not lab.backend.bills:
        where = f"{lab.backend.describe(lab)}: nothing billed; on AWS this would be"
    return (
        f"{session.node_minutes:.1f} ({session.nodes} x {session.minutes:.1f} min), "
        f"{where} ~${session.cost:.2f} (estimate, {lab.settings.gpu_instance_type} on-demand "
        f"in {lab.region})"
    )
