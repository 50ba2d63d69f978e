"""The one interface every kind of target implements: everything that differs lives behind it.

Lifecycle, engine, status and reports ask the lab's backend instead of branching on its
kind, so a new kind of target (the read-only existing cluster, say) fits without
touching them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from labs.aws.cloud import AwsSession
    from labs.console import Console
    from labs.lab import Lab


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

    def describe(self, lab: Lab) -> str:
        """A few words for the terminal and reports: "AWS EKS", "rehearsal, 60x speed"."""
        ...

    def speed(self, lab: Lab) -> float:
        """How much faster than a real cluster the lab's world runs."""
        ...

    def check_writable(self, lab: Lab, action: str) -> None:
        """Raise ReadOnlyTarget when `action` may not change this target."""
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

    def reachable(self, lab: Lab) -> bool:
        """The backend answers (a stopped rehearsal process does not)."""
        ...

    def wait_billing_stopped(self, lab: Lab, cluster: str, nodegroup: str) -> None:
        """After a scale to 0: wait until the node group's instances no longer bill."""
        ...

    def destroy(self, lab: Lab, console: Console) -> None:
        """Remove everything the lab created (lab.down --destroy)."""
        ...

    def idle_message(self, lab: Lab, reachable: bool) -> str:
        """What still bills once the GPU nodes are at 0."""
        ...

    def proof(self) -> dict[str, list[str]]:
        """What a scenario run on this backend proves, and what it cannot."""
        ...

    def env_exports(self, lab: Lab) -> dict[str, str]:
        """Environment for the aws CLI beyond the region (endpoint, stand-in credentials)."""
        ...
