"""Discovery and OpenAPI documents built from the store's registered types.

Legacy (non-aggregated) discovery only: kubectl falls back to it when the answer's
Content-Type is plain application/json. The OpenAPI v3 documents carry no schemas, just
the patch operations with a `fieldValidation` parameter that `kubectl apply` looks for
before it trusts the server to validate.
"""

from __future__ import annotations

import hashlib
import json
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
OBJECT_VERBS = ["create", "delete", "get", "list", "patch", "update", "watch"]
# The types `kubectl get all` shows, as on a real server.
ALL_CATEGORY = frozenset({"pods", "services", "daemonsets.apps", "deployments.apps", "jobs.batch"})
SUBRESOURCE_VERBS = {
    "status": ["get", "patch", "update"],
    "log": ["get"],
    "scale": ["get", "patch", "update"],
}
# Subresources served as another kind: name -> (group, version, kind).
SUBRESOURCE_KINDS = {"log": ("", "v1", "Pod"), "scale": ("autoscaling", "v1", "Scale")}


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
                "verbs": OBJECT_VERBS,
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


def _path_prefix(rtype: ResourceType) -> str:
    return f"api/{rtype.version}" if not rtype.group else f"apis/{rtype.group}/{rtype.version}"


def openapi_v3_document(types: list[ResourceType]) -> dict:
    """`GET /openapi/v3/{prefix}` for one group version (all `types` share it)."""
    paths = {}
    for rtype in types:
        scope = "namespaces/{namespace}/" if rtype.namespaced else ""
        gvk = {"group": rtype.group, "version": rtype.version, "kind": rtype.kind}
        paths[f"/{_path_prefix(rtype)}/{scope}{rtype.plural}/{{name}}"] = {
            "patch": {
                "operationId": f"patch{rtype.kind}",
                "x-kubernetes-action": "patch",
                "x-kubernetes-group-version-kind": gvk,
                "parameters": [
                    {"name": "fieldValidation", "in": "query", "schema": {"type": "string"}},
                    {"name": "fieldManager", "in": "query", "schema": {"type": "string"}},
                ],
                "responses": {"200": {"description": "OK"}},
            }
        }
    version = KUBERNETES_VERSION["gitVersion"]
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": version}, "paths": paths}


def openapi_v3_index(types: list[ResourceType]) -> dict[str, dict]:
    """Prefix ("api/v1", "apis/apps/v1") -> its document, for the index and the documents."""
    by_prefix: dict[str, list[ResourceType]] = defaultdict(list)
    for rtype in types:
        by_prefix[_path_prefix(rtype)].append(rtype)
    return {prefix: openapi_v3_document(members) for prefix, members in by_prefix.items()}


def openapi_v3_root(documents: dict[str, dict]) -> dict:
    """`GET /openapi/v3`: each document's URL, with a content hash kubectl caches by."""
    paths = {}
    for prefix, document in sorted(documents.items()):
        digest = hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()[:16]
        paths[prefix] = {"serverRelativeURL": f"/openapi/v3/{prefix}?hash={digest.upper()}"}
    return {"paths": paths}
