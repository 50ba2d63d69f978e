"""A real program's root (`labs.sim.node.container_root`): a bind nested in another's needs its
mount point made in that one's files, which must be the node's own, never the host's."""

from __future__ import annotations

from pathlib import Path

import pytest

from labs.sim.controlplane.run import ControlPlaneError
from labs.sim.node.container_root import Bind, command


def test_a_nested_mount_point_is_made_only_in_the_nodes_own_files(tmp_path: Path) -> None:
    node, host = tmp_path / "node", tmp_path / "host"
    (node / "features.d").mkdir(parents=True)
    (host / "conf").mkdir(parents=True)
    nested = Bind(node / "features.d", "/etc/nfd/features.d")
    # the ConfigMap's directory is the node's: its mount point may be made there
    made = command(tmp_path / "root", [nested, Bind(node, "/etc/nfd")], ["/prog"], node)
    script = made[made.index("-c") + 1]
    assert script.index("/etc/nfd\n") < script.index("/etc/nfd/features.d\n")  # parent first
    # a host directory lacking it is refused, before anything is mounted
    with pytest.raises(ControlPlaneError) as refused:
        command(tmp_path / "root", [nested, Bind(host / "conf", "/etc/nfd")], ["/prog"], node)
    assert "/etc/nfd/features.d" in str(refused.value) and "not the node's" in str(refused.value)
    assert list((host / "conf").iterdir()) == []
