"""A rehearsal lab: the background `labs.sim` process (moto + the Kubernetes API emulator).

The only module outside `labs/sim/` that knows the rehearsal exists; everything else
talks to it through the same boto3 and kubernetes clients as to AWS.
"""

from __future__ import annotations

import shutil
from typing import TYPE_CHECKING, Any

from labs.errors import LabError
from labs.journal import REVERTED
from labs.sim import process
from labs.state import read_json

if TYPE_CHECKING:
    from labs.aws.cloud import AwsSession
    from labs.backends.base import Infra
    from labs.console import Console
    from labs.lab import Lab

# moto's fixed stand-in credentials; never real ones.
SIM_CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}


class RehearsalBackend:
    name = "sim"
    bills = False
    keeps_files = True

    def describe(self, lab: Lab) -> str:
        return f"rehearsal, {self.speed(lab):g}x speed"

    def speed(self, lab: Lab) -> float:
        return float(lab.record.get("speed") or lab.settings.speed)

    def check_writable(self, lab: Lab, action: str) -> None:
        return None

    def start(self, lab: Lab, console: Console) -> None:
        endpoints = process.start(lab.paths.sim_dir, lab.settings.speed, lab.name, lab.region)
        console.say(
            f"    rehearsal backend: kube {endpoints['kube_url']}, aws "
            f"{endpoints['aws_endpoint_url']} (pid {endpoints['pid']})"
        )
        if lab.record.get("sim_kube_url") not in (None, endpoints["kube_url"]):
            _forget_old_world(lab, console)
        lab.update(
            account_id=endpoints.get("account_id"),
            sim_kube_url=endpoints["kube_url"],
            speed=lab.settings.speed if lab.record.get("speed") is None else lab.record["speed"],
        )

    def preview(self, lab: Lab, new: bool, console: Console) -> bool:
        if new:
            console.say(
                f"  would start the rehearsal backend (speed x{lab.settings.speed:g}) in "
                f"{lab.paths.sim_dir}"
            )
        return not new

    def _running(self, lab: Lab) -> dict[str, Any]:
        """The live process's endpoints, or a LabError saying how to start it again."""
        endpoints = process.running_endpoints(lab.paths.sim_dir)
        if endpoints is None:
            raise LabError(
                f"the rehearsal backend of lab {lab.name!r} is not running; start it again with "
                f"`invoke lab.up --lab {lab.name}`, or remove the lab with "
                f"`invoke lab.down --lab {lab.name} --destroy`"
            )
        return endpoints

    def infra(self, lab: Lab) -> Infra:
        from labs.sim.infra import SimInfra

        return SimInfra(self._running(lab))

    def aws_session(self, lab: Lab) -> AwsSession:
        from labs.aws.cloud import aws_session

        endpoint = self._running(lab)["aws_endpoint_url"]
        return aws_session(lab.region, endpoint_url=endpoint, credentials=SIM_CREDENTIALS)

    def kube_client(self, lab: Lab) -> Any:
        from labs.kube.view import api_client

        return api_client(lab.paths.kubeconfig)

    def write_kubeconfig(self, lab: Lab) -> None:
        shutil.copyfile(lab.paths.sim_dir / "kubeconfig", lab.paths.kubeconfig)
        lab.paths.kubeconfig.chmod(0o600)

    def reachable(self, lab: Lab) -> bool:
        return process.running_endpoints(lab.paths.sim_dir) is not None

    def wait_billing_stopped(self, lab: Lab, cluster: str, nodegroup: str) -> None:
        return None  # the world's nodes are gone once the view shows them gone

    def destroy(self, lab: Lab, console: Console) -> None:
        if process.stop(lab.paths.sim_dir):
            console.say("    rehearsal backend stopped")

    def idle_message(self, lab: Lab, reachable: bool) -> str:
        state = "is at 0" if reachable else "is not running (nothing to scale)"
        return (
            f"Rehearsal lab {lab.name!r} {state}; nothing bills. `lab.down --destroy` removes it."
        )

    def proof(self) -> dict[str, list[str]]:
        return {
            "proves": [
                "the orchestration: guard, prerequisites, baseline, journal entry before the "
                "mutation, inject, watch-based detection, revert, recovery checks and the "
                "comparison with the baseline",
                "the debugging path: every finding was read from cluster objects through the "
                "official client, the way a person reads them, with the real message formats",
            ],
            "does_not_prove": [
                "anything about AWS or EKS: instances, the NVIDIA AMI, the real GPU Operator, "
                "device plugin, kubelet and scheduler are played by the rehearsal world",
                "real timings: T+ values are the rehearsal's; the 'real-time' column only "
                "scales them by the speed factor",
                "the steps marked 'real cluster only' (node internals)",
            ],
        }

    def env_exports(self, lab: Lab) -> dict[str, str]:
        endpoints = read_json(lab.paths.sim_dir / "endpoints.json", {}) or {}
        return {
            "AWS_ENDPOINT_URL": str(endpoints.get("aws_endpoint_url", "")),
            "AWS_ACCESS_KEY_ID": SIM_CREDENTIALS["aws_access_key_id"],
            "AWS_SECRET_ACCESS_KEY": SIM_CREDENTIALS["aws_secret_access_key"],
        }


def _forget_old_world(lab: Lab, console: Console) -> None:
    """A restarted rehearsal process holds an empty world: rebuild the lab from scratch.

    Faults in the journal were injected into the world that is gone, so they are closed.
    """
    console.say("    the rehearsal backend restarted with an empty world: rebuilding the lab")
    for entry in lab.journal.outstanding():
        lab.journal.mark(entry["id"], REVERTED)
        console.say(f"    {entry['scenario']}: its world is gone; journal entry closed")
    lab.record.update(phases={}, outputs={}, variables={}, speed=None, gpu_scaled_at=None)
    lab.save()
