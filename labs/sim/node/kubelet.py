"""One rehearsal node as EKS runs it: the real kubelet (the control plane's release) behind the
lab's own container runtime.

`go/controlplane/cmd/node-runtime` is the node: it holds the node's network namespace (its VPC
address on an interface of its own; the host's interfaces are never touched), serves the CRI
and starts the kubelet inside that namespace, in a mount namespace of the kubelet's own. There
the machine is the instance type and the AMI (`/proc/meminfo`, `/sys/devices/system/cpu` and
`/etc/os-release` are made-up files bound over the host's), the kernel settings the kubelet tunes
are files of the node's (the host's stay as they are), and `/run`, `/var/lib` and `/var/log`
are directories of the node's (`NODE_DIRS`), which the runtime gives its containers' hostPath
volumes too: so the kubelet's `/var/lib/kubelet/device-plugins` is where a device plugin in a
pod registers, and the GPU Operator's `/run/nvidia/validations` is one place for all its pods on
the node. The host's root is read-only there, so a hostPath volume the kubelet would create
elsewhere fails instead of landing on the host.

The kubelet reaches the API server through a port the runtime forwards out of the namespace; the
API server reaches the kubelet through the runtime's door socket, which the node endpoint's
CONNECT proxy routes the node's address to. Everything dies with the process that started it.
"""

from __future__ import annotations

import base64
import ipaddress
import os
import shlex
import shutil
import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from decimal import Decimal
from functools import cache, partial
from pathlib import Path
from typing import Any

import yaml
from kubernetes.utils import parse_quantity

from labs.errors import LabError
from labs.settings import MODELLED_KUBELETS
from labs.sim.controlplane import build, pki
from labs.sim.controlplane.run import Served, spawn
from labs.sim.node.container_process import TOOLKIT_ROOT
from labs.sim.node.container_root import USER_NAMESPACE
from labs.sim.node.hardware import (
    DEFAULT_RUNTIME_ANNOTATION,
    INSTANCE_SHAPES,
    INSTANCE_TYPE_LABEL,
    pci_devices,
)
from labs.sim.node.node_log import HALTED
from labs.sim.node.node_os import AL2023, machine_files

KUBELET_PORT = 10250
# How often each kubelet reads its node's status (`nodeStatusUpdateFrequency`; 10 s on EKS).
NODE_STATUS_TICK = "2s"
SOCKET_PATH_MAX = 107
# The kubelet's own directory, as on EKS: inside its mount namespace, in the node's /var/lib,
# so its sockets' paths are short however deep the node's home is.
KUBELET_ROOT_DIR = "/var/lib/kubelet"
# Where a kubelet's device manager and the device plugins meet (a fixed path of the kubelet).
DEVICE_PLUGINS = f"{KUBELET_ROOT_DIR}/device-plugins"
# Where the pod network's configuration goes (containerd's CNI directory).
CNI_CONF_DIR = "/etc/cni/net.d"
# The node's own directories, under its home: what a hostPath volume there reaches, for the
# kubelet (bound over the host's in its mount namespace) and its containers alike.
# The kubelet's /etc: the host's, read-only, under a writable overlay layer of the node's own,
# so a hostPath volume the kubelet creates in /etc lands in the node's files.
ETC_LAYER = "etc-layer"
NODE_DIRS = {
    "/run": "run",
    "/var/lib": "var-lib",
    # where the kubelet links every container's log (/var/log/containers, a fixed path it
    # creates at start: the host may have none, and its root is read-only to the kubelet)
    "/var/log": "var-log",
    CNI_CONF_DIR: "cni-net.d",
    "/etc/kubernetes": "etc-kubernetes",  # NFD's features.d, where GFD leaves its labels
    TOOLKIT_ROOT: "usr-local-nvidia",  # where the operator's container toolkit installs
    # the toolkit's containerd-config volume (DirectoryOrCreate: the kubelet makes it), in the
    # writable layer of the kubelet's /etc (ETC_LAYER)
    "/etc/containerd": f"{ETC_LAYER}/upper/containerd",
}
KUBELET_NODE_DIRS = ("/run", "/var/lib", "/var/log")
CLUSTER_DNS = "10.100.0.10"
# The containerd release the node's runtime reports, in its machine directory.
CONTAINERD_VERSION = "containerd-version"
# The node's made-up /sys, under its machine directory.
SYSFS = "sysfs"
# The kernel settings the kubelet sets to these values when it starts (its container manager's
# `setupKernelTunables`): on the node they are the node's own files, already so.
KERNEL_TUNABLES = {
    "vm/overcommit_memory": "1",
    "vm/panic_on_oom": "0",
    "kernel/panic": "10",
    "kernel/panic_on_oops": "1",
    "kernel/keys/root_maxkeys": "1000000",
    "kernel/keys/root_maxbytes": "25000000",
}


