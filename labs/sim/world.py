"""One rehearsal world in this process: moto, the real Kubernetes control plane, and the world's
controllers as its clients.

`start_world` starts etcd, kube-apiserver, kube-controller-manager and kube-scheduler on
loopback (`labs.sim.controlplane`), moto beside them, seeded like a fresh `terraform apply`
of the stack with defaults (GPU node group at 0, operator not installed), and the world's
controllers: what a cluster has but cannot run here (the instances, each a real kubelet by
default or the played one, devices, the network), reading and writing through the API server,
and the real GPU Operator behind its pod once its chart is installed.
It writes `endpoints.json` and `kubeconfig` into the state directory so other processes
(invoke tasks, kubectl, the aws CLI) can reach it. moto keeps its state in module globals,
so a process holds at most one world at a time.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import os
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from labs.kube.api import KubeApi
from labs.kube.informers import InformedKubeApi
from labs.settings import DEFAULT_KUBELETS, KUBELETS, MODELLED_KUBELETS, REAL_KUBELETS
from labs.sim import monitoring_release, pace
from labs.sim.aws import access, answers, eks_updates
from labs.sim.aws.access import (
    ADMIN_POLICY,
    LAB_USER,
    VIEW_POLICY,
    VIEWER,
    AccessEntries,
    iam_user,
)
from labs.sim.aws.auth import new_token
from labs.sim.aws.seed import ACCOUNT_ID, moto_clients, seed_stack
from labs.sim.aws.server import AwsServer, reset_moto
from labs.sim.controllers.base import Controller
from labs.sim.controllers.dcgm_exporter import dcgm_exporter
from labs.sim.controllers.device_plugin import DevicePlugin
from labs.sim.controllers.feature_discovery import FeatureDiscovery
from labs.sim.controllers.gpu_operator import GpuOperatorPod
from labs.sim.controllers.heartbeats import NodeLeases
from labs.sim.controllers.kubelet import Kubelet, pod_ip_on
from labs.sim.controllers.monitoring import MonitoringRelease
from labs.sim.controllers.network import AllReduce, Network, SecurityGroups, TcpCheck
from labs.sim.controllers.node_lifecycle import Machines, NodeLifecycle, RegisteredNodes
from labs.sim.controllers.pod_endpoint import PodNetwork
from labs.sim.controllers.prometheus_operator import PrometheusOperator
from labs.sim.controllers.resource_metrics import ResourceMetrics
from labs.sim.controllers.schedules import EventBridgeScheduler
from labs.sim.controlplane.build import metrics_server_version
from labs.sim.controlplane.gpu_operator import cluster_policy_crd, release
from labs.sim.controlplane.kube_seed import seed_cluster, seed_metrics_server
from labs.sim.controlplane.kubeconfig import kubeconfig_document, write_kubeconfig
from labs.sim.controlplane.metrics_server import MetricsServer
from labs.sim.controlplane.node_endpoint import NodeEndpoint
from labs.sim.controlplane.run import ControlPlane
from labs.sim.node import container_process, gpu_faults, node_os
from labs.sim.node.container_logs import ContainerLogs
from labs.sim.node.images import MB, Image, metrics_server_image, write_catalogue
from labs.sim.node.kubelet import KubeletNodes
from labs.sim.process import ENDPOINTS, NODES_DIR
from labs.sim.timings import DEFAULT_SPEED, Timings, WorldClock, scaled
from labs.state import atomic_write_json, atomic_write_text

KUBECONFIG_FILE = "kubeconfig"
# The view policy's identity (read-only), beside the lab's own kubeconfig.
VIEWER_KUBECONFIG = "viewer.kubeconfig"
# What the node endpoint serves beside the files of `labs.sim.node.container_logs`: each node's
# resource metrics (`<node IP>.prom`) and each Service's route (`<cluster IP>_<port>`).
METRICS_DIR = "resource-metrics"
ROUTES_DIR = "routes"
# Where the monitoring release's programs keep their files (Prometheus' data, the rules).
MONITORING_DIR = "monitoring"
# Where the GPU Operator's process keeps its root (its manifests, token and os-release).
OPERATOR_DIR = "gpu-operator"
# One world per process: moto's state is global.
_one_world = threading.Lock()


@dataclass
class World:
    """A running world; `stop()` ends the controllers, the control plane and moto."""

    endpoints: dict[str, Any]
    kubeconfig_path: Path
    control_plane: ControlPlane
    _aws: AwsServer
    store: KubeApi | None = None
    _informed: InformedKubeApi | None = None
    _node_endpoint: NodeEndpoint | None = None
    _machines: Machines | None = None
    _metrics_server: MetricsServer | None = None
    _controllers: list[Controller] = field(default_factory=list)
    _stopped: bool = False

    def wake(self) -> None:
        """Every controller looks again now (the pace changed: their waits were timed for the
        old one)."""
        for controller in self._controllers:
            controller.wake()

    def stop(self) -> None:
        """Join every controller thread, then stop the programs and moto; safe to call twice.
        Each step runs even when one before it failed: no process outlives a failed stop."""
        if self._stopped:
            return
        self._stopped = True
        with contextlib.ExitStack() as steps:  # run last-pushed first
            steps.callback(_one_world.release)
            steps.callback(self._aws.stop)
            steps.callback(self.control_plane.stop)
            if self._machines is not None:
                steps.callback(self._machines.stop)
            if self._node_endpoint is not None:
                steps.callback(self._node_endpoint.stop)
            if self._metrics_server is not None:
                steps.callback(self._metrics_server.stop)
            if self._informed is not None:
                steps.callback(self._informed.stop)
            steps.callback(_stop_together, self._controllers)

    def __enter__(self) -> World:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def _stop_together(controllers: list[Controller]) -> None:
    """Stop every controller at once: on a busy machine a loop caught in a slow call costs its
    own join's wait (up to 5 s), not ten such waits one after another, which can outlast the
    time a stopped world is given; the first error is raised once all have stopped."""
    with ThreadPoolExecutor(max_workers=max(len(controllers), 1)) as pool:
        stopped = [pool.submit(controller.stop) for controller in controllers]
    errors = [error for future in stopped if (error := future.exception()) is not None]
    if errors:
        raise errors[0]


def start_world(
    state_dir: Path,
    speed: float = DEFAULT_SPEED,
    cluster_name: str = "myeks",
    region: str = "ap-northeast-2",
    kubelets: str = DEFAULT_KUBELETS,
) -> World:
    """Start and seed a world; its files go to `state_dir` (created if missing). `kubelets`:
    who runs the nodes (`KUBELETS`)."""
    if not _one_world.acquire(blocking=False):
        raise RuntimeError(
            "a rehearsal world is already running in this process (moto state is global): "
            "stop it before starting another"
        )
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    state_dir = Path(state_dir)
    updates = eks_updates.install()  # before the AWS server first serves EKS (its routes)
    answers.install()
    access.install()
    updates.clear()
    # the delays at the programs' pace, the calendar at a person's (`pace` moves it later)
    timings, clock = scaled(speed), WorldClock(1.0)
    reset_moto()  # moto keeps state per process, across servers: start from an empty account
    # the world's keys are its IAM user's, whom its EKS access entry makes cluster admin; a
    # second user's entry has the view policy (the read-only identity)
    owner = iam_user(ACCOUNT_ID, region)
    entries = AccessEntries(cluster_name)
    token = entries.add(owner, ADMIN_POLICY, region)
    viewer_token = entries.add(iam_user(ACCOUNT_ID, region, VIEWER), VIEW_POLICY, region)
    access.serve(entries)
    keys = owner.keys
    aws = AwsServer(keys)
    home = state_dir / "controlplane"
    plane = ControlPlane(home, access=entries, egress_socket=node_network())
    world = World({}, state_dir / KUBECONFIG_FILE, plane, aws)
    try:
        aws.controls[pace.PACE_PATH] = pace.control(timings, clock, on_change=world.wake)
        aws.control_token = token
        plane.start()
        store = world.store = KubeApi(plane.credentials("admin").api_client())
        logs, ports = ContainerLogs(state_dir / "pods"), state_dir / "ports"
        world._node_endpoint = node_endpoint(plane, state_dir, logs, ports)
        world._node_endpoint.start()
        endpoints: dict[str, Any] = {
            "aws_endpoint_url": aws.start(),
            "kube_url": plane.api_url,
            "kube_token": token,
            "kube_ca": plane.ca_pem,
            **keys.as_endpoints(),
            "region": region,
            "cluster_name": cluster_name,
            "account_id": ACCOUNT_ID,
            "speed": speed,
            "kubelets": kubelets,
            "pid": os.getpid(),
        }
        clients = moto_clients(endpoints)
        ca_data = base64.b64encode(plane.ca_pem.encode()).decode()
        seed_stack(clients, cluster_name, region, plane.api_url, ca_data)
        seed_cluster(store, cluster_policy_crd(release()))
        world._metrics_server = _metrics_server(plane, world._node_endpoint, store, state_dir)
        informed = world._informed = InformedKubeApi(store)
        machines, node_controllers = _node_layer(
            kubelets, world, informed, timings, clients, cluster_name, logs, ports, state_dir
        )
        world._machines = machines
        nodes = NodeLifecycle(informed, timings, clients, cluster_name, region, updates, machines)
        nodes.converge_instantly()
        schedules = EventBridgeScheduler(informed, timings, clients, clock)
        world._controllers = [nodes, *node_controllers, schedules]
        aws.on_write("/clusters", nodes.wake)
        aws.on_write("/", nodes.wake)  # EC2 (query API): an instance terminated by hand
        aws.controls[gpu_faults.GPU_FAULTS_PATH] = gpu_faults.control(store)
        aws.controls[node_os.NODE_OS_PATH] = node_os.control(store, machines.switch_os)
        aws.on_write("/schedules", schedules.wake)
        for controller in world._controllers:
            controller.start()
        # what lab.status checks from outside: each program the world cannot move without
        endpoints["processes"] = {
            **plane.described(),
            **world._node_endpoint.described(),
            **world._metrics_server.described(),
        }
        world.endpoints = endpoints
        document = kubeconfig_document(plane.api_url, cluster_name, token, ca_data, LAB_USER)
        write_kubeconfig(world.kubeconfig_path, document)
        viewing = kubeconfig_document(plane.api_url, cluster_name, viewer_token, ca_data, VIEWER)
        write_kubeconfig(state_dir / VIEWER_KUBECONFIG, viewing)
        atomic_write_json(state_dir / ENDPOINTS, world.endpoints)
    except BaseException:
        world.stop()
        raise
    return world


def _node_layer(
    kubelets: str,
    world: World,
    store: InformedKubeApi,
    timings: Timings,
    clients: Callable[[str], Any],
    cluster_name: str,
    logs: ContainerLogs,
    ports: Path,
    state_dir: Path,
) -> tuple[Machines, list[Controller]]:
    """What runs the nodes and their pods, and the controllers that play what runs on them.

    Real kubelets (`labs.sim.node.kubelet`) run every pod themselves, the GPU Operator's and
    the monitoring release's included; the world keeps the prometheus-operator's work. The
    model registers each Node and plays its kubelet, device plugin, operands, the monitoring
    release's programs and the resource metrics."""
    plane, endpoint = world.control_plane, world._node_endpoint
    assert plane.ca is not None and endpoint is not None, "the plane and its endpoint start first"
    pod_network = PodNetwork(ports, state_dir / ROUTES_DIR)
    if kubelets == REAL_KUBELETS:
        nodes = KubeletNodes(
            state_dir / NODES_DIR,
            plane.ca,
            plane.api_url,
            container_process.command(plane.api_url, plane.home / "pki", state_dir / ENDPOINTS),
            write_catalogue(state_dir / NODES_DIR / "images.json", _built_images()),
            ports,
            state_dir / ROUTES_DIR,
            # as instances reach AWS, and the pod network's proxy (Prometheus' way to its targets)
            other_apis=(world._aws.url, endpoint.proxy_url),
        )
        nodes.prepare()
        return nodes, [PrometheusOperator(store, timings, pod_network, endpoint.proxy_url)]
    if kubelets != MODELLED_KUBELETS:
        raise ValueError(f"kubelets: {kubelets!r} is not one of {', '.join(KUBELETS)}")
    network = Network(store, SecurityGroups(clients, cluster_name), expected_ip=pod_ip_on)
    return RegisteredNodes(store), [
        NodeLeases(store, timings),
        Kubelet(store, timings, logs, programs=[TcpCheck(network), AllReduce(network)]),
        DevicePlugin(store, timings, logs),
        GpuOperatorPod(store, timings, plane, logs, pod_network, state_dir / OPERATOR_DIR),
        FeatureDiscovery(store, timings),
        dcgm_exporter(store, timings, pod_network),
        MonitoringRelease(
            store, timings, plane, pod_network, endpoint.proxy_url, state_dir / MONITORING_DIR
        ),
        ResourceMetrics(store, timings, state_dir / METRICS_DIR),
    ]


