"""Events, the device plugin and the GPU Operator controllers on a bare object store."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from kubernetes import client
from sim_support import WAIT_SECONDS, probe_pod, wait_for

from labs.sim.controllers.device_plugin import DevicePlugin
from labs.sim.controllers.events import EventRecorder
from labs.sim.controllers.gpu_operator import DEFAULT_TOLERATIONS, GpuOperator, daemonset_manifest
from labs.sim.controllers.kubelet import Kubelet
from labs.sim.controllers.scheduler import Scheduler
from labs.sim.controllers.taint_eviction import TaintEviction
from labs.sim.controllers.workloads import STARTUP_ANNOTATION, STARTUP_FROM_ANNOTATION, Workloads
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
    Watch,
)
from labs.sim.timings import REAL_WORLD_SECONDS, Timings, scaled

NS = "gpu-operator"
PLUGIN = "nvidia-device-plugin-daemonset"
TIMINGS = scaled(600)
GPU = "nvidia.com/gpu"


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
    with running_operator_world(TIMINGS) as store:
        yield store


@contextmanager
def running_operator_world(timings: Timings) -> Iterator[ObjectStore]:
    """Nodes with the controllers the operator needs (all but node lifecycle), without AWS."""
    store = ObjectStore()
    store.register(CLUSTER_POLICY)
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


def policy_state(store: ObjectStore) -> str | None:
    return (store.get(CLUSTER_POLICY, "cluster-policy").get("status") or {}).get("state")


def plugin_daemonset(store: ObjectStore) -> dict | None:
    try:
        return store.get(DAEMONSETS, PLUGIN, NS)
    except NotFound:
        return None


def next_node_with(changes: Watch, wanted) -> dict:
    """The first node a watch reports in the `wanted` state (bounded wait)."""
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        event = changes.next(timeout=0.5)
        if event is not None and wanted(event[1]):
            return event[1]
    pytest.fail("no node reached the wanted state")


DEVICE_PLUGIN_DISABLED = {"state:": "state-device-plugin", "status": "disabled"}


def logged_steps_once(store: ObjectStore, wanted: dict) -> list[dict] | None:
    """The operator's logged steps, once one of them has the `wanted` fields (else None)."""
    operator = store.list(PODS, NS, label_selector="app=gpu-operator")[0][0]
    steps = [
        json.loads(line)
        for line in store.pod_log(NS, operator["metadata"]["name"]).splitlines()
        if "step completed" in line
    ]
    return steps if any(wanted.items() <= step.items() for step in steps) else None


def test_operator_runs_the_plugin_and_a_disable_deletes_it_keeping_state_ready(
    operator_world: ObjectStore,
) -> None:
    store = operator_world
    install(store)
    wait_for(lambda: gpu_counts(store, "allocatable") == ["1", "1"], what="GPUs advertised")
    # The state the disable must keep: every operand rolled out (the device plugin serving
    # both GPUs says nothing yet about the other operands' pods).
    wait_for(lambda: policy_state(store) == "ready", what="ClusterPolicy ready after the install")
    assert "nvidia.com/gpu" not in store.get(NODES, "sys-a")["status"]["allocatable"]
    plugin = store.get(DAEMONSETS, PLUGIN, NS)
    assert plugin["spec"]["template"]["spec"]["nodeSelector"] == {
        "nvidia.com/gpu.deploy.device-plugin": "true"
    }
    assert plugin["status"]["desiredNumberScheduled"] == 2
    assert store.get(DAEMONSETS, "nvidia-mig-manager", NS)["status"]["desiredNumberScheduled"] == 0

    with store.watch(NODES, "", store.resource_version, f"{NVIDIA_PCI_LABEL}=true") as changes:
        store.patch(
            CLUSTER_POLICY,
            "cluster-policy",
            {"spec": {"devicePlugin": {"enabled": False}}},
            "merge",
        )
        first_zero = next_node_with(changes, lambda n: n["status"]["allocatable"][GPU] == "0")
    # allocatable drops at once; capacity keeps "1" through kubelet's grace period
    assert first_zero["status"]["capacity"][GPU] == "1"
    wait_for(lambda: plugin_daemonset(store) is None, what="device plugin DaemonSet deleted")
    wait_for(lambda: gpu_counts(store, "allocatable") == ["0", "0"], what="allocatable 0")
    wait_for(lambda: not store.list(PODS, NS, label_selector=f"app={PLUGIN}")[0], what="pods gone")
    # The pass that deleted the DaemonSet writes the state, then its log: wait for the log
    # (the DaemonSet and its pods can be gone before the operator's thread gets that far).
    steps = wait_for(
        lambda: logged_steps_once(store, DEVICE_PLUGIN_DISABLED),
        what="the operator's pass logging the device plugin disabled",
    )
    policy = store.get(CLUSTER_POLICY, "cluster-policy")
    assert policy["status"]["state"] == "ready"
    assert steps[-12]["state:"] == "pre-requisites"
    assert DEVICE_PLUGIN_DISABLED.items() <= steps[-7].items()
    assert steps[-7]["logger"] == "controllers.ClusterPolicy"
    # the key stays on the node; capacity follows after kubelet's grace period
    wait_for(lambda: gpu_counts(store, "capacity") == ["0", "0"], what="capacity 0")