class NodeUnavailable(LabError):
    """This machine cannot run a real node; says what it lacks."""


@dataclass(frozen=True)
class NodeSpec:
    """What the node group makes a node: its name and address, the pods' addresses, the EC2
    instance behind it, its labels and taints, and its containerd's runtime handlers."""

    name: str
    ip: str
    pod_cidr: str
    instance_type: str
    provider_id: str
    labels: dict[str, str] = field(default_factory=dict)
    taints: tuple[dict[str, str], ...] = ()
    runtime_handlers: tuple[str, ...] = ("runc",)
    default_runtime: str = "runc"

    @classmethod
    def of(cls, node: dict, pod_cidr: str) -> NodeSpec:
        """The spec of a Node object as the node group would register it (its name, address,
        labels, taints, providerID and the AMI's default runtime)."""
        metadata, spec = node["metadata"], node.get("spec") or {}
        address = next(
            a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP"
        )
        default = (metadata.get("annotations") or {}).get(DEFAULT_RUNTIME_ANNOTATION, "runc")
        return cls(
            name=metadata["name"],
            ip=address,
            pod_cidr=pod_cidr,
            instance_type=metadata["labels"][INSTANCE_TYPE_LABEL],
            provider_id=spec.get("providerID", ""),
            labels=dict(metadata["labels"]),
            taints=tuple(spec.get("taints") or ()),
            runtime_handlers=tuple(dict.fromkeys(("runc", default))),
            default_runtime=default,
        )


