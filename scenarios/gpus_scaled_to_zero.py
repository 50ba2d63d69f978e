"""The cost guard left on: the GPU node group at 0 while GPU work is submitted.

`lab.down` (or `lab.scale 0`) sets the GPU group's desiredSize to 0 through the EKS API, and
the GPU nodes go. A GPU pod submitted then stays Pending with only the system nodes counted:
`0/2 nodes are available: 2 Insufficient nvidia.com/gpu`, preemption not helpful (the GPU
nodes are not there to fail any other filter). Nothing brings them back: the lab installs no
Cluster Autoscaler or Karpenter, so the pod waits forever. The group carries the
`k8s.io/cluster-autoscaler/node-template/...` tags for its label and taint, which is what a
Cluster Autoscaler needs to scale it up from 0. The fix is the lab's scaling: desiredSize back
to the session's count through the EKS API (`lab.scale 2`, ~6 minutes for nodes to join);
the same Pending pod then runs by itself.
"""

from __future__ import annotations

import json
from typing import Any

from labs.aws.cloud import describe_gpu_nodegroup
from labs.aws.stack import NODE_TEMPLATE_TAG_PREFIX
from labs.commands.scale import gpu_nodegroup, request_gpu_nodes
from labs.kube import gpu, probes, rest
from labs.kube.resources import DEPLOYMENTS
from labs.kube.view import ClusterView, Objects
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
from scenarios import _checks, _workload
from scenarios._workload import PROBE

NEEDS = Needs(gpu_nodes=2, operator=True)
WAIT = 120.0  # real seconds the pod is watched waiting for a node nobody adds
AUTOSCALERS = ("cluster-autoscaler", "karpenter")
STILL_WAITING = "gpu-probe still Pending 2 minutes on, no GPU node added: no autoscaler (trap)"
traps = [
    Trap("a Pending GPU pod brings GPU nodes", "the cluster adds a GPU node for the pod",
         "nothing happens: desiredSize stays 0, the pod waits forever",
         "scaling from 0 needs a Cluster Autoscaler (or Karpenter), which the lab leaves out "
         "on purpose: GPUs bill only inside a session. Scale by hand", shown_by=STILL_WAITING),
]  # fmt: skip


def session_size(lab: Lab) -> int:
    """GPU nodes a session runs: the lab's `gpus` setting, at least what this scenario needs."""
    return max(lab.settings.gpus, NEEDS.gpu_nodes)


def node_group(lab: Lab) -> dict[str, Any]:
    """The GPU node group as EKS describes it (scaling, tags)."""
    cluster, group = gpu_nodegroup(lab)
    return describe_gpu_nodegroup(lab.aws_client("eks"), cluster, group)


def template_tags(group: dict[str, Any]) -> dict[str, str]:
    return {k: v for k, v in group["tags"].items() if k.startswith(NODE_TEMPLATE_TAG_PREFIX)}


def baseline(lab: Lab, view: ClusterView) -> dict[str, Any]:
    """Run gpu-probe on the healthy lab; keep its output, the node counts and the GPU group."""
    return _workload.baseline(lab, view) | {"node_group": node_group(lab)}


def inject(lab: Lab) -> None:
    """Scale the GPU node group to 0 through the EKS API, as `invoke lab.scale 0` does.

    UpdateNodegroupConfig minSize=0, desiredSize=0 after checking the cluster and the AWS
    account are the lab's own; the GPU nodes then go.
    """
    request_gpu_nodes(lab, 0)


def detect(lab: Lab, view: ClusterView) -> bool:
    """Never read off the cluster: a GPU node group at 0 is also what the cost guard leaves,
    and reverting it would start billed GPU nodes. Only the journal says it was injected."""
    return False


def revert(lab: Lab) -> None:
    """Scale the GPU node group back to the session's count through the EKS API (safe to repeat).

    What `invoke lab.scale 2` asks: desiredSize = the lab's `gpus` setting (at least 2).
    """
    request_gpu_nodes(lab, session_size(lab))


# --- symptoms (T+ from the injection) --------------------------------------------------------


def only_system_nodes(ctx: Context) -> Verdict:
    nodes = ctx.view.objects("nodes")
    held = not gpu.gpu_nodes(ctx.view) and len(nodes) == ctx.baseline["system_nodes"]
    return held, f"{len(nodes)} node(s); {gpu.describe_gpu_nodes(ctx.view)}"


def submit_probe(ctx: Context) -> None:
    """What the learner does now: run gpu-probe again."""
    probes.recreate_probe(ctx.lab, ctx.lab.settings.probe_timeout)
    ctx.mark("submitted")


