"""Commands run where a person runs them at the node-internals end of a debugging path, so a
finding quotes what the cluster printed: on a node through a debug pod (the pod `kubectl debug
node/N -- chroot /host ...` creates) and in a running container (`kubectl exec`).

The exec stream is the library's websocket client (`kubernetes.stream`) on a request our
`rest` layer signs like any other; a debug pod is created, waited for and read through the API.
"""

from __future__ import annotations

from typing import Any

from labs.kube import rest
from labs.kube.resources import PODS, KubeUnreachable
from labs.kube.view import WORKLOAD_NAMESPACE, ClusterView, WatchedKind

DEBUG_IMAGE = "public.ecr.aws/amazonlinux/amazonlinux:2023"
HOST_ROOT = "/host"
DONE = ("Succeeded", "Failed")


def debug_command(node: str) -> str:
    """What a person types to get a shell on `node` (a command follows `--`)."""
    return f"kubectl debug node/{node} -it --image={DEBUG_IMAGE} --"


def debug_pod(node: str, command: list[str]) -> dict[str, Any]:
    """The pod `kubectl debug node/NODE --image=... -- COMMAND` creates: pinned to the node,
    in its PID, IPC and network namespaces, the node's / at /host."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": f"node-debugger-{node}-", "labels": {"app": "node-debugger"}},
        "spec": {
            "nodeName": node,
            "hostIPC": True,
            "hostNetwork": True,
            "hostPID": True,
            "restartPolicy": "Never",
            "tolerations": [{"operator": "Exists"}],
            "containers": [{
                "name": "debugger",
                "image": DEBUG_IMAGE,
                "command": command,
                "volumeMounts": [{"name": "host-root", "mountPath": HOST_ROOT}],
            }],
            "volumes": [{"name": "host-root", "hostPath": {"path": "/"}}],
        },
    }  # fmt: skip


def run_on_node(lab: Any, node: str, command: list[str], timeout: float) -> str:
    """Run `command` in a debug pod on `node`, as `kubectl debug node/...` does, and return
    what it printed (its log); the pod is deleted afterwards."""
    created = rest.create(lab.kube, PODS.path(WORKLOAD_NAMESPACE), debug_pod(node, command))
    name = created["metadata"]["name"]
    path = PODS.path(WORKLOAD_NAMESPACE, name)
    try:
        pod = WatchedKind("pods", lab.kube, PODS, WORKLOAD_NAMESPACE, f"metadata.name={name}")
        with ClusterView([pod]) as view:
            view.wait_for(
                lambda v: (v.find("pods", name) or {}).get("status", {}).get("phase") in DONE,
                timeout,
                what=f"debug pod {name} on {node} to finish",
            )
        return rest.get(lab.kube, f"{path}/log", timeout=timeout).decode(errors="replace")
    finally:
        rest.delete(lab.kube, path, grace_seconds=0)


def exec_in_pod(
    lab: Any, namespace: str, pod: str, container: str, command: list[str], timeout: float
) -> str:
    """What `kubectl exec -n NAMESPACE POD -c CONTAINER -- COMMAND` prints (stdout, then
    stderr)."""
    from kubernetes.client.exceptions import ApiException
    from kubernetes.stream.ws_client import STDERR_CHANNEL, STDOUT_CHANNEL, websocket_call

    query = [("container", container), ("stdout", "true"), ("stderr", "true")]
    query += [("command", part) for part in command]
    method, url, headers, _, _ = lab.kube.param_serialize(
        method="GET",
        resource_path=PODS.path(namespace, pod, "exec"),
        query_params=query,
        header_params={},
        auth_settings=["BearerToken"],
    )
    try:
        stream = websocket_call(lab.kube.configuration, method, url, headers=headers,
                                _preload_content=False)  # fmt: skip
    except ApiException as error:  # the library's wrapper of any failure to connect
        raise KubeUnreachable(f"exec in pod {namespace}/{pod}: {error.reason}") from None
    try:
        stream.run_forever(timeout=timeout)
        out = stream.read_channel(STDOUT_CHANNEL)
        err = stream.read_channel(STDERR_CHANNEL)
    finally:
        stream.close()
    return str(out) + str(err)
