"""Flowchart step 2, the nodes: are GPUs advertised, and if not, what keeps the operands away.

A GPU node (the node group's labels, NFD's pci-10de, GFD's gpu.present, or a GPU capacity)
should advertise nvidia.com/gpu. Its three wrong answers differ: the key kept at 0 (the
plugin went away), no key (it never registered), allocatable below capacity (a GPU marked
unhealthy). What keeps the plugin away is read off the node too: a deploy label set to
false, a taint the operands do not tolerate, the node not Ready, the operator's labels
missing, or no GPU node at all.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

from labs.doctor.catalog import kind
from labs.doctor.facts import Facts, Obj, node_subject, subject
from labs.doctor.logs import log_requests
from labs.doctor.model import DoctorFinding, Evidence, Link
from labs.doctor.pods import gpu_requests, unscheduled
from labs.kube import gpu
from labs.kube.scheduling import SCHEDULING_EFFECTS, daemon_pod_tolerations, tolerates_taint

ADVERTISING = ("gpu-allocatable-zero", "gpu-not-advertised", "gpu-allocatable-below-capacity")
DEFAULT_OPERAND_TOLERATIONS = [
    {"key": gpu.GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}
]


def node_symptoms(node: str) -> list[Link]:
    """What a cause on one node explains: its GPUs not advertised, pods waiting for them."""
    here = node_subject(node)
    return [
        *(Link(name, here) for name in ADVERTISING),
        Link("pod-insufficient-gpu", tag=here),
        Link("pod-admission-rejected", tag=here),
        Link("operand-missing-on-gpu-nodes", tag=here),
    ]


def _plugin_pods_on(facts: Facts, node: str) -> list[Obj]:
    plugin = gpu.daemonset(facts)
    return [p for p in facts.pods_of(plugin) if p["spec"].get("nodeName") == node] if plugin else []


def _quantities(node: Obj) -> Evidence:
    value = (
        f"allocatable {gpu.gpu_quantity(node)}, capacity {gpu.gpu_quantity(node, 'capacity')}"
        f"{gpu.capacity_note(node)}"
    )
    return Evidence(
        node_subject(gpu.name_of(node)), "status.{allocatable,capacity}[nvidia.com/gpu]", value
    )


def advertising(facts: Facts) -> list[DoctorFinding]:
    """Each GPU node's nvidia.com/gpu: no key, key at 0, or allocatable below capacity."""
    found = []
    for node in facts.gpu_nodes:
        name = gpu.name_of(node)
        allocatable, capacity = gpu.gpu_quantity(node), gpu.gpu_quantity(node, "capacity")
        if allocatable is None:
            label, summary = "gpu-not-advertised", f"{name}: no nvidia.com/gpu key"
        elif allocatable == "0":
            label, summary = "gpu-allocatable-zero", f"{name}: nvidia.com/gpu allocatable 0"
        elif gpu.gpu_count(allocatable) < gpu.gpu_count(capacity):
            label, summary = "gpu-allocatable-below-capacity", f"{name}: {allocatable}/{capacity}"
        else:
            continue
        logs = [r for p in _plugin_pods_on(facts, name) for r in log_requests(p, "device-plugin")]
        found.append(
            kind(label).found(
                node_subject(name),
                summary,
                [_quantities(node)],
                explains=[
                    Link("pod-insufficient-gpu", tag=node_subject(name)),
                    Link("pod-admission-rejected", tag=node_subject(name)),
                ],
                read_logs=logs,
                node=name,
                allocatable=allocatable,
                capacity=capacity,
                namespace=facts.operator_namespace,
            )
        )
    return found


def deploy_labels(facts: Facts) -> list[DoctorFinding]:
    """`nvidia.com/gpu.deploy.<component>=false` on a GPU node: opted out of that operand."""
    found = []
    for node in facts.gpu_nodes:
        name = gpu.name_of(node)
        for component in gpu.COMPONENTS:
            if gpu.label_of(node, component.deploy_label) != "false":
                continue
            plugin = component.daemonset == gpu.DEVICE_PLUGIN_DAEMONSET
            found.append(
                kind("deploy-label-false").found(
                    node_subject(name),
                    f"{name}: {component.deploy_label}=false",
                    [
                        Evidence(
                            node_subject(name),
                            f"metadata.labels[{component.deploy_label}]",
                            "false",
                        ),
                        _quantities(node),
                    ],
                    severity=None if plugin else "warning",
                    explains=node_symptoms(name)
                    if plugin
                    else [Link("operand-missing-on-gpu-nodes", tag=node_subject(name))],
                    label=component.deploy_label,
                    component=component.daemonset,
                    node=name,
                )
            )
    return found


def _operand_tolerations(facts: Facts) -> dict[str, list[dict]]:
    """Each operand DaemonSet's pod tolerations, as the DaemonSet controller applies them; the
    ClusterPolicy's `spec.daemonsets.tolerations` when no operand exists yet."""
    operands = gpu.operand_daemonsets(facts)
    if operands:
        return {
            gpu.name_of(ds): daemon_pod_tolerations(gpu.pod_template_spec(ds)) for ds in operands
        }
    spec = ((facts.policy or {}).get("spec") or {}).get("daemonsets") or {}
    return {
        "the operands": daemon_pod_tolerations(
            {"tolerations": spec.get("tolerations") or DEFAULT_OPERAND_TOLERATIONS}
        )
    }


