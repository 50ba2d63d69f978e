"""The NVIDIA GPU Operator (v26.3) reconciling the ClusterPolicy, as far as the lab can see it.

Installed means: Deployment `gpu-operator` and a ClusterPolicy exist (the sim Infra
creates both, with the chart's NFD worker DaemonSet, as helm would). Everything here
happens only while the operator pod is Ready (scale the Deployment to 0 and nothing
reconciles: status frozen, edits ignored, new nodes unlabelled).

Each reconcile, `operator_reconcile` after the ClusterPolicy or the GPU node set changed:
- labels GPU nodes (found by NFD's `pci-10de.present`) with `nvidia.com/gpu.present`,
  the `nvidia.com/gpu.deploy.<component>` labels and the GFD product labels;
- keeps its RuntimeClasses (`nvidia`, and `nvidia-cdi`/`nvidia-legacy` while CDI is on);
- creates the DaemonSet of every enabled component and deletes it when disabled (the
  operator deletes, it never scales to 0); a re-enabled one is a new object; an existing
  one whose rendered spec (tolerations, env, image) changed is updated in place (same uid):
  like the real operator it stamps the rendered object's hash (`nvidia.com/last-applied-hash`)
  and writes only when that hash changes, so a hand edit of a DaemonSet stays until then;
  the same for the metrics Service of a component that has one (dcgm-exporter :9400), and
  its own metrics Service `gpu-operator` (:8080), all owned by the ClusterPolicy;
- stamps each DaemonSet with when it saw the change (`STARTUP_FROM_ANNOTATION`), so its
  pods' startup times count from the ClusterPolicy change, not from when they were made;
- writes `status.state` (ready unless an enabled component's DaemonSet has unavailable
  pods; a deliberate disable is a successful reconcile) and the Ready/Error conditions;
- logs one `ClusterPolicy step completed` JSON line per step, in the operator's order,
  to the running operator pod whenever a step's status changes or that pod is new (a
  restarted operator logs its first reconcile again).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass

from labs.sim.controllers.base import Controller
from labs.sim.controllers.placement import STARTUP_FROM_ANNOTATION, owner_reference, pod_ready
from labs.sim.controlplane.informers import InformedKubeApi
from labs.sim.controlplane.resources import (
    CLUSTER_POLICY,
    DAEMONSETS,
    DEPLOYMENTS,
    NODES,
    PODS,
    RUNTIMECLASSES,
    SERVICES,
    NotFound,
    now_rfc3339,
)
from labs.sim.node.container_logs import ContainerLogs
from labs.sim.node.hardware import GPU_MEMORY_MIB, GPU_PRODUCT_LABEL, NVIDIA_PCI_LABEL
from labs.sim.timings import Timings

OPERATOR_DEPLOYMENT = "gpu-operator"
LOGGER = "controllers.ClusterPolicy"
DEFAULT_TOLERATIONS = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
# The annotation the real operator keeps the hash of what it rendered in.
LAST_APPLIED_HASH = "nvidia.com/last-applied-hash"
READY_MESSAGE = "ClusterPolicy is ready as all resources have been successfully reconciled"


@dataclass(frozen=True)
class MetricsPort:
    """The port of a metrics Service the operator creates (name, number)."""

    name: str
    number: int


OPERATOR_METRICS = MetricsPort("gpu-operator-metrics", 8080)
DCGM_EXPORTER_METRICS = MetricsPort("gpu-metrics", 9400)  # the port its pods serve on


@dataclass(frozen=True)
class Operand:
    """One ClusterPolicy component that the operator runs as a DaemonSet."""

    step: str
    daemonset: str
    container: str  # the main container's name in the operator's asset (`kubectl logs -c`)
    spec_key: str
    component: str  # nvidia.com/gpu.deploy.<component>
    enabled_by_default: bool
    image: str
    on_every_gpu_node: bool = True  # False: MIG-capable GPUs only (none on an A10G)
    metrics: MetricsPort | None = None  # its Service, named like the DaemonSet


OPERANDS = (
    Operand(
        "state-driver",
        "nvidia-driver-daemonset",
        "nvidia-driver-ctr",
        "driver",
        "driver",
        True,
        "nvcr.io/nvidia/driver:580.126.09",
    ),
    Operand(
        "state-container-toolkit",
        "nvidia-container-toolkit-daemonset",
        "nvidia-container-toolkit-ctr",
        "toolkit",
        "container-toolkit",
        True,
        "nvcr.io/nvidia/k8s/container-toolkit:v1.19.1",
    ),
    Operand(
        "state-operator-validation",
        "nvidia-operator-validator",
        "nvidia-operator-validator",
        "validator",
        "operator-validator",
        True,
        "nvcr.io/nvidia/gpu-operator:v26.3.1",
    ),
    Operand(
        "state-device-plugin",
        "nvidia-device-plugin-daemonset",
        "nvidia-device-plugin",
        "devicePlugin",
        "device-plugin",
        True,
        "nvcr.io/nvidia/k8s-device-plugin:v0.19.0",
    ),
    Operand(
        "state-dcgm",
        "nvidia-dcgm",
        "nvidia-dcgm-ctr",
        "dcgm",
        "dcgm",
        False,
        "nvcr.io/nvidia/cloud-native/dcgm:4.5.2-1-ubuntu22.04",
        metrics=MetricsPort("dcgm", 5555),
    ),
    Operand(
        "state-dcgm-exporter",
        "nvidia-dcgm-exporter",
        "nvidia-dcgm-exporter",
        "dcgmExporter",
        "dcgm-exporter",
        True,
        "nvcr.io/nvidia/k8s/dcgm-exporter:4.5.1-4.8.0-distroless",
        metrics=DCGM_EXPORTER_METRICS,
    ),
    Operand(
        "gpu-feature-discovery",
        "gpu-feature-discovery",
        "gpu-feature-discovery",
        "gfd",
        "gpu-feature-discovery",
        True,
        "nvcr.io/nvidia/k8s-device-plugin:v0.19.0",
    ),
    Operand(
        "state-mig-manager",
        "nvidia-mig-manager",
        "nvidia-mig-manager",
        "migManager",
        "mig-manager",
        True,
        "nvcr.io/nvidia/cloud-native/k8s-mig-manager:v0.14.0",
        on_every_gpu_node=False,
    ),
    Operand(
        "state-node-status-exporter",
        "nvidia-node-status-exporter",
        "nvidia-node-status-exporter",
        "nodeStatusExporter",
        "node-status-exporter",
        False,
        "nvcr.io/nvidia/gpu-operator:v26.3.1",
        metrics=MetricsPort("node-status", 8000),
    ),
)
STEP_ORDER = (
    "pre-requisites",
    "state-operator-metrics",
    "state-driver",
    "state-container-toolkit",
    "state-operator-validation",
    "state-device-plugin",
    "state-mps-control-daemon",
    "state-dcgm",
    "state-dcgm-exporter",
    "gpu-feature-discovery",
    "state-mig-manager",
    "state-node-status-exporter",
)
GFD_LABELS = {
    "nvidia.com/gpu.present": "true",
    "nvidia.com/gpu.product": GPU_PRODUCT_LABEL,
    "nvidia.com/gpu.count": "1",
    "nvidia.com/gpu.memory": str(GPU_MEMORY_MIB),
    "nvidia.com/gpu.family": "ampere",
    "nvidia.com/mig.capable": "false",
    "nvidia.com/cuda.driver.major": "580",
}


# The pre-requisites state's RuntimeClasses (assets/pre-requisites, v26.3.1), each with the
# handler of its name: `spec.operator.runtimeClass` (default nvidia) always, and these two
# while `spec.cdi.enabled` (the chart's default); none while the CDI NRI plugin replaces them.
CDI_RUNTIME_CLASSES = ("nvidia-cdi", "nvidia-legacy")
DEFAULT_RUNTIME_CLASS = "nvidia"


def runtime_classes(policy: dict) -> list[str]:
    """The RuntimeClass names the operator keeps for this ClusterPolicy."""
    spec = policy.get("spec") or {}
    cdi = spec.get("cdi") or {}
    if cdi.get("nriPluginEnabled"):
        return []
    own = (spec.get("operator") or {}).get("runtimeClass") or DEFAULT_RUNTIME_CLASS
    return [own, *(CDI_RUNTIME_CLASSES if cdi.get("enabled") else ())]


def is_enabled(policy: dict, item: Operand) -> bool:
    section = (policy.get("spec") or {}).get(item.spec_key) or {}
    return bool(section.get("enabled", item.enabled_by_default))


class GpuOperator(Controller):
    watched = (DEPLOYMENTS, DAEMONSETS, NODES, CLUSTER_POLICY, SERVICES, RUNTIMECLASSES)

    def __init__(self, store: InformedKubeApi, timings: Timings, logs: ContainerLogs) -> None:
        super().__init__(store, timings)
        self._logs = logs
        self._seen: object = None
        self._act_at = 0.0
        self._changed_at = 0.0  # wall-clock time the current inputs were first seen
        self._logged: object = None  # (operator pod uid, what it logged last)

    def reconcile(self) -> float | None:
        now = time.monotonic()
        deploys = self.store.list(
            DEPLOYMENTS, field_selector=f"metadata.name={OPERATOR_DEPLOYMENT}"
        )[0]
        if not deploys:
            self._seen = self._logged = None
            return None
        deploy = deploys[0]
        namespace = deploy["metadata"]["namespace"]
        operator_pod = self._running_pod(deploy)
        if operator_pod is None:  # no operator process, whatever its Deployment says for now
            return None
        policies = self.store.list(CLUSTER_POLICY)[0]
        if not policies:
            return None
        policy = policies[0]
        gpu_nodes = self.store.list(NODES, label_selector=f"{NVIDIA_PCI_LABEL}=true")[0]
        inputs = (
            policy["metadata"]["uid"],
            policy["metadata"]["generation"],
            namespace,
            tuple(n["metadata"]["name"] for n in gpu_nodes),
        )
        if inputs != self._seen:
            self._seen = inputs
            self._act_at = now + self.timings.operator_reconcile
            self._changed_at = time.time()
        if now < self._act_at:
            return self._act_at - now
        try:
            for node in gpu_nodes:
                self._label(node)
            self._runtime_classes(policy)
            statuses = self._operands(policy, namespace, operator_pod)
            self._still_running(operator_pod)
            self._write_status(policy, statuses, bool(gpu_nodes), namespace)
        except _OperatorStopped:
            return None
        self._log(operator_pod, statuses, len(gpu_nodes))
        return None

    def _still_running(self, operator_pod: dict) -> None:
        """A pass is the operator process's work: once its pod is deleted mid-pass (scaled
        down), the rest of the pass never happens, as when the real process is killed."""
        meta = operator_pod["metadata"]
        try:
            pod = self.store.get(PODS, meta["name"], meta["namespace"])
        except NotFound:
            raise _OperatorStopped from None
        if pod["metadata"]["uid"] != meta["uid"] or pod["metadata"].get("deletionTimestamp"):
            raise _OperatorStopped

    def _label(self, node: dict) -> None:
        wanted = dict(GFD_LABELS)
        for item in OPERANDS:
            if item.on_every_gpu_node:
                wanted[f"nvidia.com/gpu.deploy.{item.component}"] = "true"

        def apply(current: dict) -> None:
            labels = current["metadata"].setdefault("labels", {})
            for key, value in wanted.items():
                labels.setdefault(key, value)  # a label an admin set by hand wins, as on EKS

        try:
            self.store.update(NODES, node["metadata"]["name"], apply)
        except NotFound:
            pass

    def _runtime_classes(self, policy: dict) -> None:
        wanted = runtime_classes(policy)
        present = {r["metadata"]["name"] for r in self.store.list(RUNTIMECLASSES)[0]}
        for name in sorted(set(wanted) - present):
            labels = {"app.kubernetes.io/component": "gpu-operator"}
            self.store.create(
                RUNTIMECLASSES, {"metadata": {"name": name, "labels": labels}, "handler": name}
            )
        for name in sorted(present & ({DEFAULT_RUNTIME_CLASS, *CDI_RUNTIME_CLASSES} - set(wanted))):
            self.store.delete(RUNTIMECLASSES, name)

    def _operands(self, policy: dict, namespace: str, operator_pod: dict) -> dict[str, str]:
        statuses = {step: "ready" for step in STEP_ORDER}
        spec = policy.get("spec") or {}
        tolerations = (spec.get("daemonsets") or {}).get("tolerations") or DEFAULT_TOLERATIONS
        self._keep_service(OPERATOR_DEPLOYMENT, OPERATOR_METRICS, policy, namespace)
        for item in OPERANDS:
            self._still_running(operator_pod)
            if item.metrics is not None:
                wanted = is_enabled(policy, item)
                self._keep_service(item.daemonset, item.metrics if wanted else None, policy,
                                   namespace)  # fmt: skip
            try:
                existing = self.store.get(DAEMONSETS, item.daemonset, namespace)
            except NotFound:
                existing = None
            if not is_enabled(policy, item):
                statuses[item.step] = "disabled"
                if existing is not None:
                    self.store.delete(DAEMONSETS, item.daemonset, namespace)
                continue
            rendered = _operand_daemonset(item, policy, tolerations)
            rendered["metadata"]["annotations"] = {STARTUP_FROM_ANNOTATION: str(self._changed_at)}
            _stamp_hash(rendered)
            if existing is None:
                existing = self.store.create(DAEMONSETS, rendered, namespace)
            elif _applied_hash(existing) != _applied_hash(rendered):
                existing = self.store.update(
                    DAEMONSETS, item.daemonset, _render_onto(rendered), namespace
                )
            statuses[item.step] = "ready" if _daemonset_ready(existing) else "notReady"
        plugin_on = statuses["state-device-plugin"] != "disabled"
        statuses["state-mps-control-daemon"] = "ready" if plugin_on else "disabled"
        return statuses

    def _keep_service(
        self, name: str, port: MetricsPort | None, policy: dict, namespace: str
    ) -> None:
        """The metrics Service `name` exists exactly when it has a port."""
        try:
            existing = self.store.get(SERVICES, name, namespace)
        except NotFound:
            existing = None
        if port is not None and existing is None:
            self.store.create(SERVICES, _metrics_service(name, port, policy), namespace)
        elif port is None and existing is not None:
            self.store.delete(SERVICES, name, namespace)

    def _write_status(
        self, policy: dict, statuses: dict[str, str], has_gpu_nodes: bool, namespace: str
    ) -> None:
        not_ready = [step for step in STEP_ORDER if statuses[step] == "notReady"]
        if not_ready:
            message = f"ClusterPolicy is not ready, states not ready: [{' '.join(not_ready)}]"
            ready = ("False", "OperandNotReady", message)
            error = ("True", "OperandNotReady", message)
        elif has_gpu_nodes:
            ready = ("True", "Reconciled", READY_MESSAGE)
            error = ("False", "Ready", "")
        else:
            ready = ("True", "NoGPUNodes", "No GPU nodes found; watching for new GPU nodes")
            error = ("False", "Ready", "")

        def apply(current: dict) -> None:
            status = current.setdefault("status", {})
            status["state"] = "notReady" if not_ready else "ready"
            status["namespace"] = namespace
            old = {c["type"]: c for c in status.get("conditions") or []}
            status["conditions"] = [
                _condition(kind, values, old.get(kind))
                for kind, values in (("Ready", ready), ("Error", error))
            ]

        try:
            self.store.update(CLUSTER_POLICY, policy["metadata"]["name"], apply)
        except NotFound:
            pass

    def _running_pod(self, deploy: dict) -> dict | None:
        """A Ready pod of the operator's Deployment: the process that reconciles."""
        selector = (deploy["spec"].get("selector") or {}).get("matchLabels") or {}
        pods = self.store.list(
            PODS,
            deploy["metadata"]["namespace"],
            label_selector=",".join(f"{k}={v}" for k, v in selector.items()),
        )[0]
        running = (p for p in pods if pod_ready(p) and not p["metadata"].get("deletionTimestamp"))
        return next(running, None)

    def _log(self, operator_pod: dict, statuses: dict[str, str], gpu_node_count: int) -> None:
        pod = operator_pod["metadata"]
        story = (pod["uid"], gpu_node_count, tuple(statuses[s] for s in STEP_ORDER))
        if story == self._logged:
            return
        lines = [_log_line("Number of nodes with GPU label", NodeCount=gpu_node_count)]
        lines += [
            _log_line("ClusterPolicy step completed", **{"state:": step, "status": statuses[step]})
            for step in STEP_ORDER
        ]
        self._logs.append(operator_pod, "".join(lines))
        self._logged = story


