"""lab.up, lab.scale and lab.down: the study group's weekly routine, in the right order.

Order of lab.up (DOMAIN.md "Deploy order", reordered so no GPU bills while the
operator installs): base infra with 0 GPU nodes and the operator off -> the lab's
own kubeconfig -> operator on while there are still no GPU nodes, wait for its
ClusterPolicy -> only then scale the GPU node group through the EKS API (never
through the Terraform variable, which the node group ignores after creation) ->
wait until every GPU is schedulable and the ClusterPolicy is ready again (the new nodes
turn it notReady until each operand runs there) -> run the GPU probe. Every step checks what is
already done first, so re-running is safe and cheap. Before GPUs are asked for, the GPU
time limit is set in AWS (`labs.time_limit`), and each scaling update EKS starts is
followed until it succeeds or fails with AWS's own error.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from labs import time_limit
from labs.aws import stack
from labs.backends import AWS, REHEARSAL
from labs.console import Console
from labs.errors import LabError, explain
from labs.guard import check_lab_target
from labs.kube.gpu import (
    cluster_policy,
    describe_gpu_nodes,
    gpu_nodes,
    policy_state,
    ready_gpu_nodes,
    schedulable_gpu_nodes,
)
from labs.kube.view import ClusterView
from labs.lab import Lab, LabNotFound, known_labs
from labs.lock import ask_to_stop, lab_lock
from labs.settings import LabSettings, SettingsError, check_region_exists
from labs.state import StateWriteError

Reverter = Callable[[Lab, Console], list[str]]
Confirm = Callable[[str], bool]
# How often EKS updates are polled on AWS (a rehearsal divides it by its speed).
UPDATE_POLL_SECONDS = 15.0
MIN_UPDATE_POLL_SECONDS = 0.1
# How long an EKS scaling update is followed: new nodes join in 5-6 minutes, and a node being
# removed is drained for at most 15 before EKS terminates it anyway. A rehearsal divides it by
# its speed, but waits at least a minute of wall time (a busy machine slows its world).
EKS_UPDATE_SECONDS = 900.0
MIN_UPDATE_WAIT_SECONDS = 60.0


def _refused(_question: str) -> bool:
    """The default confirmation: no (a question nobody can answer is a refusal)."""
    return False


def _already_confirmed(_question: str) -> bool:
    """lab.up asks before anything changes, so scale() must not ask again."""
    return True


class LifecycleError(LabError):
    """A lab command could not go on; the message says what to do."""


class NotRecorded(LifecycleError):
    """The backend change was made, but the lab's files could not record it (a full disk)."""


class AfterRevert(LifecycleError):
    """A reverter reverted every fault, then a step after it failed (recording a practice
    exercise as abandoned): the faults are not named as left in."""


class ZeroWithGaps(LifecycleError):
    """The GPU node group reads desiredSize 0, but a step after the scale (following the
    update, watching the nodes leave) could not be done; the message names each."""


# --- opening and creating labs -----------------------------------------------------


def open_or_create(settings: LabSettings, sim: bool) -> tuple[Lab, bool]:
    """The lab named in settings, or a new record on the requested backend (not yet saved)."""
    try:
        lab = Lab.open(settings)
    except LabNotFound:
        check_region_exists(settings)
        return Lab.create(settings, REHEARSAL if sim else AWS), True
    lab.backend.check_writable(lab, "lab.up")
    if sim and lab.backend.name != REHEARSAL:
        raise LifecycleError(
            f"lab {lab.name!r} already exists on the {lab.backend.name} backend; drop --sim, "
            "or pick another --lab name for a rehearsal"
        )
    return lab, False


def full_variables(lab: Lab, **changes: Any) -> dict[str, Any]:
    """The lab's full current variable set with `changes` on top (never a partial set).

    Every variable keeps the value last applied (a scenario's toggle, lab.down's revert never
    reset the operator or monitoring); one the lab's record lacks (a lab applied before the
    variable existed, so Terraform used its default) comes from the settings.
    """
    base = {**lab.settings.stack_variables(operator_enabled=False), **lab.variables}
    base[stack.GPU_OPERATOR_CHART_VERSION] = lab.settings.chart_version
    return {**base, **changes}


