"""A person at the keyboard of an injected rehearsal lab, with plain kubectl and the write-up's
commands: `kubectl debug node` and `exec` reach the world's programs, the API pieces a person
reaches for are there (`kubectl top` too, from the real metrics-server), and after
`scenario.inject` the world runs at a person's pace, so the recovery after the revert can be
watched as on EKS.

One world for the module, with device-plugin-off injected at the start; the tests run in
order (the revert comes last). The pace is a person's, compressed 3x (`--speed 3`) so that
the 2-second kubectl loop of the last test costs seconds, not the minute of real time.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from scenario_support import (
    SCENARIO_SPEED,
    SimLab,
    another_lab_record,
    quiet,
    read_until,
    wait_ready,
)
from tool_support import require_tool

import scenarios
from labs.commands import status as lab_status
from labs.kube import gpu
from labs.kube.probes import PROBE_MANIFEST
from labs.kube.workloads import ALLREDUCE, CUDA_CHECK, MANIFESTS, TCP_CHECK, Workload
from labs.lab import Lab
from labs.run.engine import inject_scenario, revert_scenarios
from labs.sim import pace, process
from labs.sim.aws.access import VIEWER, user_arn
from labs.sim.aws.seed import ACCOUNT_ID
from labs.sim.node.hardware import gpu_uuid
from labs.sim.world import VIEWER_KUBECONFIG

PERSON_SPEED = 3.0
DEBUG_IMAGE = "public.ecr.aws/amazonlinux/amazonlinux:2023"
DEVICE_PLUGIN_DS = "nvidia-device-plugin-daemonset"


@pytest.fixture(scope="module")
def practice(world_lab: SimLab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """The shared world with device-plugin-off injected for practice."""
    lab = another_lab_record(world_lab, tmp_path_factory.mktemp("state")).lab
    inject_scenario(lab, scenarios.get("device-plugin-off"), out=quiet, speed=PERSON_SPEED)
    yield lab
    revert_scenarios(lab, scenarios.all_scenarios(), None, out=quiet)


@pytest.fixture(scope="module")
def kubectl(practice: Lab, tmp_path_factory: pytest.TempPathFactory):
    """`kubectl(*args)` against the lab, as `eval "$(invoke lab.env)"` would set it up."""
    binary = require_tool("kubectl")
    cache = tmp_path_factory.mktemp("kubectl-cache")

    def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        command = [binary, "--kubeconfig", str(practice.paths.kubeconfig), "--cache-dir",
                   str(cache), *args]  # fmt: skip
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)  # fmt: skip

    return run


def gpu_node(lab: Lab) -> str:
    return gpu.name_of(gpu.gpu_nodes(lab.snapshot("nodes"))[0])


def debug_node(kubectl, node: str, *command: str) -> subprocess.CompletedProcess:
    """The write-up's `kubectl debug node/N -it --image=... -- <command>`."""
    return kubectl("debug", f"node/{node}", "-it", f"--image={DEBUG_IMAGE}", "--", *command)


def test_after_inject_the_world_runs_at_a_persons_pace_until_a_program_speeds_it_up(
    practice: Lab, kubectl
):
    assert practice.speed == PERSON_SPEED
    label = lab_status.gather(practice)["backend_label"]
    assert f"{PERSON_SPEED:g}x speed now" in label and f"{SCENARIO_SPEED:g}x" in label
    world = process.recorded_endpoints(practice.paths.sim_dir)
    assert pace.read_speed(world) == PERSON_SPEED
    assert pace.read_now(world) > datetime.now(UTC), "the world's clock runs ahead"
    with practice.backend.program_pace(practice):
        assert practice.speed == SCENARIO_SPEED
    assert practice.speed == PERSON_SPEED


def test_debug_node_chroot_nvidia_smi_hits_the_nvml_trap(practice: Lab, kubectl):
    run = debug_node(kubectl, gpu_node(practice), "chroot", "/host", "nvidia-smi", "-L")
    assert run.returncode == 0, run.stderr
    assert "Creating debugging pod node-debugger-" in run.stdout
    assert run.stdout.rstrip().endswith("Failed to initialize NVML: Unknown Error")


