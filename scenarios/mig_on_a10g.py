"""A pod asking for a MIG slice (`nvidia.com/mig-1g.5gb`) on A10G nodes: Pending for good.

MIG cuts A100/A30/H100-class GPUs into slices, each advertised as its own resource; an A10G
cannot be cut, so no node advertises `nvidia.com/mig-1g.5gb` at all. The scheduler counts a
resource a node does not have as 0: `0/4 nodes are available: 4 Insufficient
nvidia.com/mig-1g.5gb`, and since the request exceeds what any node has, preemption is `not
helpful` on every node: no eviction and no more A10G nodes would ever help. GPU feature
discovery says why on every GPU node: `nvidia.com/mig.capable=false`,
`nvidia.com/gpu.product=NVIDIA-A10G`; the operator's MIG manager accordingly runs nowhere.
The fix: ask for `nvidia.com/gpu: 1` (the whole A10G); to share one, the device plugin's
time-slicing, not MIG.
"""

from __future__ import annotations

import json

from labs.kube import gpu
from labs.kube.view import Objects
from labs.lab import Lab
from labs.run.contract import Cause, Check, Context, Finding, Step, Trap, Verdict
from scenarios import _workload
from scenarios._workload import PROBE

NAME = "mig-on-a10g"
MIG_RESOURCE = "nvidia.com/mig-1g.5gb"
MIG_CAPABLE_LABEL = "nvidia.com/mig.capable"
PRODUCT_LABEL = "nvidia.com/gpu.product"
MIG_MANAGER = "nvidia-mig-manager"
NOT_MIG = "GFD on every GPU node: nvidia.com/mig.capable=false, an A10G (trap)"
NOWHERE = f"gpu-probe Pending: Insufficient {MIG_RESOURCE} on every node, preemption not helpful"
traps = [
    Trap("any NVIDIA GPU can be cut into MIG slices", f"{MIG_RESOURCE} on a GPU node",
         f"{MIG_CAPABLE_LABEL}=false: MIG is an A100/A30/H100-class feature, the A10G has none",
         "read the GFD labels before asking for a MIG profile", shown_by=NOT_MIG),
    Trap("Insufficient means busy", "wait for a GPU to free up, or add nodes",
         "no node has the resource at all: preemption `not helpful` on every node",
         "Insufficient X for a resource no node advertises never resolves: compare the name "
         "with the nodes' capacity keys", shown_by=NOWHERE),
]  # fmt: skip


def inject(lab: Lab) -> None:
    """Replace gpu-probe by scenarios/manifests/mig-on-a10g.yaml (kubectl apply).

    Its gpu-probe asks for limits nvidia.com/mig-1g.5gb: 1 instead of nvidia.com/gpu: 1.
    """
    _workload.submit(lab, NAME)


def revert(lab: Lab) -> None:
    """Delete the scenario's pod and apply the lab's gpu-probe again (safe to repeat).

    The scenario's pod carries the scenario's eks-gpu-lab/scenario label; the lab's probe asks for
    nvidia.com/gpu: 1.
    """
    _workload.undo(lab, NAME)


def wrong(objects: Objects) -> list[str]:
    """Its pods that ask for a MIG slice, which no A10G node can offer."""
    return [
        f"{gpu.name_of(pod)}: asks for {', '.join(mig)}"
        for pod in _workload.workload_pods(objects, NAME)
        if (mig := [r for r in _workload.requested(pod) if r.startswith("nvidia.com/mig-")])
    ]


# --- symptoms (T+ from the injection) --------------------------------------------------------


def nowhere_message(ctx: Context) -> str:
    total = ctx.baseline["node_count"]
    return gpu.unresolvable_failure(total, {f"Insufficient {MIG_RESOURCE}": total})


def nvidia_capacity(objects: Objects) -> dict[str, dict[str, str]]:
    """The nvidia.com/* capacity keys of every GPU node."""
    return {
        gpu.name_of(n): {
            key: str(value)
            for key, value in ((n.get("status") or {}).get("capacity") or {}).items()
            if key.startswith("nvidia.com/")
        }
        for n in gpu.gpu_nodes(objects)
    }


def gfd_labels(objects: Objects) -> dict[str, str]:
    """`mig.capable product` of every GPU node."""
    return {
        gpu.name_of(n): f"{gpu.label_of(n, MIG_CAPABLE_LABEL)} {gpu.label_of(n, PRODUCT_LABEL)}"
        for n in gpu.gpu_nodes(objects)
    }


def not_mig_capable(ctx: Context) -> Verdict:
    labels = gfd_labels(ctx.view)
    held = bool(labels) and all(v.startswith("false NVIDIA-A10G") for v in labels.values())
    return held, f"{MIG_CAPABLE_LABEL} {PRODUCT_LABEL}: {json.dumps(labels)}"


def no_node_has_it(ctx: Context) -> Verdict:
    capacity = nvidia_capacity(ctx.view)
    held = all(MIG_RESOURCE not in keys and keys.get(gpu.GPU_RESOURCE) == "1"
               for keys in capacity.values())  # fmt: skip
    return held and bool(capacity), f"nvidia.com capacity: {json.dumps(capacity)}"