@dataclass
class KubeletNode:
    """One node's runtime and kubelet, and their files under `home`."""

    home: Path
    spec: NodeSpec
    ca: pki.Authority
    api_url: str
    # What a container's process runs: `labs.sim.node.container_process` with the world's
    # credentials (`container_command`).
    container_command: list[str]
    images: Path
    ports_dir: Path | None = None
    # Where the node endpoint's CONNECT proxy looks up where an address's kubelet port goes.
    routes_dir: Path | None = None
    # Further APIs the node's programs call (the world's AWS endpoint, as instances call AWS),
    # reached at the same address inside the node and its pods.
    other_apis: tuple[str, ...] = ()
    _served: Served = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._served = Served(build.NODE_RUNTIME, self.home / "logs" / "node.log")

    @property
    def log(self) -> Path:
        return self._served.log

    def node_dir(self, path: str) -> Path:
        """Where the node's directory `path` (one of `NODE_DIRS`) is on this host."""
        return self.home / NODE_DIRS[path]

    @property
    def cni_conf_dir(self) -> Path:
        """The node's /etc/cni/net.d: until a network configuration is written here (by
        aws-node, as on EKS) the node is NotReady with the kubelet's "cni plugin not
        initialized"."""
        return self.node_dir(CNI_CONF_DIR)

    @property
    def machine_dir(self) -> Path:
        """The instance's made-up files (`_machine`), bound for the kubelet and mapped for its
        pods' hostPath volumes."""
        return self.home / "machine"

    @property
    def door(self) -> Path:
        """The unix socket on the host that reaches this node's kubelet port."""
        return self.home / "kubelet.door"

    def start(self, say: build.Say = print) -> None:
        """Write the node's files and start it; the kubelet registers the Node on its own."""
        require_namespaces()
        self._require_usable_home()
        runtime = build.node_runtime_binary(say)
        kubelet = build.binaries(say) / "kubelet"
        self.home.mkdir(parents=True, exist_ok=True)
        self.log.parent.mkdir(parents=True, exist_ok=True)
        for path in NODE_DIRS:
            self.node_dir(path).mkdir(parents=True, exist_ok=True)
        (self.home / ETC_LAYER / "work").mkdir(exist_ok=True)
        if self.routes_dir is not None:
            self.routes_dir.mkdir(parents=True, exist_ok=True)
        command = [
            *OWN_ROOT_PREFIX[rootless()],
            str(runtime), *self._runtime_args(), "--", *self._kubelet_command(kubelet),
        ]  # fmt: skip
        self._served.process = spawn(command, self.log)
        if self.routes_dir is not None:
            route = self.routes_dir / f"{self.spec.ip}_{KUBELET_PORT}"
            route.write_text(f"unix:{self.door}")

    def stop(self) -> None:
        """Stop the kubelet and the runtime (its containers' processes die with it); its log
        says so last, so the kubelet's end there is not read as a crash (`ended_kubelets`)."""
        self._served.stop()
        if self.log.exists():
            with self.log.open("a") as log:
                log.write(f"{HALTED}\n")
        if self.routes_dir is not None:  # its kubelet's, and its pods' ports' (the runtime's)
            (self.routes_dir / f"{self.spec.ip}_{KUBELET_PORT}").unlink(missing_ok=True)
            pods = ipaddress.ip_network(self.spec.pod_cidr)
            for route in self.routes_dir.glob("*_*"):
                address = route.name.rsplit("_", 1)[0]
                if _is_address(address) and ipaddress.ip_address(address) in pods:
                    route.unlink(missing_ok=True)

    def _require_usable_home(self) -> None:
        """The runtime's sockets live under the node's home, and a unix socket's path has at
        most 107 bytes (the kubelet's own are at their short EKS paths in its namespace); a
        home under one of the node's own directories would vanish under it."""
        resolved = self.home.resolve()
        for path in KUBELET_NODE_DIRS:
            if resolved.is_relative_to(path):
                raise NodeUnavailable(
                    f"the node's files under {self.home} are inside {path}, which the node "
                    "has its own of: use a state directory elsewhere"
                )
        deepest = resolved / self.door.name
        if len(os.fsencode(deepest)) > SOCKET_PATH_MAX:
            raise NodeUnavailable(
                f"the node's files under {self.home} are too deep for its unix sockets "
                f"({deepest} is over {SOCKET_PATH_MAX} bytes): use a shorter state directory "
                "(INVOKE_LAB_STATE_DIR, e.g. ~/.labs)" + MODELLED_INSTEAD
            )

    @property
    def pid(self) -> int | None:
        return self._served.pid

    def _runtime_args(self) -> list[str]:
        ports = [url.rsplit(":", 1)[1] for url in (self.api_url, *self.other_apis)]
        args = [
            f"--cri-socket={self.home / 'cri.sock'}",
            f"--node-ip={self.spec.ip}",
            f"--pod-cidr={self.spec.pod_cidr}",
            f"--images={self.images}",
            f"--runtime-handlers={','.join(self.spec.runtime_handlers)}",
            f"--default-runtime={self.spec.default_runtime}",
            f"--state-dir={self.home / 'runtime'}",
            *(f"--api-forward=127.0.0.1:{port}=127.0.0.1:{port}" for port in ports),
            f"--kubelet-door={self.door}",
            f"--kubelet-port={KUBELET_PORT}",
            *(f"--host-path-map={path}={self.node_dir(path)}" for path in NODE_DIRS),
            f"--kubelet-dir={KUBELET_ROOT_DIR}",
            # the machine as its pods' hostPath volumes see it (NFD reads its PCI devices)
            f"--host-path-map=/sys={self.machine_dir / SYSFS}",
            f"--host-path-map=/etc/os-release={self.machine_dir / 'os-release'}",
            f"--cni-conf-dir={self.cni_conf_dir}",
            f"--toolkit-dir={self.node_dir(TOOLKIT_ROOT)}",
            f"--version-file={self.machine_dir / CONTAINERD_VERSION}",
            *(f"--program={word}" for word in self.container_command),
            *(f"--program-env={name}={value}" for name, value in build.location_env().items()),
        ]
        if self.ports_dir is not None:
            args.append(f"--ports-dir={self.ports_dir}")
        if self.routes_dir is not None:  # the API server's proxy reaches pods' ports
            args.append(f"--routes-dir={self.routes_dir}")
        return args

    def _kubelet_command(self, kubelet: Path) -> list[str]:
        """`sh -c` setting up the kubelet's mount namespace, then the kubelet."""
        pki_dir, machine = self.home / "pki", self._machine()
        files = _certificates(self.ca, self.spec, pki_dir)
        kubeconfig = self.home / "kubeconfig"
        kubeconfig.write_text(yaml.safe_dump(_kubeconfig(self.api_url, self.ca, files)))
        config = self.home / "kubelet.yaml"
        config.write_text(yaml.safe_dump(self._configuration(files)))
        binds = [
            (machine / "meminfo", "/proc/meminfo"),
            (machine / SYSFS / "devices/system/cpu", "/sys/devices/system/cpu"),
            (machine / SYSFS / "devices/system/node", "/sys/devices/system/node"),
            (machine / "os-release", "/etc/os-release"),
            (machine / "machine-id", "/etc/machine-id"),
            (machine / "boot_id", "/proc/sys/kernel/random/boot_id"),
            (machine / SYSFS / "class/dmi/id/product_uuid", "/sys/class/dmi/id/product_uuid"),
            *((machine / "sys" / name, f"/proc/sys/{name}") for name in KERNEL_TUNABLES),
            # the node's own directories, where its hostPath volumes live
            *((self.node_dir(path), path) for path in NODE_DIRS if path in KUBELET_NODE_DIRS),
        ]
        home = shlex.quote(str(self.home))
        layer = shlex.quote(str(self.home / ETC_LAYER))
        script = [
            "set -e",
            # The host's files stay the host's: its root read-only to this kubelet (a hostPath
            # volume it would create lands nowhere), the node's own directory writable, and the
            # node's /run and /var/lib its own (where the GPU Operator's volumes live).
            f"mount --bind {home} {home}",
            "mount -o remount,bind,ro /",
            f"mount -t overlay {ETC_LAYER} -o lowerdir=/etc,upperdir={layer}/upper,"
            f"workdir={layer}/work /etc || echo 'no writable /etc layer: hostPath volumes the "
            "kubelet would make in /etc fail' >&2",
            *(
                f"if [ -e {shlex.quote(b)} ]; then mount --bind {shlex.quote(str(a))} "
                f"{shlex.quote(b)}; fi"
                for a, b in binds
            ),
            'exec "$@"',
        ]
        labels = ",".join(f"{key}={value}" for key, value in sorted(self.spec.labels.items()))
        flags = [
            f"--config={config}",
            f"--kubeconfig={kubeconfig}",
            f"--root-dir={KUBELET_ROOT_DIR}",
            f"--cert-dir={pki_dir}",
            f"--hostname-override={self.spec.name}",
            f"--node-ip={self.spec.ip}",
            *([f"--node-labels={labels}"] if labels else []),
            "--v=1",
        ]
        return ["sh", "-c", "\n".join(script), "node", str(kubelet), *flags]

    def _configuration(self, files: dict[str, Path]) -> dict[str, Any]:
        """The KubeletConfiguration: EKS's reservations (what the instance type's allocatable
        leaves out), cgroupfs without per-QoS cgroups (the host's cgroups are not the node's)."""
        shape = INSTANCE_SHAPES[self.spec.instance_type]
        reserved_cpu = parse_quantity(shape.cpu) - parse_quantity(shape.allocatable_cpu)
        reserved_memory = parse_quantity(shape.memory) - parse_quantity(shape.allocatable_memory)
        return {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": self.spec.ip,
            "port": KUBELET_PORT,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "tlsCertFile": str(files["serving.crt"]),
            "tlsPrivateKeyFile": str(files["serving.key"]),
            "authentication": {
                "x509": {"clientCAFile": str(files["ca.crt"])},
                "webhook": {"enabled": False},
                "anonymous": {"enabled": False},
            },
            "authorization": {"mode": "AlwaysAllow"},
            "containerRuntimeEndpoint": f"unix://{self.home / 'cri.sock'}",
            "podLogsDir": str(self.home / "pod-logs"),
            "cgroupDriver": "cgroupfs",
            "cgroupsPerQOS": False,
            "enforceNodeAllocatable": [],
            "failSwapOn": False,
            "failCgroupV1": False,
            "protectKernelDefaults": True,
            "localStorageCapacityIsolation": False,
            "evictionHard": {},
            "kubeReserved": {
                "cpu": f"{int(reserved_cpu * 1000)}m",
                "memory": f"{int(reserved_memory / 1024)}Ki",
            },
            "clusterDNS": [CLUSTER_DNS],
            "clusterDomain": "cluster.local",
            "providerID": self.spec.provider_id,
            "registerWithTaints": list(self.spec.taints),
            "serializeImagePulls": False,
            # The node's status (a device plugin's GPUs among it) is read every 10 s on EKS: at
            # the rehearsal's pace that tick would read as minutes on a report's timeline. It is
            # sent only when it changed, or every 5 min as on EKS (set, or it follows the tick).
            "nodeStatusUpdateFrequency": NODE_STATUS_TICK,
            "nodeStatusReportFrequency": "5m",
            "maxPods": 50,
            # Rootless, the kernel refuses the kubelet /dev/kmsg, oom_score_adj and rlimits:
            # the gate makes those warnings rather than a failed start.
            "featureGates": {"KubeletInUserNamespace": rootless()},
            "resolvConf": "",
        }

    def switch_os(self, family: str) -> None:
        """Put the machine on another AMI family in place: the os-release the kubelet reads its
        osImage from (rewritten, not replaced: it is bound into the kubelet's namespace) and the
        containerd release the runtime reports."""
        os_release, containerd = machine_files(family)
        (self.machine_dir / "os-release").write_text(os_release)
        (self.machine_dir / CONTAINERD_VERSION).write_text(containerd + "\n")

    def _machine(self) -> Path:
        """The instance as the kubelet and its pods read it: the instance type's /proc/meminfo,
        its CPUs and PCI devices in sysfs (no NUMA nodes, so the CPUs count), the AMI's
        os-release, an identity of its own (machine ID, boot ID, an EC2-style system UUID) and
        the kernel settings' files."""
        shape = INSTANCE_SHAPES[self.spec.instance_type]
        machine = self.machine_dir
        shutil.rmtree(machine, ignore_errors=True)
        sysfs = machine / SYSFS
        memory_kib = int(parse_quantity(shape.memory) / 1024)
        (sysfs / "devices/system/node").mkdir(parents=True)
        (machine / "meminfo").write_text(
            f"MemTotal:       {memory_kib} kB\nMemFree:        {memory_kib} kB\n"
            f"MemAvailable:   {memory_kib} kB\nSwapTotal:             0 kB\n"
        )
        cpus = int(Decimal(shape.cpu))
        every = f"0-{cpus - 1}\n"
        cpu_dir = sysfs / "devices/system/cpu"
        for number in range(cpus):
            topology = cpu_dir / f"cpu{number}" / "topology"
            topology.mkdir(parents=True)
            (topology.parent / "online").write_text("1\n")
            for name, value in {
                "physical_package_id": "0",
                "core_id": str(number // 2),
                "thread_siblings_list": f"{number - number % 2}-{number - number % 2 + 1}",
                "core_siblings_list": every.strip(),
            }.items():
                (topology / name).write_text(value + "\n")
        for name in ("online", "possible", "present"):
            (cpu_dir / name).write_text(every)
        for device in pci_devices(self.spec.instance_type):
            attributes = sysfs / "bus/pci/devices" / device.address
            attributes.mkdir(parents=True)
            for name, value in device.attributes().items():
                (attributes / name).write_text(value + "\n")
        identity = uuid.uuid4()
        self.switch_os(AL2023)
        (machine / "machine-id").write_text(identity.hex + "\n")
        (machine / "boot_id").write_text(f"{uuid.uuid4()}\n")
        _sysfs_files(sysfs, cpus, self.spec.instance_type, f"ec2{str(identity)[3:]}")
        for name, value in KERNEL_TUNABLES.items():
            tunable = machine / "sys" / name
            tunable.parent.mkdir(parents=True, exist_ok=True)
            tunable.write_text(value + "\n")
        return machine


def _sysfs_files(sysfs: Path, cpus: int, instance_type: str, product_uuid: str) -> None:
    """The rest of the instance's /sys that the kubelet and NFD read: its DMI identity (an
    EC2-style system UUID), CPUs and NUMA nodes on their buses, ENA's eth0 and the root volume."""
    dmi = sysfs / "devices/virtual/dmi/id"
    dmi.mkdir(parents=True)
    for name, value in {
        "product_uuid": product_uuid,
        "sys_vendor": "Amazon EC2",
        "product_name": instance_type,
    }.items():
        (dmi / name).write_text(value + "\n")
    (sysfs / "class/dmi").mkdir(parents=True)
    (sysfs / "class/dmi/id").symlink_to("../../devices/virtual/dmi/id")
    (sysfs / "bus/cpu/devices").mkdir(parents=True)
    for number in range(cpus):
        (sysfs / "bus/cpu/devices" / f"cpu{number}").symlink_to(
            f"../../../devices/system/cpu/cpu{number}"
        )
    (sysfs / "bus/node/devices").mkdir(parents=True)
    (sysfs / "fs").mkdir()
    for interface, state in (("eth0", "up"), ("lo", "unknown")):
        (sysfs / "class/net" / interface).mkdir(parents=True)
        (sysfs / "class/net" / interface / "operstate").write_text(state + "\n")
    queue = sysfs / "block/nvme0n1/queue"
    queue.mkdir(parents=True)
    for name, value in {"dax": "0", "rotational": "0", "nr_zones": "0", "zoned": "none"}.items():
        (queue / name).write_text(value + "\n")


class KubeletNodes:
    """The rehearsal's nodes when each runs the real kubelet: one `KubeletNode` per booted
    instance, under `home/<address>`, its pods' addresses a block of its subnet's of its own."""

    def __init__(
        self,
        home: Path,
        ca: pki.Authority,
        api_url: str,
        container_command: list[str],
        images: Path,
        ports_dir: Path,
        routes_dir: Path,
        other_apis: tuple[str, ...] = (),
    ) -> None:
        self._home = home
        self._node = partial(
            KubeletNode,
            ca=ca,
            api_url=api_url,
            container_command=container_command,
            images=images,
            ports_dir=ports_dir,
            routes_dir=routes_dir,
            other_apis=other_apis,
        )
        self._running: dict[str, KubeletNode] = {}

    def prepare(self, say: build.Say = print) -> None:
        """Check this machine can run nodes and build their programs (cached), so the first
        node boots without a build in the way, and no container has to build one. A world
        starts with no nodes: what the nodes of a world before it left is removed (its ended
        kubelets are not this world's)."""
        from labs.sim.controlplane.gpu_operator import release

        require_namespaces()
        if self._home.is_dir():
            for left in self._home.iterdir():
                if left.is_dir() and _is_address(left.name):
                    shutil.rmtree(left, ignore_errors=True)
        build.node_runtime_binary(say)
        build.device_plugin_binary(say)
        build.binaries(say)
        release(say)  # the operator's pod runs it; a node's network reaches no module proxy
        for program in build.NFD_PROGRAMS:  # the chart's NFD pods run them
            build.pinned_binary(program, say)

    def boot(self, node: dict, subnet: str) -> None:
        """Start the node's kubelet; it registers the Node itself, NotReady until aws-node
        writes its network configuration."""
        taken = {n.spec.pod_cidr for n in self._running.values()}
        spec = NodeSpec.of(node, _free_block(subnet, taken))
        started = self._node(self._home / spec.ip, spec)
        started.start(say=lambda line: None)
        self._running[spec.name] = started

    def running(self, name: str) -> bool:
        return name in self._running

    def halt(self, name: str) -> None:
        """Stop the node's kubelet and runtime (its containers' processes end with them)."""
        node = self._running.pop(name, None)
        if node is not None:
            node.stop()

    def switch_os(self, name: str, family: str) -> None:
        self._running[name].switch_os(family)

    def stop(self) -> None:
        for name in list(self._running):
            self.halt(name)


# Each node's pods get a /26 of its subnet (64 addresses, more than its max pods), taken from the
# top: EC2 hands instances addresses from the bottom.
POD_BLOCK_PREFIX = 26


def _free_block(subnet: str, taken: set[str]) -> str:
    blocks = list(ipaddress.ip_network(subnet).subnets(new_prefix=POD_BLOCK_PREFIX))
    for block in reversed(blocks[1:]):
        if str(block) not in taken:
            return str(block)
    raise NodeUnavailable(
        f"subnet {subnet} has no free /{POD_BLOCK_PREFIX} for another node's pods"
    )


def _is_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def rootless() -> bool:
    """Whether this user runs its nodes rootless: each node's runtime and kubelet then start as
    root of a user namespace of their own, which can make network and mount namespaces."""
    return os.geteuid() != 0


# What a node's runtime starts under, rootless or as root.
OWN_ROOT_PREFIX = {True: ["unshare", *USER_NAMESPACE, "--"], False: []}


# Where the real kubelet cannot run, the lab can still be rehearsed on the world's model of one.
MODELLED_INSTEAD = (
    f"; or rehearse on the world's model of a kubelet: INVOKE_LAB_KUBELETS={MODELLED_KUBELETS}"
)


def require_namespaces() -> None:
    """A node needs mount and network namespaces of its own: Linux, as root or rootless in a
    user namespace."""
    missing = _what_nodes_lack()
    if missing:
        raise NodeUnavailable(missing + MODELLED_INSTEAD)


def _what_nodes_lack() -> str | None:
    """Why this machine cannot run the real kubelet's nodes, or None."""
    if not sys.platform.startswith("linux"):
        return "the rehearsal's nodes run the real kubelet, which needs Linux"
    for tool in ("ip", "mount", "sh", "unshare"):
        if shutil.which(tool) is None:
            return f"the rehearsal's nodes need `{tool}` on PATH (iproute2, util-linux)"
    return _namespaces_refused()


# What each kind of namespace is for, and what to change where the kernel refuses it (to root,
# and to a user without root, who needs user namespaces for everything).
NAMESPACE_PROBES = {
    False: (
        (
            ("--mount", "--net"),
            "mount and network namespaces (each node's own)",
            "CAP_SYS_ADMIN is missing or a seccomp profile forbids unshare(2): in a container, "
            "start it with --privileged",
        ),
        (
            (*USER_NAMESPACE, "--mount"),
            "user namespaces (the roots of the containers that run real programs)",
            "check the sysctl user.max_user_namespaces (0 forbids them) and, in a container, "
            "start it with --privileged",
        ),
    ),
    True: (
        (
            (*USER_NAMESPACE, "--mount", "--net"),
            "a user namespace with mount and network namespaces (each node's own, rootless)",
            "check the sysctls user.max_user_namespaces (0 forbids them), "
            "kernel.unprivileged_userns_clone (Debian's kernels: 1 allows them) and "
            "kernel.apparmor_restrict_unprivileged_userns (Ubuntu 23.10 and later: 0 allows "
            "them, or give the Python that runs the lab an AppArmor profile with `userns,`); "
            "or run as root",
        ),
    ),
}


@cache
def _namespaces_refused() -> str | None:
    """The kernel's answer, asked once per process before any node starts (a node would only
    end with `unshare: operation not permitted` in its log): why it refuses, or None."""
    for flags, used_for, what_to_do in NAMESPACE_PROBES[rootless()]:
        probe = subprocess.run(
            ["unshare", *flags, "--", "true"], capture_output=True, text=True, timeout=30
        )
        if probe.returncode != 0:
            said = probe.stderr.strip() or f"exit {probe.returncode}"
            return (
                f"this machine refuses the rehearsal's nodes {used_for}: `unshare "
                f"{' '.join(flags)}` says {said!r}; {what_to_do}"
            )
    return None


def _certificates(ca: pki.Authority, spec: NodeSpec, pki_dir: Path) -> dict[str, Path]:
    """The kubelet's client certificate (system:node:NAME in system:nodes, what the Node
    authorizer expects) and its serving certificate, both from the lab's CA."""
    client = ca.issue(f"system:node:{spec.name}", "system:nodes")
    serving = ca.issue(spec.name, server=True, addresses=(spec.ip,), names=(spec.name,))
    texts = {
        "ca.crt": ca.cert_pem,
        "client.crt": client.cert_pem,
        "client.key": client.key_pem,
        "serving.crt": serving.cert_pem,
        "serving.key": serving.key_pem,
    }
    return {name: pki.write_private(pki_dir / name, text) for name, text in texts.items()}


def _kubeconfig(api_url: str, ca: pki.Authority, files: dict[str, Path]) -> dict[str, Any]:
    ca_data = base64.b64encode(ca.cert_pem.encode()).decode()
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "lab", "cluster": {"server": api_url, "certificate-authority-data": ca_data}}
        ],
        "users": [
            {
                "name": "kubelet",
                "user": {
                    "client-certificate": str(files["client.crt"]),
                    "client-key": str(files["client.key"]),
                },
            }
        ],
        "contexts": [{"name": "kubelet", "context": {"cluster": "lab", "user": "kubelet"}}],
        "current-context": "kubelet",
    }
