"""The kube-controller-manager's share: Deployments, DaemonSets and pod garbage collection.

- A Deployment keeps `spec.replicas` pods from its template (the scheduler places them).
- A DaemonSet keeps one pod on every Ready node its template's nodeSelector, affinity and
  tolerations admit (plus the node.kubernetes.io tolerations the DaemonSet controller adds to
  every daemon pod), bound to that node, and reports desired/current/ready/misscheduled counts
  as `updateDaemonSetStatus` does. As `NodeShouldRunDaemonPod` decides: a node whose labels
  no longer match loses its pod at once; a new untolerated NoSchedule taint stops new pods
  but the running one stays (misscheduled); a pod on a node with an untolerated NoExecute
  taint is left to the taint-eviction controller (on a real cluster both race to delete it;
  here the taint manager always does, so its Event is always there) and is not re-created.
- Pods whose owner is gone, and DaemonSets whose ClusterPolicy is gone, are deleted
  (what the garbage collector does after a background-propagated delete).

DaemonSet pods come up one node quickly and the rest later, as on a real cluster where
images are pulled node by node: the first pod of a rollout carries the
`operand_first_ready` startup time, the others `operand_all_ready` (annotation
`STARTUP_ANNOTATION`, real-world seconds, read by the kubelet). When the DaemonSet says
when its rollout began (`STARTUP_FROM_ANNOTATION`, wall-clock seconds, set by the GPU
Operator at the ClusterPolicy change), the pods carry it too and the kubelet counts the
startup time from then, so the operator's own delay is not added on top.
"""

from __future__ import annotations

import copy
import hashlib

from labs.sim.controllers.base import Controller
from labs.sim.controllers.placement import (
    daemon_pod_tolerations,
    node_is_ready,
    pod_ready,
    selector_matches,
    tolerates,
)
from labs.sim.store import (
    CLUSTER_POLICY,
    DAEMONSETS,
    DEPLOYMENTS,
    NODES,
    PODS,
    NotFound,
    ObjectStore,
    ResourceType,
)
from labs.sim.timings import REAL_WORLD_SECONDS

STARTUP_ANNOTATION = "sim.eks-gpu-lab/startup-seconds"
STARTUP_FROM_ANNOTATION = "sim.eks-gpu-lab/startup-from"
_OWNER_KINDS = {"DaemonSet": DAEMONSETS, "Deployment": DEPLOYMENTS}


