"""The real control plane the rehearsal moves to: built from its Go modules, answering kubectl,
and saying what the rehearsal's model of Kubernetes says for every workload scenario."""

from __future__ import annotations

import base64
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

import pytest
from controlplane_support import (
    kubectl_on,
    rehearsals_under,
    running_control_plane,
)
from lab_support import ROOT
from sim_support import wait_for
from stack_spec import stack
from still_support import StillPlane
from tool_support import require_tool, require_venv_tool

from labs.kube.resources import CONFIG_MAPS
from labs.sim.aws.access import ADMIN_POLICY, LAB_USER, AccessEntries, Principal, user_arn
from labs.sim.aws.auth import Keys
from labs.sim.controlplane import build, run
from labs.sim.controlplane.kubeconfig import kubeconfig_document, write_kubeconfig
from labs.sim.controlplane.run import FLEX_VOLUME_DIR, ControlPlane
from labs.sim.controlplane.tls import LOOPBACK

MANIFESTS = sorted(ROOT.glob("scenarios/manifests/*.yaml"))
# The controller manager's default flex volume directory, which it creates where it is missing;
# whether this host had it before any plane of this process started.
HOST_FLEX_VOLUME_DIR = Path("/usr/libexec/kubernetes/kubelet-plugins/volume/exec")
HOST_HAD_FLEX_VOLUME_DIR = HOST_FLEX_VOLUME_DIR.exists()
EVENT_TIMEOUT = 30.0
# A pod name a controller generated: its owner's name, then hash or random parts.
GENERATED = re.compile(r'pods "[a-z0-9-]+?-[a-z0-9]{6,10}-[a-z0-9]{0,5}"')

Run = Callable[..., subprocess.CompletedProcess]


# The rehearsal's AWS keys and cluster name: the token webhook takes EKS tokens made with them.
KEYS = Keys("AKIA" + secrets.token_hex(8).upper(), secrets.token_urlsafe(30))
CLUSTER = "plane"
REGION = "ap-northeast-2"
USER = Principal(user_arn("123456789012"), "AIDAPLANE", "123456789012", KEYS)
ACCESS = AccessEntries(CLUSTER)
ACCESS.add(USER, ADMIN_POLICY, REGION)


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    with running_control_plane(tmp_path_factory.mktemp("controlplane"), ACCESS) as running:
        yield running


@pytest.fixture
def real(plane: ControlPlane, tmp_path: Path) -> Run:
    return partial(kubectl_on, plane.admin_kubeconfig, tmp_path / "real-cache")


def test_kubectl_version_prints_the_release_go_mod_pins(real: Run) -> None:
    server = json.loads(real("version", "-o", "json").stdout)["serverVersion"]
    assert server["gitVersion"] == build.pinned_versions().kubernetes
    assert re.fullmatch(r"v1\.35\.\d+", server["gitVersion"])


def test_the_controller_manager_keeps_its_volume_plugins_in_the_planes_home(
    plane: ControlPlane,
) -> None:
    """Nothing of the plane lands on the host: the controller manager's flex volume directory
    is made in the plane's home, and the host's stays as it was."""
    wait_for(lambda: (plane.home / FLEX_VOLUME_DIR).is_dir(), what="its flex volume directory")
    assert HOST_FLEX_VOLUME_DIR.exists() == HOST_HAD_FLEX_VOLUME_DIR


def test_the_pinned_release_is_the_stacks_eks_version() -> None:
    pinned = build.pinned_versions().kubernetes.removeprefix("v")
    assert pinned.rsplit(".", 1)[0] == stack()["variable"]["KubernetesVersion"]["default"]


def test_the_admin_kubeconfig_is_a_cluster_admin_and_rbac_is_real(real: Run) -> None:
    whoami = json.loads(real("auth", "whoami", "-o", "json").stdout)["status"]["userInfo"]
    assert "system:masters" in whoami["groups"]
    asked = real("auth", "can-i", "list", "pods", "--as", "system:serviceaccount:default:nobody")
    assert asked.stdout.strip() == "no"


