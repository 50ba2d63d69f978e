"""The rehearsal's own failure modes (issue 42): a full disk under the lab's state directory, a
killed etcd, kube-apiserver or node endpoint of a lab with 2 GPU nodes. lab.status names the
disk or the process and its log, lab.down still brings the
GPU node group to 0 through the world's AWS side (read back with the aws CLI), lab.up restarts
the world, no command ends in a traceback, and a backend whose files were deleted is still
found and stopped. One real `labs.sim serve` process, as a user has it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path

from guard_support import fill, small_tmpfs
from lab_support import desired_by_aws_cli, invoke_env, pid_alive, run_invoke

from labs.sim import process

LAB = "f42"


def component(sim_dir: Path, name: str) -> dict:
    """A program of the running world as its endpoints file records it (pid, program, log)."""
    endpoints = json.loads((sim_dir / process.ENDPOINTS).read_text())
    return endpoints["processes"][name]


def kill(sim_dir: Path, name: str) -> dict:
    """kill -9 one program of the world; what its endpoints file said of it."""
    program = component(sim_dir, name)
    os.kill(program["pid"], signal.SIGKILL)
    return program


def down_at_zero(env: dict[str, str]):
    """lab.down on a lab whose Kubernetes side is broken: exit 1 in a sentence, and the GPU
    node group at 0 as the aws CLI reads it."""
    down = run_invoke("lab.down", "--lab", LAB, env=env, timeout=180)
    no_traceback(down)
    assert down.returncode == 1, down.stdout + down.stderr
    assert desired_by_aws_cli(env, LAB) == 0
    return down


def world_programs(sim_dir: Path) -> list[dict]:
    return list(json.loads((sim_dir / process.ENDPOINTS).read_text())["processes"].values())


def runs(pid: int, program: str) -> bool:
    """The pid still runs `program` (not a process that reused the pid since)."""
    try:
        argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
    except OSError:
        return False
    return Path(argv0).name == program


def no_traceback(*results) -> None:
    for result in results:
        assert "Traceback" not in result.stdout + result.stderr, result.stdout + result.stderr


def test_a_full_disk_dead_etcd_api_server_or_node_endpoint_never_keeps_gpus(tmp_path: Path):
    """One lab, its state directory on a real 400 MiB file system, through each failure in
    turn; after each, lab.up brings it back."""
    with small_tmpfs(tmp_path / "disk", size="400m") as disk:
        _through_each_failure(disk)


def _through_each_failure(disk: Path) -> None:
    env = invoke_env(disk)
    sim_dir = disk / LAB / "sim"
    up = run_invoke("lab.up", "--sim", "--lab", LAB, "--gpus", "2", env=env, timeout=300)
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        # the disk full while a fault is in: the disk named, desiredSize 0 all the same
        inject = run_invoke("scenario.inject", "device-plugin-off", "--lab", LAB, env=env)
        assert inject.returncode == 0, inject.stdout + inject.stderr
        fill(disk)
        status = run_invoke("lab.status", "--lab", LAB, env=env, timeout=120)
        no_traceback(status)
        assert f"the disk under {sim_dir} has 0 MiB free" in status.stdout
        down = down_at_zero(env)
        assert f"could not write {disk / LAB / 'state.json'}: No space left" in down.stderr

        # room again: lab.up brings the lab back, and no fault is left in it
        (disk / "filler").unlink()
        up = run_invoke("lab.up", "--lab", LAB, "--gpus", "2", env=env, timeout=300)
        assert up.returncode == 0, up.stdout + up.stderr
        revert = run_invoke("scenario.revert", "--all", "--lab", LAB, env=env)
        assert revert.returncode == 0, revert.stdout + revert.stderr
        status = run_invoke("lab.status", "--lab", LAB, env=env, timeout=120)
        assert "injected faults: none" in status.stdout, status.stdout
        inject = run_invoke("scenario.inject", "device-plugin-off", "--lab", LAB, env=env)
        assert inject.returncode == 0, inject.stdout + inject.stderr

        # a killed etcd: named by status; lab.down sets desiredSize 0 and says what it could not
        etcd = kill(sim_dir, "etcd")
        status = run_invoke("lab.status", "--lab", LAB, env=env, timeout=120)
        no_traceback(status)
        assert f"etcd (pid {etcd['pid']}) is not running; its log is {etcd['log']}" in status.stdout
        down = down_at_zero(env)
        assert "these faults could not be reverted: device-plugin-off" in down.stderr
        assert f"etcd (pid {etcd['pid']}) is not running" in down.stderr

        # lab.up restarts the world; the fault's world is gone, so nothing is left to revert
        up = run_invoke("lab.up", "--lab", LAB, "--gpus", "2", env=env, timeout=300)
        assert up.returncode == 0, up.stdout + up.stderr
        assert "the rehearsal backend cannot move (etcd" in up.stdout
        revert = run_invoke("scenario.revert", "--all", "--lab", LAB, env=env)
        assert revert.returncode == 0 and "nothing was injected" in revert.stdout, revert.stdout

        # a killed kube-apiserver: the same, the refused connection named
        apiserver = kill(sim_dir, "kube-apiserver")
        down = down_at_zero(env)
        assert "connection refused: nothing listens there" in down.stderr
        assert f"kube-apiserver (pid {apiserver['pid']}) is not running" in down.stderr

        # a killed node endpoint: the scenario's baseline probe ends in a sentence naming it
        up = run_invoke("lab.up", "--lab", LAB, "--gpus", "2", env=env, timeout=300)
        assert up.returncode == 0, up.stdout + up.stderr
        endpoint = kill(sim_dir, "node-endpoint")
        inject = run_invoke("scenario.inject", "device-plugin-off", "--lab", LAB, env=env)
        no_traceback(inject)
        assert inject.returncode == 1
        assert "answered 500 Internal Server Error to GET" in inject.stderr
        status = run_invoke("lab.status", "--lab", LAB, env=env, timeout=120)
        assert f"node-endpoint (pid {endpoint['pid']}) is not running" in status.stdout

        # its files deleted under it: lab.down still finds the backend by its command line (the
        # world and its programs are frozen first, so none of their writes, such as a log line of
        # the API server, re-creates a directory meanwhile)
        [world] = process.processes(sim_dir)
        programs = world_programs(sim_dir)
        for pid in [world, *(e["pid"] for e in programs if runs(e["pid"], e["program"]))]:
            os.kill(pid, signal.SIGSTOP)
        shutil.rmtree(disk / LAB)
        down = run_invoke("lab.down", "--lab", LAB, env=env)
        no_traceback(down)
        assert down.returncode == 0, down.stdout + down.stderr
        assert f"(found by their command line): stopped {world}" in down.stdout
        assert process.processes(sim_dir) == []
        live = [e for e in programs if pid_alive(e["pid"]) and runs(e["pid"], e["program"])]
        assert live == [], "a program of the lab's world outlived lab.down"
    finally:
        run_invoke("lab.down", "--lab", LAB, "--destroy", "--yes", env=env)
        for pid in process.processes(sim_dir):
            os.kill(pid, signal.SIGKILL)
