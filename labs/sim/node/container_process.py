"""`python -m labs.sim.node.container_process`: a container's process on a real kubelet's node.

The nodes' container runtime (`go/controlplane/cmd/node-runtime`) starts this for each container
it starts, and for each exec into one; its output is the container's, its exit code the
container's:

    python -m labs.sim.node.container_process --api-url URL --pki DIR \\
        run|exec NAMESPACE POD CONTAINER CONTAINER_ID [--tty] -- COMMAND...

The world's programs (`labs.sim.node.programs`) play the command, reading the pod and its node
through the API server. They answer at once; what a real process spends waiting is spent here:
a container without a command (its image's own entrypoint, perhaps with args) runs until it is
stopped, and `sleep` sleeps. Some images' entrypoints are the real programs, built at the
image's release (the GPU Operator, NFD, Prometheus, kube-state-metrics) or the project's own
(the device plugin, `go/controlplane/cmd/device-plugin`); others are played for what they do
(aws-node writes the node's CNI configuration, so its network turns ready).
`CONTAINER_DIR` (set by the runtime) holds the container's files, `CONTAINER_MOUNTS` where its
mounts are on this host.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Generator
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from labs.kube.api import KubeApi
    from labs.sim.controllers.network import PodProgram

NOT_RUNNABLE = 126
# How long a network program waits for a peer's kubelet to report the pod IP its runtime gave.
IP_REPORTED_WITHIN = 10.0
# The runtime's verb for the NVIDIA runtime's prestart hook, run before the container starts.
PRESTART = "prestart"
DEVICE_PLUGIN_IMAGE = "k8s-device-plugin"
OPERATOR_IMAGE = "gpu-operator"
OPERATOR_METRICS_PORT = 8080  # the operator's own default (its --metrics-bind-address)
VPC_CNI_IMAGE = "amazon-k8s-cni"
NFD_IMAGE = "node-feature-discovery"
DCGM_EXPORTER_IMAGE = "dcgm-exporter"
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
# GPU feature discovery (k8s-device-plugin v0.17.4's cmd/gpu-feature-discovery): where its
# labels go (main.go:86, the --output-file default), in the directory NFD's worker reads local
# features from, and how often it labels again (GFD_SLEEP_INTERVAL, the operator's 60s).
GFD_PROGRAM = "gpu-feature-discovery"
GFD_OUTPUT = "/etc/kubernetes/node-feature-discovery/features.d/gfd"
# Where the GPU Operator's validator leaves its status files, and how often the device plugin's
# entrypoint looks for the driver's.
VALIDATIONS = "/run/nvidia/validations"
DRIVER_READY_POLL = 5.0
# The operator's container toolkit: its image, where it installs (the toolkit DaemonSet's
# toolkit-install-dir, the node's /usr/local/nvidia) and its entrypoint's `sleep 5` before
# nvidia-toolkit (the containerd 1.6.9 workaround).
TOOLKIT_IMAGE = "container-toolkit"
TOOLKIT_ROOT = "/usr/local/nvidia"
TOOLKIT_START_DELAY = 5.0
# How often Prometheus' config-reloader looks at its mounted configuration and rules.
RELOAD_POLL = 1.0
PROMETHEUS_IMAGE = "prometheus"
STATE_METRICS_IMAGE = "kube-state-metrics"


def command(api_url: str, pki_dir: Path, world: Path | None = None) -> list[str]:
    """How the runtime starts this program for a world: its API server and credentials, and
    the world's endpoints file, where its pace is read (without one, programs run in real
    time)."""
    return [
        sys.executable, "-m", "labs.sim.node.container_process",
        "--api-url", api_url,
        "--pki", str(pki_dir),
        *(["--world", str(world)] if world is not None else []),
    ]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m labs.sim.node.container_process", description=__doc__
    )
    parser.add_argument("--api-url", required=True)
    parser.add_argument("--pki", type=Path, required=True, help="the control plane's pki dir")
    parser.add_argument("--world", type=Path, help="the world's endpoints file (its pace)")
    parser.add_argument("verb", choices=("run", "exec", PRESTART))
    parser.add_argument("namespace")
    parser.add_argument("pod")
    parser.add_argument("container")
    parser.add_argument("container_id")
    parser.add_argument("--tty", action="store_true")
    parser.add_argument("command", nargs="*")
    args = parser.parse_args(argv)
    if args.verb == PRESTART:
        return _nvidia_prestart(args)
    entrypoint = _played_entrypoint(os.environ.get("CONTAINER_IMAGE"), args.command)
    if args.verb == "run" and entrypoint is not None:
        return entrypoint(args)
    if args.verb == "run":
        waited = _waits(args.command)
        if waited is not None:
            return _wait(waited)
    return _play(args)


def _played_entrypoint(
    image: str | None, command: list[str]
) -> Callable[[argparse.Namespace], int] | None:
    """The image's own program where it is played as a process of its own (`ENTRYPOINTS`),
    else None. Only the light image module is imported: a container that only waits keeps no
    client."""
    from labs.sim.node.images import repository

    return None if image is None else ENTRYPOINTS.get((repository(image), _program(command)))


def _program(command: list[str]) -> str:
    """The program a container starts: "" for its image's entrypoint (no command, or only its
    arguments), the script of `sh -c SCRIPT`, else the command's own name."""
    if not command or command[0].startswith("-"):
        return ""
    if os.path.basename(command[0]) in ("sh", "bash") and command[1:2] == ["-c"]:
        return os.path.basename(" ".join(command[2:]).strip())
    return os.path.basename(command[0])


