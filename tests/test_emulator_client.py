"""The official `kubernetes` client against the emulator over real HTTP."""

from __future__ import annotations

import json
import threading

import pytest
from conftest import DEVICE_PLUGIN, GPU_NODES, OPERATOR_NAMESPACE, device_plugin_daemonset
from kubernetes import client, watch
from kubernetes.client.rest import ApiException


def test_core_api_reads_gpu_nodes(gpu_cluster, kube_client):
    nodes = client.CoreV1Api(kube_client).list_node(label_selector="nvidia.com/gpu.present=true")
    assert sorted(node.metadata.name for node in nodes.items) == sorted(GPU_NODES)
    assert {node.status.allocatable["nvidia.com/gpu"] for node in nodes.items} == {"1"}
    assert nodes.metadata.resource_version == gpu_cluster.store.resource_version


def test_apps_api_create_conflict_and_delete(gpu_cluster, kube_client):
    apps = client.AppsV1Api(kube_client)
    existing = apps.read_namespaced_daemon_set(DEVICE_PLUGIN, OPERATOR_NAMESPACE)
    assert existing.spec.template.spec.containers[0].name == "nvidia-device-plugin"
    with pytest.raises(ApiException) as duplicate:
        apps.create_namespaced_daemon_set(OPERATOR_NAMESPACE, device_plugin_daemonset())
    assert duplicate.value.status == 409
    apps.delete_namespaced_daemon_set(DEVICE_PLUGIN, OPERATOR_NAMESPACE)
    with pytest.raises(ApiException) as missing:
        apps.read_namespaced_daemon_set(DEVICE_PLUGIN, OPERATOR_NAMESPACE)
    assert missing.value.status == 404
    assert f'daemonsets.apps \\"{DEVICE_PLUGIN}\\" not found' in missing.value.body


def test_partial_status_written_by_a_controller_reads_back_typed(gpu_cluster, kube_client):
    gpu_cluster.store.update(
        "nodes", GPU_NODES[0], lambda node: node["status"].update(nodeInfo={"kubeletVersion": "v1"})
    )
    gpu_cluster.store.update(
        "ds", DEVICE_PLUGIN, lambda ds: ds.update(status={"numberReady": 1}), OPERATOR_NAMESPACE
    )
    node = client.CoreV1Api(kube_client).read_node(GPU_NODES[0])
    daemonset = client.AppsV1Api(kube_client).read_namespaced_daemon_set(
        DEVICE_PLUGIN, OPERATOR_NAMESPACE
    )
    assert node.status.node_info.kubelet_version == "v1"
    assert node.status.node_info.boot_id == ""
    assert (daemonset.status.number_ready, daemonset.status.number_misscheduled) == (1, 0)


def test_stale_replace_is_a_409(gpu_cluster, kube_client):
    apps = client.AppsV1Api(kube_client)
    stale = apps.read_namespaced_daemon_set(DEVICE_PLUGIN, OPERATOR_NAMESPACE)
    fresh = apps.read_namespaced_daemon_set(DEVICE_PLUGIN, OPERATOR_NAMESPACE)
    fresh.spec.template.spec.priority_class_name = "system-cluster-critical"
    apps.replace_namespaced_daemon_set(DEVICE_PLUGIN, OPERATOR_NAMESPACE, fresh)
    with pytest.raises(ApiException) as conflict:
        apps.replace_namespaced_daemon_set(DEVICE_PLUGIN, OPERATOR_NAMESPACE, stale)
    assert conflict.value.status == 409
    assert "Conflict" in conflict.value.body


def test_custom_objects_create_returns_object_and_merge_patch_applies(gpu_cluster, kube_client):
    custom = client.CustomObjectsApi(kube_client)
    created = custom.create_cluster_custom_object(
        "nvidia.com", "v1", "clusterpolicies", {"metadata": {"name": "second"}, "spec": {}}
    )
    assert created["kind"] == "ClusterPolicy" and created["metadata"]["uid"]
    patched = custom.patch_cluster_custom_object(
        "nvidia.com",
        "v1",
        "clusterpolicies",
        "cluster-policy",
        {"spec": {"devicePlugin": {"enabled": False}}},
    )
    assert patched["spec"]["devicePlugin"]["enabled"] is False
    assert patched["spec"]["devicePlugin"]["version"] == "v0.19.0"
    status = custom.get_cluster_custom_object_status(
        "nvidia.com", "v1", "clusterpolicies", "cluster-policy"
    )
    assert status["status"]["state"] == "ready"


def test_watch_stream_sees_added_then_deleted(gpu_cluster, kube_client):
    apps = client.AppsV1Api(kube_client)
    apps.delete_namespaced_daemon_set(DEVICE_PLUGIN, OPERATOR_NAMESPACE)
    seen: list[tuple[str, str]] = []
    started = threading.Event()
    stream = watch.Watch()

    def consume() -> None:
        for event in stream.stream(
            apps.list_namespaced_daemon_set, OPERATOR_NAMESPACE, timeout_seconds=20
        ):
            started.set()
            seen.append((event["type"], event["object"].metadata.name))
            if event["type"] == "DELETED":
                stream.stop()

    consumer = threading.Thread(target=consume)
    consumer.start()
    apps.create_namespaced_daemon_set(OPERATOR_NAMESPACE, device_plugin_daemonset())
    assert started.wait(timeout=20)
    apps.delete_namespaced_daemon_set(DEVICE_PLUGIN, OPERATOR_NAMESPACE)
    consumer.join(timeout=20)
    assert seen == [("ADDED", DEVICE_PLUGIN), ("DELETED", DEVICE_PLUGIN)]