def test_socket_directory_has_no_nvidia_gpu_sock_while_the_plugin_is_off(practice: Lab, kubectl):
    listing = "ls -la /var/lib/kubelet/device-plugins/".split()
    run = debug_node(kubectl, gpu_node(practice), "chroot", "/host", *listing)
    assert run.returncode == 0, run.stderr
    assert "kubelet.sock" in run.stdout and "kubelet_internal_checkpoint" in run.stdout
    assert "nvidia-gpu.sock" not in run.stdout


def test_exec_into_the_dcgm_exporter_shows_the_driver_alive(kubectl):
    selector = "-l", "app=nvidia-dcgm-exporter", "-o", "jsonpath={.items[0].metadata.name}"
    pod = kubectl("get", "pods", "-n", "gpu-operator", *selector).stdout
    run = kubectl("exec", "-n", "gpu-operator", pod, "--", "nvidia-smi", "-L")
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("GPU 0: NVIDIA A10G (UUID: GPU-")
    missing = kubectl("exec", "-n", "gpu-operator", pod, "--", "nvidia-smi", "--bogus")
    assert missing.returncode == 255  # the process's exit status, through the error channel


def test_the_operator_is_nvidias_own_installed_by_helm(practice: Lab):
    """What a person types after `eval "$(invoke lab.env)"`: helm lists the chart's release, the
    operator's log is NVIDIA's controller, its DaemonSets are the ones it rendered."""
    script = (
        f"{lab_status.env_exports(practice)}\n"
        "helm list -n gpu-operator\n"
        "kubectl logs -n gpu-operator deploy/gpu-operator | head -2\n"
        "kubectl get ds -n gpu-operator -o name\n"
    )
    shown = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    release = next(line for line in shown.stdout.splitlines() if line.startswith("gpu-operator"))
    assert release.split()[-3:] == ["deployed", "gpu-operator-v25.3.4", "v25.3.4"], release
    # Go's automaxprocs first (NVIDIA's main.go imports it), then the operator's version
    assert "maxprocs: Leaving GOMAXPROCS=" in shown.stdout
    assert '"msg":"version: v25.3.4, commit: d73a0086a6ba"' in shown.stdout
    for operand in ("nvidia-operator-validator", "gpu-feature-discovery", "nvidia-dcgm-exporter"):
        assert f"daemonset.apps/{operand}\n" in shown.stdout
    # device-plugin-off is injected: the operator deleted its DaemonSet
    assert "daemonset.apps/nvidia-device-plugin-daemonset\n" not in shown.stdout


def test_the_api_pieces_a_person_reaches_for(kubectl):
    assert kubectl("create", "ns", "practice").stdout == "namespace/practice created\n"
    created = kubectl("create", "configmap", "notes", "-n", "practice", "--from-literal=a=b")
    assert created.stdout == "configmap/notes created\n", created.stderr
    explain = kubectl("explain", "clusterpolicy.spec.devicePlugin.enabled").stdout
    assert "KIND:       ClusterPolicy" in explain and "FIELD: enabled <boolean>" in explain
    assert kubectl("auth", "can-i", "patch", "clusterpolicies").stdout == "yes\n"
    patch = "-p", '{"data":{"a":"c"}}'
    patched = kubectl("patch", "configmap", "notes", "-n", "practice", "--type=merge", *patch)
    assert patched.stdout == "configmap/notes patched\n", patched.stderr
    assert kubectl("get", "cm", "notes", "-n", "practice", "-o", "jsonpath={.data.a}").stdout == "c"
    everything = kubectl("get", "all", "-n", "gpu-operator").stdout
    assert "replicaset.apps/gpu-operator-" in everything
    assert "service/nvidia-dcgm-exporter" in everything and "9400/TCP" in everything
    events = kubectl("get", "events", "-A").stdout
    for reason in ("SuccessfulCreate", "ScalingReplicaSet", "RegisteredNode", "NodeReady"):
        assert reason in events


