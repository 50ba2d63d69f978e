"""The world's `nvidia-validator` plugin-validation, stepped as the kubelet steps it.

A held-still API server holding a GPU node and the validator DaemonSet: the init container's
program creates its workload pod pinned to the node, polls it every 5 s (never sleeping: each
step says how long it would), and gives up after 60 tries; a pod that succeeds ends it at once.
"""

from __future__ import annotations

import pytest
from still_support import StillPlane

from labs.kube.resources import DAEMON_SETS, NODES, PODS, SERVICE_ACCOUNTS
from labs.sim.node.programs import LongRun, start_init

NODE = "ip-192-168-12-5.ap-northeast-2.compute.internal"
NS = "gpu-operator"
IMAGE = "nvcr.io/nvidia/cloud-native/gpu-operator-validator:v25.3.4"
# the init container as the operator renders it (assets/state-operator-validation, v25.3.4)
PLUGIN_VALIDATION = {
    "name": "plugin-validation",
    "image": IMAGE,
    "command": ["sh", "-c"],
    "args": ["nvidia-validator"],
    "env": [
        {"name": "COMPONENT", "value": "plugin"},
        {"name": "WITH_WORKLOAD", "value": "true"},
        {"name": "VALIDATOR_IMAGE", "value": IMAGE},
        {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "OPERATOR_NAMESPACE",
         "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
    ],
}  # fmt: skip


@pytest.fixture
def validator(still: StillPlane) -> LongRun:
    """plugin-validation started on a GPU node advertising one GPU."""
    still.namespace(NS)
    still.api.create(SERVICE_ACCOUNTS, {"metadata": {"name": "nvidia-operator-validator"}}, NS)
    gpu = {"nvidia.com/gpu": "1"}
    still.put(NODES, {"metadata": {"name": NODE}, "status": {"capacity": gpu, "allocatable": gpu}})
    template = {"metadata": {"labels": {"app": "nvidia-operator-validator"}},
                "spec": {"containers": [{"name": "v", "image": IMAGE}],
                         "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists",
                                          "effect": "NoSchedule"}]}}  # fmt: skip
    still.put(DAEMON_SETS, {"metadata": {"name": "nvidia-operator-validator", "namespace": NS},
                           "spec": {"selector": {"matchLabels": template["metadata"]["labels"]},
                                    "template": template}})  # fmt: skip
    pod = still.put(PODS, {"metadata": {"name": "nvidia-operator-validator-x", "namespace": NS},
                           "spec": {"nodeName": NODE, "containers": [{"name": "v", "image": IMAGE}],
                                    "initContainers": [PLUGIN_VALIDATION]}})  # fmt: skip
    started = start_init(still.api, pod, PLUGIN_VALIDATION, still.api.get(NODES, NODE))
    assert started is not None, "nvidia-validator is a program the world runs for a while"
    return started


def workload(still: StillPlane) -> dict:
    [pod] = [
        p
        for p in still.api.list(PODS, NS)[0]
        if p["metadata"].get("labels", {}).get("app") == "nvidia-device-plugin-validator"
    ]
    return pod


def set_phase(still: StillPlane, pod: dict, phase: str) -> None:
    name = pod["metadata"]["name"]
    still.api.update(PODS, name, lambda p: p.setdefault("status", {}).update(phase=phase), NS)


def test_a_rejected_workload_pod_is_polled_60_times_then_the_validator_gives_up(
    still: StillPlane, validator: LongRun
):
    printed, code, sleep = validator.step()
    pod = workload(still)
    name = pod["metadata"]["name"]
    assert (code, sleep) == (None, 5.0) and name.startswith("nvidia-device-plugin-validator-")
    assert pod["spec"]["nodeName"] == NODE
    limits = pod["spec"]["initContainers"][0]["resources"]["limits"]
    assert limits == {"nvidia.com/gpu": "1"} and not pod["spec"]["containers"][0].get("resources")
    assert 'level=info msg="version: v25.3.4, commit: d73a008"' in printed
    assert f'level=info msg="pod {name} is curently in Pending phase"' in printed
    set_phase(still, pod, "Failed")
    polls = [validator.step() for _ in range(59)]  # tries 2..60, 5 s apart
    assert all(code is None and sleep == 5.0 for _, code, sleep in polls)
    assert all(f"pod {name} is curently in Failed phase" in printed for printed, _, _ in polls)
    last, code, _ = validator.step()  # after the 60th sleep
    assert code == 1, last
    assert last.endswith(f'level=info msg="Error: error validating plugin installation: gave up '
                         f'waiting for pod {name} to be available"\n')  # fmt: skip


def test_a_workload_pod_that_succeeds_ends_the_validation(still: StillPlane, validator: LongRun):
    validator.step()
    pod = workload(still)
    set_phase(still, pod, "Succeeded")
    printed, code, _ = validator.step()
    assert code == 0
    assert f'msg="pod {pod["metadata"]["name"]} have run successfully"' in printed
