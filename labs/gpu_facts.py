"""Facts about a GPU lab read from the live cluster view, named the way a person checks them.

Scenarios, waits and reports all ask the same questions (which nodes are GPU nodes,
what do they advertise, is the device plugin there, what does the ClusterPolicy say,
what did the scheduler tell the pod), so the answers live here once.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from labs import nodes

if TYPE_CHECKING:
    from labs.cluster import ClusterView
    from labs.lab import Lab

DEVICE_PLUGIN_DAEMONSET = "nvidia-device-plugin-daemonset"
DEVICE_PLUGIN_DEPLOY_LABEL = "nvidia.com/gpu.deploy.device-plugin"
CLUSTER_POLICY_NAME = "cluster-policy"
OPERATOR_DEPLOYMENT = "gpu-operator"
# The ClusterPolicy fields scenarios may patch, with their schema types (nvidia.com/v1
# ClusterPolicy OpenAPI schema, gpu-operator v26.3). A patch outside this shape is
# refused before it reaches the cluster.
CLUSTER_POLICY_PATCHABLE: dict[str, Any] = {
    "spec": {
        "devicePlugin": {"enabled": bool},
        "dcgmExporter": {"enabled": bool},
        "gfd": {"enabled": bool},
        "toolkit": {"enabled": bool, "version": str},
    }
}


# --- nodes -----------------------------------------------------------------------------


def name_of(obj: Mapping[str, Any]) -> str:
    return str(obj["metadata"]["name"])


def gpu_nodes(view: ClusterView) -> list[dict[str, Any]]:
    """GPU nodes, sorted by name."""
    return nodes.gpu_nodes(view.objects("nodes"))


def allocatable_gpus(node: Mapping[str, Any]) -> str | None:
    """Allocatable nvidia.com/gpu exactly as the API shows it ("0"); None when the key is absent."""
    return nodes.gpu_quantity(node, "allocatable")


def capacity_gpus(node: Mapping[str, Any]) -> str | None:
    return nodes.gpu_quantity(node, "capacity")


def allocatable_by_node(view: ClusterView) -> dict[str, str | None]:
    """Allocatable nvidia.com/gpu per GPU node."""
    return {name_of(n): allocatable_gpus(n) for n in gpu_nodes(view)}


def describe_allocatable(view: ClusterView) -> str:
    """`node: value` per GPU node ("absent" when the key is gone), or "no GPU nodes"."""
    values = allocatable_by_node(view)
    if not values:
        return "no GPU nodes"
    return ", ".join(f"{name}: {'absent' if v is None else v}" for name, v in values.items())


def total_allocatable(view: ClusterView) -> int:
    """GPUs the scheduler can hand out right now, over all GPU nodes."""
    return sum(int(v) for v in allocatable_by_node(view).values() if v and v.isdigit())


# --- operator objects ------------------------------------------------------------------


def daemonset(view: ClusterView, name: str = DEVICE_PLUGIN_DAEMONSET) -> dict[str, Any] | None:
    return view.find("daemonsets", name)


def daemonset_counts(ds: Mapping[str, Any]) -> tuple[int, int, int]:
    """(desired, current, ready) as `kubectl get ds` prints them."""
    status = ds.get("status") or {}
    return (
        int(status.get("desiredNumberScheduled", 0)),
        int(status.get("currentNumberScheduled", 0)),
        int(status.get("numberReady", 0)),
    )


def describe_daemonset(view: ClusterView, name: str = DEVICE_PLUGIN_DAEMONSET) -> str:
    ds = daemonset(view, name)
    if ds is None:
        return "NotFound"
    desired, current, ready = daemonset_counts(ds)
    return f"{desired}/{current}/{ready} (desired/current/ready)"


def cluster_policy(view: ClusterView) -> dict[str, Any] | None:
    return view.find("clusterpolicies", CLUSTER_POLICY_NAME)


def component_enabled(policy: Mapping[str, Any], component: str) -> bool | None:
    """`spec.<component>.enabled` of a ClusterPolicy (None when unset)."""
    value = (policy.get("spec", {}).get(component) or {}).get("enabled")
    return None if value is None else bool(value)


def policy_state(policy: Mapping[str, Any] | None) -> str:
    if policy is None:
        return "NotFound"
    return str((policy.get("status") or {}).get("state") or "unset")


def operator_deployment(view: ClusterView) -> dict[str, Any] | None:
    return view.find("deployments", OPERATOR_DEPLOYMENT)


def describe_deployment(deployment: Mapping[str, Any] | None) -> str:
    if deployment is None:
        return "NotFound"
    wanted = int((deployment.get("spec") or {}).get("replicas", 1))
    available = int((deployment.get("status") or {}).get("availableReplicas", 0))
    return f"{available}/{wanted} available"


def operator_log(lab: Lab, view: ClusterView, tail: int = 200) -> list[str]:
    """The last lines of the GPU Operator controller's log (`kubectl logs deploy/gpu-operator`)."""
    from kubernetes import client as k8s

    deployment = operator_deployment(view)
    if deployment is None:
        return []
    selector = (deployment.get("spec", {}).get("selector") or {}).get("matchLabels") or {}
    pods = [
        p
        for p in view.objects("operator_pods")
        if selector
        and all((p["metadata"].get("labels") or {}).get(k) == v for k, v in selector.items())
        and (p.get("status") or {}).get("phase") == "Running"
    ]
    if not pods:
        return []
    text = k8s.CoreV1Api(lab.kube).read_namespaced_pod_log(
        name_of(pods[0]), lab.operator_namespace, tail_lines=tail
    )
    return [line for line in text.splitlines() if line.strip()]