def test_the_view_access_entry_reads_and_is_refused_every_write(
    world_lab: SimLab, tmp_path: Path
) -> None:
    """The second IAM user's kubeconfig, as a study-group member or the doctor would hold it:
    its access entry's view policy reads, and writes, secrets and exec are Forbidden."""
    config = world_lab.world.kubeconfig_path.parent / VIEWER_KUBECONFIG
    binary = require_tool("kubectl")

    def viewer(*args: str) -> subprocess.CompletedProcess:
        command = [binary, "--kubeconfig", str(config), "--cache-dir", str(tmp_path), *args]
        return subprocess.run(command, capture_output=True, text=True, timeout=60)

    whoami = json.loads(viewer("auth", "whoami", "-o", "json").stdout)["status"]["userInfo"]
    assert whoami["username"] == user_arn(ACCOUNT_ID, VIEWER)
    pods = viewer("get", "pods", "-n", "gpu-operator", "-o", "name")
    assert pods.returncode == 0 and "pod/gpu-operator-" in pods.stdout, pods.stderr
    pod = pods.stdout.split()[0]
    for refused in (
        ("create", "namespace", "by-viewer"),
        ("get", "secrets", "-A"),
        ("exec", "-n", "gpu-operator", pod, "--", "true"),
        ("delete", "-n", "gpu-operator", pod),
    ):
        result = viewer(*refused)
        assert result.returncode != 0 and "Forbidden" in result.stderr, (refused, result.stderr)
        assert user_arn(ACCOUNT_ID, VIEWER) in result.stderr


def test_the_real_api_server_answers_who_am_i_what_kinds_and_its_metrics(kubectl):
    whoami = json.loads(kubectl("auth", "whoami", "-o", "json").stdout)["status"]["userInfo"]
    # as on EKS with access entries: the IAM user's ARN, the access entry's groups (none)
    assert whoami["username"] == user_arn(ACCOUNT_ID)
    assert whoami["groups"] == ["system:authenticated"]
    kinds = kubectl("api-resources", "-o", "name").stdout.split()
    for kind in (
        "leases.coordination.k8s.io",
        "clusterroles.rbac.authorization.k8s.io",
        "customresourcedefinitions.apiextensions.k8s.io",
        "clusterpolicies.nvidia.com",
    ):
        assert kind in kinds, kinds
    assert "apiserver_request_total{" in kubectl("get", "--raw", "/metrics").stdout


def test_describe_shows_the_scheduler_and_the_kubelet_in_a_pods_events(kubectl):
    selector = "-l", "app=nvidia-dcgm-exporter", "-o", "jsonpath={.items[0].metadata.name}"
    pod = kubectl("get", "pods", "-n", "gpu-operator", *selector).stdout
    described = kubectl("describe", "pod", "-n", "gpu-operator", pod).stdout
    assert re.search(r"^Status: +Running$", described, re.M), described
    assert f"Successfully assigned gpu-operator/{pod} to ip-" in described
    assert re.search(r"Normal +Started .* kubelet +Container started", described), described


def test_a_job_runs_its_pod_and_logs_job_shows_what_it_printed(kubectl):
    job = "create", "job", "hello", "-n", "practice", "--image=busybox"
    assert kubectl(*job, "--", "echo", "hello", "from", "a", "job").returncode == 0
    done = kubectl(
        "wait", "-n", "practice", "--for=condition=complete", "job/hello", "--timeout=60s"
    )
    assert done.stdout == "job.batch/hello condition met\n", done.stderr
    assert kubectl("logs", "-n", "practice", "job/hello").stdout == "hello from a job\n"


def test_the_labs_manifests_apply_with_strict_validation(kubectl, tmp_path: Path):
    """README's by-hand use of labs/kube/manifests: each ConfigMap, then the whole folder."""
    workloads = (Workload(PROBE_MANIFEST.name), CUDA_CHECK, ALLREDUCE, TCP_CHECK)
    kubectl("create", "namespace", "manifests")
    try:
        for workload in [w for w in workloads if w.script and w.config_map]:
            script = f"--from-file={MANIFESTS / str(workload.script)}"
            kubectl("create", "configmap", str(workload.config_map), "-n", "manifests", script)
        applied = kubectl("apply", "--validate=strict", "-n", "manifests", "-f", str(MANIFESTS))
        assert applied.returncode == 0, applied.stderr
        created = {f"{i['kind'].lower()}/{i['metadata']['name']} created" for w in workloads
                   for i in w.items()}  # fmt: skip
        assert set(applied.stdout.splitlines()) == created, applied.stdout
        typo = tmp_path / "typo.yaml"
        probe = PROBE_MANIFEST.read_text()
        typo.write_text(probe.replace("restartPolicy", "restartPolicyy"))
        refused = kubectl("apply", "--validate=strict", "-n", "manifests", "-f", str(typo))
        assert 'unknown field "spec.restartPolicyy"' in refused.stderr, refused.stderr
    finally:
        kubectl("delete", "namespace", "manifests", "--wait=false")


