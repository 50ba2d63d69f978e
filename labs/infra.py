"""The one seam between the lab and its infrastructure.

Terraform cannot run without its providers on a rehearsal machine, so the lab talks
to infrastructure only through this interface: the Terraform implementation for
AWS (`labs.terraform`) and the rehearsal one (`labs.sim.infra`) take the same
variables (names in `labs.stack`) and return the same outputs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from labs.errors import LabError


class InfraError(LabError, RuntimeError):
    """Infrastructure could not be planned, applied, read or destroyed; the message says why."""


class Infra(Protocol):
    """Apply, plan and destroy the lab's stack with a full variable set."""

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
