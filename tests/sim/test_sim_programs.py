"""The world's programs answer the debugging path's commands from the world's state.

A held-still API server holding a GPU node, its device-plugin and validator pods, and the
pods a person would exec into, and each command run as the container runtime runs it.
"""

from __future__ import annotations

import re

import pytest
from lab_support import FIXTURES
from still_support import StillPlane

from labs.kube.resources import NODES, PODS
from labs.sim.node.hardware import DEFAULT_RUNTIME_ANNOTATION
from labs.sim.node.programs import Captured, Process, exec_argv, nvidia_smi_table

RECORDED_TABLE = FIXTURES / "recorded" / "nvidia-smi-driver-580.txt"
NODE = "ip-192-168-12-5.ap-northeast-2.compute.internal"
AL2023 = "public.ecr.aws/amazonlinux/amazonlinux:2023"


def ready_pod(name: str, labels: dict, container: dict, **spec: object) -> dict:
    started = "2026-11-23T08:00:00Z"
    return {
        "metadata": {"name": name, "namespace": "gpu-operator", "labels": labels},
        "spec": {"nodeName": NODE, "containers": [container], **spec},
        "status": {
            "phase": "Running",
            "startTime": started,
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [{"name": container["name"], "ready": True,
                                   "state": {"running": {"startedAt": started}}}],
        },
    }  # fmt: skip


