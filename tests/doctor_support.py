"""A GPU cluster held still on the real API server, for the doctor's states no scenario injects.

The plane runs no controllers (`still_support`), so what a test puts in (objects through the API,
pod logs, Events) stays exactly as put: an Amazon Linux 2 node with a crash-looping validator, an
operator OOMKilled in a loop, a device plugin that logged an XID. The healthy cluster is shaped
like the rehearsal lab: two t3.medium system nodes, two g5.xlarge GPU nodes labelled and tainted
as the stack does, the operator's Deployment and ClusterPolicy from the chart's values, its
operand DaemonSets with a Ready pod on each GPU node, and the `nvidia` RuntimeClass.
"""

from __future__ import annotations

import itertools
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from still_support import StillPlane, kubelet_at

from labs.doctor.model import Report
from labs.doctor.run import doctor
from labs.kube.gpu import COMPONENTS, GPU_PRESENT_LABEL, Component
from labs.kube.resources import (
    CLUSTER_POLICIES,
    DAEMON_SETS,
    DEPLOYMENTS,
    EVENTS,
    NODES,
    PODS,
    RUNTIME_CLASSES,
    ResourceType,
)
from labs.lab import Lab
from labs.settings import load_settings
from labs.sim.controllers.feature_discovery import GFD_LABELS
from labs.sim.gpu_operator_release import Helm

NS = "gpu-operator"
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
VALIDATOR = "nvidia-operator-validator"
# The validator's checks run as init containers before its main one (the operator's asset).
VALIDATIONS = ("driver-validation", "toolkit-validation", "cuda-validation", "plugin-validation")
# Each operand's main container, as the operator's v25.3.4 assets name it.
CONTAINERS = {
    "nvidia-driver-daemonset": "nvidia-driver-ctr",
    "nvidia-container-toolkit-daemonset": "nvidia-container-toolkit-ctr",
    "nvidia-dcgm": "nvidia-dcgm-ctr",
}
# The operator labels only MIG-capable GPU nodes for the MIG manager (none on an A10G).
MIG_ONLY = "mig-manager"
OWNER_APIS = {"ReplicaSet": "apps/v1", "DaemonSet": "apps/v1"}
AL2023 = "Amazon Linux 2023.9.20260714"
# What kube-scheduler 1.35's PostFilter plugins add: DRA's word, then preemption's verdict.
PREEMPTION = (
    "no new claims to deallocate, "
    "preemption: 0/4 nodes are available: 4 Preemption is not helpful for scheduling."
)
_serial = itertools.count(1)


