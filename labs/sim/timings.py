"""How long things take in the real lab, in one table, scaled by one speed factor.

Every delay the rehearsal world plays is a real-world duration (seconds, as observed on
EKS with g5.xlarge nodes and GPU Operator v26.3.1) divided by `speed`: speed 1 is real
time, speed 60 turns a 5.5-minute node boot into 5.5 seconds. A running world changes its
speed in place (`Timings.set_speed`): every controller shares one `Timings` and reads the
new delays from its next pass; a delay already under way keeps the pace it started with.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

DEFAULT_SPEED = 60.0

# Real-world seconds.
REAL_WORLD_SECONDS: dict[str, float] = {
    # EKS managed node group: instance launch until the node is Ready.
    "node_boot": 330.0,
    # Scale-down: drain and terminate until the Node object is gone.
    "node_terminate": 60.0,
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
}


@dataclass
class Timings:
    """The delays of one world, in wall-clock seconds (already divided by speed)."""

    speed: float
    node_boot: float
    node_terminate: float
    operand_first_ready: float
    operand_all_ready: float
    container_start: float
    container_ready: float
    container_run: float
    device_plugin_register: float
    capacity_grace: float
    unschedulable_retry: float
    scheduler_backoff: float

    def set_speed(self, speed: float) -> None:
        """Retime every delay for `speed`, in place; ValueError names a bad value."""
        for name, value in vars(scaled(speed)).items():
            setattr(self, name, value)


def scaled(speed: float = DEFAULT_SPEED) -> Timings:
    """The table above divided by `speed` (> 0); raises ValueError naming the bad value."""
    if not speed > 0:
        raise ValueError(f"speed must be a positive number (1 = real time), got {speed!r}")
    values = {name: seconds / speed for name, seconds in REAL_WORLD_SECONDS.items()}
    return Timings(speed=speed, **values)


class WorldClock:
    """The world's calendar: wall time at the world's start, then each stretch of wall time
    times the speed the world ran at meanwhile (its pace changes while it runs).

    A rehearsal lab's time limit is an `at(...)` on this clock, and its GPU minutes are read
    on it. It runs at the pace a person chose (4 hours at speed 1, 4 minutes at speed 60),
    never at a program's: a world starts at a person's pace whatever speed its programs run
    it at, so `lab.up`, a check or a scenario run spends of the limit only the wall time
    it took.
    """

    def __init__(self, speed: float, start: datetime | None = None) -> None:
        self._wall = self._world = start or datetime.now(UTC)
        self.speed = speed

    def now(self) -> datetime:
        return self._world + (datetime.now(UTC) - self._wall) * self.speed

    def set_speed(self, speed: float) -> None:
        """From now on the clock runs `speed` times faster than the wall clock."""
        wall = datetime.now(UTC)
        self._world = self._world + (wall - self._wall) * self.speed
        self._wall, self.speed = wall, speed

    def wall_seconds_until(self, moment: datetime) -> float:
        """Wall-clock seconds until the world's clock shows `moment` at the present pace
        (negative once past)."""
        return (moment - self.now()).total_seconds() / self.speed
