"""Running the real `invoke` command line against labs in a temporary state directory."""

from __future__ import annotations

import fcntl
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

from labs.settings import MODELLED_KUBELETS, REAL_KUBELETS

NODE_NAME = re.compile(r"ip-[0-9-]+\.[a-z0-9-]+\.compute\.internal")
ROOT = Path(__file__).resolve().parent.parent  # the repository
FIXTURES = ROOT / "tests" / "fixtures"
INVOKE = str(Path(sys.executable).parent / "invoke")


# A rehearsal's GPU time limit runs on its world's clock: at 300x the default 4 h is 48 wall
# seconds, shorter than a test module holds its lab. A week lasts 34 wall minutes.
TEST_TTL = "168h"
# A user without root, as this machine makes one without adding a user: uid 1000 of a user
# namespace of its own, with no capabilities there or here, owning (so reading) what root owns.
WITHOUT_ROOT = ("unshare", "--user", "--map-user=1000", "--map-group=1000", "--")
# Where test workers (and test runs) on this machine queue for a lab of real kubelets.
REAL_KUBELET_LOCK = Path(tempfile.gettempdir()) / "eks-gpu-lab-tests-real-kubelets.lock"


def invoke_env(state_dir: Path, **extra: str) -> dict[str, str]:
    """The environment of a user whose labs live in `state_dir` (fast rehearsal speed), on the
    modelled kubelet unless `extra` asks for real ones (the default of a person's lab): a lab of
    real kubelets takes a minute to come up and about 50 of this machine's 128 inotify
    instances, so they are the modules that say so (`one_real_kubelet_lab`)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("INVOKE_", "AWS_"))}
    env.update(
        {"INVOKE_LAB_STATE_DIR": str(state_dir), "INVOKE_LAB_SPEED": "300",
         "INVOKE_LAB_TTL": TEST_TTL, "INVOKE_LAB_KUBELETS": MODELLED_KUBELETS, **extra}
    )  # fmt: skip
    return env


def run_invoke(
    *args: str, env: dict[str, str], timeout: float = 180, user: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    """Run `invoke ARGS` from the project root, as a user would (`user`: the command that makes
    this process another user, as `WITHOUT_ROOT`); never raises on exit codes."""
    return subprocess.run(
        [*user, INVOKE, *args], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=timeout,
    )  # fmt: skip


@contextmanager
def cli_lab(
    state_dir: Path,
    lab: str,
    speed: str,
    up_flags: tuple[str, ...] = (),
    user: tuple[str, ...] = (),
    **extra: str,
) -> Iterator[dict[str, str]]:
    """A rehearsal lab that `invoke lab.up --sim [UP_FLAGS]` brought up, as its user's
    environment (with `extra` settings; `user` as for `run_invoke`); destroyed with `lab.down
    --destroy` afterwards, also when lab.up failed (its world would run on, and every later
    test would share the machine with it). The teardown must succeed: it is the cost guard."""
    env = invoke_env(state_dir, INVOKE_LAB_SPEED=speed, **extra)
    real = extra.get("INVOKE_LAB_KUBELETS") == REAL_KUBELETS
    with one_real_kubelet_lab() if real else nullcontext():
        try:
            up = run_invoke(
                "lab.up", "--sim", "--lab", lab, *up_flags, env=env, timeout=600, user=user
            )
            assert up.returncode == 0, up.stdout + up.stderr
            yield env
        finally:
            down = run_invoke("lab.down", "--lab", lab, "--destroy", "--yes", env=env, user=user)
        assert down.returncode == 0, down.stdout + down.stderr


@contextmanager
def one_real_kubelet_lab() -> Iterator[None]:
    """Hold this machine's one place for a lab of real kubelets until the block ends; another
    test worker's waits. Such a lab takes about 50 of the machine's inotify instances (often 128
    per user; each kubelet 6, each API server 6) and much of two cores: two at once, each beside
    the other workers' worlds, doubled a CI run's time. This worker's shared world, idle
    meanwhile, goes first."""
    from scenario_support import release_shared_world

    release_shared_world()
    with REAL_KUBELET_LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or its holder dies
        yield


def desired_by_aws_cli(env: dict[str, str], lab: str) -> int:
    """desiredSize of the lab's GPU node group, read by the venv's aws CLI with `lab.env`'s
    exports on top of `env`, as a person checks the cost guard."""
    from tool_support import require_venv_tool

    from labs.aws import stack

    exports = run_invoke("lab.env", "--lab", lab, env=env)
    assert exports.returncode == 0, exports.stderr
    script = (
        f"{exports.stdout}\n{require_venv_tool('aws')} eks describe-nodegroup --cluster-name "
        f"{lab} --nodegroup-name {stack.gpu_node_group_name(lab)} "
        "--query nodegroup.scalingConfig.desiredSize --output text"
    )
    read = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, timeout=60, env=env
    )
    assert read.returncode == 0, read.stderr
    return int(read.stdout)


def sim_pid(state_dir: Path, lab: str) -> int:
    """The pid of a rehearsal lab's background process, from its endpoints file."""
    endpoints = json.loads((state_dir / lab / "sim" / "endpoints.json").read_text())
    return int(endpoints["pid"])


