"""Start, find and stop the rehearsal backend's background process for one lab.

`lab.up --sim` starts `python -m labs.sim serve` detached from the terminal, so the
rehearsal lab outlives the command like a real cluster does; its endpoints.json
(written by the process once both servers listen) carries its pid, and
`lab.down --destroy` stops exactly that process.
"""

from __future__ import annotations

import os
import shutil
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from labs.errors import LabError
from labs.sim.logs import log_tail
from labs.sim.node.node_log import ended_kubelets
from labs.state import DamagedFile, load_json

ENDPOINTS = "endpoints.json"
# Each node's kubelet and runtime, and the catalogue of images their registries serve.
NODES_DIR = "nodes"

# A start takes 10-15 s on 2 idle cores; on a busy machine the process can spend a minute just
# importing before it writes a line (seen with a Go build beside it), so death is caught at once
# by its exit code and only a hang waits this long.
START_TIMEOUT = 120.0
ANSWER_SECONDS = 2.0
# /readyz asks etcd; kube-apiserver gives its etcd check 2 s (--etcd-healthcheck-timeout)
READY_SECONDS = 5.0
# etcd allocates its write-ahead log in 64 MiB segments: less free than that and it cannot write
LOW_DISK_BYTES = 64 * 2**20
STOP_TIMEOUT = 15.0
KILL_TIMEOUT = 10.0


class SimProcessError(LabError):
    """The rehearsal process could not be started or stopped; the message says why."""


def _alive(pid: int) -> bool:
    try:
        os.waitpid(pid, os.WNOHANG)  # reap it if it is our own exited child
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not _zombie(pid)


def _zombie(pid: int) -> bool:
    """Exited, waiting for a parent that is not us to reap it (an orphan's reaper may be slow)."""
    return _state(pid) == "Z"


def _state(pid: int) -> str | None:
    """The process's state letter from /proc (R, S, T, Z, ...); None when it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def _argv(pid: int) -> list[bytes]:
    """The process's command line from /proc; [] when it is gone."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return []


def _answers(endpoints: dict[str, Any]) -> bool:
    return _silence(endpoints) is None


def _silence(endpoints: dict[str, Any]) -> str | None:
    """Why the process's own server (its AWS endpoint) does not answer within ANSWER_SECONDS;
    None if it does. Its Kubernetes side is `ailing`'s: a dead API server or etcd must not hide
    the node groups, which the cost guard scales through AWS alone."""
    url, ca = endpoints.get("kube_url"), endpoints.get("kube_ca")
    aws = endpoints.get("aws_endpoint_url")
    if not url or not ca or not aws:
        return "it names no kube_url, kube_ca or aws_endpoint_url"
    try:
        with urllib.request.urlopen(aws, timeout=ANSWER_SECONDS):
            pass
    except urllib.error.HTTPError:
        pass  # an answer, even a refusal
    except (OSError, ValueError) as error:
        return f"its AWS endpoint {aws} did not answer within {ANSWER_SECONDS:g} s ({error})"
    return None


def ailing(sim_dir: Path) -> list[str]:
    """What keeps a running world's Kubernetes side from moving, each naming its process and
    log, port or file: a program of the world that died or was stopped, an API server whose
    /readyz fails (etcd), a disk too full for etcd, a node's kubelet that ended. [] when all is
    well or no world runs."""
    endpoints = recorded_endpoints(sim_dir)
    if not endpoints.get("pid") or not _alive(int(endpoints["pid"])):
        return []
    found = [
        problem
        for name, entry in sorted((endpoints.get("processes") or {}).items())
        if (problem := _process_problem(name, entry))
    ]
    if not found and (not_ready := _not_ready(endpoints)):
        found.append(not_ready)
    if full := disk_full(sim_dir):
        found.append(full)
    return found + ended_kubelets(sim_dir / NODES_DIR)


def disk_full(sim_dir: Path) -> str | None:
    """The disk under the world's files has no room for etcd's next write, said with what to
    do; None when it has."""
    free = shutil.disk_usage(sim_dir).free if sim_dir.is_dir() else None
    if free is None or free >= LOW_DISK_BYTES:
        return None
    return (
        f"the disk under {sim_dir} has {free / 2**20:.0f} MiB free, less than the "
        f"{LOW_DISK_BYTES // 2**20} MiB etcd needs to write: free space there"
    )


def _process_problem(name: str, entry: dict[str, Any]) -> str | None:
    """`etcd (pid 123) is not running ...`, `... is stopped ...`, or None when it runs."""
    pid, log = int(entry.get("pid", 0)), entry.get("log", "?")
    argv0, state = (_argv(pid) or [b""])[0].decode(errors="replace"), _state(pid)
    if Path(argv0).name != entry.get("program") or state in ("Z", "X", None):
        return f"{name} (pid {pid}) is not running; its log is {log}"
    if state in ("T", "t"):
        return f"{name} (pid {pid}) is stopped (SIGSTOP); `kill -CONT {pid}` resumes it"
    return None


