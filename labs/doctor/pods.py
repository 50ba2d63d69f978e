"""Flowchart step 1, the pods: why a pod waits, read from what the scheduler said about it.

The first branch is the scheduler's FailedScheduling message (the write-up's triage table);
for a GPU pod each reason is then checked against the GPU nodes only, because the system
nodes' `Insufficient nvidia.com/gpu` is always there and says nothing. Pods that run but
cannot use a GPU (no limit, an unknown RuntimeClass) are read here too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

from labs.doctor.catalog import kind
from labs.doctor.facts import (
    SYSTEM_NAMESPACES,
    Facts,
    Obj,
    event_evidence,
    node_subject,
    subject,
)
from labs.doctor.logs import log_requests
from labs.doctor.model import DoctorFinding, Evidence, Link
from labs.kube import gpu
from labs.kube.scheduling import pod_fits_selector, untolerated_taints

MAX_PODS = 20  # Pending pods triaged per run (oldest first); the rest are only counted
GPU_PREFIX = "nvidia.com/"
MIG_PREFIX = "nvidia.com/mig-"
FAILED_WAITING = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName")
_COUNT = re.compile(r"^\d+ ")


def pod_ref(pod: Obj) -> str:
    return f"{pod['metadata'].get('namespace')}/{pod['metadata']['name']}"


def containers(pod: Obj) -> list[Obj]:
    spec = pod.get("spec") or {}
    return [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]


def gpu_requests(pod: Obj) -> dict[str, str]:
    """The nvidia.com/* resources the pod's containers ask for (limits or requests)."""
    wanted: dict[str, str] = {}
    for container in containers(pod):
        resources = container.get("resources") or {}
        for source in (resources.get("limits") or {}, resources.get("requests") or {}):
            wanted |= {k: str(v) for k, v in source.items() if k.startswith(GPU_PREFIX)}
    return wanted


def fit_reasons(message: str) -> list[str]:
    """The reasons of a FitError without their node counts (`0/4 nodes are available: 2 A, 2
    B. no new claims to deallocate, preemption: ...` gives A and B; a pre-filter reason such as
    unbound PVCs has no count). The PostFilter plugins' words follow the first ". "."""
    head = message.split("nodes are available: ", 1)[-1].split(". ", 1)[0]
    return [_COUNT.sub("", part) for part in head.rstrip(".").split(", ") if part]


def scheduling_message(facts: Facts, pod: Obj) -> str | None:
    """The scheduler's latest word on the pod: its FailedScheduling event, else the condition."""
    message = gpu.scheduling_failure(facts.events_of(pod))
    if message:
        return message
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("reason") == "Unschedulable":
            return str(condition.get("message") or "")
    return None


def pods_in_focus(facts: Facts, focus: tuple[str, str] | None) -> list[Obj]:
    pods = facts.objects("pods")
    if focus is None:
        return pods
    return [p for p in pods if (p["metadata"].get("namespace"), p["metadata"]["name"]) == focus]


def unscheduled(facts: Facts, focus: tuple[str, str] | None) -> list[Obj]:
    """Pending pods no node was chosen for, oldest first."""
    waiting = [
        p
        for p in pods_in_focus(facts, focus)
        if (p.get("status") or {}).get("phase", "Pending") == "Pending"
        and not (p.get("spec") or {}).get("nodeName")
    ]
    return sorted(waiting, key=lambda p: str(p["metadata"].get("creationTimestamp", "")))


# --- Pending pods ----------------------------------------------------------------------------


def pending_pods(facts: Facts, focus: tuple[str, str] | None = None) -> list[DoctorFinding]:
    """Each Pending pod (the oldest twenty): the scheduler's reasons, weighed on the GPU nodes."""
    found: list[DoctorFinding] = []
    for pod in unscheduled(facts, focus)[:MAX_PODS]:
        message = scheduling_message(facts, pod)
        if message:
            found += list(_triage(facts, pod, message)) or [_unexplained(pod, message)]
    return found


def _triage(facts: Facts, pod: Obj, message: str) -> Iterator[DoctorFinding]:
    reasons = fit_reasons(message)
    said = Evidence(subject("pod", pod), "FailedScheduling", message)
    wanted = gpu_requests(pod)
    mig = sorted(r for r in wanted if r.startswith(MIG_PREFIX))
    if mig and any(f"Insufficient {r}" in reasons for r in mig):
        yield _mig(facts, pod, mig[0], said)
    # A GPU pod is weighed on the GPU nodes; any other pod on the rest (the GPU taint is there
    # to keep it off the GPU nodes).
    gpus = {gpu.name_of(n) for n in facts.gpu_nodes}
    nodes = [n for n in facts.objects("nodes") if (gpu.name_of(n) in gpus) == bool(wanted)]
    selected = [n for n in nodes if pod_fits_selector(pod.get("spec") or {}, n)]
    if not selected and not wanted:  # a pod asking for no GPU, aimed at the GPU nodes
        everywhere = facts.objects("nodes")
        selected = [n for n in everywhere if pod_fits_selector(pod.get("spec") or {}, n)]
    if any("didn't match Pod's node affinity/selector" in r for r in reasons) and not selected:
        yield _selector(facts, pod, said, bool(wanted))
    tainted = _untolerated(pod, selected)
    if any("untolerated taint" in r for r in reasons) and tainted:
        yield _taint(pod, tainted, said)
    free_nodes = [n for n in selected if gpu.is_ready(n) and gpu.name_of(n) not in tainted]
    if f"Insufficient {gpu.GPU_RESOURCE}" in reasons and (free_nodes or not facts.gpu_nodes):
        yield _insufficient_gpu(facts, pod, free_nodes, said)
    yield from _other_reasons(pod, reasons, said)


def _untolerated(pod: Obj, nodes: list[Obj]) -> dict[str, list[str]]:
    """Per node, the taints the pod does not tolerate (as `key=value:Effect`)."""
    tolerations = list((pod.get("spec") or {}).get("tolerations") or [])
    found = {
        gpu.name_of(n): [gpu.taint_text(t) for t in untolerated_taints(tolerations, n)]
        for n in nodes
    }
    return {node: taints for node, taints in found.items() if taints}


def _toleration(taint: str) -> dict[str, str]:
    """The toleration that covers a taint written `key=value:Effect` (`key:Effect`)."""
    pair, _, effect = taint.rpartition(":")
    key, _, value = pair.partition("=")
    if key == gpu.GPU_RESOURCE or not value:  # the GPU taint's value may change: any value
        return {"key": key, "operator": "Exists", "effect": effect}
    return {"key": key, "operator": "Equal", "value": value, "effect": effect}


def _taint(pod: Obj, tainted: dict[str, list[str]], said: Evidence) -> DoctorFinding:
    taints = sorted({t for ts in tainted.values() for t in ts})
    needed = json.dumps([_toleration(t) for t in taints], separators=(",", ":"))
    tolerations = (pod.get("spec") or {}).get("tolerations") or []
    evidence = [said, Evidence(subject("pod", pod), "spec.tolerations", json.dumps(tolerations))]
    evidence += [
        Evidence(node_subject(n), "spec.taints", ", ".join(ts)) for n, ts in tainted.items()
    ]
    return kind("pod-untolerated-taint").found(
        subject("pod", pod),
        f"{pod_ref(pod)} Pending: does not tolerate {', '.join(taints)}",
        evidence,
        tags=taints,
        taints=", ".join(taints),
        tolerations=needed,
        namespace=pod["metadata"].get("namespace"),
        pod=pod["metadata"]["name"],
    )


def _selector(facts: Facts, pod: Obj, said: Evidence, wants_gpu: bool) -> DoctorFinding:
    spec = pod.get("spec") or {}
    selector = spec.get("nodeSelector") or {}
    affinity = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    shown = ", ".join(f"{k}={v}" for k, v in selector.items()) or str(affinity)
    tags = [f"{k}={v}" for k, v in selector.items()]
    evidence = [said, Evidence(subject("pod", pod), "spec.nodeSelector", shown)]
    for node in facts.gpu_nodes if wants_gpu else []:
        labels = node["metadata"].get("labels") or {}
        seen = ", ".join(f"{k}={labels.get(k)}" for k in selector) or "(affinity)"
        evidence.append(Evidence(node_subject(gpu.name_of(node)), "metadata.labels", seen))
    return kind("pod-selector-mismatch").found(
        subject("pod", pod),
        f"{pod_ref(pod)} Pending: no {'GPU ' if wants_gpu else ''}node matches {shown}",
        evidence,
        tags=tags,
        selector=shown,
    )


def _insufficient_gpu(facts: Facts, pod: Obj, nodes: list[Obj], said: Evidence) -> DoctorFinding:
    evidence = [said]
    for node in nodes:
        name = gpu.name_of(node)
        held = [pod_ref(p) for p in facts.pods_on(name) if _holds_gpu(p)]
        value = f"allocatable {gpu.gpu_quantity(node)}, held by {', '.join(held) or 'no pod'}"
        evidence.append(Evidence(node_subject(name), "nvidia.com/gpu", value))
    detail = (
        "no GPU node exists" if not facts.gpu_nodes else "; ".join(e.value for e in evidence[1:])
    )
    return kind("pod-insufficient-gpu").found(
        subject("pod", pod),
        f"{pod_ref(pod)} Pending: Insufficient {gpu.GPU_RESOURCE}",
        evidence,
        tags=[node_subject(gpu.name_of(n)) for n in nodes],
        detail=detail or "the GPU nodes it may use offer none",
    )


def _holds_gpu(pod: Obj) -> bool:
    phase = (pod.get("status") or {}).get("phase")
    return bool(gpu_requests(pod)) and phase not in ("Succeeded", "Failed")


def _mig(facts: Facts, pod: Obj, resource: str, said: Evidence) -> DoctorFinding:
    capable = ", ".join(
        f"{gpu.name_of(n)} mig.capable={gpu.label_of(n, 'nvidia.com/mig.capable')} "
        f"product={gpu.label_of(n, 'nvidia.com/gpu.product')}"
        for n in facts.gpu_nodes
    )
    offered = [
        gpu.name_of(n)
        for n in facts.objects("nodes")
        if resource in ((n.get("status") or {}).get("allocatable") or {})
    ]
    evidence = [
        said,
        Evidence(subject("pod", pod), f"resources.limits[{resource}]", gpu_requests(pod)[resource]),
        Evidence("nodes", f"status.allocatable[{resource}]", ", ".join(offered) or "on no node"),
    ]
    return kind("mig-resource-unavailable").found(
        subject("pod", pod),
        f"{pod_ref(pod)} Pending: asks for {resource}, which no node offers",
        evidence,
        resource=resource,
        capable=capable or "none",
    )


OTHER_REASONS = (
    ("unbound immediate PersistentVolumeClaims", "pod-unbound-pvc"),
    ("didn't match pod topology spread constraints", "pod-topology-spread"),
)


def _other_reasons(pod: Obj, reasons: list[str], said: Evidence) -> Iterator[DoctorFinding]:
    meta = pod["metadata"]
    for text, name in OTHER_REASONS:
        if any(text in r for r in reasons):
            yield kind(name).found(
                subject("pod", pod),
                f"{pod_ref(pod)} Pending: {text}",
                [said],
                namespace=meta.get("namespace"),
                pod=meta["name"],
            )
    if not gpu_requests(pod):
        short = sorted({r.removeprefix("Insufficient ") for r in reasons if "Insufficient" in r})
        if short:
            yield kind("pod-insufficient-resource").found(
                subject("pod", pod),
                f"{pod_ref(pod)} Pending: Insufficient {', '.join(short)}",
                [said],
                resources=", ".join(short),
                namespace=meta.get("namespace"),
                pod=meta["name"],
            )


def _unexplained(pod: Obj, message: str) -> DoctorFinding:
    meta = pod["metadata"]
    return kind("pod-unschedulable").found(
        subject("pod", pod),
        f"{pod_ref(pod)} Pending",
        [Evidence(subject("pod", pod), "FailedScheduling", message)],
        message=message,
        namespace=meta.get("namespace"),
        pod=meta["name"],
    )


# --- pods that were placed but cannot run or use their GPU -----------------------------------


def failing_pods(facts: Facts, focus: tuple[str, str] | None = None) -> list[DoctorFinding]:
    """Pods whose image cannot be pulled, or that kubelet rejected at admission."""
    found = []
    for pod in pods_in_focus(facts, focus):
        meta, status = pod["metadata"], pod.get("status") or {}
        if status.get("reason") == "UnexpectedAdmissionError":
            found.append(_validator_blocked(facts, pod) or _rejected(pod))
        for waiting in _waiting(pod, FAILED_WAITING):
            found.append(
                kind("pod-image-pull").found(
                    subject("pod", pod),
                    f"{pod_ref(pod)}: {waiting.get('reason')}",
                    [
                        Evidence(
                            subject("pod", pod),
                            "status.containerStatuses[].state.waiting",
                            f"{waiting.get('reason')}: {waiting.get('message', '')}",
                        )
                    ],
                    reason=waiting.get("reason"),
                    message=waiting.get("message", ""),
                    namespace=meta.get("namespace"),
                    pod=meta["name"],
                )
            )
    return found


def _rejected(pod: Obj) -> DoctorFinding:
    status = pod.get("status") or {}
    return kind("pod-admission-rejected").found(
        subject("pod", pod),
        f"{pod_ref(pod)} Failed: UnexpectedAdmissionError",
        [Evidence(subject("pod", pod), "status.message", str(status.get("message")))],
        tags=[node_subject(str((pod.get("spec") or {}).get("nodeName")))],
        message=status.get("message"),
    )


# The GPU Operator validator's workload pod (gpu-operator v25.3.4 validator/main.go:202), and
# the kubelet's words for a GPU that exists but is taken (kubernetes v1.35.4
# pkg/kubelet/cm/devicemanager/manager.go: "requested number of devices unavailable").
VALIDATOR_WORKLOAD = "nvidia-device-plugin-validator"
GPU_TAKEN = re.compile(r"Requested: \d+, Available: 0")


def _validator_blocked(facts: Facts, pod: Obj) -> DoctorFinding | None:
    """The validator's workload pod rejected because every GPU of its node is held: the pods
    holding them are the evidence (None for any other rejection)."""
    message = str((pod.get("status") or {}).get("message"))
    labels = pod["metadata"].get("labels") or {}
    if labels.get("app") != VALIDATOR_WORKLOAD or not GPU_TAKEN.search(message):
        return None
    node = str((pod.get("spec") or {}).get("nodeName"))
    holders = [
        p
        for p in facts.pods_on(node)
        if (p.get("status") or {}).get("phase") == "Running" and _gpus_asked(p)
    ]
    held = [
        Evidence(subject("pod", p), "resources.limits", f"{_gpus_asked(p)} (Running)")
        for p in holders
    ]
    return kind("validator-workload-blocked").found(
        node_subject(node),
        f"{pod_ref(pod)} Failed: no free GPU on {node}",
        [Evidence(subject("pod", pod), "status.message", message), *held],
        explains=[
            Link("pod-admission-rejected", subject("pod", pod)),
            Link("operand-not-ready"),
            Link("clusterpolicy-not-ready"),
        ],
        tags=[node_subject(node)],
        line=f"{message}; held by {', '.join(pod_ref(p) for p in holders) or 'no running pod'}",
        pod=pod["metadata"]["name"],
    )


def _gpus_asked(pod: Obj) -> str:
    """`nvidia.com/gpu: N` of a pod's containers' limits ("" when none asks)."""
    asked = [
        f"{name}: {value}"
        for c in containers(pod)
        for name, value in ((c.get("resources") or {}).get("limits") or {}).items()
        if str(name).startswith(GPU_PREFIX)
    ]
    return ", ".join(asked)


def _waiting(pod: Obj, reasons: tuple[str, ...]) -> list[Obj]:
    waiting = [((s.get("state") or {}).get("waiting") or {}) for s in gpu.container_statuses(pod)]
    return [w for w in waiting if w.get("reason") in reasons]


# An image built to use a GPU: CUDA, NVIDIA's registry, or a name that says so.
GPU_IMAGE = re.compile(r"cuda|nvidia|gpu", re.IGNORECASE)
VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
NO_DEVICES = ("", "void", "none")


def gpu_intent(pod: Obj) -> str | None:
    """The evidence that a pod without a GPU limit uses a GPU (None when there is none): a
    GPU image or NVIDIA_VISIBLE_DEVICES in its spec. Tolerating the GPU taint or selecting GPU
    nodes is no evidence: node agents do both and must not take a GPU from real work."""
    for container in containers(pod):
        image = str(container.get("image", ""))
        if GPU_IMAGE.search(image):
            return f"it runs a GPU image ({image})"
        for variable in container.get("env") or []:
            value = str(variable.get("value", ""))
            if variable.get("name") == VISIBLE_DEVICES and value.lower() not in NO_DEVICES:
                return f"it sets {VISIBLE_DEVICES}={value}"
    return None


def _workload(facts: Facts, pod: Obj) -> bool:
    """A pod someone runs to compute: not a system, operator or DaemonSet pod."""
    namespace = pod["metadata"].get("namespace")
    owned_by_daemonset = any(
        r.get("kind") == "DaemonSet" for r in pod["metadata"].get("ownerReferences") or []
    )
    return not (
        owned_by_daemonset
        or namespace in SYSTEM_NAMESPACES
        or namespace == facts.operator_namespace
    )


def pods_without_gpu_limit(
    facts: Facts, focus: tuple[str, str] | None = None
) -> list[DoctorFinding]:
    """Workload pods that want a GPU but set no nvidia.com/gpu limit (their log is read)."""
    found = []
    for pod in pods_in_focus(facts, focus):
        why = gpu_intent(pod) if _workload(facts, pod) and not gpu_requests(pod) else None
        if why is None:
            continue
        phase = str((pod.get("status") or {}).get("phase") or "Pending")
        failed = phase == "Failed" or bool(_waiting(pod, ("CrashLoopBackOff",)))
        found.append(
            kind("pod-without-gpu-limit").found(
                subject("pod", pod),
                f"{pod_ref(pod)} ({phase}) wants a GPU but has no nvidia.com/gpu limit",
                [
                    Evidence(
                        subject("pod", pod),
                        "spec.containers[].resources.limits",
                        "no nvidia.com/gpu",
                    ),
                    Evidence(subject("pod", pod), "status.phase", phase),
                ],
                severity="error" if failed else None,
                read_logs=log_requests(pod, "workload") if phase != "Pending" else [],
                why=why,
            )
        )
    return found


# --- RuntimeClass --------------------------------------------------------------------------------

_CLASS_NOT_FOUND = re.compile(r'RuntimeClass "([^"]+)" not found')


def missing_runtime_classes(facts: Facts) -> list[DoctorFinding]:
    """Pods and pod templates naming a RuntimeClass that does not exist, and the rejections
    controllers report (`pod rejected: RuntimeClass "X" not found`)."""
    if "runtimeclasses" not in facts.served:
        return []
    known = {gpu.name_of(r) for r in facts.objects("runtimeclasses")}
    uses: dict[str, list[Evidence]] = {}
    for owner, spec in _pod_specs(facts):
        name = spec.get("runtimeClassName")
        if name and name not in known:
            uses.setdefault(name, []).append(Evidence(owner, "runtimeClassName", name))
    for event in facts.objects("events"):
        match = _CLASS_NOT_FOUND.search(str(event.get("message", "")))
        if match and match.group(1) not in known and _reporter_names(facts, event, match.group(1)):
            uses.setdefault(match.group(1), []).append(event_evidence(event))
    return [
        kind("runtimeclass-missing").found(
            f"runtimeclass/{name}",
            f'RuntimeClass "{name}" not found, yet used',
            evidence,
            runtime_class=name,
            known=", ".join(sorted(known)) or "none",
        )
        for name, evidence in sorted(uses.items())
    ]


# The controllers whose refusals the doctor can check still make them (an Event outlives its
# cause by an hour: a deleted Deployment's ReplicaSet, or a DaemonSet whose template names
# another class since, must not count).
_REPORTERS = {"ReplicaSet": "replicasets", "DaemonSet": "daemonsets", "Deployment": "deployments"}


def _reporter_names(facts: Facts, event: Obj, runtime_class: str) -> bool:
    """The object an Event is about still exists and its pod template still names
    `runtime_class` (True for a kind the doctor does not list)."""
    involved = event.get("involvedObject") or {}
    plural = _REPORTERS.get(str(involved.get("kind")))
    if plural is None:
        return True
    name, namespace = str(involved.get("name", "")), str(involved.get("namespace", ""))
    reporter = facts.find(plural, name, namespace)
    if reporter is None:
        return False
    return gpu.pod_template_spec(reporter).get("runtimeClassName") == runtime_class


def _pod_specs(facts: Facts) -> Iterator[tuple[str, Obj]]:
    """(subject, pod spec) of every pod and every DaemonSet's and Deployment's template."""
    for pod in facts.objects("pods"):
        yield subject("pod", pod), pod.get("spec") or {}
    for kind_name, plural in (("daemonset", "daemonsets"), ("deployment", "deployments")):
        for owner in facts.objects(plural):
            yield subject(kind_name, owner), gpu.pod_template_spec(owner)