def up_variables(lab: Lab, **changes: Any) -> dict[str, Any]:
    """What lab.up applies: like the operator, the `monitoring` setting (--monitoring) turns
    monitoring on; without it the lab keeps what was last applied (a new lab: off)."""
    if lab.settings.monitoring:
        changes = {stack.ENABLE_MONITORING: True, **changes}
    return full_variables(lab, **changes)


# --- lab.up ------------------------------------------------------------------------


def up(
    settings: LabSettings,
    sim: bool,
    dry_run: bool,
    console: Console,
    confirm: Confirm = _refused,
    keep_later: bool = True,
) -> Lab:
    """Bring the lab up (or finish bringing it up); see the module docstring for the order.

    `confirm` is asked (before anything changes) only when the GPU time limit is off;
    `keep_later`: no --ttl given, so a later running time limit stays (time_limit.arm).
    """
    lab, new = open_or_create(settings, sim)
    if dry_run:
        _print_up_plan(lab, new, console)
        return lab
    time_limit.confirm_off(settings, settings.gpus, confirm)
    with lab_lock(lab, "lab.up"):
        _up(lab, new, console, keep_later)
    return lab


def _up(lab: Lab, new: bool, console: Console, keep_later: bool) -> None:
    with console.phase(f"preflight ({lab.backend.name} backend, lab {lab.name!r})"):
        lab.backend.start(lab, console)
        if new:
            lab.journal.start()
    with lab.backend.program_pace(lab):
        _bring_up(lab, lab.settings, console, keep_later)


def _bring_up(lab: Lab, settings: LabSettings, console: Console, keep_later: bool) -> None:
    _apply(lab, up_variables(lab), "base infrastructure (GPU nodes 0, operator off)", console)
    with console.phase("lab kubeconfig"):
        _write_kubeconfig(lab, console)
        check_lab_target(lab, cluster=True, account=True)
    if settings.operator:
        _apply(lab, up_variables(lab, **{stack.ENABLE_GPU_OPERATOR: True}), "GPU Operator", console)
        with console.phase("wait for the ClusterPolicy to be ready"):
            _wait_operator_ready(lab, console)
    scale(lab, settings.gpus, console, confirm=_already_confirmed, keep_later=keep_later)
    if settings.operator and settings.gpus > 0:
        # New nodes turn the ClusterPolicy notReady until every operand runs on them.
        with console.phase("wait for the ClusterPolicy to be ready on the GPU nodes"):
            _wait_operator_ready(lab, console)
        with console.phase("GPU probe (nvidia-smi on a GPU node)"):
            _run_probe(lab, console)
    _print_billing(lab, console)


def _print_up_plan(lab: Lab, new: bool, console: Console) -> None:
    """What lab.up would do: read-only checks, the infra plan and the API calls."""
    s = lab.settings
    console.say(
        f"Dry run for lab {lab.name!r} on the {lab.backend.name} backend: nothing is changed."
    )
    wanted = up_variables(lab, **{stack.ENABLE_GPU_OPERATOR: s.operator})
    if lab.backend.preview(lab, new, console):
        lines = lab.infra().plan(wanted)
        console.say(
            "  infrastructure plan: " + (f"{len(lines)} change(s)" if lines else "no changes")
        )
        for line in lines:
            console.say(f"    {line}")
    console.say("  variables: " + ", ".join(f"{k}={v}" for k, v in sorted(wanted.items())))
    cluster = lab.cluster_name
    if s.gpus:
        console.say(f"  {time_limit.plan(s)}")
    console.say(
        f"  would call eks.update_nodegroup_config(clusterName={cluster!r}, nodegroupName="
        f"{stack.gpu_node_group_name(cluster)!r}, scalingConfig={{'minSize': 0, 'maxSize': "
        f"{s.gpu_max}, 'desiredSize': {s.gpus}}})"
    )
    gpus = "with allocatable nvidia.com/gpu 1" if s.operator else "(no operator)"
    console.say(f"  would wait for {s.gpus} Ready GPU node(s) {gpus}")
    if s.operator and s.gpus:
        console.say(
            "  would wait for the ClusterPolicy to be ready on them, then run the GPU probe"
        )


