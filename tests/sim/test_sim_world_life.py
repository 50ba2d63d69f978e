"""A rehearsal world's life in one process: how it starts (a new stack, nothing applied) and
that stopping it leaves the process free for another; each test starts worlds of its own."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client
from scenario_support import own_world
from sim_support import kube, running_world, wait_for

from labs.settings import MODELLED_KUBELETS
from labs.sim.aws.seed import moto_clients
from labs.sim.world import World, start_world


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    """A world just started: nothing applied to it yet."""
    yield from running_world(tmp_path)


def test_fresh_world_looks_like_a_new_stack(world: World) -> None:
    core = client.CoreV1Api(kube(world))
    nodes = core.list_node().items
    assert [n.metadata.labels["node.kubernetes.io/instance-type"] for n in nodes] == [
        "t3.medium",
        "t3.medium",
    ]
    for node in nodes:
        assert node.metadata.name.endswith(".ap-northeast-2.compute.internal")
        assert node.metadata.labels["eks.amazonaws.com/nodegroup"] == "myeks-ng-1"
        assert node.status.allocatable["pods"] == "50"
        assert "nvidia.com/gpu" not in node.status.allocatable
    namespaces = {n.metadata.name for n in core.list_namespace().items}
    assert {"default", "kube-system", "kube-public"} <= namespaces
    daemonsets = client.AppsV1Api(kube(world)).list_namespaced_daemon_set("kube-system").items
    assert sorted(d.metadata.name for d in daemonsets) == ["aws-node", "kube-proxy"]
    eks = moto_clients(world.endpoints)("eks")
    assert eks.describe_cluster(name="myeks")["cluster"]["endpoint"] == world.endpoints["kube_url"]


def is_request_handler(thread: threading.Thread) -> bool:
    """A server's per-connection thread (socketserver.ThreadingMixIn, under moto and the token
    webhook): a daemon that ends by itself once its client's connection is closed."""
    return thread.daemon and thread.name.endswith("(process_request_thread)")


def test_stop_joins_every_thread_and_frees_the_process_for_another_world(tmp_path: Path) -> None:
    before = set(threading.enumerate())
    first = own_world(tmp_path / "one", speed=600)
    with pytest.raises(RuntimeError, match="already running in this process"):
        start_world(tmp_path / "two", speed=600)
    first.stop()
    # stop() has joined every thread the world runs (controllers, both servers) ...
    left = set(threading.enumerate()) - before
    assert {t.name for t in left if not is_request_handler(t)} == set()
    # ... and no server accepts a new connection, so the request handlers end by themselves.
    wait_for(
        lambda: not set(threading.enumerate()) - before, what="the request handler threads to end"
    )
    assert set(threading.enumerate()) - before == set()
    second = start_world(tmp_path / "two", speed=600, kubelets=MODELLED_KUBELETS)
    second.stop()