def set_operator_ready(store: ObjectStore, ready: int) -> None:
    """The operator's process: a Ready pod of its Deployment, or none (no controllers run)."""
    name = "gpu-operator-5d8f7c9b4-x2k7p"
    if not ready:
        store.delete(PODS, name, NS)
        return
    ready_true = [{"type": "Ready", "status": "True"}]
    pod = {"metadata": {"name": name, "labels": {"app": "gpu-operator"}},
           "spec": {"containers": [{"name": "gpu-operator", "image": "gpu-operator"}]},
           "status": {"phase": "Running", "conditions": ready_true}}  # fmt: skip
    store.create(PODS, pod, NS)


def test_operator_scaled_to_zero_reconciles_nothing() -> None:
    store = ObjectStore()
    store.register(CLUSTER_POLICY)
    store.create(NODES, ready_node("gpu-a", True))
    install(store)
    # Not started: each reconcile() is one whole pass, run here, with no reconcile delay.
    operator = GpuOperator(store, dataclasses.replace(TIMINGS, operator_reconcile=0.0))
    set_operator_ready(store, 1)
    operator.reconcile()
    assert plugin_daemonset(store) is not None

    set_operator_ready(store, 0)
    store.patch(
        CLUSTER_POLICY, "cluster-policy", {"spec": {"devicePlugin": {"enabled": False}}}, "merge"
    )
    store.create(NODES, ready_node("gpu-c", True))
    operator.reconcile()
    assert plugin_daemonset(store) is not None
    assert "nvidia.com/gpu.present" not in store.get(NODES, "gpu-c")["metadata"]["labels"]

    set_operator_ready(store, 1)  # positive control: the same pass acts once the operator is up
    operator.reconcile()
    assert plugin_daemonset(store) is None
    assert store.get(NODES, "gpu-c")["metadata"]["labels"]["nvidia.com/gpu.present"] == "true"


def test_daemonset_tolerations_follow_the_cluster_policy_in_place(
    operator_world: ObjectStore,
) -> None:
    store = operator_world
    install(store)
    created = wait_for(lambda: plugin_daemonset(store), what="device plugin DaemonSet")
    container = created["spec"]["template"]["spec"]["containers"][0]
    assert container["name"] == "nvidia-device-plugin"
    custom = [{"key": "lab", "operator": "Exists", "effect": "NoSchedule"}]
    store.patch(
        CLUSTER_POLICY, "cluster-policy", {"spec": {"daemonsets": {"tolerations": custom}}}, "merge"
    )

    def tolerations() -> list | None:
        current = plugin_daemonset(store)
        return current and current["spec"]["template"]["spec"]["tolerations"]

    assert wait_for(lambda: tolerations() == custom, what="tolerations updated")
    assert plugin_daemonset(store)["metadata"]["uid"] == created["metadata"]["uid"]


def test_kubelet_orders_one_story_of_events_by_name() -> None:
    store = ObjectStore()
    timings = TIMINGS
    controllers = [Scheduler(store, timings), Kubelet(store, timings)]
    for name, gpus in (("gpu-a", "0"), ("gpu-b", "0")):
        node = ready_node(name, True)
        node["status"]["capacity"]["nvidia.com/gpu"] = "1"
        node["status"]["allocatable"]["nvidia.com/gpu"] = gpus
        store.create(NODES, node)
    for controller in controllers:
        controller.start()
    try:
        store.create(PODS, probe_pod(), "default")
        wait_for(
            lambda: store.list(EVENTS, "default", field_selector="reason=FailedScheduling")[0],
            what="FailedScheduling",
        )
        store.update(NODES, "gpu-b", lambda n: n["status"]["allocatable"].update({GPU: "1"}))
        wait_for(
            lambda: store.get(PODS, "gpu-probe", "default")["status"]["phase"] == "Succeeded",
            what="probe Succeeded",
        )
    finally:
        for controller in controllers:
            controller.stop()
    story = store.list(EVENTS, "default", field_selector="involvedObject.name=gpu-probe")[0]
    assert [event["reason"] for event in story] == [
        "FailedScheduling",
        "Scheduled",
        "Pulled",
        "Created",
        "Started",
    ]
    assert all(event["metadata"]["name"].startswith("gpu-probe.") for event in story)


