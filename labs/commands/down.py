"""lab.down: the cost guard. Revert what is injected, GPU nodes to 0, a teardown on request.

It works from the backend's truth, not the local files, and every step that fails is named at
the end while the others still run.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from labs.commands.scale import (
    Confirm,
    ZeroWithGaps,
    already_confirmed,
    gpu_nodegroup,
    scale,
    wait_billing_stopped,
)
from labs.console import Console
from labs.errors import CommandError, LabError, NotRecorded, explain
from labs.lab import Lab, LabNotFound, known_labs
from labs.lock import ask_to_stop, lab_lock
from labs.settings import LabSettings
from labs.state import StateWriteError

Reverter = Callable[[Lab, Console], list[str]]


class AfterRevert(CommandError):
    """A reverter reverted every fault, then a step after it failed (recording a practice
    exercise as abandoned): the faults are not named as left in."""


# How long lab.down waits for a scenario run it asked to stop (revert, then its report).
RUN_STOP_SECONDS = 120.0


def down(
    settings: LabSettings,
    destroy: bool,
    confirm: Confirm,
    revert: Reverter,
    console: Console,
) -> None:
    """The cost guard: revert faults, GPU node group to 0 as the backend reads it, then (on
    request) destroy. Works from the backend's truth, not the local files: a lost state file
    is rebuilt, a node group already gone is said and skipped, and every step that fails is
    reported at the end while the others still run."""
    try:
        lab = Lab.open(settings)
    except LabNotFound:
        _stop_orphans(settings, console)
        return
    lab.backend.check_writable(lab, "lab.down")
    on_busy = _stop_a_run(lab, console)
    with lab_lock(lab, "lab.down", on_busy=on_busy, writable=False):
        problems = _to_idle(lab, destroy, revert, console)
        if destroy:
            _destroy(lab, confirm, console, problems)
    if problems:
        raise CommandError(
            "lab.down could not do everything: " + "; ".join(problems) + ". Fix the cause "
            f"and run `invoke lab.down --lab {lab.name}{' --destroy' if destroy else ''}` again."
        )


def _stop_orphans(settings: LabSettings, console: Console) -> None:
    """No record of the lab: what its deleted files left running is still stopped."""
    from labs.backends import BACKENDS

    pids = [pid for backend in BACKENDS.values() for pid in backend.stop_orphans(settings.paths)]
    where = f"lab {settings.lab!r} does not exist under {settings.state_dir}"
    if pids:
        console.say(
            f"{where}, but processes of it still ran (found by their command line): stopped "
            f"{', '.join(map(str, pids))}"
        )
    else:
        console.say(f"{where}: nothing to do")


def _stop_a_run(lab: Lab, console: Console) -> Callable[[dict[str, Any]], float | None]:
    """lab.down meets a held lock: a scenario run is asked to revert and stop; others waited."""

    def on_busy(holder: dict[str, Any]) -> float | None:
        command, pid = holder.get("command", "another command"), holder.get("pid", "?")
        if ask_to_stop(holder, "scenario.run"):
            console.say(
                f"==> `{command}` (pid {pid}) is running on lab {lab.name!r}: asked it to revert "
                f"its fault and stop (SIGTERM); waiting up to {RUN_STOP_SECONDS:g} s"
            )
            return RUN_STOP_SECONDS
        console.say(f"==> waiting for `{command}` (pid {pid}) to release lab {lab.name!r}")
        return None

    return on_busy


def _to_idle(lab: Lab, destroy: bool, revert: Reverter, console: Console) -> list[str]:
    """Revert faults and bring the GPU node group to 0; the problems met on the way."""
    problems: list[str] = []
    why = lab.backend.unreachable(lab)
    if why is not None:
        left = lab.backend.stop_unreachable(lab, why, console)
        return [left] if left else []
    problems += _revert_faults(lab, revert, console)
    if not lab.outputs:
        _recover_outputs(lab, console)
    gpu_state = _gpu_group_to_zero(lab, console, problems)
    if not destroy:
        console.say(lab.backend.idle_message(lab, gpu_state))
    return problems


def _revert_faults(lab: Lab, revert: Reverter, console: Console) -> list[str]:
    """Revert what the journal (or, when it is missing or damaged, the cluster) shows."""
    gap = lab.journal.incomplete()
    if not lab.journal.outstanding() and not gap:
        return []
    with console.phase("revert injected faults " + ("(the cluster)" if gap else "(journal)")):
        failed, after = False, []
        try:
            for name in revert(lab, console):
                console.say(f"    reverted {name}")
        except AfterRevert as error:
            console.say(f"    {error}")
            after = [str(error)]
        except LabError as error:
            console.say(f"    could not revert: {error}")
            failed = True
    left = [entry["scenario"] for entry in lab.journal.outstanding()]
    if not left and not failed:
        return after
    which = ", ".join(left) or "those found in the cluster (above)"
    return [
        f"these faults could not be reverted: {which} (run `invoke scenario.revert --all "
        f"--lab {lab.name}` once the cause above is fixed)"
    ]


def _recover_outputs(lab: Lab, console: Console) -> None:
    """The record lost the stack's outputs (or a lab.up failed in its apply, before it wrote
    them): read them back from the backend, and write the lab's kubeconfig where lab.up had not
    got to it, so the GPU nodes can be watched leaving."""
    recovered = lab.backend.recover(lab)
    if not recovered.get("outputs"):
        return
    lab.record.update(recovered)
    console.say(
        f"    the record of lab {lab.name!r} had no stack outputs: read them from the backend"
    )
    try:
        lab.save()
    except StateWriteError as error:
        console.say(f"    (not saved: {error})")
    if not lab.paths.kubeconfig.exists():
        _write_missing_kubeconfig(lab, console)


def _write_missing_kubeconfig(lab: Lab, console: Console) -> None:
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        lab.backend.write_kubeconfig(lab)
    except (LabError, OSError, BotoCoreError, ClientError) as error:
        console.say(f"    its kubeconfig could not be written either: {error}")
    else:
        console.say(f"    and wrote its kubeconfig, {lab.paths.kubeconfig}, as lab.up does")


def _gpu_group_to_zero(lab: Lab, console: Console, problems: list[str]) -> str | None:
    """Scale the GPU node group to 0 as the backend has it; how it reads afterwards, or None."""
    from labs.aws.cloud import NodegroupNotFound, describe_gpu_nodegroup

    cluster, nodegroup = gpu_nodegroup(lab)
    eks = lab.aws_client("eks")
    where = f"node group {nodegroup} of cluster {cluster}"
    try:
        describe_gpu_nodegroup(eks, cluster, nodegroup)
    except NodegroupNotFound:
        console.say(f"==> GPU {where}: not found in the backend")
        return _gone_group_idle(lab, cluster, nodegroup, console, problems)
    except LabError as error:
        problems.append(f"could not read GPU {where}: {error}")
        return None
    try:
        scale(lab, 0, console)
    except (NotRecorded, ZeroWithGaps) as error:
        problems.append(str(error))
    except LabError as error:
        problems.append(f"could not scale GPU {where} to 0: {error}")
    try:
        desired = describe_gpu_nodegroup(eks, cluster, nodegroup)["desired_size"]
    except LabError as error:
        problems.append(f"could not read GPU {where} back: {error}")
        return None
    if desired != 0:
        problems.append(f"GPU {where} still wants {desired} node(s)")
        return None
    return f"GPU {where} reads desiredSize 0"


def _gone_group_idle(
    lab: Lab, cluster: str, nodegroup: str, console: Console, problems: list[str]
) -> str | None:
    """A node group already gone may leave instances shutting down: wait until none bills."""
    where = f"node group {nodegroup} of cluster {cluster}"
    try:
        wait_billing_stopped(lab, cluster, nodegroup, console)
    except LabError as error:
        problems.append(f"instances of the deleted GPU {where} may still run: {error}")
        return None
    return f"GPU {where} does not exist"


def _destroy(lab: Lab, confirm: Confirm, console: Console, problems: list[str]) -> None:
    question = f"Destroy lab {lab.name!r} ({lab.backend.name}) and everything in it?"
    if not confirm(question):
        raise CommandError("not destroyed: confirmation refused (pass --yes to skip the question)")
    with console.phase(f"destroy lab {lab.name!r}"):
        try:
            lab.backend.destroy(lab, console)
        except LabError as error:
            problems.append(f"destroy failed: {error} (the lab's files are kept)")
            return
        try:
            _remove_state_keeping_reports(lab)
        except OSError as error:
            problems.append(
                f"everything was destroyed, but the lab's files under {lab.paths.root} could "
                f"not be removed ({error}); remove them by hand"
            )
            return
    kept = f"; its reports stay in {lab.paths.runs_dir}" if lab.paths.runs_dir.exists() else ""
    console.say(f"lab {lab.name!r} is gone{kept}")


def down_all(
    settings: LabSettings,
    destroy: bool,
    confirm: Confirm,
    revert: Reverter,
    console: Console,
) -> None:
    """lab.down on every lab under the state directory: one failing lab does not stop the rest.

    --destroy is confirmed once for all of them; the summary names the labs that failed.
    """
    names = known_labs(settings)
    if not names:
        console.say(f"no labs under {settings.state_dir}: nothing to do")
        return
    question = f"Destroy {len(names)} lab(s) ({', '.join(names)}) and everything in them?"
    if destroy and not confirm(question):
        raise CommandError("not destroyed: confirmation refused (pass --yes to skip the question)")
    failed: dict[str, str] = {}
    for name in names:
        console.say(f"=== lab {name}")
        try:
            down(replace(settings, lab=name), destroy, already_confirmed, revert, console)
        except Exception as error:  # noqa: BLE001 - the cost guard goes on with the next lab
            failed[name] = explain(error)
            console.say(f"    lab {name} failed: {failed[name]}")
    done = [name for name in names if name not in failed]
    console.say(f"lab.down --all: {len(done)} of {len(names)} done ({', '.join(done) or 'none'})")
    if failed:
        raise CommandError(
            f"lab.down --all: {len(failed)} lab(s) failed: "
            + "; ".join(f"{name}: {why}" for name, why in failed.items())
            + ". Fix the cause and run `invoke lab.down --lab NAME` for each."
        )


def _remove_state_keeping_reports(lab: Lab) -> None:
    """Remove the lab's state (so the name is free again) but keep runs/: reports outlive labs."""
    for entry in lab.paths.root.iterdir():
        if entry == lab.paths.runs_dir:
            continue
        if entry.is_dir():
            _remove_tree(entry)
        else:
            entry.unlink()
    if not any(lab.paths.root.iterdir()):
        lab.paths.root.rmdir()


def _remove_tree(path: Path) -> None:
    """`shutil.rmtree`, also through directories the user owns but cannot read: a rootless
    node's kernel leaves overlayfs' work directory mode 000, which root never notices."""

    def open_up(_: Callable[..., Any], failed: str, error: Any) -> None:
        if not isinstance(error[1], PermissionError) or not os.path.isdir(failed):
            raise error[1]
        os.chmod(failed, 0o700)
        _remove_tree(Path(failed))

    shutil.rmtree(path, onerror=open_up)
