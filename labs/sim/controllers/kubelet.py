"""kubelet on every node: runs the pods bound to it and plays what their containers print.

A bound pod is admitted first: what it requests must fit the node's allocatable minus what
the pods already admitted there hold. A device-plugin resource (`nvidia.com/gpu`) that does
not fit fails the pod with `UnexpectedAdmissionError` (`Allocate failed due to no healthy
devices present; ...` when the node has none healthy), any other resource with
`OutOf<resource>`, as kubelet rejects a pod pinned with `nodeName` that the scheduler never
checked. An admitted pod gets `Pulled` (image already present), `Created` and `Started`
Events after `container_start`, turns Running, and Ready after its startup time (the pod
annotation `sim.eks-gpu-lab/startup-seconds` in real-world seconds, an operand DaemonSet's
`operand_first_ready`/`operand_all_ready`, else `container_ready`).

What a container does is decided by the first matching program:
- the network's programs (`labs.sim.controllers.network`): the TCP check and the all-reduce.
- `CudaCheck`: the PyTorch one-liner that asks `torch.cuda.is_available()`.
- `Commands`: any other container's command, run by the world's programs
  (`labs.sim.node.programs`: `nvidia-smi` sees what the NVIDIA runtime injected,
  `labs.sim.node.nvidia_runtime`; a container without a command prints nothing).
Only run-to-completion pods (restartPolicy Never or OnFailure) finish (Succeeded, or
Failed when the program exits non-zero); restartPolicy Always pods keep running, and so
does a container started with `stdin` (`kubectl debug -i`): its process waits for its
terminal and runs when `kubectl attach` comes (`labs.sim.node.container_runtime`).
"""

from __future__ import annotations

import ipaddress
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Protocol

from kubernetes.utils import parse_quantity as quantity

from labs.sim.controllers.base import Controller
from labs.sim.controllers.events import EventRecorder
from labs.sim.controllers.placement import (
    STARTUP_ANNOTATION,
    pod_is_terminal,
    pod_requests,
    set_pod_condition,
)
from labs.sim.controlplane.informers import InformedKubeApi
from labs.sim.controlplane.kube_api import KubeApi
from labs.sim.controlplane.resources import NODES, PODS, NotFound, now_rfc3339
from labs.sim.node.container_logs import ContainerLogs
from labs.sim.node.hardware import GPU_NAME
from labs.sim.node.nvidia_runtime import injected_gpus
from labs.sim.node.programs import run_container
from labs.sim.timings import REAL_WORLD_SECONDS, Timings

log = logging.getLogger(__name__)
# kubelet's crash-loop back-off (real seconds): 10 s, doubled per restart, at most 5 minutes.
BACKOFF_FIRST, BACKOFF_MAX = 10.0, 300.0


@dataclass(frozen=True)
class Outcome:
    """What a container printed, its exit code, and how long it took (wall seconds).

    `again`: not decided yet (a program waiting for its peers): run it again after `duration`.
    """

    log: str
    exit_code: int
    duration: float
    again: bool = False


class Program(Protocol):
    def matches(self, pod: dict) -> bool: ...

    def run(self, pod: dict, node: dict, timings: Timings) -> Outcome: ...


class CudaCheck:
    """The write-up's PyTorch check: False and 0 GPUs (exit 0) where the runtime injected none."""

    def matches(self, pod: dict) -> bool:
        return "torch.cuda.is_available()" in command_text(pod)

    def run(self, pod: dict, node: dict, timings: Timings) -> Outcome:
        count = injected_gpus(pod, node) or 0
        lines = [
            f"CUDA available: {count > 0}",
            f"GPU count: {count}",
            f"GPU name: {GPU_NAME if count else None}",
        ]
        return Outcome("".join(f"{line}\n" for line in lines), 0, timings.container_run)


class Commands:
    """Any container: its command run by the world's programs."""

    def __init__(self, store: KubeApi) -> None:
        self._store = store

    def matches(self, pod: dict) -> bool:
        return True

    def run(self, pod: dict, node: dict, timings: Timings) -> Outcome:
        log, code = "", 0
        for container in pod["spec"].get("containers") or []:
            text, status = run_container(self._store, pod, container, node)
            log, code = log + text, code or status
        return Outcome(log, code, timings.container_run)


