"""Switch both node-to-node security-group toggles off: NCCL between the GPU nodes is blocked.

With `enable_aux_sg_vpc_allow=false` and `node_sg_enable_recommended_rules=false` the stack
drops the auxiliary SG's all-traffic rule from the VPC and the node SG's ephemeral self rule
(tcp 1025-65535). Two pods on two GPU nodes can then no longer open a connection to each
other: the all-reduce job's rendezvous on port 29500 times out first (rank 1
`DistNetworkError: The client socket has timed out ...`, rank 0 `DistStoreError: Timed out
after N seconds waiting for clients. 1/2 clients joined.`), while DNS, `kubectl logs` and
pods on one node still work. A TCP check from the same node and from the other node tells
the network from NCCL; the SG rules tell which rule went; the lab's toggles tell why.

Security groups are stateful: a connection made before the rules went survives, so the fault
goes in before any workload starts. The recommended rules also carry the webhook ports, so
admission webhooks may fail while it is in: read the plan, keep the window short.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any, TypeVar

from labs.aws import node_network, stack
from labs.aws.node_network import NodeRules, every_rule, node_rules
from labs.commands.up import apply_changes, full_variables
from labs.console import Console
from labs.errors import LabError
from labs.kube import gpu, probes, workloads
from labs.kube.verdicts import AllReduceVerdict, allreduce_verdict, tcp_verdict
from labs.kube.view import ClusterView
from labs.lab import Lab
from labs.run.contract import Cause, Check, Context, Facts, Finding, Needs, Trap, Verdict

V = TypeVar("V")

TOGGLES = (stack.ENABLE_AUX_SG_VPC_ALLOW, stack.NODE_SG_ENABLE_RECOMMENDED_RULES)
SAME, CROSS = "tcp-check-same-node", "tcp-check-cross-node"
# Real-cluster seconds: the job's rendezvous timeout is 60 s, its NCCL deadline 240 s.
RUN_LIMIT = 420.0
SLOWER_BY_AT_MOST = 3.0  # a recovered all-reduce's busbw is within this factor of baseline
BLOCKED = "cross-node TCP check times out while the same-node one connects"
RENDEZVOUS = "all-reduce fails within its bound: rendezvous timeout on both ranks"
traps = [
    Trap("a broken network makes NCCL fail fast", "an error within seconds",
         "each blocked connect waits for the kernel's ~130 s SYN timeout and NCCL retries "
         "34 times by default: over an hour of hanging",
         "bound it yourself: a short init_process_group timeout, NCCL_SOCKET_RETRY_CNT, a "
         "deadline, activeDeadlineSeconds (the lab's job does all four)", shown_by=RENDEZVOUS),
    Trap("removing a rule cuts running jobs", "an SG change breaks live connections",
         "security groups are stateful: established connections live on",
         "a fault injected mid-run shows nothing; start the workload after the change"),
    Trap("only NCCL ports are affected", "the toggles touch node-to-node traffic only",
         "the node SG's recommended rules also open the webhook ports from the control plane",
         "admission webhooks (the operator's, a load balancer controller's) can time out "
         "while the fault is in: keep the window short"),
]  # fmt: skip


def _variables(on: bool) -> dict[str, Any]:
    return dict.fromkeys(TOGGLES, on)


def _run_limit(lab: Lab) -> float:
    return lab.settings.probe_timeout + RUN_LIMIT / lab.speed


def _tcp(lab: Lab, view: ClusterView) -> dict[str, str]:
    """Run the TCP check pair; each client's verdict line, by pod name."""
    try:
        workloads.start(lab, workloads.TCP_CHECK, _run_limit(lab))
        runs = workloads.wait_finished(lab, view, workloads.TCP_CHECK, _run_limit(lab))
    finally:
        workloads.remove(lab, workloads.TCP_CHECK, _run_limit(lab))
    return {name: tcp_verdict(run.log).outcome for name, run in runs.items()}


def _allreduce(lab: Lab, view: ClusterView) -> dict[str, workloads.PodRun]:
    try:
        workloads.start(lab, workloads.ALLREDUCE, _run_limit(lab))
        return workloads.wait_finished(lab, view, workloads.ALLREDUCE, _run_limit(lab))
    finally:
        workloads.remove(lab, workloads.ALLREDUCE, _run_limit(lab))


