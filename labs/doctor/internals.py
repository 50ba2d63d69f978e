"""Flowchart step 5, node internals, as far as the API shows them without running anything.

The doctor never execs into a pod (exec starts a process: not a read), so the validation
files under /run/nvidia/validations and `nvidia-smi` are left to the person, with the
commands. What the API does show: each node's OS image against the container toolkit the
operator deploys (Amazon Linux 2 has glibc 2.26; toolkit 1.17 needs 2.27), and the Events
kubelet writes when containerd cannot start a sandbox or a GPU container.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from labs.doctor.catalog import kind
from labs.doctor.facts import Facts, Obj, event_evidence, node_subject
from labs.doctor.logs import line_fields, os_image, toolkit_version
from labs.doctor.model import DoctorFinding, Evidence, Link
from labs.kube import gpu

AL2 = re.compile(r"^Amazon Linux 2(?!\d)")
EXEC_NOTE = (
    "the doctor never runs commands in pods (exec starts a process: not a read). By hand: "
    "kubectl -n {ns} exec ds/nvidia-dcgm-exporter -- nvidia-smi (the driver, from a pod with "
    "the devices mounted; `kubectl debug node` has no /dev/nvidia*, so NVML fails there even "
    "on a healthy node), and kubectl -n {ns} exec ds/nvidia-operator-validator -c "
    "nvidia-operator-validator -- ls /run/nvidia/validations (driver-ready, toolkit-ready, "
    "cuda-ready, plugin-ready)"
)


def _toolkit_on(facts: Facts) -> bool:
    section = ((facts.policy or {}).get("spec") or {}).get("toolkit") or {}
    if section.get("enabled") is False:
        return False
    return bool(section) or gpu.daemonset(facts, "nvidia-container-toolkit-daemonset") is not None


def toolkit_vs_os(facts: Facts) -> list[DoctorFinding]:
    """GPU nodes on Amazon Linux 2 (glibc 2.26) given a toolkit that needs glibc >= 2.27."""
    version = toolkit_version(facts)
    if not _toolkit_on(facts) or version is None or not gpu.toolkit_needs_glibc_227(version):
        return []
    found = []
    for node in facts.gpu_nodes:
        name = gpu.name_of(node)
        image = os_image(facts, name)
        if not AL2.match(image):
            continue
        found.append(
            kind("toolkit-glibc-mismatch").found(
                node_subject(name),
                f"{name}: {image} with container toolkit {version}",
                [
                    Evidence(node_subject(name), "status.nodeInfo.osImage", image),
                    Evidence("clusterpolicy spec.toolkit / toolkit DaemonSet", "version", version),
                ],
                confidence="medium",
                explains=[Link("operand-not-ready"), Link("clusterpolicy-not-ready")],
                fields=line_fields(facts, name),
            )
        )
    return found


@dataclass(frozen=True)
class EventPattern:
    """A line kubelet writes into an Event when containerd fails, and what it proves."""

    finding: str
    pattern: re.Pattern[str]


EVENT_PATTERNS = (
    EventPattern(
        "containerd-runtime-missing",
        re.compile(r'no runtime for "(?P<handler>[^"]+)" is configured'),
    ),
    EventPattern("toolkit-glibc-mismatch", re.compile(r"version .GLIBC_2\.\d+. not found")),
)


def sandbox_events(facts: Facts) -> list[DoctorFinding]:
    """Events of pods that have not started, carrying a known containerd failure."""
    found = []
    for event in facts.objects("events"):
        message = str(event.get("message", ""))
        hits = [known for known in EVENT_PATTERNS if known.pattern.search(message)]
        pod = _stuck_pod(facts, event) if hits else None
        if pod is not None:
            found += [_from_event(facts, event, pod, k, message) for k in hits]
    return found


def _stuck_pod(facts: Facts, event: Obj) -> Obj | None:
    """The pod an Event is about, when it exists and is not running ready or finished."""
    involved = event.get("involvedObject") or {}
    if involved.get("kind") != "Pod":
        return None
    pod = facts.find("pods", str(involved.get("name")), str(involved.get("namespace", "")))
    if pod is None or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return None
    return None if gpu.is_ready(pod) else pod


def _from_event(
    facts: Facts, event: Obj, pod: Obj, known: EventPattern, message: str
) -> DoctorFinding:
    """The finding `known` names, its templates filled with what the message says (the
    runtime handler containerd lacks)."""
    node = str((pod.get("spec") or {}).get("nodeName") or (event.get("source") or {}).get("host"))
    meta = pod["metadata"]
    match = known.pattern.search(message)
    return kind(known.finding).found(
        node_subject(node),
        f"{meta.get('namespace')}/{meta['name']}: {message[:160]}",
        [event_evidence(event)],
        explains=[Link("operand-not-ready"), Link("clusterpolicy-not-ready")],
        fields={**line_fields(facts, node, message), **(match.groupdict() if match else {})},
    )