def _mount_entries() -> list[dict]:
    """This container's mounts as the runtime passes them: container_path, host_path (where
    this host keeps it), read_only and, for the kubelet's own files, kubelet_path (where the
    kubelet keeps them)."""
    entries: list[dict] = json.loads(os.environ.get("CONTAINER_MOUNTS") or "[]")
    return entries


def _mounts() -> dict[str, Path]:
    """This container's mounts: container path -> where it is on this host."""
    return {m["container_path"]: Path(m["host_path"]) for m in _mount_entries()}


def _mounted(container_path: str) -> Path | None:
    """Where this container's mount at `container_path` is on this host."""
    return _mounts().get(container_path)


def _seen(container_path: str) -> Path | None:
    """This container's mount at `container_path` as this process reads it: through the
    kubelet's mount namespace, where a Secret's tmpfs is mounted, when the runtime says where
    that is."""
    from labs.sim.node.container_root import kubelets_view

    kubelet_root = os.environ.get("KUBELET_ROOT")
    for mount in _mount_entries():
        if mount["container_path"] == container_path:
            return kubelets_view(mount, kubelet_root) or Path(mount["host_path"])
    return None


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
    from labs.state import atomic_write_text

    # containerd reads only whole files
    atomic_write_text(conf_dir / "10-aws.conflist", json.dumps(VPC_CNI_CONFLIST, indent=2))
    _log_vpc_cni("info", VPC_CNI_DONE)
    return _wait(math.inf)


def _log_vpc_cni(level: str | None, message: str) -> None:
    if level is None:
        print(message, flush=True)
        return
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    print(f'time="{stamp}" level={level} msg="{message}"', flush=True)


def _device_plugin_entrypoint(args: argparse.Namespace) -> int:
    """The GPU Operator's entrypoint.sh for the plugin (its ConfigMap
    nvidia-device-plugin-entrypoint): wait for the validator's driver-ready, show and source
    it, then start the plugin."""
    validations = _mounted(VALIDATIONS)
    if validations is None:
        print(f"no {VALIDATIONS} mounted: the driver's validation cannot be seen", file=sys.stderr)
        return 1
    _await_driver(validations, Pace(args.world))
    print("Starting nvidia-device-plugin", flush=True)
    return _device_plugin(args)