def _apply(
    lab: Lab, variables: dict[str, Any], title: str, console: Console, trust_record: bool = True
) -> None:
    """Apply `variables`; lab.up skips when the record says so, a change never does (a killed
    apply leaves the record saying what the backend no longer has)."""
    with console.phase(title):
        done = trust_record and lab.phase_done("infra") and lab.variables == variables
        applied = done and stack.STACK_OUTPUTS <= set(lab.outputs)  # else a stack version ago
        if applied and _gpu_group_exists(lab, console):
            console.say("    already applied with these variables; skipping")
            return
        if lab.phase_done("infra"):
            check_lab_target(lab, cluster=False, account=True)
        changes = lab.infra().plan(variables)
        for line in changes:
            console.say(f"    {line}")
        outputs = lab.infra().apply(variables)
        lab.update(variables=variables, outputs=outputs, region=outputs.get("region", lab.region))
        lab.mark_phase("infra")


def _gpu_group_exists(lab: Lab, console: Console) -> bool:
    """The backend still has the GPU node group (it may have been deleted out of band)."""
    from labs.aws.cloud import NodegroupNotFound, describe_gpu_nodegroup

    cluster, nodegroup = gpu_nodegroup(lab)
    try:
        describe_gpu_nodegroup(lab.aws_client("eks"), cluster, nodegroup)
    except NodegroupNotFound:
        console.say(
            f"    GPU node group {nodegroup} of cluster {cluster} is gone from the backend: "
            "applying again to re-create it"
        )
        return False
    return True


def apply_changes(lab: Lab, changes: dict[str, Any], console: Console) -> None:
    """Apply the lab's full variable set with `changes` on top (e.g. a security-group toggle).

    Never a partial set: a toggle change must not uninstall the operator or reset another
    toggle, so every other variable keeps the value last applied. Always applied, whatever
    the record says (terraform is idempotent): a revert must reach the backend's reality.
    """
    unknown = set(changes) - stack.ORCHESTRATOR_VARIABLES
    if unknown:
        raise LifecycleError(
            f"unknown stack variables {sorted(unknown)}; known: "
            f"{', '.join(sorted(stack.ORCHESTRATOR_VARIABLES))}"
        )
    title = "apply " + ", ".join(f"{name}={value}" for name, value in sorted(changes.items()))
    _apply(lab, full_variables(lab, **changes), title, console, trust_record=False)


def _write_kubeconfig(lab: Lab, console: Console) -> None:
    lab.backend.write_kubeconfig(lab)
    lab.__dict__.pop("kube", None)  # rebuild the client from the new file
    console.say(
        f'    {lab.paths.kubeconfig} (use it by hand: eval "$(invoke lab.env --lab {lab.name})")'
    )


def _wait_operator_ready(lab: Lab, console: Console) -> None:
    def ready(view: ClusterView) -> dict[str, Any] | None:
        policy = cluster_policy(view)
        return policy if policy_state(policy) == "ready" else None

    def describe(view: ClusterView) -> str:
        return f"ClusterPolicy state: {policy_state(cluster_policy(view))}"

    with lab.view() as view:
        policy = view.wait_for(
            ready, lab.settings.operator_ready_timeout, "GPU Operator ClusterPolicy ready",
            describe, console.waiter(lambda: describe(view)),
        )  # fmt: skip
    conditions = (policy.get("status") or {}).get("conditions") or []
    reasons = ", ".join(c["reason"] for c in conditions if c.get("reason")) or "no conditions"
    console.say(f"    ClusterPolicy {policy['metadata']['name']}: ready ({reasons})")


# --- lab.scale ------------------------------------------------------------------------


def gpu_nodegroup(lab: Lab) -> tuple[str, str]:
    """(cluster, GPU node group) names of the lab."""
    return lab.cluster_name, lab.gpu_node_group