class Kubelet(Controller):
    watched = (PODS, NODES)

    def __init__(
        self,
        store: InformedKubeApi,
        timings: Timings,
        logs: ContainerLogs,
        programs: Sequence[Program] = (),
    ) -> None:
        super().__init__(store, timings)
        self._logs = logs
        self._programs = [*programs, CudaCheck(), Commands(store)]
        self._events = EventRecorder(store, "kubelet")
        # pod uid -> (wall time of the next step, step name)
        self._plans: dict[str, tuple[float, str]] = {}
        self._outcomes: dict[str, Outcome] = {}

    def reconcile(self) -> float | None:
        now = time.monotonic()
        # Pods first: a pod is bound only after its node advertised the GPU, so a node read
        # after the pods is never older than the bind (read the other way round, a bind in
        # between would be admitted against a stale allocatable and rejected).
        bound = self.store.list(PODS)[0]
        nodes = {n["metadata"]["name"]: n for n in self.store.list(NODES)[0]}
        pods = [p for p in bound if p["spec"].get("nodeName") in nodes]
        for pod in [p for p in pods if p["metadata"].get("deletionTimestamp")]:
            self._terminate(pod)
            pods.remove(pod)
        live = {p["metadata"]["uid"] for p in pods}
        self._plans = {uid: plan for uid, plan in self._plans.items() if uid in live}
        self._outcomes = {uid: o for uid, o in self._outcomes.items() if uid in live}
        waits = []
        for pod in sorted(pods, key=_arrival):
            uid = pod["metadata"]["uid"]
            step = self._plans.get(uid) or self._admit(pod, nodes[pod["spec"]["nodeName"]], pods)
            if step is None:
                continue
            at, name = step
            if at <= now:
                step = self._advance(name, pod, nodes[pod["spec"]["nodeName"]], now)
            if step is None:
                self._plans.pop(uid, None)
            else:
                self._plans[uid] = step
                waits.append(step[0] - now)
        return min(waits, default=None)

    def _admit(self, pod: dict, node: dict, pods: list[dict]) -> tuple[float, str] | None:
        """The first step of a new pod on this node, or None (not new, or rejected)."""
        status = pod.get("status") or {}
        if status.get("phase", "Pending") != "Pending" or status.get("containerStatuses"):
            return None
        name = node["metadata"]["name"]
        admitted = [
            p
            for p in pods
            if p["spec"].get("nodeName") == name and p is not pod and self._holds_resources(p)
        ]
        try:
            rejection = admission_failure(pod, node, admitted)
        except ValueError as error:  # the API refuses such pods; never let one stop the node
            log.warning("kubelet on %s cannot admit %s: %s", name, pod["metadata"]["name"], error)
            return None
        if rejection is not None:
            self._reject(pod, node, *rejection)
            return None
        self._logs.start(pod)  # its containers are being created: their logs exist, empty
        self._update(pod, _creating)
        return time.monotonic() + self.timings.container_start, "start"

    def _holds_resources(self, pod: dict) -> bool:
        """Admitted and not finished: what it requests is taken on its node."""
        running = (pod.get("status") or {}).get("phase") == "Running"
        admitted = pod["metadata"]["uid"] in self._plans or running
        return admitted and not pod_is_terminal(pod)

    def _reject(self, pod: dict, node: dict, reason: str, message: str) -> None:
        def fail(current: dict) -> None:
            status = current.setdefault("status", {})
            status.update(phase="Failed", reason=reason, message=f"Pod was rejected: {message}")

        self._update(pod, fail)
        self._events.record(pod, reason, message, "Warning", host=node["metadata"]["name"])

    def _advance(self, step: str, pod: dict, node: dict, now: float) -> tuple[float, str] | None:
        if step == "start":
            self._start(pod, node)
            ready_in = self._startup_seconds(pod)
            if pod["spec"].get("restartPolicy", "Always") == "Always" or _interactive(pod):
                return now + ready_in, "ready"
            outcome = self._program(pod).run(pod, node, self.timings)
            self._outcomes[pod["metadata"]["uid"]] = outcome
            self._update(pod, lambda p: _set_ready(p, True))
            return now + outcome.duration, "finish"
        if step == "ready":
            self._update(pod, _ready_if_running)
            return None
        outcome = self._outcomes.pop(pod["metadata"]["uid"])
        if outcome.again:
            outcome = self._outcomes[pod["metadata"]["uid"]] = self._program(pod).run(
                pod, node, self.timings
            )
            return now + outcome.duration, "finish"
        self._logs.append(pod, outcome.log)
        self._update(pod, finish_container(None, outcome.exit_code))
        return None

    def _startup_seconds(self, pod: dict) -> float:
        """Wall seconds from now until the started pod is Ready."""
        annotations = {**self._rollout(pod), **(pod["metadata"].get("annotations") or {})}
        startup = annotations.get(STARTUP_ANNOTATION)
        if not startup:
            return self.timings.container_ready
        return max(float(startup) / self.timings.speed, 0.0)

    def _rollout(self, pod: dict) -> dict[str, str]:
        """A DaemonSet's pod starts like an operand: the first on any node takes longer than
        the rest."""
        owner = next(
            (o for o in pod["metadata"].get("ownerReferences") or [] if o["kind"] == "DaemonSet"),
            None,
        )
        if owner is None:
            return {}
        siblings = [
            p
            for p in self.store.list(PODS, pod["metadata"]["namespace"])[0]
            if any(o.get("uid") == owner["uid"] for o in p["metadata"].get("ownerReferences") or [])
        ]
        first = (
            min(siblings, key=_arrival, default=pod)["metadata"]["uid"] == pod["metadata"]["uid"]
        )
        startup = "operand_first_ready" if first else "operand_all_ready"
        return {STARTUP_ANNOTATION: str(REAL_WORLD_SECONDS[startup])}

    def _terminate(self, pod: dict) -> None:
        """A pod being deleted: its containers stop at once (the world's programs exit on
        SIGTERM), and the kubelet lets the API server remove it."""
        meta = pod["metadata"]
        self._plans.pop(meta["uid"], None)
        try:
            self.store.delete(
                PODS, meta["name"], meta["namespace"], {"uid": meta["uid"]}, grace_seconds=0
            )
        except NotFound:
            pass

    def _program(self, pod: dict) -> Program:
        return next(p for p in self._programs if p.matches(pod))

    def _start(self, pod: dict, node: dict) -> None:
        host = node["metadata"]["name"]
        for container in pod["spec"].get("containers") or []:
            image = container.get("image", "")
            self._events.record(
                pod, "Pulled", f'Container image "{image}" already present on machine', host=host
            )
            self._events.record(pod, "Created", "Container created", host=host)
            self._events.record(pod, "Started", "Container started", host=host)
        host_ip = internal_ip(node)
        self._update(pod, lambda p: _run(p, host_ip, pod_ip_on(node, p)))

    def _update(self, pod: dict, mutate: Callable[[dict], None]) -> None:
        try:
            self.store.update(PODS, pod["metadata"]["name"], mutate, pod["metadata"]["namespace"])
        except NotFound:
            pass