def _address(node: str) -> str:
    """ip-192-168-12-5.<region>.compute.internal -> 192.168.12.5"""
    return node.removeprefix("ip-").split(".")[0].replace("-", ".")


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
        **kubelet_at(_address(name)),
    }
    if gpu:
        labels |= {
            "tier": "gpu",
            "nvidia.com/gpu": "true",
            "feature.node.kubernetes.io/pci-10de.present": "true",
            GPU_PRESENT_LABEL: "true",  # the operator's
            **GFD_LABELS,
        }
        labels |= {c.deploy_label: "true" for c in COMPONENTS if c.deploy != MIG_ONLY}
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
    """The held-still plane, with helpers to put a GPU cluster's state in and run the doctor."""

    still: StillPlane
    state_dir: Path

    def examine(self, pod: str | None = None) -> Report:
        """`lab.doctor --kubeconfig F --context C` in this process."""
        return doctor(self.lab, pod)

    def lab(self) -> Lab:
        """The cluster as the tool opens one it did not create (`--kubeconfig F --context C`)."""
        settings = load_settings(
            None,
            {
                "kubeconfig": str(self.still.kubeconfig),
                "context": self.still.context,
                "state_dir": str(self.state_dir),
            },
        )
        return Lab.open(settings)

    # --- building ------------------------------------------------------------------------

    def build_healthy(self) -> None:
        """The healthy cluster; what does not depend on another object goes in side by side (a
        write to the API server takes ~10 ms)."""
        self.still.namespace(NS)
        conditions = [
            {"type": "Ready", "status": "True", "reason": "Reconciled"},
            {"type": "Error", "status": "False", "reason": "Ready"},
        ]
        with ThreadPoolExecutor(8) as pool:
            nodes = SYSTEM_NODES + GPU_NODES
            done = [pool.submit(self.still.put, NODES, _node(n, n in GPU_NODES)) for n in nodes]
            policy = self.still.put(
                CLUSTER_POLICIES,
                {
                    "metadata": {"name": "cluster-policy"},
                    "spec": Helm().rendered("ClusterPolicy", NS)["spec"],
                    "status": {
                        "state": "ready",
                        "namespace": NS,
                        "conditions": policy_conditions(conditions),
                    },
                },
            )
            done.append(pool.submit(self.operator))
            runtime_class = {"metadata": {"name": "nvidia"}, "handler": "nvidia"}
            done.append(pool.submit(self.still.put, RUNTIME_CLASSES, runtime_class))
            done += [
                pool.submit(self.operand, operand, policy)
                for operand in COMPONENTS
                if enabled(policy, operand)
            ]
            for job in done:
                job.result()

    def operator(self) -> dict[str, Any]:
        selector = {"app": "gpu-operator"}
        deployment = self.still.put(
            DEPLOYMENTS,
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

    def operand(self, operand: Component, policy: dict) -> dict[str, Any]:
        """Its DaemonSet, owned by the ClusterPolicy, and its Ready pods (made from the DaemonSet's
        template, as the DaemonSet controller makes them)."""
        name, labels = operand.daemonset, {"app": operand.daemonset}
        image = f"nvcr.io/nvidia/{name}:v1"
        container = CONTAINERS.get(name, name)
        manifest = {
            "metadata": {"name": name, "labels": dict(labels)},
            "spec": {
                "selector": {"matchLabels": dict(labels)},
                "template": {
                    "metadata": {"labels": dict(labels)},
                    "spec": {
                        "nodeSelector": {operand.deploy_label: "true"},
                        "tolerations": [dict(GPU_TOLERATION)],
                        "priorityClassName": "system-node-critical",
                        "containers": [{"name": container, "image": image}],
                    },
                },
            },
        }
        template = manifest["spec"]["template"]["spec"]
        if name == VALIDATOR:
            template["initContainers"] = [{"name": c, "image": image} for c in VALIDATIONS]
        manifest["metadata"]["ownerReferences"] = [
            {
                "apiVersion": "nvidia.com/v1",
                "kind": "ClusterPolicy",
                "name": "cluster-policy",
                "uid": policy["metadata"]["uid"],
                "controller": True,
            }
        ]
        on_every_gpu_node = operand.deploy != MIG_ONLY
        count = len(GPU_NODES) if on_every_gpu_node else 0
        manifest["status"] = {
            "desiredNumberScheduled": count,
            "currentNumberScheduled": count,
            "numberReady": count,
            "numberAvailable": count,
        }
        ds = self.still.put(DAEMON_SETS, manifest, NS)
        for node in GPU_NODES if on_every_gpu_node else ():
            self.pod(
                f"{name}-{next(_serial):05d}",
                NS,
                node,
                [container],
                labels=labels,
                owner=("DaemonSet", name, ds["metadata"]["uid"]),
                image=image,
                spec=template,
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
            kind, owner_name, uid = owner
            meta["ownerReferences"] = [
                {"apiVersion": OWNER_APIS[kind], "kind": kind, "name": owner_name, "uid": uid,
                 "controller": True}
            ]  # fmt: skip
        body = {"containers": [{"name": c, "image": image} for c in containers], **(spec or {})}
        if node:
            body["nodeName"] = node
        return self.still.put(
            PODS,
            {
                "metadata": meta,
                "spec": body,
                "status": status if status is not None else ready_status(containers, node or ""),
            },
            namespace,
        )

    def event(self, about: dict[str, Any], reason: str, message: str, host: str = "") -> None:
        meta = about["metadata"]
        self.still.put(
            EVENTS,
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

    def log(self, pod: dict[str, Any], text: str, container: str | None = None) -> None:
        """What `container` of `pod` printed (its first container by default)."""
        self.still.log(pod, text, container)

    def enable(self, daemonset: str) -> dict[str, Any]:
        """Run one more operand, as the operator would once its component is enabled."""
        operand = next(c for c in COMPONENTS if c.daemonset == daemonset)
        return self.operand(operand, self.still.api.get(CLUSTER_POLICIES, "cluster-policy"))

    def pods_of(self, daemonset: str) -> list[dict[str, Any]]:
        return [
            p
            for p in self.still.api.list(PODS, NS)[0]
            if p["metadata"]["name"].startswith(daemonset + "-")
        ]

    def gpu_nodes_run(self, **node_info: str) -> None:
        """Give every GPU node another OS image, kernel or container runtime."""
        for node in GPU_NODES:
            self.update(NODES, node, lambda n: n["status"]["nodeInfo"].update(node_info))

    def update(
        self, kind: ResourceType, name: str, change: Any, namespace: str | None = None
    ) -> None:
        """Change an object as its owner would (its status through the status subresource)."""
        self.still.api.update(kind, name, change, namespace)

    def delete(self, kind: ResourceType, name: str, namespace: str | None = None) -> None:
        self.still.delete(kind, name, namespace)

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


def policy_conditions(conditions: list[dict[str, str]]) -> list[dict[str, str]]:
    """ClusterPolicy conditions as its CRD requires them (metav1.Condition: a message and a
    lastTransitionTime on each)."""
    return [
        {"message": "", "lastTransitionTime": "2026-11-23T07:00:00Z", **condition}
        for condition in conditions
    ]


def enabled(policy: dict, component: Component) -> bool:
    """`spec.<component>.enabled`, or what the operator does when it is unset."""
    section = (policy.get("spec") or {}).get(component.spec_key) or {}
    return bool(section.get("enabled", component.enabled_by_default))
