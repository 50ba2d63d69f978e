"""Another team taints a GPU node `maintenance=true:NoExecute`: operands leave, the GPU goes dark.

DaemonSet pods tolerate only the `node.kubernetes.io/*` taints the DaemonSet controller adds,
and the operator's default daemonset toleration is `nvidia.com/gpu:NoSchedule`, so the
taint-eviction controller deletes every operand pod on that node (device plugin, GFD, DCGM
exporter, validator, the NFD worker) and the DaemonSets do not re-create them: each wants one
pod fewer. kubelet then advertises `nvidia.com/gpu: 0` there (key kept) while the node stays
Ready and the ClusterPolicy stays `ready`: a DaemonSet that wants fewer pods is fully ready.
A GPU pod pinned to the node is refused on the taint before its GPU is even counted. Removing
the taint brings the operands back; to keep GPUs on tainted nodes instead, add the toleration
to the ClusterPolicy's `spec.daemonsets.tolerations` (the operator renders it into every
operand DaemonSet).
"""

from __future__ import annotations

import json
from typing import Any

from labs.errors import LabError
from labs.kube import gpu
from labs.kube.changes import taint_node, untaint_nodes
from labs.kube.view import ClusterView
from labs.lab import Lab
from labs.run.contract import (
    ByHand,
    Cause,
    Check,
    Context,
    Facts,
    Finding,
    Needs,
    Step,
    Trap,
    Verdict,
)
from scenarios import _checks, _one_node, _words
from scenarios._node_internals import node_internals
from scenarios._one_node import PINNED, remove_pinned

KEY, VALUE, EFFECT = "maintenance", "true", "NoExecute"
EVICTION = "TaintManagerEviction"
NODE_LOOKS_ALIVE = "the tainted node stays Ready while it advertises 0 GPUs (trap)"
STAYS_READY = "ClusterPolicy status.state stays ready (trap)"
traps = [
    Trap("a Ready node has working GPUs", "a Ready node with a GPU offers it",
         'Ready, with kube-proxy and aws-node (they tolerate every taint), and nvidia.com/gpu "0"',
         "operands run only where they tolerate every taint: compare node taints with the "
         "operand DaemonSets' tolerations", shown_by=NODE_LOOKS_ALIVE),
    Trap("status.state stays ready", "notReady when an operand leaves a node", "`ready`",
         "the DaemonSets simply want one pod fewer; nothing in the ClusterPolicy is unmet",
         shown_by=STAYS_READY),
]  # fmt: skip


def baseline(lab: Lab, view: ClusterView) -> dict[str, Any]:
    """Run gpu-probe on the healthy lab; keep its output, the GPU nodes, the chosen node, the
    operand DaemonSets' desired counts and the taint-eviction Events already there."""
    tainted = [gpu.name_of(n) for n in gpu.gpu_nodes(view) if gpu.has_taint(n, KEY, EFFECT)]
    if tainted:
        raise LabError(
            f"{', '.join(tainted)} already carries {KEY}:{EFFECT}; remove it first "
            f"(`kubectl taint node NODE {KEY}:{EFFECT}-`) so the run starts from a clean lab"
        )
    facts = _one_node.one_node_baseline(lab, view)
    seen = gpu.events_with_reason(view, "operator_events", EVICTION)
    return facts | {"old_evictions": [gpu.name_of(e) for e in seen]}


def inject(lab: Lab) -> None:
    """Taint the first GPU node (by name) maintenance=true:NoExecute (kubectl taint node)."""
    taint_node(lab, _one_node.target_node(lab.snapshot("nodes")), KEY, VALUE, EFFECT)


def revert(lab: Lab) -> None:
    """Remove the taint maintenance:NoExecute from every node that has it (safe to repeat)."""
    untaint_nodes(lab, KEY, EFFECT)


def detect(lab: Lab, view: ClusterView) -> bool:
    """In while some node carries the maintenance:NoExecute taint."""
    return any(gpu.has_taint(node, KEY, EFFECT) for node in view.objects("nodes"))


# --- symptoms (T+ from the injection) --------------------------------------------------------


def plugin_evicted(ctx: Context) -> Verdict:
    old = set(ctx.baseline["old_evictions"])
    new = [
        str(e.get("message"))
        for e in gpu.events_with_reason(ctx.view, "operator_events", EVICTION)
        if gpu.name_of(e) not in old
    ]
    prefix = f"Marking for deletion Pod {ctx.lab.operator_namespace}/{gpu.DEVICE_PLUGIN_DAEMONSET}-"
    hits = [m for m in new if m.startswith(prefix)]
    return bool(hits), f"{len(new)} new {EVICTION} Event(s): {hits[0] if hits else '-'}"


