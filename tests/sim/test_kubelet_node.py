"""A rehearsal node running the real kubelet behind the lab's container runtime, joined to the
session's held-still plane: what `kubectl` shows of it, and what its pods do, as on EKS.

The pods are made once, when the node is up, so the kubelet's own back-offs (10 s, doubling)
run side by side; each test then watches the pods it is about.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from itertools import pairwise
from pathlib import Path

import pytest
from controlplane_support import pids, processes
from lab_support import INVOKE, ROOT, WITHOUT_ROOT, invoke_env
from sim_support import wait_for
from still_support import StillPlane
from tool_support import require_tool

from labs.kube.gpu import GPU_RESOURCE, gpu_quantity
from labs.kube.resources import EVENTS, LEASES, NODES, PODS, NotFound
from labs.sim.controlplane.build import NODE_RUNTIME
from labs.sim.controlplane.run import free_port
from labs.sim.node import container_process
from labs.sim.node.hardware import INSTANCE_SHAPES
from labs.sim.node.images import VPC_CNI_IMAGE, write_catalogue
from labs.sim.node.kubelet import (
    CNI_CONF_DIR,
    DEVICE_PLUGINS,
    KERNEL_TUNABLES,
    SOCKET_PATH_MAX,
    KubeletNode,
    NodeSpec,
    NodeUnavailable,
)
from labs.sim.node.node_log import ended_kubelets
from labs.sim.world import ROUTES_DIR

IP, POD_CIDR = "192.168.12.34", "192.168.12.0/24"
NAME = "ip-192-168-12-34.ap-northeast-2.compute.internal"
BUSYBOX = "public.ecr.aws/docker/library/busybox:1.37"
DEVICE_PLUGIN_IMAGE = "nvcr.io/nvidia/k8s-device-plugin:v0.17.4"
# hostPath volumes the kubelet would create: one anywhere on the host, one where the GPU
# Operator's validator keeps its files (/run: the node's own).
OUTSIDE = f"/opt/eks-gpu-lab-test-{os.getpid()}"
VALIDATIONS = "/run/nvidia/validations"
CONTAINERD_ID = re.compile(r"^containerd://[0-9a-f]{64}$")
# What makes a node's home 40 characters deeper than the plain temporary directory.
DEEP = "a-checkout-as-deep-as-a-persons-may-be-x"


def node_spec() -> NodeSpec:
    return NodeSpec(
        NAME,
        IP,
        POD_CIDR,
        "g5.xlarge",
        "aws:///ap-northeast-2a/i-0f1e2d3c4b5a69788",
        labels={"node.kubernetes.io/instance-type": "g5.xlarge", "workload": "gpu"},
    )


def real_node(still: StillPlane, home: Path, spec: NodeSpec) -> KubeletNode:
    plane = still.plane
    assert plane.ca is not None
    return KubeletNode(
        home,
        spec,
        plane.ca,
        plane.api_url,
        container_process.command(plane.api_url, plane.home / "pki"),
        write_catalogue(home / "images.json"),
        ports_dir=home / "ports",
        routes_dir=plane.home.parent / ROUTES_DIR,
    )


def pod(name: str, command: list[str] | None = None, **spec: object) -> dict:
    container: dict = {"name": "main", "image": spec.pop("image", BUSYBOX)}
    if command == ["sh"]:
        container["stdin"] = True  # a shell waiting for `kubectl attach -i`
    if command:
        container["command"] = command
    return {
        "metadata": {"name": name},
        "spec": {
            "nodeName": NAME,
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 5,
            "containers": [container],
            **spec,
        },
    }


def device_plugin_pod() -> dict:
    made = pod("nvidia-device-plugin", image=DEVICE_PLUGIN_IMAGE)
    made["spec"]["volumes"] = [{"name": "plugins", "hostPath": {"path": DEVICE_PLUGINS}}]
    made["spec"]["containers"][0]["volumeMounts"] = [
        {"name": "plugins", "mountPath": DEVICE_PLUGINS}
    ]
    return made


def aws_node_pod() -> dict:
    """aws-node as the add-on runs it: on the node's network, the node's CNI directory
    mounted where it writes the network configuration."""
    made = pod("aws-node", image=VPC_CNI_IMAGE, hostNetwork=True)
    made["spec"]["volumes"] = [{"name": "cni-net-dir", "hostPath": {"path": CNI_CONF_DIR}}]
    made["spec"]["containers"][0]["volumeMounts"] = [
        {"name": "cni-net-dir", "mountPath": container_process.VPC_CNI_CONF_MOUNT}
    ]
    return made


def host_path_pod(name: str, path: str) -> dict:
    made = pod(name, ["sleep", "infinity"])
    made["spec"]["volumes"] = [
        {"name": "host", "hostPath": {"path": path, "type": "DirectoryOrCreate"}}
    ]
    made["spec"]["containers"][0]["volumeMounts"] = [{"name": "host", "mountPath": "/host"}]
    return made


def gpu_pod(name: str) -> dict:
    made = pod(name, ["sleep", "infinity"], image="nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04")
    made["spec"]["containers"][0]["resources"] = {"limits": {GPU_RESOURCE: "1"}}
    return made


PODS_MADE = [
    pod("sleeper", ["sleep", "infinity"]),
    pod("web"),  # the image's own entrypoint: runs until stopped
    pod("host-agent", ["sleep", "infinity"], hostNetwork=True),
    pod("crasher", ["sh", "-c", "echo starting; exit 1"]),
    pod("typo", image="public.ecr.aws/docker/library/busybox:9.99"),
    pod("nobody", image="registry.example.com/team/trainer:v1"),
    pod(
        "init-fails",
        ["sleep", "infinity"],
        initContainers=[{"name": "setup", "image": BUSYBOX, "command": ["sh", "-c", "exit 2"]}],
    ),
    pod("done", ["sh", "-c", "echo finished"], restartPolicy="Never"),
    pod("talker", ["sh"], restartPolicy="Never"),
    host_path_pod("outside", OUTSIDE),
    host_path_pod("validations", VALIDATIONS),
    device_plugin_pod(),
]


@dataclass
class Joined:
    """The node, what its Ready condition said before its pod network came up, and what the
    host looked like before it started."""

    node: KubeletNode
    still: StillPlane
    not_ready: dict
    host_tunables: dict[str, str]
    host_addresses: str
    host_had_validations: bool

    def pod(self, name: str) -> dict:
        return self.still.api.get(PODS, name, "default")


def container_process_env(joined: Joined, pod: str) -> dict[str, str]:
    """The environment the runtime gave the process of `pod`'s container on this node."""
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            if b"labs.sim.node.container_process" not in argv or pod.encode() not in argv:
                continue
            raw = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        pairs = (item.decode().partition("=") for item in raw if b"=" in item)
        return {key: value for key, _, value in pairs}
    raise AssertionError(f"no container process runs for pod {pod}")


