"""kubelet's streaming side: `exec` and `attach` into the world's containers.

The API emulator hands a pod's exec/attach stream here (as the API server proxies it to
the pod's kubelet). Checks happen before the stream opens, with the messages a real
cluster gives: the pod must exist and be bound to a node, the container must exist and run.

`exec` runs the command through `labs.sim.programs`. `attach` joins the container's own
process: a container started with `stdin` (what `kubectl debug -i`/`kubectl run -i` create)
waits for its terminal, so its command runs when the first attach comes, reading the
session's input; when it ends, the container terminates with its exit code, its output
is the pod's log, and a run-to-completion pod finishes. Attaching to any other container
shows nothing and lasts until the pod stops running or the client leaves.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from labs.sim.controllers.kubelet import finish_container
from labs.sim.programs import Process, Terminal, container_command, exec_argv, run_default
from labs.sim.store import NODES, PODS, BadRequest, NotFound, ObjectStore

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

    def out(self, text: str) -> None:
        self.text += text
        self._term.out(text)

    def err(self, text: str) -> None:
        self.text += text
        self._term.err(text)


class ContainerRuntime:
    """exec/attach for the pods of one world's store."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        self._attached: set[str] = set()  # interactive containers whose process has run
        self._lock = threading.Lock()

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
        return Process(self.store, pod, containers[container], node)

    def exec(self, process: Process, command: list[str], term: Terminal) -> int:
        return exec_argv(command, process, term)

    def attach(self, process: Process, term: Terminal, gone: Callable[[], bool]) -> None:
        pod = process.pod
        key = f"{pod['metadata']['uid']}/{process.container['name']}"
        with self._lock:
            first = process.container.get("stdin") and key not in self._attached
            self._attached.add(key)
        if not first:
            self._wait_while_running(process, gone)
            return
        recorded = Recorded(term)
        command = container_command(process.container)
        code = exec_argv(command, process, recorded) if command else run_default(process, recorded)
        namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        self.store.append_pod_log(namespace, name, recorded.text)
        end = finish_container(process.container["name"], code)
        try:
            self.store.update(PODS, name, end, namespace)
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