def operands_left_node(ctx: Context) -> Verdict:
    node = ctx.baseline["node"]
    wanted = {name: max(n - 1, 0) for name, n in ctx.baseline["operands"].items()}
    desired = {name: counts[0] for name, counts in gpu.operand_counts(ctx.view).items()}
    still = [n for n in wanted if node in gpu.daemon_pod_nodes(ctx.view, n)]
    held = desired == wanted and not still
    return held, f"{gpu.describe_operands(ctx.view)}; still on {node}: {', '.join(still) or 'none'}"


def node_looks_alive(ctx: Context) -> Verdict:
    node = next((n for n in gpu.gpu_nodes(ctx.view) if gpu.name_of(n) == ctx.baseline["node"]), {})
    dark, seen = _one_node.only_node_dark(ctx)
    return dark and gpu.is_ready(node), f"{ctx.baseline['node']} Ready={gpu.is_ready(node)}; {seen}"


symptoms = [
    Check("operand pods on the tainted node evicted: TaintManagerEviction "
          "`Marking for deletion Pod gpu-operator/nvidia-device-plugin-daemonset-...`",
          plugin_evicted, 60),
    Check("every operand DaemonSet wants one pod fewer and none is re-created on the node",
          operands_left_node, 60),
    Check(_one_node.ONLY_NODE_DARK, _one_node.only_node_dark, 60, then=_one_node.pin_probe),
    Check(NODE_LOOKS_ALIVE, node_looks_alive, 60),
    Check("gpu-probe-pinned Pending: 1 untolerated taint(s), 3 didn't match the selector",
          _one_node.pinned_pending(gpu.UNTOLERATED_TAINT), 90),
    Check(STAYS_READY, _checks.policy_stays_ready(operands_left_node), 60),
]  # fmt: skip


# --- diagnosis: Pod -> Node -> DaemonSets -> taints vs tolerations -> evictions -> fix -------


def diagnose(ctx: Context) -> list[Finding]:
    """Pinned pod's events -> allocatable per node -> operand DaemonSets' desired counts -> node
    taints against operand tolerations -> the eviction Events -> ClusterPolicy and the fix."""
    lab, view = ctx.lab, ctx.view
    ns = lab.operator_namespace
    phase, events = gpu.pod_story(view, PINNED)
    plugin = gpu.daemonset(view)
    policy = gpu.cluster_policy(view) or {}
    evictions = [
        e
        for e in gpu.events_with_reason(view, "operator_events", EVICTION)
        if gpu.DEVICE_PLUGIN_DAEMONSET in str(e.get("message"))
    ]
    spec_tolerations = ((policy.get("spec") or {}).get("daemonsets") or {}).get("tolerations")
    return [
        Finding("1. Pod: why Pending?", f"kubectl describe pod {PINNED}",
                f"{phase}: {gpu.scheduling_failure(events)}",
                "its node has a taint it does not tolerate (1.35 names no key: read the node); "
                "the taint filter runs before GPUs are counted"),
        Finding("2. Node: GPUs per node", "kubectl get nodes -o custom-columns=NAME:.metadata.name,"
                "GPU:.status.allocatable.nvidia\\.com/gpu", gpu.describe_allocatable(view),
                "a Ready GPU node offers 0 with the key kept: its device plugin is gone",
                trap="a Ready node has working GPUs"),
        Finding("3. DaemonSets: how many pods do they want?", f"kubectl -n {ns} get ds",
                gpu.describe_operands(view),
                "every operand wants one pod fewer than there are GPU nodes, and is satisfied"),
        Finding("4. Node taints", "kubectl get nodes -o custom-columns=NAME:.metadata.name,"
                "TAINTS:.spec.taints", gpu.describe_taints(view),
                f"{KEY}={VALUE}:{EFFECT} on the dark node: someone else's taint"),
        Finding("4b. Operand tolerations", f"kubectl -n {ns} get ds {gpu.DEVICE_PLUGIN_DAEMONSET} "
                "-o jsonpath='{.spec.template.spec.tolerations}'",
                json.dumps(gpu.daemonset_tolerations(plugin)),
                "only nvidia.com/gpu (the DaemonSet controller adds node.kubernetes.io/* only): "
                "no toleration for the new taint, so no operand may run there"),
        Finding("5. Who removed the pods?",
                f"kubectl -n {ns} get events --field-selector reason={EVICTION}",
                str(evictions[-1].get("message")) if evictions else "no such Event (expired?)",
                "the taint-eviction controller deleted them; the DaemonSets do not re-create them"),
        Finding("6. ClusterPolicy and the fix", "kubectl get clusterpolicy cluster-policy -o "
                "jsonpath='{.status.state} {.spec.daemonsets.tolerations}'",
                f"{gpu.policy_state(policy)} {json.dumps(spec_tolerations)}",
                "ready (trap). Fix: remove the taint (the revert), or add "
                f'{{"key":"{KEY}","operator":"Exists","effect":"{EFFECT}"}} to '
                "spec.daemonsets.tolerations (keep the nvidia.com/gpu one) if GPUs must stay "
                "usable on tainted nodes", trap="status.state stays ready"),
        *node_internals(ctx, _one_node.target_node(view), step=7),
    ]  # fmt: skip


