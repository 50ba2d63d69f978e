"""lab.up: the lab's stack, its kubeconfig, the operator, then the GPUs, in that order.

Order of lab.up (the write-ups' deploy order, reordered so no GPU bills while the
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

from typing import Any

from labs import time_limit
from labs.aws import stack
from labs.backends import AWS, REHEARSAL
from labs.commands.scale import Confirm, already_confirmed, gpu_nodegroup, refused, scale
from labs.console import Console
from labs.errors import CommandError
from labs.guard import check_lab_target
from labs.kube.gpu import (
    cluster_policy,
    gpu_nodes,
    policy_state,
)
from labs.kube.view import ClusterView
from labs.lab import Lab, LabNotFound
from labs.lock import lab_lock
from labs.settings import LabSettings, check_region_exists

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
        raise CommandError(
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
    confirm: Confirm = refused,
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
    scale(lab, settings.gpus, console, confirm=already_confirmed, keep_later=keep_later)
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
        raise CommandError(
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