def test_a_plane_held_still_runs_etcd_and_the_api_server_only(still: StillPlane) -> None:
    assert set(still.plane.pids) == {"etcd", "kube-apiserver"}


def test_reset_removes_what_a_test_put_in_and_keeps_what_the_plane_began_with(
    still_plane: StillPlane, tmp_path: Path
) -> None:
    """Whoever wrote it (the API, kubectl); a namespace too, which no controller finalizes."""
    still_plane.namespace("scratch")
    still_plane.put(CONFIG_MAPS, {"metadata": {"name": "put"}, "data": {"a": "1"}}, "scratch")
    made = still_plane.kubectl(tmp_path, "create", "configmap", "by-kubectl", "-n", "default")
    assert made.returncode == 0, made.stderr

    still_plane.reset()

    namespaces = still_plane.kubectl(tmp_path, "get", "namespaces", "-o", "name").stdout.split()
    assert "namespace/scratch" not in namespaces and "namespace/default" in namespaces
    left = still_plane.kubectl(tmp_path, "get", "configmap", "by-kubectl", "-n", "default")
    assert "NotFound" in left.stderr
    kept = still_plane.kubectl(tmp_path, "get", "serviceaccount", "default", "-n", "default")
    assert kept.returncode == 0, kept.stderr


GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def _cuda_pod(name: str, limit: bool = True, **spec: object) -> str:
    container: dict = {"name": "cuda", "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"}
    if limit:
        container["resources"] = {"limits": {"nvidia.com/gpu": 1}}
    body = {"restartPolicy": "Never", "containers": [container], **spec}
    return json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": body})


@pytest.fixture
def still_kubectl(still: StillPlane, tmp_path: Path) -> Run:
    """kubectl on the held-still plane: its admission as the full plane's, no controller to race
    (the default ServiceAccount is there before the first pod)."""
    return partial(still.kubectl, tmp_path / "still-cache")


def test_a_pod_naming_a_missing_runtime_class_is_refused_at_create_time(
    still_kubectl: Run,
) -> None:
    """The refusal the doctor reads back from a controller's FailedCreate Event."""
    manifest = _cuda_pod("rc-pod", runtimeClassName="nvidia-x")
    refused = still_kubectl("apply", "-f", "-", stdin=manifest)

    assert refused.returncode == 1
    assert "Error from server (Forbidden): error when creating" in refused.stderr
    assert 'pods "rc-pod" is forbidden: pod rejected: RuntimeClass "nvidia-x" not found' in (
        refused.stderr
    )
    assert "NotFound" in still_kubectl("get", "pod", "rc-pod").stderr
    runtime_class = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                     "metadata": {"name": "nvidia-x"}, "handler": "x"}  # fmt: skip
    assert still_kubectl("create", "-f", "-", stdin=json.dumps(runtime_class)).returncode == 0
    assert still_kubectl("apply", "-f", "-", stdin=manifest).returncode == 0


def test_a_gpu_pod_gets_the_gpu_toleration_from_the_api_server_and_others_do_not(
    still_kubectl: Run,
) -> None:
    """EKS's ExtendedResourceToleration, enabled on the plane as EKS enables it (the API server's
    DefaultTolerationSeconds adds its not-ready and unreachable ones to every pod)."""
    for name, manifest in (
        ("with-limit", _cuda_pod("with-limit")),
        ("no-limit", _cuda_pod("no-limit", limit=False)),
        ("own-toleration", _cuda_pod("own-toleration", tolerations=[GPU_TOLERATION])),
    ):
        assert still_kubectl("apply", "-f", "-", stdin=manifest).returncode == 0, name

    def gpu_tolerations(name: str) -> list[dict]:
        pod = json.loads(still_kubectl("get", "pod", name, "-o", "json").stdout)
        return [t for t in pod["spec"]["tolerations"] if t.get("key") == "nvidia.com/gpu"]

    assert gpu_tolerations("with-limit") == [GPU_TOLERATION]
    assert gpu_tolerations("no-limit") == []
    assert gpu_tolerations("own-toleration") == [GPU_TOLERATION]  # not added twice