# --- recovery (T+ from the revert) ------------------------------------------------------------


def operands_back(ctx: Context) -> Verdict:
    wanted = dict(ctx.baseline["operands"])
    counts = gpu.operand_counts(ctx.view)
    held = {name: c[0] for name, c in counts.items()} == wanted and all(
        c[2] == c[0] for c in counts.values()
    )
    return held, gpu.describe_operands(ctx.view)


recovery = [
    Check("every operand DaemonSet back to its baseline count, all ready", operands_back, 120),
    *_one_node.pinned_recovery(),
]  # fmt: skip

by_hand = ByHand(
    inject=[
        _one_node.BY_HAND_NODE,
        f'kubectl taint node "$NODE" {KEY}={VALUE}:{EFFECT}',
        _one_node.BY_HAND_PIN,
    ],
    look=[
        Step("kubectl get nodes -o custom-columns=NAME:.metadata.name,TAINTS:.spec.taints[*].key",
             KEY, "a taint nobody in the GPU team set"),
        Step("kubectl -n $GPU_OPERATOR_NS get ds nvidia-device-plugin-daemonset "
             "-o jsonpath='{.status.desiredNumberScheduled}/{.status.numberReady}{\"\\n\"}'",
             "1/1", "the DaemonSet wants one pod fewer"),
        Step("kubectl -n $GPU_OPERATOR_NS get ds nvidia-device-plugin-daemonset "
             "-o jsonpath='{.spec.template.spec.tolerations}{\"\\n\"}'",
             '"key":"nvidia.com/gpu"', "the operands tolerate the GPU taint, not this one"),
        Step(f"kubectl -n $GPU_OPERATOR_NS get events --field-selector reason={EVICTION}",
             "Marking for deletion Pod gpu-operator/nvidia-device-plugin-daemonset-",
             "the taint-eviction controller removed the operand pods"),
        _one_node.pinned_story(gpu.UNTOLERATED_TAINT),
        _checks.policy_state_step("no error anywhere (trap)"),
    ],
    revert=[f'kubectl taint node "$NODE" {KEY}:{EFFECT}-', _one_node.BY_HAND_UNPIN],
)  # fmt: skip


FACTS = Facts(
    summary="a GPU node tainted maintenance=true:NoExecute by another team: its operands are "
    "evicted, it advertises 0 GPUs, the ClusterPolicy stays ready",
    area="node",
    needs=Needs(gpu_nodes=2, operator=True),
    risk="medium: every pod on that node without a matching toleration is evicted at once "
    "(GPU workloads included); the other node is untouched",
    duration="about 2 minutes on EKS (evictions at once, operands back < 40 s after the revert)",
    doctor_finding="gpu-node-taint-not-tolerated",
    cause=Cause(
        plain="Another team tainted one GPU node (maintenance=true:NoExecute), and the GPU "
        "Operator's operands, which do not tolerate that taint, were evicted from it.",
        names=(("taint", "NoExecute", "maintenance=true"),),
        clues=(
            _words.ONE_NODE,
            _words.OPERANDS,
            ("evicted", "kicked off", "kicked out"),
            ("node tainted", "tainted node"),
            ("not tolerated", "untolerated"),
            (
                "another team",
                "other team",
                "someone",
                "foreign",
                "maintenance",
                "new taint",
                "extra taint",
                "unexpected",
            ),
        ),
    ),
    alerts=("GpuAllocatableZeroOnGpuNode", "GpuPodUnschedulable"),
    state=_one_node.state_rows,
    gauges=gpu.gpu_gauges(PINNED),
    by_hand=by_hand,
    clean_up=remove_pinned,
    reset=_one_node.settle_then_repin,
)
