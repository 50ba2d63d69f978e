"""Events, the device plugin and the GPU Operator controllers on a bare object store."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
from sim_support import wait_for

from labs.sim.controllers.device_plugin import DevicePlugin
from labs.sim.controllers.events import EventRecorder
from labs.sim.controllers.gpu_operator import GpuOperator
from labs.sim.controllers.kubelet import Kubelet
from labs.sim.controllers.scheduler import Scheduler
from labs.sim.controllers.workloads import Workloads
from labs.sim.hardware import NVIDIA_PCI_LABEL
from labs.sim.infra import CHART_DEFAULTS, _operator_deployment
from labs.sim.store import (
    CLUSTER_POLICY,
    DAEMONSETS,
    DEPLOYMENTS,
    EVENTS,
    NODES,
    PODS,
    NotFound,
    ObjectStore,
)
from labs.sim.timings import scaled

NS = "gpu-operator"
PLUGIN = "nvidia-device-plugin-daemonset"
TIMINGS = scaled(600)


def ready_node(name: str, gpu: bool) -> dict:
    labels = {"kubernetes.io/hostname": name}
    if gpu:
        labels[NVIDIA_PCI_LABEL] = "true"
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}] if gpu else []},
        "status": {
            "capacity": {"cpu": "4", "memory": "16069232Ki", "pods": "50"},
            "allocatable": {"cpu": "3920m", "memory": "15147936Ki", "pods": "50"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def test_same_event_twice_bumps_count_instead_of_adding_one() -> None:
    store = ObjectStore()
    pod = store.create(PODS, {"metadata": {"name": "p"}, "spec": {"containers": []}}, "default")
    recorder = EventRecorder(store, "default-scheduler")
    recorder.record(pod, "FailedScheduling", "0/1 nodes are available", "Warning")
    recorder.record(pod, "FailedScheduling", "0/1 nodes are available", "Warning")
    recorder.record(pod, "FailedScheduling", "another message", "Warning")
    events = store.list(EVENTS, "default")[0]
    assert sorted(e["count"] for e in events) == [1, 2]
    assert {e["involvedObject"]["uid"] for e in events} == {pod["metadata"]["uid"]}


@pytest.fixture
def operator_world() -> Iterator[ObjectStore]:
    """Nodes with the controllers the operator needs (all but node lifecycle), without AWS."""
    store = ObjectStore()
    store.register(CLUSTER_POLICY)
    timings = TIMINGS
    controllers = [
        Workloads(store, timings),
        Scheduler(store, timings),
        Kubelet(store, timings),
        DevicePlugin(store, timings),
        GpuOperator(store, timings),
    ]
    for name, gpu in (("sys-a", False), ("gpu-a", True), ("gpu-b", True)):
        store.create(NODES, ready_node(name, gpu))
    for controller in controllers:
        controller.start()
    try:
        yield store
    finally:
        for controller in controllers:
            controller.stop()


def install(store: ObjectStore) -> None:
    store.create("namespaces", {"metadata": {"name": NS}})
    store.create(DEPLOYMENTS, _operator_deployment("v26.3.1", {}), NS)
    store.create(
        CLUSTER_POLICY,
        {"metadata": {"name": "cluster-policy"}, "spec": json.loads(json.dumps(CHART_DEFAULTS))},
    )


def gpu_counts(store: ObjectStore, field: str) -> list:
    nodes = store.list(NODES, label_selector=f"{NVIDIA_PCI_LABEL}=true")[0]
    return [n["status"][field].get("nvidia.com/gpu") for n in nodes]


def plugin_daemonset(store: ObjectStore) -> dict | None:
    try:
        return store.get(DAEMONSETS, PLUGIN, NS)
    except NotFound:
        return None


def test_operator_runs_the_plugin_and_a_disable_deletes_it_keeping_state_ready(
    operator_world: ObjectStore,
) -> None:
    store = operator_world
    install(store)
    wait_for(lambda: gpu_counts(store, "allocatable") == ["1", "1"], what="GPUs advertised")
    assert "nvidia.com/gpu" not in store.get(NODES, "sys-a")["status"]["allocatable"]
    plugin = store.get(DAEMONSETS, PLUGIN, NS)
    assert plugin["spec"]["template"]["spec"]["nodeSelector"] == {
        "nvidia.com/gpu.deploy.device-plugin": "true"
    }
    assert plugin["status"]["desiredNumberScheduled"] == 2
    assert store.get(DAEMONSETS, "nvidia-mig-manager", NS)["status"]["desiredNumberScheduled"] == 0

    store.patch(
        CLUSTER_POLICY, "cluster-policy", {"spec": {"devicePlugin": {"enabled": False}}}, "merge"
    )
    wait_for(lambda: plugin_daemonset(store) is None, what="device plugin DaemonSet deleted")
    wait_for(lambda: gpu_counts(store, "allocatable") == ["0", "0"], what="allocatable 0")
    wait_for(lambda: not store.list(PODS, NS, label_selector=f"app={PLUGIN}")[0], what="pods gone")
    policy = store.get(CLUSTER_POLICY, "cluster-policy")
    assert policy["status"]["state"] == "ready"
    operator = store.list(PODS, NS, label_selector="app=gpu-operator")[0][0]
    steps = [
        json.loads(line)
        for line in store.pod_log(NS, operator["metadata"]["name"]).splitlines()
        if "step completed" in line
    ]
    assert steps[-12]["state:"] == "pre-requisites"
    assert {"state:": "state-device-plugin", "status": "disabled"}.items() <= steps[-7].items()
    assert steps[-7]["logger"] == "controllers.ClusterPolicy"
    # the key stays on the node; capacity follows after kubelet's grace period
    wait_for(lambda: gpu_counts(store, "capacity") == ["0", "0"], what="capacity 0")


def test_operator_scaled_to_zero_reconciles_nothing(operator_world: ObjectStore) -> None:
    store = operator_world
    install(store)
    wait_for(lambda: plugin_daemonset(store), what="device plugin DaemonSet")
    store.patch(DEPLOYMENTS, "gpu-operator", {"spec": {"replicas": 0}}, "merge", NS)
    wait_for(
        lambda: store.get(DEPLOYMENTS, "gpu-operator", NS)["status"]["readyReplicas"] == 0,
        what="operator down",
    )
    store.patch(
        CLUSTER_POLICY, "cluster-policy", {"spec": {"devicePlugin": {"enabled": False}}}, "merge"
    )
    store.create(NODES, ready_node("gpu-c", True))
    # Nothing to await when nothing may happen: give a live operator many reconcile periods.
    time.sleep(20 * TIMINGS.operator_reconcile)
    assert plugin_daemonset(store) is not None
    assert "nvidia.com/gpu.present" not in store.get(NODES, "gpu-c")["metadata"]["labels"]
    # positive control: the operator back, the edit and the new node are acted on
    store.patch(DEPLOYMENTS, "gpu-operator", {"spec": {"replicas": 1}}, "merge", NS)
    wait_for(lambda: plugin_daemonset(store) is None, what="device plugin DaemonSet deleted")
    assert store.get(NODES, "gpu-c")["metadata"]["labels"]["nvidia.com/gpu.present"] == "true"
