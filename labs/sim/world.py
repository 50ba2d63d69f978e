"""One rehearsal world in this process: moto, the Kubernetes API emulator and the controllers.

`start_world` brings everything up on free loopback ports, seeded like a fresh
`terraform apply` of the stack with defaults (GPU node group at 0, operator not
installed), then writes `endpoints.json` and `kubeconfig` into the state directory so
other processes (invoke tasks, kubectl, the aws CLI) can reach it. moto keeps its state
in module globals, so a process holds at most one world at a time.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from labs.sim import aws_answers, eks_updates, pace
from labs.sim.apiserver import ApiServer
from labs.sim.auth import Keys, eks_token_ok, new_token
from labs.sim.aws_seed import ACCOUNT_ID, moto_clients, seed_stack
from labs.sim.aws_server import AwsServer, reset_moto
from labs.sim.container_runtime import ContainerRuntime
from labs.sim.controllers.base import Controller
from labs.sim.controllers.device_plugin import DevicePlugin
from labs.sim.controllers.gpu_operator import GpuOperator
from labs.sim.controllers.kubelet import Kubelet
from labs.sim.controllers.network import AllReduce, Network, SecurityGroups, TcpCheck
from labs.sim.controllers.node_lifecycle import NodeLifecycle
from labs.sim.controllers.scheduler import Scheduler
from labs.sim.controllers.schedules import EventBridgeScheduler
from labs.sim.controllers.taint_eviction import TaintEviction
from labs.sim.controllers.workloads import Workloads
from labs.sim.kube_seed import seed_cluster
from labs.sim.process import ENDPOINTS
from labs.sim.store import ObjectStore
from labs.sim.timings import DEFAULT_SPEED, WorldClock, scaled
from labs.state import atomic_write_json

KUBECONFIG_FILE = "kubeconfig"
_one_world = threading.Lock()


@dataclass
class World:
    """A running world; `stop()` ends the controllers and both servers."""

    endpoints: dict[str, Any]
    kubeconfig_path: Path
    store: ObjectStore
    _aws: AwsServer
    _api: ApiServer
    _controllers: list[Controller] = field(default_factory=list)
    _stopped: bool = False

    @property
    def api(self) -> ApiServer:
        """The world's Kubernetes API emulator (its request log, for instance)."""
        return self._api

    def wake(self) -> None:
        """Every controller looks again now (the pace changed: their waits were timed for the
        old one)."""
        for controller in self._controllers:
            controller.wake()

    def stop(self) -> None:
        """Join every controller thread and stop both servers; safe to call twice."""
        if self._stopped:
            return
        self._stopped = True
        try:
            for controller in self._controllers:
                controller.stop()
            self._api.stop()
            self._aws.stop()
        finally:
            _one_world.release()

    def __enter__(self) -> World:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def start_world(
    state_dir: Path,
    speed: float = DEFAULT_SPEED,
    cluster_name: str = "myeks",
    region: str = "ap-northeast-2",
) -> World:
    """Start and seed a world; its files go to `state_dir` (created if missing)."""
    timings = scaled(speed)
    if not _one_world.acquire(blocking=False):
        raise RuntimeError(
            "a rehearsal world is already running in this process (moto state is global): "
            "stop it before starting another"
        )
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    updates = eks_updates.install()  # before the AWS server first serves EKS (its routes)
    aws_answers.install()
    updates.clear()
    clock = WorldClock(speed)
    keys, token = Keys.generate(), new_token()
    aws = AwsServer(keys)
    api = ApiServer(token=token, also_accept=lambda given: eks_token_ok(keys, cluster_name, given))
    world = World({}, Path(state_dir) / KUBECONFIG_FILE, api.store, aws, api)
    try:
        reset_moto()  # moto keeps state per process, across servers: start from an empty account
        api.runtime = ContainerRuntime(api.store)
        api.controls[pace.PACE_PATH] = pace.control(timings, clock, on_change=world.wake)
        kube_url = api.start()
        endpoints: dict[str, Any] = {
            "aws_endpoint_url": aws.start(),
            "kube_url": kube_url,
            "kube_token": token,
            "kube_ca": api.tls.ca_pem,
            **keys.as_endpoints(),
            "region": region,
            "cluster_name": cluster_name,
            "account_id": ACCOUNT_ID,
            "speed": speed,
            "pid": os.getpid(),
        }
        clients = moto_clients(endpoints)
        seed_stack(clients, cluster_name, region, kube_url, api.tls.ca_data)
        seed_cluster(api.store)
        nodes = NodeLifecycle(api.store, timings, clients, cluster_name, region, updates)
        nodes.converge_instantly()
        network = Network(api.store, SecurityGroups(clients, cluster_name))
        schedules = EventBridgeScheduler(api.store, timings, clients, clock)
        world._controllers = [
            nodes,
            Workloads(api.store, timings),
            Scheduler(api.store, timings),
            TaintEviction(api.store, timings),
            Kubelet(api.store, timings, programs=[TcpCheck(network), AllReduce(network)]),
            DevicePlugin(api.store, timings),
            GpuOperator(api.store, timings),
            schedules,
        ]
        aws.on_write("/clusters", nodes.wake)
        aws.on_write("/schedules", schedules.wake)
        for controller in world._controllers:
            controller.start()
        world.endpoints = endpoints
        api.write_kubeconfig(world.kubeconfig_path, cluster_name)
        atomic_write_json(Path(state_dir) / ENDPOINTS, world.endpoints)
    except BaseException:
        world.stop()
        raise
    return world