def admission_failure(pod: dict, node: dict, admitted: list[dict]) -> tuple[str, str] | None:
    """(reason, message) when `pod` does not fit beside the pods `admitted` on `node`.

    ValueError when a quantity does not parse.
    """
    status = node.get("status") or {}
    allocatable, capacity = status.get("allocatable") or {}, status.get("capacity") or {}
    used: dict[str, Decimal] = {}
    for holder in admitted:
        for resource, amount in pod_requests(holder).items():
            used[resource] = used.get(resource, Decimal(0)) + amount
    for resource, amount in sorted(pod_requests(pod).items()):
        if amount <= 0:
            continue
        total = quantity(allocatable.get(resource, "0"))
        free = total - used.get(resource, Decimal(0))
        if "/" in resource and resource in capacity:  # a device plugin's resource
            if total <= 0:
                cause = f"no healthy devices present; cannot allocate unhealthy devices {resource}"
            elif amount > free:
                cause = (
                    f"requested number of devices unavailable for {resource}. "
                    f"Requested: {amount}, Available: {max(free, Decimal(0))}"
                )
            else:
                continue
            message = f"Allocate failed due to {cause}, which is unexpected"
            return "UnexpectedAdmissionError", message
        if amount > free:
            return (
                f"OutOf{resource}",
                f"Node didn't have enough resource: {resource}, requested: {amount}, "
                f"used: {used.get(resource, Decimal(0))}, capacity: {total}",
            )
    return None


def command_text(pod: dict) -> str:
    """All containers' command and args as one string, for deciding what they do."""
    parts: list[str] = []
    for container in pod["spec"].get("containers") or []:
        parts += [str(x) for x in (container.get("command") or []) + (container.get("args") or [])]
    return " ".join(parts)


def _arrival(pod: dict) -> tuple[str, str]:
    """Admission order: creation time, then name (kubelet admits pods in arrival order)."""
    return pod["metadata"].get("creationTimestamp", ""), pod["metadata"]["name"]


def internal_ip(node: dict) -> str:
    for address in (node.get("status") or {}).get("addresses") or []:
        if address["type"] == "InternalIP":
            return address["address"]
    return "192.168.0.10"


def pod_ip_on(node: dict, pod: dict) -> str:
    """A secondary IP in the node's /22 (the VPC CNI gives pods VPC addresses); the same
    for the same pod and node, so a peer can know it before the pod runs."""
    network = ipaddress.ip_network(f"{internal_ip(node)}/22", strict=False)
    uid = pod["metadata"]["uid"]
    offset = 16 + int(uid.replace("-", "")[:8], 16) % (network.num_addresses - 32)
    return str(network.network_address + offset)


