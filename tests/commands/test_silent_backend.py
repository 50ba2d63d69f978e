"""A rehearsal backend that runs but does not answer (issue 24): wrong ports in its endpoints
file, or frozen with SIGSTOP. Nothing says "nothing runs" without having read it, lab.up
never starts a second backend beside it, and lab.down finds it by its state directory and
stops it. One real `labs.sim serve` process (lab.up --sim), as a user has it.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

from lab_support import desired_by_aws_cli, invoke_env, pid_alive, run_invoke, sim_pid

from labs.sim import process

LAB = "f1"


def test_a_silent_backend_is_unknown_never_idle_and_lab_down_stops_it(tmp_path: Path):
    env = invoke_env(tmp_path)
    up = run_invoke("lab.up", "--sim", "--lab", LAB, "--gpus", "1", "--no-operator", env=env)
    assert up.returncode == 0, up.stdout + up.stderr
    sim_dir = tmp_path / LAB / "sim"
    pid = sim_pid(tmp_path, LAB)
    try:
        assert desired_by_aws_cli(env, LAB) == 1

        # wrong ports in endpoints.json: status says unknown, names the file and the URL
        endpoints_file = sim_dir / process.ENDPOINTS
        good = endpoints_file.read_text()
        wrong = json.loads(good) | {"kube_url": "https://127.0.0.1:9", "aws_endpoint_url":
                                    "http://127.0.0.1:9"}  # fmt: skip
        endpoints_file.write_text(json.dumps(wrong))
        status = run_invoke("lab.status", "--lab", LAB, env=env, timeout=60)
        endpoints_file.write_text(good)
        assert status.returncode == 1, status.stdout + status.stderr
        assert "unknown: could not read" in status.stdout
        assert "http://127.0.0.1:9" in status.stdout and str(endpoints_file) in status.stdout
        assert "ClusterPolicy: none" not in status.stdout and "0.000" not in status.stdout

        # frozen: lab.up refuses naming the pid, and no second backend starts
        os.kill(pid, signal.SIGSTOP)
        again = run_invoke("lab.up", "--lab", LAB, "--gpus", "1", "--no-operator", env=env)
        assert again.returncode == 1, again.stdout + again.stderr
        assert f"runs as pid {pid} but does not answer" in again.stderr
        assert process.processes(sim_dir) == [pid], "a second backend was started"

        listed = run_invoke("lab.list", env=env, timeout=60)
        row = next(line.split() for line in listed.stdout.splitlines() if line.startswith(LAB))
        assert row[2] == "no" and f"! {LAB}: the rehearsal backend" in listed.stdout

        down = run_invoke("lab.down", "--lab", LAB, env=env, timeout=120)
        assert down.returncode == 0, down.stdout + down.stderr
        assert "does not answer" in down.stdout
        assert f"Stopped its backend process(es) {pid}" in down.stdout
        assert "its backend is not running, so none of its nodes runs" not in down.stdout
        assert process.processes(sim_dir) == [], "its backend still runs (a zombie has no argv)"
    finally:
        if pid_alive(pid):
            os.kill(pid, signal.SIGCONT)
        destroyed = run_invoke("lab.down", "--lab", LAB, "--destroy", "--yes", env=env)
    assert destroyed.returncode == 0, destroyed.stdout + destroyed.stderr
