"""lab.scale: the GPU node group through the EKS API, then the nodes there or gone.

GPUs are only ever asked for once the GPU time limit is set in AWS (`labs.time_limit`); each
scaling update EKS starts is followed until it succeeds or fails with AWS's own error. Scaling
to 0 needs only AWS: a refused kubeconfig or a dead API server never keeps GPUs billing.
"""

from __future__ import annotations

from collections.abc import Callable

from labs import time_limit
from labs.aws import stack
from labs.console import Console
from labs.errors import CommandError, LabError, NotRecorded
from labs.guard import check_lab_target
from labs.kube.gpu import (
    describe_gpu_nodes,
    gpu_nodes,
    ready_gpu_nodes,
    schedulable_gpu_nodes,
)
from labs.kube.view import ClusterView, WaitTimeout
from labs.lab import Lab
from labs.lock import lab_lock
from labs.settings import SettingsError
from labs.state import StateWriteError

Confirm = Callable[[str], bool]
# How often EKS updates are polled on AWS (a rehearsal divides it by its speed).
UPDATE_POLL_SECONDS = 15.0
MIN_UPDATE_POLL_SECONDS = 0.1
# How long an EKS scaling update is followed: new nodes join in 5-6 minutes, and a node being
# removed is drained for at most 15 before EKS terminates it anyway. A rehearsal divides it by
# its speed, but waits at least a minute of wall time (a busy machine slows its world).
EKS_UPDATE_SECONDS = 900.0
MIN_UPDATE_WAIT_SECONDS = 60.0


def refused(_question: str) -> bool:
    """The default confirmation: no (a question nobody can answer is a refusal)."""
    return False


def already_confirmed(_question: str) -> bool:
    """The caller asked already (lab.up before anything changes, lab.down --all once for all
    labs), so the step it calls must not ask again."""
    return True


class ZeroWithGaps(CommandError):
    """The GPU node group reads desiredSize 0, but a step after the scale (following the
    update, watching the nodes leave) could not be done; the message names each."""


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
    lab: Lab, count: int, console: Console, confirm: Confirm = refused, keep_later: bool = True
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
            why = cannot_move(lab)
            gaps.append(
                f"could not watch the GPU nodes leave through Kubernetes: {error}"
                + (f"; {why}" if why else "")
            )
        wait_billing_stopped(lab, cluster, nodegroup, console)
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
            raise CommandError(_update_stuck(lab, nodegroup, update_id, limit)) from None
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
    if stuck := cannot_move(lab):
        facts.append(stuck)
    return "; ".join(facts) + (
        f". `aws eks describe-update --name {lab.cluster_name} --nodegroup-name {nodegroup} "
        f"--update-id {update_id}` follows it"
    )


def _record_scale_time(lab: Lab, nodegroup: str, count: int) -> None:
    """Remember when GPUs started billing; a failed write says so, the scale itself stands."""
    try:
        lab.update(gpu_scaled_at=lab.backend.now(lab).isoformat())
    except StateWriteError as error:
        raise CommandError(
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
        try:
            view.wait_for(
                check, lab.settings.node_ready_timeout, title, describe_gpu_nodes,
                console.waiter(lambda: describe_gpu_nodes(view)),
            )  # fmt: skip
        except WaitTimeout as timeout:
            if stuck := cannot_move(lab):  # why the nodes could not come, where known
                raise WaitTimeout(f"{timeout}; {stuck}") from timeout
            raise
        console.say(f"    {describe_gpu_nodes(view)}")


def cannot_move(lab: Lab) -> str | None:
    """What the backend knows keeps the lab's cluster from moving (a dead program of its
    world, a kubelet that ended), said as one fact; None when it knows of nothing."""
    ailing = lab.backend.ailing(lab)
    return f"the lab's cluster cannot move: {'; '.join(ailing)}" if ailing else None


def wait_billing_stopped(lab: Lab, cluster: str, nodegroup: str, console: Console) -> None:
    """On a backend that bills, wait until no instance of the node group runs."""
    if lab.backend.bills:
        with console.phase(f"wait until no EC2 instance of {nodegroup} runs (billing stops)"):
            lab.backend.wait_billing_stopped(lab, cluster, nodegroup)
