"""kube-controller-manager's taint-eviction-controller: pods leave nodes with NoExecute taints.

As `pkg/controller/tainteviction` does it (Kubernetes 1.29+): a pod bound to a node with a
NoExecute taint it does not tolerate is deleted at once; one that tolerates every such taint
for a limited time (the smallest `tolerationSeconds`) is deleted when that time is up
(real-world seconds, scaled by the world's speed), and the pending deletion is cancelled if
the taint goes first. Before deleting, the pod gets the `DisruptionTarget` condition
(`DeletionByTaintManager`), and a Normal `TaintManagerEviction` Event says
`Marking for deletion Pod <namespace>/<name>` (its involvedObject names the pod without a
uid, so `kubectl describe pod` does not list it; `kubectl get events` does). A cancelled
deletion says `Cancelling deletion of Pod <namespace>/<name>`. Every phase counts: a
finished pod on the node is deleted too.
"""

from __future__ import annotations

import time

from labs.sim.controllers.base import Controller
from labs.sim.controllers.events import EventRecorder
from labs.sim.controllers.placement import (
    set_pod_condition,
    tolerates_taint,
    untolerated_taints,
)
from labs.sim.store import NODES, PODS, NotFound, ObjectStore
from labs.sim.timings import Timings

CONTROLLER_NAME = "taint-eviction-controller"
NO_EXECUTE = ("NoExecute",)


class TaintEviction(Controller):
    watched = (NODES, PODS)

    def __init__(self, store: ObjectStore, timings: Timings) -> None:
        super().__init__(store, timings)
        self._events = EventRecorder(store, CONTROLLER_NAME)
        self._due: dict[str, float] = {}  # pod uid -> when its tolerated time runs out

    def reconcile(self) -> float | None:
        now = time.monotonic()
        nodes = {n["metadata"]["name"]: n for n in self.store.list(NODES)[0]}
        pending: dict[str, float] = {}
        for pod in self.store.list(PODS)[0]:
            node = nodes.get(pod["spec"].get("nodeName") or "")
            if node is None:
                continue
            tolerations = pod["spec"].get("tolerations") or []
            taints = [t for t in (node.get("spec") or {}).get("taints") or [] if _no_execute(t)]
            uid = pod["metadata"]["uid"]
            if not taints:
                if uid in self._due:
                    self._record(pod, "Cancelling deletion of Pod")
                continue
            if untolerated_taints(tolerations, node, NO_EXECUTE):
                self._evict(pod)
                continue
            limit = _tolerated_seconds(tolerations, taints)
            if limit is None:
                continue
            due = self._due.get(uid, now + limit / self.timings.speed)
            if due <= now:
                self._evict(pod)
            else:
                pending[uid] = due
        self._due = pending
        return min((due - now for due in pending.values()), default=None)

    def _evict(self, pod: dict) -> None:
        meta = pod["metadata"]

        def mark(current: dict) -> None:
            set_pod_condition(
                current,
                "DisruptionTarget",
                "True",
                "DeletionByTaintManager",
                "Taint manager: deleting due to NoExecute taint",
            )

        self._record(pod, "Marking for deletion Pod")
        try:
            self.store.update(PODS, meta["name"], mark, meta["namespace"])
            self.store.delete(PODS, meta["name"], meta["namespace"])
        except NotFound:
            pass

    def _record(self, pod: dict, what: str) -> None:
        meta = pod["metadata"]
        reference = {
            "kind": "Pod",
            "apiVersion": "v1",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
        }
        self._events.record(
            reference, "TaintManagerEviction", f"{what} {meta['namespace']}/{meta['name']}"
        )


def _no_execute(taint: dict) -> bool:
    return taint.get("effect") == "NoExecute"


def _tolerated_seconds(tolerations: list[dict], taints: list[dict]) -> float | None:
    """The smallest tolerationSeconds among the tolerations used for `taints`; None: forever."""
    used = [next(t for t in tolerations if tolerates_taint(t, taint)) for taint in taints]
    limits = [float(t["tolerationSeconds"]) for t in used if t.get("tolerationSeconds") is not None]
    return max(min(limits), 0.0) if limits else None