def _built_images() -> tuple[Image, ...]:
    """The images of the programs the lab builds at their pinned releases (the metrics-server
    add-on's, the monitoring release's), which the nodes' registries serve beside the
    catalogue's."""
    return (
        Image(metrics_server_image(metrics_server_version()), 20 * MB),
        Image(monitoring_release.image("prometheus"), 120 * MB),
        Image(monitoring_release.image("kube-state-metrics"), 20 * MB),
    )


def node_network() -> Path:
    """Where the API server's egress to the nodes goes (`ControlPlane.egress_socket`, served by
    the node endpoint): an abstract unix socket, no file to leave behind and no path-length
    limit to hit."""
    return Path(f"@eks-gpu-lab-{new_token()[:16]}")


def node_endpoint(
    plane: ControlPlane, state_dir: Path, logs: ContainerLogs, ports: Path
) -> NodeEndpoint:
    """The nodes' kubelet API: logs from the containers' files, exec and attach played by
    `labs.sim.node.exec_streams` with the world's credentials, port-forward to the addresses written
    under `ports` (the dcgm-exporter's). A node reaches it with any address and the kubelet
    port (`status.daemonEndpoints`), through the plane's `node_network()`."""
    assert plane.ca is not None, "the control plane starts first"
    exec_command = [
        sys.executable, "-m", "labs.sim.node.exec_streams",
        "--api-url", plane.api_url,
        "--pki", str(plane.home / "pki"),
        "--logs", str(logs.root),
    ]  # fmt: skip
    routes = state_dir / ROUTES_DIR
    for directory in (ports, routes):
        directory.mkdir(parents=True, exist_ok=True)
    return NodeEndpoint(
        state_dir / "node-endpoint",
        plane.ca,
        exec_command,
        logs.root,
        ports,
        plane.egress_socket,
        metrics_dir=state_dir / METRICS_DIR,
        routes_dir=routes,
        connect_tcp=True,
    )


def _metrics_server(
    plane: ControlPlane, endpoint: NodeEndpoint, store: KubeApi, state_dir: Path
) -> MetricsServer:
    """The metrics-server addon: its objects, the route from its Service's cluster IP to the
    real program (what the aggregator's tunnel to the Service reaches), then the program."""
    addon = MetricsServer(state_dir / "metrics-server", plane, proxy_url=endpoint.proxy_url)

    def route(service: dict) -> None:
        for port in service["spec"]["ports"]:
            path = state_dir / ROUTES_DIR / f"{service['spec']['clusterIP']}_{port['port']}"
            atomic_write_text(path, addon.address)

    seed_metrics_server(store, route)
    addon.start()
    return addon
