"""The GPU probe pod: apply it, wait for it to finish, read what it printed, remove it.

The probe (`manifests/gpu-probe.yaml` beside this module) asks for one GPU and prints
the GPU's name, driver and memory. The same manifest proves a fresh lab works (`lab.up`), gives a
scenario its baseline, and shows the fault (Pending) and the recovery (same output).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from labs.errors import LabError
from labs.kube import rest
from labs.kube.gpu import ADMISSION_REJECTED, pod_story, scheduling_failure
from labs.kube.logs import pod_log
from labs.kube.resources import PODS, KubeApiError
from labs.kube.view import WORKLOAD_NAMESPACE, ClusterView, WatchedKind

if TYPE_CHECKING:
    from labs.lab import Lab

PROBE_MANIFEST = Path(__file__).resolve().parent / "manifests" / "gpu-probe.yaml"
HOSTNAME_LABEL = "kubernetes.io/hostname"  # EKS sets it to the node's name
FINISHED_PHASES = ("Succeeded", "Failed")
ADMISSION_ATTEMPTS = 3


class ProbeError(LabError):
    """The probe did not run to success; the message says what it showed instead."""


@dataclass(frozen=True)
class ProbeRun:
    """One finished probe: where it ran and what it printed."""

    name: str
    uid: str
    node: str
    phase: str
    log: str

    @property
    def gpu_line(self) -> str:
        return gpu_summary(self.log)


def load_probe(
    manifest: Path = PROBE_MANIFEST, name: str | None = None, node: str | None = None
) -> dict[str, Any]:
    """The probe Pod manifest as a dict (a fresh copy each time), renamed to `name` and pinned
    to `node` when given: a `kubernetes.io/hostname` nodeSelector, so the scheduler still
    decides and says why not (`spec.nodeName` would skip it and let kubelet reject the pod)."""
    pod: dict[str, Any] = yaml.safe_load(manifest.read_text(encoding="utf-8"))
    if name:
        pod["metadata"]["name"] = name
    if node:
        pod["spec"]["nodeSelector"] = {HOSTNAME_LABEL: node}
    return pod


def probe_name(manifest: Path = PROBE_MANIFEST) -> str:
    return str(load_probe(manifest)["metadata"]["name"])


def gpu_summary(log: str) -> str:
    """The `name, driver_version, memory.total` data line(s) of the probe's output.

    The `nvidia-smi -L` line carries the GPU's UUID, which differs from node to node,
    so outputs are compared on this part: `NVIDIA A10G, 580.126.09, 23028 MiB`.
    """
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    try:
        header = next(i for i, line in enumerate(lines) if line.startswith("name,"))
    except StopIteration:
        return ""
    return "\n".join(lines[header + 1 :])


def _pod_view(lab: Lab, name: str, namespace: str) -> ClusterView:
    """A watched view of just this one pod."""
    pod = WatchedKind("pods", lab.kube, PODS, namespace, f"metadata.name={name}")
    return ClusterView([pod])


def delete_probe(
    lab: Lab, timeout: float, manifest: Path = PROBE_MANIFEST, name: str | None = None
) -> None:
    """Delete the probe (or the one called `name`) if it exists and wait until it is gone."""
    name = name or probe_name(manifest)
    with _pod_view(lab, name, WORKLOAD_NAMESPACE) as view:
        if view.find("pods", name) is None:
            return
        rest.delete(lab.kube, PODS.path(WORKLOAD_NAMESPACE, name), grace_seconds=0)
        view.wait_for(
            lambda v: v.find("pods", name) is None, timeout, what=f"pod {name} to be deleted"
        )


def create_probe(
    lab: Lab, manifest: Path = PROBE_MANIFEST, name: str | None = None, node: str | None = None
) -> dict[str, Any]:
    """Create the probe pod (like `kubectl apply -f gpu-probe.yaml` on a free name)."""
    pod = load_probe(manifest, name, node)
    return rest.create(lab.kube, PODS.path(WORKLOAD_NAMESPACE), pod)


def recreate_probe(
    lab: Lab,
    timeout: float,
    manifest: Path = PROBE_MANIFEST,
    name: str | None = None,
    node: str | None = None,
) -> str:
    """Delete any old probe, then create a fresh one; returns the new pod's uid."""
    delete_probe(lab, timeout, manifest, name)
    return str(create_probe(lab, manifest, name, node)["metadata"]["uid"])


