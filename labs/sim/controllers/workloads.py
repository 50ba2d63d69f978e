"""The kube-controller-manager's share: Deployments, ReplicaSets, DaemonSets and garbage
collection, with the Events those controllers record.

- A Deployment keeps one ReplicaSet per pod template (`<name>-<template hash>`) at
  `spec.replicas` and any older one at 0 (`ScalingReplicaSet`: "Scaled up replica set X
  from 0 to 1"); a ReplicaSet keeps `spec.replicas` pods from its template, the scheduler
  places them (`SuccessfulCreate`: "Created pod: X", `SuccessfulDelete`). A create the API
  refuses (admission: a missing RuntimeClass) is a Warning `FailedCreate`, "Error creating:
  <the API's error>", and a `ReplicaFailure` condition on the ReplicaSet, as
  `RealPodControl.createPods` (pkg/controller/controller_utils.go) and the ReplicaSet's
  `calculateStatus` record it: no pod exists, so only the owner tells.
- A DaemonSet keeps one pod on every Ready node its template's nodeSelector, affinity and
  tolerations admit (plus the node.kubernetes.io tolerations the DaemonSet controller adds to
  every daemon pod), bound to that node, and reports desired/current/ready/misscheduled counts
  as `updateDaemonSetStatus` does. As `NodeShouldRunDaemonPod` decides: a node whose labels
  no longer match loses its pod at once; a new untolerated NoSchedule taint stops new pods
  but the running one stays (misscheduled); a pod on a node with an untolerated NoExecute
  taint is left to the taint-eviction controller (on a real cluster both race to delete it;
  here the taint manager always does, so its Event is always there) and is not re-created.
  The DaemonSet controller records `SuccessfulCreate`/`SuccessfulDelete` for its pods.
- Pods and ReplicaSets whose owner is gone, and DaemonSets and Services whose ClusterPolicy
  is gone, are deleted (what the garbage collector does after a background-propagated delete).

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
from labs.sim.controllers.events import EventRecorder
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
    REPLICASETS,
    SERVICES,
    Forbidden,
    NotFound,
    ObjectStore,
    ResourceType,
)
from labs.sim.timings import REAL_WORLD_SECONDS, Timings

STARTUP_ANNOTATION = "sim.eks-gpu-lab/startup-seconds"
STARTUP_FROM_ANNOTATION = "sim.eks-gpu-lab/startup-from"
TEMPLATE_HASH_LABEL = "pod-template-hash"
# Who records the Events of each owner kind.
_POD_OWNERS = ("DaemonSet", "ReplicaSet")
_RECORDERS = {
    "DaemonSet": "daemonset-controller",
    "Deployment": "deployment-controller",
    "ReplicaSet": "replicaset-controller",
}
# What each kind's owner must be for it to live on: (the object's kind, its owner's type).
_OWNED = ((DAEMONSETS, CLUSTER_POLICY), (SERVICES, CLUSTER_POLICY), (REPLICASETS, DEPLOYMENTS))


class Workloads(Controller):
    """ReplicaSets for Deployments, pods for ReplicaSets and DaemonSets, their status counts,
    and orphan cleanup."""

    watched = (DEPLOYMENTS, REPLICASETS, DAEMONSETS, PODS, NODES, CLUSTER_POLICY)

    def __init__(self, store: ObjectStore, timings: Timings) -> None:
        super().__init__(store, timings)
        self._events = {kind: EventRecorder(store, name) for kind, name in _RECORDERS.items()}

    def reconcile(self) -> float | None:
        for rtype, owner_type in _OWNED:
            self._collect_orphans(rtype, owner_type)
        deployments = self.store.list(DEPLOYMENTS)[0]
        replicasets = self.store.list(REPLICASETS)[0]
        for deploy in deployments:
            self._roll_out(deploy, _owned_by(deploy, replicasets))
        pods, _ = self.store.list(PODS)
        owners = {}
        for rtype in (REPLICASETS, DAEMONSETS):
            for obj in self.store.list(rtype)[0]:
                owners[obj["metadata"]["uid"]] = obj
        owned: dict[str, list[dict]] = {uid: [] for uid in owners}
        for pod in pods:
            ref = _controller_ref(pod)
            if ref is None or ref["kind"] not in _POD_OWNERS:
                continue
            if ref["uid"] in owned:
                owned[ref["uid"]].append(pod)
            else:
                _delete_quietly(self.store, pod)
        nodes = self.store.list(NODES)[0]
        for uid, owner in owners.items():
            if owner["kind"] == "ReplicaSet":
                self._replicaset(owner, owned[uid])
            else:
                self._daemonset(owner, owned[uid], nodes)
        replicasets = self.store.list(REPLICASETS)[0]  # their status as this pass left it
        for deploy in deployments:
            self._deployment_status(deploy, _owned_by(deploy, replicasets))
        return None

    def _collect_orphans(self, rtype: ResourceType, owner_type: ResourceType) -> None:
        owners = {o["metadata"]["uid"] for o in self.store.list(owner_type)[0]}
        for obj in self.store.list(rtype)[0]:
            ref = _controller_ref(obj)
            if ref and ref["kind"] == owner_type.kind and ref["uid"] not in owners:
                try:
                    self.store.delete(rtype, obj["metadata"]["name"], obj["metadata"]["namespace"])
                except NotFound:
                    pass

    def _roll_out(self, deploy: dict, replicasets: list[dict]) -> None:
        """One ReplicaSet per template at spec.replicas, older ones at 0."""
        wanted = deploy["spec"].get("replicas", 1)
        name = _replicaset_name(deploy)
        current = next((rs for rs in replicasets if rs["metadata"]["name"] == name), None)
        if current is None:
            current = self.store.create(
                REPLICASETS, _replicaset_from(deploy, name, 0), deploy["metadata"]["namespace"]
            )
            replicasets = [*replicasets, current]
        for rs in replicasets:
            self._scale_replicaset(deploy, rs, wanted if rs is current else 0)

    def _deployment_status(self, deploy: dict, replicasets: list[dict]) -> None:
        """The Deployment's status, summed from its ReplicaSets'."""
        wanted = deploy["spec"].get("replicas", 1)
        status_of = {rs["metadata"]["name"]: rs.get("status") or {} for rs in replicasets}
        live = sum(s.get("replicas", 0) for s in status_of.values())
        ready = sum(s.get("readyReplicas", 0) for s in status_of.values())
        status = {
            "observedGeneration": deploy["metadata"]["generation"],
            "replicas": live,
            "updatedReplicas": status_of.get(_replicaset_name(deploy), {}).get("replicas", 0),
            "readyReplicas": ready,
            "availableReplicas": ready,
            "unavailableReplicas": max(wanted - ready, 0),
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

    def _scale_replicaset(self, deploy: dict, rs: dict, replicas: int) -> None:
        old = rs["spec"].get("replicas", 1)
        if old == replicas:
            return

        def scale(current: dict) -> None:
            current["spec"]["replicas"] = replicas

        self.store.update(REPLICASETS, rs["metadata"]["name"], scale, rs["metadata"]["namespace"])
        direction = "up" if replicas > old else "down"
        name = rs["metadata"]["name"]
        message = f"Scaled {direction} replica set {name} from {old} to {replicas}"
        self._events["Deployment"].record(deploy, "ScalingReplicaSet", message)

    def _replicaset(self, rs: dict, pods: list[dict]) -> None:
        wanted = rs["spec"].get("replicas", 1)
        live = [p for p in pods if p.get("status", {}).get("phase") not in ("Succeeded", "Failed")]
        for pod in live[wanted:]:
            self._delete_pod(rs, pod)
        live = live[:wanted]
        refused = None
        for _ in range(wanted - len(live)):
            pod = _pod_from(rs, generate_name=f"{rs['metadata']['name']}-")
            try:
                live.append(self._create_pod(rs, pod))
            except Forbidden as error:
                refused = error.message
                break  # the controller backs off; the next pass tries again
        ready = sum(1 for p in live if pod_ready(p))
        status: dict = {
            "observedGeneration": rs["metadata"]["generation"],
            "replicas": len(live),
            "fullyLabeledReplicas": len(live),
            "readyReplicas": ready,
            "availableReplicas": ready,
        }
        if refused:
            status["conditions"] = [{"type": "ReplicaFailure", "status": "True",
                                     "reason": "FailedCreate", "message": refused}]  # fmt: skip
        self._set_status(REPLICASETS, rs, status)

    def _create_pod(self, owner: dict, pod: dict) -> dict:
        """Create an owned pod and record it; a refused one is a FailedCreate Warning on the
        owner, and the API's error goes on to the caller."""
        events = self._events[owner["kind"]]
        try:
            created = self.store.create(PODS, pod, owner["metadata"]["namespace"])
        except Forbidden as error:
            events.record(owner, "FailedCreate", f"Error creating: {error.message}", "Warning")
            raise
        events.record(owner, "SuccessfulCreate", f"Created pod: {created['metadata']['name']}")
        return created

    def _delete_pod(self, owner: dict, pod: dict) -> None:
        if _delete_quietly(self.store, pod):
            message = f"Deleted pod: {pod['metadata']['name']}"
            self._events[owner["kind"]].record(owner, "SuccessfulDelete", message)

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
                self._delete_pod(ds, pod)
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
            try:
                on_node[node] = self._create_pod(ds, pod)
            except Forbidden:
                break  # recorded on the DaemonSet; the next pass tries again
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
    metadata["ownerReferences"] = [owner_reference(owner)]
    spec = template.get("spec") or {}
    spec.setdefault("restartPolicy", "Always")
    return {
        "metadata": metadata,
        "spec": spec,
        "status": {"phase": "Pending"},
    }


