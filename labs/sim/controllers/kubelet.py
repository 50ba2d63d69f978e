"""kubelet on every node: runs the pods bound to it and plays what their containers print.

A bound pod is admitted first: what it requests must fit the node's allocatable minus what
the pods already admitted there hold. A device-plugin resource (`nvidia.com/gpu`) that does
not fit fails the pod with `UnexpectedAdmissionError` (`Allocate failed due to no healthy
devices present; ...` when the node has none healthy), any other resource with
`OutOf<resource>`, as kubelet rejects a pod pinned with `nodeName` that the scheduler never
checked. An admitted pod gets `Pulled` (image already present), `Created` and `Started`
Events after `container_start`, turns Running, and Ready after its startup time (the pod
annotation `sim.eks-gpu-lab/startup-seconds` in real-world seconds, an operand DaemonSet's
`operand_first_ready`/`operand_all_ready`, else `container_ready`). A pod whose
RuntimeClass handler the node's containerd lacks never gets that far: it stays
ContainerCreating, a `FailedCreatePodSandBox` Event per attempt, tried again after the pod
worker's back-off (`labs.sim.node.sandbox`).

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

A pod's `initContainers` run first, one after the other, each with its program where the
world plays it (`labs.sim.node.programs.run_init`; the image's own process, which it does not
model, succeeds at once). A program that runs for a while (`programs.start_init`: the GPU
Operator's validator) is stepped at each of its sleeps, its container running meanwhile, so
the one loop of every node's kubelet never waits on it. While they run the pod is Pending,
`Initialized` False. One that
exits non-zero fails a restartPolicy Never pod (`Init:Error`); otherwise it is started again
after the kubelet's crash back-off (`crash_backoff`, restartCount one more each time), waiting
`CrashLoopBackOff` in between with a `BackOff` Event (`Init:CrashLoopBackOff`). A restartPolicy
Always pod's container whose long-running program the world plays (`run_daemon`) and which
exits crash-loops the same way, its pod not Ready. An init container containerd cannot start
(the NVIDIA runtime's hook failing, `labs.sim.node.node_os.start_error`) gets a `Failed` Event
instead of `Started`, ends `StartError` with exit code 128 and backs off the same way. Each
container's output goes to its own log,
the last ended run's also kept for `kubectl logs --previous`.
"""

from __future__ import annotations

import ipaddress
import logging
import random
import time
from collections.abc import Callable, Sequence
from decimal import Decimal

from kubernetes.utils import parse_quantity as quantity

from labs.kube.api import KubeApi
from labs.kube.informers import InformedKubeApi
from labs.kube.resources import NODES, PODS, RUNTIME_CLASSES, NotFound, now_rfc3339
from labs.sim.controllers.base import Controller
from labs.sim.controllers.events import EventRecorder
from labs.sim.controllers.network import Outcome, PodProgram, command_text
from labs.sim.controllers.placement import (
    STARTUP_ANNOTATION,
    pod_is_terminal,
    pod_requests,
    set_pod_condition,
)
from labs.sim.node.container_logs import ContainerLogs
from labs.sim.node.hardware import GPU_NAME
from labs.sim.node.node_os import START_ERROR_EXIT, START_ERROR_REASON, start_error
from labs.sim.node.nvidia_runtime import injected_gpus
from labs.sim.node.programs import (
    LongRun,
    go_duration,
    run_container,
    run_daemon,
    run_init,
    start_init,
)
from labs.sim.node.sandbox import (
    RETRY_JITTER,
    RETRY_SECONDS,
    SANDBOX_EVENT,
    SandboxFailures,
    sandbox_error,
)
from labs.sim.timings import REAL_WORLD_SECONDS, Timings