def _await_driver(validations: Path, pace: Pace) -> None:
    """The operands' entrypoint.sh: wait for the validator's driver-ready, then show it."""
    ready = validations / "driver-ready"
    while not ready.exists():
        print("waiting for the driver validations to be ready...", flush=True)
        pace.sleep(DRIVER_READY_POLL)
    print(ready.read_text(), end="", flush=True)


def _nvidia_prestart(args: argparse.Namespace) -> int:
    """The NVIDIA runtime's prestart hook on a node where the operator's toolkit installed
    itself: it fails where that toolkit cannot load (`node_os.start_error`), printing the error
    containerd then reports; else the container starts."""
    from labs.sim.node.node_os import start_error

    store, pod, node = _objects(args)
    error = start_error(store, pod, _container(pod, args.container), node)
    if error is not None:
        print(error, file=sys.stderr)
        return 1
    return 0


def _container_toolkit(args: argparse.Namespace) -> int:
    """The operator's container toolkit (its entrypoint.sh, then nvidia-toolkit): wait for the
    driver's validation, install into the node's /usr/local/nvidia (the runtime's prestart hook
    runs from there on), run until stopped, then uninstall, as nvidia-toolkit does on SIGTERM."""
    from labs.interrupts import signal_pipe

    validations, root = _mounted(VALIDATIONS), _mounted(TOOLKIT_ROOT)
    if validations is None or root is None:
        print(f"no {VALIDATIONS} or {TOOLKIT_ROOT} mounted: nowhere to install", file=sys.stderr)
        return 1
    pace = Pace(args.world)
    _await_driver(validations, pace)
    pace.sleep(TOOLKIT_START_DELAY)
    stopped = signal_pipe((signal.SIGTERM,))
    installed = root / "toolkit"
    installed.mkdir(parents=True, exist_ok=True)
    (installed / "nvidia-container-runtime").write_text(os.environ.get("CONTAINER_IMAGE", ""))
    os.read(stopped, 1)
    shutil.rmtree(installed, ignore_errors=True)
    return 0


def _gpu_feature_discovery(args: argparse.Namespace) -> int:
    """GPU feature discovery as the operator's DaemonSet runs it (main.go's start and run):
    the labels it reads off the GPU through NVML, which cannot run here (the A10G's, as the world
    knows them, with its timestamp label), written to its output file, which NFD's worker reads
    on its next pass and NFD's master puts on the node; written again each sleep interval, and
    removed when it stops, as its run's defer does (NFD then takes the labels off again)."""
    from labs.sim.controllers.feature_discovery import GFD_LABELS
    from labs.sim.node.programs import go_duration, klog
    from labs.sim.node.terminal import StdioTerminal
    from labs.state import atomic_write_text

    directory, name = GFD_OUTPUT.rsplit("/", 1)
    mounted = _mounted(directory)
    if mounted is None:
        print(f"no {directory} mounted: nowhere to write the labels", file=sys.stderr)
        return 1
    term = StdioTerminal(False)
    interval = float(os.environ.get("GFD_SLEEP_INTERVAL", "60s").rstrip("s"))

    def stop(*_: object) -> None:  # SIGTERM, which Go's syscall.Signal prints as "terminated"
        klog(term, "I", "main.go:303", "Received signal terminated, shutting down.")
        (mounted / name).unlink(missing_ok=True)
        klog(term, "I", "main.go:160", "Exiting")
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    klog(term, "I", "main.go:163", "Starting OS watcher.")
    klog(term, "I", "main.go:168", "Loading configuration.")
    klog(term, "I", "main.go:214", "Start running")
    while True:
        labels = {**GFD_LABELS, "nvidia.com/gfd.timestamp": str(int(time.time()))}
        klog(term, "I", "main.go:278", "Creating Labels")
        klog(term, "I", "output.go:82", f"Writing labels to output file {GFD_OUTPUT}")
        text = "".join(f"{key}={value}\n" for key, value in sorted(labels.items()))
        atomic_write_text(mounted / name, text)  # NFD's worker reads only whole files
        klog(term, "I", "main.go:287", f"Sleeping for {go_duration(interval)}")
        time.sleep(interval)