def request_gpu_nodes(
    lab: Lab, count: int, console: Console | None = None, keep_later: bool = True
) -> str | None:
    """Ask EKS for `count` GPU nodes (minSize 0, maxSize the group's max, desiredSize `count`)
    once the target is checked to be the lab's own; N > 0 sets (or moves) the GPU time limit
    first, keeping a later one when `keep_later`. Returns the EKS update id, None when the
    group already is so.

    Returns at once: the nodes come (or go) later. `lab.scale` and scenarios both scale here.
    """
    from labs.aws.cloud import scale_gpu_nodegroup

    maximum = gpu_max(lab)
    if not 0 <= count <= maximum:
        raise SettingsError(
            f"cannot scale lab {lab.name!r} to {count} GPU node(s): use 0 to {maximum} "
            f"(the GPU node group's max size, a G/VT vCPU-quota guard)"
        )
    cluster, nodegroup = gpu_nodegroup(lab)
    # The node group is an AWS resource: the account, the cluster's ARN, region and recorded
    # endpoint prove it is the lab's, so scaling to 0 needs nothing of Kubernetes (a refused
    # kubeconfig or a dead API server must never keep GPUs billing). Scaling up also needs a
    # kubeconfig that reaches the lab's own cluster, named if it does not.
    check_lab_target(lab, cluster=count > 0 and lab.paths.kubeconfig.exists(), account=True)
    if count > 0:
        time_limit.arm(lab, maximum, console or Console(), keep_later)
    update = scale_gpu_nodegroup(lab.aws_client("eks"), cluster, nodegroup, count, maximum)
    if update and count > 0:
        _record_scale_time(lab, nodegroup, count)
    return update


def gpu_max(lab: Lab) -> int:
    """The GPU node group's max size (the stack variable applied, else the setting)."""
    return int(lab.variables.get(stack.GPU_MAX_SIZE, lab.settings.gpu_max))


def scale(
    lab: Lab, count: int, console: Console, confirm: Confirm = _refused, keep_later: bool = True
) -> None:
    """Scale the GPU node group through the EKS API and wait until the nodes are there or gone
    (the world at the program's pace meanwhile).

    N > 0 sets (or moves) the GPU time limit first, unless `keep_later` and a later one runs;
    0 deletes it once the nodes are gone (so a failure to delete it never stops the cost
    guard half-way).
    """
    time_limit.confirm_off(lab.settings, count, confirm)
    # The cost guard (to 0) must run on a full or read-only disk: it records afterwards.
    with lab_lock(lab, f"lab.scale {count}", writable=count > 0), lab.backend.program_pace(lab):
        _scale(lab, count, console, keep_later)


def _scale(lab: Lab, count: int, console: Console, keep_later: bool) -> None:
    cluster, nodegroup = gpu_nodegroup(lab)
    with console.phase(f"scale GPU node group {nodegroup} to {count} (EKS API)"):
        update = request_gpu_nodes(lab, count, console, keep_later)
        console.say(
            f"    scalingConfig minSize=0 maxSize={gpu_max(lab)} desiredSize={count}"
            + ("" if update else " (already so; no API call)")
        )
    if count == 0:
        _after_zero(lab, update, console)
        return
    if update:
        _follow_update(lab, nodegroup, update, console)
    if lab.paths.kubeconfig.exists():
        _wait_gpu_nodes(lab, count, console)


def _after_zero(lab: Lab, update: str | None, console: Console) -> None:
    """desiredSize is 0 in AWS: follow the update, watch the nodes leave, wait for billing to
    stop and delete the time limit, each step tried whatever the one before met; ZeroWithGaps
    names what could not be done."""
    cluster, nodegroup = gpu_nodegroup(lab)
    gaps: list[str] = []
    try:
        if update:
            _follow_update(lab, nodegroup, update, console)
    except LabError as error:
        gaps.append(str(error))
    else:
        try:
            _watch_nodes_leave(lab, console)
        except LabError as error:
            ailing = "".join(f"; {why}" for why in lab.backend.ailing(lab))
            gaps.append(f"could not watch the GPU nodes leave through Kubernetes: {error}{ailing}")
        _wait_billing_stopped(lab, cluster, nodegroup, console)
    unrecorded = None
    try:
        time_limit.disarm(lab, console)
    except StateWriteError as error:
        unrecorded = (
            f"its time limit is deleted, but the lab's record could not say so: {error}. Free "
            f"space there and run `invoke lab.down --lab {lab.name}` again to record it"
        )
    if gaps:
        raise ZeroWithGaps(
            f"GPU node group {nodegroup} reads desiredSize 0 (the EKS API took it), but "
            + "; ".join([*gaps, *filter(None, [unrecorded])])
        )
    if unrecorded:
        raise NotRecorded(f"GPU node group {nodegroup} is at 0 and {unrecorded}")


