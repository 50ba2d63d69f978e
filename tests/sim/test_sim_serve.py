"""`python -m labs.sim serve` as the lifecycle runs it: files written, clean exit on SIGTERM."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from lab_support import ROOT
from sim_support import wait_for

from labs.settings import MODELLED_KUBELETS
from labs.state import load_json


def test_serve_writes_endpoints_and_kubeconfig_and_stops_on_sigterm(tmp_path: Path) -> None:
    """On the modelled kubelet: its files and its stop are the same with real ones, which the
    real-kubelet modules start through lab.up."""
    state = tmp_path / "sim"
    command = [sys.executable, "-m", "labs.sim", "serve", "--state-dir", str(state),
               "--speed", "600", "--kubelets", MODELLED_KUBELETS]  # fmt: skip
    process = subprocess.Popen(
        command,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        endpoints = wait_for(lambda: served(process, state), what="endpoints.json")
        assert endpoints["pid"] == process.pid
        assert endpoints["cluster_name"] == "myeks"
        assert endpoints["account_id"] == "123456789012"
        assert endpoints["aws_endpoint_url"].startswith("http://127.0.0.1:")
        kubeconfig = yaml.safe_load((state / "kubeconfig").read_text())
        assert kubeconfig["clusters"][0]["cluster"]["server"] == endpoints["kube_url"]
        assert kubeconfig["users"][0]["user"]["token"] == endpoints["kube_token"]
        for name in ("kubeconfig", "endpoints.json"):  # both carry the world's credentials
            assert (state / name).stat().st_mode & 0o777 == 0o600, name
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, stderr
    assert "pid" not in load_json(state / "endpoints.json")
    assert (state / "kubeconfig").exists()


def served(process: subprocess.Popen[str], state: Path) -> dict | None:
    """The endpoints serve wrote, or None yet; a serve that ended instead fails the test with
    what it said, rather than being waited for."""
    if process.poll() is not None:
        pytest.fail(f"serve ended with {process.returncode}: {process.communicate()[1][-2000:]}")
    return load_json(state / "endpoints.json")


def test_serve_rejects_a_bad_speed(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "labs.sim", "serve", "--state-dir", str(tmp_path), "--speed", "0"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "--speed must be positive" in result.stderr
