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
    first = process.start(
        sim_dir, speed=300, cluster_name="p1", region="ap-northeast-2", kubelets="modelled"
    )
    try:
        again = process.start(
            sim_dir, speed=300, cluster_name="p1", region="ap-northeast-2", kubelets="modelled"
        )
        assert again["pid"] == first["pid"]
        assert process.running_endpoints(sim_dir) is not None
    finally:
        assert process.stop(sim_dir) == [first["pid"]]
    assert process.running_endpoints(sim_dir) is None
    assert process.stop(sim_dir) == []


def test_a_rehearsal_that_ignores_sigterm_is_killed_and_gone_when_stop_returns(
    tmp_path: Path, monkeypatch
):
    """lab.down says "Stopped its backend process(es)" once `stop` returns: a backend that
    does not end on SIGTERM within the stop timeout is killed, and gone by then."""
    code = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('ready', flush=True); time.sleep(60)"
    )
    argv = [sys.executable, "-c", code, "labs.sim", "serve", "--state-dir", str(tmp_path)]
    stubborn = subprocess.Popen(argv, stdout=subprocess.PIPE)
    try:
        assert stubborn.stdout is not None and stubborn.stdout.readline() == b"ready\n"
        monkeypatch.setattr(process, "STOP_TIMEOUT", 0.5)
        assert process.processes(tmp_path) == [stubborn.pid]
        assert process.stop(tmp_path) == [stubborn.pid]
        assert process.processes(tmp_path) == [], "stop returned while the backend still ran"
    finally:
        stubborn.kill()
        stubborn.wait()
