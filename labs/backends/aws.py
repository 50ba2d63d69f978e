"""A real lab on AWS: terraform for the stack, boto3 for the EKS API, an EKS token kubeconfig."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from labs.aws import stack
from labs.backends.base import RealTime
from labs.errors import LabError
from labs.guard import GuardError, check_lab_target
from labs.state import warn

if TYPE_CHECKING:
    from labs.aws.cloud import AwsSession
    from labs.backends.base import Infra
    from labs.console import Console
    from labs.lab import Lab
    from labs.state import LabPaths

# What lab.up's preflight needs on PATH for a real lab.
AWS_TOOLS = ("terraform", "kubectl", "aws")


class PreflightFailed(LabError):
    """lab.up's read-only checks found problems; nothing was created."""


class AwsBackend(RealTime):
    name = "aws"
    bills = True
    keeps_files = True
    simulated = False

    def describe(self, lab: Lab) -> str:
        return "AWS EKS"

    def check_writable(self, lab: Lab, action: str) -> None:
        return None  # the lab's own; the guard still checks account, region and endpoint

    def left_files(self, paths: LabPaths) -> bool:
        return paths.terraform_dir.is_dir()

    def recover(self, lab: Lab) -> dict[str, Any]:
        """The outputs terraform still holds in the lab's working directory."""
        from labs.state import utc_now

        try:
            outputs = self.infra(lab).outputs()
        except LabError as error:
            warn(f"could not read the terraform outputs of lab {lab.name!r}: {error}")
            return {}
        if not outputs:
            return {}
        return {"outputs": outputs, "region": outputs.get("region", lab.region),
                "phases": {"infra": utc_now()}}  # fmt: skip

    def start(self, lab: Lab, console: Console) -> None:
        lab.update(account_id=self._preflight(lab, console))

    def preview(self, lab: Lab, new: bool, console: Console) -> bool:
        self._preflight(lab, console)
        return True

    def _preflight(self, lab: Lab, console: Console) -> str:
        """Tools, credentials, account, region and quota; returns the account id reached."""
        from labs.aws.cloud import preflight

        report = preflight(
            self.aws_session(lab),
            instance_type=lab.settings.gpu_instance_type,
            gpu_max=lab.settings.gpu_max,
            tools=AWS_TOOLS,
        )
        for line in report.lines():
            console.say(f"    {line}")
        if not report.ok:
            raise PreflightFailed("preflight found problems (above); nothing was created")
        if lab.record.get("account_id") not in (None, report.account_id):
            raise GuardError(
                f"refusing to touch lab {lab.name!r}: it lives in account "
                f"{lab.record['account_id']} but these credentials are for "
                f"{report.account_id}. Nothing was changed."
            )
        return report.account_id

    def infra(self, lab: Lab) -> Infra:
        from labs.aws.terraform import TerraformInfra

        return TerraformInfra(
            working_dir=lab.paths.terraform_dir,
            stack_dir=lab.settings.stack_dir,
            stream_output=True,  # a real apply takes 15-20 minutes: show its progress
            # the alert rules the stack reads from ../monitoring/, beside the lab's copy
            companions=stack.STACK_COMPANIONS,
        )

    def aws_session(self, lab: Lab) -> AwsSession:
        from labs.aws.cloud import aws_session

        return aws_session(lab.region)

    def kube_client(self, lab: Lab) -> Any:
        from labs.kube.view import lab_api_client

        return lab_api_client(lab.paths.kubeconfig, lab.name)

    def write_kubeconfig(self, lab: Lab) -> None:
        from labs.aws.kubeconfig import write_eks_kubeconfig

        name = lab.cluster_name
        cluster = lab.aws_client("eks").describe_cluster(name=name)["cluster"]
        write_eks_kubeconfig(
            lab.paths.kubeconfig, name, lab.region, cluster["endpoint"],
            (cluster.get("certificateAuthority") or {}).get("data"),
        )  # fmt: skip

    def unreachable(self, lab: Lab) -> str | None:
        return None  # AWS is always there; a failed call says what went wrong

    def stop_orphans(self, paths: LabPaths) -> list[int]:
        return []  # it runs no process of its own

    def ailing(self, lab: Lab) -> list[str]:
        return []  # a managed control plane: a failed call says what went wrong

    def stop_unreachable(self, lab: Lab, why: str, console: Console) -> str | None:
        return (
            f"unknown: could not read lab {lab.name!r} because {why}: its GPU nodes may still "
            "run and bill; scale its GPU node group to 0 in the EKS console"
        )

    def wait_billing_stopped(self, lab: Lab, cluster: str, nodegroup: str) -> None:
        from labs.aws.cloud import wait_nodegroup_instances_gone

        wait_nodegroup_instances_gone(
            lab.aws_client("ec2"), cluster, nodegroup, timeout=lab.settings.node_ready_timeout
        )

    def destroy(self, lab: Lab, console: Console) -> None:
        # Always: a first apply that failed half-way leaves resources in the state.
        check_lab_target(lab, cluster=False, account=True)
        lab.infra().destroy()

    def idle_message(self, lab: Lab, gpu_state: str | None) -> str:
        if gpu_state is None:
            return (
                f"The GPU node group of lab {lab.name!r} could not be read: GPU nodes may still "
                "bill. Check it in the EKS console."
            )
        return (
            f"{gpu_state}: no GPU bills. The control plane and NAT still bill hourly; add "
            "--destroy to end the week."
        )

    def proof(self) -> dict[str, list[str]]:
        return {
            "proves": [
                "the fault, its symptoms and the recovery on this EKS cluster, with the timings "
                "measured here, and that the revert restored the baseline",
            ],
            "does_not_prove": [
                "other GPU Operator versions, AMIs or instance types",
                "the steps marked 'real cluster only': the tool does not open node shells; run "
                "them yourself",
            ],
        }

    def env_exports(self, lab: Lab) -> dict[str, str]:
        return {}