def ready_condition(node: dict) -> dict:
    conditions = (node.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "Ready"), {})


def host_tunables() -> dict[str, str]:
    return {name: Path("/proc/sys", name).read_text() for name in KERNEL_TUNABLES}


def host_addresses() -> str:
    return subprocess.run(["ip", "-o", "addr"], capture_output=True, text=True).stdout


@pytest.fixture(scope="module")
def joined(still_plane: StillPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Joined]:
    before_tunables, before_addresses = host_tunables(), host_addresses()
    had_validations = Path(VALIDATIONS).exists()
    # a home as deep as a person's checkout may put it: the kubelet's sockets are at its own
    # short paths (/var/lib/kubelet), only the runtime's at the home's
    node = real_node(still_plane, tmp_path_factory.mktemp("node") / DEEP, node_spec())
    api = still_plane.api
    node.start()
    try:

        def registered() -> dict:
            try:
                return ready_condition(api.get(NODES, NAME))
            except NotFound:
                return {}

        not_ready = wait_for(what="the node registers", check=registered)
        api.create(PODS, aws_node_pod(), "default")  # its network comes up
        wait_for(what="the node turns Ready", check=lambda: registered().get("status") == "True")
        for made in PODS_MADE:
            api.create(PODS, made, "default")
        yield Joined(
            node, still_plane, dict(not_ready), before_tunables, before_addresses, had_validations
        )
    finally:
        node.stop()
        for left in api.list(PODS, "default")[0]:
            try:
                api.delete(PODS, left["metadata"]["name"], "default", grace_seconds=0)
            except NotFound:
                pass
        for rtype, name, namespace in ((NODES, NAME, None), (LEASES, NAME, "kube-node-lease")):
            try:
                api.delete(rtype, name, namespace)
            except NotFound:
                pass