def _dcgm_exporter(args: argparse.Namespace) -> int:
    """dcgm-exporter: `/metrics` where DCGM_EXPORTER_LISTEN says (":9400", every address of the
    pod's own network namespace), its node's GPU figures as the world models them (DCGM cannot
    run here), read at each scrape; SIGTERM ends it."""
    from labs.sim.controllers.dcgm_exporter import EXPORTER_PORT, node_page
    from labs.sim.controllers.pod_endpoint import page_server

    store, _, node = _objects(args)
    host, _, port = os.environ.get("DCGM_EXPORTER_LISTEN", f":{EXPORTER_PORT}").rpartition(":")
    server = page_server(partial(node_page, store, node["metadata"]["name"]), (host, int(port)))
    server.serve_forever()
    return 0


def _gpu_operator(args: argparse.Namespace) -> int:
    """NVIDIA's operator itself (the release the rehearsal builds), run as the pod's
    ServiceAccount; SIGTERM stops it as the kubelet stops a container."""
    from labs.sim.controlplane.gpu_operator import OperatorProcess, release

    store, pod, _ = _objects(args)
    account = pod["spec"].get("serviceAccountName") or "default"
    token = store.service_account_token(pod["metadata"]["namespace"], account)
    operator = release(lambda line: print(line, file=sys.stderr))
    container = pod["spec"]["containers"][0]
    ports = {p.get("name"): p["containerPort"] for p in container.get("ports") or []}
    process = OperatorProcess(
        Path(os.environ["CONTAINER_DIR"]),
        args.api_url,
        (args.pki / "ca.crt").read_text(),
        lambda line: print(line, file=sys.stderr, flush=True),  # zap writes to stderr
        address="",  # every address: the pod's network namespace is its own
        metrics_port=ports.get("metrics", OPERATOR_METRICS_PORT),
        probe_port=container["livenessProbe"]["httpGet"]["port"],
    )
    signal.signal(signal.SIGTERM, lambda *_: process.terminate())
    process.start(operator, pod, token)
    return process.wait()


def _device_plugin(args: argparse.Namespace) -> int:
    """The device plugin, serving the node's GPU to its kubelet through the kubelet's
    device-plugins directory as this container mounts it."""
    from labs.sim.controlplane.build import device_plugin_binary
    from labs.sim.node.gpu_faults import LOST_ANNOTATION
    from labs.sim.node.hardware import gpu_uuid
    from labs.sim.node.kubelet import DEVICE_PLUGINS

    plugin_dir = _mounted(DEVICE_PLUGINS)
    if plugin_dir is None:
        print(f"no {DEVICE_PLUGINS} mounted: nothing to register with", file=sys.stderr)
        return 1
    name = _objects(args)[2]["metadata"]["name"]
    binary = str(device_plugin_binary(lambda line: print(line, file=sys.stderr)))
    os.execv(binary, [
        binary, f"--plugin-dir={plugin_dir}", f"--devices={gpu_uuid(name)}",
        # its NVML: the node's mark of a GPU fallen off the bus, read through the API
        f"--node={name}", f"--lost-annotation={LOST_ANNOTATION}",
        f"--api-url={args.api_url}", f"--pki={args.pki}",
    ])  # fmt: skip


def _nfd(args: argparse.Namespace) -> int:
    """Node Feature Discovery's own program (nfd-master, nfd-worker or nfd-gc, as the chart's
    command names it), built at the release the image carries, in a root of its own."""
    from labs.sim.controlplane import build

    name = os.path.basename(args.command[0])
    program = next(p for p in build.NFD_PROGRAMS if p.name == name)
    binary = build.pinned_binary(program, lambda line: print(line, file=sys.stderr))
    return _in_own_root(args, binary)


