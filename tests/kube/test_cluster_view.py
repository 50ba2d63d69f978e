"""The watched view: a slow check never stalls the informers.

Checks may read pod logs over HTTP; if they ran under the view's lock, one hung read
would freeze every informer and every other wait. Against a held-still API server.
"""

from __future__ import annotations

import threading

import pytest

from labs.kube.resources import NODES
from labs.kube.view import ClusterView, Snapshot, WatchedKind

NODE = {"metadata": {"name": "late-node"}}


@pytest.fixture
def view(kube_client):
    with ClusterView([WatchedKind("nodes", kube_client, NODES)]) as watched:
        yield watched


def test_the_view_keeps_changing_while_a_check_is_blocked(view, still):
    release = threading.Event()
    blocked = threading.Event()
    seen_while_blocked: list[bool] = []

    def slow_check(v: ClusterView) -> bool:
        if not blocked.is_set():
            blocked.set()
            # The informer must deliver the new node while this check still runs.
            seen_while_blocked.append(
                _wait_until(lambda: v.find("nodes", "late-node") is not None, release)
            )
        return v.find("nodes", "late-node") is not None

    waiter = threading.Thread(target=lambda: view.wait_for(slow_check, 30, "late node"))
    waiter.start()
    assert blocked.wait(10), "the check never ran"
    still.put(NODES, NODE)
    waiter.join(30)

    assert seen_while_blocked == [True]
    assert not waiter.is_alive()


def _wait_until(condition, give_up: threading.Event, timeout: float = 10.0) -> bool:
    """Poll `condition` from inside the check (without the view's lock) for up to `timeout`."""
    deadline = threading.Event()
    timer = threading.Timer(timeout, deadline.set)
    timer.start()
    try:
        while not deadline.is_set() and not give_up.is_set():
            if condition():
                return True
            deadline.wait(0.01)
        return False
    finally:
        timer.cancel()


def test_a_snapshot_answers_like_a_view():
    snapshot = Snapshot({"nodes": [{"metadata": {"name": "a"}}, {"metadata": {"name": "b"}}]})

    assert snapshot.find("nodes", "b") == {"metadata": {"name": "b"}}
    assert snapshot.find("nodes", "c") is None and snapshot.objects("pods") == []