@pytest.fixture
def node(still: StillPlane) -> StillPlane:
    """A GPU node whose device plugin and validator run, plus an idle system-image pod."""
    still.namespace("gpu-operator")
    labels = {"feature.node.kubernetes.io/pci-10de.present": "true"}
    # the NVIDIA AMI: containerd's default runtime is nvidia
    annotations = {DEFAULT_RUNTIME_ANNOTATION: "nvidia"}
    still.put(NODES, {"metadata": {"name": NODE, "labels": labels, "annotations": annotations}})
    plugin = {"name": "nvidia-device-plugin", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.19.0"}
    validator = {
        "name": "nvidia-operator-validator",
        "image": "nvcr.io/nvidia/gpu-operator:v26.3.1",
    }
    still.put(PODS, ready_pod("plugin", {"app": "nvidia-device-plugin-daemonset"}, plugin))
    still.put(PODS, ready_pod("validator", {"app": "nvidia-operator-validator"}, validator))
    return still


def in_pod(still: StillPlane, pod: dict, container: dict) -> Process:
    """A process in `container` of `pod`, put in on the GPU node."""
    created = still.put(PODS, pod)
    return Process(still.api, created, container, still.api.get(NODES, NODE))


def debug_pod(still: StillPlane) -> Process:
    """The pod `kubectl debug node/...` makes: the host's / at /host, no GPU."""
    container = {
        "name": "debugger",
        "image": AL2023,
        "volumeMounts": [{"name": "host-root", "mountPath": "/host"}],
    }
    pod = ready_pod("node-debugger", {}, container, hostPID=True,
                    volumes=[{"name": "host-root", "hostPath": {"path": "/"}}])  # fmt: skip
    return in_pod(still, pod, container)


def dcgm_exporter(still: StillPlane) -> Process:
    container = {"name": "nvidia-dcgm-exporter",
                 "image": "nvcr.io/nvidia/k8s/dcgm-exporter:4.5.1-4.8.0-distroless"}  # fmt: skip
    return in_pod(still, ready_pod("dcgm", {"app": "nvidia-dcgm-exporter"}, container), container)


def run(process: Process, *argv: str) -> tuple[str, int]:
    term = Captured()
    code = exec_argv(list(argv), process, term)
    return term.text, code


def test_nvidia_smi_in_a_debug_pod_fails_on_nvml_though_the_driver_is_fine(node):
    output, code = run(debug_pod(node), "chroot", "/host", "nvidia-smi", "-L")
    assert output == "Failed to initialize NVML: Unknown Error\n"
    assert code == 255


def test_the_dcgm_exporter_sees_the_a10g_and_has_no_shell(node):
    dcgm = dcgm_exporter(node)
    output, code = run(dcgm, "nvidia-smi", "-L")
    assert code == 0
    assert re.fullmatch(r"GPU 0: NVIDIA A10G \(UUID: GPU-[0-9a-f-]{36}\)\n", output)
    query = "--query-gpu=name,driver_version,memory.total"
    assert run(dcgm, "nvidia-smi", query, "--format=csv") == (
        "name, driver_version, memory.total [MiB]\nNVIDIA A10G, 580.126.09, 23028 MiB\n",
        0,
    )
    assert run(dcgm, "nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits") == (
        "23028\n",
        0,
    )
    assert run(dcgm, "nvidia-smi", "--query-gpu=bogus", "--format=csv") == (
        'Field "bogus" is not a valid field to query.\n\n',
        2,
    )
    output, code = run(dcgm, "sh")  # a distroless image: only what the NVIDIA runtime injects
    assert code == 126 and 'exec: "sh": executable file not found in $PATH' in output


def test_the_socket_directory_follows_the_device_plugin(node):
    debug = debug_pod(node)
    listing, code = run(debug, "chroot", "/host", "ls", "-la", "/var/lib/kubelet/device-plugins/")
    assert code == 0
    lines = listing.splitlines()
    assert lines[0] == "total 20"
    names = [line.split()[-1] for line in lines[1:]]
    assert names == [".", "..", "kubelet.sock", "kubelet_internal_checkpoint", "nvidia-gpu.sock"]
    assert re.match(r"srwxr-xr-x\. +1 root root +0 Nov 23 08:00 nvidia-gpu.sock$", lines[-1])

    node.delete(PODS, "plugin", "gpu-operator")
    listing, _ = run(debug, "chroot", "/host", "ls", "-la", "/var/lib/kubelet/device-plugins/")
    assert "nvidia-gpu.sock" not in listing
    assert "kubelet.sock" in listing and "kubelet_internal_checkpoint" in listing


def test_validator_status_files_through_a_shell_glob(node):
    script = "cat /run/nvidia/validations/*; ls /run/nvidia/validations"
    output, code = run(debug_pod(node), "chroot", "/host", "sh", "-c", script)
    assert code == 0
    assert output.startswith("IS_HOST_DRIVER=true\nNVIDIA_DRIVER_ROOT=/\n")
    assert output.endswith("cuda-ready\ndriver-ready\nplugin-ready\ntoolkit-ready\n")


def test_node_software_versions(node):
    debug = debug_pod(node)
    glibc, _ = run(debug, "chroot", "/host", "ldd", "--version")
    assert glibc.splitlines()[0] == "ldd (GNU libc) 2.34"
    toolkit, _ = run(debug, "chroot", "/host", "nvidia-ctk", "--version")
    assert toolkit.splitlines()[0] == "NVIDIA Container Toolkit CLI version 1.19.1"


def test_anything_else_answers_like_a_minimal_shell(node):
    debug = debug_pod(node)
    assert run(debug, "sh", "-c", "foo; echo $?") == ("sh: 1: foo: not found\n127\n", 0)
    assert run(debug, "sh", "-c", "false || echo fallback && true") == ("fallback\n", 0)
    assert run(debug, "chroot", "/host", "foo") == (
        "chroot: failed to run command ‘foo’: No such file or directory\n",
        127,
    )
    output, code = run(debug, "sh", "-c", "nvidia-smi")  # not in the debug image, only the host
    assert (output, code) == ("sh: 1: nvidia-smi: not found\n", 127)


def test_the_table_keeps_the_driver_580_layout_recorded_on_real_hardware():
    ours = nvidia_smi_table().splitlines()
    recorded = RECORDED_TABLE.read_text().splitlines()
    # The recording has two GPUs (3 rows + a rule each); the lab's node has one.
    recorded = recorded[:12] + recorded[16:]
    assert len(ours) == len(recorded)
    for mine, real in zip(ours[1:], recorded[1:], strict=True):  # the first line is the date
        separators = [i for i, char in enumerate(real) if char in "|+"]
        assert [i for i, char in enumerate(mine) if char in "|+"] == separators, (mine, real)
        if "H200" not in real and "W /" not in real and "Disabled" not in real:
            assert mine == real.replace("580.159.04", "580.126.09")