def test_a_node_joins_not_ready_until_aws_node_brings_its_network_up(
    joined: Joined, tmp_path: Path
) -> None:
    assert joined.not_ready["status"] == "False"
    assert "cni plugin not initialized" in joined.not_ready["message"]
    assert ready_condition(joined.still.api.get(NODES, NAME))["reason"] == "KubeletReady"
    logs = joined.still.kubectl(tmp_path, "logs", "aws-node").stdout
    assert logs.endswith('msg="Successfully copied CNI plugin binary and config file."\n'), logs
    assert (joined.node.cni_conf_dir / "10-aws.conflist").is_file()


def test_kubectl_shows_the_real_kubelet_on_the_instance_types_machine(
    joined: Joined, tmp_path: Path
) -> None:
    wide = joined.still.kubectl(tmp_path, "get", "nodes", "-o", "wide")
    assert wide.returncode == 0, wide.stderr
    row = next(line for line in wide.stdout.splitlines() if line.startswith(NAME))
    for shown in ("Ready", "v1.35.4", IP, "Amazon Linux 2023", "containerd://2.2.4"):
        assert shown in row, wide.stdout
    node = joined.still.api.get(NODES, NAME)
    shape = INSTANCE_SHAPES["g5.xlarge"]
    assert node["status"]["capacity"]["cpu"] == shape.cpu
    assert node["status"]["capacity"]["memory"] == shape.memory
    assert node["status"]["allocatable"]["cpu"] == shape.allocatable_cpu
    assert node["status"]["allocatable"]["memory"] == shape.allocatable_memory
    assert node["spec"]["providerID"] == "aws:///ap-northeast-2a/i-0f1e2d3c4b5a69788"
    assert node["metadata"]["labels"]["workload"] == "gpu"


def waiting_reasons(joined: Joined, name: str, until: set[str], timeout: float = 90.0) -> set[str]:
    """The reasons the pod's first container waited for, watched until all of `until` showed."""
    seen: set[str] = set()

    def all_seen() -> bool:
        status = joined.pod(name).get("status") or {}
        for container in status.get("containerStatuses") or []:
            waiting = (container.get("state") or {}).get("waiting") or {}
            if waiting.get("reason"):
                seen.add(waiting["reason"])
        return until <= seen

    wait_for(all_seen, timeout, what=f"{name} waits with {sorted(until)}")
    return seen


def events_of(joined: Joined, name: str) -> list[str]:
    events = joined.still.api.list(EVENTS, "default")[0]
    return [e["message"] for e in events if e["involvedObject"]["name"] == name]


def test_a_mistyped_tag_goes_err_image_pull_then_image_pull_back_off(joined: Joined) -> None:
    waiting_reasons(joined, "typo", {"ErrImagePull", "ImagePullBackOff"})
    ref = "public.ecr.aws/docker/library/busybox:9.99"
    assert (
        f'Failed to pull image "{ref}": rpc error: code = NotFound desc = failed to pull and '
        f'unpack image "{ref}": failed to resolve reference "{ref}": {ref}: not found'
    ) in events_of(joined, "typo")