def system_nodes_message(ctx: Context) -> str:
    system = ctx.baseline["system_nodes"]
    return gpu.unresolvable_failure(system, {gpu.INSUFFICIENT_GPU: system})


def still_waiting(ctx: Context) -> Verdict:
    waited = ctx.seconds_since("submitted") or 0.0
    phase = gpu.pod_phase(ctx.view, PROBE)
    held = waited >= WAIT and phase == "Pending" and not gpu.gpu_nodes(ctx.view)
    return held, f"{PROBE} {phase} {waited:.0f} s after it was submitted; " + (
        gpu.describe_gpu_nodes(ctx.view)
    )


symptoms = [
    Check("the GPU nodes are gone: only the system nodes remain", only_system_nodes, 900,
          then=submit_probe),
    Check("gpu-probe Pending: only the system nodes counted, Insufficient nvidia.com/gpu",
          _workload.pending_with(PROBE, system_nodes_message), 90),
    Check(STILL_WAITING, still_waiting, 300),
]  # fmt: skip


# --- diagnosis: the event -> the nodes -> the node group -> who would scale it -----------------


def autoscalers(lab: Lab) -> list[str]:
    """Deployments in any namespace that look like a node autoscaler."""
    listed = rest.get_items(lab.kube, DEPLOYMENTS.path())
    return sorted(
        f"{d['metadata'].get('namespace')}/{gpu.name_of(d)}"
        for d in listed
        if any(name in gpu.name_of(d) for name in AUTOSCALERS)
    )


def diagnose(ctx: Context) -> list[Finding]:
    """Pod events -> the nodes there are -> the GPU node group's scaling and tags (EKS API) ->
    whoever would scale it -> the fix."""
    lab, view = ctx.lab, ctx.view
    phase, events = gpu.pod_story(view, PROBE)
    group = node_group(lab)
    cluster, name = gpu_nodegroup(lab)
    describe = f"aws eks describe-nodegroup --cluster-name {cluster} --nodegroup-name {name}"
    found = autoscalers(lab)
    return [
        Finding("1. Pod: why Pending?", f"kubectl describe pod {PROBE}",
                f"{phase}: {gpu.scheduling_failure(events)}",
                "only the system nodes were judged: the GPU nodes are not in the cluster at all "
                "(a tainted or full GPU node would be counted)"),
        Finding("2. Nodes: any GPU node?", "kubectl get nodes -L nvidia.com/gpu.present",
                f"{len(view.objects('nodes'))} node(s); {gpu.describe_gpu_nodes(view)}",
                "none: look at the GPU node group"),
        Finding("3. The GPU node group", f"{describe} --query nodegroup.scalingConfig",
                f"min {group['min_size']} / max {group['max_size']} / desired "
                f"{group['desired_size']}",
                "desiredSize 0: the cost guard (lab.down, lab.scale 0) is on"),
        Finding("4. Who would scale it up?", "kubectl get deploy -A | grep -E "
                "'cluster-autoscaler|karpenter'",
                f"{len(found)} autoscaler Deployment(s): {', '.join(found) or 'none'}",
                "nothing watches Pending pods to add nodes: the pod waits forever",
                trap="a Pending GPU pod brings GPU nodes"),
        Finding("4b. Could one scale it from 0?", f"{describe} --query nodegroup.tags",
                json.dumps(template_tags(group)),
                "the node-template tags tell a Cluster Autoscaler the label and taint a new node "
                "would have: installed, it would scale this group up from 0"),
        Finding("5. The fix", f"invoke lab.scale {session_size(lab)} (EKS UpdateNodegroupConfig)",
                f"desiredSize {group['desired_size']}",
                "scale the group back; the Pending pod then runs by itself (~6 min on EKS)"),
    ]  # fmt: skip


# --- recovery (T+ from the revert) ------------------------------------------------------------


def gpus_back(ctx: Context) -> Verdict:
    ready = gpu.schedulable_gpu_nodes(ctx.view)
    return len(ready) == len(ctx.baseline["gpu_nodes"]), gpu.describe_gpu_nodes(ctx.view)


recovery = [
    Check("GPU nodes Ready again, each with allocatable nvidia.com/gpu 1", gpus_back, 900),
    Check("ClusterPolicy ready with the device plugin on every new node",
          _checks.policy_ready_again, 300),
    Check("the pending gpu-probe ran: FailedScheduling, then Scheduled, Succeeded",
          _checks.probe_ran_after_waiting(PROBE), 900, tool=True),
    Check("gpu-probe output identical to baseline", _checks.probe_output_as_baseline(PROBE), 900,
          tool=True),
]  # fmt: skip


