"""Starting and stopping a lab's background rehearsal process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from labs.sim import process
from labs.state import atomic_write_json


def test_stop_never_signals_a_process_that_is_not_this_labs_rehearsal(tmp_path: Path):
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        atomic_write_json(tmp_path / "endpoints.json", {"pid": stranger.pid})
        assert process.stop(tmp_path) == []
        assert stranger.poll() is None, "lab.down killed a process that reused the pid"
    finally:
        stranger.kill()
        stranger.wait()


def test_start_reuses_a_running_process_and_stop_ends_it(tmp_path: Path):
    sim_dir = tmp_path / "sim"
    first = process.start(sim_dir, speed=300, cluster_name="p1", region="ap-northeast-2")
    try:
        again = process.start(sim_dir, speed=300, cluster_name="p1", region="ap-northeast-2")
        assert again["pid"] == first["pid"]
        assert process.running_endpoints(sim_dir) is not None
    finally:
        assert process.stop(sim_dir) == [first["pid"]]
    assert process.running_endpoints(sim_dir) is None
    assert process.stop(sim_dir) == []