def test_kubectl_cp_copies_into_a_container_and_back_out(kubectl, tmp_path: Path):
    run = "run", "toolbox", "-n", "practice", f"--image={DEBUG_IMAGE}", "--", "sleep", "infinity"
    assert kubectl(*run).returncode == 0
    ready = kubectl("wait", "-n", "practice", "--for=condition=Ready", "pod/toolbox")
    assert ready.returncode == 0, ready.stderr
    notes = tmp_path / "notes.txt"
    notes.write_text("nvidia-smi -L said: GPU 0: NVIDIA A10G\n")
    copied = kubectl("cp", str(notes), "practice/toolbox:/tmp")
    assert copied.returncode == 0, copied.stderr
    shown = kubectl("exec", "-n", "practice", "toolbox", "--", "cat", "/tmp/notes.txt")
    assert shown.stdout == notes.read_text(), shown.stderr
    back = kubectl("cp", "practice/toolbox:/tmp/notes.txt", str(tmp_path / "back.txt"))
    assert back.returncode == 0, back.stderr
    assert (tmp_path / "back.txt").read_text() == notes.read_text()
    selector = "-l", "app=nvidia-dcgm-exporter", "-o", "jsonpath={.items[0].metadata.name}"
    exporter = kubectl("get", "pods", "-n", "gpu-operator", *selector).stdout
    # v25.3.4's dcgm-exporter image is Ubuntu's, with tar (v26.3.1's distroless one has none)
    into_exporter = kubectl("cp", str(notes), f"gpu-operator/{exporter}:/tmp/notes.txt")
    assert into_exporter.returncode == 0, into_exporter.stderr


def test_port_forward_to_a_dcgm_exporter_shows_its_gpus_metrics(practice: Lab, kubectl):
    selector = "-l", "app=nvidia-dcgm-exporter", "-o", "jsonpath={.items[0].metadata.name}"
    pod = kubectl("get", "pods", "-n", "gpu-operator", *selector).stdout
    node = kubectl("get", "pod", "-n", "gpu-operator", pod, "-o", "jsonpath={.spec.nodeName}")
    config = "--kubeconfig", str(practice.paths.kubeconfig)
    forward = [require_tool("kubectl"), *config, "port-forward", "-n", "gpu-operator", pod, ":9400"]
    forwarding = subprocess.Popen(forward, stdout=subprocess.PIPE, text=True)
    try:
        said = read_until(forwarding.stdout, "-> 9400", timeout=30)[-1]
        local = re.search(r"127\.0\.0\.1:(\d+) -> 9400", said)
        assert local, said
        with urllib.request.urlopen(f"http://127.0.0.1:{local.group(1)}/metrics") as answer:
            page = answer.read().decode()
    finally:
        forwarding.terminate()
        forwarding.wait(timeout=30)
    series = [line for line in page.splitlines() if line.startswith("DCGM_FI_DEV_GPU_UTIL{")]
    assert len(series) == 1, page
    assert f'UUID="{gpu_uuid(node.stdout)}"' in series[0], series
    assert f'Hostname="{node.stdout}"' in series[0], series
    assert "# TYPE DCGM_FI_DEV_XID_ERRORS gauge" in page


def until_answered(kubectl, *args: str, timeout: float = 90) -> subprocess.CompletedProcess:
    """`kubectl *args` until it succeeds: metrics-server has CPU figures only from its second
    scrape (10 s after the first), the aggregator sees it once its pods are Ready."""
    deadline = time.monotonic() + timeout
    while True:
        run = kubectl(*args)
        if run.returncode == 0 or time.monotonic() > deadline:
            return run
        time.sleep(2)


