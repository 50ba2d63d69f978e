"""A rehearsal lab: the background `labs.sim` process (moto + the Kubernetes control plane).

The only module outside `labs/sim/` that knows the rehearsal exists; everything else
talks to it through the same boto3 and kubernetes clients as to AWS.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any

from labs.errors import LabError
from labs.journal import REVERTED
from labs.settings import MODELLED_KUBELETS, REAL_KUBELETS, range_problem
from labs.sim import pace, process
from labs.sim.aws.auth import CREDENTIAL_KEYS
from labs.state import utc_now, warn

if TYPE_CHECKING:
    from labs.aws.cloud import AwsSession
    from labs.backends.base import Infra
    from labs.console import Console
    from labs.lab import Lab
    from labs.state import LabPaths

# Wall seconds a check or a settling wait gets at least on real kubelets: a new GPU node's
# operands and validator take about 40 s of real time on 2 idle cores, and the kubelet's
# back-offs are real seconds.
REAL_KUBELETS_CHECK_FLOOR = 180.0


class RehearsalBackend:
    name = "sim"
    bills = False
    keeps_files = True
    simulated = True

    def describe(self, lab: Lab) -> str:
        now, programs = self.speed(lab), self._program_speed(lab)
        if now == programs:
            return f"rehearsal, {now:g}x speed"
        return f"rehearsal, {now:g}x speed now (a person's pace; programs run it at {programs:g}x)"

    def _program_speed(self, lab: Lab) -> float:
        return float(lab.record.get("speed") or lab.settings.speed)

    def _world(self, lab: Lab) -> dict[str, Any] | None:
        """The running world's endpoints (None when no world was started)."""
        endpoints = process.recorded_endpoints(lab.paths.sim_dir)
        return endpoints if endpoints.get("pid") and endpoints.get("kube_token") else None

    def speed(self, lab: Lab) -> float:
        return self._speed_of(lab, self._world(lab))

    def _speed_of(self, lab: Lab, world: dict[str, Any] | None) -> float:
        try:
            return pace.read_speed(world) if world else self._program_speed(lab)
        except OSError:  # the world is not running: it starts at the lab's speed
            return self._program_speed(lab)

    @contextmanager
    def program_pace(self, lab: Lab) -> Iterator[None]:
        world = self._world(lab)
        before = self._speed_of(lab, world)
        wanted = self._program_speed(lab)
        if world is None or before == wanted:
            yield
            return
        pace.write_speed(world, wanted, calendar=False)
        try:
            yield
        finally:
            try:
                pace.write_speed(world, before, calendar=False)
            except OSError:  # the world went away meanwhile: nothing to restore
                pass

    def check_floor(self, lab: Lab) -> float | None:
        """Real kubelets keep real time (a new node's operands and validator, back-offs), so
        their world's checks get REAL_KUBELETS_CHECK_FLOOR wall seconds at least."""
        world = self._world(lab)
        real = world is not None and world.get("kubelets") == REAL_KUBELETS
        return REAL_KUBELETS_CHECK_FLOOR if real else None

    def person_speed(self, lab: Lab, wanted: float | None) -> float:
        speed = 1.0 if wanted is None else float(wanted)
        if problem := range_problem("speed", speed):
            raise LabError(f"--speed {wanted!r} {problem} (1 = real time). Nothing was changed.")
        return speed

    def set_speed(self, lab: Lab, speed: float) -> None:
        world = self._world(lab)
        if world is not None:  # a world that is not running starts at the lab's speed anyway
            pace.write_speed(world, speed)

    def now(self, lab: Lab) -> datetime:
        return pace.read_now(self._running(lab))

    def check_writable(self, lab: Lab, action: str) -> None:
        return None

    def left_files(self, paths: LabPaths) -> bool:
        return paths.sim_dir.is_dir()

    def recover(self, lab: Lab) -> dict[str, Any]:
        """What the running world says: its region, account, speed and the stack's outputs."""
        from labs.sim.infra import SimInfra

        endpoints = process.running_endpoints(lab.paths.sim_dir)
        if endpoints is None:
            return {}
        fields = {key: endpoints[key] for key in ("region", "account_id", "speed")}
        fields["sim_kube_url"] = endpoints["kube_url"]
        try:
            outputs = SimInfra(endpoints).outputs()
        except LabError as error:
            warn(f"could not read the rehearsal stack of lab {lab.name!r}: {error}")
            return fields
        return {**fields, "outputs": outputs, "phases": {"infra": utc_now()}}

    def start(self, lab: Lab, console: Console) -> None:
        """Start the world unless it runs; a new one is left at a person's pace (real time):
        programs speed it up only for their own runs (`program_pace`)."""
        silent = process.why_silent(lab.paths.sim_dir)
        _refuse_a_second_world(lab, silent)
        if full := process.disk_full(lab.paths.sim_dir):
            raise LabError(
                f"the rehearsal backend of lab {lab.name!r} cannot run: {full}; then run "
                f"`invoke lab.up --lab {lab.name}` again (`invoke lab.down --lab {lab.name}` "
                "scales its GPU nodes to 0 meanwhile). Nothing was started."
            )
        if silent is None and (ailing := process.ailing(lab.paths.sim_dir)):
            console.say(
                f"    the rehearsal backend cannot move ({'; '.join(ailing)}): restarting it; "
                "its world starts empty and lab.up builds the lab again"
            )
            process.stop(lab.paths.sim_dir)
            silent = "restarted"
        new = silent is not None
        endpoints = process.start(
            lab.paths.sim_dir, lab.settings.speed, lab.name, lab.region, lab.settings.kubelets
        )
        if new:
            pace.write_speed(endpoints, self.person_speed(lab, None))
        kubelets = endpoints.get("kubelets", MODELLED_KUBELETS)
        console.say(
            f"    rehearsal backend: kube {endpoints['kube_url']}, aws "
            f"{endpoints['aws_endpoint_url']} (pid {endpoints['pid']}, {kubelets} kubelets)"
        )
        if kubelets != lab.settings.kubelets:
            console.say(
                f"    note: its nodes run {kubelets} kubelets, not the {lab.settings.kubelets} "
                f"ones asked for: a running world keeps its own; `invoke lab.down --lab "
                f"{lab.name} --destroy --yes` then `lab.up` starts one with them"
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
                f"  would start the rehearsal backend (speed x{lab.settings.speed:g}, "
                f"{lab.settings.kubelets} kubelets) in {lab.paths.sim_dir}"
            )
        return not new

    def _running(self, lab: Lab) -> dict[str, Any]:
        """The live process's endpoints, or a LabError saying how to start it again."""
        why = process.why_silent(lab.paths.sim_dir)
        if why is not None:
            raise LabError(
                f"the rehearsal backend of lab {lab.name!r} does not answer: {why}. "
                f"`invoke lab.up --lab {lab.name}` starts it again (or says how), "
                f"`invoke lab.down --lab {lab.name} --destroy` removes the lab"
            )
        return process.recorded_endpoints(lab.paths.sim_dir)

    def infra(self, lab: Lab) -> Infra:
        from labs.sim.infra import SimInfra

        return SimInfra(self._running(lab))

    def aws_session(self, lab: Lab) -> AwsSession:
        from labs.aws.cloud import aws_session

        endpoints = self._running(lab)
        credentials = {key: endpoints[key] for key in CREDENTIAL_KEYS}
        return aws_session(
            lab.region, endpoint_url=endpoints["aws_endpoint_url"], credentials=credentials
        )

    def kube_client(self, lab: Lab) -> Any:
        from labs.kube.view import lab_api_client

        return lab_api_client(lab.paths.kubeconfig, lab.name)

    def write_kubeconfig(self, lab: Lab) -> None:
        shutil.copyfile(lab.paths.sim_dir / "kubeconfig", lab.paths.kubeconfig)
        lab.paths.kubeconfig.chmod(0o600)

    def unreachable(self, lab: Lab) -> str | None:
        why = process.why_silent(lab.paths.sim_dir)
        if why is None:
            return None
        return f"the rehearsal backend of lab {lab.name!r} does not answer: {why}"

    def stop_orphans(self, paths: LabPaths) -> list[int]:
        return process.stop(paths.sim_dir)

    def ailing(self, lab: Lab) -> list[str]:
        return process.ailing(lab.paths.sim_dir)

    def stop_unreachable(self, lab: Lab, why: str, console: Console) -> str | None:
        """Its world lives only in its processes: found by their state directory and stopped,
        no node of it runs."""
        pids = process.stop(lab.paths.sim_dir)
        found = f"found by their state directory {lab.paths.sim_dir}"
        if pids:
            console.say(
                f"==> {why}. Stopped its backend process(es) {', '.join(map(str, pids))} "
                f"({found}): no node of it runs now. `invoke lab.up --lab {lab.name}` starts an "
                "empty world again."
            )
        else:
            console.say(
                f"==> {why}. No process of its backend runs (none {found}): no node of it runs."
            )
        return None

    def wait_billing_stopped(self, lab: Lab, cluster: str, nodegroup: str) -> None:
        return None  # the world's nodes are gone once the view shows them gone

    def destroy(self, lab: Lab, console: Console) -> None:
        for pid in process.stop(lab.paths.sim_dir):
            console.say(f"    rehearsal backend stopped (pid {pid})")

    def idle_message(self, lab: Lab, gpu_state: str | None) -> str:
        if gpu_state is None:
            state = "its GPU node group could not be read (see above)"
        else:
            state = f"{gpu_state}; a rehearsal bills nothing"
        return f"Rehearsal lab {lab.name!r}: {state}. `lab.down --destroy` removes it."

    def proof(self) -> dict[str, list[str]]:
        from labs.sim.controlplane.build import GPU_OPERATOR_PROGRAM

        operator = GPU_OPERATOR_PROGRAM.version()
        return {
            "proves": [
                "the orchestration: guard, prerequisites, baseline, journal entry before the "
                "mutation, inject, watch-based detection, revert, recovery checks and the "
                "comparison with the baseline",
                f"the GPU Operator's side of the fault: NVIDIA's own {operator} controller "
                "reconciled the ClusterPolicy, on the real Kubernetes control plane",
                "the debugging path: every finding was read from cluster objects through the "
                "official client, the way a person reads them, with the real message formats",
            ],
            "does_not_prove": [
                "anything about AWS or EKS: the AWS APIs are moto's, and EC2 instances, the "
                "NVIDIA AMI and the security groups' effect on traffic are played by the "
                "rehearsal world",
                "the node side: the kubelets, the container runtime, the operands' containers "
                "(device plugin, GPU feature discovery, validator), the GPUs and what "
                "containers print (nvidia-smi, NCCL: replayed from recordings on real GPUs) "
                "are the world's models; the API server, scheduler, controller manager, the "
                "GPU Operator's controller, Prometheus and kube-state-metrics are the real "
                "programs",
                f"the stack's GPU Operator release: the rehearsal runs NVIDIA's {operator} "
                "controller and chart (installed by the real helm with the stack's values), "
                "the stack installs the release `gpu_operator_chart_version` names; the README "
                "lists what differs",
                "real timings: T+ values are the rehearsal's; the '~N s real' figures scale "
                "them by the speed factor, which holds for the world's delays but not for "
                "Prometheus' scrapes and evaluations (see the alerts section for EKS's)",
                "the steps marked 'real cluster only' (node internals)",
            ],
        }

    def lose_gpu(self, lab: Lab, node: str, xid: int) -> None:
        """The world marks the GPU lost (`labs.sim.node.gpu_faults`)."""
        from labs.sim.node.gpu_faults import lose_gpu

        lose_gpu(self._running(lab), node, xid)

    def set_node_os(self, lab: Lab, node: str, family: str) -> None:
        """The world switches the node's AMI family (`labs.sim.node.node_os`)."""
        from labs.sim.node.node_os import switch

        switch(self._running(lab), node, family)

    def env_exports(self, lab: Lab) -> dict[str, str]:
        """moto's endpoint and stand-in keys; first on PATH the kubectl of the control plane's
        release (no version-skew warning) and the lab's helm (`helm list -n gpu-operator` as
        on EKS)."""
        from labs.sim.controlplane.build import HELM_PROGRAM, binaries_dir, program_path

        endpoints = process.recorded_endpoints(lab.paths.sim_dir)
        exports = {"AWS_ENDPOINT_URL": str(endpoints.get("aws_endpoint_url", ""))}
        path = os.environ.get("PATH", "").split(os.pathsep)
        first = [str(binaries_dir()), str(program_path(HELM_PROGRAM).parent)]
        if path[: len(first)] != first:
            exports["PATH"] = os.pathsep.join([*first, *(p for p in path if p and p not in first)])
        return exports | {key.upper(): str(endpoints.get(key, "")) for key in CREDENTIAL_KEYS}