def test_an_image_no_registry_serves_is_pull_access_denied(joined: Joined) -> None:
    waiting_reasons(joined, "nobody", {"ErrImagePull"})
    assert any(
        "pull access denied, repository does not exist or may require authorization" in message
        for message in events_of(joined, "nobody")
    ), events_of(joined, "nobody")


def test_a_failing_command_crash_loops_with_a_growing_back_off(joined: Joined) -> None:
    """Each run's start, as the pod's status records it (this run's and the last one's): the
    kubelet restarts the container at once the first time, then after 10 s, then 20 s (each
    with up to half again of jitter, and the run's own time)."""
    starts: set[datetime] = set()

    def backed_off() -> list[float]:
        ordered = sorted(starts)
        return [(b - a).total_seconds() for a, b in pairwise(ordered) if (b - a).seconds >= 9]

    def backed_off_twice() -> bool:
        for container in joined.pod("crasher")["status"].get("containerStatuses") or []:
            for state in (container.get("state") or {}, container.get("lastState") or {}):
                if "terminated" in state:
                    starts.add(datetime.fromisoformat(state["terminated"]["startedAt"]))
        return len(backed_off()) >= 2

    wait_for(backed_off_twice, 120, what=f"crasher backs off twice (runs: {sorted(starts)})")
    first, second = backed_off()[:2]
    assert 9 <= first < second, backed_off()
    status = joined.pod("crasher")["status"]["containerStatuses"][0]
    assert status["lastState"]["terminated"]["exitCode"] == 1
    assert status["lastState"]["terminated"]["reason"] == "Error"
    assert any(
        message.startswith("Back-off restarting failed container main in pod crasher_default")
        for message in events_of(joined, "crasher")
    )


def running(joined: Joined, name: str) -> dict:
    def up() -> dict | None:
        found = joined.pod(name)
        return found if found["status"].get("phase") == "Running" else None

    return wait_for(up, what=f"{name} runs")


def test_containers_have_containerd_ids_and_pods_addresses_of_their_own(joined: Joined) -> None:
    pods = [running(joined, name) for name in ("sleeper", "web", "host-agent")]
    for found in pods:
        assert CONTAINERD_ID.match(found["status"]["containerStatuses"][0]["containerID"])
    addresses = {found["metadata"]["name"]: found["status"]["podIP"] for found in pods}
    assert addresses["host-agent"] == IP
    own = [addresses["sleeper"], addresses["web"]]
    assert len(set(own)) == 2
    assert all(ipaddress.ip_address(a) in ipaddress.ip_network(POD_CIDR) for a in own)
    assert IP not in own


def test_a_container_that_ends_completes_with_its_output_in_the_log(
    joined: Joined, tmp_path: Path
) -> None:
    def completed() -> dict | None:
        status = joined.pod("done")["status"]
        return status if status.get("phase") == "Succeeded" else None

    status = wait_for(what="done succeeds", check=completed)
    assert status["containerStatuses"][0]["state"]["terminated"]["reason"] == "Completed"  # type: ignore[index]
    logs = joined.still.kubectl(tmp_path, "logs", "done")
    assert logs.stdout == "finished\n", logs.stderr
    # the kubelet's link for log shippers (a DaemonSet's hostPath /var/log), in the node's own
    # /var/log: a host without /var/log/containers keeps none
    [link] = (joined.node.node_dir("/var/log") / "containers").glob("done_*.log")
    assert link.is_symlink() and link.read_text().endswith("finished\n")


def test_kubectl_exec_runs_in_the_container_and_returns_its_exit_code(
    joined: Joined, tmp_path: Path
) -> None:
    running(joined, "sleeper")
    result = joined.still.kubectl(tmp_path, "exec", "sleeper", "--", "sh", "-c", "echo hi; exit 3")
    assert result.stdout == "hi\n"
    assert result.returncode == 3, result.stderr


