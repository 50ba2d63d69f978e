"""The world's informers on the real API server (the held-still plane): what the controllers
read is what the server holds, their own writes at once, and a deleted object stays deleted."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sim_support import wait_for
from still_support import StillPlane

from labs.kube.api import KubeWatch
from labs.kube.informers import InformedKubeApi
from labs.kube.resources import CONFIG_MAPS, PODS, NotFound

NAMESPACE = "default"


@pytest.fixture
def informed(still: StillPlane) -> Iterator[InformedKubeApi]:
    api = InformedKubeApi(still.api)
    api.informer(CONFIG_MAPS)
    api.informer(PODS)
    yield api
    api.stop()


def config_map(name: str, **labels: str) -> dict:
    return {"metadata": {"name": name, "labels": labels}, "data": {"k": "v"}}


def gone(api: InformedKubeApi, name: str) -> bool:
    try:
        api.get(CONFIG_MAPS, name, NAMESPACE)
    except NotFound:
        return True
    return False


def test_a_write_reads_back_at_once_and_another_clients_delete_shows(informed, still):
    informed.create(CONFIG_MAPS, config_map("mine"), NAMESPACE)
    assert informed.get(CONFIG_MAPS, "mine", NAMESPACE)["data"] == {"k": "v"}
    informed.update(CONFIG_MAPS, "mine", lambda cm: cm["data"].update(k="w"), NAMESPACE)
    assert informed.get(CONFIG_MAPS, "mine", NAMESPACE)["data"] == {"k": "w"}

    still.api.delete(CONFIG_MAPS, "mine", NAMESPACE)
    wait_for(lambda: gone(informed, "mine"), what="the delete in the informer")


def test_the_answer_to_an_older_write_never_brings_a_deleted_object_back(informed, still):
    written = informed.create(CONFIG_MAPS, config_map("late"), NAMESPACE)
    still.api.delete(CONFIG_MAPS, "late", NAMESPACE)
    wait_for(lambda: gone(informed, "late"), what="the delete in the informer")

    informed.informer(CONFIG_MAPS).remember(written)  # as if that answer came in only now
    assert gone(informed, "late")


def test_a_relist_read_before_our_write_keeps_the_write_and_drops_what_it_lacks(informed, still):
    informed.create(CONFIG_MAPS, config_map("old"), NAMESPACE)
    items, read_at = still.api.list(CONFIG_MAPS, NAMESPACE)  # the list a relist would bring
    informed.update(CONFIG_MAPS, "old", lambda cm: cm["data"].update(k="new"), NAMESPACE)
    informed.create(CONFIG_MAPS, config_map("after"), NAMESPACE)
    listing = {"items": [i for i in items if i["metadata"]["name"] != "old"],
               "metadata": {"resourceVersion": read_at}}  # fmt: skip

    informed.informer(CONFIG_MAPS)._apply(KubeWatch.RELISTED, listing)

    assert informed.get(CONFIG_MAPS, "old", NAMESPACE)["data"] == {"k": "new"}
    assert not gone(informed, "after")
    never = config_map("never")
    never["metadata"].update(namespace=NAMESPACE, resourceVersion="1")
    stale = {"items": [*items, never], "metadata": {"resourceVersion": read_at}}
    informed.informer(CONFIG_MAPS)._apply(KubeWatch.RELISTED, stale)
    assert gone(informed, "never") is False  # what the list holds, the cache holds
    informed.informer(CONFIG_MAPS)._apply(KubeWatch.RELISTED, listing)
    assert gone(informed, "never"), "an object the newer list lacks stays in the cache"


@pytest.mark.parametrize(
    "labels, fields",
    [
        ("app=gpu", ""),
        ("app==gpu,tier=a", ""),
        ("app!=gpu", ""),
        ("tier", ""),
        ("!tier", ""),
        ("", "metadata.name=two"),
        ("app=gpu", "metadata.name!=one"),
    ],
)
def test_selected_reads_match_what_the_api_server_selects(informed, still, labels, fields):
    for name, tags in (("one", {"app": "gpu", "tier": "a"}), ("two", {"app": "gpu"}),
                       ("three", {"app": "web", "tier": "b"})):  # fmt: skip
        informed.create(CONFIG_MAPS, config_map(name, **tags), NAMESPACE)

    def names(api) -> list[str]:
        listed = api.list(CONFIG_MAPS, NAMESPACE, label_selector=labels, field_selector=fields)[0]
        return [cm["metadata"]["name"] for cm in listed]

    wanted = names(still.api)
    assert wanted, "the selector picks nothing: a weak check"
    assert names(informed) == wanted


def test_unbound_pods_read_as_the_api_server_lists_them(informed, still):
    still.put(PODS, {"metadata": {"name": "waiting"}, "spec": {"containers": [
        {"name": "c", "image": "busybox"}]}}, NAMESPACE)  # fmt: skip
    wait_for(lambda: informed.list(PODS, NAMESPACE)[0], what="the pod in the informer")

    def names(api) -> list[str]:
        listed = api.list(PODS, NAMESPACE, field_selector="spec.nodeName=")[0]
        return [p["metadata"]["name"] for p in listed]

    assert names(informed) == names(still.api) == ["waiting"]