def baseline(lab: Lab, view: ClusterView) -> dict[str, Any]:
    """Read the two SG rules, run the TCP checks and the all-reduce on the healthy lab."""
    rules = node_rules(lab)
    if not (rules.self_rule and rules.vpc_rule):
        raise LabError(
            f"the node-to-node rules are not both in place ({rules.describe()}): revert first "
            f"(`invoke scenario.revert --name nccl-sg-block --lab {lab.name}`)"
        )
    tcp = _tcp(lab, view)
    runs = _allreduce(lab, view)
    verdicts = {name: allreduce_verdict(run.log) for name, run in runs.items()}
    failed = [f"{n}: {v.cause} ({v.evidence})" for n, v in verdicts.items() if not v.passed]
    if failed or any(outcome != "connected" for outcome in tcp.values()):
        raise LabError(f"the healthy lab's network checks fail already: {tcp}; {failed}")
    return {
        "rules": rules.describe(),
        "every_rule": every_rule(lab),
        "tcp": tcp,
        "nodes": sorted({run.node for run in runs.values()}),
        "busbw": min(v.busbw or 0.0 for v in verdicts.values()),
    }


def inject(lab: Lab) -> None:
    """Apply the lab's full variable set with both security-group toggles false."""
    apply_changes(lab, _variables(False), Console())


def revert(lab: Lab) -> None:
    """Apply the lab's full variable set with both toggles true (idempotent)."""
    apply_changes(lab, _variables(True), Console())


def reset(lab: Lab) -> None:
    """After a learner's whole fix by hand: their copies of the toggled rules go a moment
    before the apply with both toggles true writes them again as the stack's own."""
    if not all((lab.variables or {}).get(name, True) for name in TOGGLES):
        node_network.revoke_toggled_copies(lab)
    revert(lab)


def detect(lab: Lab, view: ClusterView) -> bool:
    """In while either node-to-node rule is missing from the security groups (read via EC2)."""
    rules = node_rules(lab)
    return not (rules.self_rule and rules.vpc_rule)


def preview(lab: Lab) -> list[str]:
    """The infrastructure plan of the injection: the two rules removed, nothing else."""
    return lab.infra().plan(full_variables(lab, **_variables(False)))


# --- symptoms and recovery ----------------------------------------------------------------


def _rules(expect_open: bool) -> Check:
    def condition(ctx: Context) -> Verdict:
        rules: NodeRules = node_rules(ctx.lab)
        held = bool(rules.self_rule and rules.vpc_rule) if expect_open else not rules.open
        return held, rules.describe()

    name = "both node-to-node rules back" if expect_open else "both node-to-node rules absent"
    return Check(name, condition, timeout=120.0, then=_start_tcp, names_cause=expect_open)


def _every_rule_back(ctx: Context) -> Verdict:
    """The fault's whole extent: every rule of both groups the baseline had (the webhook ports
    and the node group's egress went with the recommended rules, not only the NCCL ones)."""
    missing = sorted(set(ctx.baseline.get("every_rule") or []) - set(every_rule(ctx.lab)))
    return not missing, "still missing: " + "; ".join(missing) if missing else "every rule back"


def _start_tcp(ctx: Context) -> None:
    workloads.start(ctx.lab, workloads.TCP_CHECK, _run_limit(ctx.lab))


def _finished(ctx: Context, workload: workloads.Workload) -> dict[str, workloads.PodRun] | str:
    """Each finished pod's run by name, or (while any still runs) the pods' phases."""
    phases = {n: gpu.pod_phase(ctx.view, n) for n in workload.finishing()}
    if not all(p in probes.FINISHED_PHASES for p in phases.values()):
        return ", ".join(f"{n} {p}" for n, p in phases.items())
    return workloads.wait_finished(ctx.lab, ctx.view, workload, 10.0)


def _verdicts(
    ctx: Context, workload: workloads.Workload, parse: Callable[[str], V], note: str
) -> dict[str, V] | str:
    """Each finished pod's verdict by name, kept with the nodes they ran on in the run's notes
    (for `state` and the diagnosis); or (while any still runs) the pods' phases."""
    runs = _finished(ctx, workload)
    if isinstance(runs, str):
        return runs
    ctx.notes[f"{note} nodes"] = {n: run.node for n, run in runs.items()}
    ctx.notes[note] = verdicts = {n: parse(run.log) for n, run in runs.items()}
    return verdicts