def recreate_admitted(
    lab: Lab, timeout: float, name: str | None = None, node: str | None = None
) -> str:
    """`recreate_probe`, made again when its node's kubelet refuses it at admission.

    The scheduler reads nodes through its own watch: a probe made just as a device plugin
    went (the tool saw allocatable 0) can still be bound to that node, and its kubelet then
    fails it with UnexpectedAdmissionError, as on EKS. That race is not the fault the probe
    is there to show. Returns the uid of the probe the scheduler or the kubelet kept.
    """
    name = name or probe_name()
    seen = ""
    for _ in range(ADMISSION_ATTEMPTS):
        found = _create_watched(lab, timeout, name, node)
        status = found.get("status") or {}
        if status.get("reason") != ADMISSION_REJECTED:
            return str(found["metadata"]["uid"])
        seen = str(status.get("message", ""))
    raise ProbeError(
        f"the kubelet refused probe pod {name} at admission {ADMISSION_ATTEMPTS} times: {seen!r}"
    )


def _create_watched(lab: Lab, timeout: float, name: str, node: str | None) -> dict[str, Any]:
    """A fresh probe, returned once the scheduler held it or a kubelet decided on it."""
    uid = recreate_probe(lab, timeout, name=name, node=node)
    with _pod_view(lab, name, WORKLOAD_NAMESPACE) as view:
        return view.wait_for(
            lambda v: _decided(v.find("pods", name), uid),
            timeout,
            what=f"pod {name} to be held by the scheduler or admitted by a kubelet",
        )


def _decided(pod: dict[str, Any] | None, uid: str) -> dict[str, Any] | None:
    """This very pod once its fate is known: unschedulable, refused, or admitted (a kubelet
    reported its containers or a final phase)."""
    if pod is None or pod["metadata"].get("uid") != uid:
        return None
    status = pod.get("status") or {}
    if not (pod.get("spec") or {}).get("nodeName"):
        conditions = status.get("conditions") or []
        held = any(
            c.get("type") == "PodScheduled" and c.get("status") == "False" for c in conditions
        )
        return pod if held else None
    admitted = status.get("containerStatuses") or status.get("initContainerStatuses")
    return pod if admitted or status.get("phase") != "Pending" else None


def read_probe_log(lab: Lab, name: str) -> str:
    return pod_log(lab, WORKLOAD_NAMESPACE, name)


def run_probe(
    lab: Lab, view: ClusterView, timeout: float, manifest: Path = PROBE_MANIFEST
) -> ProbeRun:
    """Run the probe afresh and return its output; ProbeError when it does not succeed.

    `view` must watch the workload namespace's pods and events (the lab's standard view).
    """
    name = probe_name(manifest)
    uid = recreate_probe(lab, timeout, manifest)

    def finished(v: ClusterView) -> dict[str, Any] | None:
        found = v.find("pods", name) or {}
        if found.get("metadata", {}).get("uid") != uid:
            return None  # the view may still hold the previous probe
        return found if found.get("status", {}).get("phase") in FINISHED_PHASES else None

    def describe(v: ClusterView) -> str:
        phase, events = pod_story(v, name)
        failure = scheduling_failure(events)
        reasons = ", ".join(str(e.get("reason")) for e in events)
        return f"phase {phase}" + (f", {failure}" if failure else "") + f", events: {reasons}"

    done = view.wait_for(finished, timeout, what=f"probe pod {name} to finish", describe=describe)
    status = done.get("status") or {}
    try:
        log = read_probe_log(lab, name)
    except KubeApiError:
        if status.get("containerStatuses"):
            raise  # its container ran: the log is unreadable for another reason, say it
        # no container ever ran (the kubelet refused the pod at admission): its reason
        log = f"{status.get('reason', '')}: {status.get('message', '')}".strip(": ")
    run = ProbeRun(
        name=name,
        uid=str(done["metadata"]["uid"]),
        node=str(done.get("spec", {}).get("nodeName", "")),
        phase=str(status["phase"]),
        log=log,
    )
    if run.phase != "Succeeded" or not run.gpu_line:
        raise ProbeError(f"probe pod {name} ended {run.phase} on {run.node or 'no node'}: {log!r}")
    return run
