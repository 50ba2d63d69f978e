"""The one interface every kind of target implements: everything that differs lives behind it.

Lifecycle, engine, status and reports ask the lab's backend instead of branching on its
kind, so a new kind of target (the read-only existing cluster, say) fits without
touching them.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from labs.errors import LabError

if TYPE_CHECKING:
    from labs.aws.cloud import AwsSession
    from labs.console import Console
    from labs.lab import Lab
    from labs.state import LabPaths


class Infra(Protocol):
    """Apply, plan and destroy the lab's stack with a full variable set.

    Terraform cannot run without its providers on a rehearsal machine, so the lab talks to
    infrastructure only through this: both implementations take the same variables (names
    in `labs.aws.stack`) and return the same outputs.
    """

    def apply(self, variables: Mapping[str, Any]) -> dict[str, Any]:
        """Make the stack match `variables` (always the lab's full set); return its outputs."""
        ...

    def plan(self, variables: Mapping[str, Any]) -> list[str]:
        """Human-readable lines, one per change `apply(variables)` would make; empty if none."""
        ...

    def outputs(self) -> dict[str, Any]:
        """The outputs of the last apply as plain values ({} when nothing is applied)."""
        ...

    def destroy(self) -> None:
        """Remove everything the stack created; safe to call twice."""
        ...


class Backend(Protocol):
    """What differs between an AWS lab, a rehearsal lab and an existing cluster."""

    name: str  # as recorded in the lab's state file
    bills: bool  # its resources cost money
    keeps_files: bool  # has a journal and runs under the state directory
    simulated: bool  # workloads' output is played by a model, not printed by real GPUs

    def describe(self, lab: Lab) -> str:
        """A few words for the terminal and reports: "AWS EKS", "rehearsal, 60x speed"."""
        ...

    def speed(self, lab: Lab) -> float:
        """How much faster than a real cluster the lab's world runs right now."""
        ...

    def program_pace(self, lab: Lab) -> AbstractContextManager[None]:
        """For its duration the world runs as fast as a watching program wants (the lab's
        speed setting); afterwards at the pace it had before."""
        ...

    def check_floor(self, lab: Lab) -> float | None:
        """The fewest wall seconds a sped-up check gets on this lab, beyond the rehearsal's
        usual floor (None: that floor), for parts of its world that keep real time."""
        ...

    def person_speed(self, lab: Lab, wanted: float | None) -> float:
        """The speed for a person practising by hand (`wanted`, default real time); LabError
        when this lab cannot run at it. Changes nothing."""
        ...

    def set_speed(self, lab: Lab, speed: float) -> None:
        """Run the lab's world at `speed` from now on, keeping its state."""
        ...

    def now(self, lab: Lab) -> datetime:
        """The lab's clock, which its schedules fire on: UTC on AWS, the world's on a rehearsal."""
        ...

    def check_writable(self, lab: Lab, action: str) -> None:
        """Raise ReadOnlyTarget when `action` may not change this target."""
        ...

    def left_files(self, paths: LabPaths) -> bool:
        """The lab's directory holds files only this backend writes (to rebuild a lost record)."""
        ...

    def recover(self, lab: Lab) -> dict[str, Any]:
        """Record fields read back from the backend itself (outputs, account) for a lost record."""
        ...

    def start(self, lab: Lab, console: Console) -> None:
        """lab.up's preflight: make the backend reachable and record whose it is."""
        ...

    def preview(self, lab: Lab, new: bool, console: Console) -> bool:
        """lab.up --dry-run's read-only checks; True when the infra plan can be read."""
        ...

    def infra(self, lab: Lab) -> Infra: ...

    def aws_session(self, lab: Lab) -> AwsSession: ...

    def kube_client(self, lab: Lab) -> Any:
        """A kubernetes ApiClient for the target's API server."""
        ...

    def write_kubeconfig(self, lab: Lab) -> None:
        """Write the lab's own kubeconfig under its state directory."""
        ...

    def unreachable(self, lab: Lab) -> str | None:
        """Why the backend cannot be read now (naming the file or endpoint), read within a few
        seconds; None when it answers (a stopped or frozen rehearsal process does not)."""
        ...

    def ailing(self, lab: Lab) -> list[str]:
        """What keeps a backend that answers from moving (a rehearsal's dead or stopped etcd or
        API server, a full disk), each naming the process, port or file; [] when nothing does
        or the backend cannot tell (a managed control plane)."""
        ...

    def stop_unreachable(self, lab: Lab, why: str, console: Console) -> str | None:
        """lab.down on a backend that does not answer (`why`): stop what may still run, found
        without its answer; what is left to do (GPUs may still run), None when nothing is."""
        ...

    def stop_orphans(self, paths: LabPaths) -> list[int]:
        """Stop what a lab whose files are gone left running, found without its record (by
        command line); the pids stopped."""
        ...

    def wait_billing_stopped(self, lab: Lab, cluster: str, nodegroup: str) -> None:
        """After a scale to 0: wait until the node group's instances no longer bill."""
        ...

    def destroy(self, lab: Lab, console: Console) -> None:
        """Remove everything the lab created (lab.down --destroy)."""
        ...

    def idle_message(self, lab: Lab, gpu_state: str | None) -> str:
        """lab.down's last word: `gpu_state` is how the GPU node group read from the backend
        after the scale-down ("... reads desiredSize 0", "... does not exist"), None when it
        could not be read; say what still bills, never "nothing" without having read it."""
        ...

    def proof(self) -> dict[str, list[str]]:
        """What a scenario run on this backend proves, and what it cannot."""
        ...

    def lose_gpu(self, lab: Lab, node: str, xid: int) -> None:
        """Make `node`'s GPU fall off the bus with `xid`: only a rehearsal world can (LabError
        elsewhere; scenarios that need it declare `Needs.rehearsal_only`)."""
        ...

    def set_node_os(self, lab: Lab, node: str, family: str) -> None:
        """Put GPU node `node` on AMI family `family` (`al2`, back with `al2023`) in place: only
        a rehearsal world can (LabError elsewhere; scenarios that need it declare
        `Needs.rehearsal_only`)."""
        ...

    def env_exports(self, lab: Lab) -> dict[str, str]:
        """Environment for the aws CLI beyond the region (endpoint, stand-in credentials)."""
        ...


class RealTime:
    """The pace of a real cluster: real time, whoever watches."""

    def speed(self, lab: Lab) -> float:
        return 1.0

    def now(self, lab: Lab) -> datetime:
        return datetime.now(UTC)

    def program_pace(self, lab: Lab) -> AbstractContextManager[None]:
        return nullcontext()

    def check_floor(self, lab: Lab) -> float | None:
        return None  # a real cluster's checks get their own limits

    def person_speed(self, lab: Lab, wanted: float | None) -> float:
        if wanted not in (None, 1.0):
            raise LabError(
                f"lab {lab.name!r} is a real cluster and runs in real time; --speed applies to "
                "rehearsal labs only. Nothing was changed."
            )
        return 1.0

    def set_speed(self, lab: Lab, speed: float) -> None:
        return None

    def lose_gpu(self, lab: Lab, node: str, xid: int) -> None:
        raise LabError(
            f"lab {lab.name!r} has real GPUs: an Xid {xid} cannot be made on one (no API raises "
            "it, and a GPU off the bus needs its instance replaced); a rehearsal lab plays it. "
            "Nothing was changed."
        )

    def set_node_os(self, lab: Lab, node: str, family: str) -> None:
        raise LabError(
            f"lab {lab.name!r} runs real nodes: a running node cannot change its AMI, and EKS "
            f"1.35 has no Amazon Linux 2 AMI to boot one on; a rehearsal lab plays it. Nothing "
            "was changed."
        )
