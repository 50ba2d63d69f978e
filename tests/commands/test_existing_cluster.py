"""A cluster the tool did not create, reached through a plain kubeconfig: read, never changed.

A held-still API server holding a healthy GPU cluster (`doctor_support`) stands in for an
engineer's own. There is no lab state at all:
`lab.status --kubeconfig F --context C` must read it, and every mutating task must
refuse with the reason, change nothing in the cluster and write nothing under the
state directory.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from controlplane_support import ADMIN_CERTIFICATE, READS, audited_verbs
from doctor_support import StaticCluster
from lab_support import invoke_env, run_invoke
from still_support import StillPlane


@pytest.fixture(scope="module")
def gpu_cluster(still_plane: StillPlane, tmp_path_factory: pytest.TempPathFactory):
    """The held-still plane holding a healthy GPU cluster, once for the module: every test here
    only reads it (and proves so)."""
    StaticCluster(still_plane, tmp_path_factory.mktemp("unused")).build_healthy()
    yield still_plane
    still_plane.reset()


@pytest.fixture
def target(gpu_cluster: StillPlane, tmp_path: Path):
    """The GPU cluster, a user's environment, and an unused state dir."""
    state_dir = tmp_path / "labs"
    return gpu_cluster, invoke_env(state_dir), state_dir


def reach(still, *args: str) -> list[str]:
    return [*args, "--kubeconfig", str(still.kubeconfig), "--context", still.context]


def test_status_reads_a_cluster_that_is_not_a_lab(target):
    still, env, state_dir = target

    result = run_invoke(*reach(still, "lab.status"), env=env)

    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert f"lab {still.context}  backend existing (existing cluster, read-only" in out
    gpu_lines = [line for line in out.splitlines() if " gpu " in line and "Ready" in line]
    assert len(gpu_lines) == 2 and all(line.endswith("nvidia.com/gpu 1") for line in gpu_lines)
    assert "nvidia-device-plugin-daemonset" in out and "2/2" in out
    assert "ClusterPolicy cluster-policy: state ready" in out
    assert "devicePlugin=on" in out
    assert "running cost: not a lab" in out
    assert "injected faults" not in out and "node groups" not in out
    assert not state_dir.exists()


@pytest.mark.parametrize(
    "command",
    [
        ("lab.up",),
        ("lab.up", "--dry-run"),
        ("lab.scale", "0"),
        ("lab.down",),
        ("lab.down", "--destroy", "--yes"),
        ("scenario.run", "device-plugin-off"),
        ("scenario.inject", "device-plugin-off"),
        ("scenario.revert", "--all"),
        ("scenario.revert", "--name", "device-plugin-off"),
    ],
    ids=" ".join,
)
def test_every_mutating_task_refuses_and_changes_nothing(target, command):
    still, env, state_dir = target
    since = still.audit_log.stat().st_size

    result = run_invoke(*reach(still, *command), env=env)

    assert result.returncode == 1, result.stdout + result.stderr
    assert "refusing" in result.stderr and "existing cluster" in result.stderr
    assert f"{still.context} in kubeconfig {still.kubeconfig}" in result.stderr
    assert "is only ever read" in result.stderr and "Traceback" not in result.stderr
    assert audited_verbs(still.audit_log, since, ADMIN_CERTIFICATE) <= READS
    assert not state_dir.exists()


def test_env_points_kubectl_at_the_given_kubeconfig(target):
    still, env, state_dir = target

    result = run_invoke(*reach(still, "lab.env"), env=env)

    assert result.returncode == 0, result.stderr
    assert f"export KUBECONFIG={still.kubeconfig}" in result.stdout
    assert not state_dir.exists()


def test_an_unknown_context_is_named_with_the_command_that_lists_them(target):
    still, env, _ = target

    args = ["lab.status", "--kubeconfig", str(still.kubeconfig), "--context", "nope"]
    result = run_invoke(*args, env=env)

    assert result.returncode == 1
    assert "cannot read nope in kubeconfig" in result.stderr
    assert "kubectl config get-contexts --kubeconfig" in result.stderr


def test_a_context_without_a_kubeconfig_is_refused(target):
    still, env, _ = target

    result = run_invoke("lab.status", "--context", still.context, env=env)

    assert result.returncode == 1
    assert "--context" in result.stderr and "pass --kubeconfig FILE too" in result.stderr


def test_a_missing_kubeconfig_file_is_named(target, tmp_path: Path):
    _, env, _ = target
    missing = tmp_path / "nowhere.yaml"

    result = run_invoke("lab.status", "--kubeconfig", str(missing), env=env)

    assert result.returncode == 1
    assert str(missing) in result.stderr and "is not a readable file" in result.stderr