def operator_step_line(lines: list[str], step: str, status: str) -> str | None:
    """The last `ClusterPolicy step completed` log line for `step` with `status`, if any."""
    for line in reversed(lines):
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if (
            isinstance(entry, dict)
            and entry.get("msg") == "ClusterPolicy step completed"
            and entry.get("state:") == step
            and entry.get("status") == status
        ):
            return line
    return None


# --- ClusterPolicy patches ---------------------------------------------------------------


def validate_policy_patch(
    patch: Mapping[str, Any], shape: Mapping[str, Any] = CLUSTER_POLICY_PATCHABLE, path: str = ""
) -> None:
    """Raise ValueError naming the first field of `patch` outside the ClusterPolicy schema."""
    for key, value in patch.items():
        here = f"{path}.{key}" if path else key
        if key not in shape:
            known = ", ".join(sorted(shape))
            raise ValueError(f"ClusterPolicy has no patchable field {here!r} (known: {known})")
        expected = shape[key]
        if isinstance(expected, Mapping):
            if not isinstance(value, Mapping):
                raise ValueError(f"ClusterPolicy field {here!r} must be an object")
            validate_policy_patch(value, expected, here)
        elif not isinstance(value, expected):
            raise ValueError(
                f"ClusterPolicy field {here!r} must be {expected.__name__}, got {value!r}"
            )


def patch_cluster_policy(lab: Lab, patch: Mapping[str, Any]) -> dict[str, Any]:
    """Merge-patch the lab's ClusterPolicy (like `kubectl patch --type=merge`)."""
    from kubernetes import client as k8s

    validate_policy_patch(patch)
    return k8s.CustomObjectsApi(lab.kube).patch_cluster_custom_object(
        "nvidia.com",
        "v1",
        "clusterpolicies",
        CLUSTER_POLICY_NAME,
        dict(patch),
        _content_type="application/merge-patch+json",
    )


# --- pods and their events ---------------------------------------------------------------


def pod(view: ClusterView, name: str) -> dict[str, Any] | None:
    return view.find("pods", name)


def pod_phase(view: ClusterView, name: str) -> str:
    found = pod(view, name)
    return "absent" if found is None else str((found.get("status") or {}).get("phase") or "Pending")