class _OperatorStopped(Exception):
    """The operator's pod went away in the middle of a pass."""


def _log_line(message: str, **fields: object) -> str:
    record = {"level": "info", "ts": time.time(), "logger": LOGGER, "msg": message, **fields}
    return json.dumps(record, separators=(",", ":")) + "\n"


def _condition(kind: str, values: tuple[str, str, str], old: dict | None) -> dict:
    status, reason, message = values
    if old is not None and (old.get("status"), old.get("reason")) == (status, reason):
        since = old["lastTransitionTime"]
    else:
        since = now_rfc3339()
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": since,
    }


def _daemonset_ready(ds: dict) -> bool:
    """`isDaemonSetReady` (v26.3.1, RollingUpdate): ready when it wants no pod or none of its
    pods is unavailable, read from the status as it is (a just-created DaemonSet with no
    status yet wants none, so it counts as ready until the DaemonSet controller fills it in)."""
    status = ds.get("status") or {}
    if not status.get("desiredNumberScheduled"):
        return True
    return not status.get("numberUnavailable")


def _stamp_hash(rendered: dict) -> None:
    """The operator's record of what it rendered: unchanged hash, nothing to write."""
    text = json.dumps(rendered, sort_keys=True).encode()
    rendered["metadata"]["annotations"][LAST_APPLIED_HASH] = hashlib.sha256(text).hexdigest()[:16]


