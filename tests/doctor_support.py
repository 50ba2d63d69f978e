"""A GPU cluster held still in the API emulator, for the doctor's states that no scenario injects.

The emulator here runs no controllers, so what a test puts in (objects through the store,
pod logs, Events) stays exactly as put: an Amazon Linux 2 node with a crash-looping
validator, an operator OOMKilled in a loop, a device plugin that logged an XID. The healthy
cluster is shaped like the rehearsal lab: two t3.medium system nodes, two g5.xlarge GPU
nodes labelled and tainted as the stack does, the operator's Deployment and ClusterPolicy
from the chart's values, its operand DaemonSets with a Ready pod on each GPU node, and the
`nvidia` RuntimeClass.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from labs.doctor.model import Report
from labs.doctor.run import doctor
from labs.lab import Lab
from labs.settings import load_settings
from labs.sim.apiserver import ApiServer
from labs.sim.controllers.gpu_operator import GFD_LABELS, OPERANDS, daemonset_manifest, is_enabled
from labs.sim.infra import cluster_policy_spec, load_values
from labs.sim.store import CLUSTER_POLICY, ObjectStore

NS = "gpu-operator"
CONTEXT = "lab-admin@test"
SYSTEM_NODES = (
    "ip-192-168-12-4.ap-northeast-2.compute.internal",
    "ip-192-168-16-4.ap-northeast-2.compute.internal",
)
GPU_NODES = (
    "ip-192-168-12-5.ap-northeast-2.compute.internal",
    "ip-192-168-12-6.ap-northeast-2.compute.internal",
)
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
AL2023 = "Amazon Linux 2023.9.20260714"
# What kube-scheduler 1.35's PostFilter plugins add: DRA's word, then preemption's verdict.
PREEMPTION = (
    "no new claims to deallocate, "
    "preemption: 0/4 nodes are available: 4 Preemption is not helpful for scheduling."
)
_serial = itertools.count(1)


def _node(name: str, gpu: bool) -> dict[str, Any]:
    labels = {
        "kubernetes.io/hostname": name,
        "node.kubernetes.io/instance-type": "g5.xlarge" if gpu else "t3.medium",
        "eks.amazonaws.com/nodegroup": "myeks-ng-gpu" if gpu else "myeks-ng-1",
    }
    status: dict[str, Any] = {
        "capacity": {"cpu": "4" if gpu else "2", "pods": "50"},
        "allocatable": {"cpu": "3920m" if gpu else "1930m", "pods": "50"},
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
        "nodeInfo": {
            "osImage": AL2023,
            "containerRuntimeVersion": "containerd://2.2.4",
            "kernelVersion": "6.12.40-63.114.amzn2023.x86_64",
        },
    }
    if gpu:
        labels |= {
            "tier": "gpu",
            "nvidia.com/gpu": "true",
            "feature.node.kubernetes.io/pci-10de.present": "true",
            **GFD_LABELS,
        }
        labels |= {
            f"nvidia.com/gpu.deploy.{o.component}": "true" for o in OPERANDS if o.on_every_gpu_node
        }
        status["capacity"]["nvidia.com/gpu"] = status["allocatable"]["nvidia.com/gpu"] = "1"
    spec = {"taints": [dict(GPU_TAINT)] if gpu else []}
    return {"metadata": {"name": name, "labels": labels}, "spec": spec, "status": status}


def ready_status(containers: list[str], node: str) -> dict[str, Any]:
    return {
        "phase": "Running",
        "hostIP": "192.168.12.5",
        "conditions": [
            {"type": t, "status": "True"}
            for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
        ],
        "containerStatuses": [
            {
                "name": c,
                "ready": True,
                "restartCount": 0,
                "state": {"running": {"startedAt": "2026-11-23T07:00:00Z"}},
            }
            for c in containers
        ],
    }


def stuck_status(
    container: str, state: dict[str, Any], phase: str = "Pending", init: bool = False
) -> dict[str, Any]:
    """A pod that is not ready: one (init) container in `state` (waiting or terminated)."""
    statuses = [{"name": container, "ready": False, "restartCount": 3, "state": state}]
    key = "initContainerStatuses" if init else "containerStatuses"
    return {"phase": phase, "conditions": [{"type": "Ready", "status": "False"}], key: statuses}


@dataclass
class StaticCluster:
    """The emulator and its store, with helpers to put a state in and run the doctor on it."""

    server: ApiServer
    kubeconfig: Path
    state_dir: Path

    @property
    def store(self) -> ObjectStore:
        return self.server.store

    def examine(self, pod: str | None = None) -> Report:
        """`lab.doctor --kubeconfig F --context C` in this process."""
        settings = load_settings(
            None,
            {
                "kubeconfig": str(self.kubeconfig),
                "context": CONTEXT,
                "state_dir": str(self.state_dir),
            },
        )
        return doctor(lambda: Lab.open(settings), pod)

    # --- building ------------------------------------------------------------------------

    def build_healthy(self) -> None:
        store = self.store
        store.register(CLUSTER_POLICY)
        store.create("namespaces", {"metadata": {"name": NS}})
        for name in SYSTEM_NODES + GPU_NODES:
            store.create("nodes", _node(name, name in GPU_NODES))
        spec = cluster_policy_spec(load_values())
        conditions = [
            {"type": "Ready", "status": "True", "reason": "Reconciled"},
            {"type": "Error", "status": "False", "reason": "Ready"},
        ]
        policy = store.create(
            CLUSTER_POLICY,
            {
                "metadata": {"name": "cluster-policy"},
                "spec": spec,
                "status": {"state": "ready", "namespace": NS, "conditions": conditions},
            },
        )
        self.operator()
        for operand in OPERANDS:
            if is_enabled(policy, operand):
                self.operand(
                    operand.daemonset,
                    operand.container,
                    operand.component,
                    policy,
                    operand.on_every_gpu_node,
                )
        store.create("runtimeclasses", {"metadata": {"name": "nvidia"}, "handler": "nvidia"})

    def operator(self) -> dict[str, Any]:
        selector = {"app": "gpu-operator"}
        deployment = self.store.create(
            "deployments",
            {
                "metadata": {"name": "gpu-operator", "labels": selector},
                "spec": {
                    "replicas": 1,
                    "selector": {"matchLabels": selector},
                    "template": {
                        "metadata": {"labels": selector},
                        "spec": {
                            "containers": [
                                {
                                    "name": "gpu-operator",
                                    "image": "nvcr.io/nvidia/gpu-operator:v26.3.1",
                                }
                            ]
                        },
                    },
                },
                "status": {"replicas": 1, "readyReplicas": 1, "availableReplicas": 1},
            },
            NS,
        )
        self.pod(
            "gpu-operator-5798b5b564-xbq5h",
            NS,
            SYSTEM_NODES[0],
            ["gpu-operator"],
            labels=selector,
            owner=("ReplicaSet", "gpu-operator-5798b5b564", "rs"),
            image="nvcr.io/nvidia/gpu-operator:v26.3.1",
        )
        return deployment

    def operand(
        self, name: str, container: str, component: str, policy: dict, on_gpu_nodes: bool
    ) -> dict[str, Any]:
        labels = {"app": name}
        manifest = daemonset_manifest(
            name,
            labels,
            f"nvcr.io/nvidia/{name}:v1",
            {f"nvidia.com/gpu.deploy.{component}": "true"},
            [dict(GPU_TOLERATION)],
            container=container,
        )
        manifest["metadata"]["ownerReferences"] = [
            {
                "apiVersion": "nvidia.com/v1",
                "kind": "ClusterPolicy",
                "name": "cluster-policy",
                "uid": policy["metadata"]["uid"],
                "controller": True,
            }
        ]
        count = len(GPU_NODES) if on_gpu_nodes else 0
        manifest["status"] = {
            "desiredNumberScheduled": count,
            "currentNumberScheduled": count,
            "numberReady": count,
            "numberAvailable": count,
        }
        ds = self.store.create("daemonsets", manifest, NS)
        for node in GPU_NODES if on_gpu_nodes else ():
            self.pod(
                f"{name}-{next(_serial):05d}",
                NS,
                node,
                [container],
                labels=labels,
                owner=("DaemonSet", name, ds["metadata"]["uid"]),
            )
        return ds

    def pod(
        self,
        name: str,
        namespace: str,
        node: str | None,
        containers: list[str],
        labels: dict[str, str] | None = None,
        owner: tuple[str, str, str] | None = None,
        image: str = "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
        spec: dict[str, Any] | None = None,
        status: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """A pod, Running and Ready on `node` unless `status` says otherwise (`spec` adds to or
        replaces the spec's fields, containers included)."""
        meta: dict[str, Any] = {"name": name, "labels": labels or {}}
        if owner:
            meta["ownerReferences"] = [
                {"kind": owner[0], "name": owner[1], "uid": owner[2], "controller": True}
            ]
        body = {"containers": [{"name": c, "image": image} for c in containers], **(spec or {})}
        if node:
            body["nodeName"] = node
        return self.store.create(
            "pods",
            {
                "metadata": meta,
                "spec": body,
                "status": status if status is not None else ready_status(containers, node or ""),
            },
            namespace,
        )

    def event(self, about: dict[str, Any], reason: str, message: str, host: str = "") -> None:
        meta = about["metadata"]
        self.store.create(
            "events",
            {
                "metadata": {"name": f"{meta['name']}.{next(_serial):08x}"},
                "involvedObject": {
                    "kind": about["kind"],
                    "namespace": meta.get("namespace"),
                    "name": meta["name"],
                    "uid": meta["uid"],
                },
                "reason": reason,
                "message": message,
                "type": "Warning",
                "count": 1,
                "source": {"component": "kubelet" if host else "default-scheduler", "host": host},
            },
            meta.get("namespace") or "default",
        )

    def enable(self, daemonset: str) -> dict[str, Any]:
        """Run one more operand, as the operator would once its component is enabled."""
        operand = next(o for o in OPERANDS if o.daemonset == daemonset)
        policy = self.store.get(CLUSTER_POLICY, "cluster-policy")
        return self.operand(
            operand.daemonset,
            operand.container,
            operand.component,
            policy,
            operand.on_every_gpu_node,
        )

    def pods_of(self, daemonset: str) -> list[dict[str, Any]]:
        return [
            p
            for p in self.store.list("pods", NS)[0]
            if p["metadata"]["name"].startswith(daemonset + "-")
        ]

    def gpu_nodes_run(self, **node_info: str) -> None:
        """Give every GPU node another OS image, kernel or container runtime."""
        for node in GPU_NODES:
            self.update("nodes", node, lambda n: n["status"]["nodeInfo"].update(node_info))

    def update(self, kind: str, name: str, change: Any, namespace: str | None = None) -> None:
        self.store.update(kind, name, change, namespace)

    def pending_gpu_pod(
        self, name: str, message: str, limits: dict[str, str] | None = None, **spec: Any
    ) -> dict[str, Any]:
        """A GPU pod the scheduler turned away with `message` (its FailedScheduling Event)."""
        container = {
            "name": "cuda",
            "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
            "resources": {"limits": limits or {"nvidia.com/gpu": "1"}},
        }
        body = {"tolerations": [dict(GPU_TOLERATION)], "containers": [container], **spec}
        pod = self.pod(
            name,
            "default",
            None,
            ["cuda"],
            spec=body,
            status={
                "phase": "Pending",
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": message,
                    }
                ],
            },
        )
        self.event(pod, "FailedScheduling", message)
        return pod
