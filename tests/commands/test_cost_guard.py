"""The cost guard holds whatever the local files say (damaged journal or state, a state dir
that cannot be written, a node group deleted out of band, a kubeconfig pointed at another
cluster), whatever stops a run (a closed terminal, `kill`, two quick Ctrl-Cs, `lab.down`), and
whoever else is on the machine (a second command on the lab, other local users, a closed pipe).

Every test drives `invoke` on its own lab record of one shared rehearsal world and reads the
outcome off the backend (moto's node group, the cluster's objects). Tests that scale the world
down put it back before they end. To land a signal at a known point, a run is frozen
(SIGSTOP) once its output shows the fault is in, signalled, then let go (SIGCONT): it handles
the signal where it stood.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from guard_support import (
    Background,
    CliLab,
    cli_lab,
    fault_in,
    gpu_scaling,
    restore_gpus,
    unwritable,
)
from lab_support import INVOKE, ROOT
from scenario_support import GPU_NODES, SimLab, wait_ready
from still_support import StillPlane
from tool_support import require_tool, require_venv_tool

import scenarios
from labs.aws import stack
from labs.journal import REVERTED, Journal
from labs.kube import gpu
from labs.sim.aws.seed import moto_clients
from labs.sim.infra import SimInfra

FAULT = "device-plugin-off"
FAULT_IN = "T+"  # the first symptom line of a run: the fault is in, the run is watching
FREEZE, GO = signal.SIGSTOP, signal.SIGCONT
DAMAGED = {
    "garbage": b"\x00{not json",
    "empty": b"",
    "object": b"{}",
    "list": b"[]",
    "null": b"null",
}


@pytest.fixture
def user(world_lab: SimLab, tmp_path: Path) -> CliLab:
    wait_ready(world_lab.lab)
    return cli_lab(world_lab, tmp_path)


def kept_copy(path: Path) -> Path:
    """The one `<name>.broken-<time>` the tool moved a damaged file to."""
    [kept] = path.parent.glob(f"{path.name}.broken-*")
    return kept


def inject(user: CliLab) -> None:
    """The fault put in with no journal entry: what a lost journal leaves behind."""
    scenarios.get(FAULT).inject(user.lab)
    assert fault_in(user.lab, FAULT)


# --- 1. a journal that is damaged or gone -------------------------------------------------------


@pytest.mark.parametrize("content", DAMAGED.values(), ids=list(DAMAGED))
def test_a_journal_that_does_not_parse_is_moved_aside_and_remembered(
    tmp_path: Path, content: bytes, capsys: pytest.CaptureFixture[str]
):
    path = tmp_path / "journal.json"
    path.write_bytes(content)
    journal = Journal(path)

    assert journal.outstanding() == []
    kept = kept_copy(path)
    assert kept.read_bytes() == content, "the damaged journal was not kept as it was"
    assert f"{path} is damaged" in capsys.readouterr().err
    assert journal.incomplete() == f"the journal {path} was damaged ({kept})"
    journal.record_injecting("x")  # a new entry does not make the loss forgotten
    assert journal.incomplete() is not None and len(journal.entries()) == 1


def test_lab_status_names_a_damaged_journal_and_what_to_run(user: CliLab):
    journal = user.lab.paths.journal
    journal.write_bytes(DAMAGED["null"])

    status = user.invoke("lab.status")

    assert status.returncode == 0, status.stdout + status.stderr
    kept = kept_copy(journal)
    assert f"{journal} is damaged (a NoneType" in status.stderr
    assert f"kept it as {kept}" in status.stderr and "Traceback" not in status.stderr
    assert "injected faults: none" in status.stdout
    assert f"the journal {journal} was damaged ({kept})" in status.stdout
    assert "`invoke scenario.revert --all --lab myeks` looks in the cluster" in status.stdout


def test_revert_all_finds_the_fault_in_the_cluster_when_the_journal_was_deleted(user: CliLab):
    user.lab.paths.journal.unlink()
    inject(user)

    revert = user.invoke("scenario.revert", "--all")

    assert revert.returncode == 0, revert.stdout + revert.stderr
    assert f"the journal {user.lab.paths.journal} is missing" in revert.stdout
    assert f"looked in the cluster: {FAULT}" in revert.stdout
    assert f"reverted: {FAULT}" in revert.stdout
    assert not fault_in(user.lab, FAULT)
    assert user.lab.journal.incomplete() is None, "the journal was not made whole again"


def test_lab_down_reverts_a_fault_whose_journal_is_garbage_and_scales_to_zero(
    world_lab: SimLab, user: CliLab
):
    user.lab.paths.journal.write_bytes(DAMAGED["garbage"])
    inject(user)
    try:
        down = user.invoke("lab.down")

        assert down.returncode == 0, down.stdout + down.stderr
        assert f"{user.lab.paths.journal} is damaged" in down.stderr
        assert f"looked in the cluster: {FAULT}" in down.stdout
        assert not fault_in(user.lab, FAULT)
        assert gpu_scaling(world_lab)["desiredSize"] == 0
        assert "reads desiredSize 0" in down.stdout
    finally:
        restore_gpus(world_lab)


# --- 2. a node group deleted out of band --------------------------------------------------------


def delete_gpu_group(ready: SimLab) -> None:
    eks = moto_clients(ready.world.endpoints)("eks")
    name = stack.gpu_node_group_name(ready.lab.cluster_name)
    eks.delete_nodegroup(clusterName=ready.lab.cluster_name, nodegroupName=name)
    assert gpu_scaling(ready) is None


def test_lab_down_destroy_completes_when_the_gpu_node_group_is_gone(
    world_lab: SimLab, user: CliLab
):
    delete_gpu_group(world_lab)
    try:
        down = user.invoke("lab.down", "--destroy", "--yes")

        assert down.returncode == 0, down.stdout + down.stderr
        group = stack.gpu_node_group_name(user.lab.cluster_name)
        assert (
            f"GPU node group {group} of cluster {user.lab.cluster_name}: not found" in down.stdout
        )
        assert "lab 'myeks' is gone" in down.stdout
        assert not user.lab.paths.state_file.exists()
    finally:
        SimInfra(world_lab.world.endpoints).apply(world_lab.lab.variables)  # terraform would
        restore_gpus(world_lab)


def test_lab_up_re_creates_a_gpu_node_group_deleted_out_of_band(world_lab: SimLab, user: CliLab):
    user.lab.record["phases"] = {"infra": "2026-01-01T00:00:00Z"}  # lab.up was done before
    user.lab.save()
    delete_gpu_group(world_lab)
    try:
        up = user.invoke("lab.up")

        assert up.returncode == 0, up.stdout + up.stderr
        assert "is gone from the backend: applying again to re-create it" in up.stdout
        assert "aws_eks_node_group.this[0] (create)" in up.stdout
        assert gpu_scaling(world_lab) == {"minSize": 0, "maxSize": 2, "desiredSize": GPU_NODES}
    finally:
        if gpu_scaling(world_lab) is None:
            SimInfra(world_lab.world.endpoints).apply(world_lab.lab.variables)
        restore_gpus(world_lab)


# --- 3. a damaged state file --------------------------------------------------------------------


def test_a_garbage_state_file_is_kept_and_rebuilt_from_the_backend(world_lab: SimLab, user: CliLab):
    state_file = user.lab.paths.state_file
    state_file.write_bytes(DAMAGED["garbage"])

    status = user.invoke("lab.status")

    assert status.returncode == 0, status.stdout + status.stderr
    kept = kept_copy(state_file)
    assert kept.read_bytes() == DAMAGED["garbage"]
    assert f"{state_file} is damaged" in status.stderr and str(kept) in status.stderr
    assert "rebuilt it from what the sim backend still knows" in status.stderr
    assert "backend sim" in status.stdout and "min 0 max 2 desired 2" in status.stdout
    rebuilt = json.loads(state_file.read_text())
    assert rebuilt["outputs"]["cluster_endpoint"] == world_lab.world.endpoints["kube_url"]


def test_lab_down_scales_what_the_backend_has_when_the_state_lost_its_phases(
    world_lab: SimLab, user: CliLab
):
    user.lab.paths.state_file.write_text(json.dumps({"backend": "sim"}))
    assert gpu_scaling(world_lab)["desiredSize"] == GPU_NODES
    try:
        down = user.invoke("lab.down")

        assert down.returncode == 0, down.stdout + down.stderr
        assert gpu_scaling(world_lab)["desiredSize"] == 0, "lab.down left the GPUs running"
        assert "wait until no GPU node remains" in down.stdout
        assert "reads desiredSize 0; a rehearsal bills nothing" in down.stdout
    finally:
        restore_gpus(world_lab)


def test_lab_down_after_a_lab_up_that_failed_in_its_apply_watches_the_nodes_leave(
    world_lab: SimLab, user: CliLab
):
    """lab.up writes the stack's outputs and the lab's kubeconfig after the apply; one that
    failed there left neither: lab.down reads both back from the backend, not a gap to run
    again for."""
    user.lab.paths.state_file.write_text(json.dumps({"backend": "sim"}))
    user.lab.paths.kubeconfig.unlink()
    try:
        down = user.invoke("lab.down")

        assert down.returncode == 0, down.stdout + down.stderr
        assert gpu_scaling(world_lab)["desiredSize"] == 0, "lab.down left the GPUs running"
        assert f"wrote its kubeconfig, {user.lab.paths.kubeconfig}" in down.stdout
        assert "wait until no GPU node remains" in down.stdout
    finally:
        restore_gpus(world_lab)


# --- 4. a state directory that cannot be written ------------------------------------------------


def test_lab_scale_in_an_unwritable_state_dir_refuses_before_scaling(
    world_lab: SimLab, user: CliLab
):
    with unwritable(user.root):
        scale = user.invoke("lab.scale", "1")

    assert scale.returncode == 1
    assert f"cannot write in {user.root}" in scale.stderr and "Nothing was changed" in scale.stderr
    assert gpu_scaling(world_lab)["desiredSize"] == GPU_NODES


def test_scenario_run_in_an_unwritable_state_dir_injects_nothing_and_leaves_no_run_folder(
    user: CliLab,
):
    runs = user.lab.paths.runs_dir
    runs.mkdir()  # an earlier run's folder stays writable
    journal_before = user.lab.paths.journal.read_bytes()
    with unwritable(user.root):
        run = user.invoke("scenario.run", FAULT)

    assert run.returncode == 1
    assert f"cannot write in {user.root}" in run.stderr
    assert list(runs.iterdir()) == [], "an empty run folder was left behind"
    assert user.lab.paths.journal.read_bytes() == journal_before
    assert not fault_in(user.lab, FAULT)


# --- 5. and 6. a run stopped by a signal, or meeting another command -------------------------


@pytest.fixture
def run(user: CliLab) -> Iterator[Background]:
    """A scenario run, frozen right after its injection; killed at the end if still there."""
    running = Background.start(user, "scenario.run", FAULT)
    try:
        running.out.wait_for(FAULT_IN, timeout=90)
        running.signal(FREEZE)
        yield running
    finally:
        running.stop()


def report_of(user: CliLab) -> dict:
    [report] = user.lab.paths.runs_dir.glob(f"*-{FAULT}/report.json")
    return json.loads(report.read_text())


@pytest.mark.parametrize(
    ("signum", "why"),
    [(signal.SIGHUP, "SIGHUP: the terminal closed"), (signal.SIGTERM, "SIGTERM")],
    ids=["SIGHUP", "SIGTERM"],
)
def test_a_closed_terminal_or_kill_reverts_then_reports(user: CliLab, run, signum, why):
    run.signal(signum, GO)
    code, out, err = run.finish()

    assert code == 130, out + err
    assert f"run stopped: interrupted ({why})" in out
    assert not fault_in(user.lab, FAULT)
    assert user.lab.journal.entries()[-1]["state"] == REVERTED
    assert report_of(user)["result"]["error"] == f"interrupted ({why})"


def test_a_second_ctrl_c_during_the_revert_does_not_skip_the_report(user: CliLab, run):
    run.signal(signal.SIGINT, GO)
    run.out.wait_for("run stopped: interrupted (Ctrl-C)")
    run.signal(FREEZE, signal.SIGINT, GO)  # lands in the revert, or the report after it
    code, out, err = run.finish()

    assert code == 130, out + err
    assert "interrupted (Ctrl-C): finishing the revert and the report first" in err
    assert "report: " in out
    assert report_of(user)["result"]["error"] == "interrupted (Ctrl-C)"
    assert not fault_in(user.lab, FAULT)
    assert user.lab.journal.entries()[-1]["state"] == REVERTED


def test_a_second_run_on_the_same_lab_is_refused_naming_the_first(user: CliLab, run):
    second = subprocess.run(
        [INVOKE, "scenario.run", FAULT, "--lab", user.lab.name], cwd=ROOT,
        env={**user.env, "INVOKE_LAB_LOCK_WAIT": "1"}, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    run.signal(GO)

    assert second.returncode == 1, second.stdout + second.stderr
    pid = run.process.pid
    assert f"lab 'myeks' is busy: `scenario.run {FAULT}` (pid {pid})" in second.stderr
    assert "Traceback" not in second.stderr
    code, out, err = run.finish()
    assert code == 0, out + err  # the first run was not disturbed
    assert [entry["state"] for entry in user.lab.journal.entries()] == [REVERTED]


def test_lab_down_destroy_during_a_run_has_it_revert_and_report_first(
    world_lab: SimLab, user: CliLab, run
):
    down = Background.start(user, "lab.down", "--destroy", "--yes")
    try:
        down.out.wait_for("asked it to revert its fault and stop")
        run.signal(GO)  # the SIGTERM lab.down sent is handled now
        run_code, run_out, run_err = run.finish()
        down_code, down_out, down_err = down.finish()

        assert run_code == 130 and "result: OK" not in run_out, run_out + run_err
        assert report_of(user)["result"]["error"] == "interrupted (SIGTERM)"
        assert down_code == 0, down_out + down_err
        assert f"`scenario.run {FAULT}` (pid {run.process.pid}) is running" in down_out
        assert not fault_in(world_lab.lab, FAULT)
        assert gpu_scaling(world_lab)["desiredSize"] == 0
        assert not user.lab.paths.state_file.exists(), "the lab was not destroyed after the run"
    finally:
        down.stop()
        restore_gpus(world_lab)
    assert gpu_scaling(world_lab)["desiredSize"] == GPU_NODES


# --- 7. the rehearsal's endpoints and other local users -----------------------------------------


def test_the_rehearsal_endpoints_answer_only_the_labs_credentials(
    world_lab: SimLab, user: CliLab, tmp_path: Path
):
    endpoints = world_lab.world.endpoints
    for method, path in (("POST", "/moto-api/reset"), ("GET", "/moto-api/"),
                         ("POST", "/moto-api/reset-auth")):  # fmt: skip
        request = urllib.request.Request(endpoints["aws_endpoint_url"] + path, method=method,
                                         data=b"" if method == "POST" else None)  # fmt: skip
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)
        assert refused.value.code == 403, path
    aws = [require_venv_tool("aws"), "eks", "list-nodegroups", "--cluster-name", "myeks"]
    env = {**os.environ, "AWS_ENDPOINT_URL": endpoints["aws_endpoint_url"],
           "AWS_DEFAULT_REGION": "ap-northeast-2", "AWS_ACCESS_KEY_ID": "testing",
           "AWS_SECRET_ACCESS_KEY": "testing"}  # fmt: skip
    stranger = subprocess.run(aws, env=env, capture_output=True, text=True, timeout=60)
    assert stranger.returncode != 0 and "InvalidClientTokenId" in stranger.stderr

    world_kubeconfig = world_lab.world.kubeconfig_path  # the world's own files, not lab copies
    for secret in (world_kubeconfig, world_kubeconfig.parent / "endpoints.json"):
        assert secret.stat().st_mode & 0o777 == 0o600, secret  # token, CA; keys
    kubeconfig = user.lab.paths.kubeconfig
    document = yaml.safe_load(kubeconfig.read_text())
    document["users"][0]["user"]["token"] = "a-guess"
    guessed = tmp_path / "guessed"
    guessed.write_text(yaml.safe_dump(document))
    kubectl = [require_tool("kubectl"), "--cache-dir", str(tmp_path / "cache"), "get", "nodes"]
    denied = subprocess.run([*kubectl, "--kubeconfig", str(guessed)], capture_output=True,
                            stdin=subprocess.DEVNULL, text=True, timeout=60)  # fmt: skip
    assert denied.returncode == 1
    assert "error: You must be logged in to the server" in denied.stderr
    allowed = subprocess.run([*kubectl, "--kubeconfig", str(kubeconfig)], capture_output=True,
                             text=True, timeout=60)  # fmt: skip
    assert allowed.returncode == 0 and "Ready" in allowed.stdout

    status = user.invoke("lab.status")  # nothing above changed the lab
    assert "min 0 max 2 desired 2" in status.stdout and "state ready" in status.stdout


# --- 8. a kubeconfig that points at another cluster ---------------------------------------------


def test_a_kubeconfig_pointing_at_another_cluster_is_never_read_yet_gpus_reach_zero(
    world_lab: SimLab, user: CliLab, still: StillPlane
):
    """The node group is the lab's by AWS's account, ARN and recorded endpoint: the scale to 0
    goes through, and the other cluster is neither changed nor read as the lab's."""
    kubeconfig = user.lab.paths.kubeconfig
    document = yaml.safe_load(kubeconfig.read_text())
    document["clusters"][0]["cluster"]["server"] = still.url  # another API server
    kubeconfig.write_text(yaml.safe_dump(document))

    try:
        for command in (("lab.scale", "0"), ("lab.down",)):
            result = user.invoke(*command)
            assert result.returncode == 1, command
            assert "reads desiredSize 0 (the EKS API took it)" in result.stderr
            assert f"refusing to read the cluster at {still.url}" in result.stderr
            assert "Traceback" not in result.stdout + result.stderr
            assert gpu_scaling(world_lab)["desiredSize"] == 0, command
    finally:
        restore_gpus(world_lab)