def _applied_hash(daemonset: dict) -> str | None:
    return (daemonset["metadata"].get("annotations") or {}).get(LAST_APPLIED_HASH)


def _render_onto(rendered: dict) -> Callable[[dict], None]:
    """An update that makes a stored operand DaemonSet match what the operator renders."""

    def apply(current: dict) -> None:
        metadata = current["metadata"]
        for field in ("labels", "annotations"):
            metadata[field] = {**(metadata.get(field) or {}), **rendered["metadata"][field]}
        metadata["ownerReferences"] = rendered["metadata"]["ownerReferences"]
        current["spec"] = rendered["spec"]

    return apply


def _metrics_service(name: str, port: MetricsPort, policy: dict) -> dict:
    """The operator's asset for a metrics Service: ClusterIP, selecting the pods by app."""
    return {
        "metadata": {
            "name": name,
            "labels": {"app": name},
            "annotations": {"prometheus.io/scrape": "true"},
            "ownerReferences": [owner_reference(policy)],
        },
        "spec": {
            "selector": {"app": name},
            "ports": [
                {"name": port.name, "port": port.number, "targetPort": port.number,
                 "protocol": "TCP"}
            ],
        },
    }  # fmt: skip


def _operand_daemonset(item: Operand, policy: dict, tolerations: list[dict]) -> dict:
    section = (policy.get("spec") or {}).get(item.spec_key) or {}
    image = item.image
    if section.get("repository") and section.get("image") and section.get("version"):
        image = f"{section['repository']}/{section['image']}:{section['version']}"
    ds = daemonset_manifest(
        item.daemonset,
        {"app": item.daemonset, "app.kubernetes.io/managed-by": "gpu-operator"},
        image,
        node_selector={f"nvidia.com/gpu.deploy.{item.component}": "true"},
        tolerations=tolerations,
        env=section.get("env") or [],
        container=item.container,
    )
    ds["metadata"]["ownerReferences"] = [owner_reference(policy)]
    return ds


def daemonset_manifest(
    name: str,
    labels: dict[str, str],
    image: str,
    node_selector: dict[str, str],
    tolerations: list[dict],
    env: list[dict] | None = None,
    container: str | None = None,
) -> dict:
    """A DaemonSet running one container (named `container`, else `name`) of `image` on the
    nodes the selector admits."""
    return {
        "metadata": {"name": name, "labels": dict(labels)},
        "spec": {
            "selector": {"matchLabels": dict(labels)},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
            "template": {
                "metadata": {"labels": dict(labels)},
                "spec": {
                    "nodeSelector": node_selector,
                    "tolerations": tolerations,
                    "priorityClassName": "system-node-critical",
                    "containers": [
                        {"name": container or name, "image": image, "env": list(env or [])}
                    ],
                },
            },
        },
    }