def mig_manager_idle(ctx: Context) -> Verdict:
    ds = gpu.daemonset(ctx.view, MIG_MANAGER)
    desired = gpu.daemonset_counts(ds)[0] if ds else None
    return desired == 0, f"{MIG_MANAGER}: {gpu.describe_daemonset(ctx.view, MIG_MANAGER)}"


symptoms = [
    Check(NOWHERE, _workload.pending_with(PROBE, nowhere_message), 90),
    Check(f"no node advertises {MIG_RESOURCE}; the GPU nodes offer nvidia.com/gpu 1",
          no_node_has_it, 60),
    Check(NOT_MIG, not_mig_capable, 60),
    Check(f"{MIG_MANAGER} wants 0 pods: no MIG-capable GPU", mig_manager_idle, 60),
]  # fmt: skip


# --- diagnosis: the event -> the nodes' resources -> GFD labels -> the MIG manager -----------


def diagnose(ctx: Context) -> list[Finding]:
    """Pod events -> which nvidia.com resources the nodes advertise -> the GFD labels that say
    what the GPU is -> the MIG manager -> the fix."""
    lab, view = ctx.lab, ctx.view
    phase, events = gpu.pod_story(view, PROBE)
    ns = lab.operator_namespace
    return [
        Finding("1. Pod: why Pending?", f"kubectl describe pod {PROBE}",
                f"{phase}: {gpu.scheduling_failure(events)}",
                "every node short of the resource, and preemption would help on none: no node "
                "has it at all", trap="Insufficient means busy"),
        Finding("2. Nodes: which GPU resources?", "kubectl get nodes -o json | jq "
                "'.items[].status.capacity | with_entries(select(.key|startswith(\"nvidia\")))'",
                json.dumps(nvidia_capacity(view)),
                f"nvidia.com/gpu only: nothing offers {MIG_RESOURCE}"),
        Finding("3. GFD: what GPU is it?",
                f"kubectl get nodes -L {MIG_CAPABLE_LABEL},{PRODUCT_LABEL}",
                json.dumps(gfd_labels(view)),
                "an A10G, not MIG-capable: MIG needs A100/A30/H100-class GPUs",
                trap="any NVIDIA GPU can be cut into MIG slices"),
        Finding("4. The MIG manager", f"kubectl -n {ns} get ds {MIG_MANAGER}",
                gpu.describe_daemonset(view, MIG_MANAGER),
                "the operator runs it only on MIG-capable GPUs: here on none"),
        Finding("5. The fix", f"kubectl get pod {PROBE} -o jsonpath='{{.spec.containers[*]."
                "resources}'", _workload.resources_of(view, PROBE),
                "ask for nvidia.com/gpu: 1, the whole A10G; to share one, the device plugin's "
                "time-slicing (sharing.timeSlicing), not MIG"),
    ]  # fmt: skip


look = [
    _workload.describe_step(PROBE, f"4 Insufficient {MIG_RESOURCE}."),
    Step("kubectl get nodes -l nvidia.com/gpu.present=true -o jsonpath='{range .items[*]}"
         "{.metadata.labels.nvidia\\.com/mig\\.capable} "
         "{.metadata.labels.nvidia\\.com/gpu\\.product}{\"\\n\"}{end}'",
         "false NVIDIA-A10G", "GPU feature discovery: an A10G, not MIG-capable"),
    Step("kubectl get nodes -o jsonpath='{.items[*].status.capacity}' | grep -c "
         "'nvidia.com/mig-'", "0", "no node advertises any MIG resource"),
    Step(f"kubectl -n $GPU_OPERATOR_NS get ds {MIG_MANAGER} "
         "-o jsonpath='{.status.desiredNumberScheduled}{\"\\n\"}'", "0",
         "the MIG manager runs nowhere"),
]  # fmt: skip


SCENARIO = _workload.scenario(
    doctor_finding="mig-resource-unavailable",
    cause=Cause(
        plain="A pod asks for a MIG slice (nvidia.com/mig-1g.5gb), which the nodes' A10G GPUs "
        "cannot be cut into, so no node has that resource.",
        names=(
            (
                "MIG",
                "multi-instance gpu",
            ),
        ),
        clues=(
            ("A10G", "a10"),
            ("slice", "partition", "profile"),
            (
                "not supported",
                "unsupported",
                "not capable",
                "can not",
                "mig.capable=false",
            ),
        ),
    ),
    alerts=("GpuPodUnschedulable",),
    name=NAME,
    summary=f"a pod asking for {MIG_RESOURCE} on A10G nodes: Pending, Insufficient on every "
    "node, for good",
    about=__doc__ or "",
    risk="none: one pod of the lab's own that never runs",
    inject=inject,
    revert=revert,
    symptoms=symptoms,
    diagnose=diagnose,
    traps=traps,
    look=look,
    wrong=wrong,
)