def taints(facts: Facts) -> list[DoctorFinding]:
    """GPU node taints the operands do not tolerate (they keep the device plugin off)."""
    if facts.policy is None and not gpu.operand_daemonsets(facts):
        return []
    tolerations = _operand_tolerations(facts)
    found = []
    for node in facts.gpu_nodes:
        for taint in gpu.taints_of(node):
            refused = [
                ds
                for ds, given in tolerations.items()
                if taint.get("effect") in SCHEDULING_EFFECTS
                and not any(tolerates_taint(t, taint) for t in given)
            ]
            if refused:
                found.append(_taint_finding(facts, node, taint, refused))
    return found


def _template_tolerations(facts: Facts) -> str:
    """The tolerations the operator renders into its operands, as written (no defaults)."""
    plugin = gpu.daemonset(facts)
    if plugin is not None:
        return json.dumps(gpu.daemonset_tolerations(plugin))
    spec = ((facts.policy or {}).get("spec") or {}).get("daemonsets") or {}
    return json.dumps(spec.get("tolerations") or DEFAULT_OPERAND_TOLERATIONS)


def _taint_finding(facts: Facts, node: Obj, taint: dict, refused: list[str]) -> DoctorFinding:
    name, text = gpu.name_of(node), gpu.taint_text(taint)
    running = bool(_plugin_pods_on(facts, name))
    return kind("gpu-node-taint-not-tolerated").found(
        node_subject(name),
        f"{name}: taint {text} not tolerated by {len(refused)} operand(s)",
        [
            Evidence(node_subject(name), "spec.taints", text),
            Evidence(
                "operand DaemonSets", "spec.template.spec.tolerations", _template_tolerations(facts)
            ),
            _quantities(node),
        ],
        severity="warning" if running else None,
        explains=[*node_symptoms(name), Link("pod-untolerated-taint", tag=text)],
        tags=[text],
        taint=text,
        operands=", ".join(refused),
        node=name,
        key=taint["key"],
        effect=taint.get("effect", ""),
    )


def readiness(facts: Facts) -> list[DoctorFinding]:
    """GPU nodes that are NotReady or cordoned: nothing new is placed there."""
    found = []
    for node in facts.gpu_nodes:
        name = gpu.name_of(node)
        cordoned = bool((node.get("spec") or {}).get("unschedulable"))
        if gpu.is_ready(node) and not cordoned:
            continue
        state = "NotReady" if not gpu.is_ready(node) else "cordoned (spec.unschedulable)"
        node_taints = [gpu.taint_text(t) for t in gpu.taints_of(node)]
        found.append(
            kind("gpu-node-not-ready").found(
                node_subject(name),
                f"{name}: {state}",
                [
                    Evidence(
                        node_subject(name), "status.conditions[Ready] / spec.unschedulable", state
                    )
                ],
                explains=[
                    *node_symptoms(name),
                    Link("pod-unschedulable"),
                    *(Link("pod-untolerated-taint", tag=t) for t in node_taints),
                ],
                state=state,
                node=name,
            )
        )
    return found


def operator_labels(facts: Facts) -> list[DoctorFinding]:
    """GPU nodes NFD saw (pci-10de) that the operator has not labelled (gpu.present, deploy)."""
    if facts.policy is None:
        return []
    wanted = (gpu.GPU_PRESENT_LABEL, gpu.DEVICE_PLUGIN_DEPLOY_LABEL)
    found = []
    for node in facts.gpu_nodes:
        name = gpu.name_of(node)
        missing = [label for label in wanted if gpu.label_of(node, label) is None]
        if gpu.label_of(node, gpu.NVIDIA_PCI_LABEL) != "true" or not missing:
            continue
        found.append(
            kind("gpu-labels-missing").found(
                node_subject(name),
                f"{name}: pci-10de present, {', '.join(missing)} missing",
                [
                    Evidence(node_subject(name), f"metadata.labels[{label}]", "absent")
                    for label in missing
                ],
                explains=[
                    *node_symptoms(name),
                    Link("pod-selector-mismatch", tag=f"{gpu.GPU_PRESENT_LABEL}=true"),
                ],
                missing=", ".join(missing),
                namespace=facts.operator_namespace,
            )
        )
    return found


def _waiting_for_gpus(facts: Facts) -> Iterator[Obj]:
    return (p for p in unscheduled(facts, None) if gpu_requests(p))


def gpu_node_count(facts: Facts) -> list[DoctorFinding]:
    """No GPU node at all: an error when GPU pods wait, the idle state of a lab otherwise."""
    if facts.gpu_nodes:
        return []
    waiting = [subject("pod", p) for p in _waiting_for_gpus(facts)]
    evidence = [Evidence("nodes", "GPU nodes", f"none of {len(facts.objects('nodes'))} node(s)")]
    cloud = facts.cloud
    group = cloud.gpu_group if cloud else None
    if group:
        scaling = (
            f"desired {group['desired_size']}, min {group['min_size']}, max {group['max_size']}"
        )
        evidence.append(Evidence(f"nodegroup/{group['name']}", "scalingConfig", scaling))
    if waiting:
        evidence.append(Evidence("pods", "Pending for nvidia.com/*", ", ".join(waiting)))
    return [
        kind("gpu-nodes-scaled-to-zero").found(
            "nodes",
            "no GPU node" + (f"; {len(waiting)} GPU pod(s) waiting" if waiting else ""),
            evidence,
            severity=None if waiting else "info",
            explains=[
                Link(n)
                for n in (
                    "pod-insufficient-gpu",
                    "mig-resource-unavailable",
                    "pod-selector-mismatch",
                    "pod-untolerated-taint",
                )
            ],
            nodegroup=f" (node group {group['name']} at desired {group['desired_size']})"
            if group
            else "",
            cluster=cloud.cluster if cloud else "CLUSTER",
            group=group["name"] if group else "GPU_NODEGROUP",
        )
    ]
