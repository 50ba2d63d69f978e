"""The kinds of target a lab command can act on, each behind `Backend`.

`aws`: a real EKS lab (terraform + boto3); `sim`: the local rehearsal; `existing`: a
cluster reached through a kubeconfig that the tool did not create and only reads.
"""

from __future__ import annotations

from labs.backends.aws import AwsBackend
from labs.backends.base import Backend, Infra
from labs.backends.existing import ExistingCluster
from labs.backends.rehearsal import RehearsalBackend

BACKENDS: dict[str, Backend] = {
    b.name: b for b in (AwsBackend(), RehearsalBackend(), ExistingCluster())
}
# The kinds `lab.up` can create (an existing cluster is only ever attached to).
AWS, REHEARSAL = AwsBackend.name, RehearsalBackend.name
CREATABLE = (AWS, REHEARSAL)


def backend_named(name: str) -> Backend:
    """The backend recorded as `name`; ValueError naming the known ones otherwise."""
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; use one of {', '.join(BACKENDS)}")
    return BACKENDS[name]


__all__ = ["AWS", "BACKENDS", "CREATABLE", "REHEARSAL", "Backend", "Infra", "backend_named"]