def _refuse_a_second_world(lab: Lab, why: str | None) -> None:
    """One backend per lab: a process of the lab's that does not answer (`why`: frozen, wrong
    ports in its endpoints file) keeps its world, so a second one would orphan it."""
    pids = process.processes(lab.paths.sim_dir) if why else []
    if pids:
        raise LabError(
            f"refusing lab.up: the rehearsal backend of lab {lab.name!r} runs as pid "
            f"{', '.join(map(str, pids))} but does not answer ({why}); a second one would "
            f"orphan its world. Stop it with `invoke lab.down --lab {lab.name}` (or resume a "
            f"stopped one with `kill -CONT {pids[0]}`), then run lab.up again. Nothing was started."
        )


def _forget_old_world(lab: Lab, console: Console) -> None:
    """A restarted rehearsal process holds an empty world: rebuild the lab from scratch.

    Faults in the journal were injected into the world that is gone, so they are closed.
    """
    console.say("    the rehearsal backend restarted with an empty world: rebuilding the lab")
    for entry in lab.journal.outstanding():
        lab.journal.mark(entry["id"], REVERTED)
        console.say(f"    {entry['scenario']}: its world is gone; journal entry closed")
    lab.record.update(
        phases={}, outputs={}, variables={}, speed=None, gpu_scaled_at=None, gpu_ttl_at=None
    )
    lab.save()
