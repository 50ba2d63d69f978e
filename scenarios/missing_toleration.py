"""Pods written without the `nvidia.com/gpu` toleration: on EKS only the one that asks for no GPU
is kept off the GPU nodes.

The GPU nodes carry `nvidia.com/gpu=true:NoSchedule`. EKS runs the ExtendedResourceToleration
admission plugin on every cluster, so a pod that requests `nvidia.com/gpu` gets the toleration
`nvidia.com/gpu:NoSchedule Exists` from the API server: the probe written without one still
runs, with the baseline output. The pod that stays Pending is the one meant for the GPU nodes
(a nodeSelector on `nvidia.com/gpu.present`) that asks for no GPU: FailedScheduling counts
the system nodes as `didn't match Pod's node affinity/selector` and the GPU nodes as
`node(s) had untolerated taint(s)` (1.35 names no taint), and preemption cannot help. The fix:
a pod that needs the GPU sets `limits: nvidia.com/gpu` (the toleration comes with it); a pod
that needs only the node gets the toleration written.
"""

from __future__ import annotations

import json
from typing import Any

from labs.kube import gpu
from labs.kube.view import Objects
from labs.lab import Lab
from labs.run.contract import Cause, Check, Context, Finding, Step, Trap, Verdict
from scenarios import _words, _workload
from scenarios._workload import PROBE

NAME = "missing-toleration"
AGENT = "gpu-node-agent"
TOLERATION = {"key": gpu.GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}
AGENT_PENDING = (
    f"{AGENT} Pending: the system nodes fail its selector, the GPU nodes its missing toleration"
)
PROBE_RAN = "gpu-probe, written without a toleration, ran with the baseline output (trap)"
traps = [
    Trap("a GPU pod without the toleration stays Pending", "Pending, the GPU nodes counted as "
         "`node(s) had untolerated taint(s)`", "it runs: the API server added "
         "`nvidia.com/gpu:NoSchedule Exists` because it requests nvidia.com/gpu",
         "ExtendedResourceToleration is on in every EKS version: the taint keeps off only pods "
         "that ask for no GPU, and a GPU pod's fix is its limit", shown_by=PROBE_RAN),
    Trap("the message names the taint", "`had untolerated taint {nvidia.com/gpu: true}`",
         "`node(s) had untolerated taint(s)`: from Kubernetes 1.35 no key, no value",
         "read the nodes' taints and compare them with the pod's tolerations",
         shown_by=AGENT_PENDING),
]  # fmt: skip


def inject(lab: Lab) -> None:
    """Replace gpu-probe by scenarios/manifests/missing-toleration.yaml (kubectl apply).

    Its gpu-probe has no tolerations; gpu-node-agent has a nodeSelector
    nvidia.com/gpu.present=true, no GPU request and no toleration.
    """
    _workload.submit(lab, NAME)


def revert(lab: Lab) -> None:
    """Delete the scenario's pods and apply the lab's gpu-probe again (safe to repeat).

    The scenario's pods carry the scenario's eks-gpu-lab/scenario label; the lab's probe has
    its toleration and its limit written.
    """
    _workload.undo(lab, NAME)


def tolerates_gpu_taint(pod: dict[str, Any]) -> bool:
    """Does the pod tolerate the GPU nodes' nvidia.com/gpu=true:NoSchedule taint?"""
    tolerations = (pod.get("spec") or {}).get("tolerations") or []
    keys = [t.get("key") for t in tolerations if t.get("effect") in (None, "", "NoSchedule")
            and (t.get("key") or t.get("operator") == "Exists")]  # fmt: skip
    return gpu.GPU_RESOURCE in keys or any(key is None or key == "" for key in keys)


def wrong(objects: Objects) -> list[str]:
    """Its pods meant for the GPU nodes (a nodeSelector on an nvidia.com/ label) that cannot
    stand their taint: no toleration written and no GPU asked for (which would bring one)."""
    return [
        f"{gpu.name_of(pod)}: pinned to the GPU nodes, no toleration of "
        f"{gpu.GPU_RESOURCE}:NoSchedule and no GPU asked for"
        for pod in _workload.workload_pods(objects, NAME)
        if any(key.startswith("nvidia.com/") for key in (pod["spec"].get("nodeSelector") or {}))
        and not tolerates_gpu_taint(pod)
        and gpu.GPU_RESOURCE not in _workload.requested(pod)
    ]


# --- symptoms (T+ from the injection) --------------------------------------------------------


def agent_message(ctx: Context) -> str:
    base = ctx.baseline
    reasons = {gpu.SELECTOR_MISMATCH: base["system_nodes"],
               gpu.UNTOLERATED_TAINT: len(base["gpu_nodes"])}  # fmt: skip
    return gpu.unresolvable_failure(base["node_count"], reasons)


def tolerations_of(objects: Objects, name: str) -> list[dict[str, Any]]:
    return list(((gpu.pod(objects, name) or {}).get("spec") or {}).get("tolerations") or [])