def test_the_kubelets_resource_metrics_count_the_containers_processes(
    joined: Joined, tmp_path: Path
) -> None:
    """What metrics-server scrapes: the kubelet's /metrics/resource, from the runtime's CRI
    stats (each container's process's own CPU time and resident memory)."""
    running(joined, "sleeper")
    path = f"/api/v1/nodes/{NAME}/proxy/metrics/resource"
    scraped = joined.still.kubectl(tmp_path, "get", "--raw", path)
    assert scraped.returncode == 0, scraped.stderr
    memory = re.search(
        r'^container_memory_working_set_bytes\{container="main",namespace="default",'
        r'pod="sleeper"\} (\S+) ',
        scraped.stdout,
        re.M,
    )
    assert memory is not None, scraped.stdout
    assert float(memory.group(1)) > 1_000_000  # a Python process's resident pages
    assert "resource_scrape_error 0" in scraped.stdout


def test_kubectl_cp_copies_a_file_out_of_a_pod(joined: Joined, tmp_path: Path) -> None:
    running(joined, "sleeper")
    target = tmp_path / "hostname"
    result = joined.still.kubectl(tmp_path, "cp", "default/sleeper:/etc/hostname", str(target))
    assert result.returncode == 0, result.stderr
    assert target.read_text() == "sleeper\n"