def _run(pod: dict, host_ip: str, pod_ip: str) -> None:
    stamp = now_rfc3339()
    status = pod.setdefault("status", {})
    status.update(
        phase="Running",
        hostIP=host_ip,
        hostIPs=[{"ip": host_ip}],
        podIP=pod_ip,
        podIPs=[{"ip": pod_ip}],
        startTime=status.get("startTime") or stamp,
    )
    status["containerStatuses"] = [
        {
            "name": c["name"],
            "image": c.get("image", ""),
            "imageID": "",
            "ready": False,
            "restartCount": 0,
            "started": True,
            "state": {"running": {"startedAt": stamp}},
        }
        for c in pod["spec"].get("containers") or []
    ]
    _set_conditions(pod, {"PodReadyToStartContainers": "True", "Initialized": "True"})
    _set_ready(pod, False)


def _creating(pod: dict) -> None:
    """Admitted: its containers wait in ContainerCreating (what `kubectl get pods` shows, and
    why `kubectl logs` answers "waiting to start") until they start."""
    pod.setdefault("status", {})["containerStatuses"] = [
        {
            "name": c["name"],
            "image": c.get("image", ""),
            "imageID": "",
            "ready": False,
            "restartCount": 0,
            "started": False,
            "state": {"waiting": {"reason": "ContainerCreating"}},
        }
        for c in pod["spec"].get("containers") or []
    ]


def _ready_if_running(pod: dict) -> None:
    """Ready, unless its process already ended (an attached session can end first)."""
    statuses = pod["status"].get("containerStatuses") or []
    if pod["status"].get("phase") == "Running" and all("running" in c["state"] for c in statuses):
        _set_ready(pod, True)


def _set_ready(pod: dict, ready: bool) -> None:
    value = "True" if ready else "False"
    _set_conditions(pod, {"Ready": value, "ContainersReady": value})
    for container in pod["status"].get("containerStatuses") or []:
        container["ready"] = ready


def _interactive(pod: dict) -> bool:
    """A container with stdin open waits for its terminal (`kubectl attach`)."""
    return any(c.get("stdin") for c in pod["spec"].get("containers") or [])


def finish_container(name: str | None, exit_code: int) -> Callable[[dict], None]:
    """An update that ends container `name` (all of them when None) with `exit_code`; a
    run-to-completion pod whose containers all ended is Succeeded, or Failed if one failed."""

    def apply(pod: dict) -> None:
        stamp = now_rfc3339()
        statuses = pod.setdefault("status", {}).get("containerStatuses") or []
        for container in statuses:
            if name is not None and container["name"] != name:
                continue
            started = container["state"].get("running", {}).get("startedAt", stamp)
            container["state"] = {
                "terminated": {
                    "exitCode": exit_code,
                    "reason": "Completed" if exit_code == 0 else "Error",
                    "startedAt": started,
                    "finishedAt": stamp,
                }
            }
            container.update(ready=False, started=False)
        ended = [c["state"].get("terminated") for c in statuses]
        if pod["spec"].get("restartPolicy", "Always") != "Always" and all(ended):
            failed = any(t["exitCode"] != 0 for t in ended if t)
            pod["status"]["phase"] = "Failed" if failed else "Succeeded"
        _set_conditions(pod, {"Ready": "False", "ContainersReady": "False"})

    return apply


def crash_backoff(restarts: int) -> float:
    """kubelet's crash-loop back-off before restart number `restarts` + 1 (real seconds)."""
    return float(min(BACKOFF_FIRST * 2**restarts, BACKOFF_MAX))


def container_crashed(exit_code: int) -> Callable[[dict], None]:
    """An update for a pod (restartPolicy Always) whose container's process ended: not ready,
    the ended run in lastState, waiting in CrashLoopBackOff, as `kubectl get pods` shows it."""

    def apply(pod: dict) -> None:
        stamp = now_rfc3339()
        for container in pod.setdefault("status", {}).get("containerStatuses") or []:
            started = container["state"].get("running", {}).get("startedAt", stamp)
            container["lastState"] = {
                "terminated": {
                    "exitCode": exit_code,
                    "reason": "Error",
                    "startedAt": started,
                    "finishedAt": stamp,
                }
            }
            container["state"] = {"waiting": {"reason": "CrashLoopBackOff"}}
            container.update(ready=False, started=False)
        _set_conditions(pod, {"Ready": "False", "ContainersReady": "False"})

    return apply


def container_restarted(pod: dict) -> None:
    """The update for a crashed container started again (and answering): running and ready,
    its restartCount one more."""
    stamp = now_rfc3339()
    for container in pod.setdefault("status", {}).get("containerStatuses") or []:
        container["state"] = {"running": {"startedAt": stamp}}
        container.update(restartCount=container.get("restartCount", 0) + 1, started=True)
    _set_ready(pod, True)


def _set_conditions(pod: dict, wanted: dict[str, str]) -> None:
    for kind, value in wanted.items():
        set_pod_condition(pod, kind, value)