class Workloads(Controller):
    """Pods for Deployments and DaemonSets, their status counts, and orphan cleanup."""

    watched = (DEPLOYMENTS, DAEMONSETS, PODS, NODES, CLUSTER_POLICY)

    def reconcile(self) -> float | None:
        self._collect_orphan_daemonsets()
        pods, _ = self.store.list(PODS)
        owners = {}
        for rtype in (DEPLOYMENTS, DAEMONSETS):
            for obj in self.store.list(rtype)[0]:
                owners[obj["metadata"]["uid"]] = obj
        owned: dict[str, list[dict]] = {uid: [] for uid in owners}
        for pod in pods:
            ref = _controller_ref(pod)
            if ref is None or ref["kind"] not in _OWNER_KINDS:
                continue
            if ref["uid"] in owned:
                owned[ref["uid"]].append(pod)
            else:
                _delete_quietly(self.store, pod)
        nodes = self.store.list(NODES)[0]
        for uid, owner in owners.items():
            if owner["kind"] == "Deployment":
                self._deployment(owner, owned[uid])
            else:
                self._daemonset(owner, owned[uid], nodes)
        return None

    def _collect_orphan_daemonsets(self) -> None:
        policies = {p["metadata"]["uid"] for p in self.store.list(CLUSTER_POLICY)[0]}
        for ds in self.store.list(DAEMONSETS)[0]:
            ref = _controller_ref(ds)
            if ref and ref["kind"] == CLUSTER_POLICY.kind and ref["uid"] not in policies:
                try:
                    self.store.delete(
                        DAEMONSETS, ds["metadata"]["name"], ds["metadata"]["namespace"]
                    )
                except NotFound:
                    pass

    def _deployment(self, deploy: dict, pods: list[dict]) -> None:
        wanted = deploy["spec"].get("replicas", 1)
        live = [p for p in pods if p.get("status", {}).get("phase") not in ("Succeeded", "Failed")]
        for pod in live[wanted:]:
            _delete_quietly(self.store, pod)
        live = live[:wanted]
        hash_ = _template_hash(deploy)
        for _ in range(wanted - len(live)):
            live.append(
                self.store.create(
                    PODS,
                    _pod_from(deploy, generate_name=f"{deploy['metadata']['name']}-{hash_}-"),
                    deploy["metadata"]["namespace"],
                )
            )
        ready = sum(1 for p in live if pod_ready(p))
        status = {
            "observedGeneration": deploy["metadata"]["generation"],
            "replicas": len(live),
            "updatedReplicas": len(live),
            "readyReplicas": ready,
            "availableReplicas": ready,
            "unavailableReplicas": len(live) - ready,
            "conditions": [
                {
                    "type": "Available",
                    "status": "True" if ready >= wanted else "False",
                    "reason": "MinimumReplicasAvailable"
                    if ready >= wanted
                    else "MinimumReplicasUnavailable",
                }
            ],
        }
        self._set_status(DEPLOYMENTS, deploy, status)

    def _daemonset(self, ds: dict, pods: list[dict], nodes: list[dict]) -> None:
        template = ds["spec"]["template"]["spec"]
        tolerations = daemon_pod_tolerations(template)
        should_run: set[str] = set()
        may_stay: set[str] = set()  # a pod already there keeps running
        for n in nodes:
            name = n["metadata"]["name"]
            if not node_is_ready(n) or not selector_matches(
                template.get("nodeSelector") or {}, n, template.get("affinity")
            ):
                continue
            # Untolerated taints stop new pods; a running one stays (NoSchedule) or is the
            # taint-eviction controller's to delete (NoExecute).
            may_stay.add(name)
            if tolerates(tolerations, n):
                should_run.add(name)
        on_node: dict[str, dict] = {}
        for pod in pods:
            node = pod["spec"].get("nodeName")
            if node in may_stay and node not in on_node:
                on_node[node] = pod
            else:
                _delete_quietly(self.store, pod)
        for node in sorted(should_run - set(on_node)):
            startup = "operand_first_ready" if not on_node else "operand_all_ready"
            pod = _pod_from(ds, generate_name=f"{ds['metadata']['name']}-")
            pod["spec"]["nodeName"] = node
            pod["spec"]["tolerations"] = tolerations
            annotations = pod["metadata"].setdefault("annotations", {})
            annotations.setdefault(STARTUP_ANNOTATION, str(REAL_WORLD_SECONDS[startup]))
            rollout_from = (ds["metadata"].get("annotations") or {}).get(STARTUP_FROM_ANNOTATION)
            if rollout_from:
                annotations[STARTUP_FROM_ANNOTATION] = rollout_from
            on_node[node] = self.store.create(PODS, pod, ds["metadata"]["namespace"])
        current = [pod for node, pod in on_node.items() if node in should_run]
        ready = sum(1 for p in current if pod_ready(p))
        status = {
            "observedGeneration": ds["metadata"]["generation"],
            "desiredNumberScheduled": len(should_run),
            "currentNumberScheduled": len(current),
            "updatedNumberScheduled": len(current),
            "numberReady": ready,
            "numberAvailable": ready,
            "numberMisscheduled": len(on_node) - len(current),
        }
        if ready < len(should_run):
            status["numberUnavailable"] = len(should_run) - ready
        self._set_status(DAEMONSETS, ds, status)

    def _set_status(self, rtype: ResourceType, obj: dict, status: dict) -> None:
        def apply(current: dict) -> None:
            current["status"] = status

        try:
            self.store.update(rtype, obj["metadata"]["name"], apply, obj["metadata"]["namespace"])
        except NotFound:
            pass


def _pod_from(owner: dict, generate_name: str) -> dict:
    template = copy.deepcopy(owner["spec"]["template"])
    metadata = template.get("metadata") or {}
    metadata["generateName"] = generate_name
    metadata["ownerReferences"] = [
        {
            "apiVersion": owner["apiVersion"],
            "kind": owner["kind"],
            "name": owner["metadata"]["name"],
            "uid": owner["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    spec = template.get("spec") or {}
    spec.setdefault("restartPolicy", "Always")
    return {
        "metadata": metadata,
        "spec": spec,
        "status": {"phase": "Pending"},
    }


def _template_hash(deploy: dict) -> str:
    digest = hashlib.sha256(repr(deploy["spec"]["template"]).encode()).hexdigest()
    return "".join(c for c in digest if c in "bcdf2456789")[:10].ljust(10, "5")


def _controller_ref(pod: dict) -> dict | None:
    for ref in pod["metadata"].get("ownerReferences") or []:
        if ref.get("controller"):
            return ref
    return None


def _delete_quietly(store: ObjectStore, pod: dict) -> None:
    try:
        store.delete(PODS, pod["metadata"]["name"], pod["metadata"]["namespace"])
    except NotFound:
        pass
