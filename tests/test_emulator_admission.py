"""What EKS's pod admission and the NVIDIA runtime decide, as the rehearsal world plays them.

The API side over real HTTP with kubectl (a RuntimeClass that does not exist is a 403 at
create time, the extended-resource toleration is written into the stored pod); the node side
as the facts kubelet's nvidia-smi program reads (which GPUs a container gets).
"""

from __future__ import annotations

import pytest

from labs.sim.controllers.gpu_operator import runtime_classes
from labs.sim.controllers.kubelet import injected_gpus
from labs.sim.hardware import DEFAULT_RUNTIME_ANNOTATION

GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  restartPolicy: Never
{extra}  containers:
  - name: cuda
    image: nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04
    command: ["nvidia-smi"]
{resources}"""
GPU_LIMIT = "    resources:\n      limits:\n        nvidia.com/gpu: 1\n"


def apply(kubectl, tmp_path, name: str, extra: str = "", resources: str = GPU_LIMIT):
    manifest = tmp_path / f"{name}.yaml"
    manifest.write_text(POD.format(name=name, extra=extra, resources=resources))
    return kubectl("apply", "-f", str(manifest), check=False)


def test_a_pod_naming_a_missing_runtime_class_is_refused_at_create_time(
    kubectl, emulator, tmp_path
):
    refused = apply(kubectl, tmp_path, "rc-pod", extra="  runtimeClassName: nvidia-x\n")

    assert refused.returncode == 1
    assert "Error from server (Forbidden): error when creating" in refused.stderr
    assert 'pods "rc-pod" is forbidden: pod rejected: RuntimeClass "nvidia-x" not found' in (
        refused.stderr
    )
    assert "NotFound" in kubectl("get", "pod", "rc-pod", check=False).stderr
    emulator.store.create("runtimeclasses", {"metadata": {"name": "nvidia-x"}, "handler": "x"})
    assert (
        apply(kubectl, tmp_path, "rc-pod", extra="  runtimeClassName: nvidia-x\n").returncode == 0
    )


def test_a_gpu_pod_gets_the_gpu_toleration_from_the_api_server_and_others_do_not(
    kubectl, emulator, tmp_path
):
    assert apply(kubectl, tmp_path, "with-limit").returncode == 0
    assert apply(kubectl, tmp_path, "no-limit", resources="").returncode == 0
    written = "  tolerations:\n  - {key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}\n"
    assert apply(kubectl, tmp_path, "own-toleration", extra=written).returncode == 0

    def tolerations(name: str) -> list[dict]:
        return emulator.store.get("pods", name, "default")["spec"].get("tolerations") or []

    assert tolerations("with-limit") == [GPU_TOLERATION]
    assert tolerations("no-limit") == []
    assert tolerations("own-toleration") == [GPU_TOLERATION]  # not added twice


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


def test_the_operator_runtime_classes_follow_cdi():
    def policy(**cdi: bool) -> dict:
        return {"spec": {"operator": {"runtimeClass": "nvidia"}, "cdi": cdi}}

    assert runtime_classes(policy(enabled=True)) == ["nvidia", "nvidia-cdi", "nvidia-legacy"]
    assert runtime_classes(policy(enabled=False)) == ["nvidia"]
    assert runtime_classes(policy(enabled=True, nriPluginEnabled=True)) == []