def _tcp_check(expected_cross: str) -> Check:
    def condition(ctx: Context) -> Verdict:
        outcomes = _verdicts(ctx, workloads.TCP_CHECK, tcp_verdict, "tcp")
        if isinstance(outcomes, str):
            return False, outcomes
        seen = "; ".join(f"{n}: {v.evidence}" for n, v in outcomes.items())
        held = outcomes[SAME].connected and outcomes[CROSS].outcome == expected_cross
        return held, seen

    name = (
        BLOCKED if expected_cross == "timed out" else "same-node and cross-node TCP checks connect"
    )
    return Check(name, condition, timeout=RUN_LIMIT, then=_start_allreduce)


def _start_allreduce(ctx: Context) -> None:
    workloads.remove(ctx.lab, workloads.TCP_CHECK, _run_limit(ctx.lab))
    workloads.start(ctx.lab, workloads.ALLREDUCE, _run_limit(ctx.lab))


def _allreduce_check(passing: bool) -> Check:
    def condition(ctx: Context) -> Verdict:
        verdicts = _verdicts(ctx, workloads.ALLREDUCE, allreduce_verdict, "allreduce")
        if isinstance(verdicts, str):
            return False, verdicts
        seen = "; ".join(f"{n}: {v.evidence}" for n, v in verdicts.items())
        if not passing:
            return all(v.cause == "rendezvous timed out" for v in verdicts.values()), seen
        floor = ctx.baseline["busbw"] / SLOWER_BY_AT_MOST
        held = all(v.passed and (v.busbw or 0) >= floor for v in verdicts.values())
        return held, f"{seen} (baseline busbw {ctx.baseline['busbw']:.2f} GB/s)"

    if not passing:  # the failed pods stay, as after a real failure (and for the alert on
        # them); the recovery's all-reduce replaces them
        return Check(RENDEZVOUS, condition, timeout=RUN_LIMIT)
    name = "all-reduce passes again, busbw near the baseline"
    return Check(name, condition, timeout=RUN_LIMIT, then=_clean_up)


def _clean_up(ctx: Context) -> None:
    workloads.remove(ctx.lab, workloads.ALLREDUCE, _run_limit(ctx.lab))


def clean_up(lab: Lab) -> None:
    """Delete the checks' workloads that are left: the all-reduce the symptoms saw fail (kept
    for the alert on failed GPU pods) when no recovery run replaced it."""
    for workload in (workloads.TCP_CHECK, workloads.ALLREDUCE):
        workloads.remove(lab, workload, _run_limit(lab))


def _operator_still_installed(ctx: Context) -> Verdict:
    policy = gpu.cluster_policy(ctx.view)
    state = gpu.policy_state(policy)
    return state == "ready", f"ClusterPolicy state {state or 'missing'}"


symptoms = [_rules(expect_open=False), _tcp_check("timed out"), _allreduce_check(passing=False)]
recovery = [
    Check("every rule of the two security groups as in the baseline", _every_rule_back, 120.0,
          names_cause=True),
    _rules(expect_open=True),
    replace(_tcp_check("connected"), tool=True),
    replace(_allreduce_check(passing=True), tool=True),
    Check("GPU Operator still installed (the full variable set was applied)",
          _operator_still_installed, timeout=60.0, tool=True),
]  # fmt: skip


# --- diagnosis --------------------------------------------------------------------------


