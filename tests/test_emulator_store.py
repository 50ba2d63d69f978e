"""The object store the emulator and the world controllers share."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from sim_support import WAIT_SECONDS, wait_for

from labs.sim.store import (
    CLUSTER_POLICY,
    AlreadyExists,
    BadRequest,
    Conflict,
    Gone,
    Invalid,
    NotFound,
    ObjectStore,
    Watch,
)


def pod(name: str, namespace: str = "default", labels: dict | None = None, **spec) -> dict:
    return {
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": {"containers": [{"name": "main", "image": "busybox"}], **spec},
    }


@pytest.fixture
def store() -> ObjectStore:
    return ObjectStore()


def test_create_fills_server_fields_and_one_counter_orders_all_writes(store):
    first = store.create("pods", pod("a"))
    second = store.create("configmaps", {"metadata": {"name": "c"}, "data": {}})
    assert first["apiVersion"] == "v1" and first["kind"] == "Pod"
    assert first["metadata"]["uid"] != second["metadata"]["uid"]
    assert first["metadata"]["creationTimestamp"].endswith("Z")
    assert first["metadata"]["generation"] == 1
    assert first["status"] == {"phase": "Pending"}
    assert int(second["metadata"]["resourceVersion"]) > int(first["metadata"]["resourceVersion"])


def namespace(store: ObjectStore, name: str) -> None:
    store.create("ns", {"metadata": {"name": name}})


def test_duplicate_create_is_already_exists_with_kubectl_message(store):
    namespace(store, "gpu-operator")
    store.create("ds", {"metadata": {"name": "x", "namespace": "gpu-operator"}})
    with pytest.raises(AlreadyExists) as error:
        store.create("daemonsets.apps", {"metadata": {"name": "x", "namespace": "gpu-operator"}})
    assert error.value.code == 409
    assert error.value.message == 'daemonsets.apps "x" already exists'


def test_missing_and_bad_names_are_invalid(store):
    with pytest.raises(Invalid, match="name or generateName is required"):
        store.create("pods", {"metadata": {}})
    with pytest.raises(Invalid, match="RFC 1123"):
        store.create("pods", pod("Bad_Name"))
    generated = store.create("pods", {"metadata": {"generateName": "probe-"}})
    assert generated["metadata"]["name"].startswith("probe-")


def test_get_of_unknown_object_and_type_is_not_found(store):
    with pytest.raises(NotFound, match='daemonsets.apps "nope" not found'):
        store.get("ds", "nope", "gpu-operator")
    with pytest.raises(NotFound, match="doesn't have a resource type"):
        store.get("clusterpolicies.nvidia.com", "cluster-policy")
    store.register(CLUSTER_POLICY)
    assert store.resolve("clusterpolicy") is store.resolve("clusterpolicies.nvidia.com")


def test_quantities_are_stored_as_strings(store):
    created = store.create(
        "pods",
        pod("gpu"),
    )
    patched = store.patch(
        "pods",
        created["metadata"]["name"],
        {
            "spec": {
                "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": 1}}}]
            }
        },
        "strategic",
    )
    assert patched["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "1"}


def test_stale_replace_conflicts_and_fresh_replace_bumps_generation(store):
    created = store.create("deploy", {"metadata": {"name": "op"}, "spec": {"replicas": 1}})
    fresh = dict(created, spec={"replicas": 2})
    replaced = store.replace("deployments.apps", fresh)
    assert replaced["metadata"]["generation"] == 2
    with pytest.raises(Conflict, match="the object has been modified"):
        store.replace("deploy", dict(created, spec={"replicas": 3}))


def test_status_subresource_separates_spec_and_status(store):
    store.create("ds", {"metadata": {"name": "dp"}, "spec": {"a": 1}, "status": {"numberReady": 0}})
    main = store.patch("ds", "dp", {"spec": {"a": 2}, "status": {"numberReady": 5}}, "merge")
    assert main["spec"] == {"a": 2} and main["status"]["numberReady"] == 0
    status = store.patch(
        "ds", "dp", {"spec": {"a": 3}, "status": {"numberReady": 5}}, "merge", subresource="status"
    )
    assert status["spec"] == {"a": 2} and status["status"]["numberReady"] == 5
    assert status["metadata"]["generation"] == 2


def test_noop_patch_and_update_change_nothing(store):
    store.register(CLUSTER_POLICY)
    created = store.create(CLUSTER_POLICY, {"metadata": {"name": "cp"}, "spec": {"x": True}})
    patched = store.patch(CLUSTER_POLICY, "cp", {"spec": {"x": True}}, "merge")
    updated = store.update(CLUSTER_POLICY, "cp", lambda obj: obj["spec"].update(x=True))
    assert patched == created == updated


def test_update_may_change_status_but_not_identity(store):
    store.create("ds", {"metadata": {"name": "dp"}, "spec": {}})
    updated = store.update(
        "ds", "dp", lambda obj: obj.setdefault("status", {}).update(numberReady=1)
    )
    assert updated["status"]["numberReady"] == 1
    with pytest.raises(Invalid, match="immutable"):
        store.update("ds", "dp", lambda obj: obj["metadata"].update(name="other"))


def test_concurrent_updates_lose_nothing(store):
    store.create("configmaps", {"metadata": {"name": "counter"}, "data": {"n": "0"}})

    def increment() -> None:
        for _ in range(200):
            store.update(
                "cm", "counter", lambda obj: obj["data"].update(n=str(int(obj["data"]["n"]) + 1))
            )

    threads = [threading.Thread(target=increment) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert store.get("cm", "counter")["data"]["n"] == "400"


def test_strategic_merge_keeps_unsent_fields_of_keyed_lists_and_replaces_the_rest(store):
    store.create(
        "pods",
        {
            "metadata": {"name": "p"},
            "spec": {
                "containers": [
                    {"name": "a", "image": "v1", "resources": {"limits": {"nvidia.com/gpu": "1"}}},
                    {"name": "b", "image": "v1"},
                ],
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
            },
        },
    )
    patch = {
        "spec": {
            "$setElementOrder/containers": [{"name": "a"}, {"name": "b"}],
            "containers": [{"name": "a", "image": "v2"}, {"name": "b", "$patch": "delete"}],
            "tolerations": [{"key": "dedicated", "operator": "Exists"}],
        }
    }
    patched = store.patch("pods", "p", patch, "strategic")
    assert patched["spec"]["containers"] == [
        {"name": "a", "image": "v2", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
    ]
    assert patched["spec"]["tolerations"] == [{"key": "dedicated", "operator": "Exists"}]
    merged = store.patch("pods", "p", {"spec": {"containers": [{"name": "a"}]}}, "merge")
    assert merged["spec"]["containers"] == [{"name": "a"}]


def test_json_patch_and_its_errors(store):
    store.create("cm", {"metadata": {"name": "c"}, "data": {"k": "v"}})
    patched = store.patch("cm", "c", [{"op": "replace", "path": "/data/k", "value": "w"}], "json")
    assert patched["data"] == {"k": "w"}
    with pytest.raises(Invalid, match="cannot be applied"):
        store.patch("cm", "c", [{"op": "remove", "path": "/data/missing"}], "json")
    with pytest.raises(BadRequest, match="JSON array"):
        store.patch("cm", "c", {"data": {}}, "json")


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("app=gpu", ["a", "b"]),
        ("app==gpu,tier!=web", ["a"]),
        ("tier in (web, db)", ["b", "c"]),
        ("tier notin (web)", ["a", "c"]),
        ("tier", ["b", "c"]),
        ("!tier", ["a"]),
    ],
)
def test_label_selectors(store, selector, expected):
    store.create("pods", pod("a", labels={"app": "gpu"}))
    store.create("pods", pod("b", labels={"app": "gpu", "tier": "web"}))
    store.create("pods", pod("c", labels={"app": "cpu", "tier": "db"}))
    items, _ = store.list("pods", label_selector=selector)
    assert [item["metadata"]["name"] for item in items] == expected


def test_create_into_a_missing_namespace_is_not_found(store):
    with pytest.raises(NotFound) as error:
        store.create("pods", pod("p", "nope"))
    assert (error.value.code, error.value.message) == (404, 'namespaces "nope" not found')
    assert store.list("pods")[0] == []
    namespace(store, "nope")
    assert store.create("pods", pod("p", "nope"))["metadata"]["namespace"] == "nope"


def test_delete_with_failing_preconditions_is_conflict_and_keeps_the_object(store):
    created = store.create("pods", pod("p"))
    meta = created["metadata"]
    with pytest.raises(Conflict, match="Precondition failed: UID in precondition: other"):
        store.delete("pods", "p", preconditions={"uid": "other"})
    with pytest.raises(Conflict, match="ResourceVersion in precondition: 1,"):
        store.delete("pods", "p", preconditions={"resourceVersion": "1"})
    assert store.get("pods", "p")["metadata"]["uid"] == meta["uid"]
    wanted = {"uid": meta["uid"], "resourceVersion": meta["resourceVersion"]}
    store.delete("pods", "p", preconditions=wanted)
    assert store.list("pods")[0] == []


def test_field_selectors_in_any_order_and_unknown_fields(store):
    namespace(store, "other")
    store.create("pods", pod("a", nodeName="n1"))
    store.create("pods", pod("b", "other", nodeName="n1"))
    items, _ = store.list("pods", field_selector="metadata.namespace=other,spec.nodeName=n1")
    assert [item["metadata"]["name"] for item in items] == ["b"]
    items, _ = store.list("pods", field_selector="spec.nodeName!=n1")
    assert items == []
    with pytest.raises(BadRequest, match="field label not supported: spec.image"):
        store.list("pods", field_selector="spec.image=x")


def test_field_selectors_are_checked_per_kind(store):
    store.create("pods", pod("a"))
    store.create("nodes", {"metadata": {"name": "n1"}, "spec": {"unschedulable": True}})
    assert store.list("pods", field_selector="status.phase=Pending")[0][0]["metadata"]["name"]
    for kind in ("deployments", "nodes", "configmaps"):
        with pytest.raises(BadRequest, match="^field label not supported: status.phase$"):
            store.list(kind, field_selector="status.phase=Running")
    with pytest.raises(BadRequest, match="field label not supported: spec.nodeName"):
        store.watch("nodes", field_selector="spec.nodeName=n1")


def test_a_missing_field_compares_as_its_go_zero_value(store):
    store.create("nodes", {"metadata": {"name": "cordoned"}, "spec": {"unschedulable": True}})
    store.create("nodes", {"metadata": {"name": "fresh"}, "spec": {}})
    schedulable, _ = store.list("nodes", field_selector="spec.unschedulable=false")
    assert [node["metadata"]["name"] for node in schedulable] == ["fresh"]
    store.create("jobs", {"metadata": {"name": "j"}, "spec": {}})
    assert store.list("jobs", field_selector="status.successful=0")[0] != []


def test_watch_replays_then_streams_and_filters(store):
    store.create("pods", pod("old", labels={"app": "gpu"}))
    mark = store.resource_version
    with store.watch("pods", label_selector="app=gpu") as initial:
        assert initial.next(timeout=1)[1]["metadata"]["name"] == "old"
    with store.watch(
        "pods", namespace="default", resource_version=mark, label_selector="app=gpu"
    ) as stream:
        namespace(store, "other")
        store.create("pods", pod("other-ns", "other", labels={"app": "gpu"}))
        store.create("pods", pod("new", labels={"app": "gpu"}))
        store.patch("pods", "new", {"metadata": {"labels": {"app": "cpu"}}}, "merge")
        store.patch("pods", "old", {"metadata": {"labels": {"x": "y"}}}, "merge")
        store.delete("pods", "old")
        events = [
            (kind, obj["metadata"]["name"]) for kind, obj in iter(lambda: stream.next(0.2), None)
        ]
    assert events == [("ADDED", "new"), ("DELETED", "new"), ("MODIFIED", "old"), ("DELETED", "old")]


def test_watch_from_forgotten_history_is_gone():
    store = ObjectStore(history_limit=5)
    for index in range(10):
        store.create("cm", {"metadata": {"name": f"c{index}"}})
    with pytest.raises(Gone) as error:
        store.watch("cm", resource_version="1")
    assert error.value.code == 410


class CountedReads:
    """A watch's queue that counts the reads that reached it: a reader counted here has
    passed every early return of `Watch.next` and waits on the queue itself."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.reads = 0

    def get(self, *args: Any, **kwargs: Any) -> Any:
        self.reads += 1
        return self._inner.get(*args, **kwargs)

    def put(self, item: Any) -> None:
        self._inner.put(item)


