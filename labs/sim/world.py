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
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from moto.server import ThreadedMotoServer

from labs.sim.apiserver import ApiServer
from labs.sim.aws_seed import ACCOUNT_ID, moto_clients, seed_stack
from labs.sim.controllers.base import Controller
from labs.sim.controllers.device_plugin import DevicePlugin
from labs.sim.controllers.gpu_operator import GpuOperator
from labs.sim.controllers.kubelet import Kubelet
from labs.sim.controllers.network import ConnectProbe, SecurityGroups
from labs.sim.controllers.node_lifecycle import NodeLifecycle
from labs.sim.controllers.scheduler import Scheduler
from labs.sim.controllers.taint_eviction import TaintEviction
from labs.sim.controllers.workloads import Workloads
from labs.sim.kube_seed import seed_cluster
from labs.sim.kubeconfig import write_kubeconfig
from labs.sim.store import ObjectStore
from labs.sim.timings import DEFAULT_SPEED, scaled
from labs.state import atomic_write_json

ENDPOINTS_FILE = "endpoints.json"
KUBECONFIG_FILE = "kubeconfig"
_one_world = threading.Lock()


@dataclass
class World:
    """A running world; `stop()` ends the controllers and both servers."""

    endpoints: dict[str, Any]
    kubeconfig_path: Path
    store: ObjectStore
    _moto: ThreadedMotoServer
    _api: ApiServer
    _controllers: list[Controller] = field(default_factory=list)
    _moto_started: bool = False
    _stopped: bool = False

    def stop(self) -> None:
        """Join every controller thread and stop both servers; safe to call twice."""
        if self._stopped:
            return
        self._stopped = True
        try:
            for controller in self._controllers:
                controller.stop()
            self._api.stop()
            if self._moto_started:
                self._moto.stop()
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
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    api = ApiServer()
    world = World({}, Path(state_dir) / KUBECONFIG_FILE, api.store, moto, api)
    try:
        moto.start()
        world._moto_started = True
        host, port = moto.get_host_and_port()
        aws_url = f"http://{host}:{port}"
        _reset_moto(aws_url)
        kube_url = api.start()
        clients = moto_clients(aws_url, region)
        seed_stack(clients, cluster_name, region, kube_url)
        seed_cluster(api.store)
        nodes = NodeLifecycle(api.store, timings, clients, cluster_name, region)
        nodes.converge_instantly()
        network = ConnectProbe(api.store, SecurityGroups(clients, cluster_name))
        world._controllers = [
            nodes,
            Workloads(api.store, timings),
            Scheduler(api.store, timings),
            TaintEviction(api.store, timings),
            Kubelet(api.store, timings, programs=[network]),
            DevicePlugin(api.store, timings),
            GpuOperator(api.store, timings),
        ]
        for controller in world._controllers:
            controller.start()
        world.endpoints = {
            "aws_endpoint_url": aws_url,
            "kube_url": kube_url,
            "region": region,
            "cluster_name": cluster_name,
            "account_id": ACCOUNT_ID,
            "pid": os.getpid(),
        }
        write_kubeconfig(world.kubeconfig_path, kube_url, cluster_name)
        atomic_write_json(Path(state_dir) / ENDPOINTS_FILE, world.endpoints)
    except BaseException:
        world.stop()
        raise
    return world


def _reset_moto(aws_url: str) -> None:
    """Start from an empty account: moto keeps state per process, across servers."""
    request = urllib.request.Request(f"{aws_url}/moto-api/reset", method="POST", data=b"")
    with urllib.request.urlopen(request, timeout=10):
        pass
