"""A ready rehearsal lab for scenario tests: 2 GPU nodes, the GPU Operator ready, lab record saved.

Built the way `lab.up --sim` leaves a lab, but in-process (so a test can also reach the
world's store) and without the background process: the world serves on loopback, so a
subprocess opening the same lab (same state directory) reaches it too.
"""

from __future__ import annotations

import queue
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from labs.aws.cloud import scale_gpu_nodegroup
from labs.backends import REHEARSAL
from labs.kube.gpu import (
    DCGM_EXPORTER_DAEMONSET,
    DEVICE_PLUGIN_DAEMONSET,
    GFD_DAEMONSET,
    daemonset,
    daemonset_counts,
    operand_counts,
    operator_available,
    operator_deployment,
    policy_state,
    schedulable_gpu_nodes,
)
from labs.lab import Lab
from labs.settings import load_settings
from labs.sim.infra import SimInfra
from labs.sim.world import World, start_world

LAB_NAME = "myeks"
GPU_NODES = 2
# A fast world; the engine never gives a check under labs.run.watch.MIN_TIMEOUT seconds.
SCENARIO_SPEED = 600.0
READY_TIMEOUT = 60.0
# Operands the lab's values enable and scenarios take away (a ready lab has them all).
LAB_OPERANDS = {DEVICE_PLUGIN_DAEMONSET, DCGM_EXPORTER_DAEMONSET, GFD_DAEMONSET}


@dataclass
class SimLab:
    lab: Lab
    world: World


def lab_ready(view) -> bool:
    """GPU nodes advertise a GPU each, the device plugin runs on each, every operand is fully
    ready, the operator controller runs and the policy is ready."""
    plugin = daemonset(view)
    policies = view.objects("clusterpolicies")
    return (
        len(schedulable_gpu_nodes(view)) == GPU_NODES
        and plugin is not None
        and daemonset_counts(plugin) == (GPU_NODES,) * 3
        and LAB_OPERANDS <= set(operand_counts(view))
        and all(counts[2] == counts[0] for counts in operand_counts(view).values())
        and operator_available(operator_deployment(view))
        and bool(policies)
        and policy_state(policies[0]) == "ready"
    )


@contextmanager
def ready_sim_lab(state_dir: Path, speed: float = SCENARIO_SPEED) -> Iterator[SimLab]:
    """Start a world under `state_dir`'s lab, install the operator, scale GPUs, wait for ready."""
    settings = load_settings(None, {"lab": LAB_NAME, "state_dir": str(state_dir), "speed": speed})
    lab = Lab.create(settings, REHEARSAL)
    world = start_world(lab.paths.sim_dir, speed=speed, cluster_name=LAB_NAME)
    try:
        variables = settings.stack_variables(operator_enabled=True)
        outputs = SimInfra(world.endpoints).apply(variables)
        lab.update(variables=variables, outputs=outputs)
        shutil.copyfile(world.kubeconfig_path, lab.paths.kubeconfig)
        scale_gpu_nodegroup(
            lab.aws_client("eks"), LAB_NAME, outputs["gpu_node_group_name"], GPU_NODES, GPU_NODES
        )
        wait_ready(lab)
        yield SimLab(lab, world)
    finally:
        world.stop()


def quiet(_line: str) -> None:
    """An `out` for engine calls whose story a test does not read."""


def wait_ready(lab: Lab) -> None:
    with lab.view() as view:
        view.wait_for(lab_ready, READY_TIMEOUT, "rehearsal lab ready with 2 GPUs")


def another_lab_record(ready: SimLab, state_dir: Path) -> SimLab:
    """A fresh lab record (own journal and runs/) for the same running world.

    Saves a world start per test; each test still begins from a ready lab.
    """
    source = ready.lab
    settings = load_settings(
        None, {"lab": source.name, "state_dir": str(state_dir), "speed": source.settings.speed}
    )
    lab = Lab.create(settings, REHEARSAL)
    lab.update(variables=source.variables, outputs=source.outputs)
    lab.paths.sim_dir.mkdir(parents=True)
    for name in ("endpoints.json", "kubeconfig"):
        shutil.copyfile(source.paths.sim_dir / name, lab.paths.sim_dir / name)
    shutil.copyfile(source.paths.kubeconfig, lab.paths.kubeconfig)
    return SimLab(lab, ready.world)


def read_until(stream: Any, marker: str, timeout: float) -> list[str]:
    """Lines of `stream` up to one containing `marker`; fails the test after `timeout`."""
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in stream], daemon=True).start()
    seen: list[str] = []
    while True:
        try:
            line = lines.get(timeout=timeout)
        except queue.Empty:
            pytest.fail(f"no {marker!r} within {timeout} s; output: {''.join(seen)}")
        seen.append(line)
        if marker in line:
            return seen
