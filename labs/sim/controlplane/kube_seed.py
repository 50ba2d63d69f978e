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
from labs.sim.node.container_process import VPC_CNI_CONF_MOUNT
from labs.sim.node.images import (
    COREDNS_IMAGE,
    KUBE_PROXY_IMAGE,
    VPC_CNI_IMAGE,
    metrics_server_image,
)
from labs.sim.node.kubelet import CNI_CONF_DIR

DATA = Path(__file__).resolve().parents[1] / "data"


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
                    COREDNS_IMAGE,
                    {"cpu": "100m", "memory": "70Mi"},
                    [{"key": "CriticalAddonsOnly", "operator": "Exists"}],
                ),
            },
        },
        "kube-system",
    )
    for name, image, requests in (
        ("aws-node", VPC_CNI_IMAGE, {"cpu": "25m"}),
        ("kube-proxy", KUBE_PROXY_IMAGE, {"cpu": "100m"}),
    ):
        labels = {"k8s-app": name}
        template = _template(labels, name, image, requests, [{"operator": "Exists"}])
        template["spec"]["hostNetwork"] = True  # both run in the node's own network
        if name == "aws-node":  # where it writes the node's pod network configuration
            template["spec"]["volumes"] = [
                {"name": "cni-net-dir", "hostPath": {"path": CNI_CONF_DIR}}
            ]
            template["spec"]["containers"][0]["volumeMounts"] = [
                {"name": "cni-net-dir", "mountPath": VPC_CNI_CONF_MOUNT}
            ]
        store.create(
            DAEMON_SETS,
            {
                "metadata": {"name": name, "labels": labels},
                "spec": {"selector": {"matchLabels": labels}, "template": template},
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
            image = metrics_server_image(metrics_server_version())
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
