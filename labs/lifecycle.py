"""lab.up, lab.scale and lab.down: the study group's weekly routine, in the right order.

Order of lab.up (DOMAIN.md "Deploy order", reordered so no GPU bills while the
operator installs): base infra with 0 GPU nodes and the operator off -> the lab's
own kubeconfig -> operator on while there are still no GPU nodes, wait for its
ClusterPolicy -> only then scale the GPU node group through the EKS API (never
through the Terraform variable, which the node group ignores after creation) ->
wait until every GPU is schedulable -> run the GPU probe. Every step checks what is
already done first, so re-running is safe and cheap.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from labs.aws import stack
from labs.backends import AWS, REHEARSAL
from labs.console import Console
from labs.errors import LabError
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
from labs.lab import Lab, LabNotFound
from labs.settings import LabSettings, SettingsError

Reverter = Callable[[Lab, Console], list[str]]


class LifecycleError(LabError):
    """A lab command could not go on; the message says what to do."""


# --- opening and creating labs -----------------------------------------------------


def open_or_create(settings: LabSettings, sim: bool) -> tuple[Lab, bool]:
    """The lab named in settings, or a new record on the requested backend (not yet saved)."""
    try:
        lab = Lab.open(settings)
    except LabNotFound:
        return Lab.create(settings, REHEARSAL if sim else AWS), True
    lab.backend.check_writable(lab, "lab.up")
    if sim and lab.backend.name != REHEARSAL:
        raise LifecycleError(
            f"lab {lab.name!r} already exists on the {lab.backend.name} backend; drop --sim, "
            "or pick another --lab name for a rehearsal"
        )
    return lab, False


def _variables(lab: Lab, **changes: Any) -> dict[str, Any]:
    """The lab's full current variable set with `changes` on top (never a partial set)."""
    base = lab.variables or lab.settings.stack_variables(operator_enabled=False)
    base[stack.GPU_OPERATOR_CHART_VERSION] = lab.settings.chart_version
    return {**base, **changes}


# --- lab.up ------------------------------------------------------------------------


def up(settings: LabSettings, sim: bool, dry_run: bool, console: Console) -> Lab:
    """Bring the lab up (or finish bringing it up); see the module docstring for the order."""
    lab, new = open_or_create(settings, sim)
    if dry_run:
        _print_up_plan(lab, new, console)
        return lab
    with console.phase(f"preflight ({lab.backend.name} backend, lab {lab.name!r})"):
        lab.backend.start(lab, console)
    _apply(lab, _variables(lab), "base infrastructure (GPU nodes 0, operator off)", console)
    with console.phase("lab kubeconfig"):
        _write_kubeconfig(lab, console)
        check_lab_target(lab, cluster=True, account=True)
    if settings.operator:
        _apply(lab, _variables(lab, **{stack.ENABLE_GPU_OPERATOR: True}), "GPU Operator", console)
        with console.phase("wait for the ClusterPolicy to be ready"):
            _wait_operator_ready(lab, console)
    scale(lab, settings.gpus, console)
    if settings.operator and settings.gpus > 0:
        with console.phase("GPU probe (nvidia-smi on a GPU node)"):
            _run_probe(lab, console)
    _print_billing(lab, console)
    return lab


def _print_up_plan(lab: Lab, new: bool, console: Console) -> None:
    """What lab.up would do: read-only checks, the infra plan and the API calls."""
    s = lab.settings
    console.say(
        f"Dry run for lab {lab.name!r} on the {lab.backend.name} backend: nothing is changed."
    )
    wanted = _variables(lab, **{stack.ENABLE_GPU_OPERATOR: s.operator})
    if lab.backend.preview(lab, new, console):
        lines = lab.infra().plan(wanted)
        console.say(
            "  infrastructure plan: " + (f"{len(lines)} change(s)" if lines else "no changes")
        )
        for line in lines:
            console.say(f"    {line}")
    console.say("  variables: " + ", ".join(f"{k}={v}" for k, v in sorted(wanted.items())))
    cluster = lab.cluster_name
    console.say(
        f"  would call eks.update_nodegroup_config(clusterName={cluster!r}, nodegroupName="
        f"{stack.gpu_node_group_name(cluster)!r}, scalingConfig={{'minSize': 0, 'maxSize': "
        f"{s.gpu_max}, 'desiredSize': {s.gpus}}})"
    )
    gpus = "with allocatable nvidia.com/gpu 1" if s.operator else "(no operator)"
    console.say(f"  would wait for {s.gpus} Ready GPU node(s) {gpus}")


def _apply(lab: Lab, variables: dict[str, Any], title: str, console: Console) -> None:
    with console.phase(title):
        if lab.phase_done("infra") and lab.variables == variables and lab.outputs:
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


def apply_changes(lab: Lab, changes: dict[str, Any], console: Console) -> None:
    """Apply the lab's full variable set with `changes` on top (e.g. a security-group toggle).

    Never a partial set: a toggle change must not uninstall the operator or reset another
    toggle, so every other variable keeps the value last applied.
    """
    unknown = set(changes) - stack.ORCHESTRATOR_VARIABLES
    if unknown:
        raise LifecycleError(
            f"unknown stack variables {sorted(unknown)}; known: "
            f"{', '.join(sorted(stack.ORCHESTRATOR_VARIABLES))}"
        )
    title = "apply " + ", ".join(f"{name}={value}" for name, value in sorted(changes.items()))
    _apply(lab, _variables(lab, **changes), title, console)


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


