"""Helpers for the cost-guard tests: a CLI user on a shared world, and what the backend holds.

Each test takes its own lab record on the module's world (`cli_lab`) and drives it through
`invoke` as a user would; the assertions read the backend itself (moto's node group, the
API server's objects), never the tool's own files.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import pytest
from lab_support import INVOKE, ROOT, invoke_env, run_invoke
from scenario_support import GPU_NODES, SimLab, another_lab_record, wait_ready

import scenarios
from labs.aws import stack
from labs.aws.cloud import scale_gpu_nodegroup
from labs.lab import Lab
from labs.sim.aws.seed import moto_clients


@dataclass
class CliLab:
    """A lab record on the shared world, and the environment of a user whose labs it holds."""

    lab: Lab
    state_dir: Path
    env: dict[str, str]

    def invoke(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        return run_invoke(*args, "--lab", self.lab.name, env=self.env, timeout=timeout)

    @property
    def root(self) -> Path:
        return self.lab.paths.root


def cli_lab(ready: SimLab, tmp_path: Path) -> CliLab:
    """A fresh record (journal, no runs) for the running world, at the world's speed."""
    state_dir = tmp_path / "labs"
    fresh = another_lab_record(ready, state_dir)
    env = invoke_env(state_dir, INVOKE_LAB_SPEED=str(fresh.lab.speed))
    return CliLab(fresh.lab, state_dir, env)


def gpu_scaling(ready: SimLab) -> dict | None:
    """The GPU node group's scalingConfig as moto holds it; None when the group is gone."""
    eks = moto_clients(ready.world.endpoints)("eks")
    name = stack.gpu_node_group_name(ready.lab.cluster_name)
    try:
        group = eks.describe_nodegroup(clusterName=ready.lab.cluster_name, nodegroupName=name)
    except eks.exceptions.ResourceNotFoundException:
        return None
    return group["nodegroup"]["scalingConfig"]


def restore_gpus(ready: SimLab) -> None:
    """Put the world back as the module found it: GPU node group at 2, every GPU ready."""
    eks = moto_clients(ready.world.endpoints)("eks")
    name = stack.gpu_node_group_name(ready.lab.cluster_name)
    scale_gpu_nodegroup(eks, ready.lab.cluster_name, name, GPU_NODES, GPU_NODES)
    wait_ready(ready.lab)


def fault_in(lab: Lab, name: str) -> bool:
    """The scenario's fault is in the cluster now (its own detection, read live)."""
    with lab.view() as view:
        return scenarios.get(name).detect(lab, view)


def _writable(directory: Path) -> bool:
    probe = directory / ".probe"
    try:
        probe.write_text("")
    except OSError:
        return False
    probe.unlink()
    return True


@contextmanager
def unwritable(directory: Path) -> Iterator[None]:
    """`directory` refuses new files: mode 0555, and for root (whom modes do not stop) the
    immutable attribute. Fails the test when neither works here."""
    mode = directory.stat().st_mode
    directory.chmod(0o555)
    chattr = shutil.which("chattr")
    immutable = False
    if _writable(directory) and chattr:
        immutable = subprocess.run([chattr, "+i", str(directory)]).returncode == 0
    try:
        if _writable(directory):
            pytest.fail(f"cannot make {directory} unwritable here (chmod 0555 and chattr +i)")
        yield
    finally:
        if immutable and chattr:
            subprocess.run([chattr, "-i", str(directory)], check=True)
        directory.chmod(mode)


NOSPACE = "No space left on device"


@contextmanager
def small_tmpfs(mount: Path, size: str = "1m") -> Iterator[Path]:
    """A tmpfs of `size` (1 MiB) at `mount` (the suite runs as root), unmounted at the end."""
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)],
                          capture_output=True, text=True)  # fmt: skip
    if made.returncode:
        pytest.fail(f"cannot mount a tmpfs at {mount} (run the suite as root): {made.stderr}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


def fill(directory: Path) -> None:
    """Write until the file system says ENOSPC (a real full disk, not a refused write)."""
    with open(directory / "filler", "wb", buffering=0) as filler:
        try:
            while True:
                filler.write(b"\0" * 4096)
        except OSError as error:
            assert error.strerror == NOSPACE, error


class Lines:
    """Every line of a process's stream, read by one thread: wait for one, or take them all."""

    def __init__(self, stream: IO[str]) -> None:
        self._lines: list[str] = []
        self._changed = threading.Condition()
        self._done = False
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            with self._changed:
                self._lines.append(line)
                self._changed.notify_all()
        with self._changed:
            self._done = True
            self._changed.notify_all()

    def wait_for(self, marker: str, timeout: float = 60) -> None:
        """Until a line contains `marker`; fails the test (with the output) after `timeout`."""
        with self._changed:
            found = self._changed.wait_for(
                lambda: self._done or any(marker in line for line in self._lines), timeout
            )
            seen = any(marker in line for line in self._lines)
        if not (found and seen):
            pytest.fail(f"no {marker!r} within {timeout} s; output:\n{self.text()}")

    def text(self, timeout: float = 60) -> str:
        """Everything, once the stream has ended."""
        with self._changed:
            self._changed.wait_for(lambda: self._done, timeout)
            return "".join(self._lines)


@dataclass
class Background:
    """A command running in the background, both of its streams collected."""

    process: subprocess.Popen[str]
    out: Lines
    err: Lines

    @classmethod
    def start(cls, user: CliLab, *args: str) -> Background:
        """`invoke ARGS --lab L`, its output unbuffered as on a terminal."""
        process = subprocess.Popen(
            [INVOKE, *args, "--lab", user.lab.name], cwd=ROOT, text=True,
            env={**user.env, "PYTHONUNBUFFERED": "1"},
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        assert process.stdout is not None and process.stderr is not None
        return cls(process, Lines(process.stdout), Lines(process.stderr))

    def signal(self, *signums: int) -> None:
        for signum in signums:
            self.process.send_signal(signum)

    def finish(self, timeout: float = 180) -> tuple[int, str, str]:
        """Wait for it to end: (exit code, stdout, stderr)."""
        code = self.process.wait(timeout=timeout)
        return code, self.out.text(), self.err.text()

    def stop(self) -> None:
        """Kill it if it still runs (a test's clean-up)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)
            self.process.kill()
            self.process.wait(timeout=30)
