"""A cluster the tool did not create, reached through a kubeconfig and context: read only.

Engineers point the tool at their own GPU clusters to look (lab.status, later the
doctor); nothing the tool does may change such a cluster, so every mutation stops here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NoReturn

from labs.backends.base import RealTime
from labs.errors import LabError, ReadOnlyTarget

if TYPE_CHECKING:
    from labs.aws.cloud import AwsSession
    from labs.backends.base import Infra
    from labs.console import Console
    from labs.lab import Lab
    from labs.state import LabPaths


def target_of(lab: Lab) -> str:
    """`context C in kubeconfig F`, as the user named it."""
    context = lab.record.get("context") or "its current context"
    return f"{context} in kubeconfig {lab.record['kubeconfig']}"


class ExistingCluster(RealTime):
    name = "existing"
    bills = False  # not by this tool: it created nothing there
    keeps_files = False
    simulated = False

    def describe(self, lab: Lab) -> str:
        return f"existing cluster, read-only ({target_of(lab)})"

    def check_writable(self, lab: Lab, action: str) -> NoReturn:
        raise ReadOnlyTarget(
            f"refusing {action}: the target is an existing cluster ({target_of(lab)}), not a "
            "lab this tool created, and such a cluster is only ever read (lab.status works). "
            "To practise, create a lab: `invoke lab.up --sim --lab NAME`. Nothing was changed."
        )

    def left_files(self, paths: LabPaths) -> bool:
        return False  # it keeps no files

    def recover(self, lab: Lab) -> dict[str, Any]:
        return {}

    def start(self, lab: Lab, console: Console) -> None:
        self.check_writable(lab, "lab.up")

    def preview(self, lab: Lab, new: bool, console: Console) -> bool:
        self.check_writable(lab, "lab.up")

    def infra(self, lab: Lab) -> Infra:
        self.check_writable(lab, "an infrastructure change")

    def aws_session(self, lab: Lab) -> AwsSession:
        raise ReadOnlyTarget(
            f"no AWS access for an existing cluster ({target_of(lab)}): the tool only reads "
            "it through the kubeconfig"
        )

    def kube_client(self, lab: Lab) -> Any:
        from kubernetes.config import ConfigException

        from labs.kube.view import api_client

        try:
            return api_client(lab.record["kubeconfig"], lab.record.get("context"))
        except ConfigException as error:
            raise LabError(
                f"cannot read {target_of(lab)}: {error}. List its contexts with "
                f"`kubectl config get-contexts --kubeconfig {lab.record['kubeconfig']}`"
            ) from None

    def write_kubeconfig(self, lab: Lab) -> None:
        self.check_writable(lab, "writing a kubeconfig")

    def unreachable(self, lab: Lab) -> str | None:
        return None

    def stop_orphans(self, paths: LabPaths) -> list[int]:
        return []  # it runs no process of its own

    def ailing(self, lab: Lab) -> list[str]:
        return []  # not the tool's processes: a failed read says what went wrong

    def stop_unreachable(self, lab: Lab, why: str, console: Console) -> str | None:
        return None  # never reached: an existing cluster is read, never stopped

    def wait_billing_stopped(self, lab: Lab, cluster: str, nodegroup: str) -> None:
        self.check_writable(lab, "scaling")

    def destroy(self, lab: Lab, console: Console) -> None:
        self.check_writable(lab, "lab.down --destroy")

    def idle_message(self, lab: Lab, gpu_state: str | None) -> str:
        return f"existing cluster ({target_of(lab)}): not a lab, nothing of the tool's bills"

    def proof(self) -> dict[str, list[str]]:
        return {"proves": [], "does_not_prove": ["no scenario runs on an existing cluster"]}

    def env_exports(self, lab: Lab) -> dict[str, str]:
        return {}
