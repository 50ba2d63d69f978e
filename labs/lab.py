"""One lab: its settings, its remembered state, its backend, and the clients that reach it.

A lab is created by `lab.up` and remembered in `<state_dir>/<lab>/state.json`: which
backend it runs on, the full Terraform variable set last applied, the stack outputs,
the AWS account it lives in, and which phases of `lab.up` are done. Every later command
for that lab name opens this record, so it talks to the same backend and cluster. A
cluster the tool did not create is attached to, read-only, and never recorded.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from labs.backends import CREATABLE, Backend, backend_named
from labs.errors import LabError
from labs.journal import Journal
from labs.settings import OPERATOR_NAMESPACE
from labs.state import (
    DamagedFile,
    LabPaths,
    StateWriteError,
    atomic_write_json,
    load_json,
    utc_now,
    warn,
)

if TYPE_CHECKING:
    from labs.aws.cloud import AwsSession
    from labs.backends.base import Infra
    from labs.kube.view import ClusterView, Snapshot
    from labs.settings import LabSettings


class LabNotFound(LabError):
    """No lab of that name exists under the state directory."""


def known_labs(settings: LabSettings) -> list[str]:
    """Names of the labs under the settings' state directory: those with a state file, and
    those whose lab.up left a backend's files before writing one (they may still run)."""
    root = LabPaths.for_lab(settings.state_dir, settings.lab).root.parent
    if not root.is_dir():
        return []
    return sorted(
        p.name for p in root.iterdir() if (p / "state.json").exists() or _left_behind(LabPaths(p))
    )


def _record_problem(record: Any) -> str | None:
    """What makes a parsed state file unusable, or None."""
    if not isinstance(record, dict):
        return f"a {type(record).__name__}, not an object"
    if record.get("backend") not in CREATABLE:
        return f"backend {record.get('backend')!r} is none of {', '.join(CREATABLE)}"
    for key in ("outputs", "variables", "phases"):
        if not isinstance(record.get(key, {}), dict):
            return f"{key!r} is not an object"
    return None


def _left_behind(paths: LabPaths) -> bool:
    """Files a lab.up leaves before its first state write (a backend may already run)."""
    return any(backend_named(name).left_files(paths) for name in CREATABLE)


