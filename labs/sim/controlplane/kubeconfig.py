"""A kubeconfig for the lab's API server, so kubectl and the kubernetes client reach it unchanged.

It carries the lab's CA and a credential (the world's bearer token, random per world, or a
client certificate), so the file is written mode 0600 like any kubeconfig holding one.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from labs.state import atomic_write_text


def kubeconfig_document(
    server_url: str,
    cluster_name: str,
    token: str,
    ca_data: str,
    user: str,
    credentials: dict[str, str] | None = None,
) -> dict:
    """The kubeconfig as a dict: one cluster, one user (a token, or `credentials` such as a
    client certificate), one current context."""
    context = f"{user}@{cluster_name}"
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": cluster_name,
                "cluster": {"server": server_url, "certificate-authority-data": ca_data},
            }
        ],
        "users": [{"name": user, "user": {"token": token} if credentials is None else credentials}],
        "contexts": [{"name": context, "context": {"cluster": cluster_name, "user": user}}],
        "current-context": context,
        "preferences": {},
    }


def write_kubeconfig(path: Path | str, document: dict) -> Path:
    """Write a `kubeconfig_document` atomically (mode 0600, as kubectl expects); its path."""
    target = Path(path)
    atomic_write_text(target, yaml.safe_dump(document, sort_keys=False))
    target.chmod(0o600)
    return target