def _in_own_root(args: argparse.Namespace, binary: Path) -> int:
    """Run `binary` with the container's arguments as a container runs its image's program: in
    a root of its own with the container's mounts (its ServiceAccount among them), reaching the
    API server where the node forwards it (no kube-proxy makes the Service's address work)."""
    from labs.sim.controlplane.run import ControlPlaneError

    try:
        command, env = _own_root(args, binary)
    except ControlPlaneError as error:
        print(error, file=sys.stderr)
        return NOT_RUNNABLE
    os.execve(command[0], command, env)


def _own_root(args: argparse.Namespace, binary: Path) -> tuple[list[str], dict[str, str]]:
    """The command and environment that run `binary` in its own root (`_in_own_root`): with
    the container's command's arguments, or all of them where it only gives the entrypoint's."""
    from labs.sim.node import container_root

    here = Path(os.environ["CONTAINER_DIR"])
    kubelet_root = os.environ.get("KUBELET_ROOT")
    program = f"{container_root.PROGRAM_DIR}/{binary.name}"
    binds = [
        *container_root.container_binds(_mount_entries(), kubelet_root, here / "volumes"),
        container_root.Bind(binary, program, read_only=True),
    ]
    container_root.lay_out(here / "root")
    # the node's own files: its home holds the runtime's containers/<id> directories
    node_home = here.parents[2]
    given = args.command if _program(args.command) == "" else args.command[1:]
    command = container_root.command(here / "root", binds, [program, *given], node_home)
    api_port = args.api_url.rsplit(":", 1)[1]
    env = {**os.environ, "KUBERNETES_SERVICE_HOST": "127.0.0.1"}
    env["KUBERNETES_SERVICE_PORT"] = api_port
    return command, env


def _state_metrics(args: argparse.Namespace) -> int:
    """kube-state-metrics, built at the release its image carries, in a root of its own."""
    from labs.sim.controlplane import build

    say = partial(print, file=sys.stderr)
    return _in_own_root(args, build.pinned_binary(build.KUBE_STATE_METRICS_PROGRAM, say))


def _prometheus(args: argparse.Namespace) -> int:
    """Prometheus as the operator's StatefulSet runs it, in a root of its own, with its
    config-reloader's work done beside it: the operator's configuration (gzipped in the mounted
    Secret) unpacked where --config.file reads it before the start, and again, Prometheus told
    with SIGHUP, whenever it or a mounted rule file changes (as the kubelet refreshes them)."""
    from labs.sim.controlplane import build, monitoring
    from labs.sim.controlplane.run import ControlPlaneError, die_with_parent
    from labs.state import atomic_write_text

    mounted = [
        _seen(p) for p in (monitoring.CONFIG_DIR, monitoring.CONFIG_OUT, monitoring.RULES_DIR)
    ]
    secret, out, rules = mounted
    if secret is None or out is None or rules is None:
        print(f"no {monitoring.CONFIG_DIR}, {monitoring.CONFIG_OUT} or {monitoring.RULES_DIR} "
              "mounted: no configuration to run", file=sys.stderr)  # fmt: skip
        return 1
    binary = build.pinned_binary(build.PROMETHEUS_PROGRAM, partial(print, file=sys.stderr))

    def inputs() -> bytes:
        """What the configuration and rules are now (the kubelet swaps a volume's files whole:
        one caught mid-swap is read again on the next look)."""
        try:
            files = sorted(f for f in rules.iterdir() if not f.name.startswith(".."))
            texts = [(f.name, f.read_bytes()) for f in files]
            return (secret / monitoring.CONFIG_KEY).read_bytes() + repr(texts).encode()
        except OSError:
            return b""

    def unpack() -> bytes:
        seen = inputs()
        text = gzip.decompress((secret / monitoring.CONFIG_KEY).read_bytes()).decode()
        atomic_write_text(out / Path(monitoring.CONFIG_FILE).name, text)
        return seen

    loaded = unpack()
    try:
        command, env = _own_root(args, binary)
    except ControlPlaneError as error:
        print(error, file=sys.stderr)
        return NOT_RUNNABLE
    # it dies with this process, which dies with its node's runtime (even under kill -9)
    program = subprocess.Popen(command, env=env, preexec_fn=die_with_parent)
    signal.signal(signal.SIGTERM, lambda *_: program.terminate())
    while True:
        try:
            return program.wait(timeout=RELOAD_POLL)
        except subprocess.TimeoutExpired:
            pass
        if inputs() not in (loaded, b""):
            loaded = unpack()
            program.send_signal(signal.SIGHUP)


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
    from labs.sim.node.hardware import DEFAULT_RUNTIME_ANNOTATION

    credentials = Credentials(
        args.api_url, args.pki / "ca.crt", args.pki / "admin.crt", args.pki / "admin.key"
    )
    store = KubeApi(credentials.api_client(pool_size=1))
    try:
        pod = store.get(PODS, args.pod, args.namespace)
        node = store.get(NODES, pod["spec"]["nodeName"])
    except KubeApiError as error:
        print(error.message, file=sys.stderr)
        sys.exit(NOT_RUNNABLE)
    # the handler running this container, where the world's programs read a node's default
    # runtime (a kubelet registers no such field): the NVIDIA runtime injects what it injects
    if handler := os.environ.get("CONTAINER_RUNTIME"):
        node["metadata"].setdefault("annotations", {})[DEFAULT_RUNTIME_ANNOTATION] = handler
    return store, pod, node