def _eks_token(cluster: str) -> str:
    """What `aws eks get-token` (the lab kubeconfig's exec plugin) makes with the lab's keys."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env |= {
        "AWS_ACCESS_KEY_ID": KEYS.access_key_id,
        "AWS_SECRET_ACCESS_KEY": KEYS.secret_access_key,
    }
    command = [require_venv_tool("aws"), "eks", "get-token", "--cluster-name", cluster]
    made = subprocess.run(
        [*command, "--region", REGION], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(made.stdout)["status"]["token"]


def test_an_eks_token_for_the_lab_is_its_iam_user_with_admin_access_and_others_are_refused(
    plane: ControlPlane, tmp_path: Path
) -> None:
    """As on EKS with access entries: the IAM ARN, no system:masters, the access entry's
    cluster-admin policy (the authorization webhook) lets it write."""
    ca_data = base64.b64encode(plane.ca_pem.encode()).decode()
    answers = {}
    for cluster in (CLUSTER, "another-cluster"):
        document = kubeconfig_document(
            plane.api_url, cluster, _eks_token(cluster), ca_data, LAB_USER
        )
        config = write_kubeconfig(tmp_path / f"{cluster}.kubeconfig", document)
        answers[cluster] = kubectl_on(config, tmp_path / "cache", "auth", "whoami", "-o", "json")
        if cluster == CLUSTER:
            created = kubectl_on(config, tmp_path / "cache", "create", "namespace", "by-token")
            assert created.stdout == "namespace/by-token created\n", created.stderr
    user = json.loads(answers[CLUSTER].stdout)["status"]["userInfo"]
    assert user["username"] == USER.arn and user["groups"] == ["system:authenticated"]
    assert user["extra"]["accessKeyId"] == [KEYS.access_key_id]
    assert answers["another-cluster"].returncode != 0
    assert "Unauthorized" in answers["another-cluster"].stderr


def test_the_audit_log_names_who_did_what(plane: ControlPlane, real: Run) -> None:
    real("create", "namespace", "audited")
    real("get", "namespaces")
    lines = (plane.home / "logs" / "audit.log").read_text().splitlines()
    audited = [json.loads(line) for line in lines]
    done = {
        (e["user"]["username"], e["verb"], e["objectRef"].get("resource"))
        for e in audited
        if e.get("stage") == "ResponseComplete" and e.get("objectRef")
    }
    assert ("kubernetes-admin", "create", "namespaces") in done
    assert ("kubernetes-admin", "list", "namespaces") in done


def test_go_mod_replaces_every_staging_module_of_the_pinned_release() -> None:
    versions = build.pinned_versions()
    go = require_tool("go")
    found = subprocess.run(
        [go, "mod", "download", "-json", f"{build.KUBERNETES_MODULE}@{versions.kubernetes}"],
        cwd=build.GO_MODULE,
        env={**os.environ, "GOTOOLCHAIN": "local"},
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    upstream = Path(json.loads(found.stdout)["GoMod"]).read_text()
    ours = dict(
        re.findall(r"^\s*(\S+) => \S+ (v\S+)$", (build.GO_MODULE / "go.mod").read_text(), re.M)
    )
    assert ours == build.staging_replaces(upstream, versions.kubernetes)


def test_no_component_outlives_a_killed_starter(tmp_path: Path) -> None:
    home = tmp_path / "killed"
    child = subprocess.Popen(
        [sys.executable, "-c", _START_AND_WAIT, str(home)], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "ready"
    assert rehearsals_under(home), "the control plane did not start"
    child.send_signal(signal.SIGKILL)
    child.wait()
    deadline = time.monotonic() + 10
    while rehearsals_under(home) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert rehearsals_under(home) == []


def test_an_api_server_that_cannot_listen_is_named_with_the_end_of_its_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The API server's port taken by another program (once a client's connection took it):
    start() says it exited, quotes why from its log, and leaves no program running."""
    drawn = iter([run.free_port(), run.free_port()])
    with socket.create_server((LOOPBACK, 0)) as taken:
        monkeypatch.setattr(run, "free_port", lambda: next(drawn, taken.getsockname()[1]))
        plane = ControlPlane(tmp_path / "plane")
        with pytest.raises(run.ControlPlaneError, match="kube-apiserver exited with 1") as raised:
            plane.start(say=lambda line: None)
    assert "address already in use" in str(raised.value)
    assert rehearsals_under(tmp_path / "plane") == []