def _watch_nodes_leave(lab: Lab, console: Console) -> None:
    """Through the lab's own kubeconfig only (a kubeconfig at another cluster is not read as
    the lab's); LabError naming the file or server when Kubernetes cannot be read."""
    from labs.guard import check_cluster

    if not lab.paths.kubeconfig.exists() and not lab.outputs.get("cluster_endpoint"):
        return  # the lab never got as far as its cluster
    check_cluster(lab, reading=True)
    _wait_gpu_nodes(lab, 0, console)


def _follow_update(lab: Lab, nodegroup: str, update_id: str, console: Console) -> None:
    """Until EKS says the update succeeded; a failed one stops here with AWS's own error, one
    still running after EKS's own time for it says what is known."""
    from labs.aws.cloud import WaitExpired, follow_update

    limit = max(EKS_UPDATE_SECONDS / lab.speed, MIN_UPDATE_WAIT_SECONDS)

    def waiting(elapsed: float, status: str) -> None:
        console.progress(f"[{elapsed:5.0f} s of {limit:.0f} s] EKS update {update_id}: {status}")

    with console.phase(f"follow EKS update {update_id} of {nodegroup}"):
        try:
            update = follow_update(
                lab.aws_client("eks"), lab.cluster_name, nodegroup, update_id, timeout=limit,
                poll_interval=max(UPDATE_POLL_SECONDS / lab.speed, MIN_UPDATE_POLL_SECONDS),
                on_wait=waiting,
            )  # fmt: skip
        except WaitExpired:
            raise LifecycleError(_update_stuck(lab, nodegroup, update_id, limit)) from None
        console.say(f"    {update['status']}")


def _update_stuck(lab: Lab, nodegroup: str, update_id: str, limit: float) -> str:
    """What is known of an update EKS has not finished in its time: the group read back, its
    instances, and (on a rehearsal) what keeps the world from moving."""
    from labs.aws.cloud import describe_gpu_nodegroup, nodegroup_instances

    facts = [f"EKS update {update_id} of {nodegroup} is still InProgress after {limit:.0f} s "
             "(EKS finishes a scaling update within about 15 minutes)"]  # fmt: skip
    try:
        group = describe_gpu_nodegroup(lab.aws_client("eks"), lab.cluster_name, nodegroup)
        running = nodegroup_instances(lab.aws_client("ec2"), lab.cluster_name, nodegroup)
        facts.append(
            f"the node group reads desiredSize {group['desired_size']} with "
            f"{len(running)} instance(s) still running ({', '.join(running) or 'none'})"
        )
    except LabError as error:
        facts.append(f"the node group could not be read back ({error})")
    if ailing := lab.backend.ailing(lab):
        facts.append(f"the lab's cluster cannot move: {'; '.join(ailing)}")
    return "; ".join(facts) + (
        f". `aws eks describe-update --name {lab.cluster_name} --nodegroup-name {nodegroup} "
        f"--update-id {update_id}` follows it"
    )


def _record_scale_time(lab: Lab, nodegroup: str, count: int) -> None:
    """Remember when GPUs started billing; a failed write says so, the scale itself stands."""
    try:
        lab.update(gpu_scaled_at=lab.backend.now(lab).isoformat())
    except StateWriteError as error:
        raise LifecycleError(
            f"node group {nodegroup} was scaled to {count}, but its start time could not be "
            f"recorded: {error}. The nodes bill from now on; GPU node-minutes will not be "
            f"shown. Scale back with `invoke lab.scale 0 --lab {lab.name}` when done."
        ) from error


