"""Facts about a GPU lab, read off Kubernetes objects and named the way a person checks them.

Scenarios, waits, status and reports all ask the same questions (which nodes are GPU
nodes, what do they advertise, is the device plugin there, what does the ClusterPolicy
say, what did the scheduler tell the pod), so the answers live here once. Everything
here is a pure read of `Objects` (a live view or a one-off snapshot); nothing calls the API.

The device-plugin trap lives here too: a GPU node whose plugin is gone keeps the
`nvidia.com/gpu` key with value "0", while a system node has no key at all, so "how many
GPUs does this node offer" has three answers: None, "0", or a number.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from labs.kube.view import Objects

GPU_RESOURCE = "nvidia.com/gpu"
# Labels the stack's GPU node group puts on its nodes (terraform/eks.tf).
GPU_NODE_LABELS = {"tier": "gpu", "nvidia.com/gpu": "true"}
GPU_PRESENT_LABEL = "nvidia.com/gpu.present"
# Operand DaemonSets by the names the operator (v26.3) gives them; each one's pods carry
# `app=<its name>`.
DEVICE_PLUGIN_DAEMONSET = "nvidia-device-plugin-daemonset"
DCGM_EXPORTER_DAEMONSET = "nvidia-dcgm-exporter"
GFD_DAEMONSET = "gpu-feature-discovery"
VALIDATOR_DAEMONSET = "nvidia-operator-validator"
# Per-node opt-out: the operator adds `nvidia.com/gpu.deploy.<component>=true` only where the
# label is missing, so a value an admin set ("false") stays (addGPUStateLabels, v26.3.1).
DEVICE_PLUGIN_DEPLOY_LABEL = "nvidia.com/gpu.deploy.device-plugin"
# NFD's label for a node with an NVIDIA PCI device (vendor 10de): there before any operator.
NVIDIA_PCI_LABEL = "feature.node.kubernetes.io/pci-10de.present"
DEPLOY_LABEL_PREFIX = "nvidia.com/gpu.deploy."
CLUSTER_POLICY_NAME = "cluster-policy"
OPERATOR_DEPLOYMENT = "gpu-operator"
# The chart labels the controller's pods `app=gpu-operator` (what the Deployment selects).
OPERATOR_POD_SELECTOR = "app=gpu-operator"
TOOLKIT_DAEMONSET = "nvidia-container-toolkit-daemonset"
# NVIDIA Container Toolkit releases from 1.17 on are built against glibc >= 2.27, which Amazon
# Linux 2 (glibc 2.26) lacks; 1.14.6-ubi8, the AL2 write-up's pin, runs there. The one rule the
# doctor reads a cluster by and the rehearsal world plays the node's failure by.
TOOLKIT_NEEDS_GLIBC_227 = (1, 17)
_TOOLKIT_VERSION = re.compile(r"v?(\d+)\.(\d+)")


def toolkit_needs_glibc_227(version: str) -> bool:
    """Whether a container toolkit release (`v1.17.8-ubuntu20.04`, `1.14.6`) needs glibc 2.27."""
    found = _TOOLKIT_VERSION.match(version)
    return found is not None and (int(found[1]), int(found[2])) >= TOOLKIT_NEEDS_GLIBC_227


@dataclass(frozen=True)
class Component:
    """A ClusterPolicy component the operator runs as a DaemonSet on GPU nodes."""

    spec_key: str  # spec.<spec_key>.enabled in the ClusterPolicy
    daemonset: str
    deploy: str  # the node label nvidia.com/gpu.deploy.<deploy>
    enabled_by_default: bool  # what the operator does when spec.<key>.enabled is unset

    @property
    def deploy_label(self) -> str:
        return DEPLOY_LABEL_PREFIX + self.deploy


# The v26.3 operand DaemonSets (the validator has no switch: it always runs).
COMPONENTS = (
    Component("driver", "nvidia-driver-daemonset", "driver", True),
    Component("toolkit", "nvidia-container-toolkit-daemonset", "container-toolkit", True),
    Component("validator", VALIDATOR_DAEMONSET, "operator-validator", True),
    Component("devicePlugin", DEVICE_PLUGIN_DAEMONSET, "device-plugin", True),
    Component("dcgm", "nvidia-dcgm", "dcgm", False),
    Component("dcgmExporter", DCGM_EXPORTER_DAEMONSET, "dcgm-exporter", True),
    Component("gfd", GFD_DAEMONSET, "gpu-feature-discovery", True),
    Component("migManager", "nvidia-mig-manager", "mig-manager", True),
    Component("nodeStatusExporter", "nvidia-node-status-exporter", "node-status-exporter", False),
)

Obj = dict[str, Any]


def name_of(obj: Mapping[str, Any]) -> str:
    return str(obj["metadata"]["name"])


# --- nodes -----------------------------------------------------------------------------


def is_gpu_node(node: Mapping[str, Any]) -> bool:
    """A node with an NVIDIA GPU: by the lab node group's labels (there before any operator),
    NFD's PCI label, GPU feature discovery's `gpu.present` label, or a GPU capacity (any
    cluster's nodes)."""
    labels = node.get("metadata", {}).get("labels") or {}
    return (
        all(labels.get(key) == value for key, value in GPU_NODE_LABELS.items())
        or labels.get(NVIDIA_PCI_LABEL) == "true"
        or labels.get(GPU_PRESENT_LABEL) == "true"
        or gpu_quantity(node, "capacity") is not None
    )


def is_ready(obj: Mapping[str, Any]) -> bool:
    """The node's (or pod's) Ready condition is True."""
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def gpu_quantity(node: Mapping[str, Any], field: str = "allocatable") -> str | None:
    """`status.<field>["nvidia.com/gpu"]` as the API shows it ("0"); None when the key is absent."""
    value = (node.get("status", {}).get(field) or {}).get(GPU_RESOURCE)
    return None if value is None else str(value)


def gpu_count(quantity: str | None) -> int:
    """A quantity as a whole number of GPUs (0 for an absent or fractional one)."""
    return int(quantity) if quantity and quantity.isdigit() else 0


def gpu_nodes(objects: Objects) -> list[Obj]:
    """GPU nodes, sorted by name."""
    return sorted((n for n in objects.objects("nodes") if is_gpu_node(n)), key=name_of)


def schedulable_gpu_nodes(objects: Objects) -> list[Obj]:
    """GPU nodes that are Ready and advertise at least one allocatable GPU."""
    return [n for n in gpu_nodes(objects) if is_ready(n) and gpu_count(gpu_quantity(n)) >= 1]


def ready_gpu_nodes(objects: Objects) -> list[Obj]:
    return [n for n in gpu_nodes(objects) if is_ready(n)]


def describe_gpu_nodes(objects: Objects) -> str:
    """One-line summary for progress output: `2 GPU node(s): a Ready gpu=1, b NotReady gpu=-`."""
    gpus = gpu_nodes(objects)
    if not gpus:
        return "no GPU nodes"
    parts = []
    for node in gpus:
        state = "Ready" if is_ready(node) else "NotReady"
        parts.append(f"{name_of(node)} {state} gpu={gpu_quantity(node) or '-'}")
    return f"{len(gpus)} GPU node(s): " + ", ".join(parts)


def allocatable_by_node(objects: Objects) -> dict[str, str | None]:
    """Allocatable nvidia.com/gpu per GPU node."""
    return {name_of(n): gpu_quantity(n) for n in gpu_nodes(objects)}


def describe_allocatable(objects: Objects) -> str:
    """`node: value` per GPU node ("absent" when the key is gone), or "no GPU nodes"."""
    values = allocatable_by_node(objects)
    if not values:
        return "no GPU nodes"
    return ", ".join(f"{name}: {'absent' if v is None else v}" for name, v in values.items())


def total_allocatable(objects: Objects) -> int:
    """GPUs the scheduler can hand out right now, over all GPU nodes."""
    return sum(gpu_count(v) for v in allocatable_by_node(objects).values())


# kubelet's device manager keeps a stopped plugin's devices (marked unhealthy when it
# disconnects) in capacity but not in allocatable until endpointStopGracePeriod has passed,
# `time.Duration(5) * time.Minute` (kubernetes pkg/kubelet/cm/devicemanager/types.go; the
# check is in ManagerImpl.GetCapacity, manager.go); then the node status setter reports the
# removed resource as "0", key kept (pkg/kubelet/nodestatus/setters.go). So after a device
# plugin goes, capacity says 1 for 5 minutes while allocatable already says 0.
CAPACITY_GRACE = (
    "capacity still counts GPUs kubelet no longer offers: a stopped device plugin's for "
    "kubelet's 5-minute grace period, then 0 (or unhealthy ones, after an XID)"
)


def capacity_note(node: Mapping[str, Any]) -> str:
    """` (CAPACITY_GRACE)` while the node's capacity exceeds its allocatable, else ""."""
    allocatable, capacity = gpu_quantity(node), gpu_quantity(node, "capacity")
    if allocatable is None or gpu_count(capacity) <= gpu_count(allocatable):
        return ""
    return f" ({CAPACITY_GRACE})"


def describe_capacity(objects: Objects) -> str:
    """`node: value` of capacity nvidia.com/gpu per GPU node, saying why it lags allocatable."""
    nodes = gpu_nodes(objects)
    if not nodes:
        return "no GPU nodes"
    return ", ".join(
        f"{name_of(n)}: {gpu_quantity(n, 'capacity') or 'absent'}{capacity_note(n)}" for n in nodes
    )


def describe_advertised(objects: Objects) -> str:
    """Allocatable and capacity nvidia.com/gpu of every node (None: the key is absent)."""
    return "; ".join(
        f"{name_of(n)}: allocatable {gpu_quantity(n)}, capacity {gpu_quantity(n, 'capacity')}"
        f"{capacity_note(n)}"
        for n in sorted(objects.objects("nodes"), key=name_of)
    )


def label_of(node: Mapping[str, Any], label: str) -> str | None:
    return (node.get("metadata", {}).get("labels") or {}).get(label)


def describe_gpu_node_label(objects: Objects, label: str) -> str:
    """`node=value` of one label on every GPU node."""
    return ", ".join(f"{name_of(n)}={label_of(n, label)}" for n in gpu_nodes(objects))


def taints_of(node: Mapping[str, Any]) -> list[dict[str, Any]]:
    return list((node.get("spec") or {}).get("taints") or [])


def taint_text(taint: Mapping[str, Any]) -> str:
    """A taint the way `kubectl taint` writes it: `key=value:Effect` (`key:Effect` unvalued)."""
    value = taint.get("value")
    return f"{taint['key']}{'=' + str(value) if value else ''}:{taint.get('effect', '')}"


def has_taint(node: Mapping[str, Any], key: str, effect: str) -> bool:
    return any(t.get("key") == key and t.get("effect") == effect for t in taints_of(node))


def describe_taints(objects: Objects) -> str:
    """`node: taint, taint` for every GPU node."""
    return "; ".join(
        f"{name_of(n)}: {', '.join(taint_text(t) for t in taints_of(n)) or 'none'}"
        for n in gpu_nodes(objects)
    )


# --- operator objects ------------------------------------------------------------------


def daemonset(objects: Objects, name: str = DEVICE_PLUGIN_DAEMONSET) -> Obj | None:
    return objects.find("daemonsets", name)


def daemonset_counts(ds: Mapping[str, Any]) -> tuple[int, int, int]:
    """(desired, current, ready) as `kubectl get ds` prints them."""
    status = ds.get("status") or {}
    return (
        int(status.get("desiredNumberScheduled", 0)),
        int(status.get("currentNumberScheduled", 0)),
        int(status.get("numberReady", 0)),
    )


def daemonset_rolled_out(ds: Mapping[str, Any] | None) -> bool:
    """What `kubectl rollout status ds/X` waits for: the controller has seen the current spec,
    and every desired pod runs it and is available."""
    if ds is None:
        return False
    status = ds.get("status") or {}
    desired = int(status.get("desiredNumberScheduled", 0))
    return (
        status.get("observedGeneration") == ds["metadata"].get("generation")
        and int(status.get("updatedNumberScheduled", 0)) == desired
        and int(status.get("numberAvailable", 0)) == desired
    )


def describe_daemonset(objects: Objects, name: str = DEVICE_PLUGIN_DAEMONSET) -> str:
    ds = daemonset(objects, name)
    if ds is None:
        return "NotFound"
    desired, current, ready = daemonset_counts(ds)
    return f"{desired}/{current}/{ready} (desired/current/ready)"


def daemonset_names(objects: Objects) -> list[str]:
    return sorted(name_of(d) for d in objects.objects("daemonsets"))


def pod_template_spec(owner: Mapping[str, Any] | None) -> dict[str, Any]:
    """The pod spec in a DaemonSet's, Deployment's or Job's template ({} when it has none)."""
    return (((owner or {}).get("spec") or {}).get("template") or {}).get("spec") or {}


def daemonset_env(ds: Mapping[str, Any] | None) -> dict[str, str]:
    """The env of a DaemonSet's first container (the operand itself), by name."""
    containers = pod_template_spec(ds).get("containers") or [{}]
    return {e["name"]: str(e.get("value", "")) for e in containers[0].get("env") or []}


def daemonset_tolerations(ds: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """The tolerations in a DaemonSet's pod template (what the operator rendered)."""
    return list(pod_template_spec(ds).get("tolerations") or [])


def operand_daemonsets(objects: Objects) -> list[Obj]:
    """The DaemonSets the ClusterPolicy owns (the operator's operands), sorted by name."""
    return sorted(
        (
            d
            for d in objects.objects("daemonsets")
            if any(
                ref.get("kind") == "ClusterPolicy" and ref.get("controller")
                for ref in d["metadata"].get("ownerReferences") or []
            )
        ),
        key=name_of,
    )


def operand_counts(objects: Objects) -> dict[str, tuple[int, int, int]]:
    """(desired, current, ready) of every operand DaemonSet, by name."""
    return {name_of(d): daemonset_counts(d) for d in operand_daemonsets(objects)}


def describe_operands(objects: Objects) -> str:
    """`name ready/desired` of every operand DaemonSet."""
    return ", ".join(f"{n} {c[2]}/{c[0]}" for n, c in operand_counts(objects).items())


def daemon_pods(objects: Objects, daemonset_name: str) -> list[Obj]:
    """The pods of the operator-namespace DaemonSet `daemonset_name` (by owner)."""
    return [
        p
        for p in objects.objects("operator_pods")
        if any(
            ref.get("kind") == "DaemonSet" and ref.get("name") == daemonset_name
            for ref in p["metadata"].get("ownerReferences") or []
        )
    ]


def daemon_pod_on(objects: Objects, daemonset_name: str, node: str) -> Obj | None:
    """The pod DaemonSet `daemonset_name` runs on `node`, if any."""
    return next((p for p in daemon_pods(objects, daemonset_name)
                 if p["spec"].get("nodeName") == node), None)  # fmt: skip


def daemon_pod_nodes(objects: Objects, daemonset_name: str) -> list[str]:
    """Nodes that run a pod of the operator-namespace DaemonSet `daemonset_name`, sorted."""
    return sorted(
        str(p["spec"]["nodeName"])
        for p in daemon_pods(objects, daemonset_name)
        if p["spec"].get("nodeName")
    )


def cluster_policy(objects: Objects) -> Obj | None:
    return objects.find("clusterpolicies", CLUSTER_POLICY_NAME)


def component_on(policy: Mapping[str, Any], component: Component) -> bool:
    """Whether the operator runs `component` under this ClusterPolicy (its default if unset)."""
    enabled = component_enabled(policy, component.spec_key)
    return component.enabled_by_default if enabled is None else enabled


def component_enabled(policy: Mapping[str, Any], component: str) -> bool | None:
    """`spec.<component>.enabled` of a ClusterPolicy (None when unset)."""
    value = (policy.get("spec", {}).get(component) or {}).get("enabled")
    return None if value is None else bool(value)


def component_env(policy: Mapping[str, Any] | None, component: str) -> dict[str, str]:
    """`spec.<component>.env` of a ClusterPolicy, by name."""
    section = ((policy or {}).get("spec") or {}).get(component) or {}
    return {e["name"]: str(e.get("value", "")) for e in section.get("env") or []}


def component_toggles(policy: Mapping[str, Any]) -> dict[str, bool | None]:
    """Every `spec.<component>.enabled` the ClusterPolicy sets, by component."""
    spec = policy.get("spec") or {}
    return {
        key: component_enabled(policy, key)
        for key, value in sorted(spec.items())
        if isinstance(value, dict) and "enabled" in value
    }


def policy_state(policy: Mapping[str, Any] | None) -> str:
    if policy is None:
        return "NotFound"
    return str((policy.get("status") or {}).get("state") or "unset")


def policy_error_condition(policy: Mapping[str, Any]) -> dict[str, Any]:
    """The operator's Error condition ({} when it has none)."""
    conditions = (policy.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == "Error"), {})


def policy_error(policy: Mapping[str, Any] | None) -> str:
    """Why the operator holds a ClusterPolicy not ready, as `reason: message` (its Error
    condition names the states); "" while it is ready."""
    if policy is None or policy_state(policy) == "ready":
        return ""
    error = policy_error_condition(policy)
    return f"{error.get('reason', '')}: {error.get('message', '')}".strip(": ")


def operator_deployment(objects: Objects) -> Obj | None:
    return objects.find("deployments", OPERATOR_DEPLOYMENT)


def operator_version(deployment: Mapping[str, Any]) -> str:
    """The release the controller runs, as its image's tag says (`nvcr.io/nvidia/gpu-operator:
    v25.3.4`): which operator a person is reading about."""
    containers = deployment.get("spec", {}).get("template", {}).get("spec", {}).get("containers")
    image = str((containers or [{}])[0].get("image", ""))
    return image.rsplit(":", 1)[1] if ":" in image.rsplit("/", 1)[-1] else "version unknown"


def describe_deployment(deployment: Mapping[str, Any] | None) -> str:
    if deployment is None:
        return "NotFound"
    wanted = int((deployment.get("spec") or {}).get("replicas", 1))
    available = int((deployment.get("status") or {}).get("availableReplicas", 0))
    return f"{available}/{wanted} available"


def operator_available(deployment: Mapping[str, Any] | None) -> bool:
    return bool(deployment and (deployment.get("status") or {}).get("availableReplicas"))


def wanted_replicas(deployment: Mapping[str, Any] | None) -> int | None:
    """`spec.replicas` (1 when unset, as the API defaults it); None without a Deployment."""
    if deployment is None:
        return None
    return int((deployment.get("spec") or {}).get("replicas", 1))


def operator_pods(objects: Objects) -> list[Obj]:
    """Pods of the operator Deployment (any phase), by its selector."""
    deployment = operator_deployment(objects)
    selector = ((deployment or {}).get("spec", {}).get("selector") or {}).get("matchLabels") or {}
    return [
        p
        for p in objects.objects("operator_pods")
        if selector
        and all((p["metadata"].get("labels") or {}).get(k) == v for k, v in selector.items())
    ]


def container_statuses(pod: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The statuses of the pod's init containers, then of its containers."""
    status = pod.get("status") or {}
    return [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]


def last_terminations(pod: Mapping[str, Any]) -> list[str]:
    """`lastState.terminated.reason` of each container that has one (OOMKilled, Error, ...)."""
    return [
        str(reason)
        for c in (pod.get("status") or {}).get("containerStatuses") or []
        if (reason := ((c.get("lastState") or {}).get("terminated") or {}).get("reason"))
    ]


def describe_operator(objects: Objects) -> str:
    """The controller's health as a person reads it: replicas wanted/available, pods, crashes."""
    pods = operator_pods(objects)
    crashes = [
        f"{name_of(p)} last terminated: {', '.join(reasons)}"
        for p in pods
        if (reasons := last_terminations(p))
    ]
    return _operator_replicas(objects, pods) + (f"; {'; '.join(crashes)}" if crashes else "")


def describe_operator_replicas(objects: Objects) -> str:
    """Replicas wanted/available and pods, without the pods' crash history: what a scenario
    that replaces the operator's pod compares with its baseline (a crash of the pod it
    replaced cannot come back)."""
    return _operator_replicas(objects, operator_pods(objects))


def _operator_replicas(objects: Objects, pods: list[Obj]) -> str:
    deployment = operator_deployment(objects)
    if deployment is None:
        return "Deployment NotFound"
    return (
        f"spec.replicas {wanted_replicas(deployment)}, {describe_deployment(deployment)}, "
        f"{len(pods)} pod(s)"
    )


def running_pods_of(deployment: Mapping[str, Any], pods: Iterable[Obj]) -> list[Obj]:
    """The Running pods a Deployment's selector matches (what `kubectl logs deploy/X` reads)."""
    selector = (deployment.get("spec", {}).get("selector") or {}).get("matchLabels") or {}
    return [
        p
        for p in pods
        if selector
        and all((p["metadata"].get("labels") or {}).get(k) == v for k, v in selector.items())
        and (p.get("status") or {}).get("phase") == "Running"
    ]


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


# --- pods and their events ---------------------------------------------------------------


def pod(objects: Objects, name: str) -> Obj | None:
    return objects.find("pods", name)


def pod_phase(objects: Objects, name: str) -> str:
    found = pod(objects, name)
    return "absent" if found is None else str((found.get("status") or {}).get("phase") or "Pending")


def _event_order(event: Mapping[str, Any]) -> tuple[str, int]:
    meta = event.get("metadata") or {}
    stamp = event.get("firstTimestamp") or event.get("eventTime") or meta.get("creationTimestamp")
    version = str(meta.get("resourceVersion", ""))
    return (str(stamp or ""), int(version) if version.isdigit() else 0)


def pod_events(objects: Objects, pod_obj: Mapping[str, Any]) -> list[Obj]:
    """Events about this very pod (matched by uid), oldest first, as `kubectl describe` lists."""
    uid = pod_obj["metadata"].get("uid")
    mine = [
        e for e in objects.objects("events") if (e.get("involvedObject") or {}).get("uid") == uid
    ]
    return sorted(mine, key=_event_order)


def event_reasons(events: list[Obj]) -> list[str]:
    """Reasons in order, with repeats as kubectl shows them: `FailedScheduling (x3)`."""
    return [
        f"{e.get('reason')} (x{e['count']})"
        if int(e.get("count") or 1) > 1
        else str(e.get("reason"))
        for e in events
    ]


# The scheduler's per-node reasons (Kubernetes 1.35 wording; the taint one names no key).
INSUFFICIENT_GPU = f"Insufficient {GPU_RESOURCE}"
SELECTOR_MISMATCH = "node(s) didn't match Pod's node affinity/selector"
# The kubelet's reason for a pod its device manager refused at admission (phase Failed).
ADMISSION_REJECTED = "UnexpectedAdmissionError"
UNTOLERATED_TAINT = "node(s) had untolerated taint(s)"
# What the DynamicResourceAllocation plugin's PostFilter adds for a pod with no resource claims
# (kube-scheduler 1.34+, DRA on by default): it precedes preemption's verdict on every failure.
NO_CLAIMS_TO_DEALLOCATE = "no new claims to deallocate"


def fit_error(nodes: int, reasons: Mapping[str, int]) -> str:
    """How FailedScheduling opens: `0/4 nodes are available: 1 Insufficient nvidia.com/gpu, 3
    node(s) didn't match ...` (each reason counted, sorted as text, as FitError prints them)."""
    counted = sorted(f"{count} {reason}" for reason, count in reasons.items() if count)
    return f"0/{nodes} nodes are available: {', '.join(counted)}."


def unresolvable_failure(nodes: int, reasons: Mapping[str, int]) -> str:
    """The whole FailedScheduling message when every node failed for good (a taint, a
    selector, a request larger than the node offers at all), so evicting pods would help none:
    `... no new claims to deallocate, preemption: 0/4 nodes are available: 4 Preemption is not
    helpful for scheduling.`"""
    return (
        f"{fit_error(nodes, reasons)} {NO_CLAIMS_TO_DEALLOCATE}, preemption: 0/{nodes} nodes "
        "are available: "
        f"{nodes} Preemption is not helpful for scheduling."
    )


def scheduling_failure(events: list[Obj]) -> str | None:
    """The latest FailedScheduling message among a pod's events, if the scheduler gave one."""
    messages = [str(e.get("message", "")) for e in events if e.get("reason") == "FailedScheduling"]
    return messages[-1] if messages else None


def pod_story(objects: Objects, name: str) -> tuple[str, list[Obj]]:
    """A pod's phase ("absent" when it does not exist) and its events, oldest first."""
    found = pod(objects, name)
    return pod_phase(objects, name), pod_events(objects, found) if found else []


def events_with_reason(objects: Objects, kind: str, reason: str) -> list[Obj]:
    """Events of one watched kind ("events", "operator_events") with this reason, oldest first."""
    return sorted((e for e in objects.objects(kind) if e.get("reason") == reason), key=_event_order)


def waited_then_scheduled(events: list[Obj]) -> bool:
    """The pod's events tell the whole story: FailedScheduling first, Scheduled after it."""
    reasons = [e.get("reason") for e in events]
    return (
        "FailedScheduling" in reasons
        and "Scheduled" in reasons[reasons.index("FailedScheduling") :]
    )


# --- timeline gauges -----------------------------------------------------------------------


def _ready_device_plugins(objects: Objects) -> int | None:
    ds = daemonset(objects)
    return None if ds is None else daemonset_counts(ds)[2]


def gpu_gauges(probe_name: str) -> dict[str, Callable[[Objects], Any]]:
    """The three curves of a GPU timeline: GPUs advertised, device plugins ready, probe phase."""
    return {
        "allocatable nvidia.com/gpu (all GPU nodes)": total_allocatable,
        "device-plugin pods ready": _ready_device_plugins,
        f"{probe_name} phase": lambda objects: pod_phase(objects, probe_name),
    }