# --- 9. output to a pipe that closes ------------------------------------------------------------


def piped(user: CliLab, command: str, lines: int) -> subprocess.CompletedProcess[str]:
    """`invoke COMMAND --lab L | head -N` in a shell; the exit status is invoke's own."""
    invoke = Path(sys.executable).parent / "invoke"
    script = f"{invoke} {command} --lab {user.lab.name} | head -{lines}; exit ${{PIPESTATUS[0]}}"
    return subprocess.run(["bash", "-c", script], cwd=ROOT, env=user.env, capture_output=True,
                          text=True, timeout=180)  # fmt: skip


def test_lab_status_into_head_prints_its_lines_and_no_error(user: CliLab):
    result = piped(user, "lab.status", 2)

    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) == 2 and result.stdout.startswith("lab myeks")
    assert result.stderr == ""


def test_lab_scale_into_a_closed_pipe_still_finishes_the_scale(world_lab: SimLab, user: CliLab):
    try:
        result = piped(user, "lab.scale 1", 1)

        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith("==> scale GPU node group")
        assert "cannot reach the lab" not in result.stderr and "Traceback" not in result.stderr
        assert gpu_scaling(world_lab)["desiredSize"] == 1
        assert len(gpu.gpu_nodes(user.lab.snapshot("nodes"))) == 1, "lab.scale stopped early"
    finally:
        restore_gpus(world_lab)