def pid_alive(pid: int) -> bool:
    """Running: a zombie (exited, its reaper not done yet) does not count."""
    try:
        os.kill(pid, 0)
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (ProcessLookupError, FileNotFoundError):
        return False
    return state != "Z"


def in_order(text: str, steps: list[str]) -> bool:
    """Every step appears in `text`, in this order (a missing one raises ValueError)."""
    positions = [text.index(step) for step in steps]
    return positions == sorted(positions)


def until(check, timeout: float = 60.0, what: str = "condition"):
    """`check()`'s first truthy value, polled until `timeout`; fails naming `what`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        asked = time.monotonic()
        value = check()
        if value:
            return value
        pause(asked)
    raise AssertionError(f"gave up waiting for {what}")


def pause(asked: float, least: float = 0.1) -> None:
    """Between two polls: at least `least` seconds, and as long as the last poll (asked at
    `asked`) took, so a costly check (a whole `invoke` process) keeps a core at most half busy."""
    time.sleep(max(least, time.monotonic() - asked))


def kill_when(args: list[str], env: dict[str, str], ready, what: str) -> int:
    """Start `invoke ARGS` in a session of its own, SIGKILL the whole session once `ready()`
    holds (a crash at that moment), and return its exit status."""
    started = subprocess.Popen(
        [INVOKE, *args], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        until(ready, what=what)
        os.killpg(started.pid, signal.SIGKILL)
        return started.wait(timeout=30)
    finally:
        if started.poll() is None:
            os.killpg(started.pid, signal.SIGKILL)


def healthy_status(env: dict[str, str], lab: str) -> list[str] | None:
    """lab.status's lines, less its clock-driven ones, when the lab is healthy (operator up,
    every DaemonSet ready, policy ready), node names left out and sorted: a scenario may
    replace GPU nodes with new ones."""
    out = run_invoke("lab.status", "--lab", lab, env=env).stdout
    counts = [line.split()[-1].split("/") for line in out.splitlines() if line.startswith("  ")
              and line.split()[-1].count("/") == 1 and line.split()[-1][0].isdigit()]  # fmt: skip
    healthy = (
        "injected faults: none" in out
        and "state ready" in out
        and "spec.replicas 1, 1/1 available" in out
        and bool(counts)
        and all(ready == desired for ready, desired in counts)
    )
    if not healthy:
        return None
    ticking = ("GPU time limit:", "GPU node-minutes since")  # lines that change with the clock
    lines = [line for line in out.splitlines() if not line.startswith(ticking)]
    return sorted(NODE_NAME.sub("NODE", "\n".join(lines)).splitlines())


def whole_lab(env: dict[str, str], lab: str, gpu_nodes: int) -> bool:
    """The lab healthy (`healthy_status`) with `gpu_nodes` GPU nodes Ready, each offering its
    GPU: a fix that restarted the device plugin or replaced a node leaves it settling a while."""
    status = healthy_status(env, lab)
    offering = ["gpu", "Ready", "nvidia.com/gpu", "1"]
    return status is not None and [s.split()[1:] for s in status].count(offering) == gpu_nodes


def node_group_instances(groups: list[dict], nodegroup: str) -> dict[str, str]:
    """The instances of `nodegroup`'s Auto Scaling group (EKS tags it eks:nodegroup-name) with
    their lifecycle states, from describe-auto-scaling-groups' AutoScalingGroups."""
    found = [g for g in groups
             if any(t["Key"] == "eks:nodegroup-name" and t["Value"] == nodegroup
                    for t in g["Tags"])]  # fmt: skip
    assert len(found) == 1, f"one Auto Scaling group for node group {nodegroup}, not {groups}"
    return {i["InstanceId"]: i["LifecycleState"] for i in found[0]["Instances"]}
