"""The Kubernetes side of a fresh EKS cluster: kube-system add-ons and the operator's CRD.

Nodes come from the node lifecycle controller (one per EC2 instance of each node group);
this adds what EKS add-ons put in kube-system (coredns Deployment, aws-node and
kube-proxy DaemonSets) and serves the ClusterPolicy resource type, as if its CRD were
installed, so `kubectl get clusterpolicies` answers "No resources found" before helm runs.
"""

from __future__ import annotations

from labs.sim.store import CLUSTER_POLICY, DAEMONSETS, DEPLOYMENTS, ObjectStore

ADDON_REGISTRY = "602401143452.dkr.ecr.ap-northeast-2.amazonaws.com/eks"


def seed_cluster(store: ObjectStore) -> None:
    """Create the add-on workloads (their pods follow from the workload controller)."""
    store.register(CLUSTER_POLICY)
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
            DAEMONSETS,
            {
                "metadata": {"name": name, "labels": labels},
                "spec": {
                    "selector": {"matchLabels": labels},
                    "template": _template(labels, name, image, requests, [{"operator": "Exists"}]),
                },
            },
            "kube-system",
        )


def _template(labels: dict, name: str, image: str, requests: dict, tolerations: list[dict]) -> dict:
    return {
        "metadata": {"labels": labels},
        "spec": {
            "priorityClassName": "system-node-critical",
            "tolerations": tolerations,
            "containers": [{"name": name, "image": image, "resources": {"requests": requests}}],
        },
    }
