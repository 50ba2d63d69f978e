"""Shared fixtures: a Kubernetes API emulator on a free loopback port, and kubectl against it."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from controlplane_support import rehearsals_under
from scenario_support import SimLab, another_lab_record, ready_sim_lab, wait_ready
from tool_support import require_tool

from labs.sim.apiserver import ApiServer
from labs.sim.store import CLUSTER_POLICY, ObjectStore
from labs.sim.tls import ServerTls


@dataclass(frozen=True)
class Emulator:
    """A running emulator: its base URL, its store and a kubeconfig pointing at it."""

    url: str
    store: ObjectStore
    kubeconfig_path: Path
    server: ApiServer

    @property
    def token(self) -> str:
        return self.server.token

    @property
    def tls(self) -> ServerTls:
        return self.server.tls


@pytest.fixture(scope="session", autouse=True)
def no_rehearsal_left_behind(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """After the whole session, no test may have left a rehearsal backend running."""
    yield
    left = rehearsals_under(tmp_path_factory.getbasetemp())
    if left:
        pytest.fail("rehearsal backends left running by the tests:\n" + "\n".join(left))


@pytest.fixture(scope="module")
def world_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimLab]:
    """One ready rehearsal world per test module (each test takes its own lab record on it)."""
    with ready_sim_lab(tmp_path_factory.mktemp("world")) as ready:
        yield ready


@pytest.fixture
def sim_lab(world_lab: SimLab, tmp_path: Path) -> SimLab:
    """A fresh lab record (empty journal, no runs) on the module's shared, ready world."""
    fresh = another_lab_record(world_lab, tmp_path / "state")
    wait_ready(fresh.lab)
    return fresh


@pytest.fixture
def emulator(tmp_path: Path) -> Iterator[Emulator]:
    server = ApiServer()
    url = server.start()
    try:
        kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig", cluster_name="test")
        yield Emulator(url, server.store, kubeconfig, server)
    finally:
        server.stop()


Kubectl = Callable[..., subprocess.CompletedProcess]


@pytest.fixture
def kubectl(emulator: Emulator, tmp_path: Path) -> Kubectl:
    """Run kubectl against the emulator: `kubectl("get", "nodes", check=False)`.

    Each emulator gets its own --cache-dir, because kubectl caches discovery per host:port.
    """
    kubectl_bin = require_tool("kubectl")
    cache_dir = tmp_path / "kubectl-cache"

    def run(*args: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
        command = [kubectl_bin, "--kubeconfig", str(emulator.kubeconfig_path)]
        command += ["--cache-dir", str(cache_dir), *args]
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        if check and result.returncode != 0:
            raise AssertionError(
                f"{' '.join(args)} exited {result.returncode}:\n{result.stdout}{result.stderr}"
            )
        return result

    return run


@pytest.fixture
def kube_client(emulator: Emulator):
    """An official `kubernetes` ApiClient configured from the emulator's kubeconfig."""
    from kubernetes import config

    client = config.new_client_from_config(config_file=str(emulator.kubeconfig_path))
    yield client
    client.close()


GPU_NODES = ("ip-10-0-1-11.ec2.internal", "ip-10-0-2-12.ec2.internal")
OPERATOR_NAMESPACE = "gpu-operator"
DEVICE_PLUGIN = "nvidia-device-plugin-daemonset"


def gpu_node(name: str, gpus: int = 1) -> dict:
    """A Ready g4dn.xlarge node as the GPU Operator labels it."""
    address = name.removeprefix("ip-").split(".")[0].replace("-", ".")
    return {
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "node.kubernetes.io/instance-type": "g4dn.xlarge",
                "eks.amazonaws.com/nodegroup": "gpu",
                "nvidia.com/gpu.present": "true",
                "nvidia.com/gpu.deploy.device-plugin": "true",
            },
        },
        "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]},
        "status": {
            "capacity": {"cpu": "4", "memory": "16106348Ki", "nvidia.com/gpu": str(gpus)},
            "allocatable": {"cpu": "3920m", "memory": "15089516Ki", "nvidia.com/gpu": str(gpus)},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
            "addresses": [{"type": "InternalIP", "address": address}],
            "nodeInfo": {
                "kubeletVersion": "v1.35.0-eks-3025e55",
                "osImage": "Amazon Linux 2023.7.20250512",
                "kernelVersion": "6.1.134-152.225.amzn2023.x86_64",
                "containerRuntimeVersion": "containerd://1.7.27",
            },
        },
    }


def cluster_policy() -> dict:
    return {
        "metadata": {"name": "cluster-policy"},
        "spec": {
            "operator": {"defaultRuntime": "containerd"},
            "driver": {"enabled": False},
            "toolkit": {"enabled": True, "version": "v1.18.0"},
            "devicePlugin": {
                "enabled": True,
                "repository": "nvcr.io/nvidia",
                "image": "k8s-device-plugin",
                "version": "v0.19.0",
            },
            "dcgmExporter": {"enabled": True},
        },
        "status": {"state": "ready", "namespace": OPERATOR_NAMESPACE},
    }


def device_plugin_daemonset() -> dict:
    labels = {"app": DEVICE_PLUGIN}
    return {
        "metadata": {"name": DEVICE_PLUGIN, "namespace": OPERATOR_NAMESPACE, "labels": labels},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": {"nvidia.com/gpu.deploy.device-plugin": "true"},
                    "tolerations": [
                        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
                    ],
                    "priorityClassName": "system-node-critical",
                    "containers": [
                        {
                            "name": "nvidia-device-plugin",
                            "image": "nvcr.io/nvidia/k8s-device-plugin:v0.19.0",
                            "command": ["nvidia-device-plugin"],
                        }
                    ],
                },
            },
        },
        "status": {
            "desiredNumberScheduled": 2,
            "currentNumberScheduled": 2,
            "numberMisscheduled": 0,
            "numberReady": 2,
            "updatedNumberScheduled": 2,
            "numberAvailable": 2,
        },
    }


@pytest.fixture
def gpu_cluster(emulator: Emulator) -> Emulator:
    """The emulator holding two GPU nodes, the ClusterPolicy and the device-plugin DaemonSet."""
    store = emulator.store
    store.register(CLUSTER_POLICY)
    store.create("namespaces", {"metadata": {"name": OPERATOR_NAMESPACE}})
    for name in GPU_NODES:
        store.create("nodes", gpu_node(name))
    store.create(CLUSTER_POLICY, cluster_policy())
    store.create("daemonsets.apps", device_plugin_daemonset())
    return emulator
