"""The scheduler's verdicts and Events, on a bare object store (no AWS needed)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest
from sim_support import probe_pod, wait_for

from labs.sim.controllers.scheduler import (
    Scheduler,
    failure_message,
    node_failures,
    preemption_verdict,
)
from labs.sim.store import EVENTS, NODES, PODS, ObjectStore
from labs.sim.timings import scaled

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}


def node(name: str, gpus: str | None = None, taints: list | None = None, **labels: str) -> dict:
    allocatable = {"cpu": "3920m", "memory": "15147936Ki", "pods": "50"}
    if gpus is not None:
        allocatable["nvidia.com/gpu"] = gpus
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}},
        "spec": {"taints": taints or []},
        "status": {
            "allocatable": allocatable,
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def four_nodes(gpus: str) -> list[dict]:
    return [
        node("sys-a"),
        node("sys-b"),
        node("gpu-a", gpus, [GPU_TAINT]),
        node("gpu-b", gpus, [GPU_TAINT]),
    ]


def verdict(pod: dict, nodes: list[dict], pods: list[dict] = ()) -> str:
    reasons: Counter[str] = Counter()
    preemption: Counter[str] = Counter()
    for candidate in nodes:
        failures = node_failures(pod, candidate, list(pods))
        reasons.update(failures)
        preemption[preemption_verdict(pod, candidate, failures)] += 1
    return failure_message(len(nodes), reasons, preemption)


def test_no_gpu_advertised_reads_like_the_reference_scenario() -> None:
    assert verdict(probe_pod(), four_nodes("0")) == (
        "0/4 nodes are available: 4 Insufficient nvidia.com/gpu. no new claims to deallocate, "
        "preemption: 0/4 nodes are available: 4 Preemption is not helpful for scheduling."
    )


def test_missing_toleration_uses_the_1_35_taint_wording_sorted_after_insufficient() -> None:
    pod = probe_pod()
    pod["spec"]["tolerations"] = []
    assert verdict(pod, four_nodes("1")).startswith(
        "0/4 nodes are available: 2 Insufficient nvidia.com/gpu, "
        "2 node(s) had untolerated taint(s). "
    )


def test_selector_mismatch_and_gpus_held_by_running_pods() -> None:
    pod = probe_pod()
    pod["spec"]["nodeSelector"] = {"tier": "gpu"}
    nodes = [node("sys-a"), node("gpu-a", "1", [GPU_TAINT], tier="gpu")]
    holder = probe_pod("holder")
    holder["spec"]["nodeName"] = "gpu-a"
    holder["status"] = {"phase": "Running"}
    assert verdict(pod, nodes, [holder]) == (
        "0/2 nodes are available: 1 Insufficient nvidia.com/gpu, "
        "1 node(s) didn't match Pod's node affinity/selector. no new claims to deallocate, "
        "preemption: 0/2 nodes are available: 1 No preemption victims found for incoming pod, "
        "1 Preemption is not helpful for scheduling."
    )
    assert node_failures(pod, nodes[1], []) == []


def test_a_resource_no_node_advertises_is_insufficient_everywhere_and_not_preemptible() -> None:
    pod = probe_pod()
    pod["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/mig-1g.5gb": "1"}}
    assert verdict(pod, four_nodes("1")) == (
        "0/4 nodes are available: 4 Insufficient nvidia.com/mig-1g.5gb. no new claims to "
        "deallocate, preemption: 0/4 nodes are available: 4 Preemption is not helpful for "
        "scheduling."
    )


@pytest.fixture
def scheduler_store() -> Iterator[ObjectStore]:
    store = ObjectStore()
    scheduler = Scheduler(store, scaled(600))
    scheduler.start()
    try:
        yield store
    finally:
        scheduler.stop()


def test_pending_pod_gets_one_event_counted_up_then_binds_when_a_gpu_appears(
    scheduler_store: ObjectStore,
) -> None:
    store = scheduler_store
    for candidate in four_nodes("0"):
        store.create(NODES, candidate)
    store.create(PODS, probe_pod(), "default")

    def failed_events() -> list[dict]:
        return store.list(EVENTS, "default", field_selector="reason=FailedScheduling")[0]

    events = wait_for(lambda: [e for e in failed_events() if e["count"] >= 2], what="retries")
    assert len(failed_events()) == 1
    assert events[0]["type"] == "Warning"
    assert events[0]["source"]["component"] == "default-scheduler"
    assert store.get(PODS, "gpu-probe", "default")["status"]["conditions"][0]["reason"] == (
        "Unschedulable"
    )

    def advertise(current: dict) -> None:
        current["status"]["allocatable"]["nvidia.com/gpu"] = "1"

    store.update(NODES, "gpu-b", advertise)
    assert wait_for(lambda: store.get(PODS, "gpu-probe", "default")["spec"].get("nodeName")) == (
        "gpu-b"
    )
    scheduled = store.list(EVENTS, "default", field_selector="reason=Scheduled")[0]
    assert scheduled[0]["message"] == "Successfully assigned default/gpu-probe to gpu-b"


def test_a_pod_with_an_unparseable_quantity_is_skipped_and_the_rest_still_schedule(
    scheduler_store: ObjectStore,
) -> None:
    store = scheduler_store
    for candidate in four_nodes("1"):
        store.create(NODES, candidate)
    # The API refuses such a pod; write one the way only a controller could, to prove the
    # scheduler survives it.
    held_back = probe_pod("a-broken")
    held_back["spec"]["schedulerName"] = "not-yet"  # so it cannot be bound before it breaks
    store.create(PODS, held_back, "default")

    def break_limits(pod: dict) -> None:
        pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "lots"
        pod["spec"]["schedulerName"] = "default-scheduler"

    store.update(PODS, "a-broken", break_limits, "default")
    store.create(PODS, probe_pod("b-valid"), "default")
    assert wait_for(lambda: store.get(PODS, "b-valid", "default")["spec"].get("nodeName"))
    assert "nodeName" not in store.get(PODS, "a-broken", "default")["spec"]