log = logging.getLogger(__name__)
# kubelet's crash-loop back-off (real seconds): 10 s, doubled per restart, at most 5 minutes.
BACKOFF_FIRST, BACKOFF_MAX = 10.0, 300.0


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
        programs: Sequence[PodProgram] = (),
    ) -> None:
        super().__init__(store, timings)
        self._logs = logs
        self._programs = [*programs, CudaCheck(), Commands(store)]
        self._events = EventRecorder(store, "kubelet")
        # pod uid -> (wall time of the next step, step name)
        self._plans: dict[str, tuple[float, str]] = {}
        self._outcomes: dict[str, Outcome] = {}
        self._sandboxes: dict[str, SandboxFailures] = {}  # pod uid -> its refused sandboxes
        self._init_runs: dict[str, tuple[str, LongRun]] = {}  # pod uid -> its running init

    def reconcile(self) -> float | None:
        now = time.monotonic()
        # Pods first: a pod is bound only after its node advertised the GPU, so a node read
        # after the pods is older than the bind only when the nodes' watch lags the pods' (the
        # two are separate streams); `_admit` re-reads the node before it rejects for that.
        bound = self.store.list(PODS)[0]
        nodes = {n["metadata"]["name"]: n for n in self.store.list(NODES)[0]}
        pods = [p for p in bound if p["spec"].get("nodeName") in nodes]
        for pod in [p for p in pods if p["metadata"].get("deletionTimestamp")]:
            self._terminate(pod)
            pods.remove(pod)
        live = {p["metadata"]["uid"] for p in pods}
        self._plans = {uid: plan for uid, plan in self._plans.items() if uid in live}
        self._outcomes = {uid: o for uid, o in self._outcomes.items() if uid in live}
        self._init_runs = {uid: r for uid, r in self._init_runs.items() if uid in live}
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
            if rejection is not None:
                # A real kubelet admits against its device manager's own state; the node this
                # pass holds may be older than the one the scheduler bound the pod from.
                node = self.store.plain.get(NODES, name)
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
        """Admitted and not finished: what it requests is taken on its node. Read again from
        the informer, which has this kubelet's own writes: a pod this pass finished (the GPU
        Operator's validation workload, done in an instant at the world's pace) holds nothing,
        as the device manager frees a finished pod's devices."""
        try:
            pod = self.store.get(PODS, pod["metadata"]["name"], pod["metadata"]["namespace"])
        except NotFound:
            return False
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
        if step in ("start", "init"):
            refused = self._sandbox_refused(pod, node, now) if step == "start" else None
            if refused is not None:
                return refused
            blocked, retry = self._initialize(pod, node, now)
            if blocked:
                return retry
            self._start(pod, node)
            ready_in = self._startup_seconds(pod)
            if pod["spec"].get("restartPolicy", "Always") == "Always" or _interactive(pod):
                crashed = self._run_daemons(pod, node, now)
                return crashed or (now + ready_in, "ready")
            outcome = self._program(pod).run(pod, node, self.timings)
            self._outcomes[pod["metadata"]["uid"]] = outcome
            self._update(pod, lambda p: _set_ready(p, True))
            return now + outcome.duration, "finish"
        if step == "ready":
            self._update(pod, _ready_if_running)
            return None
        if step == "restart":
            return self._run_daemons(pod, node, now, again=True) or (
                now + self.timings.container_ready,
                "ready",
            )
        outcome = self._outcomes.pop(pod["metadata"]["uid"])
        if outcome.again:
            outcome = self._outcomes[pod["metadata"]["uid"]] = self._program(pod).run(
                pod, node, self.timings
            )
            return now + outcome.duration, "finish"
        self._logs.append(pod, outcome.log)
        self._update(pod, finish_container(None, outcome.exit_code))
        return None

    def _initialize(
        self, pod: dict, node: dict, now: float
    ) -> tuple[bool, tuple[float, str] | None]:
        """Run the pod's init containers not yet done, in order: (False, None) once all have
        succeeded; (True, the next attempt after the back-off, or None: failed for good)."""
        done = {
            s["name"]
            for s in (pod.get("status") or {}).get("initContainerStatuses") or []
            if ((s.get("state") or {}).get("terminated") or {}).get("exitCode", 1) == 0
        }
        host = node["metadata"]["name"]
        addresses = internal_ip(node), pod_ip_on(node, pod)
        for container in pod["spec"].get("initContainers") or []:
            name = container["name"]
            if name in done:
                continue
            running = self._init_runs.get(pod["metadata"]["uid"], ("",))[0] == name
            refused = None if running else start_error(self.store, pod, container, node)
            if refused is None:
                ended, sleep = self._run_init(pod, container, node, addresses)
                if ended is None:  # still running: its next step after its sleep
                    return True, (now + sleep / self.timings.speed, "init")
                code = ended
            else:
                code = self._start_failed(pod, container, host, refused)
            if code == 0:
                self._update(pod, _init_ran(name, 0, "", addresses))
                continue
            reason = "" if refused is None else START_ERROR_REASON
            if pod["spec"].get("restartPolicy", "Always") == "Never":
                self._update(pod, _init_ran(name, code, "", addresses, reason))
                return True, None
            backoff = crash_backoff(_restarts_after(pod, name))
            message = self._back_off(pod, name, host, backoff)
            self._update(pod, _init_ran(name, code, message, addresses, reason))
            return True, (now + backoff / self.timings.speed, "init")
        return False, None

    def _run_init(
        self, pod: dict, container: dict, node: dict, addresses: tuple[str, str]
    ) -> tuple[int | None, float]:
        """Start init container `container`, or let its long-running program (`start_init`)
        run on: (its exit code once it ended, else None; the real seconds it now sleeps)."""
        uid, name, host = pod["metadata"]["uid"], container["name"], node["metadata"]["name"]
        running = self._init_runs.get(uid)
        if running is None or running[0] != name:
            self._container_events(pod, container, host)
            started = start_init(self.store, pod, container, node)
            if started is None:
                text, code = run_init(self.store, pod, container, node)
                self._logs.restarted(pod, name, text, "stderr")
                self._logs.ended(pod, name)
                return code, 0.0
            printed, ended, sleep = started.step()
            # the new run's log appears holding its first lines: never empty between two runs
            self._logs.restarted(pod, name, printed, "stderr")
            self._update(pod, _init_started(name, addresses))
            self._init_runs[uid] = (name, started)
        else:
            printed, ended, sleep = running[1].step()
            self._logs.append(pod, printed, name, "stderr")
        if ended is not None:
            del self._init_runs[uid]
            self._logs.ended(pod, name)
        return ended, sleep

    def _run_daemons(
        self, pod: dict, node: dict, now: float, again: bool = False
    ) -> tuple[float, str] | None:
        """Start the pod's long-running programs the world plays (`again`: only those waiting
        in CrashLoopBackOff, each restartCount one more); the next restart after the back-off
        while one of them exited, else None."""
        host = node["metadata"]["name"]
        waits = []
        for container in pod["spec"].get("containers") or []:
            name = container["name"]
            if again:
                if _waiting_reason(pod, name) != "CrashLoopBackOff":
                    continue
                self._container_events(pod, container, host)
            started = run_daemon(self.store, pod, container, node)
            if started is None:
                continue
            text, code = started
            self._logs.restarted(pod, name, text, "stderr")
            if again:
                self._update(pod, container_restarted(name, ready=False))
            if code is None:
                continue
            self._logs.ended(pod, name)
            backoff = crash_backoff(_restart_count(pod, name) + (1 if again else 0))
            message = self._back_off(pod, name, host, backoff)
            self._update(pod, container_crashed(code, name, message))
            waits.append(backoff / self.timings.speed)
        return (now + min(waits), "restart") if waits else None

    def _back_off(self, pod: dict, name: str, host: str, backoff: float) -> str:
        """Container `name` waits `backoff` real seconds before its next start: the `BackOff`
        Event and the waiting message, as doBackOff words them (kubernetes v1.35.4
        pkg/kubelet/kuberuntime/kuberuntime_manager.go:1844 and :1847)."""
        pod_text = format_pod(pod)
        self._events.record(
            pod,
            "BackOff",
            f"Back-off restarting failed container {name} in pod {pod_text}",
            "Warning",
            host=host,
        )
        return f"back-off {go_duration(backoff)} restarting failed container={name} pod={pod_text}"

    def _start_failed(self, pod: dict, container: dict, host: str, error: str) -> int:
        """Container created but containerd could not start it (`labs.sim.node.node_os`): the
        `Failed` Event as kubelet's startContainer words it (kubernetes v1.35
        pkg/kubelet/kuberuntime/kuberuntime_container.go, step 3: FailedToStartContainer,
        `Error: %v`); the exit code containerd reports for it."""
        image = container.get("image", "")
        self._events.record(
            pod, "Pulled", f'Container image "{image}" already present on machine', host=host
        )
        self._events.record(pod, "Created", "Container created", host=host)
        self._events.record(pod, "Failed", f"Error: {error}", "Warning", host=host)
        return START_ERROR_EXIT

    def _container_events(self, pod: dict, container: dict, host: str) -> None:
        """What kubelet records as it starts one container: image present, created, started."""
        image = container.get("image", "")
        self._events.record(
            pod, "Pulled", f'Container image "{image}" already present on machine', host=host
        )
        self._events.record(pod, "Created", "Container created", host=host)
        self._events.record(pod, "Started", "Container started", host=host)

    def _sandbox_refused(self, pod: dict, node: dict, now: float) -> tuple[float, str] | None:
        """The pod's sandbox refused by containerd (a runtime handler it lacks): the Event,
        and the next attempt after the pod worker's back-off; None once it is created."""
        self._sandboxes = {u: f for u, f in self._sandboxes.items() if u in self._plans}
        error = sandbox_error(self._runtime_handler(pod), node)
        if error is None:
            return None
        failures = self._sandboxes.setdefault(pod["metadata"]["uid"], SandboxFailures())
        message, combined = failures.message(error, now)
        host, series = node["metadata"]["name"], SANDBOX_EVENT if combined else None
        self._events.record(pod, SANDBOX_EVENT, message, "Warning", host, series)
        backoff = RETRY_SECONDS * (1 + RETRY_JITTER * random.random())
        return now + backoff / self.timings.speed, "start"

    def _runtime_handler(self, pod: dict) -> str:
        """The handler of the pod's RuntimeClass ("" for none: containerd's default)."""
        name = pod["spec"].get("runtimeClassName")
        if not name:
            return ""
        try:
            return str(self.store.get(RUNTIME_CLASSES, name).get("handler") or "")
        except NotFound:  # admission refuses such pods; one deleted since is not the sandbox's
            return ""

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

    def _program(self, pod: dict) -> PodProgram:
        return next(p for p in self._programs if p.matches(pod))

    def _start(self, pod: dict, node: dict) -> None:
        host = node["metadata"]["name"]
        for container in pod["spec"].get("containers") or []:
            self._container_events(pod, container, host)
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


