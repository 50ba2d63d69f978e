"""Helpers for the rehearsal-world tests: bounded waits, the lab's variables, the probe pod."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kubernetes import client, config
from lab_support import pause
from scenario_support import own_world

from labs.settings import LabSettings
from labs.sim.world import World

T = TypeVar("T")
# Tests are not about timing: a fast world, and generous bounds on every wait.
TEST_SPEED = 600.0
WAIT_SECONDS = 120.0
PROBE_COMMAND = (
    "nvidia-smi -L && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv"
)


def wait_for(check: Callable[[], T], timeout: float = WAIT_SECONDS, what: str = "") -> T:
    """Poll `check` until it returns something truthy; fail the test after `timeout`. A check
    never runs more than half the time (see `pause`): the world it reads shares the cores."""
    deadline = time.monotonic() + timeout
    while True:
        asked = time.monotonic()
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"gave up after {timeout}s waiting for {what or check}: last {value!r}")
        pause(asked)


def lab_variables(**overrides: Any) -> dict[str, Any]:
    """The orchestrator's full variable set with the stack's defaults (operator off)."""
    return {**LabSettings().stack_variables(operator_enabled=False), **overrides}


def probe_pod(name: str = "gpu-probe") -> dict:
    """The reference scenario's gpu-probe: one GPU, tolerates the GPU taint, runs nvidia-smi."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "gpu-probe"}},
        "spec": {
            "restartPolicy": "Never",
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
            ],
            "containers": [
                {
                    "name": "cuda",
                    "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
                    "command": ["sh", "-c", PROBE_COMMAND],
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
            ],
        },
    }


def running_world(tmp_path: Path) -> Iterator[World]:
    """For a fixture: a fresh world at test speed, stopped (threads joined) afterwards."""
    running = own_world(tmp_path / "sim", speed=TEST_SPEED)
    try:
        yield running
    finally:
        running.stop()


def kube(world: World) -> client.ApiClient:
    """An official client of the world's API server, from the world's own kubeconfig."""
    return config.new_client_from_config(config_file=str(world.kubeconfig_path))
