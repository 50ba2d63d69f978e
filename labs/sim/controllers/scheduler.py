"""default-scheduler: binds pending pods to nodes, or says why not in its own words.

Filters run per node in the real plugin order and stop at the node's first failure:
unschedulable, taints (`node(s) had untolerated taint(s)`, the 1.35 wording), nodeSelector
and required affinity (`node(s) didn't match Pod's node affinity/selector`), then
resources (`Insufficient <resource>` for every short one, GPUs held by running pods
counted; a resource the node does not advertise at all counts as 0), then required pod
(anti-)affinity (`node(s) didn't match pod anti-affinity rules`). A pod no node takes
stays Pending with a Warning `FailedScheduling` Event: `0/4 nodes are available: 4
Insufficient nvidia.com/gpu. no new claims to deallocate, preemption: 0/4 nodes are
available: 4 Preemption is not helpful for scheduling.` (the DRA plugin's word, then
preemption's; reasons counted and sorted as strings, as FitError does; a node whose GPU is
only held by another pod says `No preemption victims found for incoming pod`).

Retries follow the real queue: at once (after the backoff) when nodes or bound pods
change, otherwise every `unschedulable_retry`; each retry bumps the Event's count.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from decimal import Decimal

from labs.kube.gpu import NO_CLAIMS_TO_DEALLOCATE
from labs.kube.scheduling import POD_AFFINITY_MISMATCH, pod_affinity_failure
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
        preemption: Counter[str] = Counter()
        feasible = []
        for node in nodes:
            failures = node_failures(pod, node, pods, nodes)
            if failures:
                reasons.update(failures)
                preemption[preemption_verdict(pod, node, failures)] += 1
            else:
                feasible.append(node)
        if not feasible:
            self._failed[pod["metadata"]["uid"]] = (fingerprint, now)
            self._reject(pod, failure_message(len(nodes), reasons, preemption))
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


UNSCHEDULABLE = "node(s) were unschedulable"
UNTOLERATED = "node(s) had untolerated taint(s)"
SELECTOR = "node(s) didn't match Pod's node affinity/selector"
# What DefaultPreemption says of a node: a verdict no eviction can change
# (UnschedulableAndUnresolvable), or one it might, where no pod of lower priority runs to
# evict (every pod of a lab has priority 0 or higher, so none is ever a victim).
NOT_HELPFUL = "Preemption is not helpful for scheduling"
NO_VICTIMS = "No preemption victims found for incoming pod"


def node_failures(
    pod: dict, node: dict, pods: list[dict], nodes: list[dict] | None = None
) -> list[str]:
    """Why `node` cannot take `pod` (empty when it can), in the scheduler's words; `nodes`
    (all of them) place the other pods for pod (anti-)affinity."""
    spec = pod["spec"]
    if (node.get("spec") or {}).get("unschedulable") or not node_is_ready(node):
        return [UNSCHEDULABLE]
    if untolerated_taints(spec.get("tolerations") or [], node):
        return [UNTOLERATED]
    if not selector_matches(spec.get("nodeSelector") or {}, node, spec.get("affinity")):
        return [SELECTOR]
    short = _insufficient(pod, node, pods)
    if short:
        return short
    affinity = pod_affinity_failure(pod, node, pods, nodes or [node])
    return [affinity] if affinity else []


def preemption_verdict(pod: dict, node: dict, failures: list[str]) -> str:
    """NOT_HELPFUL when a filter failed for good: unschedulable, taints, selector, or a request
    larger than the node's whole allocatable (NodeResourcesFit's `Unresolvable`)."""
    if {UNSCHEDULABLE, UNTOLERATED, SELECTOR, POD_AFFINITY_MISMATCH} & set(failures):
        return NOT_HELPFUL
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    too_big = any(
        amount > quantity(allocatable.get(resource, "0"))
        for resource, amount in pod_requests(pod).items()
        if f"Insufficient {resource}" in failures
    )
    return NOT_HELPFUL if too_big else NO_VICTIMS


def failure_message(node_count: int, reasons: Counter[str], preemption: Counter[str]) -> str:
    """The FitError text: counted reasons sorted as strings, then the PostFilter plugins' words:
    DRA's, and the preemption verdicts counted and sorted the same way."""

    def counted(verdicts: Counter[str]) -> str:
        return ", ".join(sorted(f"{count} {reason}" for reason, count in verdicts.items()))

    return (
        f"0/{node_count} nodes are available: {counted(reasons)}. {NO_CLAIMS_TO_DEALLOCATE}, "
        f"preemption: 0/{node_count} nodes are available: {counted(preemption)}."
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