def top_rows(run: subprocess.CompletedProcess) -> dict[str, list[str]]:
    assert run.returncode == 0, run.stderr
    header, *lines = run.stdout.splitlines()
    return {line.split()[0]: line.split()[1:] for line in lines}


def test_the_metrics_api_is_served_by_metrics_server_through_the_aggregator(kubectl):
    available = '{.status.conditions[?(@.type=="Available")].status}'
    name = "apiservice/v1beta1.metrics.k8s.io"
    run = until_answered(kubectl, "wait", "--for=condition=Available", name, "--timeout=5s")
    assert run.returncode == 0, kubectl("get", name, "-o", "yaml").stdout
    assert kubectl("get", name, "-o", f"jsonpath={available}").stdout == "True"
    table = kubectl("get", name).stdout.splitlines()
    assert table[0].split() == ["NAME", "SERVICE", "AVAILABLE", "AGE"]
    assert table[1].split()[:3] == ["v1beta1.metrics.k8s.io", "kube-system/metrics-server", "True"]


def test_kubectl_top_node_lists_every_node_with_plausible_figures(practice: Lab, kubectl):
    rows = top_rows(until_answered(kubectl, "top", "node"))
    nodes = practice.snapshot("nodes")
    assert set(rows) == {gpu.name_of(node) for node in nodes.objects("nodes")}
    memory = {}
    for name, (cpu, cpu_share, used, used_share) in rows.items():
        assert cpu.endswith("m") and 0 < int(cpu[:-1]) < 1000, rows
        assert used.endswith("Mi") and cpu_share.endswith("%") and used_share.endswith("%"), rows
        memory[name] = int(used[:-2])
    gpu_nodes = {gpu.name_of(node) for node in gpu.gpu_nodes(nodes)}
    system = [memory[name] for name in rows if name not in gpu_nodes]
    # A g5.xlarge (16 GiB) holds more than a t3.medium (4 GiB), each well inside its machine.
    assert max(system) < 4096 and min(memory[name] for name in gpu_nodes) > max(system), rows


def test_kubectl_top_pod_lists_the_running_operator_pods(kubectl):
    phase = "--field-selector=status.phase=Running"
    running = kubectl("get", "pods", "-n", "gpu-operator", phase, "-o", "name").stdout.split()
    rows = top_rows(until_answered(kubectl, "top", "pod", "-n", "gpu-operator"))
    assert set(rows) == {name.removeprefix("pod/") for name in running}
    assert all(cpu.endswith("m") and used.endswith("Mi") for cpu, used in rows.values()), rows


def ds_counts(kubectl) -> str:
    line = kubectl("get", "ds", "-n", "gpu-operator", DEVICE_PLUGIN_DS, "--no-headers").stdout
    return "/".join(line.split()[1:4]) if line else "NotFound"


def test_a_two_second_loop_sees_the_recovery_of_the_write_up(practice: Lab, kubectl):
    revert_scenarios(practice, scenarios.all_scenarios(), None, out=quiet)
    seen: list[str] = []
    deadline = time.monotonic() + 90 / PERSON_SPEED
    while not seen or seen[-1] != "2/2/2":
        assert time.monotonic() < deadline, f"no 2/2/2 in time; seen {seen}"
        seen.append(ds_counts(kubectl))
        time.sleep(2)
    assert "2/2/1" in seen, seen  # one node's plugin is ready first, as in the write-up's table
    listing = "ls -la /var/lib/kubelet/device-plugins/".split()
    after = debug_node(kubectl, gpu_node(practice), "chroot", "/host", *listing)
    assert "nvidia-gpu.sock" in after.stdout
    with practice.backend.program_pace(practice):
        wait_ready(practice)


def test_speed_is_checked_before_anything_is_injected(tmp_path: Path):
    from labs.backends.aws import AwsBackend
    from labs.errors import LabError
    from labs.settings import load_settings

    aws_lab = Lab.create(load_settings(None, {"state_dir": str(tmp_path)}), "aws")
    with pytest.raises(LabError, match="runs in real time; --speed applies to rehearsal labs"):
        AwsBackend().person_speed(aws_lab, 5.0)
    assert AwsBackend().person_speed(aws_lab, None) == 1.0
