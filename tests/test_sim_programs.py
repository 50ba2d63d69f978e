"""The world's programs answer the debugging path's commands from the world's state.

No servers: a store holding a GPU node, its device-plugin and validator pods, and the pods
a person would exec into, and each command run as the container runtime runs it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from labs.sim.hardware import DEFAULT_RUNTIME_ANNOTATION
from labs.sim.programs import Captured, Process, exec_argv, nvidia_smi_table
from labs.sim.store import NODES, PODS, ObjectStore

RECORDED_TABLE = Path(__file__).parent / "fixtures" / "recorded" / "nvidia-smi-driver-580.txt"
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
def store() -> ObjectStore:
    """A GPU node whose device plugin and validator run, plus an idle system-image pod."""
    store = ObjectStore()
    store.create("namespaces", {"metadata": {"name": "gpu-operator"}})
    labels = {"feature.node.kubernetes.io/pci-10de.present": "true"}
    # the NVIDIA AMI: containerd's default runtime is nvidia
    annotations = {DEFAULT_RUNTIME_ANNOTATION: "nvidia"}
    store.create(NODES, {"metadata": {"name": NODE, "labels": labels, "annotations": annotations}})
    plugin = {"name": "nvidia-device-plugin", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.19.0"}
    validator = {
        "name": "nvidia-operator-validator",
        "image": "nvcr.io/nvidia/gpu-operator:v26.3.1",
    }
    store.create(PODS, ready_pod("plugin", {"app": "nvidia-device-plugin-daemonset"}, plugin))
    store.create(PODS, ready_pod("validator", {"app": "nvidia-operator-validator"}, validator))
    return store


def debug_pod(store: ObjectStore) -> Process:
    """The pod `kubectl debug node/...` makes: the host's / at /host, no GPU."""
    container = {
        "name": "debugger",
        "image": AL2023,
        "volumeMounts": [{"name": "host-root", "mountPath": "/host"}],
    }
    pod = ready_pod("node-debugger", {}, container, hostPID=True,
                    volumes=[{"name": "host-root", "hostPath": {"path": "/"}}])  # fmt: skip
    pod = store.create(PODS, pod)
    return Process(store, pod, container, store.get(NODES, NODE))


def dcgm_exporter(store: ObjectStore) -> Process:
    container = {"name": "nvidia-dcgm-exporter",
                 "image": "nvcr.io/nvidia/k8s/dcgm-exporter:4.5.1-4.8.0-distroless"}  # fmt: skip
    pod = store.create(PODS, ready_pod("dcgm", {"app": "nvidia-dcgm-exporter"}, container))
    return Process(store, pod, container, store.get(NODES, NODE))


def run(process: Process, *argv: str) -> tuple[str, int]:
    term = Captured()
    code = exec_argv(list(argv), process, term)
    return term.text, code


def test_nvidia_smi_in_a_debug_pod_fails_on_nvml_though_the_driver_is_fine(store):
    output, code = run(debug_pod(store), "chroot", "/host", "nvidia-smi", "-L")
    assert output == "Failed to initialize NVML: Unknown Error\n"
    assert code == 255


def test_the_dcgm_exporter_sees_the_a10g_and_has_no_shell(store):
    dcgm = dcgm_exporter(store)
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


def test_the_socket_directory_follows_the_device_plugin(store):
    debug = debug_pod(store)
    listing, code = run(debug, "chroot", "/host", "ls", "-la", "/var/lib/kubelet/device-plugins/")
    assert code == 0
    lines = listing.splitlines()
    assert lines[0] == "total 20"
    names = [line.split()[-1] for line in lines[1:]]
    assert names == [".", "..", "kubelet.sock", "kubelet_internal_checkpoint", "nvidia-gpu.sock"]
    assert re.match(r"srwxr-xr-x\. +1 root root +0 Nov 23 08:00 nvidia-gpu.sock$", lines[-1])

    store.delete(PODS, "plugin", "gpu-operator")
    listing, _ = run(debug, "chroot", "/host", "ls", "-la", "/var/lib/kubelet/device-plugins/")
    assert "nvidia-gpu.sock" not in listing
    assert "kubelet.sock" in listing and "kubelet_internal_checkpoint" in listing


def test_validator_status_files_through_a_shell_glob(store):
    script = "cat /run/nvidia/validations/*; ls /run/nvidia/validations"
    output, code = run(debug_pod(store), "chroot", "/host", "sh", "-c", script)
    assert code == 0
    assert output.startswith("IS_HOST_DRIVER=true\nNVIDIA_DRIVER_ROOT=/\n")
    assert output.endswith("cuda-ready\ndriver-ready\nplugin-ready\ntoolkit-ready\n")


def test_node_software_versions(store):
    debug = debug_pod(store)
    glibc, _ = run(debug, "chroot", "/host", "ldd", "--version")
    assert glibc.splitlines()[0] == "ldd (GNU libc) 2.34"
    toolkit, _ = run(debug, "chroot", "/host", "nvidia-ctk", "--version")
    assert toolkit.splitlines()[0] == "NVIDIA Container Toolkit CLI version 1.19.1"


def test_anything_else_answers_like_a_minimal_shell(store):
    debug = debug_pod(store)
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