def _placed(pod: dict, host_ip: str, pod_ip: str) -> dict:
    """The pod's status with its sandbox's addresses and start time set."""
    status = pod.setdefault("status", {})
    status.update(
        hostIP=host_ip,
        hostIPs=[{"ip": host_ip}],
        podIP=pod_ip,
        podIPs=[{"ip": pod_ip}],
        startTime=status.get("startTime") or now_rfc3339(),
    )
    return status


def _run(pod: dict, host_ip: str, pod_ip: str) -> None:
    stamp = now_rfc3339()
    status = _placed(pod, host_ip, pod_ip)
    status["phase"] = "Running"
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
    why `kubectl logs` answers "waiting to start") until they start; behind init containers
    every container waits in PodInitializing (`Init:0/N`)."""
    inits = pod["spec"].get("initContainers") or []
    reason = "PodInitializing" if inits else "ContainerCreating"
    status = pod.setdefault("status", {})
    status["containerStatuses"] = [
        _waiting_status(c, reason) for c in pod["spec"].get("containers") or []
    ]
    if inits:
        status["initContainerStatuses"] = [_waiting_status(c, reason) for c in inits]


def _waiting_status(container: dict, reason: str) -> dict:
    return {
        "name": container["name"],
        "image": container.get("image", ""),
        "imageID": "",
        "ready": False,
        "restartCount": 0,
        "started": False,
        "state": {"waiting": {"reason": reason}},
    }


def _statuses(pod: dict) -> list[dict]:
    """The pod's init container statuses, then its containers'."""
    status = pod.get("status") or {}
    return [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]


def _restart_count(pod: dict, name: str) -> int:
    return next((int(s.get("restartCount", 0)) for s in _statuses(pod) if s["name"] == name), 0)


def _restarts_after(pod: dict, name: str) -> int:
    """The init container's restartCount once the run that just ended is counted: one more
    than before when an earlier run had ended (the kubelet counts each start after the first)."""
    found = next((s for s in _statuses(pod) if s["name"] == name), {})
    state = found.get("state") or {}
    ran = ("terminated" in state or bool(found.get("lastState"))) and "running" not in state
    return int(found.get("restartCount", 0)) + (1 if ran else 0)


def _waiting_reason(pod: dict, name: str) -> str:
    found = next((s for s in _statuses(pod) if s["name"] == name), {})
    return str(((found.get("state") or {}).get("waiting") or {}).get("reason", ""))


def _ran_before(entry: dict) -> bool:
    """An init container's status shows an ended run: its next start is a restart."""
    return "terminated" in entry["state"] or "terminated" in (entry.get("lastState") or {})


