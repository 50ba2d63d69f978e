"""The world's controllers as clients of the real API server: what a kubelet, a device plugin and
an event recorder do there, seen through the official client; and what the NVIDIA runtime and
the operator decide on a node, as the kubelet and the operator model play them."""

from __future__ import annotations

import socket
import struct
import threading
from datetime import datetime

import pytest
from kubernetes import client, config
from sim_support import probe_pod, wait_for

from labs.kube.gpu import NVIDIA_PCI_LABEL
from labs.kube.resources import EVENTS, NODES, PODS
from labs.sim.controllers.events import EventRecorder
from labs.sim.controllers.heartbeats import NODE_LEASES
from labs.sim.controllers.kubelet import Kubelet, injected_gpus
from labs.sim.controllers.pod_endpoint import page_server
from labs.sim.controlplane.tls import LOOPBACK
from labs.sim.node.container_logs import ContainerLogs
from labs.sim.node.hardware import DEFAULT_RUNTIME_ANNOTATION
from labs.sim.timings import scaled


def core_api(sim_lab) -> client.CoreV1Api:
    return client.CoreV1Api(config.new_client_from_config(str(sim_lab.lab.paths.kubeconfig)))


def gpu_node_names(sim_lab) -> list[str]:
    nodes = sim_lab.world.store.list(NODES, label_selector=f"{NVIDIA_PCI_LABEL}=true")[0]
    return [n["metadata"]["name"] for n in nodes]


def test_a_second_gpu_pod_pinned_to_a_busy_gpu_node_is_rejected_by_its_kubelet(sim_lab):
    core = core_api(sim_lab)
    node = gpu_node_names(sim_lab)[0]
    holder = probe_pod("holder")
    holder["spec"].update(nodeName=node, restartPolicy="Always")
    holder["spec"]["containers"][0]["command"] = ["sleep", "infinity"]
    pinned = probe_pod("pinned")
    pinned["spec"]["nodeName"] = node
    core.create_namespaced_pod("default", holder)
    try:
        wait_for(lambda: core.read_namespaced_pod("holder", "default").status.phase == "Running")
        core.create_namespaced_pod("default", pinned)
        status = wait_for(
            lambda: (
                (s := core.read_namespaced_pod("pinned", "default").status).phase == "Failed" and s
            ),
            what="pinned pod rejected",
        )
    finally:
        for name in ("holder", "pinned"):
            core.delete_namespaced_pod(name, "default", grace_period_seconds=0)
    assert status.reason == "UnexpectedAdmissionError"
    assert status.message == (
        "Pod was rejected: Allocate failed due to requested number of devices unavailable for "
        "nvidia.com/gpu. Requested: 1, Available: 0, which is unexpected"
    )
    events = core.list_namespaced_event(
        "default", field_selector="involvedObject.name=pinned,reason=UnexpectedAdmissionError"
    ).items
    assert [(e.type, e.source.component) for e in events] == [("Warning", "kubelet")]


def test_the_same_event_twice_bumps_its_count_on_the_api_server(sim_lab):
    store = sim_lab.world.store
    pod = store.create(
        PODS, {"metadata": {"name": "evented"}, "spec": probe_pod()["spec"]}, "default"
    )
    try:
        recorder = EventRecorder(store, "kubelet")
        for message in ("Back-off pulling image", "Back-off pulling image", "another message"):
            recorder.record(pod, "BackOff", message, "Warning")
        events = store.list(
            EVENTS, "default", field_selector="involvedObject.name=evented,reason=BackOff"
        )[0]
    finally:
        store.delete(PODS, "evented", "default", grace_seconds=0)
    assert sorted(e["count"] for e in events) == [1, 2]
    assert {e["involvedObject"]["uid"] for e in events} == {pod["metadata"]["uid"]}


def test_every_node_renews_its_lease_as_a_kubelet_does(sim_lab):
    coordination = client.CoordinationV1Api(
        config.new_client_from_config(str(sim_lab.lab.paths.kubeconfig))
    )
    nodes = {n["metadata"]["name"] for n in sim_lab.world.store.list(NODES)[0]}

    def renewals() -> dict[str, datetime]:
        leases = coordination.list_namespaced_lease(NODE_LEASES).items
        return {lease.metadata.name: lease.spec.renew_time for lease in leases}

    first = renewals()
    assert set(first) == nodes
    later = wait_for(
        lambda: (now := renewals()) and all(now[n] > first[n] for n in nodes) and now,
        what="every lease renewed",
    )
    assert set(later) == nodes


def node(runtime: str, gpu_machine: bool = True) -> dict:
    labels = {"node.kubernetes.io/instance-type": "g5.xlarge" if gpu_machine else "t3.medium"}
    annotations = {DEFAULT_RUNTIME_ANNOTATION: runtime}
    return {"metadata": {"name": "n", "labels": labels, "annotations": annotations}}


