"""default-scheduler: binds pending pods to nodes, or says why not in its own words.

Filters run per node in the real plugin order and stop at the node's first failure:
unschedulable, taints (`node(s) had untolerated taint(s)`, the 1.35 wording), nodeSelector
and required affinity (`node(s) didn't match Pod's node affinity/selector`), then
resources (`Insufficient <resource>` for every short one, GPUs held by running pods
counted). A pod no node takes stays Pending with a Warning `FailedScheduling` Event:
`0/4 nodes are available: 4 Insufficient nvidia.com/gpu. preemption: 0/4 nodes are
available: 4 Preemption is not helpful for scheduling.` (reasons counted and sorted).

Retries follow the real queue: at once (after the backoff) when nodes or bound pods
change, otherwise every `unschedulable_retry`; each retry bumps the Event's count.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from decimal import Decimal

from labs.sim.controllers.base import Controller
from labs.sim.controllers.events import EventRecorder
from labs.sim.controllers.placement import (
    node_is_ready,
    pod_is_terminal,
    pod_requests,
    quantity,
    selector_matches,
    set_pod_condition,
    untolerated_taints,
)
from labs.sim.store import NODES, PODS, NotFound, ObjectStore
from labs.sim.timings import Timings

SCHEDULER_NAME = "default-scheduler"
log = logging.getLogger(__name__)


class Scheduler(Controller):
    watched = (PODS, NODES)

    def __init__(self, store: ObjectStore, timings: Timings) -> None:
        super().__init__(store, timings)
        self._events = EventRecorder(store, SCHEDULER_NAME)
        # pod uid -> (cluster fingerprint at the last failed attempt, time of that attempt)
        self._failed: dict[str, tuple[object, float]] = {}

    def reconcile(self) -> float | None:
        now = time.monotonic()
        pods = self.store.list(PODS)[0]
        nodes = self.store.list(NODES)[0]
        waiting = [p for p in pods if _wants_scheduling(p)]
        self._failed = {
            uid: v
            for uid, v in self._failed.items()
            if uid in {p["metadata"]["uid"] for p in waiting}
        }
        next_due: list[float] = []
        for pod in sorted(waiting, key=lambda p: p["metadata"].get("creationTimestamp", "")):
            fingerprint = _fingerprint(nodes, pods)
            due = self._due(pod, fingerprint)
            if due > now:
                next_due.append(due - now)
                continue
            try:
                node = self._place(pod, nodes, pods, fingerprint, now)
            except ValueError as error:  # the API refuses such pods; one slipped in must not
                log.warning(  # stall the queue: skip it, as a plugin error skips one pod
                    "cannot schedule pod %s/%s: %s",
                    pod["metadata"].get("namespace"),
                    pod["metadata"]["name"],
                    error,
                )
                continue
            if node is not None:
                pods = self.store.list(PODS)[0]
        return min(next_due, default=None)

    def _due(self, pod: dict, fingerprint: object) -> float:
        failed = self._failed.get(pod["metadata"]["uid"])
        if failed is None:
            return 0.0
        seen, at = failed
        if seen != fingerprint:
            return at + self.timings.scheduler_backoff
        return at + self.timings.unschedulable_retry

    def _place(
        self, pod: dict, nodes: list[dict], pods: list[dict], fingerprint: object, now: float
    ) -> str | None:
        reasons: Counter[str] = Counter()
        feasible = []
        for node in nodes:
            failures = node_failures(pod, node, pods)
            if failures:
                reasons.update(failures)
            else:
                feasible.append(node)
        if not feasible:
            self._failed[pod["metadata"]["uid"]] = (fingerprint, now)
            self._reject(pod, failure_message(len(nodes), reasons))
            return None
        chosen = min(feasible, key=lambda n: (_load(n, pods), n["metadata"]["name"]))
        name = chosen["metadata"]["name"]
        self._bind(pod, name)
        return name

    def _reject(self, pod: dict, message: str) -> None:
        def mark(current: dict) -> None:
            set_pod_condition(current, "PodScheduled", "False", "Unschedulable", message)

        try:
            updated = self.store.update(
                PODS, pod["metadata"]["name"], mark, pod["metadata"]["namespace"]
            )
        except NotFound:
            return
        self._events.record(updated, "FailedScheduling", message, "Warning")

    def _bind(self, pod: dict, node: str) -> None:
        def bind(current: dict) -> None:
            current["spec"]["nodeName"] = node
            set_pod_condition(current, "PodScheduled", "True")

        try:
            bound = self.store.update(
                PODS, pod["metadata"]["name"], bind, pod["metadata"]["namespace"]
            )
        except NotFound:
            return
        self._failed.pop(pod["metadata"]["uid"], None)
        meta = bound["metadata"]
        self._events.record(
            bound,
            "Scheduled",
            f"Successfully assigned {meta['namespace']}/{meta['name']} to {node}",
        )


def node_failures(pod: dict, node: dict, pods: list[dict]) -> list[str]:
    """Why `node` cannot take `pod` (empty when it can), in the scheduler's words."""
    spec = pod["spec"]
    if (node.get("spec") or {}).get("unschedulable") or not node_is_ready(node):
        return ["node(s) were unschedulable"]
    if untolerated_taints(spec.get("tolerations") or [], node):
        return ["node(s) had untolerated taint(s)"]
    if not selector_matches(spec.get("nodeSelector") or {}, node, spec.get("affinity")):
        return ["node(s) didn't match Pod's node affinity/selector"]
    return _insufficient(pod, node, pods)