def _init_started(name: str, addresses: tuple[str, str]) -> Callable[[dict], None]:
    """An update for init container `name` started and running (a long-running program): its
    restartCount one more when an earlier run had ended, the last one kept in lastState."""

    def apply(pod: dict) -> None:
        status = _placed(pod, *addresses)
        entry = next((s for s in status.get("initContainerStatuses") or [] if s["name"] == name),
                     None)  # fmt: skip
        if entry is None:
            return
        if _ran_before(entry):
            entry["restartCount"] = entry.get("restartCount", 0) + 1
        entry["state"] = {"running": {"startedAt": now_rfc3339()}}
        entry.update(ready=False, started=True)
        _set_conditions(pod, {"PodReadyToStartContainers": "True"})

    return apply


def _init_ran(
    name: str, exit_code: int, backoff: str, addresses: tuple[str, str], reason: str = ""
) -> Callable[[dict], None]:
    """An update for init container `name` having run once more and ended with `exit_code`:
    Completed (ready), or its run in lastState and waiting CrashLoopBackOff with the `backoff`
    message (terminated Error when it is not restarted: restartPolicy Never, the pod Failed)."""

    def apply(pod: dict) -> None:
        status = _placed(pod, *addresses)
        stamp = now_rfc3339()
        inits = status.get("initContainerStatuses") or []
        entry = next((s for s in inits if s["name"] == name), None)
        if entry is None:
            return
        running = entry["state"].get("running")  # counted when it started (`_init_started`)
        if not running and _ran_before(entry):
            entry["restartCount"] = entry.get("restartCount", 0) + 1
        ended = {
            "exitCode": exit_code,
            "reason": reason or ("Completed" if exit_code == 0 else "Error"),
            "startedAt": (running or {}).get("startedAt", stamp),
            "finishedAt": stamp,
        }
        if exit_code == 0 or not backoff:
            entry["state"] = {"terminated": ended}
        else:
            entry["lastState"] = {"terminated": ended}
            entry["state"] = {"waiting": {"reason": "CrashLoopBackOff", "message": backoff}}
        entry.update(ready=exit_code == 0, started=False)
        incomplete = [
            s["name"]
            for s in inits
            if ((s.get("state") or {}).get("terminated") or {}).get("exitCode", 1) != 0
        ]
        if exit_code != 0 and not backoff:
            status["phase"] = "Failed"
        _set_conditions(pod, {"PodReadyToStartContainers": "True"})
        if incomplete:
            waiting = " ".join(incomplete)
            set_pod_condition(pod, "Initialized", "False", "ContainersNotInitialized",
                              f"containers with incomplete status: [{waiting}]")  # fmt: skip
            unready = " ".join(c["name"] for c in pod["spec"].get("containers") or [])
            for kind in ("Ready", "ContainersReady"):
                set_pod_condition(pod, kind, "False", "ContainersNotReady",
                                  f"containers with unready status: [{unready}]")  # fmt: skip

    return apply


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


