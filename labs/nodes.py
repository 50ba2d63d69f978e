"""Reading GPU facts off Kubernetes objects (plain dicts, as the API serves them).

The device-plugin trap lives here: a GPU node whose plugin is gone keeps the
`nvidia.com/gpu` key with value "0", while a system node has no key at all. So
"how many GPUs does this node offer" has three answers: None, 0, or a number.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

GPU_RESOURCE = "nvidia.com/gpu"
# Labels the stack's GPU node group puts on its nodes (terraform/eks.tf).
GPU_NODE_LABELS = {"tier": "gpu", "nvidia.com/gpu": "true"}
NODEGROUP_LABEL = "eks.amazonaws.com/nodegroup"


def is_gpu_node(node: dict[str, Any]) -> bool:
    """A node of the lab's GPU node group (by its node-group labels, not by NFD)."""
    labels = node.get("metadata", {}).get("labels") or {}
    return all(labels.get(key) == value for key, value in GPU_NODE_LABELS.items())


def is_ready(node: dict[str, Any]) -> bool:
    """The node's Ready condition is True."""
    conditions = node.get("status", {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def gpu_quantity(node: Mapping[str, Any], field: str = "allocatable") -> str | None:
    """`status.<field>["nvidia.com/gpu"]` as the API shows it ("0"); None when the key is absent."""
    value = (node.get("status", {}).get(field) or {}).get(GPU_RESOURCE)
    return None if value is None else str(value)


def gpu_allocatable(node: dict[str, Any]) -> int | None:
    """Allocatable `nvidia.com/gpu`: None when the key is absent, else its integer value."""
    value = gpu_quantity(node)
    return None if value is None else int(value)


def gpu_nodes(nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The GPU nodes among `nodes`, sorted by name."""
    return sorted((n for n in nodes if is_gpu_node(n)), key=lambda n: n["metadata"]["name"])


def schedulable_gpu_nodes(nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """GPU nodes that are Ready and advertise at least one allocatable GPU."""
    return [n for n in gpu_nodes(nodes) if is_ready(n) and (gpu_allocatable(n) or 0) >= 1]


def describe_gpu_nodes(nodes: list[dict[str, Any]]) -> str:
    """One-line summary for progress output: `2 GPU nodes: a Ready gpu=1, b NotReady gpu=-`."""
    gpus = gpu_nodes(nodes)
    if not gpus:
        return "no GPU nodes"
    parts = []
    for node in gpus:
        alloc = gpu_allocatable(node)
        state = "Ready" if is_ready(node) else "NotReady"
        parts.append(f"{node['metadata']['name']} {state} gpu={'-' if alloc is None else alloc}")
    return f"{len(gpus)} GPU node(s): " + ", ".join(parts)
