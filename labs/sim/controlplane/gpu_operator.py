"""The real NVIDIA GPU Operator for a rehearsal lab: its program, chart and operand manifests,
all from the Go module `go/gpu-operator` pins, and the process that runs as its pod.

The operator reads its operand manifests from the fixed `/opt/gpu-operator/<state>` and the
node's `/host-etc/os-release`, and finds the API server as a pod does (its ServiceAccount's
token, CA and namespace under `/var/run/secrets/kubernetes.io/serviceaccount`). None of those
paths may be touched on the user's machine, so each process gets a root of its own
(`labs.sim.node.container_root`) with the module's manifests and the binary bound into it. It
reaches the API server on loopback and serves its metrics on a loopback port of its network.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from labs.sim.controlplane import build
from labs.sim.controlplane.run import (
    die_with_parent,
    free_port,
    reap,
)
from labs.sim.controlplane.tls import LOOPBACK
from labs.sim.node import container_root
from labs.sim.node.container_root import SERVICE_ACCOUNT_DIR, Bind, lay_out
from labs.sim.node.hardware import AMI_OS_RELEASE

MODULE = "github.com/NVIDIA/gpu-operator"
CHART_PATH = "deployments/gpu-operator"
CLUSTER_POLICY_CRD = "crds/nvidia.com_clusterpolicies.yaml"
STOP_TIMEOUT = 5.0
Say = Callable[[str], None]


@dataclass(frozen=True)
class OperatorRelease:
    """The pinned release: its program, its chart (Chart.yaml stamped with the release, as
    NVIDIA's release does) and the manifests its image carries (its Dockerfile copies the
    module's `assets/` to /opt/gpu-operator and `manifests/` to /opt/gpu-operator/manifests)."""

    version: str
    binary: Path
    chart: Path
    manifests: Path


def release(say: Say = print) -> OperatorRelease:
    """The operator release of `go/gpu-operator`: built, and its chart and manifests copied out
    of the module into the cache, once."""
    program = build.GPU_OPERATOR_PROGRAM
    binary = build.pinned_binary(program, say)
    version = program.version()
    home = build.cache_root() / program.name / version
    chart, manifests = home / "chart", home / "opt" / "gpu-operator"
    if not _unpacked(home):
        _unpack(build.module_dir(program.module, program.pins), version, home)
    return OperatorRelease(version, binary, chart, manifests)


UNPACKED = {"chart": "Chart.yaml", "opt": "gpu-operator/manifests/state-driver"}


def _unpacked(home: Path, name: str | None = None) -> bool:
    """The chart and the manifests are in place (one of them, given `name`)."""
    names = [name] if name else list(UNPACKED)
    return all((home / n / UNPACKED[n]).exists() for n in names)


def _unpack(source: Path, version: str, home: Path) -> None:
    """The chart (stamped with the release) and the image's /opt/gpu-operator, laid out under
    a staging directory of this process's and moved into place: two test workers unpacking
    at once never see each other's half."""
    staging = home / f".unpack.{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(source / CHART_PATH, staging / "chart")
    shutil.copytree(source / "assets", staging / "opt" / "gpu-operator")
    shutil.copytree(source / "manifests", staging / "opt" / "gpu-operator" / "manifests")
    for path in staging.rglob("*"):  # the module cache's files are read-only
        path.chmod(0o755 if path.is_dir() else 0o644)
    stamped = staging / "chart" / "Chart.yaml"
    text = re.sub(r"^version:.*$", f"version: {version}", stamped.read_text(), flags=re.M)
    stamped.write_text(re.sub(r"^appVersion:.*$", f'appVersion: "{version}"', text, flags=re.M))
    for name in UNPACKED:
        if _unpacked(home, name):  # another process put it there first
            continue
        shutil.rmtree(home / name, ignore_errors=True)  # a half or an older layout
        try:
            (staging / name).rename(home / name)
        except OSError:  # another process put it there meanwhile
            pass
    shutil.rmtree(staging, ignore_errors=True)


def cluster_policy_crd(operator: OperatorRelease) -> dict:
    """The ClusterPolicy CRD as the release's chart installs it."""
    crd: dict = yaml.safe_load((operator.chart / CLUSTER_POLICY_CRD).read_text())
    return crd


@dataclass
class OperatorProcess:
    """One run of the operator's container: its root under `home`, its output line by line to
    `output(line)`; the metrics it serves at `metrics_address`."""

    home: Path
    api_url: str
    ca_pem: str
    output: Callable[[str], None]
    # Where its servers listen: loopback ports of its own beside the world, or, as a real
    # container's process, every address of its pod's namespace ("") and its spec's ports.
    address: str = LOOPBACK
    metrics_port: int = field(default_factory=free_port)
    probe_port: int = field(default_factory=free_port)
    _process: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)
    _reader: threading.Thread | None = field(default=None, init=False, repr=False)

    @property
    def metrics_address(self) -> str:
        return f"{self.address}:{self.metrics_port}"

    def start(self, operator: OperatorRelease, pod: dict, token: str) -> None:
        """Run the pod's first container as its spec says (command, args, env), as the pod's
        ServiceAccount, with the probes and metrics where `address` and the ports say."""
        namespace = pod["metadata"]["namespace"]
        container = pod["spec"]["containers"][0]
        root = self.home / "root"
        args = [
            *(container.get("args") or []),
            f"--metrics-bind-address={self.metrics_address}",
            f"--health-probe-bind-address={self.address}:{self.probe_port}",
        ]
        env = {
            "KUBERNETES_SERVICE_HOST": LOOPBACK,
            "KUBERNETES_SERVICE_PORT": self.api_url.rsplit(":", 1)[1],
            **container_env(container, pod),
        }
        binds = [
            Bind(operator.manifests, "/opt/gpu-operator", read_only=True),
            Bind(operator.binary, "/gpu-operator", read_only=True),
        ]
        lay_out(root, self._files(namespace, token))
        command = container_root.command(root, binds, ["/gpu-operator", *args], self.home)
        self._process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=die_with_parent,
            close_fds=True,
            env=env,
        )
        self._reader = threading.Thread(target=self._follow, name="gpu-operator-log", daemon=True)
        self._reader.start()

    def _files(self, namespace: str, token: str) -> dict[str, str]:
        """Its ServiceAccount as a pod's, and the node's os-release where its chart mounts it."""
        return {
            f"{SERVICE_ACCOUNT_DIR}/token": token,
            f"{SERVICE_ACCOUNT_DIR}/ca.crt": self.ca_pem,
            f"{SERVICE_ACCOUNT_DIR}/namespace": namespace,
            "/host-etc/os-release": AMI_OS_RELEASE,
        }

    def _follow(self) -> None:
        process = self._process
        assert process is not None and process.stdout is not None
        for raw in process.stdout:
            self.output(raw.decode("utf-8", "replace").rstrip("\n"))

    def exit_code(self) -> int | None:
        """None while it runs."""
        return None if self._process is None else self._process.poll()

    def wait(self) -> int:
        """Its exit code, once it has ended and its output is all read."""
        process, reader = self._process, self._reader  # `stop` may clear them meanwhile
        assert process is not None and reader is not None, "started first"
        code = process.wait()
        reader.join()
        return code

    def terminate(self) -> None:
        """SIGTERM, as the kubelet stops a container: `wait()` returns once it has ended. Safe
        in a signal handler that interrupted `wait()`: it neither waits nor takes a lock that
        `wait()` holds (`stop` would wait on one for good)."""
        if self._process is not None:
            self._process.terminate()

    def stop(self) -> None:
        """SIGTERM, then killed if it lingers; its output read to the end."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            reap(process, STOP_TIMEOUT)
        if self._reader is not None:
            self._reader.join(STOP_TIMEOUT)
            self._reader = None


def container_env(container: dict, pod: dict) -> dict[str, str]:
    """The container's environment as the kubelet sets it: plain values, and the pod fields
    the chart refers to (`metadata.namespace`, `metadata.name`)."""
    fields = {"metadata.namespace": pod["metadata"]["namespace"],
              "metadata.name": pod["metadata"]["name"]}  # fmt: skip
    env = {}
    for item in container.get("env") or []:
        source = (item.get("valueFrom") or {}).get("fieldRef") or {}
        if "value" in item:
            env[item["name"]] = str(item["value"])
        elif source.get("fieldPath") in fields:
            env[item["name"]] = fields[source["fieldPath"]]
    return env