class BlockedReader:
    """A thread reading a watch with `next()` and no timeout: only an event or close() can
    return it, so whatever it got came from the store, never from a timeout."""

    def __init__(self, stream: Watch) -> None:
        self.queue = CountedReads(stream._queue)
        stream._queue = self.queue
        self.got: list[tuple[str, str] | None] = []
        self.thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self.thread.start()

    def _read(self, stream: Watch) -> None:
        while True:
            event = stream.next()
            self.got.append(event and (event[0], event[1]["metadata"]["name"]))
            if event is None:
                return

    def wait_until_blocked(self, reads: int) -> None:
        """Until the reader is waiting in its `reads`-th read, with nothing got from it yet."""
        wait_for(lambda: self.queue.reads == reads, what=f"the reader waiting in read {reads}")
        assert len(self.got) == reads - 1


def test_a_write_wakes_a_blocked_reader(store):
    stream = store.watch("pods", resource_version=store.resource_version)
    reader = BlockedReader(stream)
    reader.wait_until_blocked(reads=1)
    store.create("pods", pod("woken"))
    reader.wait_until_blocked(reads=2)
    assert reader.got == [("ADDED", "woken")]
    stream.close()
    reader.thread.join(WAIT_SECONDS)
    assert not reader.thread.is_alive()