def _event_order(event: Mapping[str, Any]) -> tuple[str, int]:
    meta = event.get("metadata") or {}
    stamp = event.get("firstTimestamp") or event.get("eventTime") or meta.get("creationTimestamp")
    version = str(meta.get("resourceVersion", ""))
    return (str(stamp or ""), int(version) if version.isdigit() else 0)


def pod_events(view: ClusterView, pod_obj: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Events about this very pod (matched by uid), oldest first, as `kubectl describe` lists."""
    uid = pod_obj["metadata"].get("uid")
    mine = [e for e in view.objects("events") if (e.get("involvedObject") or {}).get("uid") == uid]
    return sorted(mine, key=_event_order)


def event_reasons(events: list[dict[str, Any]]) -> list[str]:
    """Reasons in order, with repeats as kubectl shows them: `FailedScheduling (x3)`."""
    return [
        f"{e.get('reason')} (x{e['count']})"
        if int(e.get("count") or 1) > 1
        else str(e.get("reason"))
        for e in events
    ]


def scheduling_failure(events: list[dict[str, Any]]) -> str | None:
    """The latest FailedScheduling message among a pod's events, if the scheduler gave one."""
    messages = [str(e.get("message", "")) for e in events if e.get("reason") == "FailedScheduling"]
    return messages[-1] if messages else None


def pod_story(view: ClusterView, name: str) -> tuple[str, list[dict[str, Any]]]:
    """A pod's phase ("absent" when it does not exist) and its events, oldest first."""
    found = pod(view, name)
    return pod_phase(view, name), pod_events(view, found) if found else []


# --- timeline gauges -----------------------------------------------------------------------


def _ready_device_plugins(view: ClusterView) -> int | None:
    ds = daemonset(view)
    return None if ds is None else daemonset_counts(ds)[2]


def gpu_gauges(probe_name: str) -> dict[str, Callable[[ClusterView], Any]]:
    """The three curves of a GPU timeline: GPUs advertised, device plugins ready, probe phase."""
    return {
        "allocatable nvidia.com/gpu (all GPU nodes)": total_allocatable,
        "device-plugin pods ready": _ready_device_plugins,
        f"{probe_name} phase": lambda view: pod_phase(view, probe_name),
    }


# --- evidence lines for findings -------------------------------------------------------------


def describe_advertised(view: ClusterView) -> str:
    """Allocatable and capacity nvidia.com/gpu of every node (None: the key is absent)."""
    return "; ".join(
        f"{name_of(n)}: allocatable {allocatable_gpus(n)}, capacity {capacity_gpus(n)}"
        for n in sorted(view.objects("nodes"), key=name_of)
    )


def describe_gpu_node_label(view: ClusterView, label: str) -> str:
    """`node=value` of one label on every GPU node."""
    return ", ".join(
        f"{name_of(n)}={(n['metadata'].get('labels') or {}).get(label)}" for n in gpu_nodes(view)
    )


def daemonset_names(view: ClusterView) -> list[str]:
    return sorted(name_of(d) for d in view.objects("daemonsets"))


def operator_step(lab: Lab, view: ClusterView, step: str, status: str) -> str | None:
    """The operator's log line saying `step` completed with `status`, if it logged one."""
    return operator_step_line(operator_log(lab, view), step, status)


def debug_node_command(view: ClusterView) -> str:
    """`kubectl debug node/...` on the first GPU node, ready for `chroot /host ...`."""
    nodes = gpu_nodes(view)
    node = name_of(nodes[0]) if nodes else "<gpu-node>"
    return f"kubectl debug node/{node} -it --image=public.ecr.aws/amazonlinux/amazonlinux:2023 --"


def waited_then_scheduled(events: list[dict[str, Any]]) -> bool:
    """The pod's events tell the whole story: FailedScheduling first, Scheduled after it."""
    reasons = [e.get("reason") for e in events]
    return (
        "FailedScheduling" in reasons
        and "Scheduled" in reasons[reasons.index("FailedScheduling") :]
    )
