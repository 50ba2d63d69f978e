"""What faults that take one GPU node's GPU away share: which node, a probe pinned to it, and
the checks that tell that node from the others.

They pick the first GPU node by name, which is also what
`kubectl get nodes -l nvidia.com/gpu.present=true` lists first, so the by-hand runbook picks
the same node. The pinned probe is gpu-probe with a `kubernetes.io/hostname` nodeSelector: the
scheduler still judges every node, so its message counts one reason for that node and
"didn't match Pod's node affinity/selector" for all the others.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import labs
from labs.errors import LabError
from labs.kube import gpu, probes
from labs.kube.view import ClusterView, Objects
from labs.lab import Lab
from labs.run.contract import Check, Context, Step, Verdict
from scenarios import _checks
from scenarios._checks import Condition

PROBE = probes.probe_name()
PINNED = f"{PROBE}-pinned"
MANIFEST = probes.PROBE_MANIFEST.relative_to(Path(labs.__file__).resolve().parent.parent)
ONLY_NODE_DARK = 'the chosen node advertises nvidia.com/gpu "0" (key kept), the others still 1'

# By hand: the same node, and the same pinned probe, from the repository root.
BY_HAND_NODE = (
    "NODE=$(kubectl get nodes -l nvidia.com/gpu.present=true "
    "-o jsonpath='{.items[0].metadata.name}')"
)
BY_HAND_PIN = (
    f"kubectl delete pod {PINNED} --ignore-not-found && sed -e 's/name: {PROBE}$/name: {PINNED}/' "
    f'-e "s|^spec:|spec:\\n  nodeSelector:\\n    {probes.HOSTNAME_LABEL}: $NODE|" '
    f"{MANIFEST} | kubectl apply -f -"
)

BY_HAND_UNPIN = f"kubectl delete pod {PINNED} --ignore-not-found"


def target_node(objects: Objects) -> str:
    """The GPU node these faults act on: the first by name."""
    nodes = gpu.gpu_nodes(objects)
    if not nodes:
        raise LabError("the lab has no GPU node to act on: run `invoke lab.scale 2` first")
    return gpu.name_of(nodes[0])


def one_node_baseline(lab: Lab, view: ClusterView) -> dict[str, Any]:
    """Run gpu-probe on the healthy lab; keep its output, the GPU nodes, the chosen node, how
    many nodes the scheduler judges, and each operand DaemonSet's desired count."""
    nodes = [gpu.name_of(n) for n in gpu.gpu_nodes(view)]
    plugins = gpu.daemon_pod_nodes(view, gpu.DEVICE_PLUGIN_DAEMONSET)
    if plugins != nodes:
        raise LabError(
            f"the device plugin runs on {', '.join(plugins) or 'no node'}, not on every GPU node "
            f"({', '.join(nodes)}): revert what keeps it off (`invoke scenario.revert --all`, or "
            f"look at `kubectl get nodes -L {gpu.DEVICE_PLUGIN_DEPLOY_LABEL}` and the node taints)"
        )
    run = probes.run_probe(lab, view, lab.settings.probe_timeout)
    return {
        "probe_output": run.gpu_line,
        "gpu_nodes": nodes,
        "node": target_node(view),
        "others": [n for n in nodes if n != target_node(view)],
        "node_count": len(view.objects("nodes")),
        "operands": {name: counts[0] for name, counts in gpu.operand_counts(view).items()},
    }


def pin_probe(ctx: Context) -> None:
    """A fresh gpu-probe-pinned on the chosen node (it waits there, Pending)."""
    probes.recreate_admitted(
        ctx.lab, ctx.lab.settings.probe_timeout, name=PINNED, node=ctx.baseline["node"]
    )


def remove_pinned(lab: Lab) -> None:
    """Delete gpu-probe-pinned, which only this scenario's checks need (safe to repeat)."""
    probes.delete_probe(lab, lab.settings.probe_timeout, name=PINNED)


SETTLE_SECONDS = 300.0  # real-cluster seconds for a device-plugin rollout to reach every node


def _plugin_settled(view: ClusterView) -> bool:
    plugin = gpu.daemonset(view)
    values = gpu.allocatable_by_node(view)
    return (
        plugin is not None
        and gpu.daemonset_rolled_out(plugin)
        and len(set(gpu.daemonset_counts(plugin))) == 1
        and bool(values)
        and all(value == "1" for value in values.values())
    )