def allocatable_values(objects: Objects) -> str:
    """Allocatable nvidia.com/gpu of the GPU nodes, without their names (new nodes, new names)."""
    return ", ".join(sorted(str(v) for v in gpu.allocatable_by_node(objects).values())) or "none"


def state(ctx: Context) -> dict[str, str]:
    """The summary rows, compared between baseline, fault and recovery (no node names)."""
    group = node_group(ctx.lab)
    return {
        "GPU node group min/max/desired":
            f"{group['min_size']}/{group['max_size']}/{group['desired_size']}",
        "Ready GPU nodes": str(len(gpu.ready_gpu_nodes(ctx.view))),
        "allocatable nvidia.com/gpu": allocatable_values(ctx.view),
        PROBE: gpu.pod_phase(ctx.view, PROBE),
    }  # fmt: skip


# By hand the cluster's name comes from the lab's kubeconfig (its cluster entry is the cluster).
CLUSTER = "$(kubectl config view --minify -o jsonpath='{.clusters[0].name}')"
NODE_GROUP = f'--cluster-name "{CLUSTER}" --nodegroup-name "{CLUSTER}-ng-gpu"'


def _scale_to(count: int) -> str:
    return (
        f"aws eks update-nodegroup-config {NODE_GROUP} "
        f"--scaling-config minSize=0,maxSize=2,desiredSize={count}"
    )


by_hand = ByHand(
    inject=[
        _scale_to(0),
        "kubectl wait --for=delete node -l nvidia.com/gpu.present=true --timeout=600s",
        f"kubectl delete pod {PROBE} --ignore-not-found && kubectl apply -f "
        f"{_workload.PROBE_MANIFEST}",
    ],
    look=[
        Step("kubectl get nodes -l nvidia.com/gpu.present=true", "No resources found",
             "no GPU node at all"),
        _workload.describe_step(PROBE, f"0/2 nodes are available: 2 {gpu.INSUFFICIENT_GPU}."),
        Step(f"aws eks describe-nodegroup {NODE_GROUP} "
             "--query nodegroup.scalingConfig.desiredSize", "0", "the GPU group is at 0"),
        Step(f"aws eks describe-nodegroup {NODE_GROUP} --query nodegroup.tags",
             f"{NODE_TEMPLATE_TAG_PREFIX}taint/nvidia.com/gpu",
             "what a Cluster Autoscaler would read to scale the group from 0"),
        Step("kubectl get deploy -A | grep -c -E 'cluster-autoscaler|karpenter'", "0",
             "and none is installed: nothing adds a node"),
    ],
    revert=[_scale_to(2), f"kubectl get pod {PROBE} -w   # Completed once the nodes joined"],
)  # fmt: skip


FACTS = Facts(
    summary="the GPU node group at 0 while GPU work is submitted: Pending with only the system "
    "nodes counted, and nothing scales it up",
    area="capacity",
    doctor_finding="gpu-nodes-scaled-to-zero",
    cause=Cause(
        plain="The GPU node group's desiredSize is 0, so there is no GPU node at all, and nothing "
        "in the lab scales it back up.",
        names=(
            (
                "no GPU nodes",
                "no nodes",
                "zero nodes",
                "0 nodes",
                "scaled to zero",
                "scaled to 0",
                "scaled down",
                "scaled in",
                "desired size 0",  # desiredSize 0 as its words
                "desiredSize zero",
                "at zero",
                "at 0",
                "cost guard",
                "lab.down",
                "nodes gone",
                "nodes terminated",
            ),
        ),
        clues=(
            ("node group", "nodegroup", "asg", "autoscaling group", "desiredSize"),
            (
                "no autoscaler",
                "autoscaler",
                "karpenter",
                "nothing scales",
                "scale back up",
            ),
        ),
    ),
    # The naive absent() rule fires here, and only here: no GPU node is left to report a 0.
    alerts=("GpuNodesAtZeroWhileGpuPodsWait", "GpuPodUnschedulable", "GpuAllocatableAbsentNaive"),
    needs=NEEDS,
    risk="low: the GPU nodes are terminated (running GPU pods with them) and come back new",
    duration="about 10 minutes on EKS (nodes go in ~1 min, come back in ~6)",
    state=state,
    gauges=gpu.gpu_gauges(PROBE),
    by_hand=by_hand,
)
