"""Start, find and stop the rehearsal backend's background process for one lab.

`lab.up --sim` starts `python -m labs.sim serve` detached from the terminal, so the
rehearsal lab outlives the command like a real cluster does; its endpoints.json
(written by the process once both servers listen) carries its pid, and
`lab.down --destroy` stops exactly that process.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from labs.errors import LabError
from labs.state import read_json

START_TIMEOUT = 60.0
STOP_TIMEOUT = 15.0


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
    return True


def _answers(endpoints: dict[str, Any]) -> bool:
    url = endpoints.get("kube_url")
    if not url:
        return False
    try:
        with urllib.request.urlopen(f"{url}/version", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def running_endpoints(sim_dir: Path) -> dict[str, Any] | None:
    """The endpoints of this lab's rehearsal process if it is alive and answering, else None."""
    endpoints = read_json(sim_dir / "endpoints.json")
    if not endpoints or not _alive(int(endpoints.get("pid", 0))) or not _answers(endpoints):
        return None
    return endpoints


def start(sim_dir: Path, speed: float, cluster_name: str, region: str) -> dict[str, Any]:
    """Start the rehearsal process unless it already runs; return its endpoints."""
    existing = running_endpoints(sim_dir)
    if existing:
        return existing
    sim_dir.mkdir(parents=True, exist_ok=True)
    (sim_dir / "endpoints.json").unlink(missing_ok=True)
    command = [
        sys.executable, "-m", "labs.sim", "serve",
        "--state-dir", str(sim_dir), "--speed", str(speed),
        "--cluster-name", cluster_name, "--region", region,
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
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        endpoints = read_json(sim_dir / "endpoints.json")
        if endpoints and int(endpoints.get("pid", 0)) == process.pid and _answers(endpoints):
            return endpoints
        if process.poll() is not None:
            break
        time.sleep(0.1)
    process.kill()
    tail = (sim_dir / "sim.log").read_text(errors="replace")[-2000:]
    raise SimProcessError(
        f"the rehearsal backend did not come up within {START_TIMEOUT:.0f} s; "
        f"its log ({sim_dir / 'sim.log'}) ends with:\n{tail}"
    )


def _is_rehearsal(pid: int, sim_dir: Path) -> bool:
    """The pid runs `labs.sim serve` for this state dir (not a process that reused the pid)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"labs.sim" in argv and str(sim_dir).encode() in argv


def stop(sim_dir: Path) -> bool:
    """Stop this lab's rehearsal process (SIGTERM, then SIGKILL); True if one was running."""
    endpoints = read_json(sim_dir / "endpoints.json") or {}
    pid = int(endpoints.get("pid", 0))
    if not pid or not _alive(pid) or not _is_rehearsal(pid, sim_dir):
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)
    return True