def settle_then_repin(lab: Lab) -> None:
    """The tool's part after a learner's fix, before its pinned probe counts: the device plugin
    settled on every GPU node (a restart, the learner's or a reset's, rolls it), then a pinned
    probe kubelet rejected meanwhile (`UnexpectedAdmissionError`: bound as the plugin went)
    pinned again. The race is kubelet's; the tool's own probe must not fail a right fix."""
    with lab.view() as view:
        view.wait_for(_plugin_settled, SETTLE_SECONDS / lab.speed + 30.0,
                      "the device plugin settled on every GPU node")  # fmt: skip
        found = gpu.pod(view, PINNED) or {}
    status, spec = found.get("status") or {}, found.get("spec") or {}
    if status.get("phase") == "Failed" and status.get("reason") == gpu.ADMISSION_REJECTED:
        node = spec.get("nodeName") or (spec.get("nodeSelector") or {}).get(probes.HOSTNAME_LABEL)
        probes.recreate_admitted(lab, lab.settings.probe_timeout, name=PINNED, node=node)


def only_node_dark(ctx: Context) -> Verdict:
    values = gpu.allocatable_by_node(ctx.view)
    node, others = ctx.baseline["node"], ctx.baseline["others"]
    held = values.get(node) == "0" and all(values.get(n) == "1" for n in others)
    return held, gpu.describe_allocatable(ctx.view)


def pinned_pending(reason: str) -> Condition:
    """The pinned probe is Pending: `reason` on its node, "didn't match" on every other node."""

    def condition(ctx: Context) -> Verdict:
        total = ctx.baseline["node_count"]
        expected = gpu.fit_error(total, {reason: 1, gpu.SELECTOR_MISMATCH: total - 1})
        phase, events = gpu.pod_story(ctx.view, PINNED)
        message = gpu.scheduling_failure(events) or ""
        held = phase == "Pending" and message.startswith(expected)
        return held, f"{PINNED} {phase}: {message or 'no FailedScheduling event yet'}"

    return condition


def pinned_ran_on_node(ctx: Context) -> Verdict:
    """The pinned probe, Pending until now, was scheduled onto its node and Succeeded."""
    found = gpu.pod(ctx.view, PINNED) or {}
    phase, events = gpu.pod_story(ctx.view, PINNED)
    on = (found.get("spec") or {}).get("nodeName")
    held = phase == "Succeeded" and on == ctx.baseline["node"] and gpu.waited_then_scheduled(events)
    why = (found.get("status") or {}).get("message")  # a rejection names its cause
    seen = f"{PINNED} {phase} on {on}{f' ({why})' if why else ''}"
    return held, f"{seen}; events: {', '.join(gpu.event_reasons(events))}"


def pinned_story(reason: str) -> Step:
    """The by-hand look at the pinned probe's scheduling story (on the lab's four nodes)."""
    return Step(
        f"kubectl describe pod {PINNED}",
        f"{reason}, 3 {gpu.SELECTOR_MISMATCH}",
        "the scheduler judged every node: only the pinned one could take it, and it cannot",
    )


def state_rows(ctx: Context) -> dict[str, str]:
    """The summary rows both one-node faults compare between baseline, fault and recovery."""
    return {
        "ClusterPolicy status.state": gpu.policy_state(gpu.cluster_policy(ctx.view)),
        "device-plugin DaemonSet": gpu.describe_daemonset(ctx.view),
        "allocatable nvidia.com/gpu": gpu.describe_allocatable(ctx.view),
    }


def pinned_recovery() -> list[Check]:
    """The recovery both one-node faults end with: GPUs back everywhere, the pinned probe ran
    on its node with the baseline output, the ClusterPolicy ready."""
    return [
        Check("allocatable nvidia.com/gpu back to 1 on every GPU node",
              _checks.allocatable_everywhere("1"), 120),
        Check("the pinned probe, Pending until now, ran on its node: FailedScheduling, then "
              "Scheduled, Succeeded", pinned_ran_on_node, 420, tool=True),
        Check("gpu-probe-pinned output identical to baseline",
              _checks.probe_output_as_baseline(PINNED), 420, tool=True),
        Check("ClusterPolicy status.state ready", _checks.policy_ready_again, 120),
    ]  # fmt: skip
