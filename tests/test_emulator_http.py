"""The emulator's HTTP surface as raw requests: discovery, errors, tables and watch streams."""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import time
from urllib.parse import urlsplit

import pytest
from conftest import DEVICE_PLUGIN, OPERATOR_NAMESPACE

from labs.sim.apiserver import ApiServer
from labs.sim.store import CLUSTER_POLICY, ObjectStore

TABLE_ACCEPT = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
PROTOBUF_FIRST = "application/vnd.kubernetes.protobuf, */*"


def connect(server) -> http.client.HTTPSConnection:
    """A connection to an emulator (anything with .url and .tls), trusting its CA only."""
    parts = urlsplit(server.url)
    context = ssl.create_default_context(cadata=server.tls.ca_pem)
    return http.client.HTTPSConnection(parts.hostname, parts.port, timeout=30, context=context)


def signed_in(server, headers=None) -> dict:
    """`headers` plus the server's bearer token, as a kubeconfig user sends it."""
    return {"Authorization": f"Bearer {server.token}", **(headers or {})}


def request(server, method: str, path: str, body=None, headers=None) -> tuple[int, dict]:
    """One request to an emulator (anything with .url and .token), signed in unless the
    headers carry their own Authorization."""
    connection = connect(server)
    try:
        data = body if isinstance(body, bytes | None) else json.dumps(body).encode()
        connection.request(method, path, body=data, headers=signed_in(server, headers))
        response = connection.getresponse()
        return response.status, json.loads(response.read() or b"null")
    finally:
        connection.close()