def test_ports_for_the_labs_programs_lie_below_the_kernels_ephemeral_range() -> None:
    """A client's connection is never handed a port a program of the lab was about to bind."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = [run.free_port() for _ in range(500)]
    assert len(set(ports)) == len(ports)
    assert max(ports) < low


_START_AND_WAIT = """
import sys, time
from pathlib import Path
from labs.sim.controlplane.run import ControlPlane
ControlPlane(Path(sys.argv[1])).start(lambda line: None)
print("ready", flush=True)
time.sleep(600)
"""


def _build_command(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    """`python -m labs.sim.controlplane` with an empty binary cache and `env` on top."""
    base = {k: v for k, v in os.environ.items() if k not in (build.PREBUILT_ENV, build.ENVTEST_ENV)}
    base |= {build.CACHE_ENV: str(tmp_path / "empty-cache"), **env}
    command = [sys.executable, "-m", "labs.sim.controlplane"]
    return subprocess.run(command, env=base, capture_output=True, text=True, timeout=600)


def test_without_go_the_build_names_both_ways_to_get_the_programs(tmp_path: Path) -> None:
    result = _build_command(tmp_path, PATH=str(Path(sys.executable).parent))
    assert result.returncode == 1
    assert "Go (1.25 or newer) is not on PATH" in result.stderr
    assert build.PREBUILT_ENV in result.stderr
    assert not (tmp_path / "empty-cache").exists()


def test_a_prebuilt_directory_missing_programs_is_named_with_what_it_lacks(tmp_path: Path) -> None:
    prebuilt = tmp_path / "bin"
    prebuilt.mkdir()
    (prebuilt / "etcd").write_text("#!/bin/sh\n")
    (prebuilt / "etcd").chmod(0o755)
    result = _build_command(tmp_path, **{build.PREBUILT_ENV: str(prebuilt)})
    assert result.returncode == 1
    assert f"{build.PREBUILT_ENV}={prebuilt} lacks kube-scheduler, kube-controller-manager" in (
        result.stderr
    )


def test_prebuilt_binaries_are_used_as_they_are(tmp_path: Path) -> None:
    prebuilt = build.binaries(lambda _line: None)
    cache = tmp_path / "empty-cache"
    # promtool and kube-state-metrics are in the cache already (their links cost a minute).
    tools = (build.PROMTOOL_PROGRAM, build.KUBE_STATE_METRICS_PROGRAM)
    for program in tools:
        cached = cache / program.name / program.version() / program.name
        cached.parent.mkdir(parents=True)
        cached.symlink_to(build.pinned_binary(program, lambda _line: None))
    result = _build_command(tmp_path, **{build.ENVTEST_ENV: str(prebuilt)})
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines[0] == f"control plane programs: {prebuilt}"
    # Our own programs never come from a prebuilt directory: built into the cache.
    for about, name in (
        ("node endpoint", build.NODE_ENDPOINT),
        ("nodes' container runtime", build.NODE_RUNTIME),
        ("GPU device plugin", build.DEVICE_PLUGIN),
    ):
        assert f"{about}: {cache / name / build.source_digest() / name}" in lines
    # Nor does metrics-server when the directory lacks it: built per version; cached ones reused.
    for program in (build.METRICS_SERVER_PROGRAM, *tools):
        cached = cache / program.name / program.version() / program.name
        assert f"{program.name}: {cached}" in lines
    assert "building metrics-server" in result.stdout
    assert not any(f"building {program.name}" in result.stdout for program in tools)