def test_kubectl_attach_reaches_the_containers_own_process(joined: Joined, tmp_path: Path) -> None:
    running(joined, "talker")
    attached = joined.still.kubectl(
        tmp_path, "attach", "-i", "talker", stdin="echo attached\nexit 4\n"
    )
    assert "attached" in attached.stdout, attached.stderr

    def ended() -> dict | None:
        status = joined.pod("talker")["status"]
        return status if status.get("phase") == "Failed" else None

    status = wait_for(what="talker's shell ends", check=ended)
    assert status["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 4  # type: ignore[index]


def test_kubectl_port_forward_reaches_what_is_behind_the_pods_port(
    joined: Joined, tmp_path: Path
) -> None:
    """The world puts a server behind the pod's port (`<ports>/<namespace>_<pod>/<port>`)."""
    running(joined, "sleeper")
    with socket.create_server(("127.0.0.1", 0)) as server:
        assert joined.node.ports_dir is not None
        behind = joined.node.ports_dir / "default_sleeper" / "8080"
        behind.parent.mkdir(parents=True, exist_ok=True)
        behind.write_text(f"127.0.0.1:{server.getsockname()[1]}")
        threading.Thread(target=_answer_once, args=(server,), daemon=True).start()
        local = free_port()
        kubectl = [require_tool("kubectl"), "--kubeconfig", str(joined.still.kubeconfig)]
        forward = subprocess.Popen(
            [
                *kubectl,
                "--cache-dir",
                str(tmp_path),
                "port-forward",
                "pod/sleeper",
                f"{local}:8080",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert forward.stdout is not None
            assert "Forwarding from" in forward.stdout.readline()
            with socket.create_connection(("127.0.0.1", local), timeout=10) as client:
                assert client.recv(100) == b"hello from behind the pod\n"
        finally:
            forward.terminate()
            forward.wait()


def _answer_once(server: socket.socket) -> None:
    conn, _ = server.accept()
    with conn:
        conn.sendall(b"hello from behind the pod\n")


def test_deleting_a_pod_stops_its_container_and_removes_it(joined: Joined, tmp_path: Path) -> None:
    running(joined, "web")
    started = time.monotonic()
    result = joined.still.kubectl(tmp_path, "delete", "pod", "web", "--timeout=30s")
    assert result.returncode == 0, result.stderr
    assert time.monotonic() - started < 30
    with pytest.raises(NotFound):
        joined.pod("web")


def test_the_host_keeps_its_kernel_settings_and_its_addresses(joined: Joined) -> None:
    assert host_tunables() == joined.host_tunables
    assert host_addresses() == joined.host_addresses


def gpus(joined: Joined) -> tuple[str | None, str | None]:
    """The node's (capacity, allocatable) of the GPU resource."""
    node = joined.still.api.get(NODES, NAME)
    return gpu_quantity(node, "capacity"), gpu_quantity(node)


def test_the_gpu_reaches_the_kubelet_through_the_device_plugin_api(joined: Joined) -> None:
    """The device plugin's pod registers the GPU; when it goes, the kubelet's device manager
    makes allocatable 0 at once and keeps capacity for its grace period."""
    wait_for(
        what="the kubelet advertises the GPU", check=lambda: gpus(joined) == ("1", "1"), timeout=60
    )
    api = joined.still.api
    api.create(PODS, gpu_pod("trainer"), "default")
    running(joined, "trainer")
    api.delete(PODS, "nvidia-device-plugin", "default")
    wait_for(what="allocatable drops to 0", check=lambda: gpus(joined) == ("1", "0"), timeout=30)
    api.create(PODS, gpu_pod("trainer-2"), "default")

    def rejected() -> dict | None:
        status = joined.pod("trainer-2").get("status") or {}
        return status if status.get("phase") == "Failed" else None

    status = wait_for(what="the kubelet rejects a second GPU pod", check=rejected, timeout=30)
    assert status["reason"] == "UnexpectedAdmissionError", status  # type: ignore[index]
    assert status["message"] == (  # type: ignore[index]
        "Pod was rejected: Allocate failed due to no healthy devices present; cannot allocate "
        "unhealthy devices nvidia.com/gpu, which is unexpected"
    )
    assert gpus(joined) == ("1", "0")
    assert joined.pod("trainer")["status"]["phase"] == "Running"


def test_the_kubelet_keeps_its_files_at_var_lib_kubelet_as_on_eks(joined: Joined) -> None:
    """Its directory is /var/lib/kubelet in its own mount namespace, which is the node's
    /var/lib: its sockets are there, at paths as short as on EKS."""
    [kubelet] = pids(lambda argv: Path(argv[0]).name == "kubelet" and
                     any(str(joined.node.home) in a for a in argv))  # fmt: skip
    argv = Path(f"/proc/{kubelet}/cmdline").read_bytes().decode().split("\0")
    assert "--root-dir=/var/lib/kubelet" in argv, argv
    own = joined.node.node_dir("/var/lib") / "kubelet"
    for socket_file in ("pod-resources/kubelet.sock", "device-plugins/kubelet.sock"):
        assert (own / socket_file).is_socket(), sorted(own.rglob("*.sock"))
    assert len(os.fsencode(own / "pod-resources/kubelet.sock")) > SOCKET_PATH_MAX, "this deep"


def test_a_home_too_deep_for_the_runtimes_sockets_is_refused_before_anything_starts(
    still_plane: StillPlane, tmp_path: Path
) -> None:
    home = tmp_path / ("d" * 100)
    with pytest.raises(NodeUnavailable) as refused:
        real_node(still_plane, home, node_spec()).start()
    said = str(refused.value)
    assert "too deep for its unix sockets" in said and "INVOKE_LAB_STATE_DIR" in said, said
    assert "INVOKE_LAB_KUBELETS=modelled" in said, said
    assert [p.name for p in home.iterdir()] == ["images.json"], "only the test's own file"


def test_a_host_path_volume_never_creates_anything_on_the_host(joined: Joined) -> None:
    """The host's root is read-only to the kubelet: a pod whose hostPath it would create waits
    with the kubelet's FailedMount; /run is the node's own, so the operator's paths work, and
    are the node's directory for every pod that mounts them."""
    running(joined, "validations")
    assert joined.host_had_validations or not Path(VALIDATIONS).exists()
    on_node = joined.node.node_dir("/run") / VALIDATIONS.removeprefix("/run/")
    assert on_node.is_dir()  # made by the kubelet (DirectoryOrCreate) in the node's /run
    mounts = json.loads(
        container_process_env(joined, "validations").get("CONTAINER_MOUNTS") or "[]"
    )
    assert {"container_path": "/host", "host_path": str(on_node)} in mounts

    def refused() -> list[str]:
        return [m for m in events_of(joined, "outside") if "read-only file system" in m]

    wait_for(what="the kubelet refuses to create the host path", check=refused, timeout=30)
    assert (
        f'MountVolume.SetUp failed for volume "host" : mkdir {OUTSIDE}: read-only file system'
    ) in refused()
    assert not Path(OUTSIDE).exists()
    assert joined.pod("outside")["status"]["phase"] == "Pending"


def test_a_failing_init_container_shows_init_crash_loop_back_off(
    joined: Joined, tmp_path: Path
) -> None:
    """The kubelet writes that state at a sync inside the back-off; on its own it syncs a
    backing-off pod minutes apart, so a change to the pod (a label, as `kubectl label` makes)
    brings one now."""
    touches = iter(range(1000))

    def shown() -> bool:
        joined.still.api.patch(
            PODS, "init-fails", {"metadata": {"labels": {"touched": str(next(touches))}}}, "default"
        )
        time.sleep(1)
        listed = joined.still.kubectl(tmp_path, "get", "pod", "init-fails", "--no-headers")
        return "Init:CrashLoopBackOff" in listed.stdout

    wait_for(what="kubectl get pod init-fails says Init:CrashLoopBackOff", check=shown)
    init = joined.pod("init-fails")["status"]["initContainerStatuses"][0]
    assert init["lastState"]["terminated"]["exitCode"] == 2
    assert init["restartCount"] >= 1


def test_a_node_dies_with_the_process_that_started_it(
    still_plane: StillPlane, tmp_path_factory: pytest.TempPathFactory
) -> None:
    home = tmp_path_factory.mktemp("orphan")
    starter = subprocess.Popen(
        [sys.executable, "-c", ORPHAN_STARTER, str(home)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert starter.stdin is not None and starter.stdout is not None
    starter.stdin.write(json.dumps({"api_url": still_plane.plane.api_url}) + "\n")
    starter.stdin.flush()
    line = starter.stdout.readline()
    assert line.startswith("started"), line

    def ours(argv: list[str]) -> bool:
        return any(str(home) in arg for arg in argv) and Path(argv[0]).name in (
            NODE_RUNTIME,
            "kubelet",
            "sh",
        )

    wait_for(what="the node's kubelet runs", check=lambda: len(processes(ours)) >= 2, timeout=30)
    os.kill(starter.pid, signal.SIGKILL)
    starter.wait()
    wait_for(lambda: not processes(ours), 30, what="the node's processes end")


def test_a_kubelet_that_ends_is_named_with_its_last_error_and_log_until_its_node_stops(
    still_plane: StillPlane, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A kubelet that dies leaves its node NotReady for good; the lab's health (`lab.status`,
    a GPU wait that gives up) names it, and a node stopped with its instance is not named."""
    nodes = tmp_path_factory.mktemp("ended")
    ip, name = "192.168.12.77", "ip-192-168-12-77.ap-northeast-2.compute.internal"
    spec = NodeSpec(name, ip, "192.168.13.0/26", "g5.xlarge", "aws:///ap-northeast-2a/i-0e77")
    node = real_node(still_plane, nodes / ip, spec)
    node.start()
    try:

        def kubelet() -> list[int]:
            home = str(node.home)
            return pids(
                lambda argv: Path(argv[0]).name == "kubelet" and any(home in a for a in argv)
            )

        [running] = wait_for(what="the node's kubelet runs", check=kubelet, timeout=30)
        os.kill(running, signal.SIGKILL)
        [named] = wait_for(what="the ended kubelet named", check=lambda: ended_kubelets(nodes))
        assert named.startswith(f"the kubelet of node {ip} ended (signal: killed): ")
        assert named.endswith(f"; its log is {node.log}")
    finally:
        node.stop()
        try:
            still_plane.api.delete(NODES, name)
        except NotFound:
            pass
    assert ended_kubelets(nodes) == []


# Starts a node the way a world does, then waits to be killed.
ORPHAN_STARTER = """
import sys, json, time
from pathlib import Path
from labs.sim.controlplane import pki
from labs.sim.node.kubelet import KubeletNode, NodeSpec
from labs.sim.node.images import write_catalogue
home = Path(sys.argv[1])
api_url = json.loads(sys.stdin.readline())["api_url"]
spec = NodeSpec("ip-192-168-12-99.ap-northeast-2.compute.internal", "192.168.12.99",
                "192.168.13.0/24", "g5.xlarge", "aws:///ap-northeast-2a/i-0aaaaaaaaaaaaaaaa")
node = KubeletNode(home, spec, pki.Authority.new(), api_url, ["true"],
                   write_catalogue(home / "images.json"))
node.start(lambda line: None)
print("started", flush=True)
time.sleep(3600)
"""


REQUIRE_NAMESPACES = "from labs.sim.node.kubelet import require_namespaces; require_namespaces()"
# root without CAP_SYS_ADMIN, as in a container started without --privileged
WITHOUT_SYS_ADMIN = ["setpriv", "--bounding-set=-sys_admin", "--inh-caps=-sys_admin", "--"]
# a user namespace whose user.max_user_namespaces is 0 (the host's stays as it is)
WITHOUT_USER_NAMESPACES = [
    "unshare", "--user", "--map-root-user", "--mount", "--net", "--",
    "sh", "-c", 'echo 0 > /proc/sys/user/max_user_namespaces && exec "$@"', "sh",
]  # fmt: skip
# a user without root, in a user namespace that may hold one more (the user's own takes it)
ROOTLESS_WITHOUT_USER_NAMESPACES = [
    "unshare", "--user", "--map-root-user", "--",
    "sh", "-c", 'echo 1 > /proc/sys/user/max_user_namespaces && exec "$@"', "sh",
    *WITHOUT_ROOT,
]  # fmt: skip


@pytest.mark.parametrize(
    ("refusal", "named"),
    [
        (WITHOUT_SYS_ADMIN, ["mount and network namespaces", "not permitted", "--privileged"]),
        (WITHOUT_USER_NAMESPACES, ["user namespaces", "No space left", "max_user_namespaces"]),
        (
            ROOTLESS_WITHOUT_USER_NAMESPACES,
            [
                "a user namespace with mount and network namespaces",
                "rootless",
                "No space left",
                "apparmor_restrict_unprivileged_userns",
                "or run as root",
            ],
        ),  # fmt: skip
    ],
    ids=["no CAP_SYS_ADMIN", "no user namespaces", "rootless, no user namespaces"],
)
def test_a_machine_that_refuses_the_nodes_namespaces_is_told_what_to_change(
    refusal: list[str], named: list[str]
) -> None:
    """The kernel's refusal is named before any node starts, with what to change, rather
    than found later as `unshare: operation not permitted` in a dead node's log."""
    require_tool(refusal[0])
    checked = subprocess.run(
        [*refusal, sys.executable, "-c", REQUIRE_NAMESPACES],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert checked.returncode != 0, checked.stdout + checked.stderr
    said = checked.stderr.strip().splitlines()[-1]
    assert said.startswith("labs.sim.node.kubelet.NodeUnavailable: this machine refuses"), said
    for words in named:
        assert words in said, said


def test_lab_up_on_a_machine_without_cap_sys_admin_says_what_to_change_and_leaves_nothing(
    tmp_path: Path,
) -> None:
    """What a person running lab.up in a container started without --privileged reads."""
    env = {**invoke_env(tmp_path), "INVOKE_LAB_KUBELETS": "real", "INVOKE_LAB_TTL": "off"}
    up = subprocess.run(
        [*WITHOUT_SYS_ADMIN, INVOKE, "lab.up", "--sim", "--lab", "np", "--yes"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert up.returncode == 1, up.stdout + up.stderr
    assert "error: this machine refuses the rehearsal's nodes mount and network" in up.stderr
    assert "start it with --privileged" in up.stderr
    assert "Traceback" not in up.stdout + up.stderr
    left = processes(lambda argv: any(str(tmp_path) in word for word in argv))
    assert left == [], "the world's programs (etcd, the API server) end with it"