def failure_message(node_count: int, reasons: Counter[str]) -> str:
    """The FitError text: counted reasons sorted as strings, then the preemption verdict."""
    counted = sorted(f"{count} {reason}" for reason, count in reasons.items())
    return (
        f"0/{node_count} nodes are available: {', '.join(counted)}. "
        f"preemption: 0/{node_count} nodes are available: "
        f"{node_count} Preemption is not helpful for scheduling."
    )


def _insufficient(pod: dict, node: dict, pods: list[dict]) -> list[str]:
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    name = node["metadata"]["name"]
    holders = [p for p in pods if p["spec"].get("nodeName") == name and not pod_is_terminal(p)]
    used: dict[str, Decimal] = {}
    for holder in holders:
        try:
            held = pod_requests(holder)
        except ValueError:  # a malformed running pod holds nothing we can count
            continue
        for resource, amount in held.items():
            used[resource] = used.get(resource, Decimal(0)) + amount
    reasons = []
    if len(holders) + 1 > quantity(allocatable.get("pods", "110")):
        reasons.append("Too many pods")
    for resource, amount in sorted(pod_requests(pod).items()):
        if amount <= 0:
            continue
        free = quantity(allocatable.get(resource, "0")) - used.get(resource, Decimal(0))
        if amount > free:
            reasons.append(f"Insufficient {resource}")
    return reasons


def _load(node: dict, pods: list[dict]) -> int:
    return sum(1 for p in pods if p["spec"].get("nodeName") == node["metadata"]["name"])


def _wants_scheduling(pod: dict) -> bool:
    spec = pod["spec"]
    return (
        not spec.get("nodeName")
        and spec.get("schedulerName", SCHEDULER_NAME) == SCHEDULER_NAME
        and pod.get("status", {}).get("phase", "Pending") == "Pending"
    )


def _fingerprint(nodes: list[dict], pods: list[dict]) -> object:
    """What a retry depends on: nodes' scheduling facts and which pods hold what where."""
    node_facts = tuple(
        (
            n["metadata"]["name"],
            repr(sorted((n["metadata"].get("labels") or {}).items())),
            repr((n.get("spec") or {}).get("taints")),
            bool((n.get("spec") or {}).get("unschedulable")),
            repr(sorted(((n.get("status") or {}).get("allocatable") or {}).items())),
            node_is_ready(n),
        )
        for n in nodes
    )
    placed = tuple(
        sorted(
            p["metadata"]["uid"]
            for p in pods
            if p["spec"].get("nodeName") and not pod_is_terminal(p)
        )
    )
    return node_facts, placed
