"""The real control plane for tests: a plane of a test's own, with node heartbeats; kubectl on it;
the rehearsal processes still running under a directory; the verbs its audit log records."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from kubernetes import config
from kubernetes.client import CoordinationV1Api
from tool_support import require_tool

from labs.sim.controlplane.build import (
    KUBE_STATE_METRICS,
    METRICS_SERVER,
    NODE_ENDPOINT,
    PROGRAMS,
    PROMETHEUS,
)
from labs.sim.controlplane.run import ControlPlane
from labs.sim.controlplane.webhook import Access


def processes(matching: Callable[[list[str]], bool]) -> list[str]:
    """The processes whose argv `matching` accepts, as `pid N: <command line>`."""
    return [_described(pid, argv) for pid, argv in _command_lines() if matching(argv)]


def pids(matching: Callable[[list[str]], bool]) -> list[int]:
    """The pids of the processes whose argv `matching` accepts."""
    return [pid for pid, argv in _command_lines() if matching(argv)]


def _described(pid: int, argv: list[str]) -> str:
    return f"pid {pid}: {' '.join(argv)}"


def _command_lines() -> Iterator[tuple[int, list[str]]]:
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        yield int(entry.name), argv


OUR_PROGRAMS = (*PROGRAMS, NODE_ENDPOINT, METRICS_SERVER, KUBE_STATE_METRICS, PROMETHEUS)


def rehearsals_under(root: Path) -> list[str]:
    """`labs.sim serve`, control-plane, node-endpoint, metrics-server, kube-state-metrics and
    Prometheus processes whose files lie under `root`, and every process whose root directory
    does (a container's, Prometheus chrooted among them), as their command lines."""

    def rehearsal(argv: list[str]) -> bool:
        serves = "labs.sim" in argv and "serve" in argv
        component = Path(argv[0]).name in OUR_PROGRAMS
        return (serves or component) and any(str(root) in arg for arg in argv)

    return [
        _described(pid, argv)
        for pid, argv in _command_lines()
        if rehearsal(argv) or _root_of(pid).startswith(f"{root}/")
    ]


def _root_of(pid: int) -> str:
    """The process's root directory as this process sees it ("" once it has ended)."""
    try:
        return os.readlink(f"/proc/{pid}/root")
    except OSError:
        return ""


# The verbs of a reader (pods/log is a get of the log subresource).
READS = {"get", "list", "watch"}
# Who the plane's admin kubeconfig is (its client certificate's common name).
ADMIN_CERTIFICATE = "kubernetes-admin"


def audited_verbs(audit_log: Path, since: int, user: str) -> set[str]:
    """The verbs the API server's audit log records for `user` after byte `since`."""
    with audit_log.open() as log:
        log.seek(since)
        entries = [json.loads(line) for line in log if line.strip()]
    return {e["verb"] for e in entries if e["user"]["username"] == user}


# How often the copied nodes renew their Leases: well inside the controller manager's grace.
HEARTBEAT_SECONDS = 3.0
NODE_LEASES = "kube-node-lease"


def progress(line: str) -> None:
    """Build progress reaches the terminal even under pytest's capture."""
    print(line, file=sys.__stderr__, flush=True)


@contextmanager
def running_control_plane(home: Path, access: Access | None = None) -> Iterator[ControlPlane]:
    plane = ControlPlane(home, access)
    try:
        plane.start(progress)
        yield plane
    finally:
        plane.stop()


def kubectl_command(kubeconfig: Path, cache: Path) -> list[str]:
    """kubectl on `kubeconfig`, its discovery cached in `cache`."""
    return [require_tool("kubectl"), "--kubeconfig", str(kubeconfig), "--cache-dir", str(cache)]


def kubectl_on(
    kubeconfig: Path, cache: Path, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess:
    command = kubectl_command(kubeconfig, cache)
    return subprocess.run(
        [*command, *args], input=stdin, capture_output=True, text=True, timeout=60, check=False
    )


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Heartbeats:
    """Keeps copied nodes' Leases fresh, as their kubelets would, until stopped."""

    def __init__(self, kubeconfig: Path, names: list[str]) -> None:
        self._leases = CoordinationV1Api(config.new_client_from_config(str(kubeconfig)))
        self._names = names
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Heartbeats:
        for name in self._names:
            lease = {
                "metadata": {"name": name},
                "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": _now()},
            }
            self._leases.create_namespaced_lease(NODE_LEASES, lease)
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(HEARTBEAT_SECONDS):
            for name in self._names:
                self._leases.patch_namespaced_lease(
                    name, NODE_LEASES, {"spec": {"renewTime": _now()}}
                )