def _play(args: argparse.Namespace) -> int:
    """The container's command as the world's programs play it, in real time: a program that
    runs for a while (the validator) sleeps for real, a daemon (config-manager's sidecar) keeps
    running, and a script the world does not play is the image's own process (an init
    container's ends at once, a container's runs until stopped), as the model takes them."""
    from labs.sim.node.programs import Process, daemon_program, exec_argv, long_program, plays
    from labs.sim.node.terminal import StdioTerminal

    store, pod, node = _objects(args)
    inits = pod["spec"].get("initContainers") or []
    container = _container(pod, args.container)
    rootfs = Path(os.environ["CONTAINER_DIR"], "rootfs") if "CONTAINER_DIR" in os.environ else None
    process = Process(store, pod, container, node, rootfs=rootfs, mounts=_mounts(), real_time=True)
    term = StdioTerminal(args.tty)
    if args.verb == "exec":
        return exec_argv(args.command, process, term)
    network = _network_program(args, store, pod)
    if network is not None:
        return _run_on_network(network, pod, node, Pace(args.world))
    steps = long_program(process, term)
    if steps is not None:
        return _run_paced(steps, Pace(args.world))
    daemon = daemon_program(args.command)
    if daemon is not None and process.installed(args.command[0]):
        code = daemon(args.command[1:], process, term)
        return _wait(math.inf) if code is None else code
    if not plays(container):
        return 0 if container in inits else _wait(math.inf)
    return exec_argv(args.command, process, term)


def _container(pod: dict, name: str) -> dict:
    """The pod's container (or init container) `name`."""
    every = [*(pod["spec"].get("initContainers") or []), *pod["spec"]["containers"]]
    return next(c for c in every if c["name"] == name)


def _run_paced(steps: Generator[float, None, int], pace: Pace) -> int:
    """Step a program that yields the seconds it sleeps, sleeping them at the world's pace;
    its exit code."""
    try:
        while True:
            pace.sleep(next(steps))
    except StopIteration as end:
        return int(end.value or 0)


def _network_program(args: argparse.Namespace, store: KubeApi, pod: dict) -> PodProgram | None:
    """The network's program for this pod's command (the TCP check, the all-reduce), which the
    security groups in the world's AWS decide; None for any other command or without a world."""
    from labs.sim.aws.seed import moto_clients
    from labs.sim.controllers.network import AllReduce, Network, SecurityGroups, TcpCheck

    if args.world is None:
        return None
    world = json.loads(args.world.read_text())
    # the AWS clients only once a program asks the security groups
    groups = SecurityGroups(lambda service: moto_clients(world)(service), world["cluster_name"])
    network = Network(store, groups, expected_ip=_reported_ip(store))
    return next((p for p in (TcpCheck(network), AllReduce(network)) if p.matches(pod)), None)