@dataclass
class Lab:
    """A lab on disk plus lazily built clients for its cloud and cluster."""

    settings: LabSettings
    record: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def open(cls, settings: LabSettings) -> Lab:
        """The lab named in settings (or the cluster its kubeconfig names); LabNotFound else."""
        if settings.kubeconfig:
            attached = cls.attach(settings)
            attached.kube  # noqa: B018 - a bad kubeconfig or context fails here, named
            return attached
        try:
            record = load_json(settings.paths.state_file, _record_problem)
        except DamagedFile as damage:
            return cls.rebuild(settings, str(damage))
        if record is None and _left_behind(settings.paths):
            return cls.rebuild(settings, f"{settings.paths.state_file} is missing")
        if record is None:
            others = known_labs(settings)
            known = f"known labs: {', '.join(others)}" if others else "no labs exist yet"
            raise LabNotFound(
                f"no lab named {settings.lab!r} under {settings.state_dir} ({known}); "
                f"create it with `invoke lab.up --lab {settings.lab}` (add --sim to rehearse "
                "locally)"
            )
        return cls(settings, record)

    @classmethod
    def rebuild(cls, settings: LabSettings, why: str) -> Lab:
        """A lab whose state file is lost: the backend its files show, the rest from the backend.

        Saved again when it can be, so the next command finds a whole record.
        """
        paths = settings.paths
        found = [name for name in CREATABLE if backend_named(name).left_files(paths)]
        if not found:
            raise LabError(
                f"{why}, and nothing under {paths.root} shows which backend lab "
                f"{settings.lab!r} ran on (no sim/ and no terraform/). If it ran on AWS, look "
                f"for EKS cluster {settings.lab!r} in the console; remove {paths.root} to "
                "start again."
            )
        lab = cls.create(settings, found[0])
        lab.record.update(lab.backend.recover(lab), rebuilt_at=utc_now())
        try:
            lab.save()
        except StateWriteError as error:
            warn(f"{why}; rebuilt lab {lab.name!r} in memory only ({error})")
        else:
            warn(f"{why}; rebuilt it from what the {lab.backend.name} backend still knows")
        return lab

    @classmethod
    def attach(cls, settings: LabSettings) -> Lab:
        """A cluster reached through `settings.kubeconfig`: read-only, nothing written."""
        record = {
            "lab": settings.context or settings.lab,
            "backend": "existing",
            "region": settings.region,
            "kubeconfig": str(Path(settings.kubeconfig).expanduser().resolve()),
            "context": settings.context or None,
        }
        return cls(settings, record)

    @classmethod
    def create(cls, settings: LabSettings, backend: str) -> Lab:
        """Start the record of a new lab on `backend` (nothing is written until `save`)."""
        if backend not in CREATABLE:
            raise ValueError(f"unknown backend {backend!r}; use one of {', '.join(CREATABLE)}")
        record = {
            "lab": settings.lab,
            "backend": backend,
            "region": settings.region,
            "created_at": utc_now(),
            "variables": {},
            "outputs": {},
            "phases": {},
        }
        return cls(settings, record)

    # --- what is remembered -------------------------------------------------------

    @property
    def name(self) -> str:
        return str(self.record.get("lab") or self.settings.lab)

    @cached_property
    def paths(self) -> LabPaths:
        return LabPaths.for_lab(self.settings.state_dir, self.settings.lab)

    @cached_property
    def backend(self) -> Backend:
        return backend_named(str(self.record["backend"]))

    @property
    def region(self) -> str:
        return str(self.record.get("region") or self.settings.region)

    @property
    def speed(self) -> float:
        """How much faster than a real cluster the lab's world runs (1 on AWS)."""
        return self.backend.speed(self)

    @property
    def cluster_name(self) -> str:
        """The EKS cluster's name: the stack's output, or the lab name before the first apply."""
        return str(self.outputs.get("cluster_name") or self.name)

    @property
    def gpu_node_group(self) -> str:
        """The GPU managed node group: the stack's output, or the name the stack gives it."""
        from labs.aws.stack import gpu_node_group_name

        name = self.outputs.get("gpu_node_group_name") or gpu_node_group_name(self.cluster_name)
        return str(name)

    @property
    def outputs(self) -> dict[str, Any]:
        return dict(self.record.get("outputs") or {})

    @property
    def variables(self) -> dict[str, Any]:
        return dict(self.record.get("variables") or {})

    @cached_property
    def journal(self) -> Journal:
        return Journal(self.paths.journal)

    def phase_done(self, phase: str) -> bool:
        return bool(self.record.get("phases", {}).get(phase))

    def mark_phase(self, phase: str) -> None:
        self.record.setdefault("phases", {})[phase] = utc_now()
        self.save()

    def update(self, **fields: Any) -> None:
        self.record.update(fields)
        self.save()

    def save(self) -> None:
        self.backend.check_writable(self, "saving lab state")
        atomic_write_json(self.paths.state_file, self.record)

    # --- clients -------------------------------------------------------------------

    @cached_property
    def aws(self) -> AwsSession:
        """The lab's AWS session (its region; the backend's endpoint and credentials)."""
        return self.backend.aws_session(self)

    def aws_client(self, service: str) -> Any:
        """A boto3 client of the lab's session."""
        return self.aws.client(service)

    @cached_property
    def kube(self) -> Any:
        """The kubernetes ApiClient for the lab's cluster."""
        return self.backend.kube_client(self)

    def view(self) -> ClusterView:
        """A not-yet-started watched view of the kinds a GPU lab cares about."""
        from labs.kube.view import ClusterView, standard_kinds

        return ClusterView(standard_kinds(self.kube, self.operator_namespace))

    def snapshot(self, *kinds: str) -> Snapshot:
        """The named standard kinds, listed once each (a kind the API does not serve is empty)."""
        from labs.kube.resources import NotFound
        from labs.kube.view import Snapshot, standard_kinds

        known = {k.name: k for k in standard_kinds(self.kube, self.operator_namespace)}
        unknown = sorted(set(kinds) - set(known))
        if unknown:
            raise ValueError(
                f"not a standard kind: {', '.join(unknown)} (known: {', '.join(known)})"
            )
        listed: dict[str, list[dict[str, Any]]] = {}
        for kind in kinds:
            try:
                listed[kind] = known[kind].list_once()
            except NotFound:  # a kind this cluster does not serve (no GPU Operator CRD)
                pass
        return Snapshot(listed)

    @property
    def operator_namespace(self) -> str:
        from labs.aws.stack import GPU_OPERATOR_NAMESPACE

        return str(self.variables.get(GPU_OPERATOR_NAMESPACE) or OPERATOR_NAMESPACE)

    def infra(self) -> Infra:
        """The lab's infrastructure behind the one Infra interface."""
        return self.backend.infra(self)
