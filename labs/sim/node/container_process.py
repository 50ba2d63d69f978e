"""`python -m labs.sim.node.container_process`: a container's process on a real kubelet's node.

The nodes' container runtime (`go/controlplane/cmd/node-runtime`) starts this for each container
it starts, and for each exec into one; its output is the container's, its exit code the
container's:

    python -m labs.sim.node.container_process --api-url URL --pki DIR \\
        run|exec NAMESPACE POD CONTAINER CONTAINER_ID [--tty] -- COMMAND...

The world's programs (`labs.sim.node.programs`) play the command, reading the pod and its node
through the API server. They answer at once; what a real process spends waiting is spent here:
a container without a command (its image's own entrypoint, perhaps with args) runs until it is
stopped, and `sleep` sleeps. Two images' entrypoints are played for what they do to their node:
the device plugin's runs the project's device plugin (`go/controlplane/cmd/device-plugin`) for
real, and aws-node's writes the node's CNI configuration (its network turns ready).
`CONTAINER_DIR` (set by the runtime) holds the container's files, `CONTAINER_MOUNTS` where its
mounts are on this host.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from labs.kube.api import KubeApi

NOT_RUNNABLE = 126
DEVICE_PLUGIN_IMAGE = "k8s-device-plugin"
VPC_CNI_IMAGE = "amazon-k8s-cni"
# Where aws-node's container has the node's /etc/cni/net.d (the add-on's `cni-net-dir` volume).
VPC_CNI_CONF_MOUNT = "/host/etc/cni/net.d"
# The VPC CNI's network configuration: its template (misc/10-aws.conflist) with the add-on's
# defaults (veth prefix "eni", MTU 9001) filled in, as its entrypoint writes it.
VPC_CNI_CONFLIST = {
    "cniVersion": "0.3.1",
    "name": "aws-cni",
    "plugins": [
        {"name": "aws-cni", "type": "aws-cni", "vethPrefix": "eni", "mtu": "9001"},
        {"type": "portmap", "capabilities": {"portMappings": True}, "snat": True},
    ],
}
# What aws-node prints on its way up (VPC CNI v1.18 to v1.20, as `kubectl logs` shows it): the
# IPAM daemon answers after about two seconds, then the configuration is written.
VPC_CNI_STEPS = (
    (0.0, None, "Installed /host/opt/cni/bin/aws-cni"),
    (0.0, None, "Installed /host/opt/cni/bin/egress-cni"),
    (0.0, "info", "Starting IPAM daemon... "),
    (0.0, "info", "Checking for IPAM connectivity... "),
    (2.0, "info", "Copying config file... "),
)
VPC_CNI_DONE = "Successfully copied CNI plugin binary and config file."


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
    entrypoint = _played_entrypoint(os.environ.get("CONTAINER_IMAGE"))
    if args.verb == "run" and not args.command and entrypoint is not None:
        return entrypoint(args)
    if args.verb == "run":
        waited = _waits(args.command)
        if waited is not None:
            return _wait(waited)
    return _play(args)


def _played_entrypoint(image: str | None) -> Callable[[argparse.Namespace], int] | None:
    """The image's own entrypoint where it does something to its node, else None. Only the
    light image module is imported: a container that only waits keeps no client."""
    from labs.sim.node.images import repository

    entrypoints = {DEVICE_PLUGIN_IMAGE: _device_plugin, VPC_CNI_IMAGE: _vpc_cni}
    return None if image is None else entrypoints.get(repository(image))


def _mounted(container_path: str) -> Path | None:
    """Where this container's mount at `container_path` is on this host."""
    mounts = json.loads(os.environ.get("CONTAINER_MOUNTS") or "[]")
    return next(
        (Path(m["host_path"]) for m in mounts if m["container_path"] == container_path), None
    )


def _vpc_cni(args: argparse.Namespace) -> int:
    """aws-node: the IPAM daemon comes up, the network configuration goes into the node's
    /etc/cni/net.d (containerd then reports the network ready), and the daemon runs on."""
    conf_dir = _mounted(VPC_CNI_CONF_MOUNT)
    if conf_dir is None:
        print(f"no {VPC_CNI_CONF_MOUNT} mounted: nowhere to write the CNI config", file=sys.stderr)
        return 1
    for delay, level, message in VPC_CNI_STEPS:
        time.sleep(delay)
        _log_vpc_cni(level, message)
    conflist = conf_dir / "10-aws.conflist"
    partial = conflist.with_suffix(".partial")  # containerd reads only whole files
    partial.write_text(json.dumps(VPC_CNI_CONFLIST, indent=2))
    partial.rename(conflist)
    _log_vpc_cni("info", VPC_CNI_DONE)
    return _wait(math.inf)


def _log_vpc_cni(level: str | None, message: str) -> None:
    if level is None:
        print(message, flush=True)
        return
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    print(f'time="{stamp}" level={level} msg="{message}"', flush=True)


def _device_plugin(args: argparse.Namespace) -> int:
    """The device plugin, serving the node's GPU to its kubelet through the kubelet's
    device-plugins directory as this container mounts it."""
    from labs.sim.controlplane.build import device_plugin_binary
    from labs.sim.node.hardware import gpu_uuid
    from labs.sim.node.kubelet import DEVICE_PLUGINS

    plugin_dir = _mounted(DEVICE_PLUGINS)
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
    if not command or command[0].startswith("-"):  # the entrypoint, perhaps with its args
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
