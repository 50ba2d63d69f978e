"""One lab: its settings, its remembered state, and the clients that reach it.

A lab is created by `lab.up` and remembered in `<state_dir>/<lab>/state.json`:
which backend it runs on (real AWS or the local rehearsal), the full Terraform
variable set last applied, the stack outputs, the AWS account it lives in, and
which phases of `lab.up` are done. Every later command for that lab name opens
this record, so it talks to the same backend and the same cluster.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from labs.errors import LabError
from labs.journal import Journal
from labs.state import LabPaths, atomic_write_json, read_json, utc_now

if TYPE_CHECKING:
    from labs.cloud import AwsSession
    from labs.cluster import ClusterView
    from labs.infra import Infra
    from labs.settings import LabSettings

AWS = "aws"
SIM = "sim"
BACKENDS = (AWS, SIM)

# moto's fixed stand-in credentials; never real ones.
SIM_CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
WORKLOAD_NAMESPACE = "default"


class LabNotFound(LabError):
    """No lab of that name exists under the state directory."""


def known_labs(settings: LabSettings) -> list[str]:
    """Names of the labs that have a state file under the settings' state directory."""
    root = LabPaths.for_lab(settings.state_dir, settings.lab).root.parent
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / "state.json").exists())



@dataclass
class Lab:
    """A lab on disk plus lazily built clients for its cloud and cluster."""

    settings: LabSettings
    record: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def open(cls, settings: LabSettings) -> Lab:
        """Open an existing lab, or raise LabNotFound naming the labs that do exist."""
        record = read_json(LabPaths.for_lab(settings.state_dir, settings.lab).state_file)
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
    def create(cls, settings: LabSettings, backend: str) -> Lab:
        """Start the record of a new lab on `backend` (nothing is written until `save`)."""
        if backend not in BACKENDS:
            raise ValueError(f"unknown backend {backend!r}; use one of {', '.join(BACKENDS)}")
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
        return self.settings.lab

    @cached_property
    def paths(self) -> LabPaths:
        return LabPaths.for_lab(self.settings.state_dir, self.settings.lab)

    @property
    def backend(self) -> str:
        return str(self.record["backend"])

    @property
    def region(self) -> str:
        return str(self.record.get("region") or self.settings.region)

    @property
    def speed(self) -> float:
        """How much faster than a real cluster the lab's world runs (1 on AWS)."""
        if self.backend != SIM:
            return 1.0
        return float(self.record.get("speed") or self.settings.speed)

    @property
    def cluster_name(self) -> str:
        """The EKS cluster's name: the stack's output, or the lab name before the first apply."""
        return str(self.outputs.get("cluster_name") or self.name)

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
        atomic_write_json(self.paths.state_file, self.record)

    # --- clients -------------------------------------------------------------------

    def sim_endpoints(self) -> dict[str, Any]:
        """The rehearsal process's endpoints file ({} when there is none or not a sim lab)."""
        if self.backend != SIM:
            return {}
        return read_json(self.paths.sim_dir / "endpoints.json", {}) or {}

    def running_sim(self) -> dict[str, Any]:
        """The live rehearsal process's endpoints, or a LabError saying how to start it again."""
        from labs.sim import process

        endpoints = process.running_endpoints(self.paths.sim_dir)
        if endpoints is None:
            raise LabError(
                f"the rehearsal backend of lab {self.name!r} is not running; start it again with "
                f"`invoke lab.up --lab {self.name}`, or remove the lab with "
                f"`invoke lab.down --lab {self.name} --destroy`"
            )
        return endpoints

    @cached_property
    def aws(self) -> AwsSession:
        """The lab's AWS session: its region, and moto's endpoint for a rehearsal lab."""
        from labs.cloud import aws_session

        if self.backend == SIM:
            endpoint = self.running_sim()["aws_endpoint_url"]
            return aws_session(self.region, endpoint_url=endpoint, credentials=SIM_CREDENTIALS)
        return aws_session(self.region)

    def aws_client(self, service: str) -> Any:
        """A boto3 client of the lab's session."""
        return self.aws.client(service)

    @cached_property
    def kube(self) -> Any:
        """The kubernetes ApiClient for the lab's own kubeconfig."""
        from labs.cluster import api_client

        return api_client(self.paths.kubeconfig)

    def view(self) -> ClusterView:
        """A not-yet-started watched view of the kinds a GPU lab cares about."""
        from labs.cluster import ClusterView, standard_kinds

        return ClusterView(standard_kinds(self.kube, self.operator_namespace, WORKLOAD_NAMESPACE))

    @property
    def operator_namespace(self) -> str:
        from labs.stack import GPU_OPERATOR_NAMESPACE

        return str(self.variables.get(GPU_OPERATOR_NAMESPACE) or "gpu-operator")

    def infra(self) -> Infra:
        """The lab's infrastructure backend behind the one Infra interface."""
        if self.backend == SIM:
            from labs.sim.infra import SimInfra

            return SimInfra(self.running_sim())
        from labs.terraform import TerraformInfra

        return TerraformInfra(
            working_dir=self.paths.terraform_dir,
            stack_dir=self.settings.stack_dir,
            stream_output=True,  # a real apply takes 15-20 minutes: show its progress
        )
