"""The lab's writes to Kubernetes objects that scenarios make, kept apart from the reads.

A patch is checked against the ClusterPolicy schema before it is sent, so a typo in a
scenario fails with the field's name instead of silently doing nothing. Every write is
safe to repeat: it changes nothing when the object already is as asked, and a
read-modify-write names the resourceVersion it read, so a concurrent change is a Conflict,
never silently overwritten.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from labs.kube import rest
from labs.kube.gpu import CLUSTER_POLICY_NAME, has_taint, name_of, taints_of
from labs.kube.resources import CLUSTER_POLICIES, DAEMON_SETS, DEPLOYMENTS, NODES, KubeApiError

if TYPE_CHECKING:
    from labs.lab import Lab

T = TypeVar("T")


class EnvList(list[dict[str, str]]):
    """Schema marker: an array of `{name, value}` string pairs (a component's `env`), or None
    (merge-patch null: no env at all, as the chart renders an empty one)."""


# The ClusterPolicy fields scenarios may patch, with their schema types (nvidia.com/v1
# ClusterPolicy OpenAPI schema, gpu-operator v26.3). A patch outside this shape is
# refused before it reaches the cluster.
CLUSTER_POLICY_PATCHABLE: dict[str, Any] = {
    "spec": {
        "devicePlugin": {
            "enabled": bool,
            "env": EnvList,
            # a sharing-config ConfigMap and its default key; null: none (chart default)
            "config": {"name": str, "default": str},
        },
        "dcgmExporter": {"enabled": bool, "env": EnvList},
        "gfd": {"enabled": bool, "env": EnvList},
        "toolkit": {"enabled": bool, "version": str},
        "validator": {"driver": {"env": EnvList}, "plugin": {"env": EnvList}},
        "operator": {"runtimeClass": str},
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
            if value is None and path:  # merge-patch null removes a section
                continue
            if not isinstance(value, Mapping):
                raise ValueError(f"ClusterPolicy field {here!r} must be an object")
            validate_policy_patch(value, expected, here)
        elif expected is EnvList:
            if value is not None and (
                not isinstance(value, list) or not all(_is_env_var(item) for item in value)
            ):
                raise ValueError(
                    f"ClusterPolicy field {here!r} must be a list of {{name, value}} strings, "
                    f"got {value!r}"
                )
        elif not isinstance(value, expected):
            raise ValueError(
                f"ClusterPolicy field {here!r} must be {expected.__name__}, got {value!r}"
            )


def _is_env_var(item: Any) -> bool:
    return (
        isinstance(item, Mapping)
        and set(item) == {"name", "value"}
        and all(isinstance(v, str) for v in item.values())
    )


def patch_cluster_policy(
    lab: Lab, patch: Mapping[str, Any], resource_version: str | None = None
) -> dict[str, Any]:
    """Merge-patch the lab's ClusterPolicy (like `kubectl patch --type=merge`).

    With `resource_version` the API refuses the patch (409) if the policy changed since.
    """
    validate_policy_patch(patch)
    body = dict(patch)
    if resource_version:
        body["metadata"] = {"resourceVersion": resource_version}
    return rest.patch(lab.kube, CLUSTER_POLICIES.path(name=CLUSTER_POLICY_NAME), body)


def set_component_env(lab: Lab, component: str, name: str, value: str | None) -> bool:
    """Set one env var of ClusterPolicy `spec.<component>.env` (None removes it), keeping the
    others in place; an env left empty is removed, as the chart renders none. True when the
    policy changed."""

    def attempt() -> bool:
        policy = rest.read(lab.kube, CLUSTER_POLICIES.path(name=CLUSTER_POLICY_NAME))
        env = list(((policy.get("spec") or {}).get(component) or {}).get("env") or [])
        wanted = [e for e in env if e.get("name") != name]
        if value is not None:
            at = next((i for i, e in enumerate(env) if e.get("name") == name), len(wanted))
            wanted.insert(at, {"name": name, "value": value})
        if wanted == env:
            return False
        patch = {"spec": {component: {"env": wanted or None}}}
        patch_cluster_policy(lab, patch, policy["metadata"]["resourceVersion"])
        return True

    return _retry_on_conflict(attempt)


def scale_deployment(lab: Lab, namespace: str, name: str, replicas: int) -> None:
    """Set a Deployment's replicas through its scale subresource (like `kubectl scale`)."""
    path = DEPLOYMENTS.path(namespace, name, "scale")
    rest.patch(lab.kube, path, {"spec": {"replicas": replicas}})


def delete_daemonset(lab: Lab, namespace: str, name: str) -> bool:
    """Delete a DaemonSet (its pods follow); False when it was already gone."""
    return rest.delete(lab.kube, DAEMON_SETS.path(namespace, name))


def label_node(lab: Lab, node: str, key: str, value: str) -> None:
    """Set one label on a node (like `kubectl label node N key=value --overwrite`)."""
    rest.patch(lab.kube, NODES.path(name=node), {"metadata": {"labels": {key: value}}})


def taint_node(lab: Lab, node: str, key: str, value: str, effect: str) -> bool:
    """Add a taint to a node (like `kubectl taint node N key=value:effect`); False if it has it."""

    def attempt() -> bool:
        current = rest.read(lab.kube, NODES.path(name=node))
        if has_taint(current, key, effect):
            return False
        _set_taints(
            lab, current, [*taints_of(current), {"key": key, "value": value, "effect": effect}]
        )
        return True

    return _retry_on_conflict(attempt)


def untaint_nodes(lab: Lab, key: str, effect: str) -> list[str]:
    """Remove the taint `key:effect` from every node that has it; the nodes it was removed from."""

    def attempt(name: str) -> bool:
        current = rest.read(lab.kube, NODES.path(name=name))
        if not has_taint(current, key, effect):
            return False
        kept = [t for t in taints_of(current) if (t.get("key"), t.get("effect")) != (key, effect)]
        _set_taints(lab, current, kept)
        return True

    nodes = rest.get_items(lab.kube, NODES.path())
    names = [name_of(n) for n in nodes if has_taint(n, key, effect)]
    return [name for name in names if _retry_on_conflict(functools.partial(attempt, name))]


def _set_taints(lab: Lab, node: Mapping[str, Any], taints: list[dict[str, Any]]) -> None:
    """Replace a node's taints, refused (409) if the node changed since it was read."""
    body = {
        "metadata": {"resourceVersion": node["metadata"]["resourceVersion"]},
        "spec": {"taints": taints},
    }
    rest.patch(lab.kube, NODES.path(name=name_of(node)), body)


def _retry_on_conflict(attempt: Callable[[], T], tries: int = 5) -> T:
    """Run a read-modify-write again when the object changed under it (409), as client-go's
    RetryOnConflict does; kubelet and controllers write nodes and policies all the time."""
    for left in range(tries - 1, -1, -1):
        try:
            return attempt()
        except KubeApiError as error:
            if error.status != 409 or not left:
                raise
    raise AssertionError("unreachable")
