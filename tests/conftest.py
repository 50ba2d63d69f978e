"""Shared fixtures: a ready rehearsal world handed from module to module, and an API server held
still per session."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from controlplane_support import rehearsals_under
from scenario_support import (
    SimLab,
    another_lab_record,
    release_shared_world,
    restore_healthy,
    revert_what_is_left,
    shared_ready_world,
)
from still_support import StillPlane, held_still


@pytest.fixture(scope="session", autouse=True)
def no_rehearsal_left_behind(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """After the whole session, no test may have left a rehearsal backend running."""
    yield
    left = rehearsals_under(tmp_path_factory.getbasetemp())
    if left:
        pytest.fail("rehearsal backends left running by the tests:\n" + "\n".join(left))


@pytest.fixture(scope="module")
def world_lab(tmp_path_factory: pytest.TempPathFactory, worlds_stop: None) -> SimLab:
    """A ready rehearsal world for the module, on a lab record of its own (each test takes
    another); the process's world of the module before when it is young and ready."""
    return shared_ready_world(tmp_path_factory.mktemp("world"))


@pytest.fixture(scope="session")
def worlds_stop() -> Iterator[None]:
    """The shared world stops with the test session (that is, the worker)."""
    yield
    release_shared_world()


@pytest.fixture
def sim_lab(world_lab: SimLab, tmp_path: Path) -> Iterator[SimLab]:
    """A fresh lab record (empty journal, no runs) on the module's shared world, made healthy
    first; what the test left injected is reverted after it."""
    fresh = another_lab_record(world_lab, tmp_path / "state")
    restore_healthy(fresh)
    yield fresh
    revert_what_is_left(fresh.lab)


@pytest.fixture(scope="session")
def still_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StillPlane]:
    """One held-still plane (etcd and kube-apiserver only) per test session, that is per worker."""
    with held_still(tmp_path_factory.mktemp("still")) as plane:
        yield plane


@pytest.fixture
def still(still_plane: StillPlane) -> Iterator[StillPlane]:
    """The session's held-still plane; what the test put in is removed after it."""
    yield still_plane
    still_plane.reset()


@pytest.fixture
def kube_client(still: StillPlane):
    """An official `kubernetes` ApiClient configured from the held-still plane's kubeconfig."""
    client = still.client()
    yield client
    client.close()
