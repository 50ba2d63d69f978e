"""kubelet's streaming side: `exec` and `attach` into the world's containers.

The node endpoint (the kubelet API the API server proxies `kubectl exec`/`attach` to) runs
`python -m labs.sim.node.exec_streams` for each stream, which lands here. Checks come first,
with the messages a real cluster gives: the pod must be bound to a node, the container must run.

`exec` runs the command through `labs.sim.node.programs`. `attach` joins the container's own
process: a container started with `stdin` (what `kubectl debug -i`/`kubectl run -i` create)
waits for its terminal, so its command runs when the first attach comes, reading the
session's input; when it ends, the container terminates with its exit code, its output
is the pod's log, and a run-to-completion pod finishes. Attaching to any other container
shows nothing and lasts until the pod stops running or the client leaves.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from labs.kube.api import KubeApi
from labs.kube.resources import NODES, PODS, BadRequest, NotFound
from labs.sim.controllers.kubelet import finish_container
from labs.sim.node.container_logs import ContainerLogs
from labs.sim.node.programs import Process, Terminal, container_command, exec_argv, run_default

POLL_SECONDS = 0.25


class Recorded:
    """A terminal that also keeps what the process printed, for the pod's log."""

    def __init__(self, term: Terminal) -> None:
        self._term = term
        self.tty = term.tty
        self.text = ""

    def read_line(self, prompt: str) -> str | None:
        self.text += prompt
        line = self._term.read_line(prompt)
        if line is not None and self.tty:
            self.text += line + "\n"
        return line

    def read_bytes(self) -> bytes:
        return self._term.read_bytes()

    def out(self, text: str) -> None:
        self.text += text
        self._term.out(text)

    def out_bytes(self, data: bytes) -> None:
        self.text += data.decode(errors="replace")
        self._term.out_bytes(data)

    def err(self, text: str) -> None:
        self.text += text
        self._term.err(text)


class ContainerRuntime:
    """exec/attach for the pods of one world, read through its API server."""

    def __init__(self, store: KubeApi, logs: ContainerLogs) -> None:
        self.store = store
        self._logs = logs

    def check(self, namespace: str, name: str, container: str | None) -> Process:
        """The process context of a running container; BadRequest/NotFound otherwise."""
        pod = self.store.get(PODS, name, namespace)
        containers = {c["name"]: c for c in pod["spec"].get("containers") or []}
        if container is None:
            if len(containers) != 1:
                raise BadRequest(
                    f"a container name must be specified for pod {name}, "
                    f"choose one of: [{' '.join(containers)}]"
                )
            container = next(iter(containers))
        if container not in containers:
            raise BadRequest(f"container {container} is not valid for pod {name}")
        node_name = pod["spec"].get("nodeName")
        if not node_name:
            raise BadRequest(f"pod {name} does not have a host assigned")
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        state = next((s.get("state") or {} for s in statuses if s["name"] == container), {})
        if "running" not in state:
            raise BadRequest(f'unable to upgrade connection: container not found ("{container}")')
        try:
            node = self.store.get(NODES, node_name)
        except NotFound:
            raise BadRequest(f"pod {name} is on node {node_name}, which is gone") from None
        rootfs = self._logs.rootfs(namespace, name, container)
        return Process(self.store, pod, containers[container], node, rootfs=rootfs)

    def exec(self, process: Process, command: list[str], term: Terminal) -> int:
        return exec_argv(command, process, term)

    def attach(self, process: Process, term: Terminal, gone: Callable[[], bool]) -> None:
        pod = process.pod
        marker = self._logs.path(
            pod["metadata"]["namespace"], pod["metadata"]["name"], process.container["name"]
        ).with_suffix(".attached")
        first = bool(process.container.get("stdin")) and _claim(marker)
        if not first:
            self._wait_while_running(process, gone)
            return
        recorded = Recorded(term)
        command = container_command(process.container)
        code = exec_argv(command, process, recorded) if command else run_default(process, recorded)
        self._logs.append(pod, recorded.text, process.container["name"])
        end = finish_container(process.container["name"], code)
        try:
            self.store.update(PODS, pod["metadata"]["name"], end, pod["metadata"]["namespace"])
        except NotFound:
            pass

    def _wait_while_running(self, process: Process, gone: Callable[[], bool]) -> None:
        meta = process.pod["metadata"]
        while not gone():
            try:
                pod = self.store.get(PODS, meta["name"], meta["namespace"])
            except NotFound:
                return
            if pod["metadata"]["uid"] != meta["uid"] or pod["status"].get("phase") != "Running":
                return
            time.sleep(POLL_SECONDS)


def _claim(marker: Path) -> bool:
    """True for the first caller only, across processes: the container's process runs once."""
    marker.parent.mkdir(parents=True, exist_ok=True)
    try:
        marker.touch(exist_ok=False)
    except FileExistsError:
        return False
    return True