def _gpu_nodegroup(lab: Lab) -> tuple[str, str]:
    cluster = lab.cluster_name
    return cluster, str(
        lab.outputs.get("gpu_node_group_name") or stack.gpu_node_group_name(cluster)
    )


def scale(lab: Lab, count: int, console: Console) -> None:
    """Scale the GPU node group through the EKS API and wait until the nodes are there or gone."""
    from labs.aws.cloud import scale_gpu_nodegroup

    maximum = int(lab.variables.get(stack.GPU_MAX_SIZE, lab.settings.gpu_max))
    if not 0 <= count <= maximum:
        raise SettingsError(
            f"cannot scale lab {lab.name!r} to {count} GPU node(s): use 0 to {maximum} "
            f"(the GPU node group's max size, a G/VT vCPU-quota guard)"
        )
    cluster, nodegroup = _gpu_nodegroup(lab)
    with console.phase(f"scale GPU node group {nodegroup} to {count} (EKS API)"):
        check_lab_target(lab, cluster=lab.paths.kubeconfig.exists(), account=True)
        changed = scale_gpu_nodegroup(lab.aws_client("eks"), cluster, nodegroup, count, maximum)
        console.say(
            f"    scalingConfig minSize=0 maxSize={maximum} desiredSize={count}"
            + ("" if changed else " (already so; no API call)")
        )
        if changed and count > 0:
            lab.update(gpu_scaled_at=datetime.now(UTC).isoformat())
    if lab.paths.kubeconfig.exists():
        _wait_gpu_nodes(lab, count, console)
    if count == 0 and lab.backend.bills:
        with console.phase(f"wait until no EC2 instance of {nodegroup} runs (billing stops)"):
            lab.backend.wait_billing_stopped(lab, cluster, nodegroup)


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
    from labs.aws.pricing import gpu_node_minutes_cost

    started = lab.record.get("gpu_scaled_at")
    if not started:
        return
    with lab.view() as view:
        nodes = gpu_nodes(view)
    elapsed_s = (datetime.now(UTC) - datetime.fromisoformat(started)).total_seconds()
    elapsed_min = elapsed_s * lab.speed / 60  # real-cluster minutes
    node_minutes = elapsed_min * len(nodes)
    cost = gpu_node_minutes_cost(lab.region, lab.settings.gpu_instance_type, node_minutes)
    where = "billed"
    if not lab.backend.bills:
        where = f"{lab.backend.describe(lab)}: nothing billed; on AWS this would be"
    console.say(
        f"GPU node-minutes so far: {node_minutes:.1f} ({len(nodes)} x {elapsed_min:.1f} min), "
        f"{where} ~${cost:.2f} (estimate, {lab.settings.gpu_instance_type} on-demand "
        f"in {lab.region})"
    )


# --- lab.down --------------------------------------------------------------------------


def down(
    settings: LabSettings,
    destroy: bool,
    confirm: Callable[[str], bool],
    revert: Reverter,
    console: Console,
) -> None:
    """Revert injected faults, scale GPUs to 0 and wait, then (on request) destroy everything."""
    try:
        lab = Lab.open(settings)
    except LabNotFound:
        console.say(
            f"lab {settings.lab!r} does not exist under {settings.state_dir}: nothing to do"
        )
        return
    lab.backend.check_writable(lab, "lab.down")
    running = lab.backend.reachable(lab)
    unreverted = _revert_journal(lab, revert, console) if running else []
    if running and lab.phase_done("infra"):
        scale(lab, 0, console)
    if not destroy:
        console.say(lab.backend.idle_message(lab, running))
        if unreverted:
            raise LifecycleError(
                f"GPU nodes are at 0, but these faults could not be reverted: "
                f"{', '.join(unreverted)}; fix the cause above and run "
                f"`invoke scenario.revert --all --lab {lab.name}`"
            )
        return
    question = f"Destroy lab {lab.name!r} ({lab.backend.name}) and everything in it?"
    if not confirm(question):
        raise LifecycleError(
            "not destroyed: confirmation refused (pass --yes to skip the question)"
        )
    with console.phase(f"destroy lab {lab.name!r}"):
        lab.backend.destroy(lab, console)
        _remove_state_keeping_reports(lab)
    kept = f"; its reports stay in {lab.paths.runs_dir}" if lab.paths.runs_dir.exists() else ""
    console.say(f"lab {lab.name!r} is gone{kept}")


def _revert_journal(lab: Lab, revert: Reverter, console: Console) -> list[str]:
    """Revert what the journal lists; return the faults still in (the cost guard goes on)."""
    if not lab.journal.outstanding():
        return []
    with console.phase("revert injected faults (journal)"):
        try:
            for name in revert(lab, console):
                console.say(f"    reverted {name}")
        except LabError as error:
            console.say(f"    could not revert: {error}")
    return [entry["scenario"] for entry in lab.journal.outstanding()]


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