def container_crashed(
    exit_code: int, name: str | None = None, backoff: str = ""
) -> Callable[[dict], None]:
    """An update for a pod (restartPolicy Always) whose container `name` (every one when
    None) ended: not ready, the ended run in lastState, waiting in CrashLoopBackOff (with the
    kubelet's `backoff` message), as `kubectl get pods` shows it."""

    def apply(pod: dict) -> None:
        stamp = now_rfc3339()
        for container in pod.setdefault("status", {}).get("containerStatuses") or []:
            if name is not None and container["name"] != name:
                continue
            started = container["state"].get("running", {}).get("startedAt", stamp)
            container["lastState"] = {
                "terminated": {
                    "exitCode": exit_code,
                    "reason": "Error",
                    "startedAt": started,
                    "finishedAt": stamp,
                }
            }
            waiting = {"reason": "CrashLoopBackOff"} | ({"message": backoff} if backoff else {})
            container["state"] = {"waiting": waiting}
            container.update(ready=False, started=False)
        _set_conditions(pod, {"Ready": "False", "ContainersReady": "False"})

    return apply


def container_restarted(name: str | None = None, ready: bool = True) -> Callable[[dict], None]:
    """An update for crashed container `name` (every one when None) started again: running,
    its restartCount one more, the pod Ready when `ready` (the program answers at once)."""

    def apply(pod: dict) -> None:
        stamp = now_rfc3339()
        for container in pod.setdefault("status", {}).get("containerStatuses") or []:
            if name is not None and container["name"] != name:
                continue
            container["state"] = {"running": {"startedAt": stamp}}
            container.update(restartCount=container.get("restartCount", 0) + 1, started=True)
        if ready:
            _set_ready(pod, True)

    return apply


def format_pod(pod: dict) -> str:
    """A pod as the kubelet names it in messages: `name_namespace(uid)` (kubernetes v1.35.4
    pkg/kubelet/util/format/pod.go:40)."""
    meta = pod["metadata"]
    return f"{meta['name']}_{meta.get('namespace', '')}({meta.get('uid', '')})"


def _set_conditions(pod: dict, wanted: dict[str, str]) -> None:
    for kind, value in wanted.items():
        set_pod_condition(pod, kind, value)