def test_closing_a_watch_wakes_a_blocked_reader(store):
    stream = store.watch("pods", resource_version=store.resource_version)
    reader = BlockedReader(stream)
    reader.wait_until_blocked(reads=1)
    stream.close()
    reader.thread.join(WAIT_SECONDS)
    assert not reader.thread.is_alive(), "close() did not wake the blocked reader"
    assert reader.got == [None]


def test_deleting_a_namespace_deletes_its_objects(store):
    store.create("ns", {"metadata": {"name": "gpu-operator"}})
    store.create("ds", {"metadata": {"name": "dp", "namespace": "gpu-operator"}})
    store.create("ds", {"metadata": {"name": "keep", "namespace": "default"}})
    store.delete("ns", "gpu-operator")
    assert [item["metadata"]["name"] for item in store.list("ds")[0]] == ["keep"]


def test_pod_logs_follow_the_pod(store):
    store.create("pods", pod("probe"))
    store.set_pod_log("default", "probe", "GPU 0: Tesla T4\n")
    store.append_pod_log("default", "probe", "PASS\n")
    assert store.pod_log("default", "probe") == "GPU 0: Tesla T4\nPASS\n"
    store.delete("pods", "probe")
    with pytest.raises(NotFound):
        store.pod_log("default", "probe")