def finished(core: client.CoreV1Api, name: str) -> bool:
    return core.read_namespaced_pod(name, "default").status.phase in ("Succeeded", "Failed")


def test_kubelet_rejects_a_pod_pinned_to_a_node_without_a_healthy_gpu(emulator, kube_client):
    store = emulator.store
    for name, healthy in (("gpu-a", "0"), ("gpu-b", "1")):
        node = ready_node(name, True)
        node["status"]["capacity"][GPU] = "1"
        node["status"]["allocatable"][GPU] = healthy
        store.create(NODES, node)
    kubelet = Kubelet(store, TIMINGS)
    kubelet.start()
    core = client.CoreV1Api(kube_client)
    try:
        for name, node in (("pinned", "gpu-a"), ("fits", "gpu-b"), ("second", "gpu-b")):
            pod = probe_pod(name)
            pod["spec"]["nodeName"] = node
            core.create_namespaced_pod("default", pod)
            wait_for(lambda n=name: finished(core, n), what=f"{name} finished")
    finally:
        kubelet.stop()
    pinned = core.read_namespaced_pod("pinned", "default").status
    assert (pinned.phase, pinned.reason) == ("Failed", "UnexpectedAdmissionError")
    assert pinned.message == (
        "Pod was rejected: Allocate failed due to no healthy devices present; cannot allocate "
        "unhealthy devices nvidia.com/gpu, which is unexpected"
    )
    # the GPU the finished pod held is free again for the next one
    for name in ("fits", "second"):
        assert core.read_namespaced_pod(name, "default").status.phase == "Succeeded"
    events = core.list_namespaced_event(
        "default", field_selector="involvedObject.name=pinned,reason=UnexpectedAdmissionError"
    ).items
    assert [e.type for e in events] == ["Warning"]


def pods_added_in_order(changes: Watch, count: int) -> list[dict]:
    """The first `count` pods a watch reports ADDED, in the order the store created them."""
    added: list[dict] = []
    deadline = time.monotonic() + WAIT_SECONDS
    while len(added) < count and time.monotonic() < deadline:
        event = changes.next(timeout=0.5)
        if event is not None and event[0] == "ADDED":
            added.append(event[1])
    if len(added) < count:
        pytest.fail(f"{len(added)} of {count} pods created within {WAIT_SECONDS}s")
    return added


def test_re_enabled_plugin_serves_one_node_first_then_the_rest_counted_from_the_change() -> None:
    with running_operator_world(TIMINGS) as store:
        install(store)
        wait_for(lambda: gpu_counts(store, "allocatable") == ["1", "1"], what="GPUs advertised")
        disable = {"spec": {"devicePlugin": {"enabled": False}}}
        store.patch(CLUSTER_POLICY, "cluster-policy", disable, "merge")
        wait_for(lambda: gpu_counts(store, "allocatable") == ["0", "0"], what="allocatable 0")
        wait_for(lambda: not store.list(PODS, NS, label_selector=f"app={PLUGIN}")[0], what="gone")
        with store.watch(PODS, NS, store.resource_version, f"app={PLUGIN}") as made:
            changed_at = time.time()
            enable = {"spec": {"devicePlugin": {"enabled": True}}}
            store.patch(CLUSTER_POLICY, "cluster-policy", enable, "merge")
            # The rollout's order is the order its pods were made (one store counter orders
            # every write). Which node's GPU shows first in wall time is up to the threads
            # (both can turn ready in one kubelet pass), so that order is not asserted.
            order = [pod["spec"]["nodeName"] for pod in pods_added_in_order(made, 2)]
        wait_for(lambda: gpu_counts(store, "allocatable") == ["1", "1"], what="both served again")
        pods = store.list(PODS, NS, label_selector=f"app={PLUGIN}")[0]
    plans = {
        pod["spec"]["nodeName"]: (
            float(pod["metadata"]["annotations"][STARTUP_FROM_ANNOTATION]),
            float(pod["metadata"]["annotations"][STARTUP_ANNOTATION]),
        )
        for pod in pods
    }
    assert sorted(order) == sorted(plans) == ["gpu-a", "gpu-b"]
    # Both count from when the operator saw the change, not from when their pods were made,
    # and the rollout's first pod has the short (first-node) startup, the rest the long one.
    assert len({counted_from for counted_from, _ in plans.values()}) == 1
    assert all(changed_at <= counted_from for counted_from, _ in plans.values())
    assert [plans[name][1] for name in order] == [
        REAL_WORLD_SECONDS["operand_first_ready"],
        REAL_WORLD_SECONDS["operand_all_ready"],
    ]