def _replicaset_from(deploy: dict, name: str, replicas: int) -> dict:
    """The ReplicaSet a Deployment makes for its current template (pod-template-hash)."""
    hash_ = name.rsplit("-", 1)[1]
    template = copy.deepcopy(deploy["spec"]["template"])
    template.setdefault("metadata", {}).setdefault("labels", {})[TEMPLATE_HASH_LABEL] = hash_
    selector = copy.deepcopy(deploy["spec"].get("selector") or {})
    selector.setdefault("matchLabels", {})[TEMPLATE_HASH_LABEL] = hash_
    labels = {**(template["metadata"]["labels"])}
    return {
        "metadata": {
            "name": name,
            "labels": labels,
            "ownerReferences": [owner_reference(deploy)],
        },
        "spec": {"replicas": replicas, "selector": selector, "template": template},
    }


def owner_reference(owner: dict) -> dict:
    """The controller reference an object's owner puts on it (garbage collection follows it)."""
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _owned_by(owner: dict, objects: list[dict]) -> list[dict]:
    """The objects whose controller is `owner`."""
    uid = owner["metadata"]["uid"]
    return [obj for obj in objects if (_controller_ref(obj) or {}).get("uid") == uid]


def _replicaset_name(deploy: dict) -> str:
    return f"{deploy['metadata']['name']}-{_template_hash(deploy)}"


def _template_hash(deploy: dict) -> str:
    digest = hashlib.sha256(repr(deploy["spec"]["template"]).encode()).hexdigest()
    return "".join(c for c in digest if c in "bcdf2456789")[:10].ljust(10, "5")


def _controller_ref(pod: dict) -> dict | None:
    for ref in pod["metadata"].get("ownerReferences") or []:
        if ref.get("controller"):
            return ref
    return None


def _delete_quietly(store: ObjectStore, pod: dict) -> bool:
    """Delete the pod; False when it was gone already."""
    try:
        store.delete(PODS, pod["metadata"]["name"], pod["metadata"]["namespace"])
    except NotFound:
        return False
    return True
