"""kubectl (found on PATH) against the emulator, command by command."""

from __future__ import annotations

import json
import re
import threading
import time

import pytest
from conftest import DEVICE_PLUGIN, GPU_NODES, OPERATOR_NAMESPACE

PROBE_POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: gpu-probe
  namespace: default
  labels:
    app: gpu-probe
spec:
  restartPolicy: Never
  tolerations:
  - key: nvidia.com/gpu
    operator: Exists
    effect: NoSchedule
  containers:
  - name: cuda
    image: nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04
    command: [{command}]
    resources:
      limits:
        nvidia.com/gpu: 1
"""
FAILED_SCHEDULING = (
    "0/2 nodes are available: 2 Insufficient nvidia.com/gpu. no new claims to deallocate, "
    "preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod."
)


def records(output: str) -> list[dict[str, str]]:
    """kubectl's table output as one dict per row, cut at the header's column positions."""
    header, *lines = output.rstrip("\n").splitlines()
    starts = [match.start() for match in re.finditer(r"\S+(?: \S+)*", header)]
    bounds = list(zip(starts, [*starts[1:], None], strict=True))
    names = [header[start:end].strip() for start, end in bounds]
    return [
        {name: line[start:end].strip() for name, (start, end) in zip(names, bounds, strict=True)}
        for line in lines
    ]


@pytest.fixture
def probe_pod(gpu_cluster, tmp_path):
    """The probe pod, created with `kubectl apply`, plus a FailedScheduling event for it."""
    manifest = tmp_path / "gpu-probe.yaml"
    manifest.write_text(PROBE_POD.format(command='"nvidia-smi"'))
    store = gpu_cluster.store
    store.create("pods", {"metadata": {"name": "other", "labels": {"app": "x"}}, "spec": {}})
    return manifest


def add_failed_scheduling_event(store, pod: dict) -> None:
    store.create(
        "events",
        {
            "metadata": {"name": f"{pod['metadata']['name']}.17f3a2b4c5d6e7f8"},
            "involvedObject": {
                "kind": "Pod",
                "apiVersion": "v1",
                "name": pod["metadata"]["name"],
                "namespace": "default",
                "uid": pod["metadata"]["uid"],
            },
            "reason": "FailedScheduling",
            "message": FAILED_SCHEDULING,
            "type": "Warning",
            "source": {"component": "default-scheduler"},
            "firstTimestamp": pod["metadata"]["creationTimestamp"],
            "lastTimestamp": pod["metadata"]["creationTimestamp"],
            "count": 1,
        },
    )


def test_get_nodes_prints_status_and_version(gpu_cluster, kubectl):
    table = records(kubectl("get", "nodes").stdout)
    assert list(table[0]) == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    assert sorted(row["NAME"] for row in table) == sorted(GPU_NODES)
    assert {(row["STATUS"], row["VERSION"]) for row in table} == {("Ready", "v1.35.0-eks-3025e55")}


def test_get_nodes_wide_with_label_column(gpu_cluster, kubectl):
    gpu_cluster.store.patch(
        "nodes", GPU_NODES[1], {"metadata": {"labels": {"nvidia.com/gpu.present": None}}}, "merge"
    )
    output = kubectl("get", "nodes", "-L", "nvidia.com/gpu.present", "-o", "wide").stdout
    first, second = records(output)
    assert first["INTERNAL-IP"] == "10.0.1.11" and second["INTERNAL-IP"] == "10.0.2.12"
    assert first["OS-IMAGE"] == "Amazon Linux 2023.7.20250512"
    assert (first["GPU.PRESENT"], second["GPU.PRESENT"]) == ("true", "")


def test_get_node_allocatable_gpu_with_jsonpath(gpu_cluster, kubectl):
    jsonpath = "jsonpath={.status.allocatable.nvidia\\.com/gpu}"
    assert kubectl("get", "node", GPU_NODES[0], "-o", jsonpath).stdout == "1"


def test_get_daemonsets_in_operator_namespace(gpu_cluster, kubectl):
    (row,) = records(kubectl("get", "ds", "-n", OPERATOR_NAMESPACE).stdout)
    counts = ("DESIRED", "CURRENT", "READY", "UP-TO-DATE", "AVAILABLE")
    assert row["NAME"] == DEVICE_PLUGIN and [row[column] for column in counts] == ["2"] * 5
    assert row["NODE SELECTOR"] == "nvidia.com/gpu.deploy.device-plugin=true"


def test_get_deleted_daemonset_is_not_found(gpu_cluster, kubectl):
    assert kubectl("get", "ds", "-n", OPERATOR_NAMESPACE, DEVICE_PLUGIN).returncode == 0
    gpu_cluster.store.delete("ds", DEVICE_PLUGIN, OPERATOR_NAMESPACE)
    result = kubectl("get", "ds", "-n", OPERATOR_NAMESPACE, DEVICE_PLUGIN, check=False)
    assert result.returncode == 1
    assert result.stderr.strip() == (
        f'Error from server (NotFound): daemonsets.apps "{DEVICE_PLUGIN}" not found'
    )


def test_get_clusterpolicy_spec_with_jsonpath(gpu_cluster, kubectl):
    output = kubectl(
        "get", "clusterpolicy", "cluster-policy", "-o", "jsonpath={.spec.devicePlugin}"
    ).stdout
    assert json.loads(output)["enabled"] is True


def test_clusterpolicy_is_unknown_before_its_crd_exists(emulator, kubectl):
    result = kubectl("get", "clusterpolicy", check=False)
    assert result.returncode == 1
    assert 'the server doesn\'t have a resource type "clusterpolicy"' in result.stderr


def test_merge_patch_clusterpolicy_then_no_change(gpu_cluster, kubectl):
    patch = '{"spec":{"devicePlugin":{"enabled":false}}}'
    args = ("patch", "clusterpolicy", "cluster-policy", "--type=merge", "-p", patch)
    assert kubectl(*args).stdout.strip() == "clusterpolicy.nvidia.com/cluster-policy patched"
    assert gpu_cluster.store.get("clusterpolicies.nvidia.com", "cluster-policy")["spec"][
        "devicePlugin"
    ] == {
        "enabled": False,
        "repository": "nvcr.io/nvidia",
        "image": "k8s-device-plugin",
        "version": "v0.19.0",
    }
    again = kubectl(*args).stdout.strip()
    assert again == "clusterpolicy.nvidia.com/cluster-policy patched (no change)"


def test_strategic_patch_of_a_custom_resource_is_refused(gpu_cluster, kubectl):
    result = kubectl(
        "patch", "clusterpolicy", "cluster-policy", "-p", '{"spec":{"driver":null}}', check=False
    )
    assert result.returncode == 1
    assert "application/strategic-merge-patch+json is not supported" in result.stderr


def test_apply_twice_creates_then_patches_keeping_limits(probe_pod, gpu_cluster, kubectl):
    assert kubectl("apply", "-f", str(probe_pod)).stdout.strip() == "pod/gpu-probe created"
    created = gpu_cluster.store.get("pods", "gpu-probe")
    annotations = created["metadata"]["annotations"]
    assert "kubectl.kubernetes.io/last-applied-configuration" in annotations
    probe_pod.write_text(PROBE_POD.format(command='"nvidia-smi", "-L"'))
    assert kubectl("apply", "-f", str(probe_pod)).stdout.strip() == "pod/gpu-probe configured"
    container = gpu_cluster.store.get("pods", "gpu-probe")["spec"]["containers"][0]
    assert container["command"] == ["nvidia-smi", "-L"]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "1"}


def test_describe_pod_shows_its_events(probe_pod, gpu_cluster, kubectl):
    kubectl("apply", "-f", str(probe_pod))
    add_failed_scheduling_event(gpu_cluster.store, gpu_cluster.store.get("pods", "gpu-probe"))
    output = kubectl("describe", "pod", "gpu-probe").stdout
    events = output.split("Events:", 1)[1]
    assert "FailedScheduling" in events and "default-scheduler" in events
    assert "2 Insufficient nvidia.com/gpu" in events


def test_get_events_by_involved_object(probe_pod, gpu_cluster, kubectl):
    kubectl("apply", "-f", str(probe_pod))
    add_failed_scheduling_event(gpu_cluster.store, gpu_cluster.store.get("pods", "gpu-probe"))
    other = gpu_cluster.store.get("pods", "other")
    add_failed_scheduling_event(gpu_cluster.store, other)
    output = kubectl("get", "events", "--field-selector", "involvedObject.name=gpu-probe").stdout
    (row,) = records(output)
    assert list(row) == ["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    assert (row["OBJECT"], row["REASON"]) == ("pod/gpu-probe", "FailedScheduling")


def test_logs_of_a_pod(probe_pod, gpu_cluster, kubectl):
    kubectl("apply", "-f", str(probe_pod))
    gpu_cluster.store.set_pod_log("default", "gpu-probe", "GPU 0: Tesla T4 (UUID: GPU-1)\n")
    assert kubectl("logs", "gpu-probe").stdout == "GPU 0: Tesla T4 (UUID: GPU-1)\n"
    assert kubectl("logs", "gpu-probe", "--tail=0").stdout == ""


def test_delete_pod_then_not_found(probe_pod, gpu_cluster, kubectl):
    kubectl("apply", "-f", str(probe_pod))
    assert kubectl("delete", "pod", "gpu-probe").stdout.strip() == 'pod "gpu-probe" deleted'
    result = kubectl("get", "pod", "gpu-probe", check=False)
    assert 'pods "gpu-probe" not found' in result.stderr


def test_get_pods_by_label(probe_pod, gpu_cluster, kubectl):
    kubectl("apply", "-f", str(probe_pod))
    (row,) = records(kubectl("get", "pods", "-l", "app=gpu-probe").stdout)
    assert list(row) == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert [row["NAME"], row["READY"], row["STATUS"], row["RESTARTS"]] == [
        "gpu-probe",
        "0/1",
        "Pending",
        "0",
    ]
    empty = kubectl("get", "pods", "-l", "app=none")
    assert empty.stdout == "" and "No resources found in default namespace." in empty.stderr


def test_wait_for_jsonpath_sees_a_background_change(gpu_cluster, kubectl):
    store, server = gpu_cluster.store, gpu_cluster.server
    policy = "clusterpolicies.nvidia.com"
    store.update(policy, "cluster-policy", lambda cp: cp["status"].update(state="notReady"))

    def become_ready_once_kubectl_watches() -> None:
        deadline = time.monotonic() + 30
        while server.open_watches == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        store.update(policy, "cluster-policy", lambda cp: cp["status"].update(state="ready"))

    writer = threading.Thread(target=become_ready_once_kubectl_watches)
    writer.start()
    try:
        result = kubectl(
            "wait",
            "--for=jsonpath={.status.state}=ready",
            "clusterpolicy/cluster-policy",
            "--timeout=30s",
        )
    finally:
        writer.join()
    assert result.stdout.strip() == "clusterpolicy.nvidia.com/cluster-policy condition met"


def test_strategic_patch_replaces_tolerations_and_merges_mounts_by_path(emulator, kubectl):
    gpu_taint = {"key": "nvidia.com/gpu", "operator": "Exists"}
    emulator.store.create(
        "deployments",
        {
            "metadata": {"name": "trainer"},
            "spec": {
                "selector": {"matchLabels": {"app": "trainer"}},
                "template": {
                    "metadata": {"labels": {"app": "trainer"}},
                    "spec": {
                        "tolerations": [
                            gpu_taint | {"effect": "NoSchedule"},
                            gpu_taint | {"effect": "NoExecute"},
                        ],
                        "volumes": [{"name": "data", "emptyDir": {}}],
                        "containers": [
                            {
                                "name": "main",
                                "image": "cuda",
                                "volumeMounts": [
                                    {"name": "data", "mountPath": "/data"},
                                    {"name": "data", "mountPath": "/cache"},
                                ],
                            }
                        ],
                    },
                },
            },
        },
    )
    patch = {
        "spec": {
            "template": {
                "spec": {
                    "tolerations": [gpu_taint | {"effect": "NoSchedule"}],
                    "containers": [
                        {
                            "name": "main",
                            "volumeMounts": [
                                {"name": "data", "mountPath": "/cache", "readOnly": True}
                            ],
                        }
                    ],
                }
            }
        }
    }
    kubectl("patch", "deployment", "trainer", "--type=strategic", "-p", json.dumps(patch))
    spec = emulator.store.get("deployments", "trainer", "default")["spec"]["template"]["spec"]
    assert spec["tolerations"] == [gpu_taint | {"effect": "NoSchedule"}]
    assert spec["containers"][0]["volumeMounts"] == [
        {"name": "data", "mountPath": "/data"},
        {"name": "data", "mountPath": "/cache", "readOnly": True},
    ]


def test_scale_a_deployment_through_its_scale_subresource(gpu_cluster, kubectl):
    gpu_cluster.store.create(
        "deployments",
        {
            "metadata": {"name": "gpu-operator"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "gpu-operator"}},
                "template": {"metadata": {"labels": {"app": "gpu-operator"}}, "spec": {}},
            },
        },
        OPERATOR_NAMESPACE,
    )
    scaled = kubectl("-n", OPERATOR_NAMESPACE, "scale", "deploy", "gpu-operator", "--replicas=0")
    assert scaled.stdout.strip() == "deployment.apps/gpu-operator scaled"
    stored = gpu_cluster.store.get("deployments", "gpu-operator", OPERATOR_NAMESPACE)
    assert (stored["spec"]["replicas"], stored["metadata"]["generation"]) == (0, 2)
    raw = kubectl("get", "--raw", f"/apis/apps/v1/namespaces/{OPERATOR_NAMESPACE}/"
                  "deployments/gpu-operator/scale").stdout  # fmt: skip
    scale = json.loads(raw)
    assert (scale["kind"], scale["apiVersion"]) == ("Scale", "autoscaling/v1")
    assert (scale["spec"]["replicas"], scale["status"]["selector"]) == (0, "app=gpu-operator")
    resources = json.loads(kubectl("get", "--raw", "/apis/apps/v1").stdout)["resources"]
    (entry,) = [r for r in resources if r["name"] == "deployments/scale"]
    assert (entry["group"], entry["version"], entry["kind"]) == ("autoscaling", "v1", "Scale")


def test_create_into_a_missing_namespace_and_unsupported_field_selector(
    emulator, kubectl, tmp_path
):
    manifest = tmp_path / "cm.yaml"
    manifest.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n")
    missing = kubectl("-n", "nope", "create", "-f", str(manifest), check=False)
    assert missing.stderr.startswith("Error from server (NotFound): error when creating")
    assert missing.stderr.strip().endswith('namespaces "nope" not found')
    bad = kubectl("get", "deployments", "--field-selector", "status.phase=Running", check=False)
    assert bad.returncode == 1 and "field label not supported: status.phase" in bad.stderr
