"""A control plane held still for the tests: etcd and kube-apiserver, no controller to move a thing.

The tests that need a cluster in an exact state (the doctor's states that no scenario injects,
the engine running a one-module scenario, the watched view, an engineer's own GPU cluster) share
one such plane per test session (per xdist worker: a start takes ~5 s). A test puts objects in
through the API as their owners would (`put`: create, then the status through the status
subresource, as a controller or kubelet writes it) and pod logs where a kubelet keeps them
(`log`: the files the node endpoint serves to `kubectl logs`, reached through the API server's
egress as in a rehearsal world). `reset` then removes everything the plane did not start with
(an object it started with stays as a test left it: the tests leave those alone).

Without kube-controller-manager nothing plays its part unless the test does: a new namespace
gets its `default` ServiceAccount from `namespace` (pods are refused without it), nothing
collects garbage, and a deleted namespace stays Terminating until finalized (`reset` does).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from controlplane_support import kubectl_on, progress
from kubernetes import config

from labs.kube.api import KubeApi
from labs.kube.resources import (
    NAMESPACES,
    NODES,
    PODS,
    SERVICE_ACCOUNTS,
    NotFound,
    ResourceType,
    resolve,
)
from labs.sim.controllers.node_lifecycle import KUBELET_PORT
from labs.sim.controlplane.gpu_operator import cluster_policy_crd, release
from labs.sim.controlplane.kube_seed import install_crd
from labs.sim.controlplane.node_endpoint import NodeEndpoint
from labs.sim.controlplane.run import ControlPlane
from labs.sim.node.container_logs import ContainerLogs
from labs.sim.world import node_endpoint, node_network

# The verbs that make an object (PUT and server-side apply can create one too).
WRITES = {"create", "update", "patch"}


def kubelet_at(address: str) -> dict[str, Any]:
    """The node status fields through which the API server reaches a node's kubelet (here the
    node endpoint, over the plane's egress): merge them into a node's status."""
    return {
        "addresses": [{"type": "InternalIP", "address": address}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": KUBELET_PORT}},
    }


@dataclass
class StillPlane:
    """The held-still plane (the node endpoint behind its nodes) and what tests reach it with."""

    plane: ControlPlane
    api: KubeApi
    logs: ContainerLogs
    _types: dict[tuple[str, str], ResourceType] = field(default_factory=dict)
    _baseline: set[str] = field(default_factory=set)
    _audited: int = 0  # the audit log's size at the last reset

    @property
    def url(self) -> str:
        return self.plane.api_url

    @property
    def kubeconfig(self) -> Path:
        """The administrator's kubeconfig (a client certificate), for kubectl and the client."""
        return self.plane.admin_kubeconfig

    @property
    def context(self) -> str:
        return str(yaml.safe_load(self.kubeconfig.read_text())["current-context"])

    @property
    def audit_log(self) -> Path:
        return self.plane.home / "logs" / "audit.log"

    def kubectl(
        self, cache: Path, *args: str, stdin: str | None = None
    ) -> subprocess.CompletedProcess:
        """kubectl with the kubeconfig (`cache`: its discovery cache, one per test)."""
        return kubectl_on(self.kubeconfig, cache, *args, stdin=stdin)

    def client(self) -> Any:
        """An official `kubernetes` ApiClient from the kubeconfig (close it when done)."""
        return config.new_client_from_config(config_file=str(self.kubeconfig))

    # --- putting a state in ---------------------------------------------------------------

    def put(self, ref: ResourceType | str, obj: dict, namespace: str | None = None) -> dict:
        """Create `obj`, then write its status through the status subresource (a create keeps
        none); the object as the API server holds it. A pod bound to a node gets its
        containers' log files, empty until `log` writes them, as its kubelet would."""
        rtype = resolve(ref)
        created = self.api.create(rtype, {k: v for k, v in obj.items() if k != "status"}, namespace)
        if obj.get("status") and "status" in rtype.subresources:
            created = self.api.replace(rtype, {**created, "status": obj["status"]}, "status")
        if rtype.ref == NODES.ref:
            self._untaint(created, obj)
        if rtype.ref == PODS.ref and created["spec"].get("nodeName"):
            self.logs.start(created)
        return created

    def _untaint(self, node: dict, wanted: dict) -> None:
        """Admission (TaintNodesByCondition) taints every new node not-ready; the node lifecycle
        controller lifts it once the kubelet reports Ready. Here the test says what it wants."""
        taints = (wanted.get("spec") or {}).get("taints") or []
        if ((node.get("spec") or {}).get("taints") or []) != taints:
            name = node["metadata"]["name"]
            node.update(self.api.update(NODES, name, lambda n: n["spec"].update(taints=taints)))

    def namespace(self, name: str) -> dict:
        """A namespace and its `default` ServiceAccount (kube-controller-manager's part)."""
        made = self.api.create(NAMESPACES, {"metadata": {"name": name}})
        self.api.create(SERVICE_ACCOUNTS, {"metadata": {"name": "default"}}, name)
        return made

    def log(self, pod: dict, text: str, container: str | None = None) -> None:
        """`container` (the pod's first by default) printed `text`."""
        self.logs.append(pod, text, container)

    def delete(self, ref: ResourceType | str, name: str, namespace: str | None = None) -> None:
        """Delete at once, as `kubectl delete --grace-period=0 --force` does: no kubelet is
        there to finish a pod's graceful deletion."""
        self.api.delete(ref, name, namespace, grace_seconds=0)

    # --- taking it out again ------------------------------------------------------------

    def remember_baseline(self) -> None:
        """What the plane holds now stays; `reset` removes everything else."""
        self._types = {(t.group, t.plural): t for t in _deletable_types(self.api)}
        self._baseline = {obj["metadata"]["uid"] for _, obj in self._listed(self._types.values())}
        self._audited = self.audit_log.stat().st_size

    def reset(self) -> None:
        """Delete every object the baseline does not hold (namespaced ones, then cluster-scoped
        ones, then namespaces, finalized as the namespace controller would once they are
        empty), and every container log. Only the types written since the last reset are
        looked at (the API server's audit log names them, whoever wrote)."""
        added: dict[str, tuple[ResourceType, dict]] = {}
        for rtype, obj in self._listed(self._written()):
            uid = obj["metadata"]["uid"]
            if uid not in self._baseline:
                added.setdefault(uid, (rtype, obj))
        phases: list[list[tuple[ResourceType, dict]]] = [[], [], []]
        for rtype, obj in added.values():
            phase = 2 if rtype.ref == NAMESPACES.ref else int(not rtype.namespaced)
            phases[phase].append((rtype, obj))
        with ThreadPoolExecutor(8) as pool:
            for phase in phases:
                list(pool.map(lambda found: self._remove(*found), phase))
        self._audited = self.audit_log.stat().st_size
        shutil.rmtree(self.logs.root)
        self.logs.root.mkdir()

    def _written(self) -> list[ResourceType]:
        """The types created, updated or patched since the last reset (every type when the
        audit log was rotated meanwhile)."""
        with self.audit_log.open("rb") as log:
            log.seek(0, 2)
            if log.tell() < self._audited:
                return list(self._types.values())
            log.seek(self._audited)
            complete = log.read().rpartition(b"\n")[0]
        written = set()
        for line in complete.splitlines():
            entry = json.loads(line)
            ref = entry.get("objectRef") or {}
            if entry["verb"] in WRITES and "resource" in ref and not ref.get("subresource"):
                written.add((ref.get("apiGroup", ""), ref["resource"]))
        return [self._types[key] for key in written if key in self._types]

    def _remove(self, rtype: ResourceType, obj: dict) -> None:
        meta = obj["metadata"]
        name, namespace = meta["name"], meta.get("namespace")
        try:
            left = self.api.delete(rtype, name, namespace, grace_seconds=0)
            if rtype.ref == NAMESPACES.ref:
                finalized = {**left, "spec": {"finalizers": []}}
                self.api.call("PUT", f"/api/v1/namespaces/{name}/finalize", finalized)
            elif meta.get("finalizers"):
                self.api.patch(rtype, name, {"metadata": {"finalizers": None}}, namespace)
        except NotFound:
            pass

    def _listed(self, types: Iterable[ResourceType]) -> list[tuple[ResourceType, dict]]:
        """Every object of `types`, each with its type."""
        types = list(types)
        with ThreadPoolExecutor(8) as pool:
            lists = pool.map(lambda rtype: self.api.list(rtype)[0], types)
            found = zip(types, lists, strict=True)
            return [(rtype, obj) for rtype, items in found for obj in items]


