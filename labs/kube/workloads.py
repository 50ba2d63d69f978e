"""The lab's test workloads: apply a manifest List, run it to the end, read its logs, remove it.

A workload is a `kind: List` manifest beside this module (Services and Pods) plus the script
its ConfigMap carries, so `kubectl create configmap ... --from-file` and `kubectl apply -f`
by hand start the same thing. Pods that run to completion are what a workload waits for; a
pod that keeps running (a TCP listener) is removed with the rest.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from labs.kube import rest
from labs.kube.probes import FINISHED_PHASES, HOSTNAME_LABEL
from labs.kube.resources import CONFIG_MAPS, PODS, SERVICES
from labs.kube.view import WORKLOAD_NAMESPACE, ClusterView, WatchedKind

if TYPE_CHECKING:
    from labs.lab import Lab

MANIFESTS = Path(__file__).resolve().parent / "manifests"


@dataclass(frozen=True)
class Workload:
    """A manifest List in MANIFESTS and, when it has one, the script of its ConfigMap."""

    manifest: str
    script: str | None = None
    config_map: str | None = None

    def items(self) -> list[dict[str, Any]]:
        document: dict[str, Any] = yaml.safe_load((MANIFESTS / self.manifest).read_text("utf-8"))
        return list(document["items"]) if document.get("kind") == "List" else [document]

    def pods(self) -> list[dict[str, Any]]:
        return [i for i in self.items() if i["kind"] == "Pod"]

    def finishing(self) -> list[str]:
        """The pods that run to completion (what a run waits for)."""
        return [
            p["metadata"]["name"]
            for p in self.pods()
            if p["spec"].get("restartPolicy", "Always") != "Always"
        ]

    def script_map(self) -> dict[str, Any] | None:
        if not (self.script and self.config_map):
            return None
        text = (MANIFESTS / self.script).read_text("utf-8")
        return {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": self.config_map},
            "data": {self.script: text},
        }


CUDA_CHECK = Workload("cuda-check.yaml")
ALLREDUCE = Workload("nccl-allreduce.yaml", "allreduce.py", "nccl-allreduce")
TCP_CHECK = Workload("tcp-check.yaml", "tcp_check.py", "tcp-check")


@dataclass(frozen=True)
class PodRun:
    """One finished (or still running) pod of a workload: where it ran and what it printed."""

    name: str
    node: str
    phase: str
    log: str


# What a workload's manifest List may hold, by kind.
_RESOURCES = {"Pod": PODS, "Service": SERVICES, "ConfigMap": CONFIG_MAPS}


def _view(lab: Lab) -> ClusterView:
    return ClusterView([WatchedKind("pods", lab.kube, PODS, WORKLOAD_NAMESPACE)])


def _delete(lab: Lab, kind: str, name: str) -> None:
    rest.delete(lab.kube, _RESOURCES[kind].path(WORKLOAD_NAMESPACE, name), grace_seconds=0)


def _create(lab: Lab, obj: dict[str, Any]) -> None:
    rest.create(lab.kube, _RESOURCES[obj["kind"]].path(WORKLOAD_NAMESPACE), obj)


def remove(lab: Lab, workload: Workload, timeout: float) -> None:
    """Delete the workload's pods, Services and ConfigMap if present; wait for the pods."""
    names = [(i["kind"], i["metadata"]["name"]) for i in workload.items()]
    if workload.config_map:
        names.append(("ConfigMap", workload.config_map))
    for kind, name in names:
        _delete(lab, kind, name)
    _wait_gone(lab, [p["metadata"]["name"] for p in workload.pods()], timeout)


def delete_pods(lab: Lab, names: list[str], timeout: float) -> None:
    """Delete these workload-namespace pods at once and wait until every one is gone."""
    for name in names:
        _delete(lab, "Pod", name)
    _wait_gone(lab, names, timeout)


def _wait_gone(lab: Lab, names: list[str], timeout: float) -> None:
    with _view(lab) as view:
        view.wait_for(
            lambda v: not any(v.find("pods", name) for name in names),
            timeout,
            what=f"pods {', '.join(names)} to be deleted",
        )


def start(lab: Lab, workload: Workload, timeout: float) -> None:
    """Remove any earlier run, then create the ConfigMap, the Services and the pods."""
    remove(lab, workload, timeout)
    config = workload.script_map()
    if config:
        _create(lab, config)
    for item in workload.items():
        _create(lab, item)


def wait_finished(
    lab: Lab, view: ClusterView, workload: Workload, timeout: float
) -> dict[str, PodRun]:
    """Wait until every run-to-completion pod has finished; their runs with logs, by name.

    `view` must watch the workload namespace's pods (the lab's standard view does).
    """
    names = workload.finishing()
    return {run.name: run for run in _finished_runs(lab, view, names, timeout, workload.manifest)}


def _phases(view: ClusterView, names: list[str]) -> dict[str, str]:
    return {n: str(((view.find("pods", n) or {}).get("status") or {}).get("phase")) for n in names}


def _finished_runs(
    lab: Lab, view: ClusterView, names: list[str], timeout: float, what: str
) -> list[PodRun]:
    """Wait until the named pods have finished; what each printed, in `names` order."""
    from labs.kube.logs import pod_log

    view.wait_for(
        lambda v: all(p in FINISHED_PHASES for p in _phases(v, names).values()),
        timeout,
        what=f"{what} to finish",
        describe=lambda v: ", ".join(f"{n} {p}" for n, p in _phases(v, names).items()),
    )
    runs = []
    for name in names:
        pod = view.find("pods", name) or {}
        runs.append(
            PodRun(
                name=name,
                node=str(pod.get("spec", {}).get("nodeName", "")),
                phase=str(pod.get("status", {}).get("phase")),
                log=pod_log(lab, WORKLOAD_NAMESPACE, name),
            )
        )
    return runs


def pinned(pod: dict[str, Any], name: str, node: str) -> dict[str, Any]:
    """A copy of a Pod manifest renamed to `name` and held to `node` by a hostname
    nodeSelector (the scheduler still judges it, and says why not)."""
    copy = yaml.safe_load(yaml.safe_dump(pod))
    copy["metadata"]["name"] = name
    copy["spec"]["nodeSelector"] = {**copy["spec"].get("nodeSelector", {}), HOSTNAME_LABEL: node}
    return copy


def run_on_each(
    lab: Lab, view: ClusterView, pod: dict[str, Any], nodes: list[str], timeout: float
) -> dict[str, PodRun]:
    """Run one copy of `pod` pinned to each node, wait for all, remove them; runs by node."""
    copies = {
        node: pinned(pod, f"{pod['metadata']['name']}-{i}", node) for i, node in enumerate(nodes)
    }
    names = [c["metadata"]["name"] for c in copies.values()]
    delete_pods(lab, names, timeout)
    try:
        for copy in copies.values():
            _create(lab, copy)
        runs = _finished_runs(lab, view, names, timeout, f"{pod['metadata']['name']} on each node")
        return dict(zip(copies, runs, strict=True))
    finally:
        delete_pods(lab, names, timeout)