def pod(image: str = "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04", **extra) -> dict:
    container = {"name": "c", "image": image, "command": ["nvidia-smi"], **extra}
    return {"metadata": {"name": "p"}, "spec": {"containers": [container]}}


@pytest.mark.parametrize(
    ("case", "target", "gpus"),
    [
        ("GPU allocated by the device plugin", pod(resources={"limits": {"nvidia.com/gpu": "1"}}),
         1),
        ("CUDA image, no limit, nvidia default runtime: the whole node", pod(), 1),
        ("the pod asks for no device", pod(env=[{"name": "NVIDIA_VISIBLE_DEVICES",
                                                 "value": "void"}]), None),
        ("driver only", pod(env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}]), 0),
        ("an image without the NVIDIA variables", pod("public.ecr.aws/docker/library/busybox:1"),
         None),
    ],
)  # fmt: skip
def test_what_the_nvidia_runtime_injects_on_a_gpu_node(case: str, target: dict, gpus):
    assert injected_gpus(target, node("nvidia")) == gpus, case


def test_a_runc_node_injects_nothing_into_a_cuda_image():
    assert injected_gpus(pod(), node("runc", gpu_machine=False)) is None


class _NodeCacheBehind:
    """A kubelet's view where the pods' watch has seen a bind the nodes' watch has not caught
    up with: the cache's node still says `cached`, the API server says `current`."""

    def __init__(self, pod: dict, cached: dict, current: dict) -> None:
        self.pod, self._cached, self._current = pod, cached, current
        self.plain = self

    def list(self, kind, **_):
        return ([self.pod] if kind is PODS else [self._cached]), "1"

    def get(self, kind, name, namespace=None):
        assert kind is NODES and name == self._current["metadata"]["name"]
        return self._current

    def update(self, kind, name, mutate, namespace=None):
        mutate(self.pod)
        return self.pod

    def create(self, kind, body, namespace=None):  # the rejection's Event
        return body


def _gpu_node(allocatable: str) -> dict:
    gpu = "nvidia.com/gpu"
    return {
        "metadata": {"name": "ip-10-0-0-1"},
        "status": {"capacity": {gpu: "1"}, "allocatable": {gpu: allocatable}},
    }


def _bound_gpu_pod() -> dict:
    limits = {"nvidia.com/gpu": "1"}
    container = {"name": "cuda", "image": "cuda", "resources": {"limits": limits}}
    return {
        "metadata": {"name": "probe", "namespace": "default", "uid": "u1"},
        "spec": {"nodeName": "ip-10-0-0-1", "containers": [container]},
        "status": {"phase": "Pending"},
    }


def admit_behind_a_node_cache(tmp_path, current: str) -> dict:
    """The pod's status after one kubelet pass whose node cache says allocatable 0."""
    pod = _bound_gpu_pod()
    store = _NodeCacheBehind(pod, cached=_gpu_node("0"), current=_gpu_node(current))
    Kubelet(store, scaled(60.0), ContainerLogs(tmp_path)).reconcile()  # type: ignore[arg-type]
    return pod["status"]


def test_a_kubelet_admits_a_gpu_pod_its_node_cache_has_not_caught_up_with(tmp_path):
    """The scheduler binds from its own watch: a GPU it saw come back must not be refused
    because the kubelet's node cache still shows 0 (a real kubelet asks its device manager)."""
    status = admit_behind_a_node_cache(tmp_path, current="1")
    assert status["phase"] == "Pending"
    assert [s["state"]["waiting"]["reason"] for s in status["containerStatuses"]] == [
        "ContainerCreating"
    ]


def test_a_kubelet_still_rejects_a_gpu_pod_when_the_node_has_none(tmp_path):
    status = admit_behind_a_node_cache(tmp_path, current="0")
    assert (status["phase"], status["reason"]) == ("Failed", "UnexpectedAdmissionError")
    assert "no healthy devices present" in status["message"]


def test_a_scraper_that_hangs_up_before_the_page_leaves_no_traceback(
    capfd: pytest.CaptureFixture[str],
) -> None:
    """A played exporter's page server outlives a scraper's timeout quietly: the world's and the
    tests' output once filled with BrokenPipeError tracebacks."""
    asked, hung_up, handlers = threading.Event(), threading.Event(), []

    def page() -> str:
        handlers.append(threading.current_thread())
        asked.set()
        hung_up.wait(10)
        return "DCGM_FI_DEV_GPU_UTIL 0\n" * 10_000

    server = page_server(page, (LOOPBACK, 0))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with socket.create_connection(server.server_address[:2]) as scraper:
            scraper.sendall(b"GET /metrics HTTP/1.1\r\nHost: pod\r\n\r\n")
            assert asked.wait(10), "the page server never read the page"
            # closed with a reset, as a client that gave up does
            scraper.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        hung_up.set()
        [handler] = handlers
        handler.join(10)
        assert not handler.is_alive()
    finally:
        server.shutdown()
        server.server_close()
    assert "Traceback" not in capfd.readouterr().err