def toleration_added(ctx: Context) -> Verdict:
    found = gpu.pod(ctx.view, PROBE) or {}
    ours = (found.get("metadata", {}).get("labels") or {}).get(
        _workload.SCENARIO_LABEL
    ) == _workload.fault_tag(NAME)
    tolerations = tolerations_of(ctx.view, PROBE)
    return ours and TOLERATION in tolerations, f"{PROBE} tolerations {json.dumps(tolerations)}"


symptoms = [
    Check(AGENT_PENDING, _workload.pending_with(AGENT, agent_message), 90),
    Check("gpu-probe, written without a toleration, has nvidia.com/gpu:NoSchedule Exists: "
          "the API server added it", toleration_added, 60),
    Check(PROBE_RAN, _workload.ran_with_baseline_output(PROBE, NAME), 180),
]  # fmt: skip


# --- diagnosis: the event -> the nodes' taints -> the pod's tolerations and requests -----------


def diagnose(ctx: Context) -> list[Finding]:
    """Pod events -> the GPU nodes' taints -> the Pending pod's tolerations and requests -> the
    GPU pod that got its toleration from the API server -> the fix."""
    view = ctx.view
    phase, events = gpu.pod_story(view, AGENT)
    spec = (gpu.pod(view, AGENT) or {}).get("spec") or {}
    return [
        Finding("1. Pod: why Pending?", f"kubectl describe pod {AGENT}",
                f"{phase}: {gpu.scheduling_failure(events)}",
                "system nodes: its nodeSelector; GPU nodes: a taint it does not tolerate. The "
                "1.35 message names no taint: look at the nodes",
                trap="the message names the taint"),
        Finding("2. Nodes: which taints?", "kubectl get nodes -o custom-columns=NAME:"
                ".metadata.name,TAINTS:.spec.taints[*].key", gpu.describe_taints(view),
                "every GPU node is tainted nvidia.com/gpu=true:NoSchedule (the stack's GPU group)"),
        Finding("3. Pod: tolerations and requests", f"kubectl get pod {AGENT} -o jsonpath="
                "'{.spec.tolerations} {.spec.containers[*].resources}'",
                f"tolerations {json.dumps(tolerations_of(view, AGENT))}, resources "
                f"{_workload.resources_of(view, AGENT)}",
                "no nvidia.com/gpu toleration and no GPU request, so the API server added none"),
        Finding("4. The GPU pod written without one", f"kubectl get pod {PROBE} -o jsonpath="
                "'{.spec.tolerations}'", json.dumps(tolerations_of(view, PROBE)),
                "it has the toleration it was written without: it requests nvidia.com/gpu, and "
                "ExtendedResourceToleration adds it. It ran",
                trap="a GPU pod without the toleration stays Pending"),
        Finding("5. The fix", "the pod spec",
                f"{AGENT}: nodeSelector {json.dumps(spec.get('nodeSelector'))}",
                "needs the GPU: set limits nvidia.com/gpu: 1 (the toleration comes with it); "
                "needs only the node: add tolerations [{key: nvidia.com/gpu, operator: Exists, "
                "effect: NoSchedule}]"),
    ]  # fmt: skip


look = [
    _workload.describe_step(AGENT, f"2 {gpu.SELECTOR_MISMATCH}, 2 {gpu.UNTOLERATED_TAINT}."),
    Step("kubectl get nodes -l nvidia.com/gpu.present=true "
         "-o jsonpath='{.items[*].spec.taints[*].key}{\"\\n\"}'",
         "nvidia.com/gpu nvidia.com/gpu", "both GPU nodes carry the taint"),
    Step(f"kubectl get pod {PROBE} -o jsonpath="
         "'{.spec.tolerations[?(@.key==\"nvidia.com/gpu\")]}{\"\\n\"}'",
         json.dumps(dict(sorted(TOLERATION.items())), separators=(",", ":")),
         "written without it, the GPU pod has the toleration: the API server added it"),
    Step(f"kubectl get pod {PROBE}", "Completed", "and it ran"),
]  # fmt: skip


SCENARIO = _workload.scenario(
    doctor_finding="pod-untolerated-taint",
    cause=Cause(
        plain="A pod meant for the GPU nodes that asks for no GPU was written without the "
        "nvidia.com/gpu toleration, so the GPU nodes' taint keeps it off them.",
        names=(_words.TOLERATION,),
        clues=(
            _words.TAINT,
            ("pod", "agent"),
            ("nodeSelector", "pinned"),
            ("asks for no gpu", "no gpu", "not request gpu"),
            ("Pending",),
        ),
    ),
    # No alert: the Pending pod asks for no GPU (the GPU probe itself runs).
    alerts=(),
    name=NAME,
    summary="pods without the nvidia.com/gpu toleration: the GPU pod runs anyway (EKS adds it), "
    "the GPU-node pod that asks for no GPU stays Pending",
    about=__doc__ or "",
    risk="none: two pods of the lab's own; nothing in the cluster changes",
    inject=inject,
    revert=revert,
    symptoms=symptoms,
    diagnose=diagnose,
    traps=traps,
    look=look,
    wrong=wrong,
)
