"""`python -m labs.sim.node.container_process`: a container's process on a real kubelet's node.

The nodes' container runtime (`go/controlplane/cmd/node-runtime`) starts this for each container
it starts, and for each exec into one; its output is the container's, its exit code the
container's:

    python -m labs.sim.node.container_process --api-url URL --pki DIR \\
        run|exec NAMESPACE POD CONTAINER CONTAINER_ID [--tty] -- COMMAND...

The world's programs (`labs.sim.node.programs`) play the command, reading the pod and its node
through the API server. They answer at once; what a real process spends waiting is spent here:
a container without a command runs its image's own entrypoint (a server: it runs until it is
stopped), and `sleep` sleeps. The device plugin's image runs the project's device plugin
(`go/controlplane/cmd/device-plugin`) for real. `CONTAINER_DIR` (set by the runtime) holds the
container's files, `CONTAINER_MOUNTS` where its mounts are on this host.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from labs.kube.api import KubeApi

NOT_RUNNABLE = 126
DEVICE_PLUGIN_IMAGE = "k8s-device-plugin"


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
    if args.verb == "run" and not args.command and _runs_ours(os.environ.get("CONTAINER_IMAGE")):
        return _entrypoint(args)
    if args.verb == "run":
        waited = _waits(args.command)
        if waited is not None:
            return _wait(waited)
    return _play(args)


def _runs_ours(image: str | None) -> bool:
    """Whether the image's own entrypoint is a program of the project's (the GPU device plugin).
    Only the light image module is imported: a container that only waits keeps no client."""
    from labs.sim.node.images import repository

    return image is not None and repository(image) == DEVICE_PLUGIN_IMAGE


def _entrypoint(args: argparse.Namespace) -> int:
    """Become the image's entrypoint: the device plugin, serving the node's GPU to its kubelet
    through the kubelet's device-plugins directory as this container mounts it."""
    from labs.sim.controlplane.build import device_plugin_binary
    from labs.sim.node.hardware import gpu_uuid
    from labs.sim.node.kubelet import DEVICE_PLUGINS

    mounts = json.loads(os.environ.get("CONTAINER_MOUNTS") or "[]")
    plugin_dir = next(
        (m["host_path"] for m in mounts if m["container_path"] == DEVICE_PLUGINS), None
    )
    if plugin_dir is None:
        print(f"no {DEVICE_PLUGINS} mounted: nothing to register with", file=sys.stderr)
        return 1
    node = _objects(args)[2]
    binary = str(device_plugin_binary(lambda line: print(line, file=sys.stderr)))
    device = gpu_uuid(node["metadata"]["name"])
    os.execv(binary, [binary, f"--plugin-dir={plugin_dir}", f"--devices={device}"])


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


def _objects(args: argparse.Namespace) -> tuple[KubeApi, dict, dict]:
    """The world's API, the container's pod and its node; exits 126 when they cannot be read."""
    from labs.kube.api import KubeApi
    from labs.kube.resources import NODES, PODS, KubeApiError
    from labs.sim.controlplane.run import Credentials

    credentials = Credentials(
        args.api_url, args.pki / "ca.crt", args.pki / "admin.crt", args.pki / "admin.key"
    )
    store = KubeApi(credentials.api_client(pool_size=1))
    try:
        pod = store.get(PODS, args.pod, args.namespace)
        return store, pod, store.get(NODES, pod["spec"]["nodeName"])
    except KubeApiError as error:
        print(error.message, file=sys.stderr)
        sys.exit(NOT_RUNNABLE)


def _play(args: argparse.Namespace) -> int:
    from labs.sim.node.exec_streams import StdioTerminal
    from labs.sim.node.programs import Process, exec_argv

    store, pod, node = _objects(args)
    containers = [*(pod["spec"].get("initContainers") or []), *pod["spec"]["containers"]]
    container = next(c for c in containers if c["name"] == args.container)
    rootfs = Path(os.environ["CONTAINER_DIR"], "rootfs") if "CONTAINER_DIR" in os.environ else None
    process = Process(store, pod, container, node, rootfs=rootfs)
    return exec_argv(args.command, process, StdioTerminal(args.tty))


if __name__ == "__main__":
    sys.exit(main())