def _not_ready(endpoints: dict[str, Any]) -> str | None:
    """The API server's own readiness checks (etcd among them), as `kubectl get --raw
    /readyz?verbose` shows them; None when ready."""
    url = endpoints["kube_url"]
    try:
        context = ssl.create_default_context(cadata=endpoints["kube_ca"])
        with urllib.request.urlopen(f"{url}/readyz", timeout=READY_SECONDS, context=context):
            return None
    except urllib.error.HTTPError as error:
        failed = [
            line.strip()
            for line in error.read().decode(errors="replace").splitlines()
            if line.startswith("[-]")
        ]
        return f"kube-apiserver at {url} is not ready: {', '.join(failed) or error.reason}"
    except (OSError, ssl.SSLError, ValueError) as error:
        return f"kube-apiserver at {url} did not answer /readyz in {READY_SECONDS:g} s ({error})"


def why_silent(sim_dir: Path) -> str | None:
    """Why this lab's rehearsal process cannot be read now, naming the file or endpoint and
    the process; None when it answers."""
    path = sim_dir / ENDPOINTS
    try:
        endpoints = load_json(path, _endpoints_problem)
    except DamagedFile as error:
        return f"its endpoints file {error}"
    if not endpoints:
        return f"its endpoints file {path} is missing"
    pid = int(endpoints.get("pid", 0))
    if not _alive(pid):
        return f"its process (pid {pid}, from {path}) is not running"
    if silence := _silence(endpoints):
        return f"{silence}; endpoints from {path}, process {pid}"
    return None


def _endpoints_problem(endpoints: Any) -> str | None:
    if not isinstance(endpoints, dict) or not isinstance(endpoints.get("pid", 0), int):
        return "not the endpoints object labs.sim writes"
    return None


def recorded_endpoints(sim_dir: Path) -> dict[str, Any]:
    """What the process last wrote (its pid while it runs); {} when nothing usable is there."""
    try:
        return load_json(sim_dir / ENDPOINTS, _endpoints_problem) or {}
    except DamagedFile:
        return {}


def running_endpoints(sim_dir: Path) -> dict[str, Any] | None:
    """The endpoints of this lab's rehearsal process if it is alive and answering, else None."""
    return recorded_endpoints(sim_dir) if why_silent(sim_dir) is None else None


def start(
    sim_dir: Path, speed: float, cluster_name: str, region: str, kubelets: str
) -> dict[str, Any]:
    """Start the rehearsal process unless it already runs; return its endpoints. `kubelets`:
    who runs its nodes (`labs.settings.KUBELETS`)."""
    existing = running_endpoints(sim_dir)
    if existing:
        return existing
    sim_dir.mkdir(parents=True, exist_ok=True)
    sim_dir.chmod(0o700)  # its files carry the world's keys and token
    (sim_dir / ENDPOINTS).unlink(missing_ok=True)
    command = [
        sys.executable, "-m", "labs.sim", "serve",
        "--state-dir", str(sim_dir), "--speed", str(speed),
        "--cluster-name", cluster_name, "--region", region, "--kubelets", kubelets,
    ]  # fmt: skip
    with open(sim_dir / "sim.log", "ab") as log:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=Path(__file__).resolve().parents[2],
        )
    started = time.monotonic()
    while (waited := time.monotonic() - started) < START_TIMEOUT:
        endpoints = recorded_endpoints(sim_dir)
        if endpoints.get("pid") == process.pid and _answers(endpoints):
            return endpoints
        if (code := process.poll()) is not None:
            what = f"exited with code {code} after {waited:.1f} s"
            break
        time.sleep(0.1)
    else:
        what = f"did not come up within {START_TIMEOUT:.0f} s"
        process.kill()
        process.wait()
    tail = log_tail(sim_dir / "sim.log", 2000)
    raise SimProcessError(
        f"the rehearsal backend {what}; its log ({sim_dir / 'sim.log'}) ends with:\n{tail}"
    )


def _is_rehearsal(pid: int, sim_dir: Path) -> bool:
    """The pid runs `labs.sim serve` for this state dir (not a process that reused the pid)."""
    argv = _argv(pid)
    return b"labs.sim" in argv and str(sim_dir).encode() in argv


def processes(sim_dir: Path) -> list[int]:
    """Every live `labs.sim serve` of this state dir: the recorded one, and any whose lab.up
    was killed before its endpoints file said who it is."""
    candidates = {int(recorded_endpoints(sim_dir).get("pid", 0))}
    candidates |= {int(entry.name) for entry in Path("/proc").iterdir() if entry.name.isdigit()}
    return sorted(pid for pid in candidates if pid and _is_rehearsal(pid, sim_dir) and _alive(pid))


def stop(sim_dir: Path) -> list[int]:
    """Stop this lab's rehearsal processes (SIGTERM, then SIGKILL); the pids that were running."""
    pids = processes(sim_dir)
    _signal(pids, signal.SIGTERM)
    _signal(pids, signal.SIGCONT)  # a stopped (SIGSTOP) process handles SIGTERM only now
    if not _gone(pids, STOP_TIMEOUT):
        _signal([pid for pid in pids if _alive(pid)], signal.SIGKILL)
        # SIGKILL cannot be refused, but a process of many threads takes a moment to exit:
        # "stopped" is said only once it has.
        _gone(pids, KILL_TIMEOUT)
    return pids


def _signal(pids: list[int], signum: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:  # it ended meanwhile
            pass


def _gone(pids: list[int], timeout: float) -> bool:
    """Wait up to `timeout` seconds for all of `pids` to end; whether they did."""
    deadline = time.monotonic() + timeout
    while any(_alive(pid) for pid in pids):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True