def _reported_ip(store: KubeApi) -> Callable[[dict, dict], str]:
    """A pod's IP as its kubelet reports it ("" when none comes): waited for a few seconds,
    since a network program starts as its peers do, before their kubelets report the
    addresses their runtimes gave them."""
    from labs.kube.resources import PODS, KubeApiError

    known: dict[str, str] = {}  # by pod uid: a program asks again on every step it waits

    def reported(_node: dict, pod: dict) -> str:
        meta = pod["metadata"]
        if meta["uid"] in known:
            return known[meta["uid"]]
        deadline = time.monotonic() + IP_REPORTED_WITHIN
        while True:
            try:
                found = store.get(PODS, meta["name"], meta["namespace"])
            except KubeApiError:
                return ""
            ip = str((found.get("status") or {}).get("podIP") or "")
            if ip:
                known[meta["uid"]] = ip
            if ip or time.monotonic() > deadline:
                return ip
            time.sleep(0.25)

    return reported


def _run_on_network(program: PodProgram, pod: dict, node: dict, pace: Pace) -> int:
    """Run a network program as the modelled kubelet does: again while it waits for its peers,
    then its output after its run, and its exit code."""
    from labs.sim.timings import scaled

    while True:
        outcome = program.run(pod, node, scaled(pace.speed()))
        time.sleep(outcome.duration)
        if not outcome.again:
            print(outcome.log, end="", flush=True)
            return outcome.exit_code


class Pace:
    """A played program's sleeps at the world's speed, as the modelled kubelet steps them: a
    validator's 60 tries of 5 s take 300 s divided by the speed. What the program polls runs
    in real time (the real kubelet admits and runs pods in about a second), so a sleep never
    gets shorter than FLOOR. The speed is read from the world at most once every REREAD s."""

    FLOOR, REREAD = 0.25, 1.0

    def __init__(self, world: Path | None) -> None:
        self._world = world
        self._speed, self._read_at = 1.0, -math.inf

    def sleep(self, seconds: float) -> None:
        time.sleep(max(seconds / self.speed(), min(seconds, self.FLOOR)))

    def speed(self) -> float:
        """The world's speed now (1 without a world)."""
        if self._world is None or time.monotonic() - self._read_at < self.REREAD:
            return self._speed
        from labs.sim.pace import read_speed

        try:
            self._speed = read_speed(json.loads(self._world.read_text()))
        except (OSError, ValueError, KeyError):
            pass  # the world is stopping or not yet written: keep the pace last read
        self._read_at = time.monotonic()
        return self._speed


# (image repository, program) -> the process that plays it (`_program`: "" is the image's own).
ENTRYPOINTS: dict[tuple[str, str], Callable[[argparse.Namespace], int]] = {
    (VPC_CNI_IMAGE, ""): _vpc_cni,
    (DEVICE_PLUGIN_IMAGE, ""): _device_plugin,
    (DEVICE_PLUGIN_IMAGE, "entrypoint.sh"): _device_plugin_entrypoint,
    (DEVICE_PLUGIN_IMAGE, GFD_PROGRAM): _gpu_feature_discovery,
    (DCGM_EXPORTER_IMAGE, ""): _dcgm_exporter,
    (TOOLKIT_IMAGE, "entrypoint.sh"): _container_toolkit,
    (OPERATOR_IMAGE, "gpu-operator"): _gpu_operator,
    **{(NFD_IMAGE, name): _nfd for name in ("nfd-master", "nfd-worker", "nfd-gc")},
    (PROMETHEUS_IMAGE, ""): _prometheus,
    (STATE_METRICS_IMAGE, ""): _state_metrics,
}

if __name__ == "__main__":
    sys.exit(main())