def _wait_gpu_nodes(lab: Lab, count: int, console: Console) -> None:
    operator = bool(lab.variables.get(stack.ENABLE_GPU_OPERATOR))
    if count == 0:
        title = "wait until no GPU node remains"

        def check(view: ClusterView) -> bool:
            return not gpu_nodes(view)
    elif operator:
        title = f"wait for {count} Ready GPU node(s) with allocatable nvidia.com/gpu 1"

        def check(view: ClusterView) -> bool:
            return len(gpu_nodes(view)) == count == len(schedulable_gpu_nodes(view))
    else:
        title = f"wait for {count} Ready GPU node(s) (no operator: GPUs not advertised)"

        def check(view: ClusterView) -> bool:
            return len(gpu_nodes(view)) == count == len(ready_gpu_nodes(view))

    with console.phase(title), lab.view() as view:
        view.wait_for(
            check, lab.settings.node_ready_timeout, title, describe_gpu_nodes,
            console.waiter(lambda: describe_gpu_nodes(view)),
        )  # fmt: skip
        console.say(f"    {describe_gpu_nodes(view)}")


def _run_probe(lab: Lab, console: Console) -> None:
    from labs.kube.probes import run_probe

    with lab.view() as view:
        probe = run_probe(lab, view, timeout=lab.settings.probe_timeout)
    console.say(f"    {probe.name} on {probe.node}: {probe.gpu_line}")


def _print_billing(lab: Lab, console: Console) -> None:
    from labs.billing import describe_session, gpu_session

    with lab.view() as view:
        session = gpu_session(lab, len(gpu_nodes(view)))
    if session is not None:
        console.say(f"GPU node-minutes so far: {describe_session(session, lab)}")


# --- lab.down --------------------------------------------------------------------------

# How long lab.down waits for a scenario run it asked to stop (revert, then its report).
RUN_STOP_SECONDS = 120.0


def down(
    settings: LabSettings,
    destroy: bool,
    confirm: Callable[[str], bool],
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
        raise LifecycleError(
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
    """The record lost the stack's outputs: read them back from the backend."""
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
        _wait_billing_stopped(lab, cluster, nodegroup, console)
    except LabError as error:
        problems.append(f"instances of the deleted GPU {where} may still run: {error}")
        return None
    return f"GPU {where} does not exist"


def _wait_billing_stopped(lab: Lab, cluster: str, nodegroup: str, console: Console) -> None:
    """On a backend that bills, wait until no instance of the node group runs."""
    if lab.backend.bills:
        with console.phase(f"wait until no EC2 instance of {nodegroup} runs (billing stops)"):
            lab.backend.wait_billing_stopped(lab, cluster, nodegroup)


def _destroy(
    lab: Lab, confirm: Callable[[str], bool], console: Console, problems: list[str]
) -> None:
    question = f"Destroy lab {lab.name!r} ({lab.backend.name}) and everything in it?"
    if not confirm(question):
        raise LifecycleError(
            "not destroyed: confirmation refused (pass --yes to skip the question)"
        )
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
        raise LifecycleError(
            "not destroyed: confirmation refused (pass --yes to skip the question)"
        )
    failed: dict[str, str] = {}
    for name in names:
        console.say(f"=== lab {name}")
        try:
            down(replace(settings, lab=name), destroy, _already_confirmed, revert, console)
        except Exception as error:  # noqa: BLE001 - the cost guard goes on with the next lab
            failed[name] = explain(error)
            console.say(f"    lab {name} failed: {failed[name]}")
    done = [name for name in names if name not in failed]
    console.say(f"lab.down --all: {len(done)} of {len(names)} done ({', '.join(done) or 'none'})")
    if failed:
        raise LifecycleError(
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
            shutil.rmtree(entry)
        else:
            entry.unlink()
    if not any(lab.paths.root.iterdir()):
        lab.paths.root.rmdir()
