"""The lab's writes to Kubernetes objects that scenarios make, kept apart from the reads.

A patch is checked against the ClusterPolicy schema before it is sent, so a typo in a
scenario fails with the field's name instead of silently doing nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from labs.kube.gpu import CLUSTER_POLICY_NAME

if TYPE_CHECKING:
    from labs.lab import Lab

# The ClusterPolicy fields scenarios may patch, with their schema types (nvidia.com/v1
# ClusterPolicy OpenAPI schema, gpu-operator v26.3). A patch outside this shape is
# refused before it reaches the cluster.
CLUSTER_POLICY_PATCHABLE: dict[str, Any] = {
    "spec": {
        "devicePlugin": {"enabled": bool},
        "dcgmExporter": {"enabled": bool},
        "gfd": {"enabled": bool},
        "toolkit": {"enabled": bool, "version": str},
    }
}


def validate_policy_patch(
    patch: Mapping[str, Any], shape: Mapping[str, Any] = CLUSTER_POLICY_PATCHABLE, path: str = ""
) -> None:
    """Raise ValueError naming the first field of `patch` outside the ClusterPolicy schema."""
    for key, value in patch.items():
        here = f"{path}.{key}" if path else key
        if key not in shape:
            known = ", ".join(sorted(shape))
            raise ValueError(f"ClusterPolicy has no patchable field {here!r} (known: {known})")
        expected = shape[key]
        if isinstance(expected, Mapping):
            if not isinstance(value, Mapping):
                raise ValueError(f"ClusterPolicy field {here!r} must be an object")
            validate_policy_patch(value, expected, here)
        elif not isinstance(value, expected):
            raise ValueError(
                f"ClusterPolicy field {here!r} must be {expected.__name__}, got {value!r}"
            )


def patch_cluster_policy(lab: Lab, patch: Mapping[str, Any]) -> dict[str, Any]:
    """Merge-patch the lab's ClusterPolicy (like `kubectl patch --type=merge`)."""
    from kubernetes import client as k8s

    validate_policy_patch(patch)
    patched = k8s.CustomObjectsApi(lab.kube).patch_cluster_custom_object(
        "nvidia.com",
        "v1",
        "clusterpolicies",
        CLUSTER_POLICY_NAME,
        dict(patch),
        _content_type="application/merge-patch+json",
    )
    return cast(dict[str, Any], patched)  # custom objects come back as the JSON body
