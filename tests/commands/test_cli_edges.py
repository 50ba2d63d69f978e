"""Through `invoke`, without a lab to share: bad settings and a broken backend start are clear
errors that create nothing, and a rehearsal backend left by a killed `lab.up` is found and
stopped by `lab.down --destroy`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from lab_support import INVOKE, ROOT, invoke_env, pid_alive, run_invoke

from labs.sim import process
from labs.state import load_json


@pytest.mark.parametrize("speed", ["nan", "inf", "-inf"])
def test_a_speed_that_is_not_finite_is_refused(tmp_path: Path, speed: str):
    result = run_invoke(
        "lab.up", "--sim", "--lab", "x", env=invoke_env(tmp_path, INVOKE_LAB_SPEED=speed)
    )

    assert result.returncode == 1
    assert f"INVOKE_LAB_SPEED {speed!r} is not a finite number" in result.stderr
    assert not (tmp_path / "x").exists()


HUGE_TTL = "99999999999999999999h"


@pytest.mark.parametrize(
    ("args", "env", "config", "named"),
    [
        ((), {"INVOKE_LAB_SPEED": "1e308"}, "",
         "INVOKE_LAB_SPEED '1e308' is outside 0.01..10000 times real time"),
        (("--ttl", HUGE_TTL), {}, "", f"--ttl '{HUGE_TTL}' is outside 1m..168h"),
        ((), {"INVOKE_LAB_TTL": HUGE_TTL}, "", f"INVOKE_LAB_TTL '{HUGE_TTL}' is outside 1m..168h"),
        ((), {}, "lab:\n  probe_timeout: 1.0e+308\n",
         "lab.probe_timeout in invoke.yaml 1e+308 is outside 1..86400 seconds"),
    ],
    ids=["env-speed", "flag-ttl", "env-ttl", "yaml-timeout"],
)  # fmt: skip
def test_numbers_out_of_range_are_refused_where_they_enter_naming_the_range(
    tmp_path: Path, args: tuple[str, ...], env: dict[str, str], config: str, named: str
):
    files = ()
    if config:
        (tmp_path / "invoke.yaml").write_text(config)
        files = ("-f", str(tmp_path / "invoke.yaml"))
    result = run_invoke(*files, "lab.up", "--sim", "--lab", "x", "--dry-run", *args,
                        env=invoke_env(tmp_path, **env))  # fmt: skip

    assert result.returncode == 1, result.stdout + result.stderr
    assert named in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "x").exists()


def test_a_region_shaped_like_one_but_unknown_is_refused_before_anything_starts(tmp_path: Path):
    env = invoke_env(tmp_path, INVOKE_LAB_REGION="xx-mars-1")
    result = run_invoke("lab.up", "--sim", "--lab", "x", env=env)

    assert result.returncode == 1, result.stdout + result.stderr
    assert "region 'xx-mars-1' is not an AWS region" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "x").exists()


def test_an_empty_state_dir_is_refused_not_taken_as_the_current_directory(tmp_path: Path):
    result = run_invoke(
        "lab.status", "--lab", "x", env=invoke_env(tmp_path, INVOKE_LAB_STATE_DIR="")
    )

    assert result.returncode == 1
    assert "INVOKE_LAB_STATE_DIR '' is not a directory path" in result.stderr


def test_a_lab_section_that_is_not_a_mapping_is_named(tmp_path: Path):
    config = tmp_path / "invoke.yaml"
    config.write_text("lab: 5\n")

    result = run_invoke("-f", str(config), "lab.status", "--lab", "x", env=invoke_env(tmp_path))

    assert result.returncode == 1
    assert "the `lab:` section of invoke.yaml is a int (5), not a mapping" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_backend_that_dies_at_start_is_reported_as_dead_not_as_slow(tmp_path: Path):
    blocker = tmp_path / "x" / "sim" / "kubeconfig"  # the backend cannot write its kubeconfig
    blocker.mkdir(parents=True)
    (blocker / "in-the-way").touch()

    result = run_invoke("lab.up", "--sim", "--lab", "x", env=invoke_env(tmp_path))

    assert result.returncode == 1
    assert "the rehearsal backend exited with code 1 after" in result.stderr
    assert "did not come up within" not in result.stderr
    assert f"could not write {blocker}" in result.stderr  # the log's tail says why
    assert process.processes(tmp_path / "x" / "sim") == []


def test_a_backend_left_by_a_killed_lab_up_is_stopped_by_lab_down_destroy(tmp_path: Path):
    env = invoke_env(tmp_path)
    sim_dir = tmp_path / "orphan" / "sim"
    up = subprocess.Popen([INVOKE, "lab.up", "--sim", "--lab", "orphan"], cwd=ROOT, env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                          start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not (pids := process.processes(sim_dir)) and time.monotonic() < deadline:
            time.sleep(0.05)
        os.killpg(up.pid, signal.SIGKILL)  # killed right after the backend started
        up.wait(timeout=30)
        assert pids and all(pid_alive(pid) for pid in pids), "no backend was running"

        down = run_invoke("lab.down", "--lab", "orphan", "--destroy", "--yes", env=env)

        assert down.returncode == 0, down.stdout + down.stderr
        # it does not answer (its endpoints were never written): found by its state directory
        assert "does not answer" in down.stdout
        assert f"Stopped its backend process(es) {pids[0]} (found by their state directory" in (
            down.stdout
        )
        assert process.processes(sim_dir) == [] and not any(pid_alive(pid) for pid in pids)
        status = run_invoke("lab.status", "--lab", "orphan", env=env)
        assert status.returncode == 1 and "no lab named 'orphan'" in status.stderr
    finally:
        for pid in process.processes(sim_dir):
            os.kill(pid, signal.SIGKILL)


def test_lab_scale_to_a_negative_count_is_refused_by_range(tmp_path: Path):
    env = invoke_env(tmp_path)
    state = tmp_path / "neg" / "state.json"
    state.parent.mkdir()
    state.write_text('{"backend": "sim"}')  # no backend runs: the range check comes first

    result = run_invoke("lab.scale", "-1", "--lab", "neg", env=env)

    assert result.returncode == 1
    assert "cannot scale lab 'neg' to -1 GPU node(s): use 0 to 2" in result.stderr
    assert load_json(state) == {"backend": "sim"}


def test_the_readme_says_invoke_one_way_and_how_to_get_it_on_path(tmp_path: Path):
    """After the README's set-up only .venv/bin/invoke exists: it says once how to put it on
    PATH, then `invoke ...` throughout, as the tool's own hints do."""
    readme = (ROOT / "README.md").read_text()
    assert 'export PATH="$PWD/.venv/bin:$PATH"' in readme
    assert ".venv/bin/invoke" not in readme
    hints = run_invoke("scenario.show", "device-plugin-off", env=invoke_env(tmp_path))
    assert 'eval "$(invoke lab.env --lab LAB)"' in hints.stdout


def test_every_task_takes_lab_and_says_what_it_does_with_it(tmp_path: Path):
    """One flag for one fact: `--lab` on every task, and where a lab means nothing the help says
    so (and the task runs with it)."""
    env = invoke_env(tmp_path)
    listing = run_invoke("--list", "--list-format", "json", env=env)
    assert listing.returncode == 0, listing.stderr
    tree = json.loads(listing.stdout)
    names = [task["name"] for task in tree["tasks"]] + [
        f"{group['name']}.{task['name']}"
        for group in tree["collections"]
        for task in group["tasks"]
    ]
    assert "practice.history" in names and "scenario.list" in names, names
    for name in names:
        shown = run_invoke("--help", name, env=env)
        assert "--lab=STRING" in shown.stdout, f"{name} takes no --lab:\n{shown.stdout}"
    for ignored in ("scenario.list", "lab.list"):
        ran = run_invoke(ignored, "--lab", "anything", env=env)
        assert ran.returncode == 0, ran.stdout + ran.stderr
        assert "ignored" in run_invoke("--help", ignored, env=env).stdout
