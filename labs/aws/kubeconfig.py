"""The lab kubeconfig for a real EKS cluster, as `aws eks update-kubeconfig` writes it.

It lives in the lab's state directory (never ~/.kube/config) and authenticates with
the exec plugin `aws eks get-token`, so tokens refresh by themselves.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from labs.state import atomic_write_text


def write_eks_kubeconfig(
    path: Path, cluster_name: str, region: str, endpoint: str, ca_data: str | None
) -> Path:
    """Write a kubeconfig for one EKS cluster (mode 0600) and return its path."""
    cluster: dict[str, str] = {"server": endpoint}
    if ca_data and endpoint.startswith("https://"):
        cluster["certificate-authority-data"] = ca_data
    user = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1",
            "command": "aws",
            "args": [
                "--region",
                region,
                "eks",
                "get-token",
                "--cluster-name",
                cluster_name,
                "--output",
                "json",
            ],
            "interactiveMode": "Never",
        }
    }
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster_name, "cluster": cluster}],
        "users": [{"name": f"{cluster_name}-admin", "user": user}],
        "contexts": [
            {
                "name": cluster_name,
                "context": {"cluster": cluster_name, "user": f"{cluster_name}-admin"},
            }
        ],
        "current-context": cluster_name,
    }
    atomic_write_text(path, yaml.safe_dump(document, sort_keys=False))
    path.chmod(0o600)
    return path