def _deletable_types(api: KubeApi) -> Iterator[ResourceType]:
    """Every resource the API server serves that can be listed and deleted (discovery)."""
    groups = [("", "v1")] + [
        (group["name"], group["preferredVersion"]["version"])
        for group in api.call("GET", "/apis")["groups"]
    ]
    for group, version in groups:
        path = f"/apis/{group}/{version}" if group else f"/api/{version}"
        for resource in api.call("GET", path)["resources"]:
            if "/" not in resource["name"] and {"list", "delete"} <= set(resource["verbs"]):
                yield ResourceType(
                    group, version, resource["name"], resource["kind"], resource["namespaced"]
                )


@contextmanager
def held_still(home: Path) -> Iterator[StillPlane]:
    """Start the plane held still, with the ClusterPolicy CRD installed (as on a lab before
    helm runs) and the node endpoint behind every node; stop both at the end."""
    with ExitStack() as stack:
        plane = ControlPlane(home / "controlplane", egress_socket=node_network(), held_still=True)
        stack.callback(plane.stop)
        plane.start(progress)
        logs = ContainerLogs(home / "pods")
        endpoint: NodeEndpoint = node_endpoint(plane, home, logs, home / "ports")
        stack.callback(endpoint.stop)
        endpoint.start(progress)
        api = KubeApi(plane.credentials("admin").api_client())
        install_crd(api, cluster_policy_crd(release(progress)))
        api.create(SERVICE_ACCOUNTS, {"metadata": {"name": "default"}}, "default")
        still = StillPlane(plane, api, logs)
        still.remember_baseline()
        yield still