def wait_until(condition, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_version_says_kubernetes_1_35(emulator):
    status, body = request(emulator, "GET", "/version")
    assert (status, body["major"], body["minor"]) == (200, "1", "35")


@pytest.mark.parametrize("authorization", [None, "Bearer not-the-token", "Basic dXNlcjpwdw=="])
def test_without_the_token_every_request_but_the_public_ones_is_401(emulator, authorization):
    headers = {"Authorization": authorization} if authorization else {"Authorization": ""}
    status, body = request(emulator, "GET", "/api/v1/namespaces", headers=headers)
    assert (status, body["reason"], body["code"]) == (401, "Unauthorized", 401)
    status, _ = request(emulator, "PATCH", "/api/v1/nodes/x", {}, headers)
    assert status == 401
    status, body = request(emulator, "GET", "/version", headers=headers)
    assert status == 200 and body["minor"] == "35", "/version is public, as on a real cluster"


def test_discovery_reflects_custom_resources_registered_at_run_time(emulator):
    _, groups = request(emulator, "GET", "/apis")
    assert "nvidia.com" not in [group["name"] for group in groups["groups"]]
    emulator.store.register(CLUSTER_POLICY)
    _, groups = request(emulator, "GET", "/apis")
    assert "nvidia.com" in [group["name"] for group in groups["groups"]]
    status, resources = request(emulator, "GET", "/apis/nvidia.com/v1")
    names = {resource["name"]: resource for resource in resources["resources"]}
    assert status == 200 and set(names) == {"clusterpolicies", "clusterpolicies/status"}
    assert names["clusterpolicies"]["namespaced"] is False


def test_core_discovery_lists_short_names_and_subresources(emulator):
    _, resources = request(emulator, "GET", "/api/v1")
    by_name = {resource["name"]: resource for resource in resources["resources"]}
    assert by_name["nodes"]["shortNames"] == ["no"]
    assert by_name["pods/log"]["verbs"] == ["get"]


@pytest.mark.parametrize(
    ("method", "path", "code", "reason"),
    [
        ("GET", "/api/v1/widgets", 404, "NotFound"),
        ("GET", "/apis/example.com/v1", 404, "NotFound"),
        ("GET", "/api/v1/pods/no-namespace", 404, "NotFound"),
        ("POST", "/api/v1/nodes/n1", 405, "MethodNotAllowed"),
        ("DELETE", "/api/v1/namespaces/default/pods", 405, "MethodNotAllowed"),
        ("PUT", "/version", 405, "MethodNotAllowed"),
    ],
)
def test_unsupported_requests_answer_a_status(emulator, method, path, code, reason):
    status, body = request(emulator, method, path)
    assert status == code
    assert (body["kind"], body["status"], body["reason"], body["code"]) == (
        "Status",
        "Failure",
        reason,
        code,
    )
    assert body["message"]


def test_patch_media_types(gpu_cluster):
    path = f"/apis/apps/v1/namespaces/{OPERATOR_NAMESPACE}/daemonsets/{DEVICE_PLUGIN}"
    patch = {"metadata": {"labels": {"x": "y"}}}
    refusals = {
        "application/apply-patch+yaml": "server-side apply is not supported",
        "text/plain": "unknown format (text/plain)",
    }
    for media_type, message in refusals.items():
        status, body = request(gpu_cluster, "PATCH", path, patch, {"Content-Type": media_type})
        assert (status, body["reason"]) == (415, "UnsupportedMediaType")
        assert message in body["message"]
    status, body = request(
        gpu_cluster, "PATCH", path, patch, {"Content-Type": "application/merge-patch+json"}
    )
    assert status == 200 and body["metadata"]["labels"]["x"] == "y"


def test_bad_bodies_are_400(emulator):
    status, body = request(emulator, "POST", "/api/v1/namespaces/default/pods", b"{not json")
    assert (status, body["reason"]) == (400, "BadRequest")
    status, body = request(
        emulator,
        "POST",
        "/api/v1/namespaces/default/pods",
        {"metadata": {"name": "p", "namespace": "other"}},
    )
    assert status == 400 and "does not match the namespace" in body["message"]


def test_protobuf_accept_gets_json(gpu_cluster):
    status, body = request(gpu_cluster, "GET", "/api/v1/nodes", headers={"Accept": PROTOBUF_FIRST})
    assert status == 200 and body["kind"] == "NodeList"


def test_table_when_asked(gpu_cluster):
    status, body = request(
        gpu_cluster,
        "GET",
        "/apis/nvidia.com/v1/clusterpolicies/cluster-policy",
        headers={"Accept": TABLE_ACCEPT},
    )
    assert status == 200 and body["kind"] == "Table"
    assert [column["name"] for column in body["columnDefinitions"]] == ["Name", "Status", "Age"]
    assert body["rows"][0]["cells"][:2] == ["cluster-policy", "ready"]
    assert body["rows"][0]["object"]["kind"] == "ClusterPolicy"


def watch_lines(server, path: str):
    """Open a watch and return (connection, response) for reading JSON lines."""
    connection = connect(server)
    connection.request("GET", path, headers=signed_in(server))
    response = connection.getresponse()
    assert response.status == 200
    return connection, response


def test_watch_stream_replays_and_ends_at_timeout(gpu_cluster):
    path = f"/apis/apps/v1/namespaces/{OPERATOR_NAMESPACE}/daemonsets?watch=true&timeoutSeconds=1"
    connection, response = watch_lines(gpu_cluster, path)
    events = [json.loads(line) for line in response.read().splitlines()]
    connection.close()
    assert [(event["type"], event["object"]["metadata"]["name"]) for event in events] == [
        ("ADDED", DEVICE_PLUGIN)
    ]
    assert events[0]["object"]["kind"] == "DaemonSet"


def test_watch_from_forgotten_history_gets_an_expired_error_event():
    store = ObjectStore(history_limit=3)
    for index in range(5):
        store.create("configmaps", {"metadata": {"name": f"c{index}"}})
    with ApiServer(store) as server:
        connection, response = watch_lines(server, "/api/v1/configmaps?watch=1&resourceVersion=1")
        (event,) = [json.loads(line) for line in response.read().splitlines()]
        connection.close()
    assert event["type"] == "ERROR" and event["object"]["code"] == 410


def test_watch_of_a_client_that_leaves_is_released(gpu_cluster):
    server = gpu_cluster.server
    connection, response = watch_lines(gpu_cluster, "/api/v1/nodes?watch=true")
    response.readline()
    assert server.open_watches == 1
    connection.sock.shutdown(socket.SHUT_RDWR)
    connection.close()
    assert wait_until(lambda: server.open_watches == 0)


def test_stop_ends_open_watch_streams(emulator):
    connection, response = watch_lines(emulator, "/api/v1/namespaces?watch=true")
    response.readline()
    emulator.server.stop()
    remaining = response.read()  # returns once the server ended the chunked stream
    connection.close()
    assert emulator.server.open_watches == 0
    assert all(json.loads(line)["type"] == "ADDED" for line in remaining.splitlines())


def test_followed_log_streams_appended_lines_until_the_pod_ends(emulator):
    store = emulator.store
    store.create("pods", {"metadata": {"name": "probe"}, "spec": {"containers": [{"name": "c"}]}})
    store.set_pod_log("default", "probe", "starting\n")
    connection, response = watch_lines(
        emulator, "/api/v1/namespaces/default/pods/probe/log?follow=true"
    )
    assert response.readline() == b"starting\n"
    store.append_pod_log("default", "probe", "PASS\n")
    assert response.readline() == b"PASS\n"
    store.update("pods", "probe", lambda pod: pod["status"].update(phase="Succeeded"))
    assert response.read() == b""
    connection.close()


def test_the_request_log_records_every_method_and_path_even_refused_ones(emulator):
    request(emulator, "GET", "/api/v1/namespaces/default/configmaps?limit=5")
    request(emulator, "POST", "/api/v1/namespaces/default/configmaps",
            {"metadata": {"name": "c"}})  # fmt: skip
    request(emulator, "DELETE", "/api/v1/nodes/nowhere")

    assert list(emulator.server.request_log)[-3:] == [
        ("GET", "/api/v1/namespaces/default/configmaps?limit=5"),
        ("POST", "/api/v1/namespaces/default/configmaps"),
        ("DELETE", "/api/v1/nodes/nowhere"),
    ]