def test_label_and_field_selectors_filter_pods(gpu_cluster, kube_client):
    core = client.CoreV1Api(kube_client)
    for name, node, app in (
        ("a", GPU_NODES[0], "probe"),
        ("b", GPU_NODES[1], "probe"),
        ("c", GPU_NODES[0], "web"),
    ):
        core.create_namespaced_pod(
            "default",
            {
                "metadata": {"name": name, "labels": {"app": app}},
                "spec": {"nodeName": node, "containers": [{"name": "main", "image": "busybox"}]},
            },
        )
    by_label = core.list_namespaced_pod("default", label_selector="app=probe")
    by_both = core.list_pod_for_all_namespaces(
        label_selector="app in (probe)", field_selector=f"spec.nodeName={GPU_NODES[0]}"
    )
    assert [pod.metadata.name for pod in by_label.items] == ["a", "b"]
    assert [pod.metadata.name for pod in by_both.items] == ["a"]
    with pytest.raises(ApiException) as bad:
        core.list_namespaced_pod("default", field_selector="spec.image=busybox")
    assert bad.value.status == 400


def test_pod_log_with_tail(gpu_cluster, kube_client):
    core = client.CoreV1Api(kube_client)
    core.create_namespaced_pod(
        "default",
        {
            "metadata": {"name": "probe"},
            "spec": {"containers": [{"name": "cuda", "image": "cuda"}]},
        },
    )
    gpu_cluster.store.set_pod_log("default", "probe", "line 1\nline 2\nline 3\n")
    assert core.read_namespaced_pod_log("probe", "default", tail_lines=2) == "line 2\nline 3\n"
    with pytest.raises(ApiException) as bad:
        core.read_namespaced_pod_log("probe", "default", container="nope")
    assert "container nope is not valid for pod probe" in bad.value.body


def test_bad_resource_quantity_is_refused_as_invalid_naming_the_field(emulator, kube_client):
    core = client.CoreV1Api(kube_client)
    pod = {
        "metadata": {"name": "greedy"},
        "spec": {
            "containers": [
                {"name": "main", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
            ]
        },
    }
    core.create_namespaced_pod("default", pod)
    pod["metadata"]["name"] = "bad"
    pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "lots"
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_pod("default", pod)
    status = json.loads(refused.value.body)
    field = "spec.containers[0].resources.limits[nvidia.com/gpu]"
    assert (refused.value.status, status["reason"]) == (422, "Invalid")
    assert status["message"].startswith(f'Pod "bad" is invalid: {field}: Invalid value: "lots"')
    assert [cause["field"] for cause in status["details"]["causes"]] == [field]
    bad_cpu = {"name": "main", "resources": {"requests": {"cpu": "x"}}}
    bad_patch = {"spec": {"containers": [bad_cpu]}}
    with pytest.raises(ApiException) as patched:
        core.patch_namespaced_pod("greedy", "default", bad_patch)
    assert patched.value.status == 422
    assert "spec.containers[0].resources.requests[cpu]" in patched.value.body
    assert [p.metadata.name for p in core.list_namespaced_pod("default").items] == ["greedy"]


def test_create_in_a_namespace_that_does_not_exist_is_404(emulator, kube_client):
    core = client.CoreV1Api(kube_client)
    with pytest.raises(ApiException) as missing:
        core.create_namespaced_config_map("nope", {"metadata": {"name": "c"}})
    assert missing.value.status == 404
    assert json.loads(missing.value.body)["message"] == 'namespaces "nope" not found'


def test_delete_with_stale_preconditions_is_409_and_keeps_the_object(emulator, kube_client):
    core = client.CoreV1Api(kube_client)
    created = core.create_namespaced_config_map("default", {"metadata": {"name": "c"}})
    for preconditions in (
        client.V1Preconditions(uid="0000"),
        client.V1Preconditions(resource_version="1"),
    ):
        with pytest.raises(ApiException) as conflict:
            core.delete_namespaced_config_map(
                "c", "default", body=client.V1DeleteOptions(preconditions=preconditions)
            )
        assert (conflict.value.status, json.loads(conflict.value.body)["reason"]) == (
            409,
            "Conflict",
        )
    assert core.read_namespaced_config_map("c", "default").metadata.uid == created.metadata.uid
    matching = client.V1Preconditions(uid=created.metadata.uid)
    core.delete_namespaced_config_map(
        "c", "default", body=client.V1DeleteOptions(preconditions=matching)
    )
    assert core.list_namespaced_config_map("default").items == []


def test_concurrent_get_modify_put_with_retry_on_409_loses_no_update(emulator, kube_client):
    core = client.CoreV1Api(kube_client)
    core.create_namespaced_config_map("default", {"metadata": {"name": "n"}, "data": {"n": "0"}})
    increments = 50

    def increment() -> None:
        for _ in range(increments):
            while True:
                current = core.read_namespaced_config_map("n", "default")
                current.data["n"] = str(int(current.data["n"]) + 1)
                try:
                    core.replace_namespaced_config_map("n", "default", current)
                    break
                except ApiException as error:
                    if error.status != 409:
                        raise

    threads = [threading.Thread(target=increment) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert core.read_namespaced_config_map("n", "default").data["n"] == str(2 * increments)
