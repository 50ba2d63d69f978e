"""`python -m labs.sim.node.container_process`: a container's process on a real kubelet's node.

The nodes' container runtime (`go/controlplane/cmd/node-runtime`) starts this for each container
it starts, and for each exec into one; its output is the container's, its exit code the
container's:

    python -m labs.sim.node.container_process --api-url URL --pki DIR \\
        run|exec NAMESPACE POD CONTAINER CONTAINER_ID [--tty] -- COMMAND...

The world's programs (`labs.sim.node.programs`) play the command, reading the pod and its node
through the API server. They answer at once; what a real process spends waiting is spent here:
a container without a command runs its image's own entrypoint (a server: it runs until it is
stopped), and `sleep` sleeps. `CONTAINER_DIR` (set by the runtime) holds the container's files.
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import sys
import time
from pathlib import Path

NOT_RUNNABLE = 126


def command(api_url: str, pki_dir: Path) -> list[str]:
    """How the runtime starts this program for a world: its API server and credentials."""
    return [
        sys.executable, "-m", "labs.sim.node.container_process",
        "--api-url", api_url,
        "--pki", str(pki_dir),
    ]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m labs.sim.node.container_process", description=__doc__
    )
    parser.add_argument("--api-url", required=True)
    parser.add_argument("--pki", type=Path, required=True, help="the control plane's pki dir")
    parser.add_argument("verb", choices=("run", "exec"))
    parser.add_argument("namespace")
    parser.add_argument("pod")
    parser.add_argument("container")
    parser.add_argument("container_id")
    parser.add_argument("--tty", action="store_true")
    parser.add_argument("command", nargs="*")
    args = parser.parse_args(argv)
    if args.verb == "run":
        waited = _waits(args.command)
        if waited is not None:
            return _wait(waited)
    return _play(args)


def _waits(command: list[str]) -> float | None:
    """How long a container's process only waits (infinity for the image's own entrypoint), or
    None when the world plays its command."""
    if not command:
        return math.inf
    if os.path.basename(command[0]) == "sleep" and len(command) == 2:
        word = command[1]
        if word == "infinity":
            return math.inf
        try:
            return float(word.rstrip("s"))
        except ValueError:
            return None
    return None


def _wait(seconds: float) -> int:
    """Wait, as a process that only sleeps, until the time is up or the runtime stops it."""
    if math.isinf(seconds):
        signal.pause()  # SIGTERM's default action ends the process, as it ends a real one
        return 0
    time.sleep(seconds)
    return 0


def _play(args: argparse.Namespace) -> int:
    from labs.kube.api import KubeApi
    from labs.kube.resources import NODES, PODS, KubeApiError
    from labs.sim.controlplane.run import Credentials
    from labs.sim.node.exec_streams import StdioTerminal
    from labs.sim.node.programs import Process, exec_argv

    credentials = Credentials(
        args.api_url, args.pki / "ca.crt", args.pki / "admin.crt", args.pki / "admin.key"
    )
    store = KubeApi(credentials.api_client(pool_size=1))
    try:
        pod = store.get(PODS, args.pod, args.namespace)
        node = store.get(NODES, pod["spec"]["nodeName"])
    except KubeApiError as error:
        print(error.message, file=sys.stderr)
        return NOT_RUNNABLE
    containers = [*(pod["spec"].get("initContainers") or []), *pod["spec"]["containers"]]
    container = next(c for c in containers if c["name"] == args.container)
    rootfs = Path(os.environ["CONTAINER_DIR"], "rootfs") if "CONTAINER_DIR" in os.environ else None
    process = Process(store, pod, container, node, rootfs=rootfs)
    return exec_argv(args.command, process, StdioTerminal(args.tty))


if __name__ == "__main__":
    sys.exit(main())
