"""The Kubernetes side of a fresh EKS cluster: kube-system add-ons and the operator's CRD.

Nodes come from the node lifecycle controller (one per EC2 instance of each node group);
this adds what EKS add-ons put in kube-system (coredns Deployment, aws-node and
kube-proxy DaemonSets; their pods come from the real controllers) and installs the GPU
Operator's ClusterPolicy CRD (the chart's own, which helm then finds in place), so `kubectl get
clusterpolicies` answers "No resources found" before helm runs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import yaml

from labs.kube.api import KubeApi
from labs.kube.resources import (
    CRDS,
    DAEMON_SETS,
    DEPLOYMENTS,
    KubeApiError,
    ResourceType,
)
from labs.sim.controlplane.build import metrics_server_version

DATA = Path(__file__).resolve().parents[1] / "data"
ADDON_REGISTRY = "602401143452.dkr.ecr.ap-northeast-2.amazonaws.com/eks"


def seed_cluster(store: KubeApi, cluster_policy_crd: dict) -> None:
    """Install the ClusterPolicy CRD and create the add-on workloads."""
    install_crd(store, cluster_policy_crd)
    store.create(
        DEPLOYMENTS,
        {
            "metadata": {"name": "coredns", "labels": {"k8s-app": "kube-dns"}},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"k8s-app": "kube-dns"}},
                "template": _template(
                    {"k8s-app": "kube-dns"},
                    "coredns",
                    f"{ADDON_REGISTRY}/coredns:v1.12.4-eksbuild.1",
                    {"cpu": "100m", "memory": "70Mi"},
                    [{"key": "CriticalAddonsOnly", "operator": "Exists"}],
                ),
            },
        },
        "kube-system",
    )
    for name, image, requests in (
        ("aws-node", f"{ADDON_REGISTRY}/amazon-k8s-cni:v1.20.4-eksbuild.1", {"cpu": "25m"}),
        ("kube-proxy", f"{ADDON_REGISTRY}/kube-proxy:v1.35.0-eksbuild.2", {"cpu": "100m"}),
    ):
        labels = {"k8s-app": name}
        store.create(
            DAEMON_SETS,
            {
                "metadata": {"name": name, "labels": labels},
                "spec": {
                    "selector": {"matchLabels": labels},
                    "template": _template(labels, name, image, requests, [{"operator": "Exists"}]),
                },
            },
            "kube-system",
        )


def seed_metrics_server(store: KubeApi, route: Callable[[dict], None]) -> None:
    """The metrics-server addon's objects (`data/metrics-server.yaml`: RBAC, Service,
    Deployment, APIService). `route(service)` gets the created Service (its cluster IP) before
    the APIService sends the aggregator there: a tunnel to an unrouted address would leave the
    world."""
    for obj in yaml.safe_load((DATA / "metrics-server.yaml").read_text()):
        if obj["kind"] == "Deployment":
            image = f"{ADDON_REGISTRY}/metrics-server:{metrics_server_version()}-eksbuild.1"
            obj["spec"]["template"]["spec"]["containers"][0]["image"] = image
        created = store.call("POST", collection(obj), obj)
        if obj["kind"] == "Service":
            route(created)


def collection(obj: dict) -> str:
    """The path objects of this kind are created at (their plural is the kind's, plus "s")."""
    api_version, namespace = obj["apiVersion"], obj["metadata"].get("namespace")
    root = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    scope = f"/namespaces/{namespace}" if namespace else ""
    return f"{root}{scope}/{obj['kind'].lower()}s"


def _template(labels: dict, name: str, image: str, requests: dict, tolerations: list[dict]) -> dict:
    return {
        "metadata": {"labels": labels},
        "spec": {
            "priorityClassName": "system-node-critical",
            "tolerations": tolerations,
            "containers": [{"name": name, "image": image, "resources": {"requests": requests}}],
        },
    }


def install_crd(store: KubeApi, crd: dict, timeout: float = 30.0) -> None:
    """Create the CustomResourceDefinition `crd` and wait until the API serves its type."""
    created = store.create(CRDS, crd)
    names, group = created["spec"]["names"], created["spec"]["group"]
    version = next(v["name"] for v in created["spec"]["versions"] if v.get("storage"))
    rtype = ResourceType(group, version, names["plural"], names["kind"],
                         created["spec"]["scope"] == "Namespaced")  # fmt: skip
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        conditions = (store.get(CRDS, rtype.ref).get("status") or {}).get("conditions") or []
        if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
            try:  # established, and its storage answers (it says "(re)initializing" at first)
                store.list(rtype)
                return
            except KubeApiError:
                pass
        time.sleep(0.1)
    raise RuntimeError(f"the API server did not establish the CRD {rtype.ref} in {timeout:.0f} s")
