"""Discovery documents built from the store's registered types.

Legacy (non-aggregated) discovery only: kubectl falls back to it when the answer's
Content-Type is plain application/json. The OpenAPI documents are `labs.sim.openapi`'s.
"""

from __future__ import annotations

from collections import defaultdict

from labs.sim.store import ResourceType

KUBERNETES_VERSION = {
    "major": "1",
    "minor": "35",
    "gitVersion": "v1.35.0-sim",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z",
    "goVersion": "go1.25.0",
    "compiler": "gc",
    "platform": "linux/amd64",
}
# The types `kubectl get all` shows, as on a real server.
ALL_CATEGORY = frozenset(
    {"pods", "services", "daemonsets.apps", "deployments.apps", "replicasets.apps", "jobs.batch"}
)
SUBRESOURCE_VERBS = {
    "status": ["get", "patch", "update"],
    "log": ["get"],
    "scale": ["get", "patch", "update"],
    "exec": ["create", "get"],
    "attach": ["create", "get"],
}
# Subresources served as another kind: name -> (group, version, kind).
SUBRESOURCE_KINDS = {
    "log": ("", "v1", "Pod"),
    "scale": ("autoscaling", "v1", "Scale"),
    "exec": ("", "v1", "PodExecOptions"),
    "attach": ("", "v1", "PodAttachOptions"),
}


def group_versions(types: list[ResourceType]) -> dict[str, list[str]]:
    """Group name -> its versions, for the named groups (the core group is served at /api)."""
    versions: dict[str, list[str]] = defaultdict(list)
    for rtype in types:
        if rtype.group and rtype.version not in versions[rtype.group]:
            versions[rtype.group].append(rtype.version)
    return dict(sorted(versions.items()))


def api_versions(server_address: str) -> dict:
    """`GET /api`."""
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}
        ],
    }


def api_group(group: str, versions: list[str]) -> dict:
    """One entry of `GET /apis`, also the body of `GET /apis/{group}`."""
    entries = [{"groupVersion": f"{group}/{version}", "version": version} for version in versions]
    return {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": group,
        "versions": entries,
        "preferredVersion": entries[0],
    }


def api_group_list(types: list[ResourceType]) -> dict:
    """`GET /apis`."""
    groups = [api_group(group, versions) for group, versions in group_versions(types).items()]
    for group in groups:
        del group["kind"], group["apiVersion"]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_resource_list(group_version: str, types: list[ResourceType]) -> dict:
    """`GET /api/v1` or `GET /apis/{group}/{version}`: resources and their subresources."""
    resources = []
    for rtype in sorted(types, key=lambda item: item.plural):
        resources.append(
            {
                "name": rtype.plural,
                "singularName": rtype.singular,
                "namespaced": rtype.namespaced,
                "kind": rtype.kind,
                "verbs": list(rtype.verbs),
                **({"shortNames": list(rtype.short_names)} if rtype.short_names else {}),
                **({"categories": ["all"]} if rtype.ref in ALL_CATEGORY else {}),
            }
        )
        for subresource in rtype.subresources:
            entry = {
                "name": f"{rtype.plural}/{subresource}",
                "singularName": "",
                "namespaced": rtype.namespaced,
                "kind": rtype.kind,
                "verbs": SUBRESOURCE_VERBS[subresource],
            }
            if subresource in SUBRESOURCE_KINDS:
                group, version, kind = SUBRESOURCE_KINDS[subresource]
                entry.update(kind=kind, **({"group": group, "version": version} if group else {}))
            resources.append(entry)
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources,
    }