def diagnose(ctx: Context) -> list[Finding]:
    """Top-down: the job's logs, placement, the same-node control, the SG rules, the toggles,
    each as this run's checks saw it while the fault was in."""
    lab = ctx.lab
    rules = node_rules(lab)
    toggles = {name: (lab.variables or {}).get(name) for name in TOGGLES}
    fix = lab.infra().plan(full_variables(lab, **_variables(True)))
    return [
        Finding("1. the job's logs", "kubectl logs nccl-allreduce-0; kubectl logs nccl-allreduce-1",
                _seen(ctx, "allreduce"),
                "the rendezvous never connected: a network problem before NCCL even started",
                trap=traps[0].name),
        Finding("2. placement", "kubectl get pods -o wide -l app=nccl-allreduce",
                _placement(ctx, "allreduce nodes"),
                "two different GPU nodes (required anti-affinity): their traffic crosses the "
                "nodes' security groups"),
        Finding("3. the same-node control",
                "kubectl logs tcp-check-same-node; kubectl logs tcp-check-cross-node",
                f"{_seen(ctx, 'tcp')} ({_placement(ctx, 'tcp nodes')})",
                "same node connects, the other node times out: DNS and the pods are fine; new "
                "connections between nodes are dropped"),
        Finding("4. the SG rules", f"aws ec2 describe-security-group-rules --filters "
                f"Name=group-id,Values={rules.node_sg},{rules.aux_sg}",
                rules.describe(),
                "no rule admits tcp 1025-65535 from the other GPU node", trap=traps[2].name),
        Finding("5. the lab's toggles", f"invoke lab.status --lab {lab.name} (stack toggles)",
                ", ".join(f"{k}={v}" for k, v in toggles.items()),
                "both toggles are off: the stack removed the rules on purpose"),
        Finding("6. the fix", "terraform apply with both toggles true (invoke scenario.revert)",
                "; ".join(fix) or "no change planned",
                "one apply of the full variable set, the operator and every other setting kept; "
                "start the workload again afterwards: nothing retries a failed rendezvous",
                trap=traps[1].name),
    ]  # fmt: skip


def _seen(ctx: Context, note: str) -> str:
    """What each pod of a workload printed, as its verdict quotes it (`note`: tcp, allreduce)."""
    verdicts: dict[str, Any] = ctx.notes.get(note) or {}
    return "; ".join(f"{n}: {v.evidence}" for n, v in verdicts.items()) or f"no {note} ran"


def _placement(ctx: Context, note: str) -> str:
    nodes: dict[str, str] = ctx.notes.get(note) or {}
    return ", ".join(f"{n} on {node}" for n, node in nodes.items()) or "no pod ran"


def state(ctx: Context) -> dict[str, str]:
    """The rules, and what the latest TCP checks and all-reduce showed (the baseline's first)."""
    rules = node_rules(ctx.lab)
    tcp = ctx.notes.get("tcp")
    cross = tcp[CROSS].outcome if tcp else ctx.baseline["tcp"][CROSS]
    verdicts: dict[str, AllReduceVerdict] | None = ctx.notes.get("allreduce")
    allreduce = "passes"
    if verdicts and not all(v.passed for v in verdicts.values()):
        allreduce = "fails: " + ", ".join(sorted({v.cause for v in verdicts.values()}))
    return {
        "node-to-node rules": "present" if rules.self_rule and rules.vpc_rule else "absent",
        "cross-node TCP check": cross,
        "all-reduce": allreduce,
    }


FACTS = Facts(
    summary="security-group toggles off: NCCL between the GPU nodes is blocked",
    needs=Needs(gpu_nodes=2, operator=True),
    risk=(
        "removes the node SG's recommended rules: the ephemeral self rule, the webhook ports "
        "from the control plane (admission webhooks can fail while injected) and its egress_all "
        "rule (the aux SG's node_aux_to_anywhere keeps nodes' egress), and the aux SG's VPC "
        "rule; one terraform apply each way, the full variable set carried"
    ),
    duration="about 15 minutes on EKS (two applies, a 60 s rendezvous timeout, three workloads)",
    state=state,
    preview=preview,
    clean_up=clean_up,
    reset=reset,
    doctor_finding="sg-blocks-nccl",
    cause=Cause(
        plain="The GPU nodes' security groups lost their node-to-node rules (both lab toggles "
        "off), so NCCL traffic between the nodes is blocked.",
        names=(
            (
                "security group",
                "sg",
                "firewall",
                "ingress rule",
                "self rule",
            ),
        ),
        clues=(
            ("NCCL", "all-reduce", "allreduce", "rendezvous", "29500"),
            ("blocked", "drop", "removed", "lost", "deny", "closed"),
            ("between nodes", "cross-node", "across nodes", "node to node", "other node"),
            ("rules", "ports", "1025-65535", "ephemeral"),
        ),
    ),
    # Only the job's end shows: no metric here sees a security group.
    alerts=("GpuPodFailed",),
    area="network",
)