@contextmanager
def daemonset_world(timings: Timings = TIMINGS) -> Iterator[ObjectStore]:
    """Two GPU nodes, one DaemonSet tolerating only the GPU taint, and a finished pod on gpu-a;
    the DaemonSet controller and the taint-eviction controller running."""
    store = ObjectStore()
    store.register(CLUSTER_POLICY)
    for name in ("gpu-a", "gpu-b"):
        store.create(NODES, ready_node(name, True))
    store.create(
        DAEMONSETS,
        daemonset_manifest(
            "operand", {"app": "operand"}, "img", node_selector={}, tolerations=DEFAULT_TOLERATIONS
        ),
        "default",
    )
    done = store.create(PODS, {**probe_pod("done"), "status": {"phase": "Succeeded"}}, "default")
    store.update(PODS, "done", lambda p: p["spec"].update(nodeName="gpu-a"), "default")
    controllers = [Workloads(store, timings), TaintEviction(store, timings)]
    for controller in controllers:
        controller.start()
    try:
        wait_for(lambda: operand_counts(store).get("desiredNumberScheduled") == 2, what="2 desired")
        assert done["metadata"]["uid"]
        yield store
    finally:
        for controller in controllers:
            controller.stop()


def operand_counts(store: ObjectStore) -> dict:
    return store.get(DAEMONSETS, "operand", "default").get("status") or {}


def operand_nodes(store: ObjectStore) -> list[str]:
    return sorted(p["spec"]["nodeName"] for p in store.list(PODS, "default", "app=operand")[0])


def taint(store: ObjectStore, node: str, effect: str) -> None:
    extra = {"key": "maintenance", "value": "true", "effect": effect}
    store.update(NODES, node, lambda n: n["spec"]["taints"].append(extra))


def test_a_noschedule_taint_keeps_the_daemon_pod_but_wants_one_fewer() -> None:
    with daemonset_world() as store:
        pod = store.list(PODS, "default", "app=operand")[0][0]
        added = {t["key"] for t in pod["spec"]["tolerations"]}
        assert {"nvidia.com/gpu", "node.kubernetes.io/not-ready"} <= added
        taint(store, "gpu-a", "NoSchedule")
        wait_for(lambda: operand_counts(store).get("desiredNumberScheduled") == 1, what="1 desired")
        status = operand_counts(store)
        assert (status["currentNumberScheduled"], status["numberMisscheduled"]) == (1, 1)
        assert operand_nodes(store) == ["gpu-a", "gpu-b"]  # the running pod stays
        assert not eviction_messages(store)


def test_a_noexecute_taint_evicts_every_untolerating_pod_and_nothing_comes_back() -> None:
    with daemonset_world() as store:
        taint(store, "gpu-a", "NoExecute")
        wait_for(lambda: operand_nodes(store) == ["gpu-b"], what="the operand evicted from gpu-a")
        wait_for(lambda: "done" not in pod_names(store), what="the finished pod deleted too")
        events = store.list(EVENTS, "default", field_selector="reason=TaintManagerEviction")[0]
        messages = sorted(eviction_messages(store))
        assert messages[0] == "Marking for deletion Pod default/done"
        assert messages[1].startswith("Marking for deletion Pod default/operand-")
        assert all("uid" not in e["involvedObject"] for e in events)
        assert {e["source"]["component"] for e in events} == {"taint-eviction-controller"}
        wait_for(lambda: operand_counts(store).get("desiredNumberScheduled") == 1, what="1 desired")

        store.update(NODES, "gpu-a", lambda n: n["spec"].update(taints=n["spec"]["taints"][:1]))
        wait_for(lambda: operand_nodes(store) == ["gpu-a", "gpu-b"], what="the operand back")


def test_toleration_seconds_delay_the_eviction_and_an_untaint_cancels_it() -> None:
    with daemonset_world() as store:
        grace = {"key": "maintenance", "operator": "Exists", "effect": "NoExecute"}
        for name, seconds in (("brief", 6), ("long", 60000)):
            pod = probe_pod(name)
            pod["spec"]["tolerations"].append(grace | {"tolerationSeconds": seconds})
            pod["spec"]["nodeName"] = "gpu-b"
            store.create(PODS, pod, "default")
        taint(store, "gpu-b", "NoExecute")
        wait_for(lambda: "brief" not in pod_names(store), what="brief evicted after 6 s real")
        assert "long" in pod_names(store)
        store.update(NODES, "gpu-b", lambda n: n["spec"].update(taints=n["spec"]["taints"][:1]))
        wait_for(
            lambda: "Cancelling deletion of Pod default/long" in eviction_messages(store),
            what="the pending eviction cancelled",
        )
        assert "long" in pod_names(store)


def pod_names(store: ObjectStore) -> set[str]:
    return {p["metadata"]["name"] for p in store.list(PODS, "default")[0]}


def eviction_messages(store: ObjectStore) -> list[str]:
    events = store.list(EVENTS, "default", field_selector="reason=TaintManagerEviction")[0]
    return [e["message"] for e in events]
